"""Console output for ``exporter="console"``: one line per distribution per step and rank, with the dashboards' numbers.

The first thing a user without a stack sees, so it must agree with what the dashboards would show for the same
values. A step's line, e.g. ``[otel-rl] step 3 rank 0 rl.staleness n=100 mean=0.86 p50=1 p90=1 p99=1 min=0 max=1``:

- ``n`` and ``mean``: the values recorded in the step (the change of the cumulative count and sum);
- ``p50``, ``p90``, ``p99``: the dashboards' rule (``otel_rl_ops.promql.quantile``): Prometheus's
  ``histogram_quantile`` of the step's buckets (:func:`native_quantile` for exponential histograms,
  :func:`classic_quantile` for explicit ones), rounded for distributions of integers (roles in
  :data:`INTEGER_ROLES`), clamped to the exact extremes (:func:`shown_quantile`);
- ``min``, ``max``: the exact extremes of the step (console mode exports at each step and holds no extremes).

Besides: one ``counts`` line (the ``rl.*`` counters that moved), one ``state`` line (policy version and queue gauges,
when they changed), one ``phases`` line (count, mean and p99 of each phase's spans, :class:`PhaseSummary`) and one
line per kept sample. otel-rl's own telemetry (the merge canary, export and rejection counters) only with
``console_self_telemetry``. Nothing is printed for a step in which nothing was recorded.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

import otel_rl_contract as contract
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import ConsoleLogRecordExporter, LogRecordExporter
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    ExponentialHistogramDataPoint,
    Gauge,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricsData,
    Sum,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_rl._record.buckets import ExponentialLayout

PREFIX = "[otel-rl]"
QUANTILES = (0.5, 0.9, 0.99)
INTEGER_ROLES: frozenset[contract.LayoutRole] = frozenset({"staleness", "length"})
"""Roles whose values are integers (staleness, versions, token counts): their quantiles are rounded, as the
dashboards' ``integers=True`` does, so a lag of 1 never shows as 0.987."""
_INTEGER_HISTOGRAMS = frozenset(d.histogram.name for d in contract.DISTRIBUTIONS if d.role in INTEGER_ROLES)
_DISTRIBUTION_PARTS = frozenset(
    metric.name
    for d in contract.DISTRIBUTIONS
    for metric in (d.positive, d.negative, d.squares, d.maximum, d.minimum)
    if metric is not None
)
_STATE = (
    contract.POLICY_VERSION,
    contract.QUEUE_DEPTH,
    contract.IN_FLIGHT,
    contract.BUFFER_USED,
    contract.BUFFER_CAPACITY,
)
_SELF_PREFIX = "otel_rl."
_PHASE_METRICS = frozenset((contract.PHASE_DURATION.name, contract.PHASE_CALLS.name))
"""The phase durations and counts: the ``phases`` line shows them, from the spans."""
_TEXT_CHARS = 80


# -- the dashboards' quantile -----------------------------------------------------------------------------------


@functools.cache
def _octave(scale: int) -> tuple[float, ...]:
    """``2**(k / 2**scale)`` for ``k < 2**scale``, correctly rounded (the library's bucket boundaries)."""
    return tuple(ExponentialLayout(scale).boundaries.tolist())


def _boundary(index: int, scale: int) -> float:
    """``2**(index / 2**scale)``: the lower boundary of OpenTelemetry's positive bucket ``index``."""
    return math.ldexp(_octave(scale)[index & ((1 << scale) - 1)], index >> scale)


def native_quantile(
    q: float, *, scale: int, zero_count: int, positive: Mapping[int, int], negative: Mapping[int, int]
) -> float:
    """The ``q`` quantile of an exponential histogram as Prometheus's ``histogram_quantile`` computes it for the
    native histogram the collector makes of it (``promql.HistogramQuantile``); NaN when it is empty.

    ``positive``/``negative``: counts by OpenTelemetry bucket index (positive bucket ``i`` holds
    ``2**(i/2**scale) < v <= 2**((i+1)/2**scale)``, negative ones mirror it), ``zero_count`` the exact zeros.
    Prometheus walks the buckets upwards for ``q < 0.5`` and downwards from the top otherwise, and interpolates
    within the bucket it stops in exponentially (linearly in the zero bucket, whose width is 0 here).

    >>> native_quantile(0.5, scale=0, zero_count=0, positive={1: 4}, negative={})  # 4 values in (2, 4]
    2.8284271247461903
    """
    buckets = [
        (-_boundary(index + 1, scale), -_boundary(index, scale), count)
        for index, count in sorted(negative.items(), reverse=True)
    ]
    buckets.append((-0.0, 0.0, zero_count))
    buckets += [
        (_boundary(index, scale), _boundary(index + 1, scale), count) for index, count in sorted(positive.items())
    ]
    total = sum(count for _, _, count in buckets)
    if total <= 0 or math.isnan(q):
        return math.nan
    forward = q < 0.5
    rank = q * total if forward else (1 - q) * total
    seen = 0
    stop = buckets[0]
    for stop in buckets if forward else reversed(buckets):  # where it stops is the bucket (even an empty one)
        if stop[2] > 0:
            seen += stop[2]
            if seen >= rank:
                break
    lower, upper, count = stop
    if seen < rank:
        return upper
    within = rank - (seen - count) if forward else seen - rank
    fraction = within / count
    if lower <= 0 <= upper:
        return lower + (upper - lower) * fraction
    log_lower, log_upper = math.log2(abs(lower)), math.log2(abs(upper))
    if lower > 0:
        return float(2 ** (log_lower + (log_upper - log_lower) * fraction))
    return -float(2 ** (log_upper + (log_lower - log_upper) * (1 - fraction)))


def classic_quantile(q: float, bounds: Sequence[float], counts: Sequence[int]) -> float:
    """The ``q`` quantile of explicit buckets as Prometheus's ``histogram_quantile`` computes it from the classic
    ``_bucket`` series (``promql.BucketQuantile``); NaN when they are empty.

    ``counts[i]`` holds ``bounds[i-1] < v <= bounds[i]``, the last one everything above ``bounds[-1]``. Linear
    within a bucket, from 0 in the lowest bucket when its bound is above 0 (else that bound); a quantile in the
    bucket above every bound is the highest bound.

    >>> round(classic_quantile(0.99, (0.0, 1.0, 2.0), (31, 1, 0, 0)), 9)  # 31 zeros and a 1: within (0, 1]
    0.68
    """
    cumulative: list[float] = []
    for count in counts:
        cumulative.append((cumulative[-1] if cumulative else 0) + count)
    uppers = [*bounds, math.inf]
    if len(uppers) < 2 or not cumulative or cumulative[-1] <= 0 or math.isnan(q):
        return math.nan
    rank = q * cumulative[-1]
    found = next((i for i in range(len(uppers) - 1) if cumulative[i] >= rank), len(uppers) - 1)
    if found == len(uppers) - 1:
        return uppers[-2]
    if found == 0 and uppers[0] <= 0:
        return uppers[0]
    start, within = 0.0, cumulative[found]
    if found > 0:
        start = uppers[found - 1]
        within -= cumulative[found - 1]
        rank -= cumulative[found - 1]
    return start + (uppers[found] - start) * (rank / within)


def shown_quantile(estimate: float, *, minimum: float, maximum: float, integer: bool) -> float:
    """A quantile estimate as the dashboards show it: rounded half up for integer values (PromQL's ``round``),
    then clamped to the exact ``[minimum, maximum]`` (``promql.clamp_to_extremes``). NaN stays NaN.

    >>> shown_quantile(0.987, minimum=0, maximum=1, integer=True)
    1.0
    >>> shown_quantile(3.02, minimum=1, maximum=3, integer=False)
    3.0
    """
    if math.isnan(estimate):
        return estimate
    value = float(math.floor(estimate + 0.5)) if integer and math.isfinite(estimate) else estimate
    return float(min(max(value, minimum), maximum))


# -- the step's changes -----------------------------------------------------------------------------------------

_Stream = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class _Counts:
    """A histogram point's cumulative counts: total, sum, and by bucket (``zero``, ``("+", i)``, ``("-", i)`` or
    the explicit bucket's position)."""

    count: int
    total: float
    buckets: dict[object, int] = field(default_factory=dict)

    @classmethod
    def of(cls, point: HistogramDataPoint | ExponentialHistogramDataPoint) -> _Counts:
        if isinstance(point, HistogramDataPoint):
            return cls(point.count, point.sum, dict(enumerate(point.bucket_counts)))
        buckets: dict[object, int] = {"zero": point.zero_count}
        for sign, side in (("+", point.positive), ("-", point.negative)):
            for position, n in enumerate(side.bucket_counts):
                buckets[(sign, side.offset + position)] = n
        return cls(point.count, point.sum, buckets)

    def minus(self, previous: _Counts | None) -> _Counts:
        if previous is None:
            return self
        return _Counts(
            self.count - previous.count,
            self.total - previous.total,
            {key: n - previous.buckets.get(key, 0) for key, n in self.buckets.items()},
        )


def step_quantile(q: float, point: HistogramDataPoint | ExponentialHistogramDataPoint, counts: _Counts) -> float:
    """The ``q`` quantile estimate of ``counts`` (a step's change of ``point``'s buckets) in ``point``'s form."""
    if isinstance(point, HistogramDataPoint):
        return classic_quantile(
            q, point.explicit_bounds, [counts.buckets.get(i, 0) for i in range(len(point.bucket_counts))]
        )
    sides: dict[str, dict[int, int]] = {"+": {}, "-": {}}
    for key, n in counts.buckets.items():
        if isinstance(key, tuple) and n:
            sides[key[0]][key[1]] = n
    return native_quantile(
        q, scale=point.scale, zero_count=counts.buckets.get("zero", 0), positive=sides["+"], negative=sides["-"]
    )


def _stream(name: str, attributes: Mapping[str, object] | None) -> _Stream:
    return name, tuple(sorted((str(k), str(v)) for k, v in (attributes or {}).items()))


def _label(stream: _Stream) -> str:
    """``rl.reward{fn=total}``: the metric and its attributes, each by the last part of its name."""
    name, attrs = stream
    labels = ",".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in attrs)
    return f"{name}{{{labels}}}" if labels else name


def _number(value: float) -> str:
    """A value for people: integers as integers, others to 4 significant digits.

    >>> _number(1.0), _number(0.98737), _number(float("nan"))
    ('1', '0.9874', 'nan')
    """
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def _seconds(value: float) -> str:
    return f"{value * 1e3:.3g}ms" if value < 1 else f"{value:.3g}s"


def _prefix(step: float | None, rank: object) -> str:
    return f"{PREFIX} step {_number(step)} rank {rank}" if step is not None else f"{PREFIX} rank {rank}"


class ConsoleMetricFormatter:
    """Formats each export (a cumulative snapshot) as the lines of what changed since the previous one: in console
    mode :meth:`Telemetry.step` exports before the step number moves on, so that is the step just finished, and
    the ``*.max``/``*.min`` gauges hold that step's extremes exactly. ``phases``: where finished spans wait to be
    summarized with their step; ``self_telemetry``: also otel-rl's own metrics (``otel_rl.*``)."""

    def __init__(self, *, self_telemetry: bool = False, phases: PhaseSummary | None = None) -> None:
        self._self_telemetry = self_telemetry
        self._phases = phases
        self._histograms: dict[_Stream, _Counts] = {}
        self._counters: dict[_Stream, float] = {}
        self._state: dict[_Stream, float] = {}

    def __call__(self, data: MetricsData) -> str:
        lines: list[str] = []
        for resource_metrics in data.resource_metrics:
            rank = resource_metrics.resource.attributes.get(contract.RANK)
            metrics = [metric for scope in resource_metrics.scope_metrics for metric in scope.metrics]
            gauges = {
                _stream(metric.name, point.attributes): float(point.value)
                for metric in metrics
                if isinstance(metric.data, Gauge)
                for point in metric.data.data_points
            }
            step = gauges.get((contract.STEP.name, ()))
            prefix = _prefix(step, rank)
            lines += self._distributions(prefix, metrics, gauges)
            lines += self._counts(prefix, metrics)
            lines += self._changed_state(prefix, gauges)
            if self._phases is not None:
                lines += self._phases.lines(rank, step)
        return "".join(f"{line}\n" for line in lines)

    def _distributions(self, prefix: str, metrics: Sequence[Metric], gauges: Mapping[_Stream, float]) -> list[str]:
        lines = []
        for metric in metrics:
            name = metric.name
            for point in metric.data.data_points:
                if not isinstance(point, (HistogramDataPoint, ExponentialHistogramDataPoint)) or name in _PHASE_METRICS:
                    continue
                stream = _stream(name, point.attributes)
                counts = _Counts.of(point)
                step = counts.minus(self._histograms.get(stream))
                self._histograms[stream] = counts
                if step.count <= 0 or (name.startswith(_SELF_PREFIX) and not self._self_telemetry):
                    continue
                low = gauges.get(_stream(f"{name}.min", point.attributes), point.min)
                high = gauges.get(_stream(f"{name}.max", point.attributes), point.max)
                integer = name in _INTEGER_HISTOGRAMS
                values = [
                    shown_quantile(step_quantile(q, point, step), minimum=low, maximum=high, integer=integer)
                    for q in QUANTILES
                ]
                shown = [f"p{q * 100:g}={_number(value)}" for q, value in zip(QUANTILES, values, strict=True)]
                lines.append(
                    f"{prefix} {_label(stream)} n={step.count} mean={_number(step.total / step.count)} "
                    f"{' '.join(shown)} min={_number(low)} max={_number(high)}"
                )
        return lines

    def _counts(self, prefix: str, metrics: Sequence[Metric]) -> list[str]:
        moved: dict[bool, list[str]] = {False: [], True: []}
        for metric in metrics:
            name = metric.name
            if not isinstance(metric.data, Sum) or name in _DISTRIBUTION_PARTS or name in _PHASE_METRICS:
                continue
            for point in metric.data.data_points:
                stream = _stream(name, point.attributes)
                delta = float(point.value) - self._counters.get(stream, 0.0)
                self._counters[stream] = float(point.value)
                if delta:
                    moved[name.startswith(_SELF_PREFIX)].append(f"{_label(stream)}=+{_number(delta)}")
        lines = [f"{prefix} counts {' '.join(moved[False])}"] if moved[False] else []
        if self._self_telemetry and moved[True]:
            lines.append(f"{prefix} self {' '.join(moved[True])}")
        return lines

    def _changed_state(self, prefix: str, gauges: Mapping[_Stream, float]) -> list[str]:
        state: dict[_Stream, float] = {
            (gauge.name, ()): gauges[(gauge.name, ())] for gauge in _STATE if (gauge.name, ()) in gauges
        }
        if not state or state == {key: self._state.get(key) for key in state}:
            return []
        self._state.update(state)
        return [f"{prefix} state {' '.join(f'{_label(key)}={_number(value)}' for key, value in state.items())}"]


# -- phases ------------------------------------------------------------------------------------------------------


class PhaseSummary(SpanExporter):
    """Collects finished phase spans, summarized by :meth:`lines` per step and rank: each phase's count, mean and
    p99 duration (exact, from the spans), and the rank's step time. Exporting only appends to a list, so it runs
    on the span's own thread (``SimpleSpanProcessor``) and a step's phases are here when its metrics are printed;
    spans still here at shutdown are printed to ``out`` then."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._lock = threading.Lock()
        self._spans: list[tuple[object, float | None, str, float]] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        finished = []
        for span in spans:
            attrs = span.attributes or {}
            if span.end_time is None or span.start_time is None or span.name == contract.STEP_SPAN:
                continue
            phase = contract.RANK_STEP_SPAN if span.name == contract.RANK_STEP_SPAN else attrs.get(contract.PHASE)
            if phase is None:
                continue
            step = attrs.get(contract.SAMPLE_STEP)
            rank = attrs.get(contract.RANK)
            finished.append(
                (
                    rank,
                    float(step) if isinstance(step, int) else None,
                    str(phase),
                    (span.end_time - span.start_time) / 1e9,
                )
            )
        with self._lock:
            self._spans += finished
        return SpanExportResult.SUCCESS

    def lines(self, rank: object = None, step: float | None = None) -> list[str]:
        """The summary lines of the collected spans of ``rank`` (every rank when None), taking them; a span
        without a step (a trajectory's ``queue``) counts in ``step``."""
        with self._lock:
            taken = [s for s in self._spans if rank is None or s[0] == rank]
            self._spans = [s for s in self._spans if not (rank is None or s[0] == rank)]
        grouped: dict[tuple[object, float | None], dict[str, list[float]]] = {}
        for span_rank, span_step, phase, seconds in taken:
            key = (span_rank, span_step if span_step is not None else step)
            grouped.setdefault(key, {}).setdefault(phase, []).append(seconds)
        lines = []
        for (span_rank, span_step), phases in grouped.items():
            parts = []
            wall = phases.pop(contract.RANK_STEP_SPAN, None)
            if wall:
                parts.append(f"step_time={_seconds(sum(wall))}")
            for phase, durations in phases.items():
                ordered = sorted(durations)
                p99 = ordered[max(math.ceil(0.99 * len(ordered)) - 1, 0)]
                parts.append(
                    f"{phase} n={len(ordered)} mean={_seconds(sum(ordered) / len(ordered))} p99={_seconds(p99)}"
                )
            lines.append(f"{_prefix(span_step, span_rank)} phases {', '.join(parts)}")
        return lines

    def shutdown(self) -> None:
        """Print what no export took (the metrics went elsewhere, or spans ended after the last export)."""
        text = "".join(f"{line}\n" for line in self.lines())
        if text:
            self._out.write(text)
            self._out.flush()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


# -- samples -----------------------------------------------------------------------------------------------------


class ConsoleLogFormatter:
    """Formats a sample record as one line: step, rank, selection, reward, and the start of each text.

    Texts are cut at 80 characters and shown with ``repr`` (one line whatever they hold)."""

    def __call__(self, record: ReadableLogRecord) -> str:
        log = record.log_record
        attrs = dict(log.attributes or {})
        step = attrs.get(contract.SAMPLE_STEP)
        rank = record.resource.attributes.get(contract.RANK) if record.resource is not None else None
        body = log.body if isinstance(log.body, dict) else {"body": str(log.body)}
        parts = [f"sample {attrs.get(contract.SAMPLE_SELECTION)}"]
        table = attrs.get(contract.SAMPLE_TABLE)
        if table not in (None, contract.SAMPLE_TABLE_DEFAULT):
            parts.append(f"table={table}")
        reward = attrs.get(contract.SAMPLE_REWARD)
        parts.append(f"reward={_number(float(reward)) if isinstance(reward, (int, float)) else reward}")
        episode = attrs.get(contract.SAMPLE_EPISODE_ID)
        if episode is not None:
            parts.append(f"episode={episode}")
        parts += [f"{key}={str(text)[:_TEXT_CHARS]!r}" for key, text in body.items()]
        return f"{_prefix(float(step) if isinstance(step, int) else None, rank)} {' '.join(parts)}\n"


# -- wiring ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConsoleExporters:
    """The console's exporters of one process, all writing to one stream."""

    metrics: MetricExporter
    logs: LogRecordExporter
    spans: PhaseSummary


def console_exporters(out: IO[str], *, self_telemetry: bool = False) -> ConsoleExporters:
    """The exporters of ``exporter="console"``, writing to ``out`` (the process's ``sys.stdout``)."""
    phases = PhaseSummary(out)
    return ConsoleExporters(
        ConsoleMetricExporter(out=out, formatter=ConsoleMetricFormatter(self_telemetry=self_telemetry, phases=phases)),
        ConsoleLogRecordExporter(out=out, formatter=ConsoleLogFormatter()),
        phases,
    )
