"""MetricStore: the running cumulative state of one process, turned into OTLP points on each export.

otel-rl builds its points itself instead of going through the SDK's instruments, which cannot record negative
values into a histogram and would cost a Python call per value. That makes this module own temporality: histograms
and counters are cumulative since ``start_time_ns`` (stable for the life of the process, so a restarted rank is a
new stream), and the ``*.max``/``*.min`` gauges hold the extremes of the last ``hold_ns`` (and everything since
the last *successful* export, so a failed export folds its window into the next one instead of losing it).

Why a hold: the collector keeps only the newest point of each rank stream per aggregation interval. If a rank
exports twice in one interval, an extreme carried only by the older point would be lost; repeating each extreme
for longer than the aggregation interval puts it in the newest point too. ``max_over_time`` stays exact.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from opentelemetry.sdk.metrics import Exemplar
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Buckets,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from otel_rl._buckets import ExplicitLayout, Layout
from otel_rl._names import SCOPE_NAME, SELF_METRIC, VALUES_RECORDED, Distribution, MetricName
from otel_rl._stats import Statistics

Attributes = tuple[tuple[str, str], ...]
_Key = tuple[MetricName, Attributes]


def attributes(**values: str) -> Attributes:
    """A hashable, ordered attribute set."""
    return tuple(sorted(values.items()))


@dataclass
class _HistogramState:
    layout: Layout
    bucket_counts: np.ndarray
    count: int = 0
    total: float = 0
    minimum: float | None = None
    maximum: float | None = None
    exemplars: dict[int, Exemplar] = field(default_factory=dict)
    """The latest exemplar of each bucket, by slot."""

    def merge(self, statistics: Statistics) -> None:
        self.bucket_counts += statistics.bucket_counts
        self.count += statistics.count
        self.total += statistics.total
        self.minimum = _extreme(min, self.minimum, statistics.minimum)
        self.maximum = _extreme(max, self.maximum, statistics.maximum)


_PICK: dict[str, Callable[[float, float], float]] = {"max": max, "min": min}


@dataclass
class Extremes:
    """Values of the ``*.max``/``*.min`` gauges not yet exported, keyed like the gauges they become; each gauge
    folds by its contract ``merge`` rule."""

    values: dict[_Key, float] = field(default_factory=dict)

    def fold(self, key: _Key, value: float) -> None:
        old = self.values.get(key)
        self.values[key] = value if old is None else _PICK[key[0].merge](old, value)

    def merge(self, other: Extremes) -> None:
        for key, value in other.values.items():
            self.fold(key, value)


def _point(state: _HistogramState, attrs: Attributes, start: int, now_ns: int) -> object:
    """The cumulative OTLP point of one histogram stream: explicit buckets or exponential sides, per its layout."""
    common = {
        "attributes": dict(attrs),
        "start_time_unix_nano": start,
        "time_unix_nano": now_ns,
        "count": state.count,
        "sum": float(state.total),
        "min": float(state.minimum) if state.minimum is not None else 0.0,
        "max": float(state.maximum) if state.maximum is not None else 0.0,
        "exemplars": [state.exemplars[slot] for slot in sorted(state.exemplars)],
    }
    layout = state.layout
    if isinstance(layout, ExplicitLayout):
        return HistogramDataPoint(
            bucket_counts=tuple(state.bucket_counts.tolist()),
            explicit_bounds=tuple(float(b) for b in layout.bounds),
            **common,  # type: ignore[arg-type]
        )
    sides = layout.sides(state.bucket_counts)
    return ExponentialHistogramDataPoint(
        scale=layout.scale,
        zero_count=sides.zero_count,
        positive=Buckets(offset=sides.positive_offset, bucket_counts=sides.positive),
        negative=Buckets(offset=sides.negative_offset, bucket_counts=sides.negative),
        flags=0,
        **common,  # type: ignore[arg-type]
    )


def _extreme(pick: Callable[[float, float], float], old: float | None, new: float | None) -> float | None:
    if new is None:
        return old
    return new if old is None else pick(old, new)


class MetricStore:
    """Thread-safe cumulative state; ``collect`` snapshots it as OTLP ``MetricsData``."""

    def __init__(self, resource: Resource, *, start_time_ns: int, version: str, hold_ns: int = 10**10) -> None:
        self._resource = resource
        self._hold_ns = hold_ns
        self._recent: collections.deque[tuple[int, Extremes]] = collections.deque()
        self._scope = InstrumentationScope(SCOPE_NAME, version)
        self._start_time_ns = start_time_ns
        self._lock = threading.Lock()
        self._histograms: dict[_Key, _HistogramState] = {}
        self._counters: dict[_Key, float] = {}
        self._gauges: dict[_Key, float] = {}
        self._window = Extremes()

    def record(self, distribution: Distribution, attrs: Attributes, statistics: Statistics) -> None:
        """Fold one call's statistics into every metric of ``distribution``: the histogram, the sum parts and
        squares (when the distribution has them), the extremes gauges and the count of values recorded (the
        self-check that histogram points arrive whole). A call that accepted nothing adds nothing."""
        if statistics.count == 0 or statistics.maximum is None or statistics.minimum is None:
            return
        key = (distribution.histogram, attrs)
        with self._lock:
            state = self._histograms.get(key)
            if state is None:
                layout = statistics.layout
                state = self._histograms[key] = _HistogramState(layout, np.zeros(layout.size, dtype=np.int64))
            state.merge(statistics)
            recorded = (VALUES_RECORDED, ((SELF_METRIC, distribution.histogram.name),))
            self._counters[recorded] = self._counters.get(recorded, 0) + statistics.count
            for counter, amount in (
                (distribution.positive, statistics.positive),
                (distribution.negative, statistics.negative),
                (distribution.squares, statistics.squares),
            ):
                if counter is not None:
                    self._counters[(counter, attrs)] = self._counters.get((counter, attrs), 0) + amount
            self._window.fold((distribution.maximum, attrs), statistics.maximum)
            self._window.fold((distribution.minimum, attrs), statistics.minimum)

    def add_exemplar(self, histogram: MetricName, attrs: Attributes, exemplar: Exemplar) -> None:
        """Keep ``exemplar`` as the latest of its bucket on the stream with exactly ``attrs``, else on the first
        stream (in attribute order) whose attributes include them (``rl.staleness.phase`` and a dataset the
        sample did not name narrow a stream further); nowhere when no stream has values."""
        with self._lock:
            state = self._histograms.get((histogram, attrs))
            if state is None:
                wanted = set(attrs)
                matches = sorted(key for key in self._histograms if key[0] == histogram and wanted <= set(key[1]))
                state = self._histograms[matches[0]] if matches else None
            if state is not None:
                state.exemplars[state.layout.slot(exemplar.value)] = exemplar

    def add(self, counter: MetricName, attrs: Attributes, amount: float) -> None:
        """Add ``amount`` (>= 0) to a monotonic counter; adding 0 creates it, so its series exists from the start."""
        if amount < 0:
            return
        with self._lock:
            self._counters[(counter, attrs)] = self._counters.get((counter, attrs), 0) + amount

    def set(self, gauge: MetricName, attrs: Attributes, value: float) -> None:
        """Set a last-value gauge."""
        with self._lock:
            self._gauges[(gauge, attrs)] = value

    def counter_value(self, counter: MetricName, attrs: Attributes) -> float:
        """The current cumulative value of a counter (0 when never added to)."""
        with self._lock:
            return self._counters.get((counter, attrs), 0)

    def collect(self, now_ns: int) -> tuple[MetricsData | None, Extremes]:
        """Snapshot everything as cumulative points at ``now_ns``, and hand over the current window.

        The caller passes the window back to :meth:`restore` when the export fails.
        """
        with self._lock:
            window, self._window = self._window, Extremes()
            histograms = {
                key: _HistogramState(
                    **{**vars(state), "bucket_counts": state.bucket_counts.copy(), "exemplars": dict(state.exemplars)}
                )
                for key, state in self._histograms.items()
            }
            counters = dict(self._counters)
            gauges = dict(self._gauges)
            while self._recent and self._recent[0][0] <= now_ns - self._hold_ns:
                self._recent.popleft()
            extremes = Extremes()
            for _, recent in self._recent:
                extremes.merge(recent)
            extremes.merge(window)
            self._recent.append((now_ns, window))
        gauges.update(extremes.values)
        metrics: dict[MetricName, list[object]] = {}
        start = self._start_time_ns
        for (metric, attrs), state in histograms.items():
            metrics.setdefault(metric, []).append(_point(state, attrs, start, now_ns))
        for source in (counters, gauges):
            for (metric, attrs), value in source.items():
                metrics.setdefault(metric, []).append(
                    NumberDataPoint(
                        attributes=dict(attrs), start_time_unix_nano=start, time_unix_nano=now_ns, value=value
                    )
                )
        if not metrics:
            return None, window
        scope_metrics = ScopeMetrics(
            scope=self._scope,
            metrics=[_metric(metric, points) for metric, points in metrics.items()],
            schema_url="",
        )
        data = MetricsData([ResourceMetrics(resource=self._resource, scope_metrics=[scope_metrics], schema_url="")])
        return data, window

    def restore(self, window: Extremes) -> None:
        """Fold a window whose export failed back in, so its extremes go out with the next export."""
        with self._lock:
            window.merge(self._window)
            self._window = window


def _metric(metric: MetricName, points: list[object]) -> Metric:
    data: Histogram | ExponentialHistogram | Sum | Gauge
    if metric.kind == "histogram" and isinstance(points[0], ExponentialHistogramDataPoint):
        data = ExponentialHistogram(data_points=points, aggregation_temporality=AggregationTemporality.CUMULATIVE)  # type: ignore[arg-type]
    elif metric.kind == "histogram":
        data = Histogram(data_points=points, aggregation_temporality=AggregationTemporality.CUMULATIVE)  # type: ignore[arg-type]
    elif metric.kind == "counter":
        data = Sum(
            data_points=points,  # type: ignore[arg-type]
            aggregation_temporality=AggregationTemporality.CUMULATIVE,
            is_monotonic=True,
        )
    else:
        data = Gauge(data_points=points)  # type: ignore[arg-type]
    return Metric(name=metric.name, description=metric.description, unit=metric.unit, data=data)
