"""The offline files (``exporter="file"``, or ``"otlp+file"`` beside the collector): every signal in the OTLP file
format, bounded and rotated, for clusters whose nodes cannot reach a collector (``otel-rl replay`` brings them in).

Each export becomes one line of OTLP/JSON (opentelemetry-specification ``protocol/file-exporter.md``: a
``MetricsData``, ``LogsData`` or ``TracesData``, encoded by the OTLP exporters' own encoders, written by protobuf's
JSON mapping with OTLP's hex ids) in the signal's current file, named by :func:`otel_rl_contract.files.file_name`. A
file that would pass ``output_max_bytes`` is closed and the next one opened; with more than ``output_max_files`` of a
signal the oldest is deleted, and the sample records or spans it held are counted as dropped (``reason="rotated"``; a
metrics line is a cumulative snapshot, so an old one holds nothing the newest lacks but its time). A write that fails
(a full disk) fails the export: the worker keeps the records and spans to retry, and the metrics' window, as it does
when a collector refuses them.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from otel_rl_contract.files import Signal, file_name, ids_to_hex

_logger = logging.getLogger(__name__)


def otlp_json_line(message: Message) -> str:
    """``message`` (an OTLP export request, whose JSON is that of ``MetricsData``, ``LogsData`` or ``TracesData``) as
    one line of OTLP/JSON."""
    mapped = MessageToDict(message, use_integers_for_enums=True)
    return json.dumps(ids_to_hex(mapped), separators=(",", ":"), ensure_ascii=False) + "\n"


class RotatingLines:
    """The files of one signal of one process: lines appended to the newest, rotated by size, bounded in number.

    ``dropped(items)`` is told how many items (records, spans) a deleted file held."""

    def __init__(
        self,
        folder: Path,
        name: Callable[[int], str],
        *,
        max_bytes: int,
        max_files: int,
        dropped: Callable[[int], None],
    ) -> None:
        self._folder = folder
        self._name = name
        self._max_bytes = max_bytes
        self._max_files = max_files
        self._dropped = dropped
        self._files: deque[tuple[Path, int]] = deque()
        self._handle: Any = None
        self._size = 0
        self._index = 0

    def append(self, line: str, items: int) -> bool:
        """Append ``line`` (holding ``items`` records or spans); False when it could not be written."""
        data = line.encode("utf-8")
        try:
            if self._handle is None or (self._size and self._size + len(data) > self._max_bytes):
                self._rotate()
            self._handle.write(data)
            self._handle.flush()
        except OSError as error:
            _logger.warning("otel-rl: could not write %s: %s", self._folder, error)
            return False
        self._size += len(data)
        path, held = self._files[-1]
        self._files[-1] = (path, held + items)
        return True

    def _rotate(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        self._folder.mkdir(parents=True, exist_ok=True)
        path = self._folder / self._name(self._index)
        self._index += 1
        self._handle = open(path, "ab")  # noqa: SIM115 - closed on rotation and by close()
        self._size = self._handle.tell()
        self._files.append((path, 0))
        while len(self._files) > self._max_files:
            oldest, held = self._files.popleft()
            oldest.unlink(missing_ok=True)
            if held:
                self._dropped(held)

    def close(self) -> None:
        """Close the current file."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class OfflineFiles:
    """The three signals' :class:`RotatingLines` of one process in ``folder``."""

    def __init__(
        self,
        folder: str,
        *,
        version: str,
        rank: int,
        instance: str,
        max_bytes: int,
        max_files: int,
        dropped: Callable[[Signal, int], None],
    ) -> None:
        def lines(signal: Signal) -> RotatingLines:
            return RotatingLines(
                Path(folder).expanduser(),
                lambda index: file_name(version=version, rank=rank, instance=instance, signal=signal, index=index),
                max_bytes=max_bytes,
                max_files=max_files,
                dropped=lambda items: dropped(signal, items),
            )

        self.metrics, self.logs, self.traces = lines("metrics"), lines("logs"), lines("traces")

    def close(self) -> None:
        """Close every signal's current file."""
        for lines in (self.metrics, self.logs, self.traces):
            lines.close()


class FileMetricExporter(MetricExporter):
    """Each export as one ``MetricsData`` line."""

    def __init__(self, lines: RotatingLines) -> None:
        super().__init__()
        self._lines = lines

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object) -> MetricExportResult:
        written = self._lines.append(otlp_json_line(encode_metrics(metrics_data)), 0)
        return MetricExportResult.SUCCESS if written else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        """The files are closed by :meth:`OfflineFiles.close`."""


class FileLogExporter(LogRecordExporter):
    """Each batch of records as one ``LogsData`` line."""

    def __init__(self, lines: RotatingLines) -> None:
        self._lines = lines

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        written = self._lines.append(otlp_json_line(encode_logs(batch)), len(batch))
        return LogRecordExportResult.SUCCESS if written else LogRecordExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        """The files are closed by :meth:`OfflineFiles.close`."""


class FileSpanExporter(SpanExporter):
    """Each batch of spans as one ``TracesData`` line."""

    def __init__(self, lines: RotatingLines) -> None:
        self._lines = lines

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        written = self._lines.append(otlp_json_line(encode_spans(spans)), len(spans))
        return SpanExportResult.SUCCESS if written else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        """The files are closed by :meth:`OfflineFiles.close`."""


class TeeMetricExporter(MetricExporter):
    """The files and the collector: each export goes to both, and its result is the collector's (a refused export is
    retried, so the files may hold a cumulative snapshot twice: harmless)."""

    def __init__(self, files: MetricExporter, otlp: MetricExporter) -> None:
        super().__init__()
        self._files, self._otlp = files, otlp

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object) -> MetricExportResult:
        self._files.export(metrics_data, timeout_millis)
        return self._otlp.export(metrics_data, timeout_millis=timeout_millis)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._otlp.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        self._otlp.shutdown(timeout_millis=timeout_millis)


class TeeLogExporter(LogRecordExporter):
    """Records to the files and the collector; the collector's result decides (a retried batch is written again:
    ``otel-rl replay`` keeps one record per ``rl.sample.id``)."""

    def __init__(self, files: LogRecordExporter, otlp: LogRecordExporter) -> None:
        self._files, self._otlp = files, otlp

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        self._files.export(batch)
        return self._otlp.export(batch)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._otlp.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self._otlp.shutdown()  # type: ignore[no-untyped-call]  # the SDK leaves it unannotated


class TeeSpanExporter(SpanExporter):
    """Spans to the files and the collector; the collector's result decides (``otel-rl replay`` keeps one span per
    trace and span id)."""

    def __init__(self, files: SpanExporter, otlp: SpanExporter) -> None:
        self._files, self._otlp = files, otlp

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self._files.export(spans)
        return self._otlp.export(spans)

    def shutdown(self) -> None:
        self._otlp.shutdown()
