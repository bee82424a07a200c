"""A run's offline samples and spans into the stores, through the stack's collector: its ``logs`` and ``traces``
pipelines leave records and spans as they are, timestamps included, so VictoriaLogs keeps each record at its own
``_time`` and Jaeger each span at its own, exactly as when the ranks sent them live.

What is there already is not sent again: a sample record whose ``rl.sample.id`` VictoriaLogs holds for its run, a span
whose trace and span ids Jaeger holds. A record or span written twice into the files (a retried export) goes once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import otel_rl_contract as contract
import requests
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogsData
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from otel_rl_ops import promql
from otel_rl_ops.query import Jaeger, VictoriaLogs

_TIMEOUT_S = 30.0


@dataclass
class Sent:
    """What one signal's replay did."""

    sent: int = 0
    already: int = 0
    """Skipped: in the store already, or seen earlier in the files."""
    runs: set[str] = field(default_factory=set)


def _run_of(resource_attributes: Iterable[object]) -> str:
    for item in resource_attributes:
        if getattr(item, "key", None) == contract.RUN_ID:
            return str(item.value.string_value)  # type: ignore[attr-defined]
    return ""


def _sample_id(record: object) -> str | None:
    for item in record.attributes:  # type: ignore[attr-defined]
        if item.key == contract.SAMPLE_ID:
            return str(item.value.string_value)
    return None


class LogReplay:
    """Sends ``LogsData`` lines to the collector's OTLP/HTTP ``/v1/logs``, each sample record once."""

    def __init__(self, otlp_http: str, logs: VictoriaLogs, *, session: requests.Session | None = None) -> None:
        self._url = f"{otlp_http.rstrip('/')}/v1/logs"
        self._logs = logs
        self._session = session or requests.Session()
        self._seen: dict[str, set[str]] = {}
        self.result = Sent()

    def _stored(self, run: str) -> set[str]:
        if run not in self._seen:
            query = f"{promql.logsql_exact(contract.RUN_ID, run)} | uniq by ({contract.SAMPLE_ID})"
            self._seen[run] = {str(row.get(contract.SAMPLE_ID)) for row in self._logs.query(query)}
        return self._seen[run]

    def send(self, message: LogsData) -> None:
        """Send the line's records that are not there yet."""
        for resource_logs in message.resource_logs:
            run = _run_of(resource_logs.resource.attributes)
            self.result.runs.add(run)
            seen = self._stored(run)
            for scope_logs in resource_logs.scope_logs:
                kept = []
                for record in scope_logs.log_records:
                    key = _sample_id(record) or record.SerializeToString().hex()
                    if key in seen:
                        self.result.already += 1
                        continue
                    seen.add(key)
                    kept.append(record)
                del scope_logs.log_records[:]
                scope_logs.log_records.extend(kept)
                self.result.sent += len(kept)
        request = ExportLogsServiceRequest(resource_logs=message.resource_logs)
        _post(self._session, self._url, request.SerializeToString())


class SpanReplay:
    """Sends ``TracesData`` lines to the collector's OTLP/HTTP ``/v1/traces``, each span once."""

    def __init__(self, otlp_http: str, traces: Jaeger, *, session: requests.Session | None = None) -> None:
        self._url = f"{otlp_http.rstrip('/')}/v1/traces"
        self._traces = traces
        self._session = session or requests.Session()
        self._seen: dict[str, set[str]] = {}
        self.result = Sent()

    def _stored(self, trace_id: str) -> set[str]:
        if trace_id not in self._seen:
            self._seen[trace_id] = {span.span_id for span in self._traces.trace(trace_id)}
        return self._seen[trace_id]

    def send(self, message: TracesData) -> None:
        """Send the line's spans that are not there yet."""
        for resource_spans in message.resource_spans:
            self.result.runs.add(_run_of(resource_spans.resource.attributes))
            for scope_spans in resource_spans.scope_spans:
                kept = []
                for span in scope_spans.spans:
                    seen = self._stored(span.trace_id.hex())
                    if span.span_id.hex() in seen:
                        self.result.already += 1
                        continue
                    seen.add(span.span_id.hex())
                    kept.append(span)
                del scope_spans.spans[:]
                scope_spans.spans.extend(kept)
                self.result.sent += len(kept)
        request = ExportTraceServiceRequest(resource_spans=message.resource_spans)
        _post(self._session, self._url, request.SerializeToString())


def _post(session: requests.Session, url: str, body: bytes) -> None:
    try:
        response = session.post(url, data=body, headers={"Content-Type": "application/x-protobuf"}, timeout=_TIMEOUT_S)
    except requests.RequestException as error:
        raise ValueError(f"the collector at {url} did not take the replayed data: {error}") from error
    if response.status_code != 200:
        raise ValueError(
            f"the collector at {url} refused the replayed data: HTTP {response.status_code} {response.text[:300]!r}"
        )
