"""The wire contract: every metric, attribute and event name otel-rl emits, and how the collector merges each metric.

Dashboards, alert rules and users depend on these names; ``docs/contract.md`` documents them with the Prometheus
series they become. ``tests/unit/test_contract.py`` pins the names and checks that the collector configurations
merge every metric the way its ``merge`` rule says; ``tests/pipeline/test_aggregation.py`` pins the Prometheus
series against the real stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SCOPE_NAME = "otel_rl"
SCOPE_VERSION = "0.1.0"

# Resource attributes
RUN_ID = "rl.run.id"
RANK = "rl.rank"
WORLD_SIZE = "rl.world_size"
LOCAL_RANK = "rl.local_rank"
ROLE = "rl.role"

# Metric attributes
REWARD_FN = "rl.reward.fn"
REWARD_FN_TOTAL = "total"
OVERFLOW = "_overflow"
"""The ``rl.reward.fn`` / ``rl.metric.key`` value of every name past the cardinality cap."""
METRIC_KEY = "rl.metric.key"
SELF_METRIC = "otel_rl.metric"
SELF_REASON = "otel_rl.reason"
SELF_SIGNAL = "otel_rl.signal"

# Sample records (log records and span events) and exemplars
SAMPLE_EVENT = "rl.sample"
SAMPLE_SELECTION = "rl.sample.selection"
SAMPLE_TABLE = "rl.sample.table"
"""Which table (torchforge's table name, e.g. ``rollout/sample``) a sample belongs to; each keeps its own top/bottom-k."""
SAMPLE_TABLE_DEFAULT = "samples"
SAMPLE_TRUNCATED = "rl.sample.truncated"
SAMPLE_EXTRA_PREFIX = "rl.sample.extra."
SAMPLE_STEP = "rl.step"
SAMPLE_EPISODE_ID = "rl.episode.id"
SAMPLE_POLICY_VERSION = "rl.policy.version"
SAMPLE_REWARD = "rl.reward"
SAMPLE_REWARD_PREFIX = "rl.reward."
"""Followed by a reward function's name: one attribute per entry of the reward breakdown."""
SAMPLE_ADVANTAGE = "rl.advantage"
SAMPLE_STALENESS = "rl.staleness"
SAMPLE_REQUEST_LENGTH = "rl.request.length"
SAMPLE_RESPONSE_LENGTH = "rl.response.length"
STEP_SPAN = "rl.step"
"""The per-step span that carries samples as events (``samples_as_span_events``); its attribute ``rl.step``."""

Kind = Literal["histogram", "counter", "gauge"]
Merge = Literal["sum", "max", "min"]
"""How the collector merges the ranks' points of one metric into the run's point."""


@dataclass(frozen=True)
class MetricName:
    """One metric of the contract: its OpenTelemetry name, kind, unit, meaning, and how ranks merge.

    Histograms and counters always merge by ``sum``; a gauge names its rule (``max`` or ``min``).
    """

    name: str
    kind: Kind
    unit: str
    description: str
    merge: Merge = "sum"

    def __post_init__(self) -> None:
        if (self.kind == "gauge") == (self.merge == "sum"):
            raise ValueError(f'"merge" of {self.name!r} must be "sum" for histograms and counters only, got {self.merge!r}')


@dataclass(frozen=True)
class Distribution:
    """The metrics one recorded distribution becomes: its histogram, the window extremes, and for signed values the
    monotone sum parts and the sum of squares (``None`` for staleness, whose sum is monotone already)."""

    histogram: MetricName
    maximum: MetricName
    minimum: MetricName
    positive: MetricName | None = None
    negative: MetricName | None = None
    squares: MetricName | None = None

    @property
    def metrics(self) -> tuple[MetricName, ...]:
        """Every metric of the distribution."""
        parts = (self.histogram, self.positive, self.negative, self.squares, self.maximum, self.minimum)
        return tuple(metric for metric in parts if metric is not None)


def _signed(name: str, what: str, unit: str = "") -> Distribution:
    """The metrics of a signed distribution ``name``: rewards and ``record_metric`` values."""
    return Distribution(
        histogram=MetricName(name, "histogram", unit, f"{what}."),
        maximum=MetricName(f"{name}.max", "gauge", unit, f"Largest of {what} over the last extremes_hold_s.", "max"),
        minimum=MetricName(f"{name}.min", "gauge", unit, f"Smallest of {what} over the last extremes_hold_s.", "min"),
        positive=MetricName(f"{name}.positive", "counter", unit, f"Sum of max(v, 0) of {what}: monotone, so rate() works."),
        negative=MetricName(f"{name}.negative", "counter", unit, f"Sum of max(-v, 0) of {what}: monotone, so rate() works."),
        squares=MetricName(f"{name}.squares", "counter", "", f"Sum of squares of {what}, for the standard deviation."),
    )


REWARDS = _signed("rl.reward", "rewards, one per rollout (or per masked element)")
METRICS = _signed("rl.metric", "record_metric values, by rl.metric.key")
STALENESS = Distribution(
    histogram=MetricName(
        "rl.staleness", "histogram", "{version}", "Policy lag: trainer version minus the version that generated a token."
    ),
    maximum=MetricName("rl.staleness.max", "gauge", "{version}", "Largest staleness over the last extremes_hold_s.", "max"),
    minimum=MetricName("rl.staleness.min", "gauge", "{version}", "Smallest staleness over the last extremes_hold_s.", "min"),
)
POLICY_VERSION = MetricName("rl.policy.version", "gauge", "{version}", "The trainer's current policy version.", "max")
STEP = MetricName("rl.step", "gauge", "{step}", "The training step last declared with Telemetry.step().", "max")
SAMPLES_EXPORTED = MetricName("otel_rl.samples.exported", "counter", "{sample}", "Sample records handed to the exporter.")
SAMPLES_DROPPED = MetricName("otel_rl.samples.dropped", "counter", "{sample}", "Sample records lost, by otel_rl.reason.")
VALUES_REJECTED = MetricName(
    "otel_rl.values.rejected", "counter", "{value}", "Values rejected as bad input, by otel_rl.metric and otel_rl.reason."
)
VALUES_RECORDED = MetricName(
    "otel_rl.values.recorded",
    "counter",
    "{value}",
    "Values folded into each histogram, by otel_rl.metric: what the histogram's count must reach in Prometheus.",
)
EXPORT_FAILURES = MetricName("otel_rl.export.failures", "counter", "{export}", "Failed export attempts, by otel_rl.signal.")

ALL_METRICS: tuple[MetricName, ...] = (
    *REWARDS.metrics,
    *STALENESS.metrics,
    POLICY_VERSION,
    STEP,
    SAMPLES_EXPORTED,
    SAMPLES_DROPPED,
    VALUES_REJECTED,
    VALUES_RECORDED,
    EXPORT_FAILURES,
    *METRICS.metrics,
)
