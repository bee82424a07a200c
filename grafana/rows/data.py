"""Row "Data & staleness": reward and staleness per data source (``rl_dataset``) and per staleness phase, tokens
without a version, samples dropped as too stale."""

from __future__ import annotations

import otel_rl_contract as contract
from grafana_foundation_sdk.builders import timeseries
from otel_rl_ops import promql

from rows.panels import DATASET, RUN, STALENESS_PHASE, TOTAL, WINDOW, Row, legend, prom, series

HAS_DATASET = promql.match(DATASET, "", "!=")
WITH_DATASET = f"{RUN},{HAS_DATASET}"
WITH_PHASE = f"{RUN},{promql.match(STALENESS_PHASE, '', '!=')}"


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
                promql.quantile(q, contract.STALENESS, selector, by=label, window=WINDOW, integers=True),
                f"{legend(label)} p{q * 100:g}",
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
            promql.mean(contract.REWARDS, f"{TOTAL},{HAS_DATASET}", by=DATASET, window=WINDOW),
            legend(DATASET),
        ),
    )
    by_dataset = _staleness_by(
        36,
        "Staleness by dataset: p50 and p99",
        "Per rl_dataset (record_staleness(..., dataset=)): percentiles of per-token staleness, clamped to the "
        "dataset's exact min and max.",
        WITH_DATASET,
        DATASET,
    )
    by_phase = _staleness_by(
        37,
        "Staleness by phase: p50 and p99",
        "Per rl_staleness_phase (record_staleness(..., phase=)): in_flight (generated while the trainer moved on) "
        "and in_queue (waited in the buffer), clamped to each phase's exact min and max.",
        WITH_PHASE,
        STALENESS_PHASE,
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
            promql.rate(contract.series(contract.UNVERSIONED), RUN, by=DATASET, window=WINDOW),
            f"unversioned {legend(DATASET)}",
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
            promql.increase(contract.series(contract.STALENESS_DROPPED), RUN, by=DATASET, window=WINDOW),
            f"dropped {legend(DATASET)}",
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
