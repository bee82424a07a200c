"""The stack's components, one :class:`ComponentSpec` each: where it listens, how its health is asked, how it starts.

:class:`~otel_rl.stack.services.Stack` runs every component the same way from its spec; what differs between
VictoriaLogs, Prometheus and the collector is written here and nowhere else.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import yaml

from otel_rl.stack import env as stack_env
from otel_rl.stack import layout
from otel_rl.stack.config import StackConfig, StackPorts, render_prometheus_config
from otel_rl.stack.install import Binaries

ComponentName = Literal[
    "vlstorage-0",
    "vlstorage-1",
    "victorialogs",
    "thanos-receive-0",
    "thanos-receive-1",
    "thanos-query",
    "prometheus",
    "collector",
]
"""The components of a stack. ``vlstorage-*`` run only in the VictoriaLogs cluster profile
(:attr:`~otel_rl.stack.config.StackConfig.victorialogs_cluster`), ``thanos-*`` only in the TSDB cluster profile
(:attr:`~otel_rl.stack.config.StackConfig.tsdb_cluster`), which runs no ``prometheus``."""

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
    """The :class:`~otel_rl.stack.config.StackPorts` fields it listens on (checked free before it starts)."""
    health_port: str
    """The :class:`~otel_rl.stack.config.StackPorts` field of its health endpoint; one of :attr:`listen_ports`."""
    health_path: str
    """The path that answers HTTP 200 when it is ready, e.g. ``"/health"``."""
    command: CommandBuilder
    """Builds its command line, environment and input files."""
    enabled: Callable[[StackConfig], bool] = lambda config: True
    """Whether a stack with this configuration runs it (the ``vlstorage-*`` nodes: only in the cluster profile)."""

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
        return base_url(config, getattr(config.ports, self.health_port)) + self.health_path


def base_url(config: StackConfig, port: int) -> str:
    """Return ``http://<host>:<port>`` for the stack configured by ``config``."""
    return f"http://{config.host}:{port}"


def query_url(config: StackConfig) -> str:
    """Return the base URL of the stack's Prometheus query API (``/api/v1/query`` below it): Prometheus, or the
    Thanos querier in the TSDB cluster profile."""
    return base_url(config, config.ports.thanos_query if config.tsdb_cluster else config.ports.prometheus)


REMOTE_WRITE_PATH: Final = "/api/v1/write"
"""Prometheus's remote-write receiver path (``--web.enable-remote-write-receiver``)."""

THANOS_RECEIVE_PATH: Final = "/api/v1/receive"
"""The remote-write path of a Thanos receiver (v0.42.5 ``pkg/receive/handler.go``: the only one it serves)."""


def remote_write_url(config: StackConfig) -> str:
    """Return ``OTEL_RL_REMOTE_WRITE_URL`` for the collector: Prometheus's receiver, or in the TSDB cluster profile
    the first Thanos receiver (it forwards each series to its owner in the hashring)."""
    if config.tsdb_cluster:
        return f"{base_url(config, config.ports.thanos_receive_0_write)}{THANOS_RECEIVE_PATH}"
    return f"{base_url(config, config.ports.prometheus)}{REMOTE_WRITE_PATH}"


def collector_environment(config: StackConfig) -> dict[str, str]:
    """Return the variables (see :mod:`otel_rl.stack.env`) the collector configuration reads for this stack."""
    ports, host = config.ports, config.host
    return {
        stack_env.COLLECTOR_OTLP_GRPC_ENDPOINT: f"{host}:{ports.otlp_grpc}",
        stack_env.COLLECTOR_OTLP_HTTP_ENDPOINT: f"{host}:{ports.otlp_http}",
        stack_env.COLLECTOR_HEALTH_ENDPOINT: f"{host}:{ports.collector_health}",
        stack_env.COLLECTOR_METRICS_HOST: host,
        stack_env.COLLECTOR_METRICS_PORT: str(ports.collector_metrics),
        stack_env.COLLECTOR_REMOTE_WRITE_URL: remote_write_url(config),
        stack_env.COLLECTOR_VICTORIALOGS_URL: base_url(config, ports.victorialogs),
        stack_env.COLLECTOR_QUEUE_DIR: str(config.resolved_state_dir() / "data" / "collector" / "queue"),
    }


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
    return Command(argv=(*argv, *config.victorialogs_flags), environment={}, inputs=())


VLSTORAGE_PORTS: Final = ("vlstorage_0", "vlstorage_1")
"""The :class:`~otel_rl.stack.config.StackPorts` fields of the cluster profile's storage nodes, in node order."""


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
:class:`~otel_rl.stack.config.StackPorts` fields (``<prefix>_write``, ``_grpc``, ``_http``, ``_capnp``), in hashring
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


def _thanos_query_command(config: StackConfig, binaries: Binaries, state_dir: Path) -> Command:
    """The Thanos querier of the TSDB cluster profile: the Prometheus query API over both receivers.

    Both receivers are ``strict`` endpoints (``<state_dir>/thanos-endpoints.yml``): they stay in the querier's set
    while down instead of being dropped after a failed health check, and partial responses are off, so a query
    while a receiver is down fails instead of answering from half the series (a partial total looks like a loss).
    """
    if binaries.thanos is None:
        raise ValueError('"binaries.thanos" must be set to run thanos-query (install_all(cluster=True)), got None')
    state_dir.mkdir(parents=True, exist_ok=True)
    endpoints = {"endpoints": [{"address": _receiver_endpoint(config, p), "strict": True} for _, p in THANOS_RECEIVERS]}
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


def _tsdb_cluster_only(config: StackConfig) -> bool:
    return config.tsdb_cluster


def _prometheus_enabled(config: StackConfig) -> bool:
    return not config.tsdb_cluster


def _prometheus_command(config: StackConfig, binaries: Binaries, state_dir: Path) -> Command:
    """Prometheus: renders ``<state_dir>/prometheus.yml`` from the repository's template for this stack's ports."""
    data_dir = _data_dir(state_dir, "prometheus")  # also creates the state directory, where the config goes
    root = config.resolved_root()
    rules_dir = layout.prometheus_rules_dir(root)
    rendered = state_dir / "prometheus.yml"
    rendered.write_text(
        render_prometheus_config(
            layout.prometheus_config(root), ports=config.ports, host=config.host, rules_dir=rules_dir
        ),
        encoding="utf-8",
    )
    argv = (
        str(binaries.prometheus),
        f"--config.file={rendered}",
        f"--storage.tsdb.path={data_dir}",
        f"--storage.tsdb.retention.time={config.prometheus_retention}",
        f"--web.listen-address={config.host}:{config.ports.prometheus}",
        "--web.enable-remote-write-receiver",
        "--web.enable-lifecycle",
        "--enable-feature=exemplar-storage",
    )
    return Command(argv=argv, environment={}, inputs=(rendered, *sorted(rules_dir.glob("*.yml"))))


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
            name="thanos-query",
            listen_ports=("thanos_query", "thanos_query_grpc"),
            health_port="thanos_query",
            health_path="/-/ready",
            command=_thanos_query_command,
            enabled=_tsdb_cluster_only,
        ),
        ComponentSpec(
            name="prometheus",
            listen_ports=("prometheus",),
            health_port="prometheus",
            health_path="/-/ready",
            command=_prometheus_command,
            enabled=_prometheus_enabled,
        ),
        ComponentSpec(
            name="collector",
            listen_ports=("otlp_grpc", "otlp_http", "collector_health", "collector_metrics"),
            health_port="collector_health",
            health_path="/",
            command=_collector_command,
        ),
    )
}
"""Every component's spec, in start order (storage nodes before the VictoriaLogs front that writes to them;
receivers before the querier that reads them; VictoriaLogs, Prometheus and the receivers before the collector that
writes to them)."""

ALL_COMPONENTS: Final[tuple[ComponentName, ...]] = tuple(SPECS)
"""Every component of every profile, in start order."""

COMPONENTS: Final[tuple[ComponentName, ...]] = ("victorialogs", "prometheus", "collector")
"""The components of the default (single-node) stack, in start order."""


def active_components(config: StackConfig) -> tuple[ComponentName, ...]:
    """Return the components a stack with this configuration runs, in start order."""
    return tuple(name for name in ALL_COMPONENTS if SPECS[name].enabled(config))
