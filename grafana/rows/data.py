"""Row "Data & staleness": reward and staleness per data source (``rl_dataset``) and per staleness phase, tokens
without a version, samples dropped as too stale."""

from __future__ import annotations

from grafana_foundation_sdk.builders import timeseries
from otel_rl_ops import promql

from rows.panels import RUN, TOTAL, WINDOW, Row, prom, series

HAS_DATASET = promql.match("rl_dataset", "", "!=")
WITH_DATASET = f"{RUN},{HAS_DATASET}"
WITH_PHASE = f"{RUN},{promql.match('rl_staleness_phase', '', '!=')}"


def _staleness_by(panel_id: int, title: str, description: str, selector: str, label: str) -> timeseries.Panel:
    """p50 and p99 of per-token staleness by ``label``, each clamped to its own exact min and max."""
    return series(
        panel_id,
        title,
        description,
        "none",
        "versions behind",
        *(
            prom(
                ref,
                promql.quantile(q, "rl_staleness", selector, by=label, window=WINDOW, integers=True),
                f"{{{{{label}}}}} p{q * 100:g}",
            )
            for ref, q in (("A", 0.5), ("B", 0.99))
        ),
    ).min(0)


def row() -> Row:
    """The data and staleness row."""
    reward_by_dataset = series(
        35,
        "Mean reward by dataset",
        "Mean total reward per rl_dataset (record_rewards(..., dataset=)), from the exact counters. Rewards "
        "recorded without a dataset are left out.",
        "none",
        "mean reward",
        prom(
            "A",
            promql.mean("rl_reward", f"{TOTAL},{HAS_DATASET}", by="rl_dataset", window=WINDOW),
            "{{rl_dataset}}",
        ),
    )
    by_dataset = _staleness_by(
        36,
        "Staleness by dataset: p50 and p99",
        "Per rl_dataset (record_staleness(..., dataset=)): percentiles of per-token staleness, clamped to the "
        "dataset's exact min and max.",
        WITH_DATASET,
        "rl_dataset",
    )
    by_phase = _staleness_by(
        37,
        "Staleness by phase: p50 and p99",
        "Per rl_staleness_phase (record_staleness(..., phase=)): in_flight (generated while the trainer moved on) "
        "and in_queue (waited in the buffer), clamped to each phase's exact min and max.",
        WITH_PHASE,
        "rl_staleness_phase",
    )
    unversioned = series(
        38,
        "Unversioned tokens (per second)",
        "Tokens recorded without a policy version (negative or NaN version): counted in "
        "rl_staleness_unversioned_total, never as staleness 0. By rl_dataset when given.",
        "short",
        "tokens / s",
        prom(
            "A",
            promql.rate("rl_staleness_unversioned_total", RUN, by="rl_dataset", window=WINDOW),
            "unversioned {{rl_dataset}}",
        ),
    ).min(0)
    drops = series(
        39,
        "Samples dropped as too stale",
        "Samples the trainer dropped for staleness (record_staleness_drops), per interval and rl_dataset.",
        "short",
        "samples per interval",
        prom(
            "A",
            promql.increase("rl_staleness_dropped_total", RUN, by="rl_dataset", window=WINDOW),
            "dropped {{rl_dataset}}",
        ),
    ).min(0)
    return Row(
        "Data & staleness",
        34,
        (
            reward_by_dataset.span(8).height(8),
            by_dataset.span(8).height(8),
            by_phase.span(8).height(8),
            unversioned.span(12).height(7),
            drops.span(12).height(7),
        ),
    )
