"""Shared fixtures: recording exporters that subclass the SDK's real interfaces."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
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


@pytest.fixture
def metric_exporter() -> Iterator[RecordingMetricExporter]:
    yield RecordingMetricExporter()


# The real stack ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def stack_binaries() -> object:
    """The stack's executables, installed or built on first use (the collector build takes minutes once)."""
    from otel_rl.stack import install

    return install.install_all()


@pytest.fixture(scope="session")
def shared_stack(stack_binaries: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One private stack on free ports for all tests that only add data to it (each uses its own run id)."""
    from tests.pipeline.harness import private_stack

    with private_stack(stack_binaries, tmp_path_factory.mktemp("shared-stack")) as running:
        yield running
