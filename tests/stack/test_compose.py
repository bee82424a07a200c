"""docker-compose.yml checked statically (no Docker engine in CI): the otel-rl collector image, nothing published
without authentication, the secure profile's settings, the secrets of `otel-rl stack secrets`, provisioning that
agrees with the services. The same settings run for real in tests/reliability/test_security.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from otel_rl_contract._version import __version__
from otel_rl_ops.stack.cli import COMPOSE_HOSTS
from otel_rl_ops.stack.secrets import USERNAME, ensure_secrets

ROOT = Path(__file__).parents[2]
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
SERVICES: dict[str, Any] = COMPOSE["services"]
DATASOURCES = {
    ds["uid"]: ds
    for path in sorted((ROOT / "grafana" / "provisioning" / "datasources").glob("*.yml"))
    for ds in yaml.safe_load(path.read_text(encoding="utf-8"))["datasources"]
}


def _mounts(service: str) -> dict[str, str]:
    """Container path -> host path of a service's bind mounts (named volumes left out)."""
    mounts = {}
    for volume in SERVICES[service].get("volumes", ()):
        source, target = volume.split(":")[:2]
        if source.startswith("./"):
            assert (ROOT / source).exists(), f"{service}: {source} does not exist"
            mounts[target] = source
    return mounts


def _published(service: str) -> dict[str, str]:
    """Container port -> host binding ("host:port" or "port") of what a service publishes."""
    return {binding.rsplit(":", 1)[1]: binding.rsplit(":", 1)[0] for binding in SERVICES[service].get("ports", ())}


def test_every_published_port_authenticates_or_stays_on_loopback() -> None:
    """The collector publishes only OTLP (TLS and the token: secure.yaml), Prometheus only behind its web config
    (TLS, basic auth) without the lifecycle API, VictoriaLogs only behind -tls and -httpAuth.*, Grafana with a
    required admin password and no anonymous access; anything else only on 127.0.0.1."""
    authenticated = {
        "collector": {"4317", "4318"},
        "prometheus": {"9090"},
        "victorialogs": {"9428"},
        "jaeger": {"16686"},
        "grafana": {"3000"},
    }
    for name in SERVICES:
        for port, host in _published(name).items():
            assert port in authenticated.get(name, set()) or host.startswith("127.0.0.1"), (name, port, host)
    assert "--config=/etc/otel-rl/secure.yaml" in SERVICES["collector"]["command"]
    prometheus = SERVICES["prometheus"]["command"]
    assert (
        "--web.config.file=/run/secrets/prometheus-web.yml" in prometheus and "--web.enable-lifecycle" not in prometheus
    )
    victorialogs = SERVICES["victorialogs"]["command"]
    assert {
        "-tls",
        f"-httpAuth.username={USERNAME}",
        "-httpAuth.password=file:///run/secrets/victorialogs.password",
    } <= set(victorialogs)
    assert "--config=/etc/jaeger/secure.yaml" in SERVICES["jaeger"]["command"]
    grafana = SERVICES["grafana"]["environment"]
    assert (
        grafana["GF_SECURITY_ADMIN_PASSWORD"].startswith("${GRAFANA_ADMIN_PASSWORD:?")
        and grafana["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    )


def test_the_collector_is_the_otel_rl_image_wired_to_the_stores_over_tls() -> None:
    """The collector is otel-rl/otelcol-rl:<package version> built from collector_config/Dockerfile; every variable it
    gets is read by the configs it runs; it reaches the stores over https by their service names (which the server
    certificate of `otel-rl stack secrets` names), with the secrets' files."""
    collector = SERVICES["collector"]
    assert collector["image"] == f"otel-rl/otelcol-rl:{__version__}"
    configs = [arg.removeprefix("--config=/etc/otel-rl/") for arg in collector["command"]]
    read = {
        name
        for config in configs
        for name in re.findall(r"\$\{env:(\w+)", (ROOT / "collector_config" / config).read_text())
    }
    environment = collector["environment"]
    assert set(environment) <= read, set(environment) - read
    assert environment["OTEL_RL_REMOTE_WRITE_URL"] == "https://prometheus:9090/api/v1/write"
    assert environment["OTEL_RL_VICTORIALOGS_URL"] == "https://victorialogs:9428"
    assert environment["OTEL_RL_JAEGER_URL"] == "https://jaeger:4319"
    assert {"collector", "prometheus", "victorialogs", "jaeger"} <= set(COMPOSE_HOSTS)
    files = {
        value.removeprefix("/run/secrets/") for value in environment.values() if str(value).startswith("/run/secrets/")
    }
    assert files <= set(collector["secrets"]), files - set(collector["secrets"])


def test_jaeger_is_the_stacks_release_with_its_configs() -> None:
    """Jaeger is the release whose Go module the local stack builds (v2.13.0 is module v1.76.0), runs the stack's
    jaeger/jaeger.yaml and secure overlay, every variable it gets is read by them, its files are its secrets."""
    from otel_rl_ops.stack import versions

    jaeger = SERVICES["jaeger"]
    assert versions.JAEGER.version == "v1.76.0" and jaeger["image"] == "jaegertracing/jaeger:2.13.0"
    assert _mounts("jaeger")["/etc/jaeger"] == "./jaeger"
    configs = [arg.removeprefix("--config=/etc/jaeger/") for arg in jaeger["command"]]
    assert configs == ["jaeger.yaml", "secure.yaml"]
    read = {name for config in configs for name in re.findall(r"\$\{env:(\w+)", (ROOT / "jaeger" / config).read_text())}
    assert set(jaeger["environment"]) <= read, set(jaeger["environment"]) - read
    files = {
        value.removeprefix("/run/secrets/")
        for value in jaeger["environment"].values()
        if str(value).startswith("/run/secrets/")
    }
    assert files == set(jaeger["secrets"])


def test_secrets_are_the_files_of_otel_rl_stack_secrets(tmp_path: Path) -> None:
    """Every compose secret is a file `otel-rl stack secrets` makes, every service mounts only declared secrets, and
    each path a command, the environment or a datasource names under /run/secrets/ is mounted in that service; no
    secret value is written in the compose file or the provisioning."""
    made = {
        path.name
        for path in ensure_secrets(tmp_path, hosts=COMPOSE_HOSTS, readable_by_containers=True).folder.iterdir()
    }
    declared = COMPOSE["secrets"]
    assert all(spec["file"] == f"./secrets/{name}" and name in made for name, spec in declared.items()), declared
    text = {name: yaml.safe_dump(service) for name, service in SERVICES.items()}
    text["grafana"] += yaml.safe_dump(DATASOURCES)
    for name, service in SERVICES.items():
        assert set(service.get("secrets", ())) <= set(declared), name
        named = set(re.findall(r"/run/secrets/([\w.-]+)", text[name]))
        assert named <= set(service.get("secrets", ())), (name, named - set(service.get("secrets", ())))
    written = [
        (key, value)
        for key, value in _scalars({"compose": COMPOSE, "datasources": DATASOURCES})
        if re.search(r"(?i)password|token", key) and not re.match(r"(\$\{|\$__file\{|/run/secrets/|\./secrets/)", value)
    ]
    assert written == [], "a secret value is written out"


def _scalars(node: Any, key: str = "") -> list[tuple[str, str]]:
    """Every (key, string value) of a YAML tree; list items carry their list's key."""
    if isinstance(node, dict):
        return [pair for k, v in node.items() for pair in _scalars(v, str(k))]
    if isinstance(node, list):
        return [pair for item in node for pair in _scalars(item, key)]
    return [(key, node)] if isinstance(node, str) else []


def test_prometheus_and_grafana_reach_the_stores_with_their_credentials() -> None:
    """Prometheus scrapes itself over TLS with its basic auth; Grafana's datasources use https, basic auth with the
    password file and the CA; the provisioning and dashboards are mounted where Grafana looks."""
    config = yaml.safe_load((ROOT / "prometheus" / "prometheus.compose.yml").read_text(encoding="utf-8"))
    (own,) = [job for job in config["scrape_configs"] if job["job_name"] == "prometheus"]
    assert own["scheme"] == "https" and own["basic_auth"]["password_file"] == "/run/secrets/prometheus.password"
    assert _mounts("prometheus")["/etc/prometheus/prometheus.yml"] == "./prometheus/prometheus.compose.yml"
    stores = (
        ("otel-rl-prometheus", "prometheus", 9090),
        ("otel-rl-victorialogs", "victorialogs", 9428),
        ("otel-rl-jaeger", "jaeger", 16686),
    )
    for uid, store, port in stores:
        source = DATASOURCES[uid]
        assert source["url"] == f"https://{store}:{port}" and source["basicAuth"] is True, uid
        assert source["basicAuthUser"] == USERNAME and source["jsonData"]["tlsAuthWithCACert"] is True, uid
        assert source["secureJsonData"] == {
            "basicAuthPassword": f"$__file{{/run/secrets/{store}.password}}",
            "tlsCACert": "$__file{/run/secrets/ca.pem}",
        }, uid
    mounts = _mounts("grafana")
    assert mounts["/etc/grafana/provisioning/datasources"] == "./grafana/provisioning/datasources"
    assert mounts["/etc/grafana/provisioning/dashboards"] == "./grafana/provisioning/dashboards"
    providers = yaml.safe_load((ROOT / "grafana" / "provisioning" / "dashboards" / "otel-rl.yml").read_text())[
        "providers"
    ]
    assert mounts[providers[0]["options"]["path"]] == "./grafana/dashboards"
