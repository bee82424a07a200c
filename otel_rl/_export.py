"""The export worker and the exporters it drives.

One daemon thread does all exporting, off the training thread: every interval (or when a flush is requested) it
sends the pending sample records and a cumulative snapshot of the metrics. While exports fail, the periodic cycles
back off (doubling from the interval up to 5 s; a flush or shutdown still tries at once), because every attempt
encodes its batch in Python and would take the GIL from the training thread for nothing. The training thread only
ever appends to a bounded queue and updates small in-memory totals, so a slow, hung or absent collector cannot
block it; queue overflow drops the oldest records and counts them.
"""

from __future__ import annotations

import collections
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

import grpc
import requests
from opentelemetry.sdk._logs import LogRecordProcessor, ReadableLogRecord, ReadWriteLogRecord
from opentelemetry.sdk._logs.export import ConsoleLogRecordExporter, LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, MetricExporter, MetricExportResult
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExporter

from otel_rl import _names
from otel_rl._config import ResolvedConfig
from otel_rl._console import ConsoleLogFormatter, ConsoleMetricFormatter
from otel_rl._store import MetricStore, attributes

_logger = logging.getLogger(__name__)
_BATCH = 512
_BATCH_BYTES = 4 * 1024 * 1024
"""Most (estimated) bytes of log records in one export: the default gRPC receive limit of a stock collector
(4 MiB). A bigger request is refused every time it is retried, which would stall all sample export."""
_MAX_BACKOFF_S = 5.0
"""Longest pause between periodic export attempts while they fail: the most a recovered collector waits for data."""
_SIGNAL_METRICS = attributes(**{_names.SELF_SIGNAL: "metrics"})
_SIGNAL_LOGS = attributes(**{_names.SELF_SIGNAL: "logs"})
_DROPPED_QUEUE_FULL = attributes(**{_names.SELF_REASON: "queue_full"})
_DROPPED_SHUTDOWN = attributes(**{_names.SELF_REASON: "shutdown"})


@dataclass(frozen=True)
class Exporters:
    """The exporters of one process, and the file they write to (closed on shutdown)."""

    metrics: MetricExporter | None
    logs: LogRecordExporter | None
    spans: SpanExporter | None = None
    output: IO[str] | None = None


def build_exporters(config: ResolvedConfig) -> Exporters:
    """The exporters ``config`` asks for."""
    if config.exporter == "none":
        return Exporters(None, None)
    if config.exporter == "console":
        return Exporters(
            ConsoleMetricExporter(out=sys.stdout, formatter=ConsoleMetricFormatter()),
            ConsoleLogRecordExporter(out=sys.stdout, formatter=ConsoleLogFormatter()),
            ConsoleSpanExporter(out=sys.stdout),
        )
    if config.exporter == "file":
        out = open(config.output_file, "a", encoding="utf-8")  # noqa: SIM115 - closed by Telemetry.shutdown
        return Exporters(
            ConsoleMetricExporter(out=out, formatter=lambda data: data.to_json(indent=None) + "\n"),
            ConsoleLogRecordExporter(out=out, formatter=lambda record: record.to_json(indent=None) + "\n"),
            ConsoleSpanExporter(out=out, formatter=lambda span: span.to_json(indent=None) + "\n"),
            out,
        )
    return _otlp_exporters(config)


class _PinnedCASession(requests.Session):
    """A requests session whose ``verify`` (the configured CA file) wins over ``REQUESTS_CA_BUNDLE`` and
    ``CURL_CA_BUNDLE``: plain requests lets those variables replace a session's ``verify``, so a trainer in an
    environment that sets them would not trust the collector's private CA given in ``certificate_file``."""

    def merge_environment_settings(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        settings: dict[str, Any] = super().merge_environment_settings(*args, **kwargs)
        settings["verify"] = self.verify
        return settings


def _otlp_exporters(config: ResolvedConfig) -> Exporters:
    endpoint, timeout = config.endpoint, config.export_timeout_s
    # gRPC refuses metadata keys with capitals ("Invalid metadata", every export fails); HTTP header names are
    # case-insensitive, so lower-casing is right for both.
    headers = {str(key).lower(): value for key, value in config.headers.items()}
    if config.protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter

        base = endpoint.rstrip("/")

        def common() -> dict[str, Any]:
            session = None
            if config.certificate_file is not None:
                session = _PinnedCASession()
                session.verify = config.certificate_file
            return {"certificate_file": config.certificate_file, "headers": headers, "timeout": timeout,
                    "session": session}  # fmt: skip

        return Exporters(
            HttpMetricExporter(endpoint=f"{base}/v1/metrics", **common()),
            HttpLogExporter(endpoint=f"{base}/v1/logs", **common()),
            HttpSpanExporter(endpoint=f"{base}/v1/traces", **common()),
        )
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

    secure = endpoint.startswith("https://") or config.certificate_file is not None
    credentials = None
    if secure:
        root = None
        if config.certificate_file is not None:
            with open(config.certificate_file, "rb") as pem:
                root = pem.read()
        credentials = grpc.ssl_channel_credentials(root_certificates=root)
    grpc_common: dict[str, Any] = {
        "endpoint": endpoint.split("://", 1)[1],
        "insecure": not secure,
        "credentials": credentials,
        "headers": headers,
        "timeout": timeout,
    }
    return Exporters(
        GrpcMetricExporter(**grpc_common), GrpcLogExporter(**grpc_common), GrpcSpanExporter(**grpc_common)
    )


class ExportWorker:
    """Exports metrics and queued log records from one daemon thread, every ``interval_s`` or on request."""

    def __init__(
        self,
        store: MetricStore,
        *,
        metric_exporter: MetricExporter | None,
        log_exporter: LogRecordExporter | None,
        interval_s: float,
        timeout_s: float,
        queue_size: int,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._store = store
        self._metric_exporter = metric_exporter
        self._log_exporter = log_exporter
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._clock = clock
        self._queue: collections.deque[ReadableLogRecord] = collections.deque()
        self._queue_size = queue_size
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._done = threading.Condition()
        self._requested = 0
        self._completed = 0
        self._stopping = False
        self._failed_cycles = 0
        self._retry_at = 0.0
        for key in ((_names.SAMPLES_EXPORTED, ()), (_names.SAMPLES_DROPPED, _DROPPED_QUEUE_FULL),
                    (_names.EXPORT_FAILURES, _SIGNAL_METRICS), (_names.EXPORT_FAILURES, _SIGNAL_LOGS)):  # fmt: skip
            store.add(*key, 0)
        self._thread = threading.Thread(target=self._run, name="otel-rl-export", daemon=True)
        self._thread.start()

    def submit(self, records: Sequence[ReadableLogRecord]) -> None:
        """Queue records for export; when the queue is full the oldest are dropped and counted."""
        if self._log_exporter is None or not records:
            return
        with self._lock:
            self._queue.extend(records)
        self._trim()

    def request(self) -> int:
        """Ask for an export cycle now, without waiting; returns a ticket for :meth:`wait`."""
        with self._done:
            self._requested += 1
            ticket = self._requested
        self._wake.set()
        return ticket

    def wait(self, ticket: int, timeout_s: float) -> bool:
        """Wait until the cycle of ``ticket`` has finished; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._done:
            while self._completed < ticket:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._thread.is_alive():
                    return False
                self._done.wait(remaining)
        return True

    def shutdown(self, timeout_s: float) -> bool:
        """Run a last export cycle and stop, within ``timeout_s``; False if the exporters did not finish."""
        with self._done:
            self._stopping = True
        ticket = self.request()
        finished = self.wait(ticket, timeout_s)
        self._thread.join(max(0.0, timeout_s / 10))
        if not finished:
            with self._lock:
                lost = len(self._queue)
                self._queue.clear()
            self._store.add(_names.SAMPLES_DROPPED, _DROPPED_SHUTDOWN, lost)
            _logger.warning("otel-rl: exporters did not finish within %.1fs; giving up on them", timeout_s)
            return False
        for exporter in (self._metric_exporter, self._log_exporter):
            if exporter is not None:
                try:
                    exporter.shutdown()
                except Exception:  # noqa: BLE001 - an exporter's shutdown must not break the trainer's exit
                    _logger.warning("otel-rl: exporter shutdown failed", exc_info=True)
        return True

    def _run(self) -> None:
        while True:
            self._wake.wait(self._interval_s)
            self._wake.clear()
            with self._done:
                target, stopping = self._requested, self._stopping
                requested = target > self._completed
            if requested or time.monotonic() >= self._retry_at:
                logs_exported = self._export_logs()
                metrics_exported = self._export_metrics()
                self._back_off(logs_exported and metrics_exported)
            with self._done:
                self._completed = max(self._completed, target)
                self._done.notify_all()
            if stopping:
                return

    def _back_off(self, succeeded: bool) -> None:
        """After a failed cycle, skip periodic cycles for twice as long as the last pause (at most 5 s)."""
        self._failed_cycles = 0 if succeeded else self._failed_cycles + 1
        pause = 0.0 if succeeded else min(self._interval_s * 2**self._failed_cycles, _MAX_BACKOFF_S)
        self._retry_at = time.monotonic() + pause

    def _export_logs(self) -> bool:
        """Export the queued records in byte-capped batches; False when a batch failed (it stays queued)."""
        exporter = self._log_exporter
        if exporter is None:
            return True
        while True:
            with self._lock:
                batch: list[ReadableLogRecord] = []
                size = 0
                while self._queue and len(batch) < _BATCH:
                    cost = _record_bytes(self._queue[0])
                    if batch and size + cost > _BATCH_BYTES:
                        break
                    batch.append(self._queue.popleft())
                    size += cost
            if not batch:
                return True
            if _call(lambda: exporter.export(batch)) == LogRecordExportResult.SUCCESS:
                self._store.add(_names.SAMPLES_EXPORTED, (), len(batch))
                continue
            self._store.add(_names.EXPORT_FAILURES, _SIGNAL_LOGS, 1)
            with self._lock:
                self._queue.extendleft(reversed(batch))
            self._trim()
            return False

    def _trim(self) -> None:
        """Drop (and count) the oldest records beyond the queue's size."""
        with self._lock:
            overflow = len(self._queue) - self._queue_size
            for _ in range(max(overflow, 0)):
                self._queue.popleft()
        if overflow > 0:
            self._store.add(_names.SAMPLES_DROPPED, _DROPPED_QUEUE_FULL, overflow)

    def _export_metrics(self) -> bool:
        """Export a cumulative snapshot; False when it failed (its window extremes go out with the next one)."""
        exporter = self._metric_exporter
        if exporter is None:
            return True
        data, window = self._store.collect(self._clock())
        if data is None:
            return True
        timeout_ms = self._timeout_s * 1000
        if _call(lambda: exporter.export(data, timeout_millis=timeout_ms)) != MetricExportResult.SUCCESS:
            self._store.restore(window)
            self._store.add(_names.EXPORT_FAILURES, _SIGNAL_METRICS, 1)
            return False
        return True


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


def _record_bytes(record: ReadableLogRecord) -> int:
    """A log record's encoded size, roughly (its strings' UTF-8 bytes plus a fixed overhead)."""
    size = 256
    body = record.log_record.body
    for value in body.values() if isinstance(body, Mapping) else (body,):
        size += len(value.encode("utf-8", errors="replace")) if isinstance(value, str) else 16
    for key, value in (record.log_record.attributes or {}).items():
        size += len(key) + (len(value.encode("utf-8", errors="replace")) if isinstance(value, str) else 16)
    return size


def _call(export: Callable[[], object]) -> object:
    try:
        return export()
    except Exception:  # noqa: BLE001 - exporters may raise; the worker must survive and count it
        _logger.warning("otel-rl: export raised", exc_info=True)
        return None
