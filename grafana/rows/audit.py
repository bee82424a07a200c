"""Row "Audit": the signals the audit rules read together (the audit of prometheus/rules/otel_rl_windows.yml): the
total reward beside the ground truth, what correlates with the total, each function's share of its variance, what
stale drops leave out, and what the run costs."""

from __future__ import annotations

import otel_rl_contract as contract
from otel_rl_ops import promql

from rows.panels import JOINT_X, REWARD_FN, RUN, TOTAL, WINDOW, Row, legend, prom, series

GROUND_TRUTH = f"max by ({REWARD_FN}) ({contract.series(contract.GROUND_TRUTH).name}{{{RUN}}}) == 1"
"""The run's ground-truth reward function (``TelemetryConfig.ground_truth_reward``), as a series of value 1."""


def row() -> Row:
    """The audit row."""
    truth = series(
        61,
        "Total reward and ground truth (mean)",
        "The mean total reward beside the mean of the run's ground-truth function "
        "(TelemetryConfig.ground_truth_reward, default correctness), from the exact counters. The total rising "
        "while the ground truth stalls or falls is reward gaming (RLRewardGaming).",
        "none",
        "mean reward",
        prom("A", promql.mean(contract.REWARDS, TOTAL, window=WINDOW), "total"),
        prom(
            "B",
            f"{promql.mean(contract.REWARDS, RUN, by=REWARD_FN, window=WINDOW)} * on ({REWARD_FN}) group_left () "
            f"({GROUND_TRUTH})",
            f"{legend(REWARD_FN)} (ground truth)",
        ),
    )
    correlation = (
        series(
            62,
            "Correlation with the total reward",
            "Pearson correlation over the interval's rollouts of response length, and of each reward function, with "
            "the total reward (record_rollouts; exact sums merged over ranks). Length rising towards 1 means length is "
            "paid (RLLengthRewardCorrelationRising).",
            "none",
            "correlation",
            prom("A", promql.correlation(RUN, window=WINDOW), legend(JOINT_X)),
        )
        .min(-1)
        .max(1)
    )
    shares = series(
        63,
        "Reward variance share by function",
        "Cov(f, total) / Var(total) per reward function over the interval: the shares of functions that add up to the "
        "total sum to 1. The function with the largest share decides the advantages; one other than the ground truth "
        "above 0.8 fires RLRewardFunctionDominates.",
        "percentunit",
        "share of variance",
        prom("A", promql.variance_share(RUN, window=WINDOW), legend(JOINT_X)),
    )
    drops = series(
        64,
        "Stale drops: length dropped and trained",
        "Mean response length of the rollouts dropped as too stale (record_staleness_drops) beside that of the "
        "rollouts trained on (record_rollouts). Dropped ones much longer: the run trains on the short, easy problems "
        "(RLStaleDropsBiasedByLength).",
        "none",
        "tokens",
        prom(
            "A",
            promql.histogram_mean(contract.series(contract.DROPPED_LENGTHS.histogram), RUN, window=WINDOW),
            "dropped",
        ),
        prom("B", promql.mean(contract.RESPONSE_LENGTHS, RUN, window=WINDOW), "trained"),
    )
    cost = series(
        65,
        "Cost",
        "GPU-hours held by the ranks (gpus_per_rank times each rank's lifetime) times the run's price per GPU-hour "
        "(gpu_hour_price): so far, per step, per million trained tokens and per prompt group solved by some or all of "
        "its rollouts. Nothing unless the run states a price.",
        "none",
        "cost",
        prom("A", promql.cost(RUN), "so far"),
        prom("B", promql.cost_per(RUN, "step"), "per step"),
        prom("C", promql.cost_per(RUN, "million_tokens"), "per million trained tokens"),
        prom("D", promql.cost_per(RUN, "solved_group"), "per solved group"),
    )
    return Row(
        "Audit",
        60,
        (
            truth.span(8).height(8),
            correlation.span(8).height(8),
            shares.span(8).height(8),
            drops.span(12).height(8),
            cost.span(12).height(8),
        ),
    )
