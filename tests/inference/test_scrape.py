"""The inference overlay (collector_config/inference.yaml) against the real collector and Prometheus (issue 22).

vLLM needs a GPU, which CI does not have, and so does SGLang: the servers here are RECORDINGS, not the engines. Each
serves, over HTTP on 127.0.0.1, a real /metrics exposition recorded from a running engine (tests/fixtures/inference/,
each file's header says where it came from: vLLM serving Qwen/Qwen3-0.6B from a public GitHub script's recorded curl
output; SGLang's own documentation's example). The collector's prometheus receiver scrapes them with the run's
identity from its file_sd targets file, and what Prometheus then holds is compared with the recordings, value by
value; the dashboard's inference panels return the recordings' numbers. docs/pipeline.md ("Inference engines")
describes the live setup.
"""

from __future__ import annotations

import http.server
import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from otel_rl_contract import foreign
from otel_rl_ops import promql
from otel_rl_ops.query import Prometheus
from otel_rl_ops.report.dashboard import default_dashboard_path, load_panels, substitute
from prometheus_client.parser import text_string_to_metric_families

from tests.pipeline.harness import ROOT, eventually, private_stack

RECORDINGS = ROOT / "tests" / "fixtures" / "inference"
ENGINES = {"vllm": "vllm-qwen3-0.6b.metrics", "sglang": "sglang-llama-3.1-8b.metrics"}


class _Server(http.server.ThreadingHTTPServer):
    """Serves one recorded exposition, its ``body``."""

    body = b""


class _Recording(http.server.BaseHTTPRequestHandler):
    """Answers GET /metrics with one recorded exposition (the server's ``body``)."""

    def do_GET(self) -> None:
        assert isinstance(self.server, _Server)
        body = self.server.body
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body if self.path == "/metrics" else b"")

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    """One HTTP server per recording on a free port of 127.0.0.1: engine -> host:port."""
    running = {}
    for engine, name in ENGINES.items():
        server = _Server(("127.0.0.1", 0), _Recording)
        server.body = (RECORDINGS / name).read_bytes()
        threading.Thread(target=server.serve_forever, daemon=True).start()
        running[engine] = server
    yield {engine: f"127.0.0.1:{server.server_address[1]}" for engine, server in running.items()}
    for server in running.values():
        server.shutdown()


@pytest.fixture(scope="module")
def run_id() -> str:
    return f"inference-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def stack(
    stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory, servers: dict[str, str], run_id: str
) -> Iterator[Any]:
    """A stack whose collector adds the inference overlay; its targets file names both servers with the run."""
    folder = tmp_path_factory.mktemp("inference")
    targets = folder / "targets.json"
    targets.write_text(
        json.dumps([{"targets": list(servers.values()), "labels": {"rl_run_id": run_id, "rl_role": "inference"}}])
    )
    configs = (ROOT / "collector_config" / "collector.yaml", ROOT / "collector_config" / "inference.yaml")
    environment = {"OTEL_RL_INFERENCE_TARGETS": str(targets), "OTEL_RL_INFERENCE_SCRAPE_INTERVAL": "1s"}
    with private_stack(
        stack_binaries, folder / "stack", collector_configs=configs, collector_environment=environment
    ) as running:
        yield running


def _recorded(engine: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a recording: (name, sorted labels) -> value, as the Prometheus text format defines them."""
    text = (RECORDINGS / ENGINES[engine]).read_text(encoding="utf-8")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): float(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _held(prometheus: Prometheus, run_id: str, instance: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """What Prometheus holds of one scraped server's own families, its identity labels left out (the receiver's
    scrape series ``up`` and ``scrape_*`` too)."""
    identity = {"job", "instance", "rl_run_id", "rl_role", "otel_scope_name", "otel_scope_version"}
    held = {}
    for item in prometheus.query(promql.selector(rl_run_id=run_id, instance=instance)):
        if item["metric"]["__name__"] == foreign.UP.name or item["metric"]["__name__"].startswith("scrape_"):
            continue
        labels = {k: v for k, v in item["metric"].items() if k != "__name__" and k not in identity}
        if "le" in labels:
            labels["le"] = _le(labels["le"])
        held[(item["metric"]["__name__"], tuple(sorted(labels.items())))] = float(item["value"][1])
    return held


def _le(bound: str) -> str:
    """A bucket bound as the recordings write it (``5.0``, ``+Inf``)."""
    return bound if bound == "+Inf" else repr(float(bound))


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_recorded_sample_arrives_with_the_runs_identity(
    stack: Any, servers: dict[str, str], run_id: str, engine: str
) -> None:
    """Every sample of the engine's recorded exposition is in Prometheus with its own value and labels, under the
    engine's own names (vllm:..., sglang:...), carrying the run id, the role and the server's instance; nothing
    else of the server (the Python process metrics the filter leaves out) arrives, besides the receiver's ``up``
    (1: scraped) and ``scrape_*`` series."""
    prometheus = Prometheus(stack.prometheus_url)
    recorded = {
        (name, labels): value for (name, labels), value in _recorded(engine).items() if not name.endswith("_created")
    }
    held = eventually(
        lambda: (h := _held(prometheus, run_id, servers[engine])) and len(h) >= len(recorded) and h,
        what=f"the {engine} recording in Prometheus",
    )
    assert held == recorded
    (up,) = prometheus.query(promql.selector(foreign.UP, rl_run_id=run_id, instance=servers[engine]))
    assert {k: up["metric"][k] for k in ("job", "rl_role")} == {"job": "inference", "rl_role": "inference"}
    assert up["value"][1] == "1"


def test_the_dashboards_inference_panels_read_the_recordings(stack: Any, servers: dict[str, str], run_id: str) -> None:
    """The dashboard's inference panels (their queries as Grafana runs them) give the recordings' numbers per server:
    waiting and running requests, KV-cache use; the latency quantiles are within the recorded buckets."""
    prometheus = Prometheus(stack.prometheus_url)
    panels = {p.title: p for p in load_panels(default_dashboard_path()) if p.title.startswith("Inference:")}
    assert len(panels) == 5

    def value(title: str, ref: str) -> dict[str, float]:
        (target,) = [t for t in panels[title].targets if t.ref_id == ref]
        query = substitute(target.expr, run_id=run_id, rate_interval="20s", interval="5s")
        return {item["metric"]["instance"]: float(item["value"][1]) for item in prometheus.query(query)}

    vllm, sglang = servers["vllm"], servers["sglang"]
    eventually(lambda: len(value("Inference: waiting and running requests", "A")) == 2, what="both servers")
    assert value("Inference: waiting and running requests", "A") == {vllm: 0.0, sglang: 2826.0}
    assert value("Inference: waiting and running requests", "B") == {vllm: 0.0, sglang: 162.0}
    assert value("Inference: KV-cache use", "A") == {vllm: 0.0, sglang: 0.28}
    # A recording does not change: its counters have no rate, so the interval's tokens per second are 0 (and its
    # latency quantiles NaN). Over its whole life the TTFT median is that of the recorded buckets: vLLM's 34.5th of
    # 69 requests lies between its 31st (le 7.5) and 36th (le 10): 7.5 + 2.5 x 3.5/5 = 9.25 s; SGLang's 5504th of
    # 11008 lies above its last finite bound, 30 s, which Prometheus then answers.
    eventually(
        lambda: value("Inference: generated tokens per second", "A") == {vllm: 0.0, sglang: 0.0},
        what="a rate over two scrapes",
    )
    histograms = (foreign.VLLM_TIME_TO_FIRST_TOKEN, foreign.SGLANG_TIME_TO_FIRST_TOKEN)
    ttft = " or ".join(
        f"histogram_quantile(0.5, sum by (instance, le) ({h.bucket}{{{promql.matchers(rl_run_id=run_id)}}}))"
        for h in histograms
    )
    assert {item["metric"]["instance"]: float(item["value"][1]) for item in prometheus.query(ttft)} == pytest.approx(
        {vllm: 9.25, sglang: 30.0}
    )
