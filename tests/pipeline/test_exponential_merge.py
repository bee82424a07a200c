"""Exponential histograms from several ranks merge exactly into one native histogram per run in Prometheus.

Each rank is its own OS process that exports hand-built cumulative exponential histogram points through the real
OTLP gRPC exporter (run this module with ``python -m`` and a JSON rank spec). The points are designed to hit what
the upstream v0.161.0 merge gets wrong (collector_config/patches/): offsets that differ per rank and per export,
gaps, both signs with anti-correlated ranges, zero counts, spans above 160 buckets (staleness 0..5000 at scale 5),
new low and high buckets in later exports, and a rank whose first points are empty. The expected histogram is
merged in Python from what the ranks sent; Prometheus must hold exactly it: count, sum and every bucket.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import otel_rl_contract as contract
import pytest
import yaml
from otel_rl_ops.query import Prometheus
from otel_rl_ops.stack import collector_build, layout
from otel_rl_ops.stack.gotools import InstallError, go_executable

from tests.pipeline.harness import ROOT, eventually

RANKS = 4
EXPORTS = 4
EMPTY_EXPORTS = 2
"""The last rank's first exports carry empty points (count 0, no buckets)."""
EXPORT_GAP_S = 1.2
"""Pause between exports: longer than the collector interval (1 s), so most exports are merged in a tick of their
own and the merge sees deltas whose offsets differ."""
SERVICE_NAME = "otel-rl-test"


@dataclass(frozen=True)
class Series:
    """One exponential histogram stream of the test: its contract metric, point attributes and scale."""

    metric: contract.MetricName
    attributes: dict[str, str]
    scale: int

    @property
    def prometheus_name(self) -> str:
        """The native histogram Prometheus gives the stream's metric."""
        return contract.series(self.metric).name


REWARD = Series(contract.REWARDS.histogram, {contract.REWARD_FN: "total"}, 5)
STALENESS = Series(contract.STALENESS.histogram, {}, 5)
METRIC = Series(contract.METRICS.histogram, {contract.METRIC_KEY: "loss.policy"}, 8)
SERIES = (REWARD, STALENESS, METRIC)


def bucket_index(value: Fraction, scale: int) -> int:
    """The bucket ``i`` with ``2**(i/2**scale) < |value| <= 2**((i+1)/2**scale)``, in exact integer arithmetic.

    >>> [bucket_index(Fraction(v), 0) for v in (1, 2, 3, 4, Fraction(1, 2))]
    [-1, 0, 1, 1, -2]
    """
    n = 1 << scale
    p: int = abs(value).numerator ** n
    q: int = abs(value).denominator ** n

    def above(i: int) -> bool:  # |value| ** n > 2 ** i
        return p > q << i if i >= 0 else p << -i > q

    i = math.floor(math.log2(abs(value)) * n)
    while not above(i):
        i -= 1
    while above(i + 1):
        i += 1
    return i


@dataclass
class Histogram:
    """What an exponential histogram holds: count, sum, zero count and the counts by (sign, bucket index)."""

    count: int = 0
    total: Fraction = Fraction(0)
    zero_count: int = 0
    buckets: Counter[tuple[int, int]] = field(default_factory=Counter)

    @classmethod
    def of(cls, values: Sequence[Fraction], scale: int) -> Histogram:
        buckets = Counter((1 if v > 0 else -1, bucket_index(v, scale)) for v in values if v != 0)
        return cls(len(values), sum(values, Fraction(0)), sum(1 for v in values if v == 0), buckets)

    def merged(self, other: Histogram) -> Histogram:
        return Histogram(
            self.count + other.count,
            self.total + other.total,
            self.zero_count + other.zero_count,
            self.buckets + other.buckets,
        )


def point_spec(values: Sequence[Fraction], scale: int) -> dict[str, Any]:
    """The cumulative OTLP point of ``values``: each side spans its lowest..highest non-empty bucket."""
    histogram = Histogram.of(values, scale)
    spec: dict[str, Any] = {
        "count": histogram.count,
        "sum": float(histogram.total),
        "zero_count": histogram.zero_count,
        "scale": scale,
        "min": float(min(values, default=0)),
        "max": float(max(values, default=0)),
    }
    for sign, side in ((1, "positive"), (-1, "negative")):
        indices = sorted(i for s, i in histogram.buckets if s == sign)
        offset = indices[0] if indices else 0
        counts = [0] * (indices[-1] - offset + 1 if indices else 0)
        for index in indices:
            counts[index - offset] = histogram.buckets[(sign, index)]
        spec[side] = {"offset": offset, "bucket_counts": counts}
    return spec


def _dyadic(values: np.ndarray, denominator: int) -> list[Fraction]:
    """``values`` rounded to multiples of ``1/denominator``: exact in float64, so sums are exact too."""
    return [Fraction(round(v * denominator), denominator) for v in values]


def rank_values(rank: int, export: int, rng: np.random.Generator) -> dict[str, list[Fraction]]:
    """The values rank ``rank`` observes before export ``export``: ranges that widen with every export (new low
    and high buckets), positive and negative ranges that move in opposite directions with the rank (so the
    merge meets lower offsets on one side and higher on the other), zeros on even ranks."""
    if rank == RANKS - 1 and export < EMPTY_EXPORTS:
        return {series.metric.name: [] for series in SERIES}
    low, high = rank - 3 - export, rank + export
    positive = 2.0 ** rng.uniform(low, high, 6)
    negative = -(2.0 ** rng.uniform(-high - 2, -low - 2, 4))
    zeros = [Fraction(0)] * (rank % 2 == 0)
    return {
        REWARD.metric.name: _dyadic(np.concatenate((positive, negative)), 1 << 12) + zeros,
        STALENESS.metric.name: [*_dyadic(2.0 ** rng.uniform(0, math.log2(5000), 12), 1), Fraction(0)],
        METRIC.metric.name: _dyadic(rng.uniform(-3, 3, 8) * 2.0 ** rng.integers(-6, 2, 8), 1 << 16),
    }


def rank_exports(seed: int) -> list[list[dict[str, dict[str, Any]]]]:
    """For each rank, the cumulative point of every series at each export."""
    rng = np.random.default_rng(seed)
    exports: list[list[dict[str, dict[str, Any]]]] = []
    for rank in range(RANKS):
        seen: dict[str, list[Fraction]] = {series.metric.name: [] for series in SERIES}
        points = []
        for export in range(EXPORTS):
            for metric, values in rank_values(rank, export, rng).items():
                seen[metric] += values
            points.append({s.metric.name: point_spec(seen[s.metric.name], s.scale) for s in SERIES})
        exports.append(points)
    return exports


def expected(exports: list[list[dict[str, dict[str, Any]]]], series: Series) -> Histogram:
    """The exact merge over ranks of each rank's last cumulative point, from the points themselves."""
    total = Histogram()
    for points in exports:
        spec = points[-1][series.metric.name]
        buckets: Counter[tuple[int, int]] = Counter()
        for sign, side in ((1, "positive"), (-1, "negative")):
            for position, count in enumerate(spec[side]["bucket_counts"]):
                if count:
                    buckets[(sign, spec[side]["offset"] + position)] += count
        total = total.merged(Histogram(spec["count"], Fraction(spec["sum"]), spec["zero_count"], buckets))
    return total


def prometheus_histogram(prometheus: Prometheus, series: Series, run_id: str) -> dict[str, Any] | None:
    """The one native histogram Prometheus holds now for ``series`` of ``run_id`` (None when it has none)."""
    matchers = ",".join(
        [f'rl_run_id="{run_id}"', *(f'{key.replace(".", "_")}="{value}"' for key, value in series.attributes.items())]
    )
    result = prometheus.query(f"{series.prometheus_name}{{{matchers}}}")
    if not result:
        return None
    assert len(result) == 1, result
    assert "histogram" in result[0], result[0]
    return dict(result[0]["histogram"][1])


def as_histogram(native: dict[str, Any], scale: int) -> Histogram:
    """Prometheus's JSON native histogram as a :class:`Histogram` at ``scale``.

    Buckets are ``[boundary_rule, lower, upper, count]``: positive ones ``(lower, upper]`` (rule 0), negative ones
    ``[lower, upper)`` (rule 1), the zero bucket ``[-t, t]`` (rule 3). Each bucket must be exactly one bucket at
    ``scale`` wide (a downscaled histogram fails here).
    """
    n = 1 << scale
    histogram = Histogram(int(native["count"]), Fraction(float(native["sum"])), 0, Counter())
    for rule, lower, upper, count in native.get("buckets", []):
        lower, upper, count = float(lower), float(upper), int(float(count))
        if rule == 3:
            assert -lower == upper < 1e-100, (lower, upper)
            histogram.zero_count += count
            continue
        sign, low, high = (1, lower, upper) if rule == 0 else (-1, -upper, -lower)
        assert rule in (0, 1) and low > 0, (rule, lower, upper)
        index = round(math.log2(low) * n)
        one_bucket = math.isclose(math.log2(low) * n, index, abs_tol=1e-6) and math.isclose(
            math.log2(high) * n, index + 1, abs_tol=1e-6
        )
        assert one_bucket, f"bucket [{lower}, {upper}] is not one bucket at scale {scale} (downscaled?)"
        histogram.buckets[(sign, index)] += count
    return histogram


@pytest.fixture(scope="module")
def exponential_run(shared_stack: Any) -> Iterator[tuple[str, list[list[dict[str, dict[str, Any]]]]]]:
    """Four rank processes export their cumulative points in lockstep, one export per collector tick."""
    run_id = f"exponential-{uuid.uuid4().hex[:8]}"
    exports = rank_exports(seed=5)
    ranks = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.pipeline.test_exponential_merge",
                json.dumps(
                    {"endpoint": shared_stack.otlp_grpc_endpoint, "run_id": run_id, "rank": rank, "points": points}
                ),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for rank, points in enumerate(exports)
    ]
    try:
        for _ in range(EXPORTS):
            for process in ranks:
                assert process.stdin is not None and process.stdout is not None
                process.stdin.write("export\n")
                process.stdin.flush()
            for process in ranks:
                assert process.stdout is not None
                assert process.stdout.readline().strip() == "SUCCESS"
            time.sleep(EXPORT_GAP_S)
        yield run_id, exports
    finally:
        for process in ranks:
            process.kill()
            process.wait(30)


@pytest.mark.parametrize("series", SERIES, ids=[series.metric.name for series in SERIES])
def test_ranks_merge_into_the_exact_native_histogram(
    shared_stack: Any, exponential_run: tuple[str, list[list[dict[str, dict[str, Any]]]]], series: Series
) -> None:
    """Prometheus holds one native histogram per run whose count, sum, zero count and every bucket (at the
    ranks' scale) equal the exact merge of the ranks' last cumulative points."""
    run_id, exports = exponential_run
    want = expected(exports, series)
    prometheus = Prometheus(shared_stack.prometheus_url)

    def complete() -> dict[str, Any] | None:
        found = prometheus_histogram(prometheus, series, run_id)
        return found if found is not None and int(found["count"]) == want.count else None

    native = eventually(complete, what=f"{series.prometheus_name} of {run_id} with count {want.count}", timeout_s=30)
    got = as_histogram(native, series.scale)
    assert (got.count, got.total, got.zero_count) == (want.count, want.total, want.zero_count)
    assert dict(sorted(got.buckets.items())) == dict(sorted(want.buckets.items()))


def test_the_points_exercise_what_upstream_merges_wrongly() -> None:
    """The designed points have offsets that differ across ranks (one rank lower on the positive side and higher
    on the negative side than another), gaps, zero counts, new low and high buckets in later exports, a run-level
    span above 160 buckets and a rank whose first points are empty: otherwise the merge test would prove little."""
    exports = rank_exports(seed=5)
    staleness = {index for sign, index in expected(exports, STALENESS).buckets if sign == 1}
    assert max(staleness) - min(staleness) + 1 > 160
    reward = [[point[REWARD.metric.name] for point in points] for points in exports]
    last = [(points[-1]["positive"]["offset"], points[-1]["negative"]["offset"]) for points in reward]
    assert any(a[0] < b[0] and a[1] > b[1] for a in last for b in last)
    assert all(0 in points[-1]["positive"]["bucket_counts"] for points in reward)
    assert all(points[-1]["zero_count"] > 0 for points in reward[::2])
    for points in reward:
        spans = [
            (point["positive"]["offset"], point["positive"]["offset"] + len(point["positive"]["bucket_counts"]))
            for point in points
            if point["count"]
        ]
        assert spans[-1][0] < spans[0][0] and spans[-1][1] > spans[0][1]
    assert reward[-1][0]["count"] == 0 and reward[-1][0]["positive"]["bucket_counts"] == []


@pytest.mark.stack  # runs the go command
def test_a_patch_that_does_not_apply_is_an_install_error_naming_it(tmp_path: Path) -> None:
    """A patch whose hunks do not match its module fails the build with an InstallError naming the patch."""
    manifest = tmp_path / "builder.yaml"
    manifest.write_text("dist: {name: otelcol-test}\n", encoding="utf-8")
    (tmp_path / "patches").mkdir()
    patch = tmp_path / "patches" / "broken.patch"
    patch.write_text(
        "# module: github.com/open-telemetry/opentelemetry-collector-contrib/internal/coreinternal v0.161.0\n"
        "--- a/aggregateutil/aggregate.go\n+++ b/aggregateutil/aggregate.go\n"
        "@@ -1,1 +1,1 @@\n-// not the first line\n+// changed\n",
        encoding="utf-8",
    )
    with pytest.raises(InstallError, match=r"collector patch .*broken\.patch' does not apply to .*coreinternal@v0"):
        collector_build._effective_manifest(manifest, go=go_executable(), scratch=tmp_path / "scratch", patched=True)


@pytest.mark.stack  # runs the go command
def test_patched_modules_pass_their_go_tests(tmp_path: Path) -> None:
    """Each patched module copy the build uses passes the Go tests (the patch's own included) of every package
    its patch touches."""
    manifest = layout.collector_manifest(ROOT)
    go = go_executable()
    effective = yaml.safe_load(
        collector_build._effective_manifest(manifest, go=go, scratch=tmp_path, patched=True).read_text()
    )
    # The copies are named relative to the builder's output folder, scratch/dist (collector_build._effective_manifest).
    copies = {
        module: (tmp_path / "dist" / path).resolve()
        for module, path in (e.split(" => ") for e in effective["replaces"])
    }
    for patch in collector_build.collector_patches(manifest):
        changed = re.findall(r"^\+\+\+ b/(\S+)", patch.path.read_text(encoding="utf-8"), flags=re.MULTILINE)
        packages = sorted({f"./{Path(path).parent}" for path in changed})
        result = subprocess.run(
            [str(go), "test", *packages], cwd=copies[patch.module], capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, f"{patch.path.name}: go test {packages}\n{result.stdout}{result.stderr}"


def test_patches_are_part_of_the_build_identity(tmp_path: Path) -> None:
    """Changing a patch changes the collector's digest; a patch without its module header is a ValueError."""
    manifest = tmp_path / "builder.yaml"
    manifest.write_text("dist: {}\n", encoding="utf-8")
    bare = collector_build.manifest_digest(manifest)
    (tmp_path / "patches").mkdir()
    patch = tmp_path / "patches" / "one.patch"
    patch.write_text("# module: example.com/m v1.0.0\n--- a/x\n+++ b/x\n", encoding="utf-8")
    first = collector_build.manifest_digest(manifest)
    patch.write_text("# module: example.com/m v1.0.0\n--- a/y\n+++ b/y\n", encoding="utf-8")
    assert len({bare, first, collector_build.manifest_digest(manifest)}) == 3
    patch.write_text("--- a/y\n+++ b/y\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"collector patch .*one\.patch' must start with a line '# module: "):
        collector_build.manifest_digest(manifest)


def _rank_main(spec: dict[str, Any]) -> None:
    """A rank: on each ``export`` line on stdin, send its next cumulative points (one request holding every
    series) with the real OTLP gRPC exporter, and answer the export result's name."""
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        Buckets,
        ExponentialHistogram,
        ExponentialHistogramDataPoint,
        Metric,
        MetricsData,
        ResourceMetrics,
        ScopeMetrics,
    )
    from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    resource = Resource.create(
        {
            SERVICE_NAME: SERVICE_NAME,
            SERVICE_INSTANCE_ID: str(uuid.uuid4()),
            contract.RUN_ID: spec["run_id"],
            contract.RANK: spec["rank"],
            contract.WORLD_SIZE: RANKS,
            contract.LOCAL_RANK: spec["rank"],
            contract.ROLE: "trainer",
        }
    )
    scope = InstrumentationScope(contract.SCOPE_NAME, contract.SCOPE_VERSION)
    exporter = OTLPMetricExporter(endpoint=spec["endpoint"], insecure=True, timeout=10)
    start = time.time_ns()
    for points, _ in zip(spec["points"], sys.stdin, strict=True):
        now = time.time_ns()
        metrics = [
            Metric(
                name=series.metric.name,
                description="",
                unit=series.metric.unit,
                data=ExponentialHistogram(
                    data_points=[
                        ExponentialHistogramDataPoint(
                            attributes=series.attributes,
                            start_time_unix_nano=start,
                            time_unix_nano=now,
                            count=p["count"],
                            sum=p["sum"],
                            scale=p["scale"],
                            zero_count=p["zero_count"],
                            positive=Buckets(**p["positive"]),
                            negative=Buckets(**p["negative"]),
                            flags=0,
                            min=p["min"],
                            max=p["max"],
                        )
                    ],
                    aggregation_temporality=AggregationTemporality.CUMULATIVE,
                ),
            )
            for series, p in ((series, points[series.metric.name]) for series in SERIES)
        ]
        data = MetricsData([ResourceMetrics(resource, [ScopeMetrics(scope, metrics, "")], "")])
        print(exporter.export(data).name, flush=True)
    exporter.shutdown()


if __name__ == "__main__":
    _rank_main(json.loads(sys.argv[1]))
