"""Isolation: a malformed sender never costs another run its data (collector_config/pointcheck, docs/reliability.md
"Isolation"), against the real collector and Prometheus.

Prometheus refuses a whole remote-write request when one native histogram in it is invalid, and the exporter drops
such a request as permanent: before the door check, one sender whose exponential points did not add up (or carried a
bucket count of 2**64-1) froze an honest run's count at 738 of 1,025. The malformed senders here speak OTLP/HTTP with
hand-built protobuf, as any sender outside otel-rl could, once a second like an SDK, in the same collector ticks as an
honest 4-rank run; the honest run must arrive exact (count, sum, every bucket), the malformed points must be dropped
and counted by run, metric and reason, and the alert must name the malformed runs.
"""

from __future__ import annotations

import math
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AGGREGATION_TEMPORALITY_CUMULATIVE,
    ExponentialHistogramDataPoint,
    HistogramDataPoint,
    ResourceMetrics,
)

from otel_rl.ops.query import Prometheus
from otel_rl.ops.report.dashboard import substitute
from tests.dashboards.conftest import MALFORMED_ONLY, dashboard_targets
from tests.pipeline.harness import eventually, native_buckets, private_stack, start_ranks
from tests.reference import exponential_sides

RANKS = 4
STEPS = 8
SCALE = 5
"""The honest ranks' histogram scale (TelemetryConfig.histogram_scale's default)."""


@pytest.fixture(scope="module")
def stack(stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with private_stack(stack_binaries, tmp_path_factory.mktemp("isolation-stack")) as running:
        yield running


def _attribute(key: str, value: str | int) -> KeyValue:
    any_value = AnyValue(string_value=value) if isinstance(value, str) else AnyValue(int_value=value)
    return KeyValue(key=key, value=any_value)


def _resource(run_id: str) -> ResourceMetrics:
    resource = ResourceMetrics()
    resource.resource.attributes.extend(
        [
            _attribute("service.name", "malformed"),
            _attribute("service.instance.id", f"{run_id}-0"),
            _attribute("rl.run.id", run_id),
            _attribute("rl.rank", 0),
            _attribute("rl.world_size", 1),
            _attribute("rl.role", "trainer"),
        ]
    )
    return resource


def _exponential(
    run_id: str, export: int, start_ns: int, shape: Callable[[ExponentialHistogramDataPoint, int], None]
) -> ResourceMetrics:
    """One cumulative ``rl.reward`` exponential point (``rl.reward.fn="total"``) shaped by ``shape``."""
    resource = _resource(run_id)
    metric = resource.scope_metrics.add().metrics.add()
    metric.name = "rl.reward"
    metric.exponential_histogram.aggregation_temporality = AGGREGATION_TEMPORALITY_CUMULATIVE
    point = metric.exponential_histogram.data_points.add()
    point.attributes.append(_attribute("rl.reward.fn", "total"))
    point.start_time_unix_nano, point.time_unix_nano = start_ns, time.time_ns()
    point.scale = SCALE
    shape(point, export)
    return resource


def _count_not_buckets(point: ExponentialHistogramDataPoint, export: int) -> None:
    """Buckets holding 59 observations per export under a count of 3 ("59 observations found in buckets, but the
    Count field is 3")."""
    point.positive.offset = 0
    point.positive.bucket_counts.extend([20 * (export + 1), 0, 39 * (export + 1)])
    point.count, point.sum = 3, 1.5


def _overflowing_bucket(point: ExponentialHistogramDataPoint, export: int) -> None:
    """A bucket count of 2**64-1 (an underflowed counter), which the exporter's int64 conversion makes -1."""
    point.positive.offset = 2
    point.positive.bucket_counts.extend([export + 1, 2**64 - 1])
    point.count, point.sum = export + 1, 1.0


def _explicit_count_not_buckets(run_id: str, export: int, start_ns: int) -> ResourceMetrics:
    """One cumulative explicit ``rl.reward`` point whose buckets (3 per export) do not add up to its count (1)."""
    resource = _resource(run_id)
    metric = resource.scope_metrics.add().metrics.add()
    metric.name = "rl.reward"
    metric.histogram.aggregation_temporality = AGGREGATION_TEMPORALITY_CUMULATIVE
    point: HistogramDataPoint = metric.histogram.data_points.add()
    point.attributes.append(_attribute("rl.reward.fn", "total"))
    point.start_time_unix_nano, point.time_unix_nano = start_ns, time.time_ns()
    point.explicit_bounds.extend([0.0, 1.0])
    point.bucket_counts.extend([export + 1, export + 1, export + 1])
    point.count, point.sum = 1, 0.5
    return resource


def _rejected(stack: Any) -> dict[tuple[str, str, str], float]:
    """``otelcol_otel_rl_points_rejected`` from the collector's own metrics, by (run, metric, reason)."""
    url = f"http://{stack.config.host}:{stack.config.ports.collector_metrics}/metrics"
    counts: dict[tuple[str, str, str], float] = {}
    for line in requests.get(url, timeout=10).text.splitlines():
        if line.startswith("otelcol_otel_rl_points_rejected"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            key = (labels["rl_run_id"], labels["metric"], labels["reason"])
            counts[key] = counts.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


class MalformedSenders(threading.Thread):
    """Three malformed senders of their own runs, one request a second until stopped, like an SDK's export loop:
    exponential count against buckets, an exponential bucket of 2**64-1, explicit count against buckets."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.runs = {kind: f"{kind}-{uuid.uuid4().hex[:8]}" for kind in ("count", "overflow", "explicit")}
        self.sent = 0
        self.statuses: set[int] = set()
        self._stop_event = threading.Event()

    def run(self) -> None:
        start_ns = time.time_ns() - 10**9
        while not self._stop_event.is_set():
            request = ExportMetricsServiceRequest()
            request.resource_metrics.extend(
                [
                    _exponential(self.runs["count"], self.sent, start_ns, _count_not_buckets),
                    _exponential(self.runs["overflow"], self.sent, start_ns, _overflowing_bucket),
                    _explicit_count_not_buckets(self.runs["explicit"], self.sent, start_ns),
                ]
            )
            response = requests.post(
                f"{self.url}/v1/metrics",
                data=request.SerializeToString(),
                headers={"Content-Type": "application/x-protobuf"},
                timeout=30,
            )
            self.statuses.add(response.status_code)
            self.sent += 1
            self._stop_event.wait(1.0)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(35)


def test_malformed_histograms_cost_no_other_run_its_data(stack: Any) -> None:
    """Malformed senders post once a second from before an honest 4-rank run starts until after it ended (so every
    write that carries the honest run's last points carries theirs too): the honest run is exact in count, sum and
    every bucket; the malformed runs get no reward series; every malformed point is counted once by run, metric and
    reason; the collector's exporter drops nothing; OtelRLRejectedPoints names each malformed run."""
    prometheus = Prometheus(stack.prometheus_url)
    honest = f"honest-{uuid.uuid4().hex[:8]}"
    senders = MalformedSenders(stack.otlp_http_endpoint)
    senders.start()
    selector = f'rl_reward{{rl_run_id="{honest}",rl_reward_fn="total"}}'
    values: list[float] = []
    try:
        ranks = start_ranks(
            RANKS, endpoint=stack.otlp_grpc_endpoint, run_id=honest, histogram="exponential", export_interval_s=0.3
        )
        try:
            for step in range(STEPS):
                for rank in ranks:
                    rewards = [0.25 * rank.rank + 0.125 * step, 1.0, -0.5, 0.0, 3.0 + step]
                    rank.rewards(rewards)
                    rank.step(step + 1)
                    values.extend(rewards)
                time.sleep(1.0)
            for rank in ranks:
                rank.flush()
        finally:
            for rank in ranks:
                rank.kill()
        eventually(
            lambda: prometheus.value(f"histogram_count({selector})") == len(values),
            what=f"the honest run's {len(values)} rewards",
            timeout_s=45,
        )
    finally:
        senders.stop()
    assert senders.statuses == {200}
    runs = set(senders.runs.values())
    (result,) = prometheus.query(selector)
    native = result["histogram"][1]
    assert float(native["sum"]) == pytest.approx(math.fsum(values), rel=1e-12)
    assert native_buckets(native, SCALE) == exponential_sides(values, SCALE)
    for run in runs:
        assert prometheus.query(f'{{rl_run_id="{run}",__name__=~"rl_reward.*"}}') == [], run
    expected = {
        (senders.runs["count"], "rl.reward", "count"): senders.sent,
        (senders.runs["overflow"], "rl.reward", "bucket_overflow"): senders.sent,
        (senders.runs["explicit"], "rl.reward", "count"): senders.sent,
    }
    assert {key: count for key, count in _rejected(stack).items() if key[0] in runs} == expected

    def scraped() -> set[str]:
        return {
            result["metric"]["rl_run_id"]
            for result in prometheus.query(f"otelcol_otel_rl_points_rejected == {senders.sent}")
            if result["metric"]["rl_run_id"] in runs
        }

    # Scraped by Prometheus under the name the dashboard's panel reads.
    eventually(lambda: scraped() == runs, what="every malformed run's rejections in Prometheus", timeout_s=60)
    (panel_query,) = (
        target["expr"]
        for _, panel, target in dashboard_targets()
        if panel["title"] == "Rejected values (bad input)" and MALFORMED_ONLY.search(target["expr"])
    )
    for run in runs:  # the dashboard's own query ("Rejected values" panel) shows each malformed run's drops
        assert prometheus.query(substitute(panel_query, run_id=run, rate_interval="5m", interval="1s")), run
    log = stack.log_file("collector").read_text(encoding="utf-8", errors="replace")
    assert "Dropping data" not in log and "Permanent error" not in log, log[-2000:]
    eventually(
        lambda: (
            {
                alert["metric"]["rl_run_id"]
                for alert in prometheus.query('ALERTS{alertname="OtelRLRejectedPoints",alertstate="firing"}')
            }
            >= runs
        ),
        what="OtelRLRejectedPoints firing for each malformed run",
        timeout_s=90,
    )
