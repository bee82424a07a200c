"""Samples are delivered at least once: a resent log export must be counted once by the documented LogsQL
(docs/reliability.md, "Counting each sample once"; issue 13, 2).

A rank exports over OTLP/HTTP through a proxy that forwards every log request to the collector twice: the
duplicates are exactly what a rank's resend of a timed-out (but delivered) export produces, the same records
encoded again.
"""

from __future__ import annotations

import threading
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from otel_rl_ops.query import VictoriaLogs
from otel_rl_ops.report.dashboard import default_dashboard_path, load_panels, substitute

from tests.pipeline.harness import RankProcess, eventually

STEPS = 3
OFFERED = 5
KEPT = 4  # top 2 + bottom 2

SAMPLE_KEY = "rl.sample.id"
"""What tells two sample records apart: the id each record gets when it is emitted (docs/reliability.md)."""


class DuplicatingProxy:
    """An OTLP/HTTP endpoint that forwards metrics once and every log request ``copies`` times to ``target``."""

    def __init__(self, target: str, *, copies: int = 2) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "content-encoding")}
                times = copies if self.path.endswith("/v1/logs") else 1
                for _ in range(times):
                    request = urllib.request.Request(target + self.path, data=body, headers=headers, method="POST")
                    with urllib.request.urlopen(request, timeout=10) as response:
                        status, reply = response.status, response.read()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def proxy(shared_stack: Any) -> Iterator[DuplicatingProxy]:
    running = DuplicatingProxy(shared_stack.otlp_http_endpoint)
    yield running
    running.close()


@pytest.mark.parametrize("with_episode_ids", [True, False])
def test_resent_samples_are_counted_once(shared_stack: Any, proxy: DuplicatingProxy, with_episode_ids: bool) -> None:
    """Every log export arrives twice: a plain count sees 2N records, the documented LogsQL counts N, with or
    without episode ids."""
    run_id = f"dedup-{'ids' if with_episode_ids else 'noids'}-{uuid.uuid4().hex[:8]}"
    ranks = [
        RankProcess(
            endpoint=proxy.url,
            run_id=run_id,
            rank=rank,
            world_size=2,
            protocol="http/protobuf",
            export_interval_s=0.2,
            top_k=2,
            bottom_k=2,
        )
        for rank in range(2)
    ]
    try:
        for step in range(STEPS):
            for rank in ranks:
                rank.step(step)
                for index in range(OFFERED):
                    episode = {"episode_id": f"{rank.rank}-{step}-{index}"} if with_episode_ids else {}
                    rank.sample(reward=float(index), response=f"same text {index % 2}", **episode)
        for rank in ranks:
            rank.step(STEPS)
            assert rank.flush()
        expected = STEPS * len(ranks) * KEPT
        logs = VictoriaLogs(shared_stack.victorialogs_url)
        selector = f'{{rl.run.id="{run_id}"}}'
        records = eventually(
            lambda: (found := logs.query(selector)) and len(found) >= 2 * expected and found,
            what=f"{2 * expected} records (each sample twice)",
            timeout_s=30,
        )
        assert len(records) == 2 * expected
        once = logs.query(f"{selector} | uniq by ({SAMPLE_KEY})")
        assert len(once) == expected
        counted = logs.query(f"{selector} | stats count_uniq({SAMPLE_KEY}) as samples")
        assert int(counted[0]["samples"]) == expected
        if with_episode_ids:
            by_id = logs.query(f"{selector} | stats count_uniq(rl.episode.id) as samples")
            assert int(by_id[0]["samples"]) == expected
        # The dashboard's samples table shows each sample once.
        (table,) = [panel for panel in load_panels(default_dashboard_path()) if panel.title.startswith("Samples:")]
        logsql = substitute(table.targets[0].expr, run_id=run_id, rate_interval="1m", interval="1m")
        shown = logs.query(logsql)
        assert len(shown) == expected
        assert len({(row["rl.step"], row["rl.reward"], row["_time"]) for row in shown}) == expected
    finally:
        for rank in ranks:
            rank.kill()
