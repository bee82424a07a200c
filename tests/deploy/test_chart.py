"""The Helm chart's rendered objects, checked by the real tools: the collector's own ``validate`` on every collector
workload's config files, arguments and environment; promtool on every PrometheusRule; and one source for rules,
dashboards and collector configs (the rendered text is the repository's). ``make chart-check`` (deploy/helm/check)
lints the chart and decodes every object into its Go type; here its renderer writes each values case's manifest.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from otel_rl_contract._version import __version__

ROOT = Path(__file__).resolve().parents[2]
VALUES = ROOT / "deploy" / "helm" / "values"
CASES = ("default", *sorted(path.stem for path in VALUES.glob("*.yaml")))
CONFIG_DIR = "/etc/otel-rl/config"
CHART_OVERLAYS = frozenset({"agent-secure.yaml", "gateway-secure-extensions.yaml"})
"""The chart's own collector overlays of the secure profile (deploy/helm/otel-rl/files/)."""

pytestmark = pytest.mark.stack


def objects(manifest: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in manifest if doc["kind"] == kind]


def one(manifest: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [doc for doc in objects(manifest, kind) if doc["metadata"]["name"] == name]
    return found


@dataclass(frozen=True)
class CollectorPod:
    """A collector container as the chart runs it: its ``--config`` files' text, and its environment."""

    name: str
    configs: dict[str, str]
    env: dict[str, str]

    def validate(
        self, collector: Path, folder: Path, *, drop: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        """Run ``<collector> validate`` on the files written to ``folder``, with the container's environment less
        ``drop`` (nothing of this process's environment but PATH)."""
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in self.configs.items():
            (folder / name).write_text(text)
        env = {key: mounted_secret(value, folder) for key, value in self.env.items() if key not in drop}
        argv = [str(collector), "validate", *(f"--config={folder / name}" for name in self.configs)]
        return subprocess.run(argv, env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True, timeout=60)


def mounted_secret(value: str, folder: Path) -> str:
    """A file of a mounted Secret (``/etc/otel-rl/<secret>/<key>``) becomes a placeholder file in ``folder`` (the
    collector reads ``${file:...}`` values while resolving its config); other values stay."""
    if not value.startswith("/etc/otel-rl/") or value.startswith(CONFIG_DIR):
        return value
    path = folder / "secrets" / value.removeprefix("/etc/otel-rl/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("placeholder")
    return str(path)


def collector_pods(manifest: list[dict[str, Any]]) -> list[CollectorPod]:
    """The DaemonSet's and Deployment's collector containers; a downward-API variable gets a placeholder value."""
    config_maps = {doc["metadata"]["name"]: doc["data"] for doc in objects(manifest, "ConfigMap")}
    pods = []
    for workload in objects(manifest, "DaemonSet") + objects(manifest, "Deployment"):
        spec = workload["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        (volume,) = [v for v in spec["volumes"] if v["name"] == "config"]
        data = config_maps[volume["configMap"]["name"]]
        names = [arg.removeprefix(f"--config={CONFIG_DIR}/") for arg in container["args"]]
        env = {item["name"]: item.get("value", f"from-{item['name'].lower()}") for item in container["env"]}
        pods.append(CollectorPod(workload["metadata"]["name"], {name: data[name] for name in names}, env))
    return pods


@pytest.mark.parametrize("case", CASES)
def test_collector_validate_accepts_every_workload(
    manifests: dict[str, list[dict[str, Any]]], stack_binaries: Any, tmp_path: Path, case: str
) -> None:
    """The collector's own ``validate`` (config loaded, every pipeline built) accepts each workload as rendered."""
    pods = collector_pods(manifests[case])
    assert {pod.name for pod in pods} == {"otel-rl-agent", "otel-rl-gateway"}
    for pod in pods:
        result = pod.validate(stack_binaries.collector, tmp_path / pod.name)
        assert result.returncode == 0, f"{case} {pod.name}: {result.stdout}{result.stderr}"


def test_collector_validate_refuses_an_agent_without_its_gateways(
    manifests: dict[str, list[dict[str, Any]]], stack_binaries: Any, tmp_path: Path
) -> None:
    """The check has teeth: without the gateway Service name the chart sets, the agent's pipelines cannot be built."""
    (agent,) = [pod for pod in collector_pods(manifests["default"]) if pod.name == "otel-rl-agent"]
    result = agent.validate(stack_binaries.collector, tmp_path, drop=("OTEL_RL_GATEWAYS_HOSTNAME",))
    assert result.returncode != 0
    assert "no hostname specified to resolve the backends" in result.stdout + result.stderr


@pytest.mark.parametrize("case", CASES)
def test_collector_configs_are_the_repository_files(manifests: dict[str, list[dict[str, Any]]], case: str) -> None:
    """The collector ConfigMap carries collector_config/ unchanged (one source); the chart adds only its two
    overlays for the secure profile."""
    data = one(manifests[case], "ConfigMap", "otel-rl-collector")["data"]
    for name, text in data.items():
        source = ROOT / "collector_config" / name
        if name in CHART_OVERLAYS:
            source = ROOT / "deploy" / "helm" / "otel-rl" / "files" / name
        assert text == source.read_text().rstrip("\n"), name
    assert CHART_OVERLAYS.isdisjoint(data) == (case != "secure")


@pytest.mark.parametrize("case", [case for case in CASES if case != "minimal"])
def test_prometheus_rules_are_the_rule_files_and_pass_promtool(
    manifests: dict[str, list[dict[str, Any]]], promtool: Path, tmp_path: Path, case: str
) -> None:
    """One PrometheusRule per rule file with groups, its groups exactly the file's; promtool accepts each."""
    rules = objects(manifests[case], "PrometheusRule")
    sources = {
        path.name: yaml.safe_load(path.read_text()) for path in sorted((ROOT / "prometheus" / "rules").glob("*.yml"))
    }
    with_groups = {name for name, content in sources.items() if content["groups"]}
    by_source = {
        rule["metadata"]["annotations"]["otel-rl/source"].removeprefix("prometheus/rules/"): rule for rule in rules
    }
    assert set(by_source) == with_groups
    for name, rule in by_source.items():
        assert rule["spec"]["groups"] == sources[name]["groups"], name
        path = tmp_path / name
        path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
        result = subprocess.run([str(promtool), "check", "rules", str(path)], capture_output=True, text=True)
        assert result.returncode == 0, f"{name}: {result.stdout}{result.stderr}"


def test_promtool_refuses_a_broken_rule(promtool: Path, tmp_path: Path) -> None:
    """promtool is a real check here: a rule group with a PromQL syntax error is refused."""
    path = tmp_path / "broken.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [{"record": "r", "expr": "sum(("}]}]}))
    assert subprocess.run([str(promtool), "check", "rules", str(path)], capture_output=True).returncode != 0


def test_dashboards_and_datasources_for_the_grafana_sidecar(manifests: dict[str, list[dict[str, Any]]]) -> None:
    """Each dashboard JSON unchanged in a ConfigMap with the sidecar's label; the dashboards' datasource uids with
    the values' URLs, none of them Grafana's default."""
    manifest = manifests["default"]
    sources = sorted((ROOT / "grafana" / "dashboards").glob("*.json"))
    assert sources
    for source in sources:
        config_map = one(manifest, "ConfigMap", f"otel-rl-dashboard-{source.stem}")
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config_map["data"][source.name] == source.read_text().rstrip("\n")
    datasources = one(manifest, "ConfigMap", "otel-rl-datasources")
    assert datasources["metadata"]["labels"]["grafana_datasource"] == "1"
    rendered = yaml.safe_load(datasources["data"]["otel-rl-datasources.yaml"])["datasources"]
    values = yaml.safe_load((ROOT / "deploy" / "helm" / "otel-rl" / "values.yaml").read_text())["dashboards"]
    urls = {
        "otel-rl-prometheus": values["datasources"]["prometheusUrl"],
        "otel-rl-victorialogs": values["datasources"]["victoriaLogsUrl"],
        "otel-rl-jaeger": values["datasources"]["jaegerUrl"],
    }
    assert {item["uid"]: item["url"] for item in rendered} == urls
    assert not any(item["isDefault"] for item in rendered if "isDefault" in item)


def memory_mib(quantity: str) -> int:
    match = re.fullmatch(r"(\d+)Mi", quantity)
    assert match, quantity
    return int(match.group(1))


@pytest.mark.parametrize("case", CASES)
def test_memory_limiter_refuses_before_the_container_limit(
    manifests: dict[str, list[dict[str, Any]]], case: str
) -> None:
    """Each collector's memory_limiter refuses data at 80 % of its container's memory limit, before an OOM kill."""
    for workload in objects(manifests[case], "DaemonSet") + objects(manifests[case], "Deployment"):
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        env = {item["name"]: item.get("value") for item in container["env"]}
        limit = memory_mib(container["resources"]["limits"]["memory"])
        assert container["resources"]["requests"]["memory"] == container["resources"]["limits"]["memory"]
        assert int(env["OTEL_RL_COLLECTOR_MEMORY_LIMIT_MIB"]) == limit * 4 // 5
        assert int(env["OTEL_RL_COLLECTOR_MEMORY_SPIKE_MIB"]) == limit * 4 // 5 // 5


def test_large_values_are_the_capacity_plan(manifests: dict[str, list[dict[str, Any]]]) -> None:
    """values/large.yaml runs the gateways docs/scale.md's capacity plan asks for (count, cores, memory)."""
    plan = re.search(r"(\d+) gateways of (\d+) cores / (\d+) GiB", (ROOT / "docs" / "scale.md").read_text())
    assert plan, "docs/scale.md no longer states the gateway plan"
    replicas, cores, gib = (int(group) for group in plan.groups())
    gateway = one(manifests["large"], "Deployment", "otel-rl-gateway")
    (container,) = gateway["spec"]["template"]["spec"]["containers"]
    assert gateway["spec"]["replicas"] == replicas
    assert container["resources"]["requests"]["cpu"] == str(cores)
    assert memory_mib(container["resources"]["limits"]["memory"]) == gib * 1024


def test_secure_profile_wires_tls_and_token(manifests: dict[str, list[dict[str, Any]]]) -> None:
    """values/secure.yaml: gateways load secure.yaml, agents the chart's agent-secure.yaml, with the files of the
    named Secrets (gateways also the stores' CA and credentials); agents verify the gateways by their Service's name
    and send the token."""
    manifest = manifests["secure"]
    values = yaml.safe_load((VALUES / "secure.yaml").read_text())["secure"]
    service = one(manifest, "Service", "otel-rl-gateway")
    for workload in objects(manifest, "DaemonSet") + objects(manifest, "Deployment"):
        spec = workload["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        secure = "agent-secure.yaml" if workload["kind"] == "DaemonSet" else "secure.yaml"
        assert f"--config={CONFIG_DIR}/{secure}" in container["args"]
        secrets = {v["name"]: v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
        expected = {"tls": values["tls"]["existingSecret"], "token": values["token"]["existingSecret"]}
        if workload["kind"] == "Deployment":
            expected["stores"] = values["stores"]["existingSecret"]
        assert secrets == expected
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        env = {item["name"]: item.get("value") for item in container["env"]}
        if workload["kind"] == "Deployment":
            assert env["OTEL_RL_TLS_CA_FILE"] == f"{mounts['stores']}/ca.crt"
            for store in ("prometheus", "victorialogs"):
                assert env[f"OTEL_RL_{store.upper()}_AUTHORIZATION_FILE"] == f"{mounts['stores']}/{store}-authorization"
        assert env["OTEL_RL_TLS_CERT_FILE"] == f"{mounts['tls']}/tls.crt"
        assert env["OTEL_RL_TLS_KEY_FILE"] == f"{mounts['tls']}/tls.key"
        assert env["OTEL_RL_BEARER_TOKEN_FILE"] == f"{mounts['token']}/{values['token']['key']}"
        if workload["kind"] == "DaemonSet":
            assert env["OTEL_RL_GATEWAY_CA_FILE"] == f"{mounts['tls']}/ca.crt"
            assert env["OTEL_RL_GATEWAY_SERVER_NAME"] == f"{service['metadata']['name']}.observability.svc"
    for case in CASES:
        if case != "secure":
            assert not objects(manifests[case], "Secret"), case


def test_chart_version_is_the_package_version(manifests: dict[str, list[dict[str, Any]]]) -> None:
    """The chart's appVersion, hence the collector image's default tag, is the otel-rl package version."""
    chart = yaml.safe_load((ROOT / "deploy" / "helm" / "otel-rl" / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    for workload in objects(manifests["default"], "DaemonSet") + objects(manifests["default"], "Deployment"):
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        assert container["image"] == f"otel-rl/otelcol-rl:{__version__}"


@pytest.mark.parametrize("case", CASES)
def test_gateways_send_spans_to_the_trace_store_or_only_to_the_phase_durations(
    manifests: dict[str, list[dict[str, Any]]], case: str
) -> None:
    """With gateway.tracesUrl (the secure values) a gateway sends every span there (OTEL_RL_JAEGER_URL; in the secure
    profile with jaeger-authorization from the stores' Secret); without it (the others) it runs no_trace_store.yaml:
    the spans make the phase durations only."""
    values = yaml.safe_load((VALUES / f"{case}.yaml").read_text()) if case != "default" else {}
    traces_url = ((values or {}).get("gateway") or {}).get("tracesUrl", "")
    (gateway,) = [pod for pod in collector_pods(manifests[case]) if pod.name == "otel-rl-gateway"]
    assert ("no_trace_store.yaml" in gateway.configs) == (not traces_url)
    assert gateway.env.get("OTEL_RL_JAEGER_URL") == (traces_url or None)
    if "secure.yaml" in gateway.configs:
        expected = "/etc/otel-rl/stores/jaeger-authorization" if traces_url else "/dev/null"
        assert gateway.env["OTEL_RL_JAEGER_AUTHORIZATION_FILE"] == expected
