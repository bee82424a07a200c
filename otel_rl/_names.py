"""The wire contract: every metric, attribute and event name otel-rl emits.

Dashboards, alert rules and users depend on these names; ``docs/contract.md`` documents them with the
Prometheus series they become, and ``tests/test_contract.py`` pins both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SCOPE_NAME = "otel_rl"

# Resource attributes
RUN_ID = "rl.run.id"
RANK = "rl.rank"
WORLD_SIZE = "rl.world_size"
LOCAL_RANK = "rl.local_rank"
ROLE = "rl.role"

# Metric attributes
REWARD_FN = "rl.reward.fn"
REWARD_FN_TOTAL = "total"
REWARD_FN_OVERFLOW = "_overflow"
METRIC_KEY = "rl.metric.key"
SELF_METRIC = "otel_rl.metric"
SELF_REASON = "otel_rl.reason"
SELF_SIGNAL = "otel_rl.signal"

# Sample records
SAMPLE_EVENT = "rl.sample"
SAMPLE_SELECTION = "rl.sample.selection"
SAMPLE_TRUNCATED = "rl.sample.truncated"
SAMPLE_EXTRA_PREFIX = "rl.sample.extra."

Kind = Literal["histogram", "counter", "gauge"]


@dataclass(frozen=True)
class MetricName:
    """One metric of the contract: its OpenTelemetry name, kind, unit and meaning."""

    name: str
    kind: Kind
    unit: str
    description: str


REWARD = MetricName("rl.reward", "histogram", "", "Rewards, one observation per rollout (or per masked element).")
REWARD_POSITIVE = MetricName(
    "rl.reward.positive", "counter", "", "Sum of the positive parts of rewards, max(r, 0): monotone, so rate() works."
)
REWARD_NEGATIVE = MetricName(
    "rl.reward.negative", "counter", "", "Sum of the negative parts of rewards, max(-r, 0): monotone, so rate() works."
)
REWARD_SQUARES = MetricName("rl.reward.squares", "counter", "", "Sum of squared rewards, for the standard deviation.")
REWARD_MAX = MetricName("rl.reward.max", "gauge", "", "Largest reward recorded over the last extremes_hold_s (10 s).")
REWARD_MIN = MetricName("rl.reward.min", "gauge", "", "Smallest reward recorded over the last extremes_hold_s (10 s).")
STALENESS = MetricName(
    "rl.staleness", "histogram", "{version}", "Policy lag: trainer version minus the version that generated a token."
)
STALENESS_MAX = MetricName(
    "rl.staleness.max", "gauge", "{version}", "Largest staleness over the last extremes_hold_s (10 s)."
)
STALENESS_MIN = MetricName(
    "rl.staleness.min", "gauge", "{version}", "Smallest staleness over the last extremes_hold_s (10 s)."
)
POLICY_VERSION = MetricName("rl.policy.version", "gauge", "{version}", "The trainer's current policy version.")
STEP = MetricName("rl.step", "gauge", "{step}", "The training step last declared with Telemetry.step().")
SAMPLES_EXPORTED = MetricName(
    "otel_rl.samples.exported", "counter", "{sample}", "Sample records handed to the exporter."
)
SAMPLES_DROPPED = MetricName(
    "otel_rl.samples.dropped", "counter", "{sample}", "Sample records lost, by otel_rl.reason."
)
VALUES_REJECTED = MetricName(
    "otel_rl.values.rejected",
    "counter",
    "{value}",
    "Values rejected as bad input, by otel_rl.metric and otel_rl.reason.",
)
EXPORT_FAILURES = MetricName(
    "otel_rl.export.failures", "counter", "{export}", "Failed export attempts, by otel_rl.signal."
)

METRIC = MetricName("rl.metric", "histogram", "", "Values of torchforge-style record_metric calls, by rl.metric.key.")
METRIC_POSITIVE = MetricName("rl.metric.positive", "counter", "", "Sum of max(v, 0) of record_metric values.")
METRIC_NEGATIVE = MetricName("rl.metric.negative", "counter", "", "Sum of max(-v, 0) of record_metric values.")
METRIC_SQUARES = MetricName("rl.metric.squares", "counter", "", "Sum of squared record_metric values.")
METRIC_MAX = MetricName(
    "rl.metric.max", "gauge", "", "Largest record_metric value over the last extremes_hold_s (10 s)."
)
METRIC_MIN = MetricName(
    "rl.metric.min", "gauge", "", "Smallest record_metric value over the last extremes_hold_s (10 s)."
)


@dataclass(frozen=True)
class Distribution:
    """The metrics one distribution becomes: histogram, monotone sum parts, squares, and window extremes."""

    histogram: MetricName
    positive: MetricName
    negative: MetricName
    squares: MetricName
    maximum: MetricName
    minimum: MetricName


REWARDS = Distribution(REWARD, REWARD_POSITIVE, REWARD_NEGATIVE, REWARD_SQUARES, REWARD_MAX, REWARD_MIN)
METRICS = Distribution(METRIC, METRIC_POSITIVE, METRIC_NEGATIVE, METRIC_SQUARES, METRIC_MAX, METRIC_MIN)

ALL_METRICS: tuple[MetricName, ...] = (
    REWARD,
    REWARD_POSITIVE,
    REWARD_NEGATIVE,
    REWARD_SQUARES,
    REWARD_MAX,
    REWARD_MIN,
    STALENESS,
    STALENESS_MAX,
    STALENESS_MIN,
    POLICY_VERSION,
    STEP,
    SAMPLES_EXPORTED,
    SAMPLES_DROPPED,
    VALUES_REJECTED,
    EXPORT_FAILURES,
    METRIC,
    METRIC_POSITIVE,
    METRIC_NEGATIVE,
    METRIC_SQUARES,
    METRIC_MAX,
    METRIC_MIN,
)
