"""The export worker: what leaves the process, from one daemon thread.

One daemon thread does all exporting, off the training thread: every interval (or when a flush is requested) it
sends the pending sample records and spans (each signal's :class:`~otel_rl._export.outbox.Outbox`: bounded, retried,
counted) and a cumulative snapshot of the metrics. While exports fail, the periodic cycles back off (doubling from the
interval up to 5 s; a flush or shutdown still tries at once), because every attempt encodes its batch in Python and
would take the GIL from the training thread for nothing. The training thread only ever appends to bounded queues and
updates small in-memory totals, so a slow, hung or absent collector cannot block it. Whether exports go through is
told by :class:`~otel_rl._export.health.ExportHealth`: one warning when they start failing, one when they recover.

Nothing can stall an export for good. A metric point that fails to encode is found by encoding each on its own, its
stream left out from then on and counted in ``otel_rl.export.unencodable``; the rest goes out at once (records and
spans: the outbox's own rules). A record larger than the log store keeps is dropped when it is queued
(``oversized``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import otel_rl_contract as contract
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LogRecordProcessor, ReadableLogRecord, ReadWriteLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.metrics.export import (
    Metric,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_rl._export.health import ExportHealth
from otel_rl._export.outbox import DROPPED_OVERSIZED, RAISED, Outbox, call_exporter
from otel_rl._state.store import MetricStore, attributes

_logger = logging.getLogger(__name__)
_BATCH_BYTES = 4 * 1024 * 1024
"""Most (estimated) bytes of log records in one export: the default gRPC receive limit of a stock collector
(4 MiB). A bigger request is refused every time it is retried, which would stall all sample export."""
RECORD_BYTES = 1024 * 1024
"""Largest sample record (as :func:`record_bytes` measures it) that is sent; a bigger one is dropped when queued
and counted (``oversized``). The log store decides: VictoriaLogs keeps no entry above 2 MiB of its own measure (48
bytes, plus 6 bytes and the name and value of each field, resource attributes included; a constant, not a flag, on
the OTLP path too) and drops it silently after answering 200. Half of that leaves room for the resource's fields and
for nested fields' longer flattened names, so every record sent is stored (docs/reliability.md, "One size limit")."""
_MAX_BACKOFF_S = 5.0
"""Longest pause between periodic export attempts while they fail: the most a recovered collector waits for data."""
_SIGNAL_METRICS = attributes(**{contract.SELF_SIGNAL: "metrics"})


@dataclass(frozen=True)
class Timer:
    """How the export worker measures and waits for time: ``monotonic()`` seconds, and ``wait(event, seconds)``,
    which returns True once ``event`` is set or False when the seconds have passed. Tests inject a fake one."""

    monotonic: Callable[[], float] = time.monotonic
    wait: Callable[[threading.Event, float], bool] = threading.Event.wait


def shutdown_within(part: Callable[[], object], timeout_s: float, what: str) -> bool:
    """Run ``part`` (an SDK provider's shutdown, which takes no deadline) on a daemon thread and wait for it at most
    ``timeout_s``: a hung collector cannot hold the trainer's exit longer than its shutdown timeout. False when it
    did not finish in time (the thread is left to end with the process)."""
    thread = threading.Thread(target=lambda: call_exporter(part), name=f"otel-rl-{what}-shutdown", daemon=True)
    thread.start()
    thread.join(min(max(0.0, timeout_s), threading.TIMEOUT_MAX))
    if thread.is_alive():
        _logger.warning("otel-rl: %s did not finish within the shutdown timeout; giving up on them", what)
        return False
    return True


class ExportWorker:
    """Exports metrics, queued log records and queued spans from one daemon thread, every ``interval_s`` or on
    request. Spans go through a worker of their own (only ``span_exporter``), so a failing trace path never holds the
    metrics back; ``health`` and ``collector_up`` (whether the collector takes metrics, for its retries and back-off)
    are then the metrics worker's.

    ``clock`` gives the wall-clock time of points (ns); ``timer`` the cadence, back-off and deadlines;
    ``destination`` names where exports go in the warnings of :attr:`health`."""

    def __init__(
        self,
        store: MetricStore,
        *,
        metric_exporter: MetricExporter | None,
        log_exporter: LogRecordExporter | None,
        span_exporter: SpanExporter | None = None,
        interval_s: float,
        timeout_s: float,
        queue_size: int,
        span_queue_size: int = 16_384,
        clock: Callable[[], int] = time.time_ns,
        timer: Timer = Timer(),
        destination: str = "the configured exporters",
        health: ExportHealth | None = None,
        collector_up: Callable[[], bool] | None = None,
    ) -> None:
        self._store = store
        self._metric_exporter = metric_exporter
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._clock = clock
        self._timer = timer
        self._unencodable: set[tuple[str, tuple[tuple[str, Any], ...]]] = set()
        self._metrics_up = False
        self._collector_up = collector_up or (lambda: self._metrics_up)
        self._wake = threading.Event()
        self._done = threading.Condition()
        self._requested = 0
        self._completed = 0
        self._stopping = False
        self._failed_cycles = 0
        self._retry_at = 0.0
        self.health = health or ExportHealth(
            destination,
            queue_size=queue_size,
            span_queue_size=span_queue_size,
            pending=self.pending,
            monotonic=timer.monotonic,
        )
        """Says once when exports start failing and once when they recover (in place of the SDK's retry lines);
        ``health`` shares another worker's."""
        outbox = functools.partial(
            Outbox, batch_bytes=_BATCH_BYTES, store=store, health=self.health, monotonic=timer.monotonic
        )
        self._logs: Outbox[ReadableLogRecord] | None = None
        if log_exporter is not None:
            self._logs = outbox(
                signal="logs",
                export=log_exporter.export,
                success=LogRecordExportResult.SUCCESS,
                encodes=lambda record: _encodes(functools.partial(encode_logs, [record])),
                cost=record_bytes,
                exported=contract.SAMPLES_EXPORTED,
                dropped=contract.SAMPLES_DROPPED,
                queue_size=queue_size,
            )
        self._spans: Outbox[ReadableSpan] | None = None
        if span_exporter is not None:
            self._spans = outbox(
                signal="spans",
                export=span_exporter.export,
                success=SpanExportResult.SUCCESS,
                encodes=lambda span: _encodes(functools.partial(encode_spans, [span])),
                cost=lambda span: 0,
                exported=contract.SPANS_EXPORTED,
                dropped=contract.SPANS_DROPPED,
                queue_size=span_queue_size,
            )
        self._exporters = [e for e in (metric_exporter, log_exporter, span_exporter) if e is not None]
        if metric_exporter is not None:
            store.add(contract.EXPORT_FAILURES, _SIGNAL_METRICS, 0)
            store.add(contract.EXPORT_UNENCODABLE, _SIGNAL_METRICS, 0)
        self._thread = threading.Thread(target=self._run, name="otel-rl-export", daemon=True)
        self._thread.start()

    def submit(self, records: Sequence[ReadableLogRecord]) -> None:
        """Queue records for export; a record too large for the log store is dropped and counted, and when the queue
        is full the oldest are dropped and counted."""
        if self._logs is None or not records:
            return
        fitting = [record for record in records if record_bytes(record) <= RECORD_BYTES]
        if len(fitting) < len(records):
            self._store.add(contract.SAMPLES_DROPPED, DROPPED_OVERSIZED, len(records) - len(fitting))
        self._logs.submit(fitting)

    def pending(self) -> tuple[int, int]:
        """How many sample records and spans wait for export now."""
        return (len(self._logs) if self._logs else 0, len(self._spans) if self._spans else 0)

    def submit_span(self, span: ReadableSpan) -> None:
        """Queue an ended span for export; when the queue is full the oldest are dropped and counted."""
        if self._spans is not None:
            self._spans.submit([span])

    def request(self) -> int:
        """Ask for an export cycle now, without waiting; returns a ticket for :meth:`wait`."""
        with self._done:
            self._requested += 1
            ticket = self._requested
        self._wake.set()
        return ticket

    def wait(self, ticket: int, timeout_s: float) -> bool:
        """Wait until the cycle of ``ticket`` has finished; False on timeout."""
        deadline = self._timer.monotonic() + timeout_s
        with self._done:
            while self._completed < ticket:
                remaining = deadline - self._timer.monotonic()
                if remaining <= 0 or not self._thread.is_alive():
                    return False
                self._done.wait(min(remaining, threading.TIMEOUT_MAX))
        return True

    def shutdown(self, timeout_s: float) -> bool:
        """Run a last export cycle and stop, within ``timeout_s``; False if the exporters did not finish."""
        with self._done:
            self._stopping = True
        ticket = self.request()
        finished = self.wait(ticket, timeout_s)
        self._thread.join(min(max(0.0, timeout_s / 10), threading.TIMEOUT_MAX))
        if not finished:
            for outbox in (self._logs, self._spans):
                if outbox is not None:
                    outbox.discard()
            _logger.warning("otel-rl: exporters did not finish within %.1fs; giving up on them", timeout_s)
            return False
        for exporter in self._exporters:
            try:
                exporter.shutdown()
            except Exception:
                _logger.warning("otel-rl: exporter shutdown failed", exc_info=True)
        return True

    def _run(self) -> None:
        while True:
            self._timer.wait(self._wake, self._interval_s)
            self._wake.clear()
            with self._done:
                target, stopping = self._requested, self._stopping
                requested = target > self._completed
            if requested or self._timer.monotonic() >= self._retry_at:
                self._cycle()
            with self._done:
                self._completed = max(self._completed, target)
                self._done.notify_all()
            if stopping:
                return

    def _cycle(self) -> None:
        """One export cycle: the queued items, then the metrics (with the items' counts)."""
        for outbox in (self._logs, self._spans):
            if outbox is not None:
                outbox.send(collector_up=self._collector_up(), timeout_s=self._timeout_s)
        self._metrics_up = self._export_metrics()
        self._back_off(self._collector_up())

    @property
    def metrics_up(self) -> bool:
        """Whether the last metrics export went through: the collector is there."""
        return self._metrics_up

    def _back_off(self, succeeded: bool) -> None:
        """After a cycle whose metrics export failed (the collector is away), skip periodic cycles for twice as long
        as the last pause (at most 5 s). A refused log batch alone does not back off: the collector is up, and the
        next cycles isolate the record it refuses."""
        self._failed_cycles = 0 if succeeded else self._failed_cycles + 1
        pause = 0.0 if succeeded else min(self._interval_s * 2**self._failed_cycles, _MAX_BACKOFF_S)
        self._retry_at = self._timer.monotonic() + pause

    def _export_metrics(self) -> bool:
        """Export a cumulative snapshot; False when it failed (its window extremes go out with the next one)."""
        exporter = self._metric_exporter
        if exporter is None:
            return True
        collected, window = self._store.collect(self._clock())
        if collected is None:
            return True
        data = self._without_unencodable(collected)
        timeout_ms = self._timeout_s * 1000
        with self.health.exporting() as errors:
            result = call_exporter(lambda: exporter.export(data, timeout_millis=timeout_ms))
            if result is RAISED:
                self._find_unencodable(data)
                data = self._without_unencodable(collected)
                result = call_exporter(lambda: exporter.export(data, timeout_millis=timeout_ms))
        self.health.exported("metrics", result == MetricExportResult.SUCCESS, errors)
        if result != MetricExportResult.SUCCESS:
            self._store.restore(window)
            self._store.add(contract.EXPORT_FAILURES, _SIGNAL_METRICS, 1)
            return False
        return True

    def _find_unencodable(self, data: MetricsData) -> None:
        """Find the points of ``data`` that fail to encode on their own, and leave their streams out from now on
        (counted once per stream)."""
        for resource, scope, metric in _metrics_of(data):
            for point in metric.data.data_points:
                single = _single(resource, scope, metric, point)
                if not _encodes(functools.partial(encode_metrics, single)):
                    self._unencodable.add((metric.name, _attributes_key(point.attributes)))
                    self._store.add(contract.EXPORT_UNENCODABLE, _SIGNAL_METRICS, 1)
                    _logger.warning("otel-rl: a point of %s could not be encoded; its stream is left out", metric.name)

    def _without_unencodable(self, data: MetricsData) -> MetricsData:
        if not self._unencodable:
            return data
        resource_metrics = []
        for rm in data.resource_metrics:
            scopes = []
            for sm in rm.scope_metrics:
                metrics = []
                for metric in sm.metrics:
                    points = [
                        p
                        for p in metric.data.data_points
                        if (metric.name, _attributes_key(p.attributes)) not in self._unencodable
                    ]
                    if points:
                        metrics.append(_with_points(metric, points))
                scopes.append(ScopeMetrics(scope=sm.scope, metrics=metrics, schema_url=sm.schema_url))
            resource_metrics.append(
                ResourceMetrics(resource=rm.resource, scope_metrics=scopes, schema_url=rm.schema_url)
            )
        return MetricsData(resource_metrics=resource_metrics)


class QueueLogProcessor(LogRecordProcessor):
    """Hands each emitted log record to the export worker, so samples share its bounded queue, byte-capped
    batches and drop counting."""

    def __init__(self, worker: ExportWorker) -> None:
        self._worker = worker

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        resource = log_record.resource if log_record.resource is not None else Resource.create({})
        self._worker.submit(
            [
                ReadableLogRecord(
                    log_record=log_record.log_record,
                    resource=resource,
                    instrumentation_scope=log_record.instrumentation_scope,
                    limits=log_record.limits,
                )
            ]
        )

    def shutdown(self) -> None:
        """Nothing to release: the worker is shut down by :class:`~otel_rl.Telemetry`."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class QueueSpanProcessor(SpanProcessor):
    """Hands each ended span to the export worker, so spans share its bounded, retried, counted queue: a collector
    outage shorter than the queue loses none (the SDK's batch processor drops a failed batch)."""

    def __init__(self, worker: ExportWorker) -> None:
        self._worker = worker

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do until the span ends."""

    def on_end(self, span: ReadableSpan) -> None:
        self._worker.submit_span(span)

    def shutdown(self) -> None:
        """Nothing to release: the worker is shut down by :class:`~otel_rl.Telemetry`."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def record_bytes(record: ReadableLogRecord) -> int:
    """A log record's size as a log store measures an entry, roughly: 256 bytes, plus for each body and attribute
    field 6 bytes, its name and its value (a string's UTF-8 bytes, 16 for any other value)."""
    body = record.log_record.body
    fields = [*(body.items() if isinstance(body, Mapping) else [("body", body)])]
    fields += (record.log_record.attributes or {}).items()
    return 256 + sum(
        6 + len(str(key)) + (len(value.encode("utf-8", errors="replace")) if isinstance(value, str) else 16)
        for key, value in fields
    )


def _encodes(encode: Callable[[], object]) -> bool:
    try:
        encode()
    except Exception:  # noqa: BLE001 - anything the encoder raises means "cannot go out"
        return False
    return True


def _metrics_of(data: MetricsData) -> list[tuple[Any, Any, Metric]]:
    return [(rm.resource, sm.scope, m) for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics]


def _single(resource: Any, scope: Any, metric: Metric, point: Any) -> MetricsData:
    """A MetricsData holding only ``point`` of ``metric``."""
    scope_metrics = ScopeMetrics(scope=scope, metrics=[_with_points(metric, [point])], schema_url="")
    return MetricsData([ResourceMetrics(resource=resource, scope_metrics=[scope_metrics], schema_url="")])


def _with_points(metric: Metric, points: list[Any]) -> Metric:
    data = dataclasses.replace(metric.data, data_points=points)  # type: ignore[arg-type]
    return Metric(name=metric.name, description=metric.description, unit=metric.unit, data=data)


def _attributes_key(attrs: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((str(k), repr(v)) for k, v in (attrs or {}).items()))
