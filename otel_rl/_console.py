"""Readable console output for ``exporter="console"``: one block per export, showing what changed since the last.

Used as formatters of the SDK's console exporters, so the console mode is the same pipeline as OTLP with another
sink. In console mode :meth:`Telemetry.step` requests an export, so a block appears per training step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk.metrics.export import (
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Gauge,
    Histogram,
    HistogramDataPoint,
    MetricsData,
    Sum,
)

from otel_rl import _names


def bucket_quantile(q: float, bounds: Sequence[float], counts: Sequence[int]) -> float:
    """The ``q`` quantile estimated from explicit buckets, interpolating linearly as Prometheus does.

    >>> bucket_quantile(0.5, (0.0, 1.0), (0, 4, 0))
    0.5
    """
    total = sum(counts)
    if total == 0 or not bounds:
        return math.nan
    rank = q * total
    seen = 0
    for index, count in enumerate(counts):
        if count and seen + count >= rank:
            if index >= len(bounds):
                return bounds[-1]
            upper = bounds[index]
            lower = bounds[index - 1] if index > 0 else min(upper, 0.0)
            return lower + (upper - lower) * (rank - seen) / count
        seen += count
    return bounds[-1]


class ConsoleMetricFormatter:
    """Formats ``MetricsData`` as a short human summary of the change since the previous call."""

    def __init__(self) -> None:
        self._previous: dict[tuple[str, tuple[tuple[str, object], ...]], tuple[float, ...]] = {}
        self._previous_buckets: dict[str, dict[float, int]] = {}

    def __call__(self, data: MetricsData) -> str:
        lines: list[str] = []
        for resource_metrics in data.resource_metrics:
            attrs = resource_metrics.resource.attributes
            header = f"[otel-rl] run={attrs.get(_names.RUN_ID)} rank={attrs.get(_names.RANK)}"
            values: dict[str, float] = {}
            body: list[str] = []
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        label = ",".join(
                            f"{k.split('.')[-1]}={v!s}" for k, v in sorted((point.attributes or {}).items())
                        )
                        name = f"{metric.name}{{{label}}}" if label else metric.name
                        if isinstance(metric.data, (Histogram, ExponentialHistogram)):
                            line = self._histogram(name, point)  # type: ignore[arg-type]
                            if line:
                                body.append(line)
                        elif isinstance(metric.data, Sum):
                            delta = self._delta(name, (point.value,))[0]  # type: ignore[union-attr]
                            if delta and metric.name.startswith("otel_rl."):
                                body.append(f"  {name:<44} +{delta:g}")
                        elif isinstance(metric.data, Gauge):
                            values[name] = point.value  # type: ignore[union-attr]
            step = values.pop(_names.STEP.name, None)
            version = values.pop(_names.POLICY_VERSION.name, None)
            if step is not None:
                header += f" step={step:g}"
            if version is not None:
                header += f" policy_version={version:g}"
            extremes = [f"{name}={value:g}" for name, value in sorted(values.items())]
            if extremes:
                body.append("  " + " ".join(extremes))
            if body:
                lines.append("\n".join([header, *body]))
        return "\n".join(lines) + "\n" if lines else ""

    def _delta(self, name: str, current: tuple[float, ...]) -> tuple[float, ...]:
        previous = self._previous.get((name, ()), (0.0,) * len(current))
        self._previous[(name, ())] = current
        return tuple(c - p for c, p in zip(current, previous))

    def _histogram(self, name: str, point: HistogramDataPoint | ExponentialHistogramDataPoint) -> str | None:
        count, total = self._delta(name, (point.count, point.sum))
        if not count:
            return None
        line = f"  {name:<44} n={count:g} mean={total / count:.4g}"
        buckets = _upper_bounds(point)
        previous = self._previous_buckets.get(name, {})
        self._previous_buckets[name] = buckets
        changed = {upper: n - previous.get(upper, 0) for upper, n in sorted(buckets.items())}
        bounds = [upper for upper in changed if upper != math.inf]
        if not bounds:
            return line
        counts = [*changed.values(), 0] if len(bounds) == len(changed) else list(changed.values())
        p50, p90, p99 = (bucket_quantile(q, bounds, counts) for q in (0.5, 0.9, 0.99))
        return f"{line} p50~{p50:.3g} p90~{p90:.3g} p99~{p99:.3g}"


def _upper_bounds(point: HistogramDataPoint | ExponentialHistogramDataPoint) -> dict[float, int]:
    """Counts of a cumulative point by each bucket's upper bound (``inf`` for the explicit overflow bucket)."""
    if isinstance(point, HistogramDataPoint):
        uppers = [*point.explicit_bounds, math.inf]
        return {float(upper): int(n) for upper, n in zip(uppers, point.bucket_counts)}
    base = 2.0 ** (2.0**-point.scale)
    buckets = {0.0: point.zero_count}
    for index, n in enumerate(point.positive.bucket_counts):
        buckets[base ** (point.positive.offset + index + 1)] = n
    for index, n in enumerate(point.negative.bucket_counts):
        buckets[-(base ** (point.negative.offset + index))] = n
    return buckets


class ConsoleLogFormatter:
    """Formats a sample record as one line: selection, step, reward, and the start of the texts."""

    def __call__(self, record: ReadableLogRecord) -> str:
        log = record.log_record
        attrs = dict(log.attributes or {})
        body = log.body if isinstance(log.body, dict) else {"body": str(log.body)}
        texts = " | ".join(f"{key}: {str(text)[:80]!r}" for key, text in body.items())
        return (
            f"[otel-rl sample] {attrs.get(_names.SAMPLE_SELECTION)} step={attrs.get(_names.SAMPLE_STEP)} "
            f"reward={attrs.get(_names.SAMPLE_REWARD)} episode={attrs.get(_names.SAMPLE_EPISODE_ID)} {texts}\n"
        )
