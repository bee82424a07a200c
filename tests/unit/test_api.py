"""The public face: __all__ is pinned, and the torchforge shim maps onto the otel-rl API."""

from __future__ import annotations

import pytest
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter

import otel_rl
from otel_rl.torchforge import Reduce, record_episode_sample, record_metric
from tests.conftest import RecordingMetricExporter


def test_public_api_is_pinned() -> None:
    """Adding or removing a public name is a deliberate change to this list."""
    assert otel_rl.__all__ == [
        "DEFAULT_REWARD_BOUNDS",
        "DEFAULT_STALENESS_BOUNDS",
        "EpisodeSample",
        "ResolvedConfig",
        "SampleFilter",
        "Telemetry",
        "TelemetryConfig",
        "TopBottomFilter",
        "get_telemetry",
        "reset",
        "setup",
    ]
    assert otel_rl.__all__ == sorted(otel_rl.__all__)


def test_setup_is_once_per_process() -> None:
    """A second setup without reset raises; reset allows a new one."""
    otel_rl.setup(otel_rl.TelemetryConfig(run_id="a", exporter="none"))
    try:
        with pytest.raises(RuntimeError, match="already called"):
            otel_rl.setup(otel_rl.TelemetryConfig(run_id="b", exporter="none"))
    finally:
        otel_rl.reset()
    with pytest.raises(RuntimeError, match="has not been called"):
        otel_rl.get_telemetry()


def test_torchforge_shim_exports_mergeable_statistics(metric_exporter: RecordingMetricExporter) -> None:
    """record_metric keeps sum, count, squares and extremes so MEAN/SUM/MAX/MIN/STD are all derivable."""
    logs = InMemoryLogRecordExporter()
    telemetry = otel_rl.setup(
        otel_rl.TelemetryConfig(run_id="tf", export_interval_s=60), metric_exporter=metric_exporter, log_exporter=logs
    )
    try:
        for value, reduce in ((2.0, Reduce.MEAN), (-4.0, Reduce.STD), (1.0, Reduce.MAX)):
            record_metric("loss/policy", value, reduce)
        record_episode_sample("rollouts", {"reward": 1.0, "response": "r"})
        with pytest.raises(ValueError, match='"reduce" must be a Reduce'):
            record_metric("loss/policy", 1.0, "mean")  # type: ignore[arg-type]
        telemetry.flush(5)
        points = metric_exporter.latest()
        key = (("rl.metric.key", "loss/policy"),)
        histogram = points[("rl.metric", key)]
        assert (histogram.count, histogram.sum) == (3, -1.0)  # type: ignore[attr-defined]
        assert points[("rl.metric.squares", key)].value == 21.0  # type: ignore[attr-defined]
        assert points[("rl.metric.max", key)].value == 2.0  # type: ignore[attr-defined]
        assert points[("rl.metric.min", key)].value == -4.0  # type: ignore[attr-defined]
        telemetry.step(1)
        telemetry.flush(5)
        (record,) = logs.get_finished_logs()
        assert record.log_record.attributes["rl.sample.extra.table"] == "rollouts"  # type: ignore[index]
    finally:
        otel_rl.reset()
