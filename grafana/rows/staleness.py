"""Row "Staleness and progress": per-token staleness percentiles, maximum and distribution, the policy version and
the step."""

from __future__ import annotations

import otel_rl_contract as contract
from otel_rl_ops import promql

from rows.panels import RUN, WINDOW, Row, heatmap_panel, prom, series


def row() -> Row:
    """The staleness row."""
    _, maximum = promql.extremes(contract.STALENESS, RUN, window=WINDOW)
    staleness = series(
        8,
        "Staleness (policy versions behind, per token)",
        "p50/p99 from the staleness histogram, clamped to the exact min and max of the same interval; max is exact "
        "(max of the ranks' per-export maxima).",
        "none",
        "versions behind",
        prom("A", promql.quantile(0.5, contract.STALENESS, RUN, window=WINDOW, integers=True), "p50"),
        prom("B", promql.quantile(0.99, contract.STALENESS, RUN, window=WINDOW, integers=True), "p99"),
        prom("C", maximum, "max"),
    )
    distribution = heatmap_panel(
        9,
        "Staleness distribution",
        "Tokens per staleness bucket and interval (policy versions behind; zero bucket at 0).",
        "versions behind",
        promql.distribution(contract.STALENESS, RUN, window=WINDOW),
    )
    progress = series(
        10,
        "Policy version and step",
        "The trainer's current policy version and last declared step (max over ranks).",
        "none",
        "version / step",
        prom("A", f"max({contract.series(contract.POLICY_VERSION).name}{{{RUN}}})", "policy version"),
        prom("B", f"max({contract.series(contract.STEP).name}{{{RUN}}})", "step"),
    )
    return Row(
        "Staleness and progress",
        7,
        (staleness.span(8).height(8), distribution.span(8).height(8), progress.span(8).height(8)),
    )
