"""Read back what reached Prometheus (PromQL), VictoriaLogs (LogsQL) and Jaeger (traces) over their HTTP query APIs.

The one client of the report, the demo, the benchmarks and the tests, so that they all query the same way: queries
go as POST form data (dashboard queries can be longer than a URL may be), and every failure, from a refused
connection to an error answer, is one :class:`QueryError` that names the query. The queries themselves are built
by :mod:`otel_rl_ops.promql`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import requests
from otel_rl_contract import Series

DEFAULT_TIMEOUT_S = 30.0
"""How long one query may take, in seconds, unless the client is given ``timeout_s``."""

_BODY_CHARS = 300
"""How much of an error answer's body a :class:`QueryError` message shows."""


class QueryError(RuntimeError):
    """A query failed: no connection, a timeout, an HTTP status other than 200, or an answer that is not a result."""


def _post(
    service: str,
    url: str,
    params: dict[str, str],
    *,
    query: str,
    timeout_s: float,
    session: requests.Session | None,
    stream: bool = False,
) -> requests.Response:
    """POST ``params`` as form data to ``url``; the 200 response (its body still to be read when ``stream``), or
    :class:`QueryError` naming ``query``."""
    try:
        response = (session or requests).post(url, data=params, timeout=timeout_s, stream=stream)
    except requests.RequestException as error:
        raise QueryError(f"{service} query {query!r} failed: {error}") from error
    if response.status_code != 200:
        raise QueryError(
            f"{service} query {query!r} failed: HTTP {response.status_code} {response.text[:_BODY_CHARS]!r}"
        )
    return response


class Prometheus:
    """Prometheus's HTTP API (``/api/v1/...``) at ``url``, e.g. ``http://127.0.0.1:9090``.

    Times are unix seconds; results are Prometheus's own JSON: dicts with ``metric`` (the labels) and ``value``
    (instant queries) or ``values`` (range queries and range-vector selectors), points as ``[time, "value"]``.
    """

    def __init__(
        self, url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, session: requests.Session | None = None
    ) -> None:
        """``session`` carries what the server asks for, e.g. basic auth and a private CA (``session.auth``,
        ``session.verify``) for the secure profile."""
        self.url = url
        self.timeout_s = timeout_s
        self.session = session

    def _data(self, path: str, params: dict[str, str], *, query: str) -> Any:
        """The ``data`` of a successful answer of ``path``; :class:`QueryError` for any other."""
        response = _post(
            "Prometheus", f"{self.url}{path}", params, query=query, timeout_s=self.timeout_s, session=self.session
        )
        try:
            body = response.json()
        except ValueError as error:
            raise QueryError(
                f"Prometheus query {query!r} failed: answer is not JSON: {response.text[:_BODY_CHARS]!r}"
            ) from error
        if body.get("status") != "success":
            raise QueryError(f"Prometheus query {query!r} failed: {response.text[:_BODY_CHARS]!r}")
        return body["data"]

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """Evaluate ``promql`` at ``at`` (None: now); one dict per result series."""
        params = {"query": promql} if at is None else {"query": promql, "time": f"{at:.3f}"}
        return list(self._data("/api/v1/query", params, query=promql)["result"])

    def value(self, promql: str, at: float | None = None) -> float | None:
        """The value of the first series ``promql`` returns at ``at`` (None: now), or None when it returns none."""
        result = self.query(promql, at)
        return None if not result else float(result[0]["value"][1])

    def range(self, promql: str, start: float, end: float, *, step: float) -> list[dict[str, Any]]:
        """Evaluate ``promql`` every ``step`` seconds from ``start`` to ``end``; one dict per result series."""
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:.3f}"}
        return list(self._data("/api/v1/query_range", params, query=promql)["result"])

    def by_label(self, promql: str, label: str) -> dict[str, float]:
        """The current value of each series ``promql`` returns, keyed by its ``label``."""
        return {item["metric"][label]: float(item["value"][1]) for item in self.query(promql)}

    def buckets(self, histogram: Series, selector: str) -> dict[str, float]:
        """The merged classic buckets of ``histogram`` of ``selector`` (e.g. ``{rl_run_id="x"}``): ``le`` ->
        cumulative count."""
        return self.by_label(f"sum by (le) ({histogram.bucket}{selector})", "le")

    def series(self, match: str) -> list[dict[str, str]]:
        """The label sets (``__name__`` included) of the series that the selector ``match`` selects."""
        return list(self._data("/api/v1/series", {"match[]": match}, query=match))

    def alerts(self) -> list[dict[str, Any]]:
        """The rule evaluator's active alerts, pending and firing (``GET /api/v1/alerts``; Thanos Query serves it
        too): ``labels``, ``annotations`` rendered at its last evaluation, ``state``, ``activeAt``, ``value``."""
        return list(self._get("/api/v1/alerts")["alerts"])

    def alert_rules(self) -> list[dict[str, Any]]:
        """Every alerting rule the evaluator runs (``GET /api/v1/rules?type=alert``): ``name``, ``query``,
        ``labels``, ``annotations`` (templates), ``duration``."""
        groups = self._get("/api/v1/rules", {"type": "alert"})["groups"]
        return [rule for group in groups for rule in group["rules"]]

    def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        """The ``data`` of a successful GET of ``path`` (the API's read-only endpoints take no POST)."""
        what = f"Prometheus GET {path}"
        try:
            response = (self.session or requests).get(f"{self.url}{path}", params=params, timeout=self.timeout_s)
        except requests.RequestException as error:
            raise QueryError(f"{what} failed: {error}") from error
        try:
            body = response.json()
        except ValueError as error:
            raise QueryError(f"{what} failed: HTTP {response.status_code} {response.text[:_BODY_CHARS]!r}") from error
        if response.status_code != 200 or body.get("status") != "success":
            raise QueryError(f"{what} failed: HTTP {response.status_code} {response.text[:_BODY_CHARS]!r}")
        return body["data"]

    def exemplars(self, promql: str, start: float, end: float) -> list[dict[str, Any]]:
        """The exemplars of the series of ``promql`` between ``start`` and ``end``: one dict per series, with its
        ``seriesLabels`` and its ``exemplars`` (``labels``, ``value``, ``timestamp``)."""
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}"}
        return list(self._data("/api/v1/query_exemplars", params, query=promql))


class VictoriaLogs:
    """VictoriaLogs's LogsQL API (``/select/logsql/...``) at ``url``, e.g. ``http://127.0.0.1:9428``."""

    NO_MESSAGE = "missing _msg field; see https://docs.victoriametrics.com/victorialogs/keyconcepts/#message-field"
    """The ``_msg`` VictoriaLogs gives a record that has none (its ``-defaultMsgValue``): a sample without a response
    (or with an empty one), since the collector makes the response the message (``VL-Msg-Field``)."""

    def __init__(
        self, url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, session: requests.Session | None = None
    ) -> None:
        """``session`` as for :class:`Prometheus`."""
        self.url = url
        self.timeout_s = timeout_s
        self.session = session

    def stream(self, logsql: str, *, start: float | None = None, end: float | None = None) -> Iterator[dict[str, Any]]:
        """The records ``logsql`` selects, optionally only those between ``start`` and ``end`` (unix seconds), one
        dict (field name -> text; VictoriaLogs leaves out empty fields) at a time as VictoriaLogs sends them: its
        answer is a stream of JSON lines, read line by line, so a query of millions of records holds one at a time.
        Lines end at ``\\n`` only: a text's U+2028 or U+0085 arrives unescaped inside its line."""
        params = {"query": logsql}
        if start is not None:
            params["start"] = f"{start:.3f}"
        if end is not None:
            params["end"] = f"{end:.3f}"
        response = _post(
            "VictoriaLogs",
            f"{self.url}/select/logsql/query",
            params,
            query=logsql,
            timeout_s=self.timeout_s,
            session=self.session,
            stream=True,
        )
        with response:
            try:
                for line in response.iter_lines(delimiter=b"\n"):
                    if line.strip():
                        yield json.loads(line)
            except requests.RequestException as error:
                raise QueryError(f"VictoriaLogs query {logsql!r} failed while reading its answer: {error}") from error
            except ValueError as error:
                raise QueryError(
                    f"VictoriaLogs query {logsql!r} failed: an answer line is not JSON: {error}"
                ) from error

    def query(self, logsql: str, *, start: float | None = None, end: float | None = None) -> list[dict[str, Any]]:
        """Every record of :meth:`stream`, as a list."""
        return list(self.stream(logsql, start=start, end=end))

    def field_names(self, logsql: str) -> dict[str, int]:
        """The names of the fields of the records ``logsql`` selects, each with the number of records that have it
        (``/select/logsql/field_names``)."""
        response = _post(
            "VictoriaLogs",
            f"{self.url}/select/logsql/field_names",
            {"query": logsql},
            query=logsql,
            timeout_s=self.timeout_s,
            session=self.session,
        )
        try:
            return {item["value"]: int(item["hits"]) for item in response.json()["values"]}
        except (ValueError, KeyError, TypeError) as error:
            raise QueryError(
                f"VictoriaLogs field names of {logsql!r} failed: not an answer: {response.text[:_BODY_CHARS]!r}"
            ) from error

    @classmethod
    def message(cls, record: dict[str, Any]) -> str | None:
        """The record's message (``_msg``: a sample's response), None where VictoriaLogs filled in
        :data:`NO_MESSAGE`."""
        text = record.get("_msg")
        return None if text is None or text == cls.NO_MESSAGE else str(text)


@dataclass(frozen=True)
class Span:
    """One span as Jaeger's query API returns it: times in nanoseconds, attributes of the span and of its resource."""

    trace_id: str
    """32 hex digits."""
    span_id: str
    """16 hex digits."""
    parent_id: str
    """16 hex digits, or ``""`` for a root span."""
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    links: tuple[str, ...]
    """The span ids this span links to (``links`` of :meth:`Telemetry.phase <otel_rl.Telemetry.phase>`)."""

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


def _otlp_value(value: dict[str, Any]) -> Any:
    """An OTLP/JSON ``AnyValue`` as Python (ints arrive as strings)."""
    if "intValue" in value:
        return int(value["intValue"])
    for key in ("stringValue", "doubleValue", "boolValue"):
        if key in value:
            return value[key]
    return value


def _otlp_attributes(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {item["key"]: _otlp_value(item.get("value") or {}) for item in items or ()}


def _b64_hex(value: str) -> str:
    """Jaeger's OTLP/JSON writes ids as hex (grpc-gateway with Jaeger's marshaller) or base64; hex either way."""
    if len(value) in (16, 32) and all(c in "0123456789abcdefABCDEF" for c in value):
        return value.lower()
    return base64.b64decode(value).hex() if value else ""


class Jaeger:
    """Jaeger's query API at ``url``, e.g. ``http://127.0.0.1:16686``: a trace by id (``/api/v3/traces/<id>``, spans
    with nanosecond times) and a service's recent traces by operation and tags (``/api/traces``)."""

    def __init__(
        self, url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, session: requests.Session | None = None
    ) -> None:
        """``session`` as for :class:`Prometheus`."""
        self.url = url
        self.timeout_s = timeout_s
        self.session = session

    def _get(self, path: str, params: dict[str, str], *, query: str) -> Any:
        try:
            response = (self.session or requests).get(f"{self.url}{path}", params=params, timeout=self.timeout_s)
        except requests.RequestException as error:
            raise QueryError(f"Jaeger query {query!r} failed: {error}") from error
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise QueryError(
                f"Jaeger query {query!r} failed: HTTP {response.status_code} {response.text[:_BODY_CHARS]!r}"
            )
        try:
            return response.json()
        except ValueError as error:
            raise QueryError(
                f"Jaeger query {query!r} failed: answer is not JSON: {response.text[:_BODY_CHARS]!r}"
            ) from error

    def trace(self, trace_id: str) -> list[Span]:
        """Every span of trace ``trace_id`` (32 hex digits) that Jaeger holds, as stored; empty when it holds none."""
        # raw_traces: the spans as stored, without the query service's adjusters (clock skew between hosts, ...).
        body = self._get(f"/api/v3/traces/{trace_id}", {"raw_traces": "true"}, query=f"trace {trace_id}")
        spans = []
        for resource_spans in ((body or {}).get("result") or {}).get("resourceSpans") or ():
            resource = _otlp_attributes((resource_spans.get("resource") or {}).get("attributes"))
            for scope_spans in resource_spans.get("scopeSpans") or ():
                for span in scope_spans.get("spans") or ():
                    spans.append(
                        Span(
                            trace_id=_b64_hex(span["traceId"]),
                            span_id=_b64_hex(span["spanId"]),
                            parent_id=_b64_hex(span.get("parentSpanId") or ""),
                            name=span["name"],
                            start_ns=int(span["startTimeUnixNano"]),
                            end_ns=int(span["endTimeUnixNano"]),
                            attributes=_otlp_attributes(span.get("attributes")),
                            resource=resource,
                            links=tuple(_b64_hex(link["spanId"]) for link in span.get("links") or ()),
                        )
                    )
        return spans

    def traces(
        self, service: str, *, operation: str, tags: dict[str, str], start: float, end: float, limit: int
    ) -> list[dict[str, Any]]:
        """At most ``limit`` traces of ``service`` that hold a span named ``operation`` with ``tags`` (span or resource
        attributes) starting between ``start`` and ``end`` (unix seconds): Jaeger's own JSON (``traceID``, ``spans``
        with ``operationName``, ``startTime`` and ``duration`` in microseconds, ``tags``)."""
        params = {
            "service": service,
            "operation": operation,
            "tags": json.dumps(tags),
            "start": str(int(start * 1e6)),
            "end": str(int(end * 1e6)),
            "limit": str(limit),
        }
        body = self._get("/api/traces", params, query=f"{service} {operation} {tags}")
        return list((body or {}).get("data") or ())
