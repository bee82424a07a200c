"""The shipped alerting configuration, checked by the real tools without a stack: amtool checks the Alertmanager
configuration (and it with the example receivers merged in) and tests its routes; the rules' annotations link to
runbook sections that exist and to the dashboard with its run variable; the stack renders Alertmanager's and
Prometheus's files for its ports, webhook and links."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from pathlib import Path
from typing import Any, cast

import otel_rl_contract as contract
import pytest
import yaml
from otel_rl_ops.stack import layout, versions
from otel_rl_ops.stack.config import StackConfig, StackPorts, render_alertmanager_config, render_prometheus_config

from tests.dashboards.conftest import RULE_FILES, rules

ROOT = Path(__file__).parents[2]
ALERTMANAGER_CONFIG = ROOT / "alertmanager" / "alertmanager.yml"
EXAMPLE_RECEIVERS = ROOT / "alertmanager" / "receivers.example.yml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
DASHBOARD = ROOT / "grafana" / "dashboards" / "rl-run.json"
LIFECYCLE = {
    "RLRanksMissing",
    "RLRunEndedUncleanly",
    "RLTelemetryAbsent",
    "OtelRLHistogramPointsDropped",
    "OtelRLUnencodableTelemetry",
}
"""The alerts about a run's life and its telemetry, not about one of its signals."""


def _amtool(amtool: Path, *args: str | Path) -> str:
    result = subprocess.run([amtool, *args], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_shipped_config_passes_amtool_check_config(amtool: Path) -> None:
    """amtool check-config accepts alertmanager/alertmanager.yml: its route tree, two inhibit rules, the receivers
    "page" and "notify" and the notification templates."""
    out = _amtool(amtool, "check-config", ALERTMANAGER_CONFIG)
    assert "SUCCESS" in out and " - 2 inhibit rules" in out and " - 2 receivers" in out and " - 1 templates" in out


def test_example_receivers_deliver_to_webhook_slack_and_pagerduty(amtool: Path, tmp_path: Path) -> None:
    """The example receivers replace the shipped ones by name: the merged config passes amtool check-config; "page"
    pages through PagerDuty and "notify" posts to Slack, both also to a webhook, secrets read from files."""
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text(encoding="utf-8"))
    example = yaml.safe_load(EXAMPLE_RECEIVERS.read_text(encoding="utf-8"))["receivers"]
    assert [r["name"] for r in example] == [r["name"] for r in config["receivers"]] == ["page", "notify"]
    by_name = {r["name"]: r for r in example}
    assert set(by_name["page"]) == {"name", "pagerduty_configs", "webhook_configs"}
    assert set(by_name["notify"]) == {"name", "slack_configs", "webhook_configs"}
    text = EXAMPLE_RECEIVERS.read_text(encoding="utf-8")
    assert not re.search(r"^\s*(api_url|routing_key|url|service_key):", text, re.M), "secrets belong in *_file"
    merged = {**config, "receivers": example, "templates": [str(ROOT / "alertmanager" / "templates" / "*.tmpl")]}
    path = tmp_path / "merged.yml"
    path.write_text(yaml.safe_dump(merged), encoding="utf-8")
    assert "SUCCESS" in _amtool(amtool, "check-config", path)


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (["severity=critical", "rl_run_id=r1", "alertname=OtelRLInexactMerge"], "page"),
        (["severity=warning", "rl_run_id=r1", "alertname=RLStalenessHigh"], "notify"),
        (["alertname=Unlabelled"], "notify"),
    ],
)
def test_routes_by_severity(amtool: Path, labels: list[str], receiver: str) -> None:
    """amtool config routes test: critical alerts go to "page", warning ones and any others to "notify"."""
    out = _amtool(amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER_CONFIG}", *labels)
    assert out.strip() == receiver


def test_grouped_by_run_and_inhibitions_page_once() -> None:
    """One notification per run (group_by rl_run_id on every route); RLRunEndedUncleanly inhibits RLTelemetryAbsent
    of the same run, job and role; RLRanksMissing inhibits every per-signal alert of the run, which are exactly the
    alerts of the rules that are not about the run's lifecycle or its telemetry."""
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text(encoding="utf-8"))
    assert config["route"]["group_by"] == ["rl_run_id"]
    assert all("group_by" not in route for route in config["route"]["routes"])
    ended, missing = config["inhibit_rules"]
    assert ended == {
        "source_matchers": ['alertname="RLRunEndedUncleanly"'],
        "target_matchers": ['alertname="RLTelemetryAbsent"'],
        "equal": ["rl_run_id", "job", "rl_role"],
    }
    assert missing["source_matchers"] == ['alertname="RLRanksMissing"'] and missing["equal"] == ["rl_run_id"]
    (target,) = missing["target_matchers"]
    names = re.fullmatch(r'alertname=~"([\w|]+)"', target)
    assert names is not None, target
    targets = set(names.group(1).split("|"))
    alerts = {rule["alert"] for rule in rules() if "alert" in rule}
    assert alerts >= LIFECYCLE
    assert targets == alerts - LIFECYCLE, (
        f"alertmanager/alertmanager.yml: RLRanksMissing must inhibit every per-signal alert of otel_rl.yml (add the "
        f"new ones to its target_matchers, or to LIFECYCLE here): missing {sorted(alerts - LIFECYCLE - targets)}, "
        f"unknown {sorted(targets - alerts)}"
    )


def test_notification_templates_render(amtool: Path) -> None:
    """The title and text of alertmanager/templates/otel_rl.tmpl render (amtool template render, its sample data)."""
    out = _amtool(
        amtool,
        "template",
        "render",
        f"--template.glob={ROOT / 'alertmanager' / 'templates' / '*.tmpl'}",
        '--template.text={{ template "otel_rl.title" . }}|{{ template "otel_rl.text" . }}',
    )
    title, text = out.split("|", 1)
    assert title.strip() == "[ALERTSTATUS] 2 alerts" and text.count("Runbook: ") == 2 and "Dashboard: " in text


def _runbook_sections() -> dict[str, str]:
    """docs/runbooks.md: heading anchor (GitHub's: the heading in lower case) -> its section's text."""
    parts = re.split(r"^## (\w+)\n", RUNBOOKS.read_text(encoding="utf-8"), flags=re.M)
    return {name.lower(): body for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def test_every_alert_links_its_runbook_and_the_dashboard_of_its_run() -> None:
    """Every alert's runbook_url is the runbook URL (external label) and its own section of docs/runbooks.md, which
    says what it means, what to check and what to do; its dashboard_url opens the RL run dashboard (uid and variable
    from the dashboard JSON) below the Grafana URL (external label) with the run URL-encoded; its description states
    the run's threshold when the alert compares with one."""
    sections = _runbook_sections()
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    variable = dashboard["templating"]["list"][0]["name"]  # the run's (then its service's, which follows it)
    board = "{{ $externalLabels.otel_rl_grafana_url }}/d/" + dashboard["uid"] + "/rl-run"
    alerts = [
        rule
        for path in RULE_FILES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]
    for rule in alerts:
        name, annotations = rule["alert"], rule["annotations"]
        anchor = name.lower()
        assert annotations["runbook_url"] == "{{ $externalLabels.otel_rl_runbook_url }}#" + anchor, name
        assert anchor in sections, f"docs/runbooks.md has no section '## {name}'"
        assert all(part in sections[anchor] for part in ("**Means.**", "**Check.**", "**Do.**")), name
        of_a_run = "$labels.rl_run_id" in annotations["summary"]  # the collector's own alerts name no run
        run = f"?var-{variable}={{{{ $labels.rl_run_id | urlquery }}}}" if of_a_run else ""
        assert annotations["dashboard_url"] == board + run, name
        for threshold in re.findall(rf'{contract.rules.ALERT_THRESHOLD.name}\{{threshold="(\w+)"\}}', rule["expr"]):
            assert (
                f'printf "{contract.rules.ALERT_THRESHOLD.name}{{threshold=\\"{threshold}\\",rl_run_id=%q}}"'
                in annotations["description"]
            )
    assert set(sections) == {rule["alert"].lower() for rule in alerts}, "a runbook of no alert, or an alert without"


def test_rendered_alertmanager_config_adds_the_webhook_and_passes_amtool(amtool: Path, tmp_path: Path) -> None:
    """The stack's rendering keeps the shipped routes and inhibitions, gives every receiver the stack's webhook (with
    resolved notifications) and absolute template paths; amtool accepts it. Without a webhook the receivers stay as
    shipped."""
    config = StackConfig(ports=StackPorts.free(), state_dir=tmp_path, alert_webhook_url="http://127.0.0.1:9/hook")
    rendered = tmp_path / "alertmanager.yml"
    rendered.write_text(render_alertmanager_config(ALERTMANAGER_CONFIG, config), encoding="utf-8")
    assert "SUCCESS" in _amtool(amtool, "check-config", rendered)
    data, shipped = yaml.safe_load(rendered.read_text()), yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    assert data["route"] == shipped["route"] and data["inhibit_rules"] == shipped["inhibit_rules"]
    assert all(
        r["webhook_configs"] == [{"url": "http://127.0.0.1:9/hook", "send_resolved": True}] for r in data["receivers"]
    )
    assert data["templates"] == [str(ROOT / "alertmanager" / "templates" / "*.tmpl")]
    plain = yaml.safe_load(render_alertmanager_config(ALERTMANAGER_CONFIG, StackConfig(state_dir=tmp_path)))
    assert plain["receivers"] == shipped["receivers"]


def test_rendered_prometheus_config_sends_to_the_stack_alertmanager_with_the_links() -> None:
    """The stack's Prometheus sends alerts to its Alertmanager, and its external labels carry the Grafana and
    runbook URLs (by default the checkout's docs/runbooks.md as a file URL)."""
    ports = StackPorts.free()
    data = yaml.safe_load(render_prometheus_config(layout.prometheus_config(ROOT), StackConfig(ports=ports)))
    assert data["alerting"]["alertmanagers"] == [{"static_configs": [{"targets": [f"127.0.0.1:{ports.alertmanager}"]}]}]
    assert data["global"]["external_labels"] == {
        "otel_rl_grafana_url": "http://127.0.0.1:3000",
        "otel_rl_runbook_url": RUNBOOKS.resolve().as_uri(),
    }
    custom = StackConfig(grafana_url="https://grafana.example/", runbook_url="https://docs.example/runbooks.md")
    assert custom.external_labels() == {
        "otel_rl_grafana_url": "https://grafana.example",
        "otel_rl_runbook_url": "https://docs.example/runbooks.md",
    }


@pytest.mark.parametrize(
    ("setting", "value"),
    [("alert_webhook_url", "127.0.0.1:9/hook"), ("grafana_url", None), ("runbook_url", "docs/runbooks.md")],
)
def test_alert_urls_must_be_urls(setting: str, value: object) -> None:
    """A webhook, Grafana or runbook setting that is not an http(s) URL (file: too for the runbook) is a ValueError
    naming it."""
    with pytest.raises(ValueError, match=rf'"{setting}" must be a URL starting with one of .*, got {value!r}'):
        StackConfig(**{setting: cast(Any, value)})


def test_compose_runs_the_alertmanager_of_the_secure_stack() -> None:
    """docker-compose.yml runs Alertmanager at the pinned release with the shipped config and templates, behind its
    own web config (TLS, basic auth: the secure profile's file), without a cluster listener, published on the host's
    loopback only; its Prometheus sends there over TLS with that password and expands the link labels from the
    environment."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    service = compose["services"]["alertmanager"]
    assert service["image"] == f"prom/alertmanager:{versions.ALERTMANAGER_VERSION}"
    assert "./alertmanager:/etc/alertmanager:ro" in service["volumes"]
    assert {
        "--config.file=/etc/alertmanager/alertmanager.yml",
        "--cluster.listen-address=",
        "--web.config.file=/run/secrets/alertmanager-web.yml",
    } <= set(service["command"])
    assert {"alertmanager-web.yml", "server.pem", "server.key"} <= set(service["secrets"])
    assert compose["secrets"]["alertmanager-web.yml"] == {"file": "./secrets/alertmanager-web.yml"}
    assert service["ports"] and all(port.startswith("127.0.0.1:") for port in service["ports"])
    prometheus = yaml.safe_load((ROOT / "prometheus" / "prometheus.compose.yml").read_text(encoding="utf-8"))
    (alertmanager,) = prometheus["alerting"]["alertmanagers"]
    assert alertmanager["static_configs"] == [{"targets": ["alertmanager:9093"]}] and alertmanager["scheme"] == "https"
    assert alertmanager["basic_auth"]["password_file"] == "/run/secrets/alertmanager.password"
    assert "alertmanager.password" in compose["services"]["prometheus"]["secrets"]
    from otel_rl_ops.stack.cli import COMPOSE_HOSTS

    assert "alertmanager" in COMPOSE_HOSTS  # the server certificate of `otel-rl stack secrets` names the service
    assert prometheus["global"]["external_labels"] == {
        "otel_rl_grafana_url": "${OTEL_RL_GRAFANA_URL}",
        "otel_rl_runbook_url": "${OTEL_RL_RUNBOOK_URL}",
    }
    environment = compose["services"]["prometheus"]["environment"]
    assert set(environment) >= {"OTEL_RL_GRAFANA_URL", "OTEL_RL_RUNBOOK_URL"}


def _binaries() -> Any:
    """Every binary of the stack at ``/bin/<field name>`` (none is run)."""
    from otel_rl_ops.stack.install import Binaries

    return Binaries(**{item.name: Path(f"/bin/{item.name}") for item in dataclasses.fields(Binaries)})


def test_alertmanager_listens_on_the_stack_host_only(tmp_path: Path) -> None:
    """The stack's Alertmanager: the rendered config, data under the state directory, the web API on the stack's
    host and port, and no cluster (gossip) listener, which would otherwise open 0.0.0.0:9094."""
    from otel_rl_ops.stack.components import SPECS

    ports = StackPorts.free()
    config = StackConfig(ports=ports, state_dir=tmp_path)
    command = SPECS["alertmanager"].command(config, _binaries(), tmp_path)
    assert command.argv == (
        "/bin/alertmanager",
        f"--config.file={tmp_path / 'alertmanager.yml'}",
        f"--storage.path={tmp_path / 'data' / 'alertmanager'}",
        f"--web.listen-address=127.0.0.1:{ports.alertmanager}",
        f"--web.external-url=http://127.0.0.1:{ports.alertmanager}",
        "--cluster.listen-address=",
    )
    inputs = tuple(path.resolve() for path in command.inputs)
    assert inputs == (tmp_path / "alertmanager.yml", ROOT / "alertmanager" / "templates" / "otel_rl.tmpl")


def test_thanos_ruler_evaluates_the_stack_rules_against_the_querier(tmp_path: Path) -> None:
    """The cluster profile's ruler evaluates the stack's rule files as often as Prometheus would (the Prometheus
    template's evaluation_interval), queries the querier, sends to the stack's Alertmanager, labels its alerts with
    the links (Go-quoted values, as --label parses them), and listens on the stack's host."""
    from otel_rl_ops.stack.components import SPECS

    ports = StackPorts.free()
    config = StackConfig(ports=ports, state_dir=tmp_path, tsdb_cluster=True, grafana_url="https://g.example")
    command = SPECS["thanos-rule"].command(config, _binaries(), tmp_path)
    argv = command.argv
    assert argv[:2] == ("/bin/thanos", "rule")
    interval = yaml.safe_load(layout.prometheus_config(ROOT).read_text(encoding="utf-8"))["global"][
        "evaluation_interval"
    ]
    rule_files = tuple(sorted((ROOT / "prometheus" / "rules").glob("*.yml")))
    assert command.inputs == rule_files and [a for a in argv if a.startswith("--rule-file=")] == [
        f"--rule-file={path}" for path in rule_files
    ]
    assert {
        f"--eval-interval={interval}",
        f"--query=http://127.0.0.1:{ports.thanos_query}",
        f"--alertmanagers.url=http://127.0.0.1:{ports.alertmanager}",
        f"--http-address=127.0.0.1:{ports.thanos_rule_http}",
        f"--grpc-address=127.0.0.1:{ports.thanos_rule_grpc}",
        f"--data-dir={tmp_path / 'data' / 'thanos-rule'}",
        '--label=otel_rl_grafana_url="https://g.example"',
        f'--label=otel_rl_runbook_url="{RUNBOOKS.as_uri()}"',
    } <= set(argv)
    with pytest.raises(ValueError, match=r'"binaries.thanos" must be set to run thanos-rule .*got None'):
        SPECS["thanos-rule"].command(config, dataclasses.replace(_binaries(), thanos=None), tmp_path)
