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
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from opentelemetry.sdk.metrics import Exemplar
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from otel_rl_contract import SCOPE_NAME, SELF_METRIC, VALUES_RECORDED, Distribution, MetricName

from otel_rl._record.buckets import HistogramPoint, Layout, PointFields
from otel_rl._record.inputs import INT64_MAX, INT64_MIN
from otel_rl._record.stats import Statistics

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


def _point(state: _HistogramState, attrs: Attributes, start: int, now_ns: int) -> HistogramPoint:
    """The cumulative OTLP point of one histogram stream, in its layout's form."""
    fields = PointFields(
        attributes=dict(attrs),
        start_time_unix_nano=start,
        time_unix_nano=now_ns,
        count=state.count,
        sum=float(state.total),
        min=float(state.minimum) if state.minimum is not None else 0.0,
        max=float(state.maximum) if state.maximum is not None else 0.0,
        exemplars=[state.exemplars[slot] for slot in sorted(state.exemplars)],
    )
    return state.layout.point(fields, state.bucket_counts)


def wire_number(value: float) -> int | float:
    """``value`` as OTLP can carry it: an int within signed 64 bits as an int, anything else as a double (a count
    that outgrew int64 stays a number instead of breaking every later export of the process).

    >>> wire_number(3), wire_number(2**64), wire_number(True)
    (3, 1.8446744073709552e+19, 1)
    """
    if isinstance(value, int):
        return int(value) if INT64_MIN <= value <= INT64_MAX else float(value)
    return float(value)


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
        self._accruing: dict[_Key, float] = {}
        self._gauges: dict[_Key, float] = {}
        self._window = Extremes()

    def record(self, distribution: Distribution, attrs: Attributes, statistics: Statistics) -> None:
        """Fold one call's statistics into every metric of ``distribution``: the histogram, the sum parts and
        squares (when the distribution has them), the extremes gauges and the count of values recorded (the
        self-check that histogram points arrive whole). A call that accepted nothing adds nothing."""
        if statistics.count == 0 or statistics.maximum is None or statistics.minimum is None:
            return
        with self._lock:
            self._fold_histogram((distribution.histogram, attrs), statistics)
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

    def record_histogram(self, histogram: MetricName, attrs: Attributes, statistics: Statistics) -> None:
        """Fold one call's statistics into ``histogram`` alone: no sum parts, extremes or count of values recorded
        (the merge canary of ``otel_rl._state.canary``, a check of its own). A call that accepted nothing adds
        nothing."""
        if statistics.count:
            with self._lock:
                self._fold_histogram((histogram, attrs), statistics)

    def _fold_histogram(self, key: _Key, statistics: Statistics) -> None:
        """Add ``statistics`` to the histogram stream ``key``, created empty in their layout first (lock held)."""
        state = self._histograms.get(key)
        if state is None:
            layout = statistics.layout
            state = self._histograms[key] = _HistogramState(layout, np.zeros(layout.size, dtype=np.int64))
        state.merge(statistics)

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
        """Add ``amount`` (>= 0) to a monotonic counter; adding 0 creates it, so its series exists from the start.

        Raises ``ValueError`` for a negative amount: a monotonic counter cannot go down (callers check their
        input first)."""
        if not amount >= 0:
            raise ValueError(f'"amount" of {counter.name!r} must be >= 0, got {amount!r}')
        with self._lock:
            self._counters[(counter, attrs)] = self._counters.get((counter, attrs), 0) + amount

    def set(self, gauge: MetricName, attrs: Attributes, value: float) -> None:
        """Set a last-value gauge."""
        with self._lock:
            self._gauges[(gauge, attrs)] = value

    def retain(self, gauge: MetricName, keep: Collection[Attributes]) -> None:
        """Remove the streams of ``gauge`` whose attributes are not in ``keep`` (they stop being exported)."""
        with self._lock:
            for key in [key for key in self._gauges if key[0] == gauge and key[1] not in keep]:
                del self._gauges[key]

    def accrue(self, counter: MetricName, attrs: Attributes, per_second: float) -> None:
        """Make ``counter`` grow by ``per_second`` for every second since the store's start: its value at each
        collection is ``per_second`` times the time elapsed (GPU-seconds of a rank that holds ``per_second`` GPUs)."""
        if not per_second >= 0:
            raise ValueError(f'"per_second" of {counter.name!r} must be >= 0, got {per_second!r}')
        with self._lock:
            self._accruing[(counter, attrs)] = per_second

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
            elapsed_s = max(0, now_ns - self._start_time_ns) / 1e9
            counters.update({key: per_second * elapsed_s for key, per_second in self._accruing.items()})
            gauges = dict(self._gauges)
            while self._recent and self._recent[0][0] <= now_ns - self._hold_ns:
                self._recent.popleft()
            extremes = Extremes()
            for _, recent in self._recent:
                extremes.merge(recent)
            extremes.merge(window)
            self._recent.append((now_ns, window))
        gauges.update(extremes.values)
        start = self._start_time_ns
        streams: dict[MetricName, tuple[Layout, list[HistogramPoint]]] = {}
        for (metric, attrs), state in histograms.items():
            streams.setdefault(metric, (state.layout, []))[1].append(_point(state, attrs, start, now_ns))
        numbers: dict[MetricName, list[NumberDataPoint]] = {}
        for source in (counters, gauges):
            for (metric, attrs), value in source.items():
                numbers.setdefault(metric, []).append(
                    NumberDataPoint(
                        attributes=dict(attrs),
                        start_time_unix_nano=start,
                        time_unix_nano=now_ns,
                        value=wire_number(value),
                    )
                )
        if not streams and not numbers:
            return None, window
        scope_metrics = ScopeMetrics(
            scope=self._scope,
            metrics=[_metric(metric, layout.metric_data(points)) for metric, (layout, points) in streams.items()]
            + [_metric(metric, _number_data(metric, points)) for metric, points in numbers.items()],
            schema_url="",
        )
        data = MetricsData([ResourceMetrics(resource=self._resource, scope_metrics=[scope_metrics], schema_url="")])
        return data, window

    def restore(self, window: Extremes) -> None:
        """Fold a window whose export failed back in, so its extremes go out with the next export."""
        with self._lock:
            window.merge(self._window)
            self._window = window


def _number_data(metric: MetricName, points: list[NumberDataPoint]) -> Sum | Gauge:
    if metric.kind == "counter":
        return Sum(data_points=points, aggregation_temporality=AggregationTemporality.CUMULATIVE, is_monotonic=True)
    return Gauge(data_points=points)


def _metric(metric: MetricName, data: Any) -> Metric:
    return Metric(name=metric.name, description=metric.description, unit=metric.unit, data=data)
