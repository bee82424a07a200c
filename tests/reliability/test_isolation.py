"""Isolation: a malformed sender never costs another run its data (collector_config/processors/pointcheck,
docs/reliability.md "Isolation"), a run's series stay within its budget (collector_config/processors/runbudget), and
a sample record is either stored or counted, against the real collector, Prometheus and VictoriaLogs.

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
from dataclasses import dataclass
from typing import Any

import otel_rl_contract as contract
import pytest
import requests
import yaml
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AGGREGATION_TEMPORALITY_CUMULATIVE,
    ExponentialHistogramDataPoint,
    HistogramDataPoint,
    ResourceMetrics,
)
from otel_rl_contract import foreign, rules
from otel_rl_ops.query import Prometheus, VictoriaLogs
from otel_rl_ops.report.dashboard import substitute

from otel_rl._export.worker import RECORD_BYTES
from tests.dashboards.conftest import MALFORMED_ONLY, dashboard_targets
from tests.pipeline.harness import RankProcess, eventually, native_buckets, private_stack, start_ranks
from tests.reference import exponential_sides
from tests.reliability.helpers import CONFIG_DIR, flush_ok

REWARD = contract.series(contract.REWARDS.histogram)

RANKS = 4
STEPS = 8
SCALE = 5
"""The honest ranks' histogram scale (TelemetryConfig.histogram_scale's default)."""
COLLECTOR_RECORD_LIMIT = int(
    yaml.safe_load((CONFIG_DIR / "collector.yaml").read_text(encoding="utf-8"))["processors"][
        "filter/oversized_records"
    ]["logs"]["log_record"][0].rsplit(">", 1)[1]
)
"""filter/oversized_records' bound on the JSON of a log record's body and attributes (bytes)."""


@pytest.fixture(scope="module")
def stack(stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with private_stack(stack_binaries, tmp_path_factory.mktemp("isolation-stack")) as running:
        yield running


def _attribute(key: str, value: str | int) -> KeyValue:
    any_value = AnyValue(string_value=value) if isinstance(value, str) else AnyValue(int_value=value)
    return KeyValue(key=key, value=any_value)


def _resource(run_id: str, rank: int = 0) -> ResourceMetrics:
    resource = ResourceMetrics()
    resource.resource.attributes.extend(
        [
            _attribute("service.name", "malformed"),
            _attribute("service.instance.id", f"{run_id}-{rank}"),
            _attribute("rl.run.id", run_id),
            _attribute("rl.rank", rank),
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
        if line.startswith(f"{foreign.text_name(foreign.COLLECTOR_POINTS_REJECTED)}{{"):
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


def _honest_run(stack: Any, run_id: str) -> list[float]:
    """An honest 4-rank run (exponential histograms) of STEPS steps, one a second, flushed and ended; returns the
    rewards it recorded."""
    values: list[float] = []
    ranks = start_ranks(
        RANKS, endpoint=stack.otlp_grpc_endpoint, run_id=run_id, histogram="exponential", export_interval_s=0.3
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
    return values


def _assert_exact(prometheus: Prometheus, run_id: str, values: list[float]) -> None:
    """The run's total reward histogram in Prometheus holds ``values`` exactly: count, sum and every bucket."""
    selector = f'{REWARD.name}{{rl_run_id="{run_id}",rl_reward_fn="total"}}'
    eventually(
        lambda: prometheus.value(f"histogram_count({selector})") == len(values),
        what=f"the honest run's {len(values)} rewards",
        timeout_s=45,
    )
    (result,) = prometheus.query(selector)
    native = result["histogram"][1]
    assert float(native["sum"]) == pytest.approx(math.fsum(values), rel=1e-12)
    assert native_buckets(native, SCALE) == exponential_sides(values, SCALE)


def test_malformed_histograms_cost_no_other_run_its_data(stack: Any) -> None:
    """Malformed senders post once a second from before an honest 4-rank run starts until after it ended (so every
    write that carries the honest run's last points carries theirs too): the honest run is exact in count, sum and
    every bucket; the malformed runs get no reward series; every malformed point is counted once by run, metric and
    reason; the collector's exporter drops nothing; OtelRLRejectedPoints names each malformed run."""
    prometheus = Prometheus(stack.prometheus_url)
    honest = f"honest-{uuid.uuid4().hex[:8]}"
    senders = MalformedSenders(stack.otlp_http_endpoint)
    senders.start()
    try:
        _assert_exact(prometheus, honest, _honest_run(stack, honest))
    finally:
        senders.stop()
    assert senders.statuses == {200}
    runs = set(senders.runs.values())
    for run in runs:
        assert prometheus.query(f'{{rl_run_id="{run}",__name__=~"{REWARD.name}.*"}}') == [], run
    expected = {
        (senders.runs["count"], "rl.reward", "count"): senders.sent,
        (senders.runs["overflow"], "rl.reward", "bucket_overflow"): senders.sent,
        (senders.runs["explicit"], "rl.reward", "count"): senders.sent,
    }
    assert {key: count for key, count in _rejected(stack).items() if key[0] in runs} == expected

    def scraped() -> set[str]:
        return {
            result["metric"]["rl_run_id"]
            for result in prometheus.query(f"{foreign.COLLECTOR_POINTS_REJECTED.name} == {senders.sent}")
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
                for alert in prometheus.query(
                    f'{foreign.ALERTS.name}{{alertname="OtelRLRejectedPoints",alertstate="firing"}}'
                )
            }
            >= runs
        ),
        what="OtelRLRejectedPoints firing for each malformed run",
        timeout_s=90,
    )


def _log_request(run_id: str, body: str) -> ExportLogsServiceRequest:
    """One OTLP log record of ``run_id`` whose body is ``body``, as a sender outside otel-rl builds it."""
    request = ExportLogsServiceRequest()
    resource = request.resource_logs.add()
    resource.resource.attributes.extend([_attribute("service.name", "plain-sender"), _attribute("rl.run.id", run_id)])
    record = resource.scope_logs.add().log_records.add()
    record.time_unix_nano = time.time_ns()
    record.body.string_value = body
    return request


def _filtered_records(stack: Any) -> float:
    """``otelcol_processor_filter_logs.filtered`` of filter/oversized_records, from the collector's own metrics."""
    url = f"http://{stack.config.host}:{stack.config.ports.collector_metrics}/metrics"
    lines = requests.get(url, timeout=10).text.splitlines()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in lines
        if line.startswith(foreign.text_name(foreign.COLLECTOR_FILTERED_RECORDS))
        and 'filter="filter/oversized_records"' in line
    )


def test_a_sample_record_is_stored_or_counted_at_each_size_limit(stack: Any) -> None:
    """One size limit from trainer to store (VictoriaLogs keeps no entry above 2 MiB of its measure and drops it
    silently after answering 200): a rank's record just under its 1 MiB limit is stored whole and one just over is
    counted ``oversized``; a plain sender's record just under the collector's limit is stored whole, and those just
    over it and at 3 MB (where VictoriaLogs used to drop it silently) are dropped and counted by the collector."""
    logs = VictoriaLogs(stack.victorialogs_url)
    run_id = f"sizes-{uuid.uuid4().hex[:8]}"
    rank = RankProcess(
        endpoint=stack.otlp_grpc_endpoint,
        run_id=run_id,
        rank=0,
        world_size=1,
        top_k=2,
        bottom_k=0,
        sample_text_budget_bytes=3_000_000,
    )
    try:
        rank.sample(reward=2.0, episode_id="under", response="u" * (RECORD_BYTES - 4096))
        rank.sample(reward=1.0, episode_id="over", response="o" * (RECORD_BYTES + 16))
        rank.step(1)
        flush_ok(rank)
        assert rank.stats()["samples_dropped_oversized"] == 1
    finally:
        rank.kill()
    filtered_before = _filtered_records(stack)
    plain = f"plain-{uuid.uuid4().hex[:8]}"
    for size in (COLLECTOR_RECORD_LIMIT - 65_536, COLLECTOR_RECORD_LIMIT + 1, 3_000_000):
        response = requests.post(
            f"{stack.otlp_http_endpoint}/v1/logs",
            data=_log_request(plain, "p" * size).SerializeToString(),
            headers={"Content-Type": "application/x-protobuf"},
            timeout=60,
        )
        assert response.status_code == 200, response.text
    eventually(lambda: _filtered_records(stack) - filtered_before == 2, what="the two records over the limit counted")
    found = eventually(
        lambda: len(got := logs.query(f'{{rl.run.id="{run_id}"}} OR {{rl.run.id="{plain}"}}')) == 2 and got,
        what="the records under each limit",
    )
    lengths = sorted(len(record["_msg"]) for record in found)
    assert lengths == [RECORD_BYTES - 4096, COLLECTOR_RECORD_LIMIT - 65_536], lengths
    time.sleep(2)  # anything else would have arrived with them
    assert len(logs.query(f'{{rl.run.id="{run_id}"}} OR {{rl.run.id="{plain}"}}')) == 2
    log = stack.log_file("victorialogs").read_text(encoding="utf-8", errors="replace")
    assert "too long log entry" not in log, log[-2000:]


BUDGET = 1_000
"""OTEL_RL_MAX_SERIES_PER_RUN of the budget test's stack (the default, 20,000, takes longer to fill)."""


@pytest.fixture(scope="module")
def budget_stack(stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    environment = {"OTEL_RL_MAX_SERIES_PER_RUN": str(BUDGET)}
    with private_stack(
        stack_binaries, tmp_path_factory.mktemp("budget-stack"), collector_environment=environment
    ) as running:
        yield running


@dataclass(frozen=True)
class Runaway:
    """A sender of one run whose label takes a new value per stream: ``streams`` streams of ``metric`` (``kind``:
    sum, gauge, explicit or exponential), sent by ``ranks`` fake ranks (each its share), all in every export
    (``growing=False``) or ``streams // EXPORTS`` more per export; ``admitted`` is how many streams the budget lets
    in, ``series`` what they cost in Prometheus (exemplar carriers included)."""

    kind: str
    metric: str
    streams: int
    growing: bool
    admitted: int
    series: int
    ranks: int = 1


EXPORTS = 5
RUNAWAYS = (
    Runaway("sum", "rl.reward.positive", 1_200, growing=False, admitted=1_000, series=1_000),
    Runaway("gauge", "rl.reward.max", 1_500, growing=True, admitted=1_000, series=1_000),
    # 3 bounds: 4 buckets, sum and count, written twice (rl_reward and its exemplar carrier rl_reward_exemplars).
    Runaway("explicit", "rl.reward", 200, growing=True, admitted=83, series=996),
    # One native histogram, twice (rl_staleness and rl_staleness_exemplars).
    Runaway("exponential", "rl.staleness", 800, growing=False, admitted=500, series=1_000),
    Runaway("sum", "rl.reward.negative", 1_600, growing=False, admitted=1_000, series=1_000, ranks=4),
)


def _runaway_request(runaway: Runaway, run_id: str, export: int, start_ns: int) -> ExportMetricsServiceRequest:
    """Export ``export`` (0-based) of ``runaway``: every rank's cumulative points of the streams it has by then."""
    have = runaway.streams if not runaway.growing else runaway.streams * (export + 1) // EXPORTS
    request = ExportMetricsServiceRequest()
    for rank in range(runaway.ranks):
        resource = _resource(run_id, rank)
        metric = resource.scope_metrics.add().metrics.add()
        metric.name = runaway.metric
        for value in range(rank, have, runaway.ranks):
            if runaway.kind == "sum":
                metric.sum.aggregation_temporality = AGGREGATION_TEMPORALITY_CUMULATIVE
                metric.sum.is_monotonic = True
                point: Any = metric.sum.data_points.add()
                point.as_double = float(export + 1)
            elif runaway.kind == "gauge":
                point = metric.gauge.data_points.add()
                point.as_double = float(value)
            elif runaway.kind == "explicit":
                metric.histogram.aggregation_temporality = AGGREGATION_TEMPORALITY_CUMULATIVE
                point = metric.histogram.data_points.add()
                point.explicit_bounds.extend([0.0, 0.5, 1.0])
                point.bucket_counts.extend([0, export + 1, 0, 0])
                point.count, point.sum = export + 1, 0.25 * (export + 1)
            else:
                metric.exponential_histogram.aggregation_temporality = AGGREGATION_TEMPORALITY_CUMULATIVE
                point = metric.exponential_histogram.data_points.add()
                point.scale, point.positive.offset = SCALE, 0
                point.positive.bucket_counts.extend([export + 1])
                point.count, point.sum = export + 1, 1.01 * (export + 1)
            point.attributes.append(_attribute("rl.dataset", f"d{value}"))
            point.start_time_unix_nano, point.time_unix_nano = start_ns, time.time_ns()
        request.resource_metrics.append(resource)
    return request


def test_a_runs_series_budget_holds_for_every_kind_and_arrival(budget_stack: Any) -> None:
    """Runaway senders (a label per stream) of each metric kind, all at once, growing over exports and spread over 4
    ranks, beside an honest 4-rank run: each runaway run ends with exactly the series its budget admits (never more
    than OTEL_RL_MAX_SERIES_PER_RUN), the streams beyond it are counted (reason series_budget), and the honest run,
    under its budget, is exact."""
    stack = budget_stack
    prometheus = Prometheus(stack.prometheus_url)
    runs = {runaway: f"runaway-{runaway.kind}-{uuid.uuid4().hex[:6]}" for runaway in RUNAWAYS}
    start_ns = time.time_ns() - 10**9
    for export in range(EXPORTS):
        for runaway, run_id in runs.items():
            response = requests.post(
                f"{stack.otlp_http_endpoint}/v1/metrics",
                data=_runaway_request(runaway, run_id, export, start_ns).SerializeToString(),
                headers={"Content-Type": "application/x-protobuf"},
                timeout=60,
            )
            assert response.status_code == 200, response.text
        time.sleep(1.2)  # one collector tick (OTEL_RL_AGGREGATION_INTERVAL=1s) per export
    honest = f"honest-{uuid.uuid4().hex[:8]}"
    _assert_exact(prometheus, honest, _honest_run(stack, honest))

    def series(run_id: str) -> int:
        """The run's series as the collector writes them (not Prometheus's recording rules and alerts, nor the
        collector's own counter of the run's rejections)."""
        names = [item["__name__"] for item in prometheus.series(f'{{rl_run_id="{run_id}"}}')]
        recorded = (foreign.ALERTS.name, rules.ALERT_THRESHOLD.name, "otelcol_")
        return sum(1 for name in names if ":" not in name and not name.startswith(recorded))

    def admitted() -> dict[str, int]:
        return {
            runaway.metric + (f" x{runaway.ranks}" if runaway.ranks > 1 else ""): series(run_id)
            for runaway, run_id in runs.items()
        }

    expected = {
        runaway.metric + (f" x{runaway.ranks}" if runaway.ranks > 1 else ""): runaway.series for runaway in runs
    }
    try:
        eventually(lambda: admitted() == expected, what="each runaway run's admitted series")
    finally:
        print("admitted series:", admitted(), "expected:", expected)
    assert 0 < series(honest) <= BUDGET
    rejected = _rejected(stack)
    for runaway, run_id in runs.items():
        assert rejected.get((run_id, runaway.metric, "series_budget"), 0) >= runaway.streams - runaway.admitted
    assert not any(run == honest for run, _, _ in rejected)
