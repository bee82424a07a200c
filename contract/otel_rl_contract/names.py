"""The wire contract: every metric, attribute and event name otel-rl emits, and how the collector merges each metric.

Dashboards, alert rules and users depend on these names; ``docs/contract.md`` documents them with the Prometheus
series they become. ``tests/unit/test_contract.py`` pins the names and checks that the collector configurations
merge every metric the way its ``merge`` rule says; ``tests/pipeline/test_aggregation.py`` pins the Prometheus
series against the real stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from otel_rl_contract._version import __version__

SCOPE_NAME = "otel_rl"
SCOPE_VERSION = __version__

# Resource attributes
RUN_ID = "rl.run.id"
RUN_GROUP = "rl.run.group"
"""The run's group, shared by the runs one compares as one (seeds of one configuration): given at ``setup()``
(``TelemetryConfig.group``), absent when not."""
RANK = "rl.rank"
WORLD_SIZE = "rl.world_size"
LOCAL_RANK = "rl.local_rank"
ROLE = "rl.role"
RUN_ATTRIBUTES: tuple[str, ...] = (RUN_ID, RUN_GROUP, ROLE, WORLD_SIZE)
"""The resource attributes of a whole run, the same on every rank: they survive the collector's merge of the ranks and
become a label of every aggregated series (``transform/forget_rank`` keeps them, ``resource_constant_labels``)."""

# Metric attributes
REWARD_FN = "rl.reward.fn"
REWARD_FN_TOTAL = "total"
OVERFLOW = "_overflow"
"""The ``rl.reward.fn`` / ``rl.metric.key`` value of every name past the cardinality cap."""
METRIC_KEY = "rl.metric.key"
DATASET = "rl.dataset"
"""Which dataset (data source) rewards and staleness came from; capped by ``max_datasets``."""
STALENESS_PHASE = "rl.staleness.phase"
"""``in_flight`` (generated while the trainer moved on) or ``in_queue`` (waited in the buffer), when given."""
KL_ESTIMATOR = "rl.kl.estimator"
"""``k1`` (log ratio) or ``k3`` ((r - 1) - log r), the estimators of the inference/trainer mismatch KL."""
GROUP_OUTCOME = "rl.group.outcome"
"""``none``, ``some`` or ``all``: how many rollouts of a prompt group were solved."""
SIGN = "rl.sign"
"""``positive``, ``negative`` or ``zero``."""
PHASE = "rl.phase.name"
"""``generate``, ``score``, ``train``, ``sync`` or any phase name the trainer sets (capped)."""
SPAN_NAME = "span.name"
"""The phase span's name on the phase metrics (the phase itself: the collector's spanmetrics dimension too)."""
JOINT_X = "rl.joint.x"
"""What ``rl.joint`` pairs with the total reward: ``response_length``, or ``reward.<fn>`` for a reward function."""
JOINT_MOMENT = "rl.joint.moment"
"""Which sum of ``rl.joint`` a stream holds: ``n``, ``xx``, ``yy``, and ``x``, ``y``, ``xy`` each as ``.positive``
and ``.negative`` parts (x the paired value, y the total reward)."""
SELF_METRIC = "otel_rl.metric"
SELF_REASON = "otel_rl.reason"
SELF_SIGNAL = "otel_rl.signal"
METRIC_ATTRIBUTES: tuple[str, ...] = (
    RUN_ID,
    RANK,
    WORLD_SIZE,
    LOCAL_RANK,
    ROLE,
    REWARD_FN,
    METRIC_KEY,
    DATASET,
    STALENESS_PHASE,
    KL_ESTIMATOR,
    GROUP_OUTCOME,
    SIGN,
    PHASE,
    SPAN_NAME,
    JOINT_X,
    JOINT_MOMENT,
    SELF_METRIC,
    SELF_REASON,
    SELF_SIGNAL,
)
"""Every attribute a metric point or its resource carries into Prometheus, where each is a label
(:func:`otel_rl_contract.prometheus.label`): the resource's (rank ones only on the per-rank view) and the points'."""

# Sample records (log records and span events) and exemplars
SAMPLE_EVENT = "rl.sample"
SAMPLE_ID = "rl.sample.id"
"""Unique per emitted record (32 hex digits, fixed at emit time): a resent record carries it unchanged, so queries
count each sample once (``count_uniq(rl.sample.id)``)."""
SAMPLE_SELECTION = "rl.sample.selection"
SAMPLE_TABLE = "rl.sample.table"
"""Which table (torchforge's table name, e.g. ``rollout/sample``) a sample belongs to; each keeps its own
top/bottom-k."""
SAMPLE_TABLE_DEFAULT = "samples"
SAMPLE_TRUNCATED = "rl.sample.truncated"
SAMPLE_EXTRA_PREFIX = "rl.sample.extra."
SAMPLE_STEP = "rl.step"
SAMPLE_EPISODE_ID = "rl.episode.id"
SAMPLE_GROUP_ID = "rl.group.id"
"""The prompt group a sample's episode belongs to (a GRPO group's rollouts share it), as text."""
SAMPLE_POLICY_VERSION = "rl.policy.version"
SAMPLE_REWARD = "rl.reward"
SAMPLE_REWARD_PREFIX = "rl.reward."
"""Followed by a reward function's name: one attribute per entry of the reward breakdown."""
SAMPLE_ADVANTAGE = "rl.advantage"
SAMPLE_STALENESS = "rl.staleness"
SAMPLE_REQUEST_LENGTH = "rl.request.length"
SAMPLE_RESPONSE_LENGTH = "rl.response.length"
STEP_SPAN = "rl.step"
"""The root span of a step's trace, emitted by rank 0 (every rank derives its ids from the run id and the step)."""
RANK_STEP_SPAN = "rl.rank.step"
"""Each rank's span of a step, under the step's root: its phases are its children, its samples' records name it
(and with ``samples_as_span_events`` carry them as events)."""
QUEUE_PHASE = "queue"
"""The phase of a trajectory between its generation and the phase that consumes it (``links``)."""

Kind = Literal["histogram", "counter", "gauge"]
LayoutRole = Literal["reward", "unbounded", "staleness", "length", "ratio", "small"]
"""What a distribution's values are like, which decides its explicit bucket bounds
(``otel_rl._record.buckets.layout_for``): ``reward`` (signed, mostly within [-1, 1]: rewards, advantages;
``reward_bounds``), ``unbounded`` (anything: one bucket), ``staleness`` (integer versions >= 0; ``staleness_bounds``),
``length`` (token counts), ``ratio`` (positive, around 1: importance ratios) and ``small`` (signed, mostly small
magnitudes: entropy in nats, KL estimates). Exponential histograms need no bounds: every role has the same exponential
layout."""
Merge = Literal["sum", "max", "min", "mean"]
"""How the collector merges the ranks' points of one metric into the run's point."""
HistogramForm = Literal["exponential", "explicit"]
"""How a histogram reaches Prometheus: one native histogram, or classic ``_bucket``/``_count``/``_sum`` series."""


@dataclass(frozen=True)
class MetricName:
    """One metric of the contract: its OpenTelemetry name, kind, unit, meaning, and how ranks merge.

    Histograms and counters always merge by ``sum``; a gauge names its rule: ``max`` or ``min`` for extremes and
    versions, ``sum`` for per-rank indicators (1 per reporting rank: the sum counts ranks), ``mean`` for values a
    trainer reduced itself.
    """

    name: str
    kind: Kind
    unit: str
    description: str
    merge: Merge = "sum"
    form: HistogramForm | None = None
    """A histogram's form whatever the run's ``TelemetryConfig.histogram`` (None: that setting decides)."""

    def __post_init__(self) -> None:
        if self.kind != "gauge" and self.merge != "sum":
            raise ValueError(f'"merge" of {self.name!r} must be "sum" for histograms and counters, got {self.merge!r}')
        if self.kind != "histogram" and self.form is not None:
            raise ValueError(f'"form" of {self.name!r} must be None for a {self.kind}, got {self.form!r}')


@dataclass(frozen=True)
class Distribution:
    """The metrics one recorded distribution becomes: its histogram, the window extremes, and for signed values the
    monotone sum parts and the sum of squares (``None`` for staleness, whose sum is monotone already)."""

    histogram: MetricName
    maximum: MetricName
    minimum: MetricName
    role: LayoutRole
    positive: MetricName | None = None
    negative: MetricName | None = None
    squares: MetricName | None = None

    @property
    def metrics(self) -> tuple[MetricName, ...]:
        """Every metric of the distribution."""
        parts = (self.histogram, self.positive, self.negative, self.squares, self.maximum, self.minimum)
        return tuple(metric for metric in parts if metric is not None)

    @property
    def sums(self) -> tuple[MetricName, MetricName, MetricName]:
        """The exact counters of a signed distribution: the sums of its positive parts, of its negative parts (both
        monotone, so a mean over a window is exact for negative values too) and of its squares.

        Raises:
            ValueError: for a distribution of counts, which has none (its histogram's sum is monotone already).
        """
        if self.positive is None or self.negative is None or self.squares is None:
            raise ValueError(f"{self.histogram.name!r} has no signed sums: it counts values >= 0")
        return self.positive, self.negative, self.squares


def _signed(name: str, what: str, role: LayoutRole, unit: str = "") -> Distribution:
    """The metrics of a signed distribution ``name``: rewards and ``record_metric`` values."""
    return Distribution(
        role=role,
        histogram=MetricName(name, "histogram", unit, f"{what}."),
        maximum=MetricName(f"{name}.max", "gauge", unit, f"Largest of {what} over the last extremes_hold_s.", "max"),
        minimum=MetricName(f"{name}.min", "gauge", unit, f"Smallest of {what} over the last extremes_hold_s.", "min"),
        positive=MetricName(
            f"{name}.positive", "counter", unit, f"Sum of max(v, 0) of {what}: monotone, so rate() works."
        ),
        negative=MetricName(
            f"{name}.negative", "counter", unit, f"Sum of max(-v, 0) of {what}: monotone, so rate() works."
        ),
        squares=MetricName(f"{name}.squares", "counter", "", f"Sum of squares of {what}, for the standard deviation."),
    )


REWARDS = _signed("rl.reward", "rewards, one per rollout (or per masked element)", "reward")
METRICS = _signed("rl.metric", "record_metric values, by rl.metric.key", "unbounded")


def _counts(name: str, what: str, unit: str, role: LayoutRole = "staleness") -> Distribution:
    """The metrics of a distribution of counts ``name`` (integers >= 0, whose sum is monotone already)."""
    return Distribution(
        role=role,
        histogram=MetricName(name, "histogram", unit, f"{what}."),
        maximum=MetricName(f"{name}.max", "gauge", unit, f"Largest of {what} over the last extremes_hold_s.", "max"),
        minimum=MetricName(f"{name}.min", "gauge", unit, f"Smallest of {what} over the last extremes_hold_s.", "min"),
    )


STALENESS = _counts("rl.staleness", "policy lag: trainer version minus the version that generated a token", "{version}")
ADVANTAGES = _signed("rl.advantage", "advantages, one per rollout", "reward")
RESPONSE_LENGTHS = _signed("rl.response.length", "response lengths, one per rollout", "length", "{token}")
ENTROPY = _signed("rl.entropy", "per-token policy entropy over unmasked tokens", "small", "{nat}")
IMPORTANCE_RATIO = _signed("rl.importance_ratio", "per-token importance ratios pi_train / pi_inference", "ratio")
MISMATCH_KL = _signed("rl.mismatch.kl", "per-token KL(pi_inference || pi_train) estimates, by rl.kl.estimator", "small")
TRAJECTORY_VERSIONS = _counts(
    "rl.trajectory.versions", "policy versions one trajectory's tokens were generated with", "{version}"
)
DROPPED_LENGTHS = _counts(
    "rl.dropped.response.length", "response lengths of rollouts dropped as too stale", "{token}", "length"
)
DROPPED_STALENESS = _counts(
    "rl.dropped.staleness", "policy lag of each rollout dropped as too stale (its oldest token's)", "{version}"
)
DISTRIBUTIONS: tuple[Distribution, ...] = (
    REWARDS,
    METRICS,
    STALENESS,
    ADVANTAGES,
    RESPONSE_LENGTHS,
    ENTROPY,
    IMPORTANCE_RATIO,
    MISMATCH_KL,
    TRAJECTORY_VERSIONS,
    DROPPED_LENGTHS,
    DROPPED_STALENESS,
)
"""Every distribution otel-rl records."""
EXEMPLAR_CARRIERS: tuple[Distribution, ...] = (REWARDS, STALENESS)
"""The distributions whose exemplars (the kept samples) the collector also writes in a series of their own, each
flush's merged histogram (``filter/exemplar_carriers``; :func:`otel_rl_contract.prometheus.exemplar_series`):
``delta_to_cumulative`` keeps only a stream's first exemplars on the cumulative series."""
GROUPS = MetricName("rl.groups", "counter", "{group}", "Prompt groups by rl.group.outcome (none / some / all solved).")
GROUPS_ZERO_VARIANCE = MetricName(
    "rl.groups.zero_variance", "counter", "{group}", "Prompt groups whose rewards are all equal: no GRPO signal."
)
ADVANTAGE_SIGNS = MetricName("rl.advantage.sign", "counter", "{rollout}", "Rollouts by the rl.sign of their advantage.")
UNVERSIONED = MetricName(
    "rl.staleness.unversioned", "counter", "{token}", "Tokens that arrived without a policy version: never lag 0."
)
STALENESS_DROPPED = MetricName(
    "rl.staleness.dropped", "counter", "{sample}", "Samples the trainer dropped for staleness, by rl.dataset."
)
JOINT = MetricName(
    "rl.joint",
    "counter",
    "",
    "Sums over the rollouts that have both of rl.joint.x and the total reward, by rl.joint.moment: what their "
    "correlation, covariance and the variance shares of reward functions need, merged exactly.",
)
GROUND_TRUTH = MetricName(
    "rl.reward.ground_truth",
    "gauge",
    "",
    "1 on the rl.reward.fn the run designates as its ground truth (TelemetryConfig.ground_truth_reward).",
    "max",
)
GPU_SECONDS = MetricName(
    "rl.gpu.seconds", "counter", "s", "GPU-seconds the ranks held: each rank's GPUs times its lifetime, summed."
)
GPU_HOUR_PRICE = MetricName(
    "rl.gpu.hour_price",
    "gauge",
    "",
    "Price of one GPU-hour as the run states it (TelemetryConfig.gpu_hour_price).",
    "max",
)
RUN_START = MetricName("rl.run.start_time", "gauge", "s", "Unix time the run's first process started.", "min")
RUN_FINISHED = MetricName(
    "rl.run.finished", "gauge", "", "1 once every reporting rank has shut down cleanly, else 0.", "min"
)
RANKS_UP = MetricName("rl.ranks.up", "gauge", "{rank}", "Ranks reporting (each reports 1; the collector sums).", "sum")
RANKS_EXPECTED = MetricName("rl.ranks.expected", "gauge", "{rank}", "The run's world size.", "max")
PHASES = MetricName(
    "rl.phase", "gauge", "{rank}", "Ranks in each rl.phase.name (each rank reports 1 for its phase).", "sum"
)
PHASE_STARTED = MetricName(
    "rl.phase.started",
    "gauge",
    "s",
    "Unix time the longest-running rank in each rl.phase.name entered it (each rank reports its open phases).",
    "min",
)
TOKENS_GENERATED = MetricName("rl.tokens.generated", "counter", "{token}", "Tokens generated by the rollouts.")
TOKENS_TRAINED = MetricName("rl.tokens.trained", "counter", "{token}", "Tokens the trainer trained on.")
SAMPLES_TRAINED = MetricName("rl.samples.trained", "counter", "{sample}", "Samples (rollouts) the trainer trained on.")
FLOPS_PER_TOKEN = MetricName(
    "rl.flops.per_token",
    "gauge",
    "{flop}",
    "Training FLOPs per trained token, as the user states (6N for N parameters).",
    "max",
)
FLOPS_PEAK = MetricName(
    "rl.flops.peak",
    "gauge",
    "{flop}/s",
    "Peak FLOP/s of the ranks that train (each states its own; the collector sums).",
    "sum",
)
QUEUE_DEPTH = MetricName(
    "rl.queue.depth", "gauge", "{trajectory}", "Trajectories waiting for the trainer, over the ranks.", "sum"
)
IN_FLIGHT = MetricName(
    "rl.rollouts.in_flight", "gauge", "{rollout}", "Rollouts being generated, over the ranks.", "sum"
)
BUFFER_USED = MetricName(
    "rl.buffer.used", "gauge", "{sample}", "Samples held in the replay buffer, over the ranks.", "sum"
)
BUFFER_CAPACITY = MetricName(
    "rl.buffer.capacity", "gauge", "{sample}", "Replay buffer capacity, over the ranks.", "sum"
)
REPORTED = MetricName(
    "rl.reported",
    "gauge",
    "",
    "A value the trainer reduced itself and sends as a gauge (NeMo Lens's rl.reward.mean, rl.entropy, ...: the "
    "collector maps them), by rl.metric.key; shown as it is, never as a distribution.",
    "mean",
)
POLICY_VERSION = MetricName("rl.policy.version", "gauge", "{version}", "The trainer's current policy version.", "max")
STEP = MetricName("rl.step", "gauge", "{step}", "The training step last declared with Telemetry.step().", "max")
SAMPLES_EXPORTED = MetricName(
    "otel_rl.samples.exported", "counter", "{sample}", "Sample records handed to the exporter."
)
SAMPLES_DROPPED = MetricName(
    "otel_rl.samples.dropped", "counter", "{sample}", "Sample records lost, by otel_rl.reason."
)
SPANS_EXPORTED = MetricName("otel_rl.spans.exported", "counter", "{span}", "Spans handed to the exporter.")
SPANS_DROPPED = MetricName("otel_rl.spans.dropped", "counter", "{span}", "Spans lost, by otel_rl.reason.")
PHASE_DURATION = MetricName(
    "rl.phase.duration",
    "histogram",
    "s",
    "Seconds of each phase span the rank ended (one per phase and step), by rl.phase.name and span.name.",
    form="explicit",
)
PHASE_CALLS = MetricName("rl.phase.calls", "counter", "", "Phase spans the rank ended, by rl.phase.name and span.name.")
PHASE_BOUNDS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
    300,
    600,
    1200,
    1800,
    3600,
)
"""The bucket bounds of ``rl.phase.duration`` (s), from a millisecond (a scoring call) to an hour (a long generation or
a checkpoint): those of the collector's spanmetrics connector for other senders' phase spans, so both merge."""
VALUES_REJECTED = MetricName(
    "otel_rl.values.rejected",
    "counter",
    "{value}",
    "Values rejected as bad input, by otel_rl.metric and otel_rl.reason.",
)
VALUES_RECORDED = MetricName(
    "otel_rl.values.recorded",
    "counter",
    "{value}",
    "Values folded into each histogram, by otel_rl.metric: what the histogram's count must reach in Prometheus.",
)
EXPORT_FAILURES = MetricName(
    "otel_rl.export.failures", "counter", "{export}", "Failed export attempts, by otel_rl.signal."
)
EXPORT_UNENCODABLE = MetricName(
    "otel_rl.export.unencodable",
    "counter",
    "{item}",
    "Metric streams and sample records left out because they could not be encoded, by otel_rl.signal.",
)
MERGE_CANARY = MetricName(
    "otel_rl.merge.canary",
    "histogram",
    "",
    "Fixed values every rank records at each step (otel_rl._state.canary): counts outside MERGE_CANARY_BUCKETS "
    "after the collector merged the ranks mean it did not merge exponential histograms exactly.",
    form="exponential",
)
MERGE_CANARY_SCALE = 5
"""The scale of the merge canary's exponential histogram, whatever ``histogram_scale`` the run uses."""
MERGE_CANARY_BUCKETS: tuple[tuple[int, ...], tuple[int, ...]] = ((-100, 72), (-40, 100))
"""The bucket indices (OpenTelemetry's, at ``MERGE_CANARY_SCALE``) that even and odd ranks record one value into,
at each step: offsets that differ between ranks, gaps, and a span above 160 buckets, what the stock merges get wrong."""

ALL_METRICS: tuple[MetricName, ...] = (
    *REWARDS.metrics,
    *STALENESS.metrics,
    POLICY_VERSION,
    STEP,
    SAMPLES_EXPORTED,
    SAMPLES_DROPPED,
    SPANS_EXPORTED,
    SPANS_DROPPED,
    VALUES_REJECTED,
    VALUES_RECORDED,
    EXPORT_FAILURES,
    EXPORT_UNENCODABLE,
    MERGE_CANARY,
    *METRICS.metrics,
    *ADVANTAGES.metrics,
    *RESPONSE_LENGTHS.metrics,
    *ENTROPY.metrics,
    *IMPORTANCE_RATIO.metrics,
    *MISMATCH_KL.metrics,
    GROUPS,
    GROUPS_ZERO_VARIANCE,
    ADVANTAGE_SIGNS,
    UNVERSIONED,
    STALENESS_DROPPED,
    RUN_START,
    RUN_FINISHED,
    RANKS_UP,
    RANKS_EXPECTED,
    PHASES,
    PHASE_STARTED,
    PHASE_DURATION,
    PHASE_CALLS,
    TOKENS_GENERATED,
    TOKENS_TRAINED,
    SAMPLES_TRAINED,
    FLOPS_PER_TOKEN,
    FLOPS_PEAK,
    QUEUE_DEPTH,
    IN_FLIGHT,
    BUFFER_USED,
    BUFFER_CAPACITY,
    REPORTED,
    *TRAJECTORY_VERSIONS.metrics,
    *DROPPED_LENGTHS.metrics,
    *DROPPED_STALENESS.metrics,
    JOINT,
    GROUND_TRUTH,
    GPU_SECONDS,
    GPU_HOUR_PRICE,
)
