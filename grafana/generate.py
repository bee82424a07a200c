"""The otel-rl Grafana dashboards as code: ``python grafana/generate.py`` writes ``grafana/dashboards/*.json``.

Built with the Grafana Foundation SDK (``grafana-foundation-sdk`` on PyPI, the ``dashboards`` extra), which also
validates the JSON (``Dashboard.from_json``). The committed JSON files are what Grafana provisions and what
``otel-rl report`` renders; ``tests/dashboards/test_static.py`` checks that they equal this script's output,
so edit the code and rerun it, never the JSON by hand.

This file assembles: each row of the "RL run" dashboard is a module of ``grafana/rows/`` (its panels, their
explicit ids and layout), and every query comes from :mod:`otel_rl_ops.promql` (native histograms first with the
classic buckets as the fallback, quantiles clamped to the exact extremes, label values quoted). Metric names are
those of docs/contract.md.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import otel_rl_contract as contract
from compare import rl_compare
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model
from rows import audit, data, inference, performance, reward, rollouts, run, samples, staleness, telemetry
from rows.panels import PROMETHEUS, RUN, Row

DASHBOARDS_DIR = Path(__file__).resolve().parent / "dashboards"
RUN_LABEL = contract.label(contract.RUN_ID)

RL_RUN_ROWS: tuple[Callable[[], Row], ...] = (
    run.row,
    performance.row,
    reward.row,
    rollouts.row,
    audit.row,
    staleness.row,
    data.row,
    samples.row,
    inference.row,
    telemetry.row,
)
"""The rows of the "RL run" dashboard, top to bottom."""


def rl_run() -> model.Dashboard:
    """The "RL run" dashboard: one run (variable ``run``; ``service``, its service name, follows it), where the time
    goes, reward, staleness, samples, the inference engines and telemetry health."""
    run_variable = (
        dash.QueryVariable("run")
        .label("Run")
        .description(f"{contract.RUN_ID} of the run (label {RUN_LABEL})")
        .datasource(PROMETHEUS)
        .query(f"label_values({contract.series(contract.REWARDS.sums[0]).name}, {RUN_LABEL})")
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
    )
    service_variable = (
        dash.QueryVariable("service")
        .label("Service")
        .description("service.name of the run (label job), which Jaeger searches its traces by")
        .datasource(PROMETHEUS)
        .query(f"label_values({contract.series(contract.STEP).name}{{{RUN}}}, job)")
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .hide(model.VariableHide.HIDE_VARIABLE)
    )
    builder = (
        dash.Dashboard("RL run")
        .uid("otel-rl-run")
        .description(
            "One RL run (rl.run.id): where the time goes, reward and staleness distributions, samples, the inference "
            "engines, telemetry health (otel-rl)."
        )
        .tags(["otel-rl", "rl"])
        .editable()
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .with_variable(run_variable)
        .with_variable(service_variable)
    )
    for build_row in RL_RUN_ROWS:
        row = build_row()
        builder = builder.with_row(dash.Row(row.title).id(row.id))
        for panel in row.panels:
            builder = builder.with_panel(panel)
    return builder.build()


DASHBOARDS: dict[str, Callable[[], model.Dashboard]] = {"rl-run.json": rl_run, "rl-compare.json": rl_compare}
"""File name under ``grafana/dashboards/`` -> function building that dashboard."""


def render(build: Callable[[], model.Dashboard]) -> str:
    """Return the dashboard as the JSON text that is committed (sorted keys, 2-space indent, final newline)."""
    data = json.loads(json.dumps(build(), cls=JSONEncoder))
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write every dashboard into ``grafana/dashboards/`` (or the folder given as the only argument)."""
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else DASHBOARDS_DIR
    out.mkdir(parents=True, exist_ok=True)
    for name, build in DASHBOARDS.items():
        (out / name).write_text(render(build), encoding="utf-8")
        print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
