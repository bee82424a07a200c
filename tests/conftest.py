"""Shared fixtures: recording exporters that subclass the SDK's real interfaces."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData


class RecordingMetricExporter(MetricExporter):
    """Keeps every exported MetricsData; ``fail`` makes exports fail (as an unreachable collector does)."""

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

    def latest(self) -> dict[tuple[str, tuple[tuple[str, object], ...]], object]:
        """The last exported point of every (metric, attributes) stream."""
        points: dict[tuple[str, tuple[tuple[str, object], ...]], object] = {}
        for data in self.exports:
            for rm in data.resource_metrics:
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        for point in metric.data.data_points:
                            points[(metric.name, tuple(sorted(point.attributes.items())))] = point
        return points


class EncodingMetricExporter(RecordingMetricExporter):
    """Encodes every export with the OTLP exporters' own encoder first, as the gRPC and HTTP exporters do (a point
    OTLP cannot carry raises there too), and keeps what encoded."""

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object) -> MetricExportResult:
        encode_metrics(metrics_data)
        return super().export(metrics_data, timeout_millis)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile otel-rl's numba kernels into their on-disk cache before any test starts rank processes: a clean clone
    has none, and every rank process would compile them (7.6 s cold, 0.33 s cached: docs/performance.md), ten at
    once on two cores within a live test's time window."""
    import otel_rl

    otel_rl.Telemetry(otel_rl.TelemetryConfig(exporter="none")).shutdown()


@pytest.fixture
def metric_exporter() -> Iterator[RecordingMetricExporter]:
    yield RecordingMetricExporter()


# The real stack ------------------------------------------------------------------------------------------------
# Every test that needs the stack's binaries gets them from a fixture below, directly or through another fixture
# (shared_stack, private stacks); such a test is marked ``stack`` (pytest_itemcollected), so that
# ``pytest -m "not stack"`` builds and starts nothing. A test that runs the go command or the stack some other way
# carries the mark itself (``@pytest.mark.stack`` or a module's ``pytestmark``).

STACK_FIXTURES: Final = frozenset({"stack_binaries", "promtool", "amtool"})
"""The fixtures that install the stack's binaries (the collector build takes minutes once)."""

STACK_RERUNS: Final = 1
"""How often a failed ``stack`` test runs again (pytest-rerunfailures) before it counts as failed. These tests drive
real processes on a shared 2-core machine, where a run's timing can stretch by half; a test must still pass in one
whole run of its own, and every rerun is listed in the summary line (``N rerun``). Tests without the stack (unit,
property, fuzz) are deterministic and never rerun."""


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
    from otel_rl.ops.stack import install

    return install.install_all()


@pytest.fixture(scope="session")
def promtool() -> Path:
    """Prometheus's promtool alone (no collector build), installed on first use."""
    from otel_rl.ops.stack import versions
    from otel_rl.ops.stack.env import otel_rl_home
    from otel_rl.ops.stack.gotools import ensure_go_binary

    return ensure_go_binary(versions.PROMTOOL, home=otel_rl_home())


@pytest.fixture(scope="session")
def amtool() -> Path:
    """Alertmanager's amtool alone (config checks, route tests), installed on first use."""
    from otel_rl.ops.stack import versions
    from otel_rl.ops.stack.env import otel_rl_home
    from otel_rl.ops.stack.gotools import ensure_go_binary

    return ensure_go_binary(versions.AMTOOL, home=otel_rl_home())


@pytest.fixture(scope="session")
def shared_stack(stack_binaries: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One private stack on free ports for all tests that only add data to it (each uses its own run id)."""
    from tests.pipeline.harness import private_stack

    with private_stack(stack_binaries, tmp_path_factory.mktemp("shared-stack")) as running:
        yield running
