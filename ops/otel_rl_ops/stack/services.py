"""Run the local stack: the OpenTelemetry Collector, Prometheus, Alertmanager, VictoriaLogs and Jaeger as background
processes.

A :class:`Stack` keeps everything in its state directory::

    <state_dir>/stack.json          ports and host of the stack (read by ``otel-rl stack status|down``)
    <state_dir>/run/<name>.pid      pid and start time of each component
    <state_dir>/logs/<name>.log     stdout and stderr of each component (appended)
    <state_dir>/prometheus.yml      Prometheus config rendered from ``prometheus/prometheus.yml``
    <state_dir>/alertmanager.yml    Alertmanager config rendered from ``alertmanager/alertmanager.yml``
    <state_dir>/thanos-*.{json,yml} the Thanos hashring and querier endpoints (TSDB cluster profile)
    <state_dir>/data/<name>/        Prometheus TSDB, Thanos receiver and ruler TSDBs, VictoriaLogs storage,
                                    Alertmanager's silences and notification log, Jaeger's Badger storage

so that another process (the CLI) can report on it and stop it. Start order is Alertmanager, VictoriaLogs, Jaeger,
Prometheus (in the TSDB cluster profile: the Thanos receivers, querier and ruler), then the collector (which writes
to both); stop order is the reverse, so the collector can flush on SIGTERM and the last alerts reach Alertmanager.
What differs between the components (ports, health endpoint, command line) is in their specs,
:data:`components.SPECS`.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import logging
import os
import signal
import socket
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

from otel_rl_ops.stack import components, install
from otel_rl_ops.stack.components import ALL_COMPONENTS, COMPONENTS, SPECS, ComponentName, active_components
from otel_rl_ops.stack.config import StackConfig, StackPorts, find_free_ports
from otel_rl_ops.stack.process import ManagedProcess, ProcessState, tail

__all__ = [
    "ALL_COMPONENTS",
    "COMPONENTS",
    "ComponentName",
    "ComponentStatus",
    "Stack",
    "StackConfig",
    "StackError",
    "StackPorts",
    "find_free_ports",
]

_logger = logging.getLogger(__name__)

_STATE_FILE: Final = "stack.json"
_LOG_TAIL_LINES: Final = 30


class StackError(RuntimeError):
    """A component failed to start, died, or did not become healthy; the message names it and tails its log."""


@dataclass(frozen=True, kw_only=True)
class ComponentStatus:
    """What ``status`` reports about one component."""

    name: ComponentName
    """The component."""
    pid: int | None
    """Its pid, or ``None`` when not running."""
    state: ProcessState
    """``running``, ``paused`` (SIGSTOP) or ``stopped``."""
    healthy: bool
    """Whether its health endpoint answered 200 just now."""
    health_url: str
    """The endpoint that was asked."""
    log_file: Path
    """Where its output goes."""


def _check_name(name: str) -> ComponentName:
    """Return ``name`` as a component name.

    Raises:
        ValueError: when it is not one of :data:`ALL_COMPONENTS`.
    """
    for component in ALL_COMPONENTS:
        if name == component:
            return component
    raise ValueError(f'"name" must be one of {ALL_COMPONENTS!r}, got {name!r}')


def _http_ok(
    url: str, *, timeout_s: float = 1.0, ca: Path | None = None, basic_auth: tuple[str, str] | None = None
) -> tuple[bool, str]:
    """GET ``url`` (trusting ``ca`` for https, sending ``basic_auth``); return ``(True, "")`` on HTTP 200, else
    ``(False, reason)``."""
    request = urllib.request.Request(url)
    if basic_auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(basic_auth).encode()).decode())
    context = ssl.create_default_context(cafile=str(ca)) if ca is not None else None
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
            return response.status == 200, f"HTTP {response.status}"
    except urllib.error.HTTPError as error:
        return False, f"HTTP {error.code}"
    except (urllib.error.URLError, OSError) as error:
        return False, str(getattr(error, "reason", error))


def _port_in_use(host: str, port: int) -> bool:
    """Return whether something already listens on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


class Stack:
    """One local stack: start, check, signal and stop its components.

    Usable as a context manager: ``with Stack(config) as stack:`` runs :meth:`up` and, on exit, :meth:`down`.
    Binaries are installed (or found) on first need by :func:`otel_rl_ops.stack.install.install_all`, unless given.
    """

    def __init__(self, config: StackConfig | None = None, *, binaries: install.Binaries | None = None) -> None:
        """Prepare a stack; nothing starts until :meth:`up` or :meth:`start_component`."""
        self.config = StackConfig() if config is None else config
        self.state_dir = self.config.resolved_state_dir()
        self._binaries = binaries
        self._processes: dict[ComponentName, ManagedProcess] = {
            name: ManagedProcess(
                name,
                pid_file=self.state_dir / "run" / f"{name}.pid",
                log_file=self.state_dir / "logs" / f"{name}.log",
            )
            for name in ALL_COMPONENTS
        }

    @property
    def component_names(self) -> tuple[ComponentName, ...]:
        """The components this stack runs, in start order: :data:`COMPONENTS`, with the two storage nodes before
        VictoriaLogs in the VictoriaLogs cluster profile, and two Thanos receivers, a querier and a ruler instead of
        Prometheus in the TSDB cluster profile."""
        return active_components(self.config)

    @classmethod
    def attach(cls, state_dir: Path, *, config: StackConfig | None = None) -> Stack:
        """Return the stack whose state lives in ``state_dir``, with the ports and host it was started with.

        Falls back to ``config`` (or the defaults) when ``state_dir`` has no ``stack.json`` yet. Used by the CLI's
        ``status`` and ``down`` to act on a stack started by another process.
        """
        base = StackConfig(state_dir=state_dir) if config is None else config
        path = state_dir / _STATE_FILE
        if path.is_file():
            saved = json.loads(path.read_text(encoding="utf-8"))
            base = dataclasses.replace(
                base,
                ports=StackPorts(**saved["ports"]),
                host=saved["host"],
                state_dir=state_dir,
                victorialogs_cluster=bool(saved.get("victorialogs_cluster", False)),
                tsdb_cluster=bool(saved.get("tsdb_cluster", False)),
            )
        return cls(base)

    # Endpoints ---------------------------------------------------------------------------------------------------

    @property
    def otlp_grpc_endpoint(self) -> str:
        """OTLP/gRPC endpoint for ``OTLPMetricExporter(endpoint=..., insecure=True)``: ``http://host:port``."""
        return components.api_url(self.config, self.config.ports.otlp_grpc)

    @property
    def otlp_http_endpoint(self) -> str:
        """OTLP/HTTP base URL (``OTEL_EXPORTER_OTLP_ENDPOINT`` form); signal paths are ``/v1/metrics``, ``/v1/logs``."""
        return components.api_url(self.config, self.config.ports.otlp_http)

    @property
    def prometheus_url(self) -> str:
        """Base URL of the Prometheus query API (under ``/api/v1/``), e.g. ``http://127.0.0.1:9090``: Prometheus,
        or the Thanos querier in the TSDB cluster profile (:attr:`StackConfig.tsdb_cluster`)."""
        return components.query_url(self.config)

    @property
    def alertmanager_url(self) -> str:
        """Base URL of Alertmanager (API under ``/api/v2/``), e.g. ``http://127.0.0.1:9093``."""
        return components.alertmanager_url(self.config)

    @property
    def jaeger_url(self) -> str:
        """Base URL of Jaeger's query API, e.g. ``http://127.0.0.1:16686`` (``/api/v3/traces/<trace id>``)."""
        return components.jaeger_url(self.config)

    @property
    def victorialogs_url(self) -> str:
        """VictoriaLogs base URL, e.g. ``http://127.0.0.1:9428`` (LogsQL under ``/select/logsql/query``)."""
        return components.api_url(self.config, self.config.ports.victorialogs)

    @property
    def collector_health_url(self) -> str:
        """The collector's ``health_check`` URL."""
        return self.health_url("collector")

    def health_url(self, name: ComponentName) -> str:
        """Return the URL that answers 200 when component ``name`` is ready."""
        return SPECS[_check_name(name)].health_url(self.config)

    def log_file(self, name: ComponentName) -> Path:
        """Return the log file of component ``name``."""
        return self._processes[_check_name(name)].log_file

    def collector_environment(self) -> dict[str, str]:
        """Return the variables (see :mod:`otel_rl_ops.stack.env`) the collector configuration reads for this stack."""
        return components.collector_environment(self.config)

    # Lifecycle ---------------------------------------------------------------------------------------------------

    def binaries(self) -> install.Binaries:
        """Return the stack's executables, installing (or building) whatever is missing on first call."""
        if self._binaries is None:
            self._binaries = install.install_all(
                root=self.config.resolved_root(), home=self.config.home, cluster=self.config.tsdb_cluster
            )
        return self._binaries

    def up(self) -> None:
        """Start every component that is not running and wait until all are healthy.

        Raises:
            StackError: when a component fails; the components this call started are stopped again.
        """
        self.binaries()
        started: list[ComponentName] = []
        try:
            for name in self.component_names:
                running = self._processes[name].pid() is not None
                if running and _launch_digest(self._command(name)) != self._recorded_digest(name):
                    _logger.info("restarting %s: its binary or configuration changed since it started", name)
                    self.stop_component(name)
                    running = False
                if running:
                    self.wait_healthy(name)
                else:
                    self.start_component(name)
                    started.append(name)
        except BaseException:
            for name in reversed(started):
                self.stop_component(name)
            raise

    def down(self) -> None:
        """Stop every component (collector first): SIGTERM, wait ``stop_timeout_s``, then SIGKILL."""
        for name in reversed(ALL_COMPONENTS):
            self.stop_component(name)

    def __enter__(self) -> Stack:
        self.up()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.down()

    def start_component(self, name: ComponentName, *, wait: bool = True) -> None:
        """Start component ``name`` if it is not running and, when ``wait``, wait until it is healthy.

        Raises:
            ValueError: for an unknown name.
            StackError: when its port is taken, or it dies or stays unhealthy for ``ready_timeout_s``.
        """
        name = _check_name(name)
        process = self._processes[name]
        if process.pid() is not None:
            if wait:
                self.wait_healthy(name)
            return
        for port_name, port in SPECS[name].ports(self.config):
            if _port_in_use(self.config.host, port):
                raise StackError(
                    f"cannot start {name}: port {port_name}={port!r} on {self.config.host!r} is already in use "
                    "(another stack, or the Debian prometheus service?); choose other ports"
                )
        command = self._command(name)
        self._write_state()
        self._digest_file(name).write_text(_launch_digest(command), encoding="utf-8")
        process.start(list(command.argv), env=_environment(command), cwd=self.state_dir)
        if wait:
            self.wait_healthy(name)

    def stop_component(self, name: ComponentName) -> None:
        """Stop component ``name`` (SIGTERM, then SIGKILL after ``stop_timeout_s``); a stopped one is left alone."""
        self._processes[_check_name(name)].stop(timeout_s=self.config.stop_timeout_s)

    def kill_component(self, name: ComponentName) -> None:
        """SIGKILL component ``name`` (a crash, for tests) and wait until it is gone."""
        self._processes[_check_name(name)].kill()

    def pause_component(self, name: ComponentName) -> None:
        """SIGSTOP component ``name``: it keeps its sockets but answers nothing (a hung process, for tests).

        Raises:
            StackError: when it is not running.
        """
        if not self._processes[_check_name(name)].signal(signal.SIGSTOP):
            raise StackError(f"cannot pause {name}: it is not running")

    def resume_component(self, name: ComponentName) -> None:
        """SIGCONT component ``name`` after :meth:`pause_component`.

        Raises:
            StackError: when it is not running.
        """
        if not self._processes[_check_name(name)].signal(signal.SIGCONT):
            raise StackError(f"cannot resume {name}: it is not running")

    # Inspection --------------------------------------------------------------------------------------------------

    def pid(self, name: ComponentName) -> int | None:
        """Return the pid of component ``name``, or ``None`` when it is not running."""
        return self._processes[_check_name(name)].pid()

    def is_healthy(self, name: ComponentName) -> bool:
        """Return whether component ``name`` runs and its health endpoint answers 200."""
        if self._processes[_check_name(name)].state() != "running":
            return False
        return self._health(name)[0]

    def status(self) -> dict[ComponentName, ComponentStatus]:
        """Return the status of every component this stack runs (:attr:`component_names`), in start order."""
        result: dict[ComponentName, ComponentStatus] = {}
        for name in self.component_names:
            process = self._processes[name]
            result[name] = ComponentStatus(
                name=name,
                pid=process.pid(),
                state=process.state(),
                healthy=self.is_healthy(name),
                health_url=self.health_url(name),
                log_file=process.log_file,
            )
        return result

    def wait_healthy(self, name: ComponentName, *, timeout_s: float | None = None) -> None:
        """Wait until component ``name`` is healthy.

        Raises:
            StackError: when it exits first, or is not healthy after ``timeout_s`` (default ``ready_timeout_s``);
                the message ends with the tail of its log.
        """
        name = _check_name(name)
        process = self._processes[name]
        limit = self.config.ready_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        url = self.health_url(name)
        reason = "not checked"
        while True:
            if process.pid() is None:
                status = process.exit_status()
                how = "is not running" if status is None else f"exited with status {status!r}"
                raise StackError(self._failure(name, f"{name} {how} before becoming healthy at {url}"))
            healthy, reason = self._health(name)
            if healthy:
                return
            if time.monotonic() >= deadline:
                raise StackError(
                    self._failure(name, f"{name} was not healthy at {url} within {limit!r} s (last: {reason})")
                )
            time.sleep(0.2)

    # Internals ---------------------------------------------------------------------------------------------------

    def _health(self, name: ComponentName) -> tuple[bool, str]:
        """Ask component ``name``'s health endpoint, over TLS with its basic auth where the secure profile puts it."""
        if self.config.secure and SPECS[name].secured == "tls":
            secrets = self.config.secrets()
            user_password = secrets.basic_auth(name if name in ("prometheus", "alertmanager") else "victorialogs")
            return _http_ok(self.health_url(name), ca=secrets.ca, basic_auth=user_password)
        return _http_ok(self.health_url(name))

    def _failure(self, name: ComponentName, message: str) -> str:
        """Return ``message`` followed by the tail of ``name``'s log."""
        log_file = self._processes[name].log_file
        return f"{message}; last {_LOG_TAIL_LINES} lines of {log_file}:\n{tail(log_file, _LOG_TAIL_LINES)}"

    def _command(self, name: ComponentName) -> components.Command:
        """Return the command that starts component ``name`` (writing its rendered config, if any).

        Raises:
            StackError: when one of the files it reads does not exist.
        """
        command = SPECS[name].command(self.config, self.binaries(), self.state_dir)
        for path in command.inputs:
            if not path.is_file():
                raise StackError(f"cannot start {name}: config file {str(path)!r} does not exist")
        return command

    def _digest_file(self, name: ComponentName) -> Path:
        return self.state_dir / f"{name}.digest"

    def _recorded_digest(self, name: ComponentName) -> str | None:
        path = self._digest_file(name)
        return path.read_text(encoding="utf-8") if path.is_file() else None

    def _write_state(self) -> None:
        """Write ``stack.json`` (ports and host) so that other processes can :meth:`attach`."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = self.state_dir / _STATE_FILE
        temporary = path.with_suffix(".json.tmp")
        temporary.write_text(
            json.dumps(
                {
                    "host": self.config.host,
                    "ports": self.config.ports.as_dict(),
                    "victorialogs_cluster": self.config.victorialogs_cluster,
                    "tsdb_cluster": self.config.tsdb_cluster,
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
        os.replace(temporary, path)


def _environment(command: components.Command) -> dict[str, str]:
    """Return the full environment a component starts with: this process's, plus the command's variables."""
    return {**os.environ, **command.environment}


def _launch_digest(command: components.Command) -> str:
    """A hash of what ``command`` would run: its command line, the otel-rl environment it gets (``OTEL_RL_*``), and
    the contents of the files it reads. ``up`` restarts a component whose digest moved."""
    digest = hashlib.sha256(json.dumps(list(command.argv)).encode())
    environment = _environment(command)
    digest.update(json.dumps(sorted((k, v) for k, v in environment.items() if k.startswith("OTEL_RL_"))).encode())
    for path in command.inputs:
        digest.update(path.read_bytes())
    return digest.hexdigest()
