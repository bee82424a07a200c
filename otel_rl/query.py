"""Read back what reached Prometheus (PromQL) and VictoriaLogs (LogsQL) over their HTTP query APIs.

The one client of the report, the demo, the benchmarks and the tests, so that they all query the same way: queries
go as POST form data (dashboard queries can be longer than a URL may be), and every failure, from a refused
connection to an error answer, is one :class:`QueryError` that names the query.
"""

from __future__ import annotations

import json
from typing import Any

import requests

DEFAULT_TIMEOUT_S = 30.0
"""How long one query may take, in seconds, unless the client is given ``timeout_s``."""

_BODY_CHARS = 300
"""How much of an error answer's body a :class:`QueryError` message shows."""


def clamp_to_extremes(estimate: str, low: str, high: str, *, on: str = "") -> str:
    """``estimate`` clamped elementwise to ``[low, high]``, matching series on the labels ``on``.

    Three branches joined by ``or``: the estimate where ``low <= estimate <= high``, ``high`` where the estimate is
    above it, ``low`` where it is below. A histogram quantile interpolates inside a bucket, so it can lie outside
    the values actually recorded (a bucket of scale 5 spans 2.2 %, a classic one may span 8 versions); the exact
    merged extremes bound it. A NaN estimate (nothing recorded in the window) matches no branch and drops out
    rather than becoming a bound; so does an estimate without bounds (the ranks export the extremes gauges
    whenever they recorded values, so a window with an estimate has them).

    >>> clamp_to_extremes("q", "lo", "hi", on="job")
    '((q <= on (job) hi) >= on (job) lo) or on (job) (hi < on (job) q) or on (job) (lo > on (job) q)'
    """
    match = f"on ({on})"
    return (
        f"(({estimate} <= {match} {high}) >= {match} {low})"
        f" or {match} ({high} < {match} {estimate})"
        f" or {match} ({low} > {match} {estimate})"
    )


class QueryError(RuntimeError):
    """A query failed: no connection, a timeout, an HTTP status other than 200, or an answer that is not a result."""


def _post(service: str, url: str, params: dict[str, str], *, query: str, timeout_s: float) -> requests.Response:
    """POST ``params`` as form data to ``url``; the 200 response, or :class:`QueryError` naming ``query``."""
    try:
        response = requests.post(url, data=params, timeout=timeout_s)
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

    def __init__(self, url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.url = url
        self.timeout_s = timeout_s

    def _data(self, path: str, params: dict[str, str], *, query: str) -> Any:
        """The ``data`` of a successful answer of ``path``; :class:`QueryError` for any other."""
        response = _post("Prometheus", f"{self.url}{path}", params, query=query, timeout_s=self.timeout_s)
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

    def buckets(self, metric: str, selector: str) -> dict[str, float]:
        """The merged ``<metric>_bucket`` series of ``selector`` (e.g. ``{rl_run_id="x"}``): ``le`` -> cumulative
        count."""
        return self.by_label(f"sum by (le) ({metric}_bucket{selector})", "le")

    def series(self, match: str) -> list[dict[str, str]]:
        """The label sets (``__name__`` included) of the series that the selector ``match`` selects."""
        return list(self._data("/api/v1/series", {"match[]": match}, query=match))

    def exemplars(self, promql: str, start: float, end: float) -> list[dict[str, Any]]:
        """The exemplars of the series of ``promql`` between ``start`` and ``end``: one dict per series, with its
        ``seriesLabels`` and its ``exemplars`` (``labels``, ``value``, ``timestamp``)."""
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}"}
        return list(self._data("/api/v1/query_exemplars", params, query=promql))


class VictoriaLogs:
    """VictoriaLogs's LogsQL API (``/select/logsql/query``) at ``url``, e.g. ``http://127.0.0.1:9428``."""

    def __init__(self, url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.url = url
        self.timeout_s = timeout_s

    def query(self, logsql: str, *, start: float | None = None, end: float | None = None) -> list[dict[str, Any]]:
        """The records ``logsql`` selects, optionally only those between ``start`` and ``end`` (unix seconds);
        one dict per record, field name -> text (VictoriaLogs leaves out empty fields)."""
        params = {"query": logsql}
        if start is not None:
            params["start"] = f"{start:.3f}"
        if end is not None:
            params["end"] = f"{end:.3f}"
        response = _post(
            "VictoriaLogs", f"{self.url}/select/logsql/query", params, query=logsql, timeout_s=self.timeout_s
        )
        return [json.loads(line) for line in response.text.splitlines() if line.strip()]
