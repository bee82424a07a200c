"""Bounds at the collector (collector_config/collector.yaml: filter/contract, filter/rank_streams,
filter/run_streams, delta_to_cumulative max_streams): a hostile sender pushing 10^5 distinct attribute values while
an honest 4-rank run sends, against the real collector, Prometheus and the stack's alert rules.

The hostile senders speak OTLP/HTTP with hand-built protobuf, as any non-otel-rl sender could:
- ``growing``: one process whose label takes a new value per sample, exporting cumulatively (every stream it ever
  had, as an SDK does): 1,000, 2,000, then 10,000 ... 100,000 streams of one metric;
- ``spread``: 50 fake ranks of one run, 2,000 values each (each rank under the cap, the run 100,000 over it);
- ``names``: 1,000 invented metric names.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import otel_rl_contract as contract
import pytest
import requests
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import AGGREGATION_TEMPORALITY_CUMULATIVE, Metric, ResourceMetrics
from otel_rl_contract import foreign
from otel_rl_ops.query import Prometheus

from tests.pipeline.harness import eventually, private_stack, rss_kib, start_ranks

REWARD = contract.series(contract.REWARDS.histogram)
REWARD_POSITIVE, REWARD_NEGATIVE, REWARD_SQUARES = map(contract.series, contract.REWARDS.sums)

CAP = 2048
"""OTEL_RL_MAX_STREAMS_PER_METRIC's default."""
MEMORY_LIMIT_MIB = 1024
"""OTEL_RL_COLLECTOR_MEMORY_LIMIT_MIB's default."""
RANKS = 4
STEPS = 6


def _attribute(key: str, value: str | int) -> KeyValue:
    any_value = AnyValue(string_value=value) if isinstance(value, str) else AnyValue(int_value=value)
    return KeyValue(key=key, value=any_value)


def _resource(run_id: str, instance: str, rank: int) -> ResourceMetrics:
    resource = ResourceMetrics()
    resource.resource.attributes.extend(
        [
            _attribute("service.name", "hostile"),
            _attribute("service.instance.id", instance),
            _attribute("rl.run.id", run_id),
            _attribute("rl.rank", rank),
            _attribute("rl.world_size", 1),
            _attribute("rl.role", "trainer"),
        ]
    )
    return resource


def _sum(resource: ResourceMetrics, name: str, values: range, start_ns: int, export: int) -> None:
    """A cumulative monotonic sum ``name`` with one stream per value of ``rl.reward.fn`` in ``values``."""
    scope = resource.scope_metrics.add()
    scope.scope.name = "hostile"
    metric: Metric = scope.metrics.add()
    metric.name = name
    metric.sum.aggregation_temporality = AGGREGATION_TEMPORALITY_CUMULATIVE
    metric.sum.is_monotonic = True
    now = time.time_ns()
    for value in values:
        point = metric.sum.data_points.add()
        point.attributes.append(_attribute("rl.reward.fn", f"v{value}"))
        point.start_time_unix_nano, point.time_unix_nano, point.as_double = start_ns, now, float(export + 1)


def _post(url: str, request: ExportMetricsServiceRequest) -> int:
    body = request.SerializeToString()
    response = requests.post(
        f"{url}/v1/metrics", data=body, headers={"Content-Type": "application/x-protobuf"}, timeout=60
    )
    return response.status_code


class RssSampler(threading.Thread):
    """Samples a process's RSS every 0.2 s until stopped; ``peak_kib`` is the largest."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak_kib, self.samples = pid, 0, 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(0.2):
            self.peak_kib = max(self.peak_kib, rss_kib(self.pid))
            self.samples += 1

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)


@pytest.fixture(scope="module")
def bounded_stack(stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with private_stack(stack_binaries, tmp_path_factory.mktemp("bounds-stack")) as running:
        yield running


def test_hostile_cardinality_is_capped_while_an_honest_run_stays_exact(bounded_stack: Any) -> None:
    """While 4 honest ranks send, hostile senders push 10^5 distinct values of one label (growing, and spread over
    50 fake ranks of one run) and 1,000 invented metric names: the honest run's counts are exact, the growing
    sender keeps only the 2,000 streams it had under the cap, the spread run and the invented names get no series,
    the drops are counted in the collector's own metrics and OtelRLCollectorCapHit fires, and the collector's RSS
    stays below the memory_limiter limit (which refuses nothing)."""
    stack = bounded_stack
    prometheus = Prometheus(stack.prometheus_url)
    honest_run = f"honest-{uuid.uuid4().hex[:8]}"
    ranks = start_ranks(
        RANKS, endpoint=stack.otlp_grpc_endpoint, run_id=honest_run, histogram="exponential", export_interval_s=0.3
    )
    sampler = RssSampler(stack.pid("collector"))
    sampler.start()
    started = time.monotonic()
    growing, spread, names = (f"{kind}-{uuid.uuid4().hex[:8]}" for kind in ("growing", "spread", "names"))
    start_ns = time.time_ns() - 10**9
    plan = [1_000, 2_000, 10_000, 25_000, 50_000, 100_000]
    try:
        for step in range(STEPS):
            for rank in ranks:
                rank.rewards([0.5 * rank.rank, 1.0, -0.25])
                rank.step(step + 1)
            request = ExportMetricsServiceRequest()
            if step < len(plan):
                resource = _resource(growing, "growing-0", 0)
                _sum(resource, "rl.reward.positive", range(plan[step]), start_ns, step)
                request.resource_metrics.append(resource)
            for fake in range(50):
                resource = _resource(spread, f"spread-{fake}", fake)
                _sum(resource, "rl.reward.negative", range(fake * 2_000, (fake + 1) * 2_000), start_ns, step)
                request.resource_metrics.append(resource)
            resource = _resource(names, "names-0", 0)
            for name in range(1_000):
                _sum(resource, f"rl.invented.{name}", range(1), start_ns, step)
            request.resource_metrics.append(resource)
            assert _post(stack.otlp_http_endpoint, request) == 200
            time.sleep(1.2)  # one collector tick (OTEL_RL_AGGREGATION_INTERVAL=1s) per step
        for rank in ranks:
            rank.flush()
        want = RANKS * STEPS * 3
        eventually(
            lambda: (
                prometheus.value(f'histogram_count({REWARD.name}{{rl_run_id="{honest_run}",rl_reward_fn="total"}})')
                == want
            ),
            what=f"the honest run's {want} rewards",
            timeout_s=60,
        )
        positive = sum(0.5 * r + 1.0 for r in range(RANKS)) * STEPS
        assert prometheus.value(f'{REWARD_POSITIVE.name}{{rl_run_id="{honest_run}",rl_reward_fn="total"}}') == positive
        flood_s = time.monotonic() - started
    finally:
        sampler.stop()
        for rank in ranks:
            rank.kill()

    def series(run: str) -> int:
        return len(prometheus.series(f'{{rl_run_id="{run}"}}'))

    assert series(growing) == 2_000
    assert series(spread) == 0
    assert series(names) == 0
    filtered = _filtered(stack)
    dropped = {name: filtered.get(name, 0) for name in ("filter/contract", "filter/rank_streams", "filter/run_streams")}
    # Per collector tick (two exports may share one): 1,000 names; the growing sender's latest export once it is
    # above the cap (its last has 100,000 streams); the spread run's 100,000.
    assert dropped["filter/contract"] >= 1_000 and dropped["filter/contract"] % 1_000 == 0, dropped
    assert dropped["filter/rank_streams"] >= 100_000 and dropped["filter/run_streams"] >= 100_000, dropped
    text = requests.get(f"http://{stack.config.host}:{stack.config.ports.collector_metrics}/metrics", timeout=10).text
    refused_points = foreign.text_name(foreign.COLLECTOR_REFUSED_METRIC_POINTS)
    refused = [line for line in text.splitlines() if line.startswith(refused_points)]
    assert refused and all(line.endswith(" 0") for line in refused), refused  # memory_limiter refused nothing
    eventually(
        lambda: prometheus.query(f'{foreign.ALERTS.name}{{alertname="OtelRLCollectorCapHit",alertstate="firing"}}'),
        what="OtelRLCollectorCapHit firing",
        timeout_s=90,
    )
    peak_mib = sampler.peak_kib / 1024
    print(
        f"flood {flood_s:.1f} s, collector RSS peak {peak_mib:.0f} MiB ({sampler.samples} samples), dropped {dropped}"
    )
    assert 0 < peak_mib < MEMORY_LIMIT_MIB


def _filtered(stack: Any) -> dict[str, float]:
    """``otelcol_processor_filter_datapoints_filtered`` by filter processor, from the collector's own metrics."""
    text = requests.get(f"http://{stack.config.host}:{stack.config.ports.collector_metrics}/metrics", timeout=10).text
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(f"{foreign.text_name(foreign.COLLECTOR_FILTERED_POINTS)}{{"):
            labels, value = line.rsplit(" ", 1)
            name = labels.split('filter="', 1)[1].split('"', 1)[0]
            counts[name] = counts.get(name, 0.0) + float(value)
    return counts
