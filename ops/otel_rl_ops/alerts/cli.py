"""``otel-rl alerts``: a run's firing and pending alerts for a terminal, and ``--silence RUN --for 2h``; registered
on the ``otel-rl`` parser of :mod:`otel_rl_ops.cli` by :func:`add_alerts_command`.

Without URLs it reads the local stack recorded in ``--state-dir`` (``otel-rl stack up``): its Prometheus, or the
Thanos querier in the cluster profile, and its Alertmanager; with ``--secure``, over TLS with the stack's CA and the
basic auth of its secrets.
"""

from __future__ import annotations

import argparse
import getpass
import socket
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import requests

from otel_rl_ops.alerts.client import Alertmanager, RunAlert, duration_seconds, run_alerts
from otel_rl_ops.query import Prometheus, QueryError


def _clients(args: argparse.Namespace) -> tuple[Prometheus, Alertmanager]:
    """The Prometheus query API and Alertmanager to ask: the options, else the stack in ``--state-dir`` (with
    ``--secure``, its CA and each service's basic auth)."""
    from otel_rl_ops.stack.config import StackConfig
    from otel_rl_ops.stack.services import Stack

    config = StackConfig(secure=args.secure, **({} if args.state_dir is None else {"state_dir": args.state_dir}))
    stack = Stack.attach(config.resolved_state_dir(), config=config)
    sessions: dict[str, requests.Session | None] = {"prometheus": None, "alertmanager": None}
    if config.secure:
        secrets = config.secrets()
        for service in sessions:
            session = requests.Session()
            session.verify, session.auth = str(secrets.ca), secrets.basic_auth(service)
            session.trust_env = False  # else REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE replace ``verify`` (requests #3829)
            sessions[service] = session
    prometheus = (args.prometheus_url or stack.prometheus_url).rstrip("/")
    alertmanager = (args.alertmanager_url or stack.alertmanager_url).rstrip("/")
    return (
        Prometheus(prometheus, session=sessions["prometheus"]),
        Alertmanager(alertmanager, session=sessions["alertmanager"]),
    )


def _age(since: float | None, now: float) -> str:
    """``14:02:11 (3m12s ago)``, or ``-`` when unknown."""
    if since is None:
        return "-"
    seconds = max(0, int(now - since))
    hours, rest = divmod(seconds, 3600)
    ago = f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"
    return f"{datetime.fromtimestamp(since).strftime('%H:%M:%S')} ({ago} ago)"


def format_alerts(alerts: Sequence[RunAlert], *, now: float) -> str:
    """The alerts as a table for a terminal: run, state, alert (with its ``signal``), since, summary; under each
    firing one its dashboard and runbook links."""
    if not alerts:
        return "no firing or pending alerts"
    rows = []
    for alert in alerts:
        state = alert.state + (f" by {', '.join(alert.held_by)}" if alert.state == "inhibited" else "")
        name = alert.name + (f" ({alert.labels['signal']})" if "signal" in alert.labels else "")
        rows.append((alert.run_id or "-", state, name, _age(alert.since, now), alert.summary or "-"))
    widths = [max(len(row[i]) for row in [("RUN", "STATE", "ALERT", "SINCE", ""), *rows]) for i in range(4)]
    lines = [
        "  ".join(f"{title:<{width}}" for title, width in zip(("RUN", "STATE", "ALERT", "SINCE"), widths, strict=True))
        + "  SUMMARY"
    ]
    for alert, row in zip(alerts, rows, strict=True):
        lines.append("  ".join(f"{cell:<{width}}" for cell, width in zip(row[:4], widths, strict=True)) + "  " + row[4])
        indent = " " * (sum(widths) + 8)
        for key in ("dashboard_url", "runbook_url"):
            if alert.annotations.get(key):
                lines.append(f"{indent}{key.removesuffix('_url')}: {alert.annotations[key]}")
    return "\n".join(lines)


def _alerts(args: argparse.Namespace) -> int:
    """``otel-rl alerts``: list (``--run``), or silence (``--silence RUN --for D``)."""
    prometheus, alertmanager = _clients(args)
    try:
        if args.silence is not None:
            seconds = duration_seconds(args.duration)
            comment = args.comment or f"otel-rl alerts --silence {args.silence} --for {args.duration}"
            silence_id = alertmanager.silence(
                {"rl_run_id": args.silence},
                duration_s=seconds,
                created_by=f"{getpass.getuser()}@{socket.gethostname()}",
                comment=comment,
            )
            until = datetime.fromtimestamp(time.time() + seconds).strftime("%Y-%m-%d %H:%M:%S")
            print(f"silenced run {args.silence!r} until {until} (silence {silence_id}, {alertmanager.url})")
            return 0
        alerts = run_alerts(prometheus, alertmanager, args.run)
    except QueryError as error:
        raise ValueError(str(error)) from error
    print(format_alerts(alerts, now=time.time()))
    return 0


def add_alerts_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``otel-rl alerts``."""
    parser = subparsers.add_parser(
        "alerts",
        help="a run's firing and pending alerts (Alertmanager and Prometheus), or --silence a run",
        description="List the firing and pending alerts of a run (every run without --run), with their state in "
        "Alertmanager (firing, silenced, inhibited) and their links; or silence a run's notifications.",
    )
    parser.add_argument("--run", default=None, metavar="RUN", help="rl.run.id of the run (default: every run)")
    parser.add_argument("--silence", default=None, metavar="RUN", help="silence every alert of this run instead")
    parser.add_argument(
        "--for", dest="duration", default="2h", metavar="DURATION", help="how long --silence lasts (default: 2h)"
    )
    parser.add_argument("--comment", default=None, help="why (the silence's comment)")
    parser.add_argument("--prometheus-url", default=None, help="Prometheus or Thanos query API (default: the stack's)")
    parser.add_argument("--alertmanager-url", default=None, help="Alertmanager (default: the stack's)")
    parser.add_argument(
        "--state-dir", type=Path, default=None, help="the local stack to ask (default: $OTEL_RL_HOME/stack)"
    )
    parser.add_argument(
        "--secure", action="store_true", help="the stack runs the secure profile: TLS and basic auth from its secrets"
    )
    parser.set_defaults(handler=_alerts)
