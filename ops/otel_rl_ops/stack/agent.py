"""``otel-rl agent serve|exec``: a collector agent per node of a batch job (SLURM), and the ranks pointed at it.

``serve`` replaces itself with the otel-rl collector running ``collector_config/agent.yaml`` on the node's loopback
(plus ``agent-dns.yaml`` when the gateways are one DNS name), forwarding each run whole to the gateway its
``rl.run.id`` hashes to. ``exec`` waits until the node's agent is healthy, then replaces itself with the rank's
command, with ``OTEL_EXPORTER_OTLP_ENDPOINT`` naming that agent and ``OTEL_RL_RUN_ID`` the job
(``SLURM_JOB_ID``), so every rank of a job reaches its own node's agent and every agent routes the job to one
gateway. ``deploy/slurm/otel-rl.sbatch`` runs both as job steps; docs/deploy.md explains the recipe.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import NoReturn

import requests

from otel_rl_ops.package_data import data_root
from otel_rl_ops.stack import layout
from otel_rl_ops.stack.collector_build import collector_binary_path
from otel_rl_ops.stack.env import otel_rl_home
from otel_rl_ops.stack.services import StackError

SLURM_JOB_ID = "SLURM_JOB_ID"
"""The job's id, set by SLURM in every step's environment: the run id of the job's ranks."""
OTEL_RL_RUN_ID = "OTEL_RL_RUN_ID"
"""The run id otel_rl reads first (``otel_rl._env``); an explicit value wins over the job id."""


@dataclass(frozen=True, kw_only=True)
class AgentPorts:
    """The ports of a node's agent, on the loopback: give other ones where two jobs share a node."""

    grpc: int = 4317
    """OTLP gRPC, which the ranks export to."""
    http: int = 4318
    """OTLP HTTP."""
    health: int = 13133
    """The health_check extension, which ``exec`` polls before starting the rank."""
    metrics: int = 8888
    """The agent's own metrics (Prometheus format)."""

    def __post_init__(self) -> None:
        for item in fields(self):
            port = getattr(self, item.name)
            if not 0 < port < 65536:
                raise ValueError(f'"{item.name}" port must be in 1..65535, got {port!r}')
        if len({getattr(self, item.name) for item in fields(self)}) != len(fields(self)):
            raise ValueError(f"agent ports must differ, got {self!r}")


def gateways_flow_list(gateways: str) -> str:
    """Return ``OTEL_RL_GATEWAYS`` (a YAML flow list, as agent.yaml reads it) for ``gw-0:4317,gw-1:4317`` or an
    already bracketed list.

    >>> gateways_flow_list("gw-0:4317, gw-1:4317")
    '[gw-0:4317, gw-1:4317]'

    Raises:
        ValueError: when no gateway is named.
    """
    names = [name.strip() for name in gateways.strip().removeprefix("[").removesuffix("]").split(",") if name.strip()]
    if not names:
        raise ValueError(f'"--gateways" must name at least one host:port, got {gateways!r}')
    return "[" + ", ".join(names) + "]"


def agent_command(
    collector: Path,
    *,
    ports: AgentPorts,
    gateways: str | None = None,
    gateways_dns: str | None = None,
    root: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """Return the agent's argv and environment: ``environ`` (default this process's) with the listen addresses of
    ``ports`` on 127.0.0.1 and the gateways set.

    The gateways are ``gateways`` (a static list, ``OTEL_RL_GATEWAYS``) or ``gateways_dns`` (one DNS name, with an
    optional ``:port``, for failover: agent-dns.yaml); without either, the environment's ``OTEL_RL_GATEWAYS`` or
    ``OTEL_RL_GATEWAYS_HOSTNAME`` is used.

    Raises:
        ValueError: when both or neither kind of gateway address is given.
    """
    env = dict(os.environ if environ is None else environ)
    if gateways is not None and gateways_dns is not None:
        raise ValueError(f'give "--gateways" or "--gateways-dns", not both: got {gateways!r} and {gateways_dns!r}')
    if gateways is not None:
        env["OTEL_RL_GATEWAYS"] = gateways_flow_list(gateways)
        env.pop("OTEL_RL_GATEWAYS_HOSTNAME", None)
    elif gateways_dns is not None:
        host, _, port = gateways_dns.partition(":")
        env["OTEL_RL_GATEWAYS_HOSTNAME"] = host
        if port:
            env["OTEL_RL_GATEWAYS_PORT"] = port
    elif not env.get("OTEL_RL_GATEWAYS") and not env.get("OTEL_RL_GATEWAYS_HOSTNAME"):
        raise ValueError(
            '"--gateways" (or OTEL_RL_GATEWAYS) or "--gateways-dns" (or OTEL_RL_GATEWAYS_HOSTNAME) is required: '
            "the agent forwards every run to a gateway"
        )
    env.update(
        OTEL_RL_OTLP_GRPC_ENDPOINT=f"127.0.0.1:{ports.grpc}",
        OTEL_RL_OTLP_HTTP_ENDPOINT=f"127.0.0.1:{ports.http}",
        OTEL_RL_HEALTH_ENDPOINT=f"127.0.0.1:{ports.health}",
        OTEL_RL_COLLECTOR_METRICS_HOST="127.0.0.1",
        OTEL_RL_COLLECTOR_METRICS_PORT=str(ports.metrics),
    )
    configs = (data_root() if root is None else root) / "collector_config"
    names = ["agent.yaml", "agent-dns.yaml"] if env.get("OTEL_RL_GATEWAYS_HOSTNAME") else ["agent.yaml"]
    return [str(collector), *(f"--config={configs / name}" for name in names)], env


def rank_environment(*, ports: AgentPorts, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return a rank's environment: ``environ`` (default this process's) exporting to the node's agent, with
    ``OTEL_RL_RUN_ID`` from ``SLURM_JOB_ID`` unless it is set already.

    Raises:
        ValueError: when neither ``OTEL_RL_RUN_ID`` nor ``SLURM_JOB_ID`` is set (not inside a SLURM job).
    """
    env = dict(os.environ if environ is None else environ)
    run_id = env.get(OTEL_RL_RUN_ID) or env.get(SLURM_JOB_ID)
    if not run_id:
        raise ValueError(f"{OTEL_RL_RUN_ID} or {SLURM_JOB_ID} must be set: every rank of a run needs the same run id")
    env[OTEL_RL_RUN_ID] = run_id
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{ports.grpc}"
    env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
    return env


def wait_healthy(ports: AgentPorts, *, timeout_s: float) -> None:
    """Return once the agent's health check answers 200.

    Raises:
        StackError: when it has not within ``timeout_s`` seconds.
    """
    url = f"http://127.0.0.1:{ports.health}/"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            raise StackError(f"the node's agent at {url} was not healthy within {timeout_s:g} s")
        time.sleep(0.2)


def _ports_from(args: argparse.Namespace) -> AgentPorts:
    return AgentPorts(**{item.name: getattr(args, f"{item.name}_port") for item in fields(AgentPorts)})


def _serve(args: argparse.Namespace) -> NoReturn:
    """``otel-rl agent serve``: become the node's collector agent."""
    home = otel_rl_home()
    root = data_root()
    collector = args.collector or collector_binary_path(layout.collector_manifest(root), home=home)
    if not collector.is_file():
        raise FileNotFoundError(
            f"no collector at {str(collector)!r}: run 'otel-rl stack install' once (it builds into {str(home)!r}, "
            "which the nodes should share), or pass --collector"
        )
    argv, env = agent_command(
        collector, ports=_ports_from(args), gateways=args.gateways, gateways_dns=args.gateways_dns, root=root
    )
    os.execve(argv[0], argv, env)


def _exec(args: argparse.Namespace) -> NoReturn:
    """``otel-rl agent exec -- COMMAND``: wait for the node's agent, then become the rank's command."""
    command: Sequence[str] = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise ValueError('"otel-rl agent exec" needs a command after "--"')
    ports = _ports_from(args)
    env = rank_environment(ports=ports)
    wait_healthy(ports, timeout_s=args.timeout)
    os.execvpe(command[0], list(command), env)


def add_agent_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``otel-rl agent serve|exec`` with a ``handler`` default each."""
    agent = subparsers.add_parser("agent", help="a collector agent per node of a batch job, and ranks pointed at it")
    actions = agent.add_subparsers(dest="action", metavar="ACTION", required=True)
    serve = actions.add_parser("serve", help="run the node's collector agent (agent.yaml) in the foreground")
    serve.add_argument("--gateways", default=None, help="gateways as host:port,host:port (default: $OTEL_RL_GATEWAYS)")
    serve.add_argument(
        "--gateways-dns",
        default=None,
        metavar="NAME[:PORT]",
        help="one DNS name whose records are the live gateways (agent-dns.yaml; default: $OTEL_RL_GATEWAYS_HOSTNAME)",
    )
    serve.add_argument("--collector", type=Path, default=None, help="collector binary (default: the installed one)")
    serve.set_defaults(handler=_serve)
    run = actions.add_parser("exec", help="wait for the node's agent, then run COMMAND exporting to it")
    run.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the agent (default: 60)")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    run.set_defaults(handler=_exec)
    for parser in (serve, run):
        for item in fields(AgentPorts):
            parser.add_argument(
                f"--{item.name}-port",
                dest=f"{item.name}_port",
                type=int,
                default=item.default,
                metavar="PORT",
                help=f"the agent's {item.name} port on 127.0.0.1 (default: {item.default})",
            )
