"""Configuration of one local stack: its ports, folders and timeouts, and the Prometheus file rendered from them.

Several stacks can run side by side as long as their ports and state directories differ; tests start private
ones on :func:`find_free_ports`.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from otel_rl_ops.package_data import data_root
from otel_rl_ops.stack import layout
from otel_rl_ops.stack.env import COLLECTOR_ENV_NAMES, otel_rl_home
from otel_rl_ops.stack.secrets import StackSecrets, ensure_secrets


def find_free_ports(n: int, *, host: str = "127.0.0.1") -> tuple[int, ...]:
    """Return ``n`` distinct TCP ports that were free on ``host`` a moment ago.

    All ``n`` sockets are bound at once (so the ports differ) and closed before returning; another process may
    still take one in between, which a caller detects when its server fails to bind.

    Raises:
        ValueError: when ``n`` is negative.
    """
    if n < 0:
        raise ValueError(f'"n" must be >= 0, got {n!r}')
    sockets: list[socket.socket] = []
    try:
        for _ in range(n):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
        return tuple(sock.getsockname()[1] for sock in sockets)
    finally:
        for sock in sockets:
            sock.close()


@dataclass(frozen=True, kw_only=True)
class StackPorts:
    """TCP ports of one stack; all must be distinct and in 1..65535."""

    otlp_grpc: int = 4317
    """The collector's OTLP/gRPC receiver."""
    otlp_http: int = 4318
    """The collector's OTLP/HTTP receiver."""
    prometheus: int = 9090
    """Prometheus's web UI, API and remote-write receiver."""
    victorialogs: int = 9428
    """VictoriaLogs's HTTP API (ingestion and LogsQL queries)."""
    collector_health: int = 13133
    """The collector's ``health_check`` extension."""
    collector_metrics: int = 8888
    """The collector's own metrics (Prometheus text format), scraped by the stack's Prometheus."""
    vlstorage_0: int = 9491
    """First VictoriaLogs storage node (cluster profile only; see :attr:`StackConfig.victorialogs_cluster`)."""
    vlstorage_1: int = 9492
    """Second VictoriaLogs storage node (cluster profile only)."""
    thanos_receive_0_write: int = 19291
    """First Thanos receiver's remote-write endpoint, ``/api/v1/receive`` (TSDB cluster profile only; see
    :attr:`StackConfig.tsdb_cluster`): the collector writes here."""
    thanos_receive_0_grpc: int = 10901
    """First Thanos receiver's gRPC (Store API for the querier, forwarding between receivers: its hashring
    endpoint)."""
    thanos_receive_0_http: int = 10902
    """First Thanos receiver's HTTP (``/-/ready``, ``/metrics``)."""
    thanos_receive_0_capnp: int = 19391
    """First Thanos receiver's Cap'n Proto replication listener (``--receive.capnproto-address``; unused with the
    default gRPC replication protocol, but it listens)."""
    thanos_receive_1_write: int = 19292
    """Second Thanos receiver's remote-write endpoint (TSDB cluster profile only)."""
    thanos_receive_1_grpc: int = 10911
    """Second Thanos receiver's gRPC."""
    thanos_receive_1_http: int = 10912
    """Second Thanos receiver's HTTP."""
    thanos_receive_1_capnp: int = 19392
    """Second Thanos receiver's Cap'n Proto replication listener."""
    thanos_query: int = 10904
    """Thanos querier's HTTP: the Prometheus query API (``/api/v1/query``), which :attr:`Stack.prometheus_url
    <otel_rl_ops.stack.services.Stack.prometheus_url>` names in the TSDB cluster profile."""
    thanos_query_grpc: int = 10903
    """Thanos querier's own gRPC (Store API); nothing of the stack uses it, but it listens."""
    thanos_rule_http: int = 10906
    """Thanos Ruler's HTTP (``/-/ready``, its own ``/api/v1/alerts`` and ``/api/v1/rules``; TSDB cluster profile
    only)."""
    thanos_rule_grpc: int = 10905
    """Thanos Ruler's gRPC (Store API): the querier reads the series the ruler records (recording rules,
    ``ALERTS``) from it."""
    thanos_store_http: int = 10908
    """Thanos store gateway's HTTP (``/-/ready``; TSDB cluster profile only): it serves the stack's bucket, where
    ``otel-rl replay`` uploads the blocks of offline runs."""
    thanos_store_grpc: int = 10907
    """Thanos store gateway's gRPC (Store API), read by the querier."""
    alertmanager: int = 9093
    """Alertmanager's web API (``/api/v2/alerts``, ``/api/v2/silences``), to which Prometheus (or Thanos Ruler)
    sends alerts. Its cluster (gossip) port is off: one Alertmanager, no peers."""
    jaeger_otlp: int = 4319
    """Jaeger's OTLP/HTTP receiver, where the collector sends every span."""
    jaeger_query: int = 16686
    """Jaeger's query API over HTTP (``/api/v3/traces/<id>``, ``/api/traces``) and its web UI (a placeholder page:
    the Go module holds no built UI)."""
    jaeger_query_grpc: int = 16685
    """Jaeger's query API over gRPC; nothing of the stack uses it, but it listens."""
    jaeger_health: int = 13134
    """Jaeger's health check (``GET /status``)."""

    def __post_init__(self) -> None:
        seen: dict[int, str] = {}
        for item in dataclasses.fields(self):
            port = getattr(self, item.name)
            if isinstance(port, bool) or not isinstance(port, int):
                raise TypeError(f'"{item.name}" must be an int, got {port!r}')
            if not 1 <= port <= 65535:
                raise ValueError(f'"{item.name}" must be in 1..65535, got {port!r}')
            if port in seen:
                raise ValueError(f'"{item.name}" must differ from "{seen[port]}", both are {port!r}')
            seen[port] = item.name

    @classmethod
    def free(cls, *, host: str = "127.0.0.1") -> StackPorts:
        """Return ports chosen by :func:`find_free_ports`, for a private stack (tests)."""
        names = [item.name for item in dataclasses.fields(cls)]
        return cls(**dict(zip(names, find_free_ports(len(names), host=host), strict=True)))

    def as_dict(self) -> dict[str, int]:
        """Return the ports by field name (the ``stack.json`` form)."""
        return dataclasses.asdict(self)


@dataclass(frozen=True, kw_only=True)
class StackConfig:
    """Everything that distinguishes one local stack from another."""

    ports: StackPorts = field(default_factory=StackPorts)
    """The stack's TCP ports."""
    host: str = "127.0.0.1"
    """Address every component listens on and is reached at."""
    home: Path = field(default_factory=otel_rl_home)
    """Install root (``$OTEL_RL_HOME``): where binaries are found or built."""
    state_dir: Path | None = None
    """Pid files, logs, rendered configs and data of this stack; ``None`` means ``<home>/stack``."""
    root: Path | None = None
    """A data root laid out like the package's (``collector_config/``, ``prometheus/``, ...); ``None`` means the
    package's own (:func:`~otel_rl_ops.package_data.data_root`)."""
    collector_configs: tuple[Path, ...] = ()
    """Collector ``--config`` files in merge order; empty means ``collector_config/collector.yaml`` of ``root``."""
    collector_environment: Mapping[str, str] = field(default_factory=dict)
    """Extra environment for the collector, e.g. ``{"OTEL_RL_AGGREGATION_INTERVAL": "1s"}``; the stack's own
    variables (:data:`otel_rl_ops.stack.env.COLLECTOR_ENV_NAMES`) cannot be overridden here."""
    prometheus_retention: str = "15d"
    """Prometheus ``--storage.tsdb.retention.time`` (the Thanos receivers' ``--tsdb.retention`` in the TSDB cluster
    profile)."""
    victorialogs_retention: str = "7d"
    """VictoriaLogs ``-retentionPeriod``."""
    jaeger_retention: str = "168h"
    """How long Jaeger keeps spans (a Go duration: ``ttl.spans`` of its Badger storage)."""
    victorialogs_flags: tuple[str, ...] = (
        "-memory.allowedPercent=25",
        "-insert.maxLineSizeBytes=256KiB",
        "-insert.maxFieldsPerLine=1000",
        "-opentelemetry.maxRequestSize=32MiB",
    )
    """Extra VictoriaLogs flags: limits against oversized or abusive input (names as in ``victoria-logs -help``
    of v1.52.1). ``-opentelemetry.maxRequestSize`` bounds one OTLP request (the collector's batches of sample
    records, ~70 KiB each at most with the default 16 KiB text budget, stay far below it); a larger request is
    refused with an HTTP error. ``-insert.maxLineSizeBytes`` bounds line-based ingestion (JSON lines, syslog), not
    OTLP records (measured: a 300 KB OTLP record is stored whole)."""
    victorialogs_cluster: bool = False
    """Run VictoriaLogs as a cluster: two storage nodes (``vlstorage-0``, ``vlstorage-1``, on ports
    ``vlstorage_0``/``vlstorage_1``, each with its own data folder) behind the ``victorialogs`` component, which
    then stores nothing itself and serves ingestion and LogsQL on the same port by routing to them
    (``-storageNode``). The collector and every query client see no difference. See docs/scale.md."""
    tsdb_cluster: bool = False
    """Replace Prometheus by a distributed TSDB behind the same remote-write contract: two Thanos receivers
    (``thanos-receive-0``, ``thanos-receive-1``) in one hashring with replication factor 1 (series are sharded
    between them, each has its own data folder), and a Thanos querier over both. The collector remote-writes to
    the first receiver, which forwards each series to its owner; :attr:`Stack.prometheus_url
    <otel_rl_ops.stack.services.Stack.prometheus_url>` is the querier's Prometheus query API. Prometheus does not run:
    Thanos Ruler (``thanos-rule``) evaluates the rules against the querier and sends to the same Alertmanager, and
    the collector's own metrics are not scraped. Needs the Thanos binary (``otel-rl stack install --cluster``). See
    docs/scale.md."""
    alert_webhook_url: str | None = None
    """Where Alertmanager also delivers every notification (its JSON, firing and resolved), e.g.
    ``"http://127.0.0.1:8080/alerts"``: added as a webhook to each receiver of ``alertmanager/alertmanager.yml``.
    ``None``: the shipped receivers only, which deliver nowhere until given integrations (docs/dashboards.md); the
    alerts are still in Alertmanager (``otel-rl alerts``)."""
    grafana_url: str = "http://127.0.0.1:3000"
    """Base URL of the Grafana that shows the "RL run" dashboard: every alert's ``dashboard_url`` annotation links
    below it (``/d/otel-rl-run/rl-run?var-run=<run>``). Rendered as the external label ``otel_rl_grafana_url``
    (Prometheus, Thanos Ruler)."""
    runbook_url: str | None = None
    """URL of ``docs/runbooks.md`` (where you publish the docs): every alert's ``runbook_url`` annotation is it plus
    ``#<alert name, lower case>``. ``None``: the runbooks the package carries (``file://...``). Rendered as the
    external label ``otel_rl_runbook_url``."""
    rule_files: tuple[Path, ...] = ()
    """The rule files Prometheus (or Thanos Ruler) evaluates; empty: every ``*.yml`` of ``prometheus/rules/``."""
    secure: bool = False
    """The secure profile (docs/reliability.md, "Security"): OTLP only over TLS with the bearer token, Prometheus
    and VictoriaLogs only over TLS with basic auth (Prometheus's lifecycle API off), the collector authenticating to
    both, its health and own metrics on 127.0.0.1 only. The secrets are files made once in ``<state_dir>/secrets``
    (:meth:`secrets`). The same settings as docker-compose.yml. Not with the cluster profiles."""
    mtls: bool = False
    """With :attr:`secure`: the collector also requires a client certificate signed by the stack's CA (mutual TLS;
    ``client.pem`` and ``client.key`` of :meth:`secrets`)."""
    ready_timeout_s: float = 60.0
    """Seconds to wait for each component to report healthy after starting it."""
    stop_timeout_s: float = 10.0
    """Seconds to wait after SIGTERM before SIGKILL."""

    def __post_init__(self) -> None:
        if not isinstance(self.ports, StackPorts):
            raise TypeError(f'"ports" must be a StackPorts, got {self.ports!r}')
        if not self.host:
            raise ValueError(f'"host" must be a non-empty address, got {self.host!r}')
        clashes = sorted(set(self.collector_environment) & set(COLLECTOR_ENV_NAMES))
        if clashes:
            raise ValueError(f'"collector_environment" must not set the stack\'s own variables, got {clashes!r}')
        for name in ("victorialogs_cluster", "tsdb_cluster"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f'"{name}" must be a bool, got {getattr(self, name)!r}')
        for name in ("ready_timeout_s", "stop_timeout_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f'"{name}" must be a number > 0, got {value!r}')
        if not isinstance(self.victorialogs_flags, tuple) or not all(
            isinstance(flag, str) and flag.startswith("-") for flag in self.victorialogs_flags
        ):
            raise ValueError(
                f'"victorialogs_flags" must be a tuple of "-flag=value" strings, got {self.victorialogs_flags!r}'
            )
        for name, schemes in (
            ("alert_webhook_url", ("http://", "https://")),
            ("grafana_url", ("http://", "https://")),
            ("runbook_url", ("http://", "https://", "file://")),
        ):
            value = getattr(self, name)
            if (value is not None or name == "grafana_url") and not (
                isinstance(value, str) and value.startswith(schemes)
            ):
                raise ValueError(f'"{name}" must be a URL starting with one of {schemes!r}, got {value!r}')
        for name in ("secure", "mtls"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f'"{name}" must be a bool, got {getattr(self, name)!r}')
        if self.mtls and not self.secure:
            raise ValueError(
                f'"mtls" needs "secure" (mutual TLS is part of the secure profile), got secure={self.secure!r}'
            )
        if self.secure and (self.victorialogs_cluster or self.tsdb_cluster):
            raise ValueError(
                '"secure" is the single-node profile: it cannot be combined with "victorialogs_cluster" or '
                f'"tsdb_cluster", got victorialogs_cluster={self.victorialogs_cluster!r} '
                f"tsdb_cluster={self.tsdb_cluster!r}"
            )
        for name in ("prometheus_retention", "victorialogs_retention", "jaeger_retention"):
            if not getattr(self, name):
                raise ValueError(f'"{name}" must be a non-empty duration such as "7d", got {getattr(self, name)!r}')

    def resolved_root(self) -> Path:
        """Return :attr:`root`, or the package's checked data root (:func:`~otel_rl_ops.stack.layout.data_root`)."""
        return data_root() if self.root is None else self.root

    def resolved_state_dir(self) -> Path:
        """Return :attr:`state_dir`, or ``<home>/stack``; always absolute."""
        state = layout.default_state_dir(self.home) if self.state_dir is None else self.state_dir
        return state.expanduser().resolve()

    def resolved_rule_files(self) -> tuple[Path, ...]:
        """Return :attr:`rule_files`, or every ``*.yml`` of the data root's ``prometheus/rules/``; absolute."""
        files = self.rule_files or tuple(sorted(layout.prometheus_rules_dir(self.resolved_root()).glob("*.yml")))
        return tuple(path.expanduser().resolve() for path in files)

    def external_labels(self) -> dict[str, str]:
        """Return the external labels of the stack's rule evaluator (Prometheus, Thanos Ruler): the links every alert
        annotation builds on (:attr:`grafana_url`, :attr:`runbook_url`)."""
        runbook = self.runbook_url or layout.runbooks(self.resolved_root()).resolve().as_uri()
        return {"otel_rl_grafana_url": self.grafana_url.rstrip("/"), "otel_rl_runbook_url": runbook}

    def secrets(self) -> StackSecrets:
        """Return the secure profile's secrets (``<state_dir>/secrets``), made first if missing; the server
        certificate names 127.0.0.1, localhost and :attr:`host`."""
        hosts = ("127.0.0.1", "localhost", self.host)
        return ensure_secrets(self.resolved_state_dir() / "secrets", hosts=tuple(h for h in hosts if h != "0.0.0.0"))  # noqa: S104 - excluded, not bound

    def resolved_collector_configs(self) -> tuple[Path, ...]:
        """Return :attr:`collector_configs`, or the data root's default collector configuration; absolute. The
        secure profile adds ``collector_config/secure.yaml`` last (unless it is there already)."""
        configs = self.collector_configs or layout.collector_configs(self.resolved_root())
        secure_overlay = self.resolved_root() / "collector_config" / "secure.yaml"
        if self.secure and secure_overlay.resolve() not in {path.expanduser().resolve() for path in configs}:
            configs = (*configs, secure_overlay)
        return tuple(path.expanduser().resolve() for path in configs)


def render_prometheus_config(template: Path, config: StackConfig) -> str:
    """Return the Prometheus configuration of the stack configured by ``config``, rendered from the data root's
    ``template``.

    ``rule_files`` become the stack's (:meth:`StackConfig.resolved_rule_files`); the ``prometheus`` and ``otelcol``
    scrape jobs are pointed at this stack's Prometheus and collector-metrics ports, the ``alerting`` section's
    Alertmanagers at its Alertmanager; the external labels get the links the alert annotations build on
    (:meth:`StackConfig.external_labels`), on top of the template's.

    Raises:
        ValueError: when the template is not a YAML mapping.
    """
    data: Any = yaml.safe_load(template.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"Prometheus config template {str(template)!r} must be a YAML mapping, got {data!r}")
    ports, host = config.ports, config.host
    data["rule_files"] = [str(path) for path in config.resolved_rule_files()]
    targets = {"prometheus": ports.prometheus, "otelcol": ports.collector_metrics}
    for job in data.get("scrape_configs") or ():
        port = targets.get(job.get("job_name"))
        if port is not None:
            job["static_configs"] = [{"targets": [f"{host}:{port}"]}]
    global_section = data.setdefault("global", {})
    global_section["external_labels"] = {**(global_section.get("external_labels") or {}), **config.external_labels()}
    for alertmanager in (data.get("alerting") or {}).get("alertmanagers") or ():
        alertmanager["static_configs"] = [{"targets": [f"{host}:{ports.alertmanager}"]}]
    body: str = yaml.safe_dump(data, sort_keys=False)
    return f"# Rendered by otel_rl_ops.stack from {template}; do not edit.\n{body}"


def render_alertmanager_config(template: Path, config: StackConfig) -> str:
    """Return the Alertmanager configuration of the stack configured by ``config``, rendered from the data root's
    ``template`` (``alertmanager/alertmanager.yml``).

    ``templates`` entries become absolute paths (relative ones are taken from the template's folder); with
    :attr:`StackConfig.alert_webhook_url`, every receiver also gets a webhook to it (``send_resolved``, so resolved
    notifications come too). Routes, grouping and inhibitions stay as shipped.

    Raises:
        ValueError: when the template is not a YAML mapping.
    """
    data: Any = yaml.safe_load(template.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"Alertmanager config template {str(template)!r} must be a YAML mapping, got {data!r}")
    data["templates"] = [str((template.parent / str(entry)).resolve()) for entry in data.get("templates") or ()]
    if config.alert_webhook_url is not None:
        for receiver in data.get("receivers") or ():
            webhook = {"url": config.alert_webhook_url, "send_resolved": True}
            receiver["webhook_configs"] = [*(receiver.get("webhook_configs") or ()), webhook]
    body: str = yaml.safe_dump(data, sort_keys=False)
    return f"# Rendered by otel_rl_ops.stack from {template}; do not edit.\n{body}"
