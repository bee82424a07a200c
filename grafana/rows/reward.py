"""Row "Reward": the total reward's mean, percentiles and distribution, per reward function, zero-variance groups
and every other recorded metric."""

from __future__ import annotations

import otel_rl_contract as contract
from otel_rl_ops import promql

from rows.panels import METRIC_KEY, REWARD_FN, RUN, TOTAL, WINDOW, Row, heatmap_panel, legend, prom, series
from rows.rollouts import ZERO_VARIANCE_FRACTION


def row() -> Row:
    """The reward row."""
    reward = series(
        2,
        "Reward (total): mean and percentiles",
        "Mean from the exact positive/negative counters ÷ count; p50/p90/p99 estimated from the histogram "
        "(native, else classic buckets) and clamped to the exact min and max of the same interval. A trainer that "
        "sends only its batch's mean (NeMo Lens) shows that mean alone: 'mean (reported)'.",
        "none",
        "reward",
        prom("A", promql.mean(contract.REWARDS, TOTAL, window=WINDOW), "mean"),
        prom("B", promql.quantile(0.5, contract.REWARDS, TOTAL, window=WINDOW), "p50"),
        prom("C", promql.quantile(0.9, contract.REWARDS, TOTAL, window=WINDOW), "p90"),
        prom("D", promql.quantile(0.99, contract.REWARDS, TOTAL, window=WINDOW), "p99"),
        prom("E", promql.reported(RUN, "reward/mean"), "mean (reported)"),
    )
    distribution = heatmap_panel(
        3,
        "Reward (total) distribution",
        "Rewards recorded per bucket and interval (native histogram buckets; classic buckets for "
        'histogram="explicit"). Exemplars link to the kept samples.',
        "reward",
        promql.distribution(contract.REWARDS, TOTAL, window=WINDOW),
    )
    by_fn = series(
        4,
        "Mean reward by reward function",
        "Per rl.reward.fn, from the exact counters; 'total' is the reward the policy is trained on.",
        "none",
        "mean reward",
        prom("A", promql.mean(contract.REWARDS, RUN, by=REWARD_FN, window=WINDOW), legend(REWARD_FN)),
    )
    zero_variance = (
        series(
            5,
            "Zero-variance groups (fraction)",
            "Share of the interval's prompt groups whose rewards are all equal (rl_groups_zero_variance_total over "
            "rl_groups_total, counted by record_rollouts): groups that give no GRPO learning signal. A rise over an "
            "hour fires RLRewardCollapse (signal zero_variance), a high level RLZeroVarianceGroupsHigh.",
            "percentunit",
            "fraction of groups",
            prom("A", ZERO_VARIANCE_FRACTION, "zero-variance fraction"),
        )
        .min(0)
        .max(1)
    )
    metrics = series(
        6,
        "Recorded metrics (mean by key)",
        "Mean over the interval of every record_metric key (e.g. loss.policy), from the exact counters; and, as "
        "they are, the values a trainer reduced itself and sends as gauges (NeMo Lens: KL, losses, ...).",
        "none",
        "mean value",
        prom("A", promql.mean(contract.METRICS, RUN, by=METRIC_KEY, window=WINDOW), legend(METRIC_KEY)),
        prom("B", promql.reported(RUN), f"{legend(METRIC_KEY)} (reported)"),
    )
    return Row(
        "Reward",
        1,
        (
            reward.span(12).height(9),
            distribution.span(12).height(9),
            by_fn.span(8).height(8),
            zero_variance.span(8).height(8),
            metrics.span(8).height(8),
        ),
    )
