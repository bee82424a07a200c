"""The collector's merge of a run's ranks, done again over the ranks' offline metrics: the same series a live run gives.

What ``collector_config/collector.yaml``'s aggregated pipeline does to the ranks' cumulative points (docs/pipeline.md),
step by step, at the ranks' own timestamps instead of the flush's clock:

1. ``filter/mergeable``, ``filter/contract``: only the contract's metrics (:data:`otel_rl_contract.ALL_METRICS`), sums
   and histograms only cumulative.
2. ``interval``: time is cut into windows of the aggregation interval (aligned to the epoch); in each, the newest point
   of every rank stream (resource, scope, metric, attributes, start time) is kept.
3. ``cumulative_to_delta`` (``initial_value: keep``): per rank stream, the first point counts whole, later ones by their
   increase; a histogram whose count went down is dropped (its baseline stays), a sum that went down is dropped and
   becomes the baseline.
4. ``transform/forget_rank``, ``groupbyattrs/compact``: the run's streams are keyed by the run-level resource attributes
   (``service.name``, ``service.namespace``, ``rl.run.id``, ``rl.role``, ``rl.world_size``), the scope, the metric and
   the point attributes.
5. ``transform/merge_ranks``: the window's deltas are added (exponential buckets by absolute index, downscaled to the
   coarsest scale), gauges merged by the contract's rule (``max``, ``min``, ``sum``, ``mean``).
6. ``delta_to_cumulative``: each run stream's deltas are added up; the window's sample is that total, stamped at the
   window's end (where a flush would be). The exemplar carriers (``rl.reward``, ``rl.staleness``) also get the window's
   merged increase, as ``<name>.exemplars`` (exemplars themselves are not kept: Prometheus stores none in blocks).
7. ``prometheus_remote_write``: names and labels from the contract (:func:`otel_rl_contract.series`,
   :func:`otel_rl_contract.label`): ``job`` from ``service.namespace``/``service.name``, ``rl_run_id``, ``rl_role``,
   ``rl_world_size``, ``otel_scope_name``, ``otel_scope_version``, the point attributes; exponential histograms as
   native ones (the scale as schema, OpenTelemetry's bucket index plus one, zero threshold 1e-128 when unset).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import otel_rl_contract as contract
from otel_rl_contract.names import MetricName

RUN_RESOURCE = ("service.name", "service.namespace", contract.RUN_ID, contract.ROLE, contract.WORLD_SIZE)
"""The resource attributes ``transform/forget_rank`` keeps: what identifies a run's streams."""
CONSTANT_LABELS = (contract.RUN_ID, contract.ROLE, contract.WORLD_SIZE)
"""The resource attributes the exporter's ``resource_constant_labels`` makes labels of every series."""
EXEMPLAR_CARRIERS = (contract.REWARDS.histogram.name, contract.STALENESS.histogram.name)
"""``filter/exemplar_carriers``: the histograms also written as ``<name>.exemplars``, each window's increase."""
DEFAULT_ZERO_THRESHOLD = 1e-128
"""The native zero threshold the exporter writes for an exponential point without one (``defaultZeroThreshold``)."""
MAX_SCHEMA = 8
"""The finest native histogram schema; otel-rl's scales are 0 to 8."""
_CONTRACT = {metric.name: metric for metric in contract.ALL_METRICS}

Key = tuple[tuple[str, str], ...]


@dataclass
class Exponential:
    """An exponential histogram's counts: buckets as ``{OpenTelemetry index: count}`` per side."""

    scale: int
    count: int
    sum: float
    zero_count: int
    zero_threshold: float
    positive: dict[int, int] = field(default_factory=dict)
    negative: dict[int, int] = field(default_factory=dict)

    def at_scale(self, scale: int) -> Exponential:
        """The same counts at the coarser ``scale`` (index >> difference: exact for the coarser buckets)."""
        shift = self.scale - scale
        if shift <= 0:
            return self
        return Exponential(
            scale,
            self.count,
            self.sum,
            self.zero_count,
            self.zero_threshold,
            _downscale(self.positive, shift),
            _downscale(self.negative, shift),
        )


@dataclass
class Explicit:
    """An explicit histogram's counts at its bounds."""

    bounds: tuple[float, ...]
    counts: list[int]
    count: int
    sum: float


Value = float | Exponential | Explicit


def _downscale(buckets: dict[int, int], shift: int) -> dict[int, int]:
    out: dict[int, int] = {}
    for index, count in buckets.items():
        out[index >> shift] = out.get(index >> shift, 0) + count
    return out


def _subtract(a: dict[int, int], b: dict[int, int]) -> dict[int, int]:
    return {index: a.get(index, 0) - b.get(index, 0) for index in set(a) | set(b) if a.get(index, 0) != b.get(index, 0)}


def _add(a: dict[int, int], b: dict[int, int]) -> dict[int, int]:
    out = dict(a)
    for index, count in b.items():
        out[index] = out.get(index, 0) + count
    return out


def delta(current: Value, previous: Value | None) -> Value | None:
    """``cumulative_to_delta`` of one rank stream: the increase from ``previous`` (None: the whole value), or None
    when a histogram's count went down (dropped). A sum that went down is also None; the caller moves its baseline."""
    if previous is None:
        return current
    if isinstance(current, float) and isinstance(previous, float):
        return None if current < previous else current - previous
    if isinstance(current, Exponential) and isinstance(previous, Exponential):
        if current.count < previous.count:
            return None
        scale = min(current.scale, previous.scale)
        now, before = current.at_scale(scale), previous.at_scale(scale)
        return Exponential(
            scale,
            now.count - before.count,
            now.sum - before.sum,
            now.zero_count - before.zero_count,
            now.zero_threshold,
            _subtract(now.positive, before.positive),
            _subtract(now.negative, before.negative),
        )
    if isinstance(current, Explicit) and isinstance(previous, Explicit) and current.bounds == previous.bounds:
        if current.count < previous.count:
            return None
        counts = [now - before for now, before in zip(current.counts, previous.counts, strict=True)]
        return Explicit(current.bounds, counts, current.count - previous.count, current.sum - previous.sum)
    return current


def add(total: Value | None, more: Value) -> Value:
    """``total`` plus ``more``: the merge's ``sum`` and ``delta_to_cumulative``'s addition."""
    if total is None:
        return more
    if isinstance(total, float) and isinstance(more, float):
        return total + more
    if isinstance(total, Exponential) and isinstance(more, Exponential):
        if more.count == 0:
            return total
        if total.count == 0 and not total.positive and not total.negative:
            return Exponential(
                more.scale,
                more.count,
                total.sum + more.sum,
                total.zero_count + more.zero_count,
                more.zero_threshold,
                dict(more.positive),
                dict(more.negative),
            )
        scale = min(total.scale, more.scale)
        a, b = total.at_scale(scale), more.at_scale(scale)
        return Exponential(
            scale,
            a.count + b.count,
            a.sum + b.sum,
            a.zero_count + b.zero_count,
            a.zero_threshold,
            _add(a.positive, b.positive),
            _add(a.negative, b.negative),
        )
    if isinstance(total, Explicit) and isinstance(more, Explicit) and total.bounds == more.bounds:
        counts = [a + b for a, b in zip(total.counts, more.counts, strict=True)]
        return Explicit(total.bounds, counts, total.count + more.count, total.sum + more.sum)
    raise ValueError(f"cannot add a {type(more).__name__} to a {type(total).__name__} of the same stream")


def merge_gauges(rule: str, values: list[float]) -> float:
    """The gauges of one run stream in one window, merged by the contract's ``rule``."""
    if rule == "max":
        return max(values)
    if rule == "min":
        return min(values)
    if rule == "sum":
        return math.fsum(values)
    return math.fsum(values) / len(values)


@dataclass(frozen=True)
class Point:
    """One rank's point: its stream and value."""

    resource: Key
    """Every resource attribute of the rank's process (the rank stream's resource)."""
    scope: tuple[str, str]
    metric: MetricName
    attributes: Key
    start_ns: int
    time_ns: int
    value: Value


@dataclass(frozen=True)
class Sample:
    """One sample of a run's series, as Prometheus stores it."""

    labels: Key
    time_ms: int
    value: Value


def _run_key(point: Point) -> tuple[Key, tuple[str, str], str, Key]:
    run = tuple((key, value) for key, value in point.resource if key in RUN_RESOURCE)
    return run, point.scope, point.metric.name, point.attributes


def merge(points: Iterable[Point], *, interval_s: float) -> Iterator[Sample]:
    """The run series samples of ``points`` (every rank's, in time order), window by window (see the module)."""
    interval_ns = round(interval_s * 1e9)
    baseline: dict[tuple[Any, ...], Value] = {}
    totals: dict[tuple[Any, ...], Value] = {}
    window: dict[tuple[Any, ...], Point] = {}
    current = None
    for point in points:
        index = point.time_ns // interval_ns
        if current is not None and index != current:
            yield from _flush(window, baseline, totals, (current + 1) * interval_ns)
            window = {}
        current = index
        stream = (point.resource, point.scope, point.metric.name, point.attributes, point.start_ns)
        kept = window.get(stream)
        if kept is None or kept.time_ns <= point.time_ns:
            window[stream] = point
    if current is not None:
        yield from _flush(window, baseline, totals, (current + 1) * interval_ns)


def _flush(
    window: dict[tuple[Any, ...], Point],
    baseline: dict[tuple[Any, ...], Value],
    totals: dict[tuple[Any, ...], Value],
    end_ns: int,
) -> Iterator[Sample]:
    """One window's flush: the run streams' totals (and gauges, and the exemplar carriers' increases) at its end."""
    increases: dict[tuple[Any, ...], Value | None] = {}
    gauges: dict[tuple[Any, ...], list[float]] = {}
    kinds: dict[tuple[Any, ...], Point] = {}
    for stream, point in window.items():
        run = _run_key(point)
        kinds.setdefault(run, point)
        if point.metric.kind == "gauge" and isinstance(point.value, float):
            gauges.setdefault(run, []).append(point.value)
            continue
        change = delta(point.value, baseline.get(stream))
        if change is None and isinstance(point.value, float):
            baseline[stream] = point.value
        if change is None:
            increases.setdefault(run, None)
            continue
        baseline[stream] = point.value
        increases[run] = add(increases.get(run), change)
    time_ms = end_ns // 1_000_000
    for run, point in kinds.items():
        if point.metric.kind == "gauge":
            yield Sample(labels(point, point.metric), time_ms, merge_gauges(point.metric.merge, gauges[run]))
            continue
        increase = increases.get(run)
        if increase is None:
            continue
        totals[run] = add(totals.get(run), increase)
        yield Sample(labels(point, point.metric), time_ms, totals[run])
        if point.metric.name in EXEMPLAR_CARRIERS:
            yield Sample(labels(point, point.metric, exemplars=True), time_ms, increase)


def labels(point: Point, metric: MetricName, *, exemplars: bool = False) -> Key:
    """The labels of ``point``'s run series, as the exporter writes them (without ``le``)."""
    resource = dict(point.resource)
    name = (contract.exemplar_series(metric) if exemplars else contract.series(metric)).name
    job = str(resource.get("service.name", ""))
    namespace = resource.get("service.namespace")
    found: dict[str, str] = {"__name__": name, "job": f"{namespace}/{job}" if namespace else job}
    for attribute in CONSTANT_LABELS:
        if attribute in resource:
            found[contract.label(attribute)] = str(resource[attribute])
    scope_name, scope_version = point.scope
    if scope_name:
        found["otel_scope_name"] = scope_name
    if scope_version:
        found["otel_scope_version"] = scope_version
    for key, value in point.attributes:
        found[contract.label(key)] = value
    return tuple(sorted(found.items()))


def le(bound: float) -> str:
    """A bucket bound as the exporter writes ``le`` (Go's ``FormatFloat(bound, 'f', -1, 64)``)."""
    if math.isinf(bound):
        return "+Inf" if bound > 0 else "-Inf"
    text = format(Decimal(repr(bound)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def contract_metric(name: str) -> MetricName | None:
    """The contract's metric of that name (``filter/contract``), or None."""
    return _CONTRACT.get(name)
