"""Row "Telemetry health": bad input rejected at record time, samples exported and dropped, export failures, and
how fresh the run's data is, and whether the collector merged it exactly (the merge canary)."""

from __future__ import annotations

import otel_rl_contract as contract
from otel_rl_contract import foreign
from otel_rl_ops import promql

from rows.panels import (
    RUN,
    SELF_METRIC,
    SELF_REASON,
    SELF_SIGNAL,
    WINDOW,
    Row,
    legend,
    prom,
    series,
    stat_panel,
    traffic_light,
)


def row() -> Row:
    """The telemetry-health row."""
    rejected = series(
        14,
        "Rejected values (bad input)",
        "Values dropped at record time, by metric and reason (nonfinite, negative, shape, ...), per interval; and "
        "histogram points the collector refused at the door (the store would have refused them, and every other "
        "run's points in the same write with them: alert OtelRLRejectedPoints), by metric and reason.",
        "short",
        "values per interval",
        prom(
            "A",
            promql.increase(
                contract.series(contract.VALUES_REJECTED), RUN, by=f"{SELF_METRIC}, {SELF_REASON}", window=WINDOW
            ),
            f"{legend(SELF_METRIC)} {legend(SELF_REASON)}",
        ),
        prom(
            "B",
            # Exact: a burst that ended before the counter's first scrape leaves it born at its final value.
            promql.exact_increase(foreign.COLLECTOR_POINTS_REJECTED, RUN, by="metric, reason", window=WINDOW),
            "at the collector: {{metric}} {{reason}}",
        ),
    )
    sample_flow = series(
        15,
        "Samples and spans exported and dropped (per second)",
        "Sample log records and spans handed to the exporter, and those dropped (samples: queue_full, invalid, "
        "shutdown, ...; spans: queue_full when an outage outlasts the rank's span queue, refused, shutdown).",
        "short",
        "items / s",
        prom("A", promql.rate(contract.series(contract.SAMPLES_EXPORTED), RUN, window=WINDOW), "samples exported"),
        prom(
            "B",
            promql.rate(contract.series(contract.SAMPLES_DROPPED), RUN, by=SELF_REASON, window=WINDOW),
            f"samples dropped {legend(SELF_REASON)}",
        ),
        prom("C", promql.rate(contract.series(contract.SPANS_EXPORTED), RUN, window=WINDOW), "spans exported"),
        prom(
            "D",
            promql.rate(contract.series(contract.SPANS_DROPPED), RUN, by=SELF_REASON, window=WINDOW),
            f"spans dropped {legend(SELF_REASON)}",
        ),
    )
    failures = series(
        16,
        "Export failures",
        "Failed OTLP exports from the ranks, by signal, per interval (a failed metrics export folds into the next), "
        "and metric streams or sample records left out because they could not be encoded (an otel-rl bug: alert "
        "OtelRLUnencodableTelemetry).",
        "short",
        "failures per interval",
        prom(
            "A",
            promql.increase(contract.series(contract.EXPORT_FAILURES), RUN, by=SELF_SIGNAL, window=WINDOW),
            legend(SELF_SIGNAL),
        ),
        prom(
            "B",
            promql.increase(contract.series(contract.EXPORT_UNENCODABLE), RUN, by=SELF_SIGNAL, window=WINDOW),
            f"unencodable {legend(SELF_SIGNAL)}",
        ),
    )
    freshness = stat_panel(
        17,
        "Time since last data",
        "Seconds since the run's last aggregated point reached Prometheus (rl_step).",
        "s",
        prom(
            "A", f"time() - max(timestamp({contract.series(contract.STEP).name}{{{RUN}}}))", "seconds since last data"
        ),
    ).thresholds(traffic_light(orange=60, red=300))
    merge_check = stat_panel(
        40,
        "Merge check",
        "Share of the merge canary's counts outside its buckets (otel_rl_merge_canary, recorded by every rank at each "
        "step): 0 when the collector merged the ranks' histograms exactly; above 0 the run went through a collector "
        "without otel-rl's exact merge (e.g. a stock OpenTelemetry Collector) and its distributions and quantiles are "
        'wrong (alert OtelRLInexactMerge). No value: histogram="explicit" (exact on any collector) or no step yet.',
        "percentunit",
        prom("A", f"max({promql.merge_canary_misplaced(RUN)})", "canary counts misplaced"),
    ).thresholds(traffic_light(orange=1e-9, red=1e-6))
    return Row(
        "Telemetry health",
        13,
        (
            rejected.span(7).height(8),
            sample_flow.span(7).height(8),
            failures.span(5).height(8),
            freshness.span(3).height(8),
            merge_check.span(2).height(8),
        ),
    )
