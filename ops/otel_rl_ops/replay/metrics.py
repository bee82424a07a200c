"""A run's offline metrics into the store: the ranks' points (:func:`points`), merged as the collector merges them
(:mod:`otel_rl_ops.replay.merge`), written by ``otel-rl-backfill`` (the ``backfill/`` Go program) as TSDB blocks with
the rules' series over them, which :func:`backfill` runs."""

from __future__ import annotations

import heapq
import json
import math
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, MetricsData

from otel_rl_ops.replay.merge import (
    DEFAULT_ZERO_THRESHOLD,
    MAX_SCHEMA,
    Explicit,
    Exponential,
    Key,
    Point,
    Sample,
    contract_metric,
    le,
)

_CUMULATIVE = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


def _key(attributes: Iterable[Any]) -> Key:
    return tuple(sorted((item.key, str(_value(item.value))) for item in attributes))


def points(message: MetricsData) -> Iterator[Point]:
    """The contract's points of one ``MetricsData`` line (``filter/mergeable``, ``filter/contract``)."""
    for resource_metrics in message.resource_metrics:
        resource = _key(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            scope = (scope_metrics.scope.name, scope_metrics.scope.version)
            for metric in scope_metrics.metrics:
                found = contract_metric(metric.name)
                kind = metric.WhichOneof("data")
                if found is None or kind is None:
                    continue
                data = getattr(metric, kind)
                if (
                    kind in ("sum", "histogram", "exponential_histogram")
                    and data.aggregation_temporality != _CUMULATIVE
                ):
                    continue
                if kind == "sum" and not data.is_monotonic:
                    continue
                for point in data.data_points:
                    value = _point_value(kind, point)
                    if value is not None:
                        yield Point(
                            resource,
                            scope,
                            found,
                            _key(point.attributes),
                            point.start_time_unix_nano,
                            point.time_unix_nano,
                            value,
                        )


def _point_value(kind: str, point: Any) -> float | Exponential | Explicit | None:
    if kind in ("sum", "gauge"):
        which = point.WhichOneof("value")
        return None if which is None else float(getattr(point, which))
    if kind == "histogram":
        return Explicit(tuple(point.explicit_bounds), list(point.bucket_counts), point.count, point.sum)
    return Exponential(
        point.scale,
        point.count,
        point.sum,
        point.zero_count,
        point.zero_threshold,
        {point.positive.offset + i: c for i, c in enumerate(point.positive.bucket_counts) if c},
        {point.negative.offset + i: c for i, c in enumerate(point.negative.bucket_counts) if c},
    )


def in_time_order(processes: Sequence[Iterable[MetricsData]]) -> Iterator[Point]:
    """Every process's points, merged in time order (each process's lines are in the order it wrote them)."""

    def timed(lines: Iterable[MetricsData]) -> Iterator[tuple[int, int, Point]]:
        for order, message in enumerate(lines):
            for point in points(message):
                yield point.time_ns, order, point

    for _, _, point in heapq.merge(*(timed(lines) for lines in processes), key=lambda item: (item[0], item[1])):
        yield point


def _number(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return value


def _native(value: Exponential) -> dict[str, Any]:
    """An exponential point as the exporter's native histogram: schema at most 8, index + 1, the zero threshold."""
    value = value.at_scale(min(value.scale, MAX_SCHEMA))

    def side(buckets: dict[int, int]) -> dict[str, Any]:
        used = [index for index, count in buckets.items() if count]
        if not used:
            return {"offset": 0, "counts": []}
        low, high = min(used), max(used)
        return {"offset": low + 1, "counts": [buckets.get(index, 0) for index in range(low, high + 1)]}

    return {
        "schema": value.scale,
        "zero_threshold": value.zero_threshold or DEFAULT_ZERO_THRESHOLD,
        "zero_count": value.zero_count,
        "count": value.count,
        "sum": _number(value.sum),
        "positive": side(value.positive),
        "negative": side(value.negative),
    }


class SeriesWriter:
    """The backfill tool's input: each series declared once, then its samples (see ``backfill/main.go``)."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._ids: dict[Key, int] = {}
        self.samples = 0
        self.first_ms: int | None = None
        self.last_ms: int | None = None

    def _series(self, labels: Key) -> int:
        found = self._ids.get(labels)
        if found is None:
            found = self._ids[labels] = len(self._ids) + 1
            self._out.write(json.dumps({"series": found, "labels": dict(labels)}) + "\n")
        return found

    def _write(self, labels: Key, time_ms: int, field: str, value: Any) -> None:
        self._out.write(json.dumps({"s": self._series(labels), "t": time_ms, field: value}) + "\n")
        self.samples += 1
        self.first_ms = time_ms if self.first_ms is None else min(self.first_ms, time_ms)
        self.last_ms = time_ms if self.last_ms is None else max(self.last_ms, time_ms)

    def write(self, sample: Sample) -> None:
        """One sample: a float, a native histogram, or an explicit histogram's ``_bucket``, ``_count``, ``_sum``."""
        value = sample.value
        if isinstance(value, float):
            self._write(sample.labels, sample.time_ms, "v", _number(value))
        elif isinstance(value, Exponential):
            self._write(sample.labels, sample.time_ms, "h", _native(value))
        else:
            base = dict(sample.labels)
            name = base.pop("__name__")
            running = 0
            for bound, count in zip([*value.bounds, math.inf], value.counts, strict=True):
                running += count
                bucket = tuple(sorted({**base, "__name__": f"{name}_bucket", "le": le(bound)}.items()))
                self._write(bucket, sample.time_ms, "v", float(running))
            self._write(
                tuple(sorted({**base, "__name__": f"{name}_count"}.items())), sample.time_ms, "v", float(value.count)
            )
            self._write(
                tuple(sorted({**base, "__name__": f"{name}_sum"}.items())), sample.time_ms, "v", _number(value.sum)
            )


def backfill(
    tool: Path,
    samples: Iterable[Sample],
    *,
    out: Path,
    rule_files: Sequence[Path],
    evaluation_interval_s: float,
    external_labels: dict[str, str],
    now_ms: int,
) -> dict[str, Any]:
    """Run ``otel-rl-backfill`` on ``samples`` (written to a temporary file first, its input): blocks into ``out``
    with the rules' series evaluated no later than ``now_ms``; its JSON summary (``series``, ``samples``, the
    ``blocks``, the ``alerts``)."""
    argv = [
        str(tool),
        f"-out={out}",
        f"-eval-interval={evaluation_interval_s}s",
        f"-now={now_ms}",
        *(f"-rule-file={path}" for path in rule_files),
        *(f"-external-label={name}={value}" for name, value in sorted(external_labels.items())),
    ]
    with tempfile.TemporaryFile("w+", encoding="utf-8") as handle:
        writer = SeriesWriter(handle)
        for sample in samples:
            writer.write(sample)
        handle.seek(0)
        run = subprocess.run(argv, stdin=handle, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise ValueError(f"{tool.name} failed (exit status {run.returncode}): {run.stderr.strip()[-2000:]}")
    summary: dict[str, Any] = json.loads(run.stdout)
    return summary


def upload_blocks(thanos: Path, bucket: Path, folder: Path, labels: dict[str, str]) -> None:
    """Upload the blocks in ``folder`` to the bucket ``bucket`` (an objstore configuration file) with the external
    ``labels``, by Thanos's own ``thanos tools bucket upload-blocks``."""
    argv = [
        str(thanos),
        "tools",
        "bucket",
        "upload-blocks",
        f"--objstore.config-file={bucket}",
        f"--path={folder}",
        *(f'--label={name}="{value}"' for name, value in sorted(labels.items())),
    ]
    run = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise ValueError(f"uploading the replayed blocks failed (exit status {run.returncode}): {run.stderr[-2000:]}")
