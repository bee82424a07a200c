"""``otel-rl report``: registered on the ``otel-rl`` parser of :mod:`otel_rl.ops.cli`; imports matplotlib only when run."""

from __future__ import annotations

import argparse
from pathlib import Path

from otel_rl.ops.report.dashboard import DEFAULT_DASHBOARD


def _report(args: argparse.Namespace) -> int:
    """Build the report of one run and write it to ``--out``."""
    from otel_rl.ops.query import QueryError
    from otel_rl.ops.report.fetch import ReportError
    from otel_rl.ops.report.render import build_report, panels_without_data, write_report

    try:
        report = build_report(
            prometheus_url=args.prometheus_url.rstrip("/"),
            victorialogs_url=args.victorialogs_url.rstrip("/"),
            jaeger_url=args.jaeger_url.rstrip("/") if args.jaeger_url else None,
            run_id=args.run_id,
            dashboard=args.dashboard,
            scrape_interval_s=args.scrape_interval,
            lookback_s=args.lookback_hours * 3600,
        )
    except (QueryError, ReportError) as error:
        raise ValueError(str(error)) from error
    write_report(report, args.out)
    empty = panels_without_data(report)
    print(
        f"wrote {args.out}: {len(report.panels)} panels, {len(empty)} without data"
        + (f" ({', '.join(p.title for p in empty)})" if empty else "")
    )
    return 0


def add_report_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``otel-rl report``."""
    parser = subparsers.add_parser(
        "report",
        help="render a run's dashboard to a PNG or an HTML page (needs the 'report' extra)",
        description="Render the panels of the RL run dashboard for one run, with the dashboard's own queries.",
    )
    parser.add_argument("--prometheus-url", required=True, help="e.g. http://127.0.0.1:9090")
    parser.add_argument("--victorialogs-url", required=True, help="e.g. http://127.0.0.1:9428")
    parser.add_argument(
        "--jaeger-url",
        default=None,
        help="e.g. http://127.0.0.1:16686: the slowest steps and their traces (default: none)",
    )
    parser.add_argument("--run-id", required=True, help="rl.run.id of the run")
    parser.add_argument("--out", type=Path, required=True, help="report.png, or report.html (PNG + samples table)")
    parser.add_argument(
        "--dashboard", type=Path, default=None, help=f"dashboard JSON (default: <repository>/{DEFAULT_DASHBOARD})"
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
