"""What otel-rl says about its own exports: one warning when they start failing, one when they recover.

The OpenTelemetry SDK's OTLP exporters log every failed attempt themselves (``Transient error
StatusCode.UNAVAILABLE ...``, 23 lines in 25 s with the collector down), on module loggers that every exporter of
their kind in the process shares. For otel-rl's own exporters, :class:`ExportHealth` says it once instead: when
exports start failing, a warning naming the destination, the error and what is kept meanwhile; when they recover,
one saying how long it lasted, what went out late and what was lost. When the error shows that the endpoint speaks
the other protocol (a gRPC exporter on an OTLP/HTTP port, or the reverse) or the other TLS mode, that warning says so.

How the SDK's lines are taken out: :class:`_Capture`, a logging filter put first on the SDK exporters' loggers,
drops the WARNING and ERROR records emitted while one of otel-rl's exporters exports on that thread (a thread-local
that :meth:`ExportHealth.exporting` sets) and keeps their text as that export's error. Records of any other exporter
in the process (a user's own OpenTelemetry setup), on other threads or outside otel-rl's calls, pass untouched:
raising those loggers' level or stopping their propagation would hide them too, and a handler-level filter would
need the application's handlers. Being first, it also keeps otel-rl's records away from the SDK's own
``DuplicateFilter``, which would otherwise drop a user's identical line within 20 s of one of otel-rl's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Literal

_logger = logging.getLogger(__name__)

Signal = Literal["metrics", "logs", "spans"]

SDK_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http._log_exporter",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.common.http",
)
"""The loggers the SDK's OTLP exporters report failed attempts on (gRPC: one for every signal; HTTP: one per signal's
module, and the shared HTTP client of newer releases)."""

_ERROR_CHARS = 400
"""The most of an SDK error message a warning quotes."""

_active = threading.local()


class _Capture(logging.Filter):
    """Drops (and keeps the text of) WARNING+ records emitted inside :meth:`ExportHealth.exporting` on this thread."""

    def filter(self, record: logging.LogRecord) -> bool:
        messages: list[str] | None = getattr(_active, "messages", None)
        if messages is None or record.levelno < logging.WARNING:
            return True
        try:
            messages.append(record.getMessage())
        except Exception:  # noqa: BLE001 - a record that cannot be formatted is still the SDK's, still dropped
            messages.append(str(record.msg))
        return False


_CAPTURE = _Capture()
_install_lock = threading.Lock()


def captured(error: BaseException) -> bool:
    """Keep ``error`` (an exporter that raised instead of returning a failure, as OTel 1.39's HTTP exporters do on a
    refused connection) as this export's error text when inside :meth:`ExportHealth.exporting`; False elsewhere."""
    messages: list[str] | None = getattr(_active, "messages", None)
    if messages is None:
        return False
    messages.append(f"{type(error).__name__}: {error}")
    return True


def _install() -> None:
    """Put :data:`_CAPTURE` first on each SDK exporter logger, once."""
    with _install_lock:
        for name in SDK_LOGGERS:
            logger = logging.getLogger(name)
            if _CAPTURE not in logger.filters:
                logger.filters.insert(0, _CAPTURE)


class ExportHealth:
    """Whether otel-rl's exports go through, told once per change: one warning when any signal's export starts
    failing, one when every failing signal exports again.

    ``destination``: where exports go, as the warnings name it (``https://collector:4317 (OTLP/gRPC)``);
    ``queue_size``, ``span_queue_size`` and ``pending``: the sample and span queues' capacities and how many records
    and spans wait in them now."""

    def __init__(
        self,
        destination: str,
        *,
        queue_size: int,
        span_queue_size: int,
        pending: Callable[[], tuple[int, int]],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        _install()
        self._destination = destination
        self._queue_size = queue_size
        self._span_queue_size = span_queue_size
        self._pending = pending
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._failing: set[Signal] = set()
        """The signals whose last export failed: an outage lasts while it is not empty."""
        self._since = 0.0
        self._late: dict[Signal, int] = {}
        self._dropped: dict[Signal, int] = {}

    @property
    def failing(self) -> bool:
        """Whether some signal's last export failed."""
        with self._lock:
            return bool(self._failing)

    @contextmanager
    def exporting(self) -> Iterator[list[str]]:
        """Around one call of an otel-rl exporter: the SDK's WARNING+ lines it logs on this thread are collected in
        the list this yields instead of being logged (pass it to :meth:`exported`)."""
        previous = getattr(_active, "messages", None)
        messages: list[str] = []
        _active.messages = messages
        try:
            yield messages
        finally:
            _active.messages = previous

    def exported(self, signal: Signal, ok: bool, errors: Sequence[str] = (), *, items: int = 0) -> None:
        """The outcome of one export of ``items`` records (samples) or spans of ``signal``; ``errors``: what the SDK
        said while it ran."""
        with self._lock:
            if ok:
                if not self._failing:
                    return
                self._late[signal] = self._late.get(signal, 0) + items
                self._failing.discard(signal)
                if self._failing:
                    return
                report = self._recovered()
            else:
                began = not self._failing
                self._failing.add(signal)
                if began:
                    self._since = self._monotonic()
                    self._late, self._dropped = {}, {}
                if not began:
                    return
                report = self._started(signal, errors)
        _logger.warning("%s", report)

    def dropped(self, signal: Signal, items: int) -> None:
        """Sample records or spans dropped from a full queue (counted in the recovery warning while exports fail)."""
        with self._lock:
            if self._failing:
                self._dropped[signal] = self._dropped.get(signal, 0) + items

    def _started(self, signal: Signal, errors: Sequence[str]) -> str:
        error = _telling(errors)
        if len(error) > _ERROR_CHARS:
            error = error[: _ERROR_CHARS - 3] + "..."
        hint = diagnose(errors)
        records, spans = self._pending()
        return (
            f"otel-rl: exports to {self._destination} are failing ({signal}): {error}"
            + (f" -- {hint}" if hint else "")
            + f". Meanwhile metrics keep their totals (they go out with the first export that succeeds), and sample "
            f"records and spans wait in queues of {self._queue_size} and {self._span_queue_size} ({records} and "
            f"{spans} now; beyond them the oldest are dropped). otel-rl says when exports recover; the OpenTelemetry "
            "SDK's retry lines for them are not shown."
        )

    def _recovered(self) -> str:
        lasted = self._monotonic() - self._since
        late, dropped = self._late, self._dropped
        return (
            f"otel-rl: exports to {self._destination} recovered after {lasted:.1f}s: sent late: "
            f"{late.get('logs', 0)} sample record(s), {late.get('spans', 0)} span(s) and the metrics' totals (their "
            f"points during the outage are missing); lost (queues full): {dropped.get('logs', 0)} sample record(s) "
            f"and {dropped.get('spans', 0)} span(s)"
        )


_UNTELLING = ("due to timeout, max retries or shutdown", "Shutdown in progress")
"""Parts of SDK lines that carry no error (the HTTP exporter's last line of a failed export says only this)."""


def _telling(errors: Sequence[str]) -> str:
    """The newest of the SDK's lines of a failed export that carries its error, without a final period."""
    telling = [error for error in errors if not any(part in error for part in _UNTELLING)]
    return (telling or errors or ["the exporter reported a failure"])[-1].rstrip(".")


def diagnose(errors: Sequence[str]) -> str:
    """What the SDK's error lines say about the endpoint, in words ("" when they say nothing particular): another
    protocol answering (a gRPC exporter on an HTTP/1.1 server, an HTTP exporter on a gRPC server), TLS against a
    plain-text port, or no one listening."""
    text = " ".join(errors)
    if any(mark in text for mark in ("Failed parsing HTTP/2", "http1.x", "Received http2 header with status")):
        return (
            "the endpoint answered as an HTTP server, not gRPC: it looks like an OTLP/HTTP port (the collector's is "
            '4318). Use the OTLP/gRPC port (4317), or protocol "http/protobuf" (OTEL_EXPORTER_OTLP_PROTOCOL)'
        )
    if any(mark in text for mark in ("BadStatusLine", "\\x00\\x00\\x06\\x04")):
        return (
            "the endpoint did not answer in HTTP/1.1: it looks like an OTLP/gRPC port (the collector's is 4317). "
            'Use the OTLP/HTTP port (4318), or protocol "grpc" (OTEL_EXPORTER_OTLP_PROTOCOL)'
        )
    if "Connection reset by peer" in text or "RemoteDisconnected" in text:
        # A gRPC server answers an HTTP/1.1 request with an HTTP/2 frame and closes; a client still writing its
        # body sees the close as a reset (which of the two the SDK reports depends on timing).
        return (
            "the endpoint closed the connection without an HTTP/1.1 answer: it looks like an OTLP/gRPC port (the "
            "collector's is 4317), or a server that refused the request. Use the OTLP/HTTP port (4318), or protocol "
            '"grpc" (OTEL_EXPORTER_OTLP_PROTOCOL)'
        )
    if any(mark in text for mark in ("SSL", "ssl", "TLS", "handshake")):
        return (
            "TLS failed: an https:// endpoint, or a gRPC one without a scheme (TLS unless "
            "OTEL_EXPORTER_OTLP_INSECURE=true), to a port that may speak plain text: write http:// if it does"
        )
    if "Connection refused" in text or "ConnectionRefused" in text:
        return "nothing accepts connections there: start the collector (otel-rl stack up) or fix the endpoint"
    return ""
