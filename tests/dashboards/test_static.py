"""Dashboards, alert rules, provisioning and docker-compose checked without a running stack."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.dashboards.conftest import DASHBOARDS, ROOT, RULE_FILES, RULE_TESTS, dashboard_targets, rules

PROVISIONING = ROOT / "grafana" / "provisioning"
COMPOSE = ROOT / "docker-compose.yml"


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("otel_rl_grafana_generate", ROOT / "grafana" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def promtool() -> Path:
    from otel_rl.stack import install
    from otel_rl.stack.env import otel_rl_home

    return install.ensure_prometheus(home=otel_rl_home())[1]


def test_committed_dashboards_are_what_the_code_generates() -> None:
    """grafana/dashboards/*.json equal the output of grafana/generate.py (edit the code, not the JSON)."""
    pytest.importorskip("grafana_foundation_sdk")
    generate = _generator()
    assert sorted(generate.DASHBOARDS) == [path.name for path in DASHBOARDS]
    for path in DASHBOARDS:
        assert path.read_text(encoding="utf-8") == generate.render(generate.DASHBOARDS[path.name]), (
            f"{path.name} is stale: run .venv/bin/python grafana/generate.py"
        )


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_json_is_valid_for_the_grafana_schema(path: Path) -> None:
    """The Foundation SDK's Dashboard model reads every field back unchanged (no unknown or misplaced keys)."""
    sdk = pytest.importorskip("grafana_foundation_sdk.models.dashboard")
    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    data = json.loads(path.read_text(encoding="utf-8"))
    model = sdk.Dashboard.from_json(data)
    assert json.loads(json.dumps(model, cls=JSONEncoder)) == data


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_layout_ids_and_queries_are_well_formed(path: Path) -> None:
    """Unique uid/panel ids, panels inside the 24-column grid without overlap, one refId per query, units set."""
    data = json.loads(path.read_text(encoding="utf-8"))
    assert re.fullmatch(r"[a-z0-9-]{1,40}", data["uid"])
    ids = [panel["id"] for panel in data["panels"]]
    assert len(ids) == len(set(ids)) and all(ids)
    cells: set[tuple[int, int]] = set()
    for panel in data["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        area = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not area & cells, f"panel {panel['title']!r} overlaps another"
        cells |= area
        if panel["type"] == "row":
            continue
        assert panel["title"] and panel.get("description"), panel
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
    assert [v["name"] for v in data["templating"]["list"]] == ["run"]
    # A counter of every run with rewards, whatever its histogram kind (rl_reward_count is classic only).
    assert data["templating"]["list"][0]["query"] == "label_values(rl_reward_positive_total, rl_run_id)"


def test_every_promql_selector_names_the_run_and_the_aggregated_side() -> None:
    """Every Prometheus selector in the dashboards carries rl_run_id="$run" and rl_rank="" (docs/pipeline.md)."""
    for _, panel, target in dashboard_targets():
        if target["datasource"]["type"] != "prometheus":
            assert '"$run"' in target["expr"], panel["title"]
            continue
        selectors = re.findall(r"[a-z_]+\{([^}]*)\}", target["expr"])
        assert selectors, panel["title"]
        for selector in selectors:
            assert 'rl_run_id="$run"' in selector and 'rl_rank=""' in selector, (panel["title"], selector)


# Synthetic runs for every panel query: "native" (exponential histograms, schema 5) and "classic"
# (histogram="explicit", le buckets); their counters and gauges are the same. Per 15 s step: 10 rewards of exactly
# 1 (5 from dataset "math", 5 from "code"), 10 tokens exactly 3 versions behind (math in flight, code in the
# queue), 8 GRPO groups of which 2 have zero variance (mean 0.25), one loss of -0.5, 4 advantages of -0.5, 10
# responses of 128 tokens, 100 tokens of entropy 0.5, of importance ratio 2 and of mismatch KL 0.25 (k1) and
# 0.125 (k3). Every histogram's values are equal, so each quantile is that value exactly once clamped to
# [min, max]; unclamped, the native estimates lie inside the bucket (0.989 for the p50 of rewards of 1) and the
# classic ones wherever linear interpolation puts them (0.75).
_SYNTHETIC_LABELS = 'job="trainer",rl_role="trainer",rl_world_size="2",rl_rank=""'
_SYNTHETIC = [
    # metric, attribute, values per step, native buckets of a step (schema 5), classic cumulative buckets,
    # positive, negative and squares sums of a step, min, max
    ("rl_reward", 'rl_reward_fn="total",rl_dataset="math"', 5, "buckets:[5]", {"0.5": 0, "1": 5, "+Inf": 5}, 5, 0, 5, 1, 1),
    ("rl_reward", 'rl_reward_fn="total",rl_dataset="code"', 5, "buckets:[5]", {"0.5": 0, "1": 5, "+Inf": 5}, 5, 0, 5, 1, 1),
    ("rl_staleness", 'rl_dataset="math",rl_staleness_phase="in_flight"', 5, "offset:51 buckets:[5]", {"1": 0, "8": 5, "+Inf": 5}, 15, 0, 45, 3, 3),
    ("rl_staleness", 'rl_dataset="code",rl_staleness_phase="in_queue"', 5, "offset:51 buckets:[5]", {"1": 0, "8": 5, "+Inf": 5}, 15, 0, 45, 3, 3),
    ("rl_metric", 'rl_metric_key="grpo.zero_variance_groups"', 8, "z_bucket:6 buckets:[2]", {"0": 6, "1": 8, "+Inf": 8}, 2, 0, 2, 0, 1),
    ("rl_metric", 'rl_metric_key="loss.policy"', 1, "n_offset:-32 n_buckets:[1]", {"-1": 0, "0": 1, "+Inf": 1}, 0, 0.5, 0.25, -0.5, -0.5),
    ("rl_advantage", "", 4, "n_offset:-32 n_buckets:[4]", {"-1": 0, "0": 4, "+Inf": 4}, 0, 2, 1, -0.5, -0.5),
    ("rl_response_length", "", 10, "offset:224 buckets:[10]", {"100": 0, "200": 10, "+Inf": 10}, 1280, 0, 163840, 128, 128),
    ("rl_entropy", "", 100, "offset:-32 buckets:[100]", {"0.25": 0, "1": 100, "+Inf": 100}, 50, 0, 25, 0.5, 0.5),
    ("rl_importance_ratio", "", 100, "offset:32 buckets:[100]", {"1": 0, "4": 100, "+Inf": 100}, 200, 0, 400, 2, 2),
    ("rl_mismatch_kl", 'rl_kl_estimator="k1"', 100, "offset:-64 buckets:[100]", {"0.1": 0, "1": 100, "+Inf": 100}, 25, 0, 6.25, 0.25, 0.25),
    ("rl_mismatch_kl", 'rl_kl_estimator="k3"', 100, "offset:-96 buckets:[100]", {"0.1": 0, "1": 100, "+Inf": 100}, 12.5, 0, 1.5625, 0.125, 0.125),
]
_SYNTHETIC_OTHER = [
    # series (labels besides the run's), values: the same on both runs
    ('rl_groups_total{rl_group_outcome="none"}', "0+1x40"),
    ('rl_groups_total{rl_group_outcome="some"}', "0+2x40"),
    ('rl_groups_total{rl_group_outcome="all"}', "0+1x40"),
    ("rl_groups_zero_variance_total", "0+2x40"),
    ('rl_advantage_sign_total{rl_sign="positive"}', "0+3x40"),
    ('rl_advantage_sign_total{rl_sign="negative"}', "0+4x40"),
    ('rl_advantage_sign_total{rl_sign="zero"}', "0+1x40"),
    ('rl_staleness_unversioned_total{rl_dataset="math"}', "0+15x40"),
    ('rl_staleness_dropped_total{rl_dataset="code"}', "0+2x40"),
    ("rl_run_start_time_seconds", "-60x40"),
    ("rl_run_finished", "0x40"),
    ("rl_ranks_up", "2x40"),
    ("rl_ranks_expected", "2x40"),
    ('rl_phase{rl_phase_name="generate"}', "1x40"),
    ('rl_phase{rl_phase_name="train"}', "1x40"),
    ("rl_step", "0+15x40"),
    ("rl_policy_version", "0+1x40"),
    ('otel_rl_values_rejected_total{otel_rl_metric="rl.reward",otel_rl_reason="nonfinite"}', "0+3x40"),
    ("otel_rl_samples_exported_total", "0+30x40"),
    ('otel_rl_samples_dropped_total{otel_rl_reason="queue_full"}', "0+15x40"),
    ('otel_rl_export_failures_total{otel_rl_signal="metrics"}', "0+1x40"),
]


def _synthetic_series(run: str) -> list[dict[str, str]]:
    series = []
    for metric, attribute, count, native, classic, positive, negative, squares, low, high in _SYNTHETIC:
        labels = ",".join(part for part in (_SYNTHETIC_LABELS, f'rl_run_id="{run}"', attribute) if part)
        if run == "native":
            step = f"{{{{schema:5 count:{count} sum:{positive - negative} {native}}}}}"
            series.append({"series": f"{metric}{{{labels}}}", "values": f"{{{{schema:5 count:0 sum:0}}}}+{step}x40"})
        else:
            series += [{"series": f'{metric}_bucket{{{labels},le="{le}"}}', "values": f"0+{n}x40"} for le, n in classic.items()]
            series.append({"series": f"{metric}_count{{{labels}}}", "values": f"0+{count}x40"})
        series += [
            {"series": f"{metric}_positive_total{{{labels}}}", "values": f"0+{positive}x40"},
            {"series": f"{metric}_negative_total{{{labels}}}", "values": f"0+{negative}x40"},
            {"series": f"{metric}_squares_total{{{labels}}}", "values": f"0+{squares}x40"},
            {"series": f"{metric}_max{{{labels}}}", "values": f"{high}x40"},
            {"series": f"{metric}_min{{{labels}}}", "values": f"{low}x40"},
        ]
    for selector, values in _SYNTHETIC_OTHER:
        name, _, attribute = selector.partition("{")
        labels = ",".join(part for part in (_SYNTHETIC_LABELS, f'rl_run_id="{run}"', attribute.rstrip("}")) if part)
        series.append({"series": f"{name}{{{labels}}}", "values": values})
    return series


_EXPECTED: dict[tuple[str, str], float | dict[str, float]] = {
    # (panel title, refId) -> value of the query on either run at 5 min with a 1 m $__rate_interval: one series
    # without labels, or {labels: value}
    ("Ranks reporting vs expected", "A"): {'{rl_role="trainer"}': 2},
    ("Ranks reporting vs expected", "B"): {'{rl_role="trainer"}': 2},
    ("Ranks per phase", "A"): {'{rl_phase_name="generate"}': 1, '{rl_phase_name="train"}': 1},
    ("Steps per minute", "A"): 60.0,
    ("Run state", "A"): 0.0,
    ("Run duration", "A"): 360.0,
    ("Time since the step changed", "A"): 0.0,
    ("Reward (total): mean and percentiles", "A"): 1.0,
    ("Reward (total): mean and percentiles", "B"): 1.0,
    ("Reward (total): mean and percentiles", "C"): 1.0,
    ("Reward (total): mean and percentiles", "D"): 1.0,
    ("Mean reward by reward function", "A"): {'{rl_reward_fn="total"}': 1},
    ("Zero-variance groups (fraction)", "A"): 0.25,
    ("Other recorded metrics (mean by key)", "A"): {'{rl_metric_key="loss.policy"}': -0.5},
    ("Advantage: mean and percentiles", "A"): -0.5,
    ("Advantage: mean and percentiles", "B"): -0.5,
    ("Advantage: mean and percentiles", "C"): -0.5,
    ("Advantage: mean and percentiles", "D"): -0.5,
    ("Response length: mean and percentiles", "A"): 128.0,
    ("Response length: mean and percentiles", "B"): 128.0,
    ("Response length: mean and percentiles", "C"): 128.0,
    ("Response length: mean and percentiles", "D"): 128.0,
    ("Entropy per token: mean and percentiles", "A"): 0.5,
    ("Entropy per token: mean and percentiles", "B"): 0.5,
    ("Entropy per token: mean and percentiles", "C"): 0.5,
    ("Entropy per token: mean and percentiles", "D"): 0.5,
    ("Importance ratio π_train / π_inference (per token)", "A"): 2.0,
    ("Importance ratio π_train / π_inference (per token)", "B"): 2.0,
    ("Importance ratio π_train / π_inference (per token)", "C"): 2.0,
    ("Mismatch KL(π_inference ‖ π_train): mean per estimator", "A"): {'{rl_kl_estimator="k1"}': 0.25, '{rl_kl_estimator="k3"}': 0.125},
    ("Effective sample size fraction", "A"): 1.0,
    ("Prompt groups: outcome and zero variance", "A"): {
        '{rl_group_outcome="none"}': 0.25, '{rl_group_outcome="some"}': 0.5, '{rl_group_outcome="all"}': 0.25},
    ("Prompt groups: outcome and zero variance", "B"): 0.5,
    ("Advantage sign shares", "A"): {'{rl_sign="positive"}': 0.375, '{rl_sign="negative"}': 0.5, '{rl_sign="zero"}': 0.125},
    ("Staleness (policy versions behind, per token)", "A"): 3.0,
    ("Staleness (policy versions behind, per token)", "B"): 3.0,
    ("Staleness (policy versions behind, per token)", "C"): 3.0,
    ("Policy version and step", "A"): 20.0,
    ("Policy version and step", "B"): 300.0,
    ("Mean reward by dataset", "A"): {'{rl_dataset="math"}': 1, '{rl_dataset="code"}': 1},
    ("Staleness by dataset: p50 and p99", "A"): {'{rl_dataset="math"}': 3, '{rl_dataset="code"}': 3},
    ("Staleness by dataset: p50 and p99", "B"): {'{rl_dataset="math"}': 3, '{rl_dataset="code"}': 3},
    ("Staleness by phase: p50 and p99", "A"): {'{rl_staleness_phase="in_flight"}': 3, '{rl_staleness_phase="in_queue"}': 3},
    ("Staleness by phase: p50 and p99", "B"): {'{rl_staleness_phase="in_flight"}': 3, '{rl_staleness_phase="in_queue"}': 3},
    ("Unversioned tokens (per second)", "A"): {'{rl_dataset="math"}': 1},
    ("Samples dropped as too stale", "A"): {'{rl_dataset="code"}': 8},
    ("Rejected values (bad input)", "A"): {'{otel_rl_metric="rl.reward",otel_rl_reason="nonfinite"}': 12},
    ("Samples exported and dropped (per second)", "A"): 2.0,
    ("Samples exported and dropped (per second)", "B"): {'{otel_rl_reason="queue_full"}': 1},
    ("Export failures", "A"): {'{otel_rl_signal="metrics"}': 4},
    ("Time since last data", "A"): 0.0,
}
_EXPECTED_HEATMAPS = {
    # (panel title, refId) -> (native histogram of one 1 m window, classic {le: count})
    ("Reward (total) distribution", "A"): (
        "{{schema:5 count:40 sum:40 counter_reset_hint:gauge buckets:[40]}}", {"0.5": 0, "1": 40, "+Inf": 40}),
    ("Staleness distribution", "A"): (
        "{{schema:5 count:40 sum:120 counter_reset_hint:gauge offset:51 buckets:[40]}}", {"1": 0, "8": 40, "+Inf": 40}),
}


def test_every_panel_query_gives_the_exact_value_on_a_native_and_a_classic_run(promtool: Path, tmp_path: Path) -> None:
    """Every Prometheus panel query runs in promtool and gives the exact value on a native-histogram run and on a
    classic one (quantiles clamped to the exact extremes, ratios from the counters, heatmaps per bucket)."""
    targets = {(panel["title"], target["refId"]): target["expr"] for _, panel, target in dashboard_targets()
               if target["datasource"]["type"] == "prometheus"}  # fmt: skip
    assert set(targets) == set(_EXPECTED) | set(_EXPECTED_HEATMAPS), "give every panel query an expectation"
    cases = []
    for run in ("native", "classic"):
        for key, expr in targets.items():
            query = expr.replace("$run", run).replace("$__rate_interval", "1m")
            if key in _EXPECTED_HEATMAPS:
                native, classic = _EXPECTED_HEATMAPS[key]
                expected = ([{"labels": "{}", "histogram": native}] if run == "native"
                            else [{"labels": f'{{le="{le}"}}', "value": v} for le, v in classic.items()])  # fmt: skip
            else:
                value = _EXPECTED[key]
                samples = value if isinstance(value, dict) else {"{}": value}
                expected = [{"labels": labels, "value": v} for labels, v in samples.items()]
            cases.append({"expr": query, "eval_time": "5m", "exp_samples": expected})
    series = _synthetic_series("native") + _synthetic_series("classic")
    # fuzzy_compare: equal within one ulp (a rate divides the increase by the extrapolated window: 0.9999999999999999)
    test = {"evaluation_interval": "15s", "fuzzy_compare": True,
            "tests": [{"interval": "15s", "input_series": series, "promql_expr_test": cases}]}  # fmt: skip
    path = tmp_path / "dashboard_queries.yml"
    path.write_text(yaml.safe_dump(test, width=100_000, allow_unicode=True), encoding="utf-8")
    result = subprocess.run([promtool, "test", "rules", path.name], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return data


def _provisioned_datasources() -> list[dict[str, Any]]:
    found = []
    for path in sorted((PROVISIONING / "datasources").glob("*.yml")):
        found.extend(yaml.safe_load(path.read_text(encoding="utf-8"))["datasources"])
    return found


def test_dashboards_use_only_provisioned_datasource_uids() -> None:
    """Every datasource uid (and type) a dashboard panel or query uses is provisioned under grafana/provisioning."""
    provisioned = {ds["uid"]: ds["type"] for ds in _provisioned_datasources()}
    assert provisioned == {"otel-rl-prometheus": "prometheus", "otel-rl-victorialogs": "victoriametrics-logs-datasource"}
    used = set()
    for path in DASHBOARDS:
        data = json.loads(path.read_text(encoding="utf-8"))
        used |= {(m.group(1), m.group(2)) for m in re.finditer(
            r'"datasource": \{\s*"type": "([^"]+)",\s*"uid": "([^"]+)"', json.dumps(data, indent=2, sort_keys=True))}  # fmt: skip
    assert used and all(provisioned.get(uid) == kind for kind, uid in used), used


def test_compose_mounts_exist_and_provisioning_agrees() -> None:
    """Every bind mount of docker-compose.yml exists in the repo; datasource URLs, ports and paths match services."""
    compose = _compose()
    services = compose["services"]
    assert set(services) == {"collector", "prometheus", "victorialogs", "grafana"}
    mounts: dict[str, dict[str, str]] = {}
    for name, service in services.items():
        mounts[name] = {}
        for volume in service.get("volumes", ()):
            source, target = volume.split(":")[:2]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name}: {source} does not exist"
            mounts[name][target] = source
    # Collector: the repository config, with the env vars it reads pointed at the compose services.
    assert services["collector"]["image"] == "otel/opentelemetry-collector-contrib:0.161.0"
    config_arg = next(arg for arg in services["collector"]["command"] if arg.startswith("--config="))
    assert mounts["collector"][config_arg.removeprefix("--config=")] == "./collector_config/collector.yaml"
    collector_yaml = (ROOT / "collector_config" / "collector.yaml").read_text(encoding="utf-8")
    env = services["collector"]["environment"]
    read = set(re.findall(r"\$\{env:(\w+)", collector_yaml))
    assert set(env) <= read, set(env) - read
    for var in ("OTEL_RL_OTLP_GRPC_ENDPOINT", "OTEL_RL_OTLP_HTTP_ENDPOINT", "OTEL_RL_HEALTH_ENDPOINT"):
        assert env[var].startswith("0.0.0.0:")
    published = {name: {p.split(":")[-1] for p in s.get("ports", ())} for name, s in services.items()}
    assert {env["OTEL_RL_OTLP_GRPC_ENDPOINT"].split(":")[1], env["OTEL_RL_OTLP_HTTP_ENDPOINT"].split(":")[1]} <= published["collector"]
    assert env["OTEL_RL_REMOTE_WRITE_URL"] == "http://prometheus:9090/api/v1/write" and "9090" in published["prometheus"]
    assert env["OTEL_RL_VICTORIALOGS_URL"] == "http://victorialogs:9428" and "9428" in published["victorialogs"]
    # Prometheus: the flags of the local stack, the compose config, the repository's rules.
    prometheus = services["prometheus"]
    assert prometheus["image"] == "prom/prometheus:v3.16.0"
    flags = set(prometheus["command"])
    assert {"--web.enable-remote-write-receiver", "--enable-feature=exemplar-storage"} <= flags
    stack_flags = (ROOT / "otel_rl" / "stack" / "components.py").read_text(encoding="utf-8")
    assert '"--web.enable-remote-write-receiver"' in stack_flags and '"--enable-feature=exemplar-storage"' in stack_flags
    assert mounts["prometheus"]["/etc/prometheus/prometheus.yml"] == "./prometheus/prometheus.compose.yml"
    assert mounts["prometheus"]["/etc/prometheus/rules"] == "./prometheus/rules"
    prom_config = yaml.safe_load((ROOT / "prometheus" / "prometheus.compose.yml").read_text(encoding="utf-8"))
    assert prom_config["rule_files"] == ["/etc/prometheus/rules/*.yml"]
    targets = {job["job_name"]: job["static_configs"][0]["targets"][0] for job in prom_config["scrape_configs"]}
    assert targets["otelcol"] == f"collector:{env['OTEL_RL_COLLECTOR_METRICS_PORT']}"
    assert services["victorialogs"]["image"] == "victoriametrics/victoria-logs:v1.52.1"
    # Grafana: provisioning and dashboards mounted where the provider looks, datasource URLs at the services.
    grafana = services["grafana"]
    assert re.fullmatch(r"grafana/grafana:\d+\.\d+\.\d+", grafana["image"]), "pin the Grafana image"
    genv = grafana["environment"]
    assert genv["GF_SECURITY_ADMIN_PASSWORD"].startswith("${GRAFANA_ADMIN_PASSWORD:?"), "no default password"
    assert genv["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert genv["GF_PLUGINS_PREINSTALL_SYNC"].split("@")[0] == "victoriametrics-logs-datasource"
    assert mounts["grafana"]["/etc/grafana/provisioning/datasources"] == "./grafana/provisioning/datasources"
    assert mounts["grafana"]["/etc/grafana/provisioning/dashboards"] == "./grafana/provisioning/dashboards"
    providers = yaml.safe_load((PROVISIONING / "dashboards" / "otel-rl.yml").read_text(encoding="utf-8"))["providers"]
    assert mounts["grafana"][providers[0]["options"]["path"]] == "./grafana/dashboards"
    home = genv["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (ROOT / "grafana" / "dashboards" / Path(home).name).is_file() and home.startswith(providers[0]["options"]["path"])
    urls = {ds["uid"]: ds["url"] for ds in _provisioned_datasources()}
    assert urls["otel-rl-prometheus"] == "http://prometheus:9090" and urls["otel-rl-victorialogs"] == "http://victorialogs:9428"


def test_compose_prometheus_config_is_valid(promtool: Path) -> None:
    """promtool check config accepts prometheus/prometheus.compose.yml."""
    result = subprocess.run([promtool, "check", "config", ROOT / "prometheus" / "prometheus.compose.yml"],
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_rule_files_pass_promtool_check(promtool: Path) -> None:
    """promtool check rules accepts every rule file the stack loads (prometheus/rules/*.yml)."""
    result = subprocess.run([promtool, "check", "rules", *RULE_FILES], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", RULE_TESTS, ids=lambda p: p.name)
def test_rule_unit_tests_pass(promtool: Path, path: Path) -> None:
    """promtool test rules: each alert fires when it should and stays silent when it should not."""
    result = subprocess.run([promtool, "test", "rules", path.name], cwd=path.parent, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_that_fires_and_one_that_stays_silent() -> None:
    """Each alert name appears in some promtool test with expected alerts, and in one expecting none."""
    alerts = {rule["alert"] for rule in rules() if "alert" in rule}
    assert alerts == {
        "RLStalenessHigh", "RLTelemetryAbsent", "RLNonFiniteRewards", "RLRewardCollapse", "OtelRLHistogramPointsDropped",
        "RLTrainerStalled", "RLImportanceRatioHigh", "RLMismatchKLHigh", "RLEffectiveSampleSizeLow", "RLEntropyCollapse",
        "RLZeroVarianceGroupsHigh", "RLRanksMissing", "RLRunEndedUncleanly"}  # fmt: skip
    fires: set[str] = set()
    silent: set[str] = set()
    for path in RULE_TESTS:
        for test in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            for case in test.get("alert_rule_test", ()):
                (fires if case.get("exp_alerts") else silent).add(case["alertname"])
    assert alerts <= fires and alerts <= silent, (alerts - fires, alerts - silent)


def test_every_alert_has_a_runbook_and_uses_thresholds_that_have_defaults() -> None:
    """Each alert rule has the annotations summary, description, runbook and dashboard and a severity; every
    rl_alert_threshold{threshold=...} an alert reads has a default in the rl_alert_threshold rule."""
    defaults = set(re.findall(r'"threshold", "(\w+)"', next(r["expr"] for r in rules() if r.get("record") == "rl_alert_threshold")))
    for rule in rules():
        if "alert" not in rule:
            continue
        assert set(rule["annotations"]) == {"summary", "description", "runbook", "dashboard"}, rule["alert"]
        assert rule["labels"]["severity"] == "warning", rule["alert"]
        used = set(re.findall(r'rl_alert_threshold\{threshold="(\w+)"\}', rule["expr"]))
        assert used <= defaults, (rule["alert"], used - defaults)


def test_every_rule_selector_reads_the_aggregated_side() -> None:
    """Every selector of a raw otel-rl series in the rules carries rl_rank="" (docs/pipeline.md)."""
    for rule in rules():
        for selector in re.findall(r"\b((?:otel_)?rl_[a-z_]+)\{([^}]*)\}", rule["expr"]):
            name, matchers = selector
            if name.startswith("rl_alert_threshold"):
                continue
            assert 'rl_rank=""' in matchers, (rule.get("record") or rule.get("alert"), name)


def test_report_shows_the_run_state_in_words() -> None:
    """The report's stat panels carry the dashboard's value mappings: the run state reads as Grafana shows it."""
    from otel_rl.report.dashboard import default_dashboard_path, load_panels

    (state,) = [panel for panel in load_panels(default_dashboard_path()) if panel.title == "Run state"]
    assert state.value_texts == {0.0: "running", 1.0: "finished cleanly", 2.0: "stopped without a clean finish"}
