"""otel_rl_ops.query against a local HTTP server that answers like Prometheus and VictoriaLogs, failures included."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from otel_rl_ops.query import Prometheus, QueryError, VictoriaLogs

_ANSWERS: dict[str, tuple[int, str]] = {}
"""Query text -> (HTTP status, body) that the server answers for it."""
_RECEIVED: list[tuple[str, dict[str, str]]] = []
"""(path, form fields) of each request, in order."""


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        form = dict(urllib.parse.parse_qsl(body))
        _RECEIVED.append((self.path, form))
        status, text = _ANSWERS[form.get("query", form.get("match[]", ""))]
        self.send_response(status)
        self.end_headers()
        self.wfile.write(text.encode())

    def log_message(self, format: str, *args: object) -> None:
        """Keep the test output clean."""


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join()


def _success(result: object) -> str:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


def test_prometheus_posts_the_query_and_reads_values(url: str) -> None:
    """Instant queries go as POST form data with the time; value() is the first series' value or None."""
    _ANSWERS["up"] = (200, _success([{"metric": {"le": "1"}, "value": [5.0, "3"]}]))
    _ANSWERS["absent"] = (200, _success([]))
    prometheus = Prometheus(url)
    assert prometheus.value("up", 12.5) == 3.0
    assert _RECEIVED[-1] == ("/api/v1/query", {"query": "up", "time": "12.500"})
    assert prometheus.value("absent") is None
    assert prometheus.by_label("up", "le") == {"1": 3.0}


def test_victorialogs_returns_one_dict_per_record(url: str) -> None:
    """LogsQL queries send the optional time range; each JSON line is one record."""
    _ANSWERS["*"] = (200, '{"_msg": "a"}\n\n{"_msg": "b"}\n')
    assert VictoriaLogs(url).query("*", start=1, end=2) == [{"_msg": "a"}, {"_msg": "b"}]
    assert _RECEIVED[-1] == ("/select/logsql/query", {"query": "*", "start": "1.000", "end": "2.000"})


def test_victorialogs_lines_end_at_newlines_only(url: str) -> None:
    """VictoriaLogs writes U+2028, U+2029 and U+0085 of a text unescaped: they stay inside their record (splitting
    at every line boundary Python knows would cut the JSON line)."""
    text = "a\u2028b\u2029c\x85d\x1ce"
    _ANSWERS["separators"] = (200, json.dumps({"_msg": text}, ensure_ascii=False) + "\n" + '{"_msg": "x"}\n')
    assert list(VictoriaLogs(url).stream("separators")) == [{"_msg": text}, {"_msg": "x"}]


def test_victorialogs_field_names_and_the_placeholder_message(url: str) -> None:
    """field_names() maps each field to its records; message() is None where VictoriaLogs filled in its own."""
    _ANSWERS["fields"] = (200, json.dumps({"values": [{"value": "_msg", "hits": 3}, {"value": "rl.step", "hits": 2}]}))
    assert VictoriaLogs(url).field_names("fields") == {"_msg": 3, "rl.step": 2}
    assert _RECEIVED[-1] == ("/select/logsql/field_names", {"query": "fields"})
    assert VictoriaLogs.message({"_msg": VictoriaLogs.NO_MESSAGE}) is None
    assert VictoriaLogs.message({"_msg": "42"}) == "42" and VictoriaLogs.message({}) is None


def test_failures_are_query_errors_naming_the_query(url: str) -> None:
    """An HTTP error, an error answer, a body that is not JSON and a refused connection all raise QueryError."""
    _ANSWERS["bad("] = (400, '{"status": "error", "error": "parse error"}')
    _ANSWERS["odd"] = (200, '{"status": "error"}')
    _ANSWERS["text"] = (200, "not json")
    _ANSWERS["bad|"] = (400, "cannot parse")
    _ANSWERS["cut"] = (200, '{"_msg": "a"}\n{"_msg": ')
    with pytest.raises(QueryError, match=r"Prometheus query 'bad\(' failed: HTTP 400 .*parse error"):
        Prometheus(url).query("bad(")
    with pytest.raises(QueryError, match=r"Prometheus query 'odd' failed: .*error"):
        Prometheus(url).query("odd")
    with pytest.raises(QueryError, match=r"Prometheus query 'text' failed: answer is not JSON: 'not json'"):
        Prometheus(url).query("text")
    with pytest.raises(QueryError, match=r"VictoriaLogs query 'bad\|' failed: HTTP 400 'cannot parse'"):
        VictoriaLogs(url).query("bad|")
    with pytest.raises(QueryError, match=r"VictoriaLogs query 'cut' failed: an answer line is not JSON"):
        VictoriaLogs(url).query("cut")
    with pytest.raises(QueryError, match=r"VictoriaLogs field names of 'text' failed: not an answer: 'not json'"):
        VictoriaLogs(url).field_names("text")
    with pytest.raises(QueryError, match=r"Prometheus query 'up' failed: .*Connection refused"):
        Prometheus("http://127.0.0.1:1", timeout_s=2).query("up")
