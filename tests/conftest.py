"""Shared fixtures: recording exporters that subclass the SDK's real interfaces, typed accessors of their points."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, TypeVar

import pytest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.sdk.metrics.export import (
    ExponentialHistogramDataPoint,
    HistogramDataPoint,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.util.types import AnyValue
    from otel_rl_ops.query import Prometheus

DataPoint = NumberDataPoint | HistogramDataPoint | ExponentialHistogramDataPoint
"""Any point an otel-rl meter exports: counters and gauges, explicit and exponential histograms."""
Labels = tuple[tuple[str, str], ...]
"""A stream's attributes, sorted by name (otel-rl's metric attributes are all strings)."""
Stream = tuple[str, Labels]
"""A metric name and the attributes of one of its streams."""
EXPORT_WAIT_S: Final = 60.0
"""How long a test waits for an in-process flush or shutdown: generous, since the suite runs loaded on shared
machines (a flush returns as soon as it is done, so passing runs do not wait)."""
_Point = TypeVar("_Point", NumberDataPoint, HistogramDataPoint, ExponentialHistogramDataPoint)


def _show(name: str, labels: Labels) -> str:
    """``name{key=value,...}``, how a stream reads in an assertion message."""
    return f"{name}{{{','.join(f'{key}={value}' for key, value in labels)}}}"


def _labels(name: str, point: DataPoint) -> Labels:
    """The point's attributes, sorted; asserts they are strings, as every otel-rl metric attribute is."""
    labels: list[tuple[str, str]] = []
    for key, value in sorted((point.attributes or {}).items()):
        assert isinstance(value, str), f"{name} has the attribute {key}={value!r}, not a string"
        labels.append((key, value))
    return tuple(labels)


def _narrow(kind: type[_Point], name: str, labels: Labels, point: DataPoint) -> _Point:
    """``point`` as a ``kind``; fails naming the stream when it is another kind of point."""
    if not isinstance(point, kind):
        raise AssertionError(f"{_show(name, labels)} is exported as {type(point).__name__}, not {kind.__name__}")
    return point


class RecordingMetricExporter(MetricExporter):
    """Keeps every exported MetricsData; ``fail`` makes exports fail (as an unreachable collector does).

    Read the points back typed: :meth:`number`, :meth:`histogram_point`, :meth:`exponential_point` (one stream, by
    name and attributes), :meth:`streams` and :meth:`numbers` (every stream of a name), :meth:`latest` (all)."""

    def __init__(self) -> None:
        super().__init__()
        self.exports: list[MetricsData] = []
        self.fail = False
        self.lock = threading.Lock()

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object) -> MetricExportResult:
        if self.fail:
            return MetricExportResult.FAILURE
        with self.lock:
            self.exports.append(metrics_data)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        return None

    def latest(self) -> dict[Stream, DataPoint]:
        """The last exported point of every (metric, attributes) stream."""
        points: dict[Stream, DataPoint] = {}
        with self.lock:
            exports = list(self.exports)
        for data in exports:
            for rm in data.resource_metrics:
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        for point in metric.data.data_points:
                            points[(metric.name, _labels(metric.name, point))] = point
        return points

    def streams(self, name: str) -> dict[Labels, DataPoint]:
        """The last point of every stream of metric ``name``, by its attributes (none: an empty dict)."""
        return {labels: point for (metric, labels), point in self.latest().items() if metric == name}

    def point(self, name: str, attributes: Mapping[str, str] | None = None) -> DataPoint:
        """The last point of the stream ``name`` with exactly ``attributes``; fails naming the stream when none was
        exported."""
        labels = tuple(sorted((attributes or {}).items()))
        streams = self.streams(name)
        if labels not in streams:
            others = ", ".join(_show(name, other) for other in streams) or "none"
            raise AssertionError(f"no point of {_show(name, labels)} was exported; streams of {name}: {others}")
        return streams[labels]

    def _typed(self, kind: type[_Point], name: str, attributes: Mapping[str, str] | None) -> _Point:
        return _narrow(kind, name, tuple(sorted((attributes or {}).items())), self.point(name, attributes))

    def number(self, name: str, attributes: Mapping[str, str] | None = None) -> int | float:
        """The value of the counter or gauge stream ``name`` with ``attributes``."""
        return self._typed(NumberDataPoint, name, attributes).value

    def numbers(self, name: str) -> dict[Labels, int | float]:
        """The value of every stream of the counter or gauge ``name``, by its attributes."""
        return {
            labels: _narrow(NumberDataPoint, name, labels, point).value for labels, point in self.streams(name).items()
        }

    def histogram_point(self, name: str, attributes: Mapping[str, str] | None = None) -> HistogramDataPoint:
        """The explicit-bucket histogram point of the stream ``name`` with ``attributes``."""
        return self._typed(HistogramDataPoint, name, attributes)

    def exponential_point(
        self, name: str, attributes: Mapping[str, str] | None = None
    ) -> ExponentialHistogramDataPoint:
        """The exponential histogram point of the stream ``name`` with ``attributes``."""
        return self._typed(ExponentialHistogramDataPoint, name, attributes)


class EncodingMetricExporter(RecordingMetricExporter):
    """Encodes every export with the OTLP exporters' own encoder first, as the gRPC and HTTP exporters do (a point
    OTLP cannot carry raises there too), and keeps what encoded."""

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object) -> MetricExportResult:
        encode_metrics(metrics_data)
        return super().export(metrics_data, timeout_millis)


class _Attributed(Protocol):
    """A log record, span or span event: whatever has the SDK's optional ``attributes``."""

    @property
    def attributes(self) -> Mapping[str, AnyValue] | None: ...


def attributes_of(item: _Attributed) -> Mapping[str, AnyValue]:
    """The attributes of a log record, span or span event, which the SDK types as optional; fails when it has none."""
    assert item.attributes is not None, f"{item!r} has no attributes"
    return item.attributes


def duration_s(span: ReadableSpan) -> float:
    """How long the finished ``span`` lasted, in seconds."""
    assert span.start_time is not None and span.end_time is not None, f"span {span.name} has not ended"
    return (span.end_time - span.start_time) / 1e9


def parent_id(span: ReadableSpan) -> int:
    """The span id of ``span``'s parent; fails when it is a root."""
    assert span.parent is not None, f"span {span.name} has no parent"
    return span.parent.span_id


def never_decreasing(
    prometheus: Prometheus, promql: str, start: float, end: float | None = None, *, step: float = 0.5
) -> list[float]:
    """The values of the one series ``promql`` returns, every ``step`` seconds from ``start`` to ``end`` (None: now);
    asserts that none is below the one before it: a cumulative count never dips, across exports, a rank's restart
    or a gateway's failover."""
    result = prometheus.range(promql, start, time.time() if end is None else end, step=step)
    assert len(result) == 1, f"{promql} returned {len(result)} series, not one: {[s['metric'] for s in result]}"
    values = [float(value) for _, value in result[0]["values"]]
    dips = [(before, after) for before, after in pairwise(values) if after < before]
    assert not dips, f"{promql} decreased {len(dips)} times (first {dips[0]}): {values}"
    return values


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile otel-rl's numba kernels into their on-disk cache before any test starts rank processes: a clean clone
    has none, and every rank process would compile them (7.6 s cold, 0.33 s cached: docs/performance.md), ten at
    once on two cores within a live test's time window."""
    import otel_rl

    otel_rl.Telemetry(otel_rl.TelemetryConfig(exporter="none")).shutdown()


@pytest.fixture
def metric_exporter() -> RecordingMetricExporter:
    return RecordingMetricExporter()


# The real stack ------------------------------------------------------------------------------------------------
# Every test that needs the stack's binaries gets them from a fixture below, directly or through another fixture
# (shared_stack, private stacks); such a test is marked ``stack`` (pytest_itemcollected), so that
# ``pytest -m "not stack"`` builds and starts nothing. A test that runs the go command or the stack some other way
# carries the mark itself (``@pytest.mark.stack`` or a module's ``pytestmark``).

collect_ignore: Final = ["integrations/verl_job.py"]
"""Scripts that run under another environment's interpreter (verl's, ``.venv-verl``), never imported here (the
suite's ``--doctest-modules`` would import them)."""

STACK_FIXTURES: Final = frozenset({"stack_binaries", "promtool", "amtool", "installed"})
"""The fixtures that install the stack's binaries (the collector build takes minutes once) or build and install
otel-rl's distributions."""

STACK_RERUNS: Final = 1
"""How often a failed ``stack`` test runs again (pytest-rerunfailures) before it counts as failed. These tests drive
real processes on a shared 2-core machine, where a run's timing can stretch by half; a test must still pass in one
whole run of its own, and every rerun is listed in the summary line (``N rerun``). Tests without the stack (unit,
property, fuzz) are deterministic and never rerun."""


SLOWEST_FIRST: Final = (
    "tests/alerts/test_delivery.py",
    "tests/demo/test_reward_hack.py",
    "tests/dashboards/test_live.py",
    "tests/pipeline/test_replay.py",
    "tests/packaging/test_install.py",
    "tests/dashboards/test_compare.py",
    "tests/queries/test_hostile_run_ids.py",
    "tests/demo/test_report.py",
    "tests/dashboards/test_static.py",
    "tests/pipeline/test_status.py",
    "tests/pipeline/test_replay_alerts.py",
    "tests/pipeline/test_samples_export.py",
    "tests/reliability/test_security.py",
    "tests/integrations/test_verl.py",
    "tests/stack/test_marker.py",
    "tests/bench/test_bench_smoke.py",
    "tests/pipeline/test_faults.py",
    "tests/reliability/test_stack_faults.py",
    "tests/unit/test_first_run.py",
    "tests/reliability/test_canary.py",
    "tests/reliability/test_isolation.py",
    "tests/unit/test_rollouts.py",
    "tests/integrations/test_tee.py",
    "tests/unit/test_telemetry.py",
    "tests/cluster/test_tsdb_cluster.py",
    "tests/demo/test_demo.py",
)
"""The longest modules, longest first, as measured in a whole run (4 workers, 2026-12-03: 370 s down to 60 s; the
replay, install, compare, status and samples modules placed by their times in the run of 2026-12-04).
``--dist loadscope`` hands each worker one module at a time in collection order, so starting the longest first keeps
one of them from starting last and running alone at the end (the schedule that finishes soonest, nearly). A module
missing here only runs later; none is left out."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the modules of :data:`SLOWEST_FIRST` first, longest first, each module's tests in their own order."""
    rank = {module: position for position, module in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark ``stack`` every test that uses a stack fixture, directly or through other fixtures; let every ``stack``
    test run again once on failure (:data:`STACK_RERUNS`)."""
    if STACK_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        item.add_marker(pytest.mark.stack)
    if item.get_closest_marker("stack") is not None:
        item.add_marker(pytest.mark.flaky(reruns=STACK_RERUNS))


@pytest.fixture(scope="session")
def stack_binaries() -> object:
    """The stack's executables, installed or built on first use (the collector build takes minutes once)."""
    from otel_rl_ops.stack import install

    return install.install_all()


@pytest.fixture(scope="session")
def promtool() -> Path:
    """Prometheus's promtool alone (no collector build), installed on first use."""
    from otel_rl_ops.stack import versions
    from otel_rl_ops.stack.env import otel_rl_home
    from otel_rl_ops.stack.gotools import ensure_go_binary

    return ensure_go_binary(versions.PROMTOOL, home=otel_rl_home())


@pytest.fixture(scope="session")
def amtool() -> Path:
    """Alertmanager's amtool alone (config checks, route tests), installed on first use."""
    from otel_rl_ops.stack import versions
    from otel_rl_ops.stack.env import otel_rl_home
    from otel_rl_ops.stack.gotools import ensure_go_binary

    return ensure_go_binary(versions.AMTOOL, home=otel_rl_home())


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> object:
    """otel-rl's distributions built and installed into fresh environments as users install them, once per test
    process (tests/packaging/installs.py: the tooling's half and the trainer's half apart)."""
    from tests.packaging.installs import build_installs

    return build_installs(tmp_path_factory.mktemp("installs"))


@pytest.fixture(scope="session")
def shared_stack(stack_binaries: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One private stack on free ports for all tests that only add data to it (each uses its own run id)."""
    from tests.pipeline.harness import private_stack

    with private_stack(stack_binaries, tmp_path_factory.mktemp("shared-stack")) as running:
        yield running
