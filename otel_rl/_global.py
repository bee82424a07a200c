"""The process-wide Telemetry used by module-level helpers such as the torchforge shim."""

from __future__ import annotations

import threading
from collections.abc import Callable

from opentelemetry.sdk._logs.export import LogRecordExporter
from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.trace.export import SpanExporter

from otel_rl._config import TelemetryConfig
from otel_rl._samples import SampleFilter
from otel_rl._telemetry import Telemetry

_lock = threading.Lock()
_current: Telemetry | None = None


def setup(
    config: TelemetryConfig | None = None,
    *,
    metric_exporter: MetricExporter | None = None,
    log_exporter: LogRecordExporter | None = None,
    span_exporter: SpanExporter | None = None,
    sample_filter: Callable[[], SampleFilter] | None = None,
) -> Telemetry:
    """Configure telemetry for this process (once) and return it.

    Reads rank, world size and run id from torchrun or SLURM, endpoint and headers from the ``OTEL_*`` variables;
    see :class:`TelemetryConfig`. Calling it again without :func:`reset` raises ``RuntimeError``.

    >>> telemetry = setup(TelemetryConfig(run_id="doc", exporter="none"))
    >>> telemetry.record_rewards([1.0, -0.5], fn="correctness")
    >>> reset()
    """
    global _current
    with _lock:
        if _current is not None:
            raise RuntimeError("otel_rl.setup() was already called in this process; call otel_rl.reset() first")
        _current = Telemetry(
            config,
            metric_exporter=metric_exporter,
            log_exporter=log_exporter,
            span_exporter=span_exporter,
            sample_filter=sample_filter,
        )
        return _current


def get_telemetry() -> Telemetry:
    """The Telemetry made by :func:`setup`; raises ``RuntimeError`` before it."""
    if _current is None:
        raise RuntimeError("otel_rl.setup() has not been called in this process")
    return _current


def current() -> Telemetry | None:
    """The Telemetry made by :func:`setup`, or None before it (for helpers that must not raise)."""
    return _current


def reset(timeout_s: float | None = None) -> None:
    """Shut down and forget the process-wide Telemetry (for tests and re-configuration)."""
    global _current
    with _lock:
        current, _current = _current, None
    if current is not None:
        current.shutdown(timeout_s)
