"""``otel-rl stack install|up|down|status|secrets|data|image-context``: the stack actions, registered on the
``otel-rl`` parser of :mod:`otel_rl_ops.cli` by :func:`add_stack_command`."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

from otel_rl_ops.package_data import data_root, package_dir
from otel_rl_ops.stack import image, install
from otel_rl_ops.stack.config import StackConfig, StackPorts
from otel_rl_ops.stack.env import otel_rl_home
from otel_rl_ops.stack.secrets import ensure_secrets
from otel_rl_ops.stack.services import Stack

_Action = Callable[[argparse.Namespace], int]
"""A stack action: takes the parsed arguments, returns the process exit status."""


def _add_stack_options(parser: argparse.ArgumentParser) -> None:
    """Add the options shared by every ``stack`` action: state directory, host and one flag per port."""
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="pid files, logs and data of the stack (default: $OTEL_RL_HOME/stack)",
    )
    parser.add_argument("--host", default=None, help="address the components listen on (default: 127.0.0.1)")
    for item in fields(StackPorts):
        flag = "--" + item.name.replace("_", "-") + "-port"
        parser.add_argument(
            flag, dest=f"port_{item.name}", type=int, default=None, metavar="PORT", help=f"default: {item.default}"
        )
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds to wait for each component to be healthy (default: 60)"
    )
    parser.add_argument(
        "--alert-webhook",
        default=None,
        metavar="URL",
        help="also deliver every Alertmanager notification (JSON, firing and resolved) to this URL",
    )
    parser.add_argument(
        "--grafana-url",
        default=None,
        metavar="URL",
        help="Grafana that alerts link their dashboard in (default: http://127.0.0.1:3000)",
    )
    parser.add_argument(
        "--runbook-url",
        default=None,
        metavar="URL",
        help="where docs/runbooks.md is published, for the alerts' runbook links (default: the checkout's file)",
    )
    parser.add_argument(
        "--secure",
        action="store_true",
        help="the secure profile: OTLP over TLS with a bearer token, Prometheus and VictoriaLogs over TLS with basic "
        "auth, secrets in <state-dir>/secrets (docs/reliability.md); the same settings as docker-compose.yml",
    )
    parser.add_argument(
        "--mtls", action="store_true", help="with --secure (implied): ranks must also present a client certificate"
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="the cluster profile: VictoriaLogs as two storage nodes behind the VictoriaLogs port (docs/scale.md), "
        "and two Thanos receivers, a Thanos querier and Thanos Ruler instead of Prometheus (docs/scale.md); with "
        "'install', also build Thanos (minutes)",
    )


def _config_from(args: argparse.Namespace) -> StackConfig:
    """Build the stack configuration from the ``stack`` options; unset options keep their defaults.

    ``status`` and ``down`` act on an existing stack: when none of its ports were given, the ones recorded in its
    state directory are used (see :meth:`Stack.attach`).
    """
    home = otel_rl_home()
    defaults = StackPorts()
    ports = StackPorts(
        **{item.name: getattr(args, f"port_{item.name}") or getattr(defaults, item.name) for item in fields(StackPorts)}
    )
    return StackConfig(
        ports=ports,
        host=args.host or "127.0.0.1",
        home=home,
        state_dir=args.state_dir,
        ready_timeout_s=args.timeout or 60.0,
        victorialogs_cluster=args.cluster,
        tsdb_cluster=args.cluster,
        secure=args.secure or args.mtls,
        mtls=args.mtls,
        alert_webhook_url=args.alert_webhook,
        grafana_url=args.grafana_url or "http://127.0.0.1:3000",
        runbook_url=args.runbook_url,
    )


def _ports_given(args: argparse.Namespace) -> bool:
    """Return whether any port or host option was given on the command line."""
    return args.host is not None or any(getattr(args, f"port_{item.name}") is not None for item in fields(StackPorts))


def _stack_for(args: argparse.Namespace) -> Stack:
    """Return the stack the arguments name: the recorded one for status/down unless ports were given."""
    config = _config_from(args)
    if args.action in ("status", "down") and not _ports_given(args):
        return Stack.attach(config.resolved_state_dir(), config=config)
    return Stack(config)


def _stack_install(args: argparse.Namespace) -> int:
    """``otel-rl stack install``: install or build whatever binary the stack runs is missing; with ``--tools`` also
    promtool and amtool, with ``--cluster`` also Thanos."""
    config = _config_from(args)
    started = time.monotonic()
    binaries = install.install_all(
        root=config.resolved_root(),
        home=config.home,
        tools=args.tools,
        cluster=config.tsdb_cluster,
        replay=args.replay,
    )
    for item in fields(binaries):
        if getattr(binaries, item.name) is not None:
            print(f"{item.name:<13} {getattr(binaries, item.name)}")
    print(f"ready in {time.monotonic() - started:.1f} s")
    return 0


def _stack_up(args: argparse.Namespace) -> int:
    """``otel-rl stack up``: install what is missing, start, wait until healthy, print the endpoints."""
    stack = _stack_for(args)
    stack.up()
    print(f"OTLP gRPC     {stack.otlp_grpc_endpoint}")
    print(f"OTLP HTTP     {stack.otlp_http_endpoint}")
    print(f"{'Thanos query' if stack.config.tsdb_cluster else 'Prometheus':<13} {stack.prometheus_url}")
    print(f"VictoriaLogs  {stack.victorialogs_url}")
    print(f"Alertmanager  {stack.alertmanager_url}")
    print(f"Jaeger        {stack.jaeger_url}")
    print(f"state         {stack.state_dir}")
    print(f"export OTEL_EXPORTER_OTLP_ENDPOINT={stack.otlp_grpc_endpoint}")
    if stack.config.secure:
        secrets = stack.config.secrets()
        print(f"export OTEL_EXPORTER_OTLP_CERTIFICATE={secrets.ca}")
        print(f'export OTEL_EXPORTER_OTLP_HEADERS="authorization=Bearer%20$(cat {secrets.otlp_token})"')
        if stack.config.mtls:
            print(f"export OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE={secrets.client_cert}")
            print(f"export OTEL_EXPORTER_OTLP_CLIENT_KEY={secrets.client_key}")
        user = secrets.basic_auth("prometheus")[0]
        print(f"# Prometheus, VictoriaLogs, Alertmanager and Jaeger: user {user}, passwords in {secrets.folder}")
    return 0


def _stack_down(args: argparse.Namespace) -> int:
    """``otel-rl stack down``: stop every component."""
    stack = _stack_for(args)
    stack.down()
    print(f"stopped the stack in {stack.state_dir}")
    return 0


def _stack_status(args: argparse.Namespace) -> int:
    """``otel-rl stack status``: one line per component; exit status 0 only when all are healthy."""
    stack = _stack_for(args)
    statuses = stack.status()
    print(f"{'component':<16} {'pid':>8}  {'state':<8} {'health':<9} url")
    for name in stack.component_names:
        status = statuses[name]
        pid = "-" if status.pid is None else str(status.pid)
        health = "healthy" if status.healthy else "unhealthy"
        print(f"{name:<16} {pid:>8}  {status.state:<8} {health:<9} {status.health_url}")
    print(f"state         {stack.state_dir}")
    return 0 if all(status.healthy for status in statuses.values()) else 1


COMPOSE_HOSTS = ("collector", "prometheus", "victorialogs", "alertmanager", "jaeger", "localhost", "127.0.0.1")
"""The names the compose services reach each other by, in the server certificate of ``otel-rl stack secrets``."""


def _stack_secrets(args: argparse.Namespace) -> int:
    """``otel-rl stack secrets``: the secure profile's secret files for docker-compose.yml, readable by the
    containers' users (the folder itself is private); prints the folder, never a secret."""
    secrets = ensure_secrets(args.out, hosts=(*COMPOSE_HOSTS, *args.name), readable_by_containers=True)
    print(f"secrets in {secrets.folder.resolve()} (user {secrets.basic_auth('prometheus')[0]}; CA {secrets.ca})")
    return 0


def _stack_data(args: argparse.Namespace) -> int:
    """``otel-rl stack data``: check the package's data (every file there, this release's) and print where they lie."""
    print(data_root())
    return 0


def _stack_image_context(args: argparse.Namespace) -> int:
    """``otel-rl stack image-context DIR``: the collector image's build context from the package's data; prints the
    ``docker build`` command."""
    image.write_context(data_root(), package_dir(), args.folder)
    print(" ".join(image.build_command(args.folder)))
    return 0


_STACK_ACTIONS: dict[str, tuple[_Action, str]] = {
    "install": (
        _stack_install,
        "install the collector, Prometheus, VictoriaLogs, Alertmanager and Jaeger if missing (with --tools also "
        "promtool and amtool, with --cluster also Thanos, with --replay also otel-rl-backfill)",
    ),
    "up": (_stack_up, "install what is missing, start the stack and wait until it is healthy"),
    "down": (_stack_down, "stop the stack (SIGTERM, then SIGKILL)"),
    "status": (_stack_status, "print each component's pid, state and health"),
    "secrets": (
        _stack_secrets,
        "make the secure profile's certificates, token and passwords in --out (docker-compose.yml reads ./secrets)",
    ),
}

_DATA_ACTIONS: dict[str, tuple[_Action, str]] = {
    "data": (_stack_data, "check the configurations this package carries and print the folder they lie in"),
    "image-context": (
        _stack_image_context,
        "write the collector image's Docker build context (collector_config/ and the build code) into a new folder "
        "and print the docker build command",
    ),
}
"""Actions on the package's data alone: no stack options."""


def add_stack_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``otel-rl stack ...``: one action subparser each, with the ``stack`` options and a ``handler``."""
    stack = subparsers.add_parser(
        "stack", help="install and run the local collector, Prometheus, Alertmanager and VictoriaLogs"
    )
    actions = stack.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, (handler, help_text) in _STACK_ACTIONS.items():
        parser = actions.add_parser(action, help=help_text, description=help_text)
        _add_stack_options(parser)
        parser.set_defaults(handler=handler)
        if action == "install":
            parser.add_argument(
                "--tools",
                action="store_true",
                help="also build promtool and amtool, which check configs, rules and routes (make test runs them; "
                "minutes each cold, less after Prometheus and Alertmanager, whose Go caches they reuse)",
            )
            parser.add_argument(
                "--replay",
                action="store_true",
                help="also build otel-rl-backfill, which otel-rl replay runs (it builds it on first use otherwise; "
                "minutes cold)",
            )
        if action == "secrets":
            parser.add_argument("--out", type=Path, default=Path("secrets"), help="the folder (default: ./secrets)")
            parser.add_argument(
                "--name",
                action="append",
                default=[],
                metavar="HOST",
                help="another name or address the server certificate must carry (the host ranks reach), repeatable",
            )
    for action, (handler, help_text) in _DATA_ACTIONS.items():
        parser = actions.add_parser(action, help=help_text, description=help_text)
        parser.set_defaults(handler=handler)
        if action == "image-context":
            parser.add_argument("folder", type=Path, metavar="DIR", help="a new or empty folder")
