"""``otel-rl report``: registered on the ``otel-rl`` parser of :mod:`otel_rl_ops.cli`; imports matplotlib only when
run. The stores' addresses default to those of the running local stack (``otel-rl stack up``'s ``stack.json``)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from otel_rl_ops.report.dashboard import DEFAULT_DASHBOARD


@dataclass(frozen=True)
class Stores:
    """The addresses a report reads from."""

    prometheus_url: str
    victorialogs_url: str
    jaeger_url: str | None
    """None: no traces (the steps table and the summary's slowest step and phase nesting stay empty)."""


def stores(
    *,
    prometheus_url: str | None,
    victorialogs_url: str | None,
    jaeger_url: str | None,
    state_dir: Path | None,
    prometheus_needed: bool = True,
) -> tuple[Stores, str]:
    """The stores to read: each URL given, else the running local stack's (its ``stack.json`` in ``state_dir``,
    default ``$OTEL_RL_HOME/stack``); also a line saying which came from the stack.

    Raises:
        ValueError: when VictoriaLogs, or Prometheus while ``prometheus_needed``, is neither given nor served by a
            running stack in ``state_dir``.
    """
    if prometheus_url and victorialogs_url and jaeger_url:
        return Stores(prometheus_url, victorialogs_url, jaeger_url), ""
    from otel_rl_ops.stack.config import StackConfig
    from otel_rl_ops.stack.services import ComponentName, Stack

    directory = StackConfig(state_dir=state_dir).resolved_state_dir()
    stack = Stack.attach(directory) if (directory / "stack.json").is_file() else None
    taken: list[str] = []

    def running(name: str, given: str | None, component: ComponentName) -> str | None:
        """``given``, else the URL of the stack's ``component`` when it runs and answers its health check."""
        if given or stack is None or not stack.is_healthy(component):
            return given
        url = {
            "prometheus": stack.prometheus_url,
            "thanos-query": stack.prometheus_url,
            "victorialogs": stack.victorialogs_url,
            "jaeger": stack.jaeger_url,
        }[component]
        taken.append(f"{name} {url}")
        return url

    tsdb: ComponentName = "thanos-query" if stack is not None and stack.config.tsdb_cluster else "prometheus"
    found = Stores(
        prometheus_url=running("Prometheus", prometheus_url, tsdb) or "",
        victorialogs_url=running("VictoriaLogs", victorialogs_url, "victorialogs") or "",
        jaeger_url=running("Jaeger", jaeger_url, "jaeger"),
    )
    needed = (("--prometheus-url", found.prometheus_url),) if prometheus_needed else ()
    for flag, url in (*needed, ("--victorialogs-url", found.victorialogs_url)):
        if not url:
            raise ValueError(
                f"{flag} not given and no running stack in {str(directory)!r} serves it: give {flag}, "
                "start the stack (otel-rl stack up) or name its --state-dir"
            )
    return found, (f"from the running stack in {directory}: " + ", ".join(taken)) if taken else ""


def _report(args: argparse.Namespace) -> int:
    """Build the report of one run, or the comparison of several runs and groups, and write it to ``--out``."""
    from otel_rl_ops.query import QueryError
    from otel_rl_ops.report.fetch import ReportError

    found, note = stores(
        prometheus_url=args.prometheus_url,
        victorialogs_url=args.victorialogs_url,
        jaeger_url=args.jaeger_url,
        state_dir=args.state_dir,
    )
    if note:
        print(note)
    try:
        if len(args.run_id) > 1 or args.group:
            return _compare(args, found)
        if args.baseline is not None or args.step_window is not None:
            raise ValueError('"--baseline" and "--step-window" compare runs: give two --run-id or a --group')
        return _one_run(args, found)
    except (QueryError, ReportError) as error:
        raise ValueError(str(error)) from error


def _one_run(args: argparse.Namespace, found: Stores) -> int:
    from otel_rl_ops.report.render import build_report, empty_line, write_report

    (run_id,) = args.run_id
    report = build_report(
        prometheus_url=found.prometheus_url.rstrip("/"),
        victorialogs_url=found.victorialogs_url.rstrip("/"),
        jaeger_url=found.jaeger_url.rstrip("/") if found.jaeger_url else None,
        run_id=run_id,
        dashboard=args.dashboard,
        scrape_interval_s=args.scrape_interval,
        lookback_s=args.lookback_hours * 3600,
    )
    write_report(report, args.out)
    print(f"wrote {args.out}: {len(report.panels) - len(report.empty)} panels with data")
    line = empty_line(report)
    if line:
        print(line)
    return 0


def _compare(args: argparse.Namespace, found: Stores) -> int:
    import time

    from otel_rl_ops.package_data import data_root
    from otel_rl_ops.report.compare import DEFAULT_COMPARE_DASHBOARD, build_comparison
    from otel_rl_ops.report.compare_render import write_comparison

    if args.step_window is not None and args.step_window < 1:
        raise ValueError(f'"--step-window" must be an integer >= 1, got {args.step_window!r}')
    comparison = build_comparison(
        prometheus_url=found.prometheus_url.rstrip("/"),
        victorialogs_url=found.victorialogs_url.rstrip("/"),
        run_ids=args.run_id,
        groups=args.group,
        baseline=args.baseline,
        every=args.step_window,
        dashboard=args.dashboard or data_root() / DEFAULT_COMPARE_DASHBOARD,
        lookback_s=args.lookback_hours * 3600,
        now=time.time(),
        progress=print,
    )
    write_comparison(comparison, args.out)
    print(f"wrote {args.out}: {len(comparison.all_runs)} runs, windows of {comparison.every} steps")
    return 0


def add_report_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``otel-rl report``."""
    parser = subparsers.add_parser(
        "report",
        help="render a run's dashboard, or several runs compared by step, to a PNG or an HTML page (needs the "
        "'report' extra)",
        description="Render a run's summary and the panels of the RL run dashboard, with the dashboard's own "
        "queries; with several --run-id or a --group, the RL compare dashboard's signals by step, groups as their "
        "mean and min-max band, the differences against --baseline and the same prompt across runs. The stores "
        "default to the running local stack's (otel-rl stack up).",
    )
    stack = "default: the running stack's (see --state-dir)"
    parser.add_argument("--prometheus-url", default=None, help=f"e.g. http://127.0.0.1:9090 ({stack})")
    parser.add_argument("--victorialogs-url", default=None, help=f"e.g. http://127.0.0.1:9428 ({stack})")
    parser.add_argument(
        "--jaeger-url",
        default=None,
        help=f"e.g. http://127.0.0.1:16686: the slowest steps, their traces, the phases' nesting ({stack}; "
        "none without a running stack)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="the running stack whose stores to read when their URLs are not given (default: $OTEL_RL_HOME/stack)",
    )
    parser.add_argument(
        "--run-id",
        required=True,
        action="append",
        help="rl.run.id of the run; give it again for each run to compare (a comparison: runs aligned by step)",
    )
    parser.add_argument(
        "--group",
        action="append",
        default=[],
        help="compare the runs of this group (rl.run.group, TelemetryConfig.group) as their mean and min-max band; "
        "repeatable",
    )
    parser.add_argument("--baseline", default=None, help="the run (one of --run-id) the others are compared with")
    parser.add_argument(
        "--step-window",
        type=int,
        default=None,
        metavar="STEPS",
        help="steps per point of a comparison (default: the longest run's steps / 40, at least 1)",
    )
    parser.add_argument("--out", type=Path, required=True, help="report.png, or report.html (PNG + samples table)")
    parser.add_argument(
        "--dashboard",
        type=Path,
        default=None,
        help=f"dashboard JSON (default: the package's {DEFAULT_DASHBOARD}, or rl-compare.json for a comparison)",
    )
    parser.add_argument(
        "--scrape-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how often points reach Prometheus: the collector's aggregation interval (default 5)",
    )
    parser.add_argument(
        "--lookback-hours", type=float, default=24.0, help="search the run's data this far back (default 24)"
    )
    parser.set_defaults(handler=_report)
