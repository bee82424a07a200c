"""The stack's components, one :class:`ComponentSpec` each: where it listens, how its health is asked, how it starts.

:class:`~otel_rl_ops.stack.services.Stack` runs every component the same way from its spec; what differs between
VictoriaLogs, Prometheus and the collector is written here and nowhere else.
"""

from __future__ import annotations

import dataclasses
import glob
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import yaml

from otel_rl_ops.stack import env as stack_env
from otel_rl_ops.stack import layout
from otel_rl_ops.stack.config import StackConfig, StackPorts, render_alertmanager_config, render_prometheus_config
from otel_rl_ops.stack.install import Binaries

ComponentName = Literal[
    "alertmanager",
    "vlstorage-0",
    "vlstorage-1",
    "victorialogs",
    "jaeger",
    "thanos-receive-0",
    "thanos-receive-1",
    "thanos-store",
    "thanos-query",
    "thanos-rule",
    "prometheus",
    "collector",
]
"""The components of a stack. ``vlstorage-*`` run only in the VictoriaLogs cluster profile
(:attr:`~otel_rl_ops.stack.config.StackConfig.victorialogs_cluster`), ``thanos-*`` only in the TSDB cluster profile
(:attr:`~otel_rl_ops.stack.config.StackConfig.tsdb_cluster`), which runs no ``prometheus`` (``thanos-rule`` evaluates
the rules instead)."""

_PORT_NAMES: Final = frozenset(item.name for item in dataclasses.fields(StackPorts))


@dataclass(frozen=True, kw_only=True)
class Command:
    """What starts one component."""

    argv: tuple[str, ...]
    """Executable and arguments."""
    environment: Mapping[str, str]
    """Variables set on top of the starting process's environment."""
    inputs: tuple[Path, ...]
    """Files the component reads (configs, rules): each must exist, and their contents go into the launch digest,
    so that ``Stack.up`` restarts a component whose files changed."""


CommandBuilder = Callable[[StackConfig, Binaries, Path], Command]
"""Returns the command that starts a component of the stack with this configuration, these binaries and this
state directory (which may not exist yet); it creates the component's data folder and writes its rendered config,
if any."""


@dataclass(frozen=True, kw_only=True)
class ComponentSpec:
    """Everything that distinguishes one component from the others."""

    name: ComponentName
    """The component."""
    listen_ports: tuple[str, ...]
    """The :class:`~otel_rl_ops.stack.config.StackPorts` fields it listens on (checked free before it starts)."""
    health_port: str
    """The :class:`~otel_rl_ops.stack.config.StackPorts` field of its health endpoint; one of :attr:`listen_ports`."""
    health_path: str
    """The path that answers HTTP 200 when it is ready, e.g. ``"/health"``."""
    command: CommandBuilder
    """Builds its command line, environment and input files."""
    enabled: Callable[[StackConfig], bool] = lambda config: True
    """Whether a stack with this configuration runs it (the ``vlstorage-*`` nodes: only in the cluster profile)."""
    secured: Literal["tls", "loopback"] | None = None
    """What the secure profile does to its health endpoint: ``"tls"`` serves it, with the rest of its HTTP API, over
    TLS with basic auth (Prometheus, VictoriaLogs, Alertmanager), ``"loopback"`` keeps it plain on 127.0.0.1 (the
    collector's health and own metrics, which carry no run data; Jaeger's health check, while its query API and
    receiver take TLS and basic auth)."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.listen_ports) - _PORT_NAMES)
        if unknown:
            raise ValueError(f'"listen_ports" must be StackPorts fields {sorted(_PORT_NAMES)!r}, got {unknown!r}')
        if self.health_port not in self.listen_ports:
            raise ValueError(
                f'"health_port" must be one of "listen_ports" {self.listen_ports!r}, got {self.health_port!r}'
            )
        if not self.health_path.startswith("/"):
            raise ValueError(f'"health_path" must start with "/", got {self.health_path!r}')

    def ports(self, config: StackConfig) -> list[tuple[str, int]]:
        """Return the ``(field, port)`` pairs it listens on in the stack configured by ``config``."""
        return [(port_name, getattr(config.ports, port_name)) for port_name in self.listen_ports]

    def health_url(self, config: StackConfig) -> str:
        """Return the URL that answers 200 when it is ready, in the stack configured by ``config``."""
        port = getattr(config.ports, self.health_port)
        if config.secure and self.secured == "tls":
            return api_url(config, port) + self.health_path
        if config.secure and self.secured == "loopback":
            return f"http://127.0.0.1:{port}{self.health_path}"
        return base_url(config, port) + self.health_path


def base_url(config: StackConfig, port: int) -> str:
    """Return ``http://<host>:<port>`` for the stack configured by ``config``."""
    return f"http://{config.host}:{port}"


def api_url(config: StackConfig, port: int) -> str:
    """Return the base URL of a store's HTTP API (Prometheus, VictoriaLogs): ``https://`` in the secure profile."""
    return f"{'https' if config.secure else 'http'}://{config.host}:{port}"


def query_url(config: StackConfig) -> str:
    """Return the base URL of the stack's Prometheus query API (``/api/v1/query`` below it): Prometheus, or the
    Thanos querier in the TSDB cluster profile."""
    return api_url(config, config.ports.thanos_query if config.tsdb_cluster else config.ports.prometheus)


def jaeger_url(config: StackConfig) -> str:
    """Return the base URL of the stack's Jaeger query API (``/api/v3/traces/<id>``, ``/api/traces``):
    ``https://`` in the secure profile."""
    return api_url(config, config.ports.jaeger_query)


def alertmanager_url(config: StackConfig) -> str:
    """Return the base URL of the stack's Alertmanager (its API under ``/api/v2/``): ``https://`` in the secure
    profile."""
    return api_url(config, config.ports.alertmanager)


REMOTE_WRITE_PATH: Final = "/api/v1/write"
"""Prometheus's remote-write receiver path (``--web.enable-remote-write-receiver``)."""

THANOS_RECEIVE_PATH: Final = "/api/v1/receive"
"""The remote-write path of a Thanos receiver (v0.42.5 ``pkg/receive/handler.go``: the only one it serves)."""


def remote_write_url(config: StackConfig) -> str:
    """Return ``OTEL_RL_REMOTE_WRITE_URL`` for the collector: Prometheus's receiver, or in the TSDB cluster profile
    the first Thanos receiver (it forwards each series to its owner in the hashring)."""
    if config.tsdb_cluster:
        return f"{base_url(config, config.ports.thanos_receive_0_write)}{THANOS_RECEIVE_PATH}"
    return f"{api_url(config, config.ports.prometheus)}{REMOTE_WRITE_PATH}"


def collector_environment(config: StackConfig) -> dict[str, str]:
    """Return the variables (see :mod:`otel_rl_ops.stack.env`) the collector configuration reads for this stack."""
    ports, host = config.ports, config.host
    internal = "127.0.0.1" if config.secure else host  # health and own metrics: no run data, no auth, never public
    environment = {
        stack_env.COLLECTOR_OTLP_GRPC_ENDPOINT: f"{host}:{ports.otlp_grpc}",
        stack_env.COLLECTOR_OTLP_HTTP_ENDPOINT: f"{host}:{ports.otlp_http}",
        stack_env.COLLECTOR_HEALTH_ENDPOINT: f"{internal}:{ports.collector_health}",
        stack_env.COLLECTOR_METRICS_HOST: internal,
        stack_env.COLLECTOR_METRICS_PORT: str(ports.collector_metrics),
        stack_env.COLLECTOR_REMOTE_WRITE_URL: remote_write_url(config),
        stack_env.COLLECTOR_VICTORIALOGS_URL: api_url(config, ports.victorialogs),
        stack_env.COLLECTOR_JAEGER_URL: api_url(config, ports.jaeger_otlp),
        stack_env.COLLECTOR_QUEUE_DIR: str(config.resolved_state_dir() / "data" / "collector" / "queue"),
    }
    if config.secure:
        secrets = config.secrets()
        environment |= {
            stack_env.COLLECTOR_TLS_CERT_FILE: str(secrets.server_cert),
            stack_env.COLLECTOR_TLS_KEY_FILE: str(secrets.server_key),
            stack_env.COLLECTOR_BEARER_TOKEN_FILE: str(secrets.otlp_token),
            stack_env.COLLECTOR_TLS_CLIENT_CA_FILE: str(secrets.ca) if config.mtls else "",
            stack_env.COLLECTOR_TLS_CA_FILE: str(secrets.ca),
            stack_env.COLLECTOR_PROMETHEUS_AUTHORIZATION_FILE: str(secrets.authorization("prometheus")),
            stack_env.COLLECTOR_VICTORIALOGS_AUTHORIZATION_FILE: str(secrets.authorization("victorialogs")),
            stack_env.COLLECTOR_JAEGER_AUTHORIZATION_FILE: str(secrets.authorization("jaeger")),
        }
    return environment


def jaeger_environment(config: StackConfig, data_dir: Path) -> dict[str, str]:
    """Return the variables (see :mod:`otel_rl_ops.stack.env`) Jaeger's configuration reads for this stack: its listen
    addresses (the health check on 127.0.0.1 in the secure profile), its storage folder and retention, and in the
    secure profile the server certificate and its htpasswd file."""
    ports, host = config.ports, config.host
    environment = {
        stack_env.JAEGER_OTLP_ENDPOINT: f"{host}:{ports.jaeger_otlp}",
        stack_env.JAEGER_QUERY_ENDPOINT: f"{host}:{ports.jaeger_query}",
        stack_env.JAEGER_QUERY_GRPC_ENDPOINT: f"{host}:{ports.jaeger_query_grpc}",
        stack_env.JAEGER_HEALTH_ENDPOINT: f"{'127.0.0.1' if config.secure else host}:{ports.jaeger_health}",
        stack_env.JAEGER_DATA_DIR: str(data_dir),
        stack_env.JAEGER_RETENTION: config.jaeger_retention,
    }
    if config.secure:
        secrets = config.secrets()
        environment |= {
            stack_env.JAEGER_HTPASSWD_FILE: str(secrets.jaeger_htpasswd),
            stack_env.COLLECTOR_TLS_CERT_FILE: str(secrets.server_cert),
            stack_env.COLLECTOR_TLS_KEY_FILE: str(secrets.server_key),
        }
    return environment


def secure_flags(config: StackConfig, store: Literal["prometheus", "victorialogs"]) -> tuple[str, ...]:
    """The flags that put ``store``'s HTTP API behind TLS and basic auth in the secure profile (none otherwise);
    they name files only, never a secret. Prometheus also loses ``--web.enable-lifecycle`` (``/-/quit``,
    ``/-/reload``), which the default profile keeps."""
    if not config.secure:
        return ("--web.enable-lifecycle",) if store == "prometheus" else ()
    secrets = config.secrets()
    if store == "prometheus":
        return (f"--web.config.file={secrets.prometheus_web_config}",)
    user, _ = secrets.basic_auth(store)
    return (
        "-tls",
        f"-tlsCertFile={secrets.server_cert}",
        f"-tlsKeyFile={secrets.server_key}",
        "-tlsMinVersion=TLS12",
        f"-httpAuth.username={user}",
        f"-httpAuth.password=file://{secrets.password(store)}",
    )


def _secure_scrapes(rendered: Path, config: StackConfig) -> None:
    """In the secure profile, Prometheus scrapes itself over TLS with its basic auth (password from its file) and
    the collector's own metrics on 127.0.0.1, where the collector serves them, and sends alerts to Alertmanager over
    TLS with Alertmanager's basic auth."""
    secrets = config.secrets()
    header, _, body = rendered.read_text(encoding="utf-8").partition("\n")
    data = yaml.safe_load(body)
    for job in data.get("scrape_configs") or ():
        if job.get("job_name") == "prometheus":
            job |= {
                "scheme": "https",
                "tls_config": {"ca_file": str(secrets.ca)},
                "basic_auth": {
                    "username": secrets.basic_auth("prometheus")[0],
                    "password_file": str(secrets.password("prometheus")),
                },
            }
        if job.get("job_name") == "otelcol":
            job["static_configs"] = [{"targets": [f"127.0.0.1:{config.ports.collector_metrics}"]}]
    for alertmanager in (data.get("alerting") or {}).get("alertmanagers") or ():  # its own TLS and basic auth
        alertmanager |= {
            "scheme": "https",
            "tls_config": {"ca_file": str(secrets.ca)},
            "basic_auth": {
                "username": secrets.basic_auth("alertmanager")[0],
                "password_file": str(secrets.password("alertmanager")),
            },
        }
    rendered.write_text(f"{header}\n{yaml.safe_dump(data, sort_keys=False)}", encoding="utf-8")


def _data_dir(state_dir: Path, name: ComponentName) -> Path:
    """Create and return ``<state_dir>/data/<name>``, the storage of component ``name``."""
    path = state_dir / "data" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _victorialogs_command(config: StackConfig, binaries: Binaries, state_dir: Path) -> Command:
    """VictoriaLogs: storage under the state directory, retention and limits from the configuration.

    In the cluster profile the same binary is the stateless front (vlinsert and vlselect in one process): with
    ``-storageNode`` it spreads ingested logs over the storage nodes and fans queries out to all of them
    (VictoriaLogs v1.52.1 ``-help``: "Comma-separated list of TCP addresses for storage nodes to route the ingested
    logs to and to send select queries to")."""
    listen = f"-httpListenAddr={config.host}:{config.ports.victorialogs}"
    if config.victorialogs_cluster:
        nodes = ",".join(f"{config.host}:{getattr(config.ports, port)}" for port in VLSTORAGE_PORTS)
        argv: tuple[str, ...] = (str(binaries.victorialogs), f"-storageNode={nodes}", listen)
    else:
        argv = (
            str(binaries.victorialogs),
            f"-storageDataPath={_data_dir(state_dir, 'victorialogs')}",
            listen,
            f"-retentionPeriod={config.victorialogs_retention}",
        )
    flags = (*config.victorialogs_flags, *secure_flags(config, "victorialogs"))
    return Command(argv=(*argv, *flags), environment={}, inputs=())


VLSTORAGE_PORTS: Final = ("vlstorage_0", "vlstorage_1")
"""The :class:`~otel_rl_ops.stack.config.StackPorts` fields of the cluster profile's storage nodes, in node order."""


def _vlstorage_command(index: int) -> CommandBuilder:
    """A VictoriaLogs storage node (vlstorage) of the cluster profile: the same binary without ``-storageNode``,
    its own data folder; the front reaches it on its HTTP port (``/internal/insert``, ``/internal/select``).

    Rows a node has acknowledged live in memory until it writes them to disk: measured on v1.52.1, a row reached
    disk 10.0-10.1 s after ingestion with the default ``-inmemoryDataFlushInterval=5s`` and 2.1 s with ``1s``, and
    a SIGKILL before that loses it. Storage nodes are the part of the cluster that crashes lose data on, so they
    run with ``1s`` (docs/scale.md)."""

    def command(config: StackConfig, binaries: Binaries, state_dir: Path) -> Command:
        name: ComponentName = "vlstorage-0" if index == 0 else "vlstorage-1"
        argv = (
            str(binaries.victorialogs),
            f"-storageDataPath={_data_dir(state_dir, name)}",
            f"-httpListenAddr={config.host}:{getattr(config.ports, VLSTORAGE_PORTS[index])}",
            f"-retentionPeriod={config.victorialogs_retention}",
            "-inmemoryDataFlushInterval=1s",
            *config.victorialogs_flags,
        )
        return Command(argv=argv, environment={}, inputs=())

    return command


def _cluster_only(config: StackConfig) -> bool:
    return config.victorialogs_cluster


THANOS_RECEIVERS: Final[tuple[tuple[ComponentName, str], ...]] = (
    ("thanos-receive-0", "thanos_receive_0"),
    ("thanos-receive-1", "thanos_receive_1"),
)
"""The TSDB cluster profile's receivers: component name and the prefix of their
:class:`~otel_rl_ops.stack.config.StackPorts` fields (``<prefix>_write``, ``_grpc``, ``_http``, ``_capnp``), in hashring
order."""


def _receiver_endpoint(config: StackConfig, prefix: str, kind: str = "grpc") -> str:
    """Return ``host:port`` of a receiver's ``kind`` port: its gRPC is its name in the hashring and the querier's
    Store API endpoint."""
    return f"{config.host}:{getattr(config.ports, f'{prefix}_{kind}')}"


def _write_if_changed(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` unless it already holds it (Thanos watches its hashring file); return ``path``."""
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def _thanos_receive_command(index: int) -> CommandBuilder:
    """A Thanos receiver of the TSDB cluster profile: its own TSDB folder, and the hashring file
    ``<state_dir>/thanos-hashring.json`` that lists both receivers' gRPC (and Cap'n Proto) endpoints (each finds
    itself there by ``--receive.local-endpoint``). Replication factor 1: every series is stored by exactly one
    receiver, the one the hashring names; a receiver forwards the series it does not own to the other over gRPC.
    Native histograms are on by default in v0.42.5 (``--tsdb.enable-native-histograms``). Each receiver announces
    its own external label ``receive_node`` (``thanos receive`` requires one), which shows in query results which
    one holds a series.

    While the owner of a series is down, the other receiver answers a write that holds it with HTTP 503 ("target
    not available"), which the collector retries; measured in docs/scale.md."""
    name, prefix = THANOS_RECEIVERS[index]

    def command(config: StackConfig, binaries: Binaries, state_dir: Path) -> Command:
        data_dir = _data_dir(state_dir, name)
        if binaries.thanos is None:
            raise ValueError(f'"binaries.thanos" must be set to run {name} (install_all(cluster=True)), got None')
        endpoints = [
            {"address": _receiver_endpoint(config, p), "capnproto_address": _receiver_endpoint(config, p, "capnp")}
            for _, p in THANOS_RECEIVERS
        ]
        hashring = [{"hashring": "default", "endpoints": endpoints}]
        hashring_file = _write_if_changed(state_dir / "thanos-hashring.json", json.dumps(hashring, indent=2) + "\n")

        def port(kind: str) -> str:
            return _receiver_endpoint(config, prefix, kind)

        argv = (
            str(binaries.thanos),
            "receive",
            f"--tsdb.path={data_dir}",
            f"--tsdb.retention={config.prometheus_retention}",
            f"--remote-write.address={port('write')}",
            f"--grpc-address={port('grpc')}",
            f"--http-address={port('http')}",
            f"--receive.capnproto-address={port('capnp')}",
            f"--receive.hashrings-file={hashring_file}",
            f"--receive.local-endpoint={_receiver_endpoint(config, prefix)}",
            "--receive.replication-factor=1",
            f'--label=receive_node="{name}"',
        )
        return Command(argv=argv, environment={}, inputs=(hashring_file,))

    return command


def bucket_config(state_dir: Path) -> Path:
    """Write and return ``<state_dir>/thanos-bucket.yml``: the TSDB cluster profile's object storage, a folder
    (Thanos's ``FILESYSTEM`` type, ``<state_dir>/data/thanos-bucket``), which the store gateway serves and
    ``thanos tools bucket upload-blocks`` (``otel-rl replay``) uploads into."""
    folder = state_dir / "data" / "thanos-bucket"
    folder.mkdir(parents=True, exist_ok=True)
    bucket = {"type": "FILESYSTEM", "config": {"directory": str(folder)}}
    return _write_if_changed(state_dir / "thanos-bucket.yml", yaml.safe_dump(bucket, sort_keys=False))


def _thanos_store_command(config: StackConfig, binaries: Binaries, state_dir: Path) -> Command:
    """The Thanos store gateway of the TSDB cluster profile: the bucket's blocks (offline runs that ``otel-rl replay``
    uploaded, with their external labels) through the Store API to the querier. It looks for new blocks every 30 s
    (``--sync-block-duration``; Thanos's default is 15 minutes)."""
    if binaries.thanos is None:
        raise ValueError('"binaries.thanos" must be set to run thanos-store (install_all(cluster=True)), got None')
    bucket = bucket_config(state_dir)
    argv = (
        str(binaries.thanos),
        "store",
        f"--data-dir={_data_dir(state_dir, 'thanos-store')}",
        f"--objstore.config-file={bucket}",
        f"--http-address={config.host}:{config.ports.thanos_store_http}",
        f"--grpc-address={config.host}:{config.ports.thanos_store_grpc}",
        "--sync-block-duration=30s",
    )
    return Command(argv=argv, environment={}, inputs=(bucket,))


def _thanos_query_command(config: StackConfig, binaries: Binaries, state_dir: Path) -> Command:
    """The Thanos querier of the TSDB cluster profile: the Prometheus query API over both receivers.

    Both receivers are ``strict`` endpoints (``<state_dir>/thanos-endpoints.yml``): they stay in the querier's set
    while down instead of being dropped after a failed health check, and partial responses are off, so a query
    while a receiver is down fails instead of answering from half the series (a partial total looks like a loss).
    The store gateway (the bucket: replayed offline runs) is strict too. Thanos Ruler is the last endpoint, not
    strict: the series it records (recording rules, ``ALERTS``) are read from it, and it starts after the querier (it
    queries it), so the querier adds it once it answers.
    """
    if binaries.thanos is None:
        raise ValueError('"binaries.thanos" must be set to run thanos-query (install_all(cluster=True)), got None')
    state_dir.mkdir(parents=True, exist_ok=True)
    receivers = [{"address": _receiver_endpoint(config, p), "strict": True} for _, p in THANOS_RECEIVERS]
    ruler = {"address": f"{config.host}:{config.ports.thanos_rule_grpc}"}
    store = {"address": f"{config.host}:{config.ports.thanos_store_grpc}", "strict": True}
    endpoints = {"endpoints": [*receivers, store, ruler]}
    endpoints_file = _write_if_changed(state_dir / "thanos-endpoints.yml", yaml.safe_dump(endpoints, sort_keys=False))
    argv = (
        str(binaries.thanos),
        "query",
        f"--http-address={config.host}:{config.ports.thanos_query}",
        f"--grpc-address={config.host}:{config.ports.thanos_query_grpc}",
        f"--endpoint.sd-config-file={endpoints_file}",
        "--no-query.partial-response",
    )
    return Command(argv=argv, environment={}, inputs=(endpoints_file,))


def evaluation_interval(root: Path) -> str:
    """Return ``global.evaluation_interval`` of the data root's Prometheus template (Prometheus's default 1m
    when it has none): Thanos Ruler evaluates the rules as often as Prometheus does."""
    data: Any = yaml.safe_load(layout.prometheus_config(root).read_text(encoding="utf-8"))
    interval = ((data or {}).get("global") or {}).get("evaluation_interval") or "1m"
    return str(interval)


def _thanos_rule_command(config: StackConfig, binaries: Binaries, state_dir: Path) -> Command:
    """Thanos Ruler of the TSDB cluster profile, which runs no Prometheus: the stack's rule files (the same ones
    Prometheus evaluates in the default profile) evaluated as often as Prometheus would, against the querier's
    query API; alerts to the stack's Alertmanager; the series it records (recording rules, ``ALERTS``,
    ``ALERTS_FOR_STATE``) in its own TSDB, which the querier reads from its gRPC Store API. The external labels
    are the stack's alert links (:meth:`StackConfig.external_labels`), as on Prometheus.

    The ruler reads back the series it recorded through the querier, like Prometheus from its own TSDB: the
    thresholds (``rl_alert_threshold``) and percentiles the alerts compare are recording rules."""
    if binaries.thanos is None:
        raise ValueError('"binaries.thanos" must be set to run thanos-rule (install_all(cluster=True)), got None')
    data_dir = _data_dir(state_dir, "thanos-rule")
    rule_files = config.resolved_rule_files()
    labels = [f"--label={name}={json.dumps(value)}" for name, value in config.external_labels().items()]
    argv = (
        str(binaries.thanos),
        "rule",
        f"--data-dir={data_dir}",
        f"--tsdb.retention={config.prometheus_retention}",
        *(f"--rule-file={path}" for path in rule_files),
        f"--eval-interval={evaluation_interval(config.resolved_root())}",
        f"--query={query_url(config)}",
        f"--alertmanagers.url={alertmanager_url(config)}",
        f"--alert.query-url={query_url(config)}",
        f"--http-address={config.host}:{config.ports.thanos_rule_http}",
        f"--grpc-address={config.host}:{config.ports.thanos_rule_grpc}",
        *labels,
    )
    return Command(argv=argv, environment={}, inputs=rule_files)


def _alertmanager_command(config: StackConfig, binaries: Binaries, state_dir: Path) -> Command:
    """Alertmanager: renders ``<state_dir>/alertmanager.yml`` from the data root's template (its notification
    templates by absolute path, the stack's webhook if any); silences and notification state under the data folder.
    Listens on the stack's host only; its cluster (gossip) listener, on 0.0.0.0:9094 by default, is off
    (``--cluster.listen-address=``): one Alertmanager, no peers. The secure profile serves its API over TLS with
    basic auth (its own ``--web.config.file``)."""
    data_dir = _data_dir(state_dir, "alertmanager")  # also creates the state directory, where the config goes
    rendered = state_dir / "alertmanager.yml"
    rendered.write_text(
        render_alertmanager_config(layout.alertmanager_config(config.resolved_root()), config), encoding="utf-8"
    )
    patterns = yaml.safe_load(rendered.read_text(encoding="utf-8")).get("templates") or ()
    templates = sorted(Path(path) for pattern in patterns for path in glob.glob(pattern))
    argv = (
        str(binaries.alertmanager),
        f"--config.file={rendered}",
        f"--storage.path={data_dir}",
        f"--web.listen-address={config.host}:{config.ports.alertmanager}",
        f"--web.external-url={alertmanager_url(config)}",
        "--cluster.listen-address=",
        *((f"--web.config.file={config.secrets().alertmanager_web_config}",) if config.secure else ()),
    )
    return Command(argv=argv, environment={}, inputs=(rendered, *templates))


def _tsdb_cluster_only(config: StackConfig) -> bool:
    return config.tsdb_cluster


def _prometheus_enabled(config: StackConfig) -> bool:
    return not config.tsdb_cluster


def _prometheus_command(config: StackConfig, binaries: Binaries, state_dir: Path) -> Command:
    """Prometheus: renders ``<state_dir>/prometheus.yml`` from the data root's template for this stack's ports,
    rule files and Alertmanager."""
    data_dir = _data_dir(state_dir, "prometheus")  # also creates the state directory, where the config goes
    rendered = state_dir / "prometheus.yml"
    rendered.write_text(
        render_prometheus_config(layout.prometheus_config(config.resolved_root()), config), encoding="utf-8"
    )
    if config.secure:
        _secure_scrapes(rendered, config)
    argv = (
        str(binaries.prometheus),
        f"--config.file={rendered}",
        f"--storage.tsdb.path={data_dir}",
        f"--storage.tsdb.retention.time={config.prometheus_retention}",
        f"--web.listen-address={config.host}:{config.ports.prometheus}",
        "--web.enable-remote-write-receiver",
        *secure_flags(config, "prometheus"),
        "--enable-feature=exemplar-storage",
    )
    return Command(argv=argv, environment={}, inputs=(rendered, *config.resolved_rule_files()))


def _jaeger_command(config: StackConfig, binaries: Binaries, state_dir: Path) -> Command:
    """Jaeger v2: ``jaeger/jaeger.yaml`` (and ``jaeger/secure.yaml`` in the secure profile), its Badger storage under
    the data folder."""
    configs = layout.jaeger_configs(config.resolved_root(), secure=config.secure)
    return Command(
        argv=(str(binaries.jaeger), *(f"--config={path}" for path in configs)),
        environment=jaeger_environment(config, _data_dir(state_dir, "jaeger")),
        inputs=configs,
    )


def _collector_command(config: StackConfig, binaries: Binaries, state_dir: Path) -> Command:
    """The collector: the configured ``--config`` files, with the stack's variables on top of the extra ones."""
    configs = config.resolved_collector_configs()
    return Command(
        argv=(str(binaries.collector), *(f"--config={path}" for path in configs)),
        environment={**config.collector_environment, **collector_environment(config)},
        inputs=configs,
    )


SPECS: Final[Mapping[ComponentName, ComponentSpec]] = {
    spec.name: spec
    for spec in (
        ComponentSpec(
            name="alertmanager",
            listen_ports=("alertmanager",),
            health_port="alertmanager",
            health_path="/-/ready",
            command=_alertmanager_command,
            secured="tls",
        ),
        ComponentSpec(
            name="vlstorage-0",
            listen_ports=("vlstorage_0",),
            health_port="vlstorage_0",
            health_path="/health",
            command=_vlstorage_command(0),
            enabled=_cluster_only,
        ),
        ComponentSpec(
            name="vlstorage-1",
            listen_ports=("vlstorage_1",),
            health_port="vlstorage_1",
            health_path="/health",
            command=_vlstorage_command(1),
            enabled=_cluster_only,
        ),
        ComponentSpec(
            name="victorialogs",
            listen_ports=("victorialogs",),
            health_port="victorialogs",
            health_path="/health",
            command=_victorialogs_command,
            secured="tls",
        ),
        ComponentSpec(
            name="jaeger",
            listen_ports=("jaeger_otlp", "jaeger_query", "jaeger_query_grpc", "jaeger_health"),
            health_port="jaeger_health",
            health_path="/status",
            command=_jaeger_command,
            secured="loopback",
        ),
        *(
            ComponentSpec(
                name=name,
                listen_ports=(f"{prefix}_write", f"{prefix}_grpc", f"{prefix}_http", f"{prefix}_capnp"),
                health_port=f"{prefix}_http",
                health_path="/-/ready",
                command=_thanos_receive_command(index),
                enabled=_tsdb_cluster_only,
            )
            for index, (name, prefix) in enumerate(THANOS_RECEIVERS)
        ),
        ComponentSpec(
            name="thanos-store",
            listen_ports=("thanos_store_http", "thanos_store_grpc"),
            health_port="thanos_store_http",
            health_path="/-/ready",
            command=_thanos_store_command,
            enabled=_tsdb_cluster_only,
        ),
        ComponentSpec(
            name="thanos-query",
            listen_ports=("thanos_query", "thanos_query_grpc"),
            health_port="thanos_query",
            health_path="/-/ready",
            command=_thanos_query_command,
            enabled=_tsdb_cluster_only,
        ),
        ComponentSpec(
            name="thanos-rule",
            listen_ports=("thanos_rule_http", "thanos_rule_grpc"),
            health_port="thanos_rule_http",
            health_path="/-/ready",
            command=_thanos_rule_command,
            enabled=_tsdb_cluster_only,
        ),
        ComponentSpec(
            name="prometheus",
            listen_ports=("prometheus",),
            health_port="prometheus",
            health_path="/-/ready",
            command=_prometheus_command,
            secured="tls",
            enabled=_prometheus_enabled,
        ),
        ComponentSpec(
            name="collector",
            listen_ports=("otlp_grpc", "otlp_http", "collector_health", "collector_metrics"),
            health_port="collector_health",
            health_path="/",
            command=_collector_command,
            secured="loopback",
        ),
    )
}
"""Every component's spec, in start order (Alertmanager before the Prometheus or Thanos Ruler that sends to it;
storage nodes before the VictoriaLogs front that writes to them; receivers and the store gateway before the querier
that reads them, the querier before the ruler that queries it; VictoriaLogs, Jaeger, Prometheus and the receivers
before the collector that writes to them)."""

ALL_COMPONENTS: Final[tuple[ComponentName, ...]] = tuple(SPECS)
"""Every component of every profile, in start order."""

COMPONENTS: Final[tuple[ComponentName, ...]] = ("alertmanager", "victorialogs", "jaeger", "prometheus", "collector")
"""The components of the default (single-node) stack, in start order."""


def active_components(config: StackConfig) -> tuple[ComponentName, ...]:
    """Return the components a stack with this configuration runs, in start order."""
    return tuple(name for name in ALL_COMPONENTS if SPECS[name].enabled(config))
