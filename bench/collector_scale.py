"""Item 5: how many ranks one collector merges exactly, with what lag, CPU and memory per rank.

Simulated ranks are real otel_rl point builders (``MetricStore`` fed by the real summarizers), one resource each,
exporting cumulative points every second over OTLP/gRPC to the repository's collector configuration, which merges
them and remote-writes to Prometheus. Sender processes batch their ranks' resources into one request per tick,
as an agent collector would. For each rank count: is the merged total exact, how long after the last export does
Prometheus show it, and what did the collector use (CPU from /proc/<pid>/stat, RSS from /proc/<pid>/status).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
import uuid
from typing import Any

from otel_rl_contract import REWARD_FN, REWARD_FN_TOTAL, REWARDS, RUN_ID, SCOPE_VERSION, STALENESS, STEP, label, series
from otel_rl_ops import promql
from otel_rl_ops.query import Prometheus

from otel_rl import TelemetryConfig
from otel_rl._pipeline import build_resource, layouts
from otel_rl._record.stats import StalenessSummarizer, ValueSummarizer
from otel_rl._state.store import MetricStore, attributes

_VALUES_PER_TICK = 16
_TICK_S = 1.0


def _sender(endpoint: str, run_id: str, ranks: range, world_size: int, ticks: int, start_at: float, done: Any) -> None:
    """Export ``ticks`` cumulative snapshots of ``ranks`` simulated ranks, one batched request per second; put the
    time the last export returned on ``done``."""
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics.export import MetricsData

    config = TelemetryConfig(run_id=run_id, rank=0, world_size=world_size, exporter="none").resolved
    layout = layouts(config)
    rewards = ValueSummarizer(layout.of(REWARDS)).summarize(
        [0.5 * (i % 5) - 1.0 for i in range(_VALUES_PER_TICK)], None
    )
    staleness = StalenessSummarizer(layout.of(STALENESS)).summarize(list(range(_VALUES_PER_TICK)), 20, None)
    fn = attributes(**{REWARD_FN: REWARD_FN_TOTAL})
    stores = []
    for rank in ranks:
        rank_config = TelemetryConfig(run_id=run_id, rank=rank, world_size=world_size, exporter="none").resolved
        stores.append(MetricStore(build_resource(rank_config), start_time_ns=time.time_ns(), version=SCOPE_VERSION))
    exporter = OTLPMetricExporter(endpoint=endpoint, insecure=True, timeout=10)
    time.sleep(max(0.0, start_at - time.time()))
    for tick in range(ticks):
        for store in stores:
            store.record(REWARDS, fn, rewards)
            store.record(STALENESS, (), staleness)
            store.set(STEP, (), tick)
        now = time.time_ns()
        resource_metrics: list[Any] = []
        for store in stores:
            data, _ = store.collect(now)
            assert data is not None
            resource_metrics.extend(data.resource_metrics)
        exporter.export(MetricsData(resource_metrics), timeout_millis=10_000)
        if tick + 1 < ticks:
            time.sleep(max(0.0, start_at + (tick + 1) * _TICK_S - time.time()))
    done.put(time.time())
    exporter.shutdown()


def _proc(pid: int) -> tuple[float, int]:
    """CPU seconds (user + system) and RSS in KiB of a process."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return cpu, rss


def _total(prometheus_url: str, run_id: str) -> float:
    selector = promql.matchers(**{label(RUN_ID): run_id, label(REWARD_FN): REWARD_FN_TOTAL})
    value = Prometheus(prometheus_url, timeout_s=10).value(
        promql.count(series(REWARDS.histogram), selector, window=None)
    )
    return 0.0 if value is None else value


def measure(stack: Any, ranks: int, *, ticks: int, senders: int = 2, timeout_s: float = 60) -> dict[str, Any]:
    """Run ``ranks`` simulated ranks for ``ticks`` seconds against ``stack``; exactness, lag and collector cost."""
    run_id = f"scale-{ranks}-{uuid.uuid4().hex[:6]}"
    collector_pid = stack.pid("collector")
    start_at = time.time() + 3.0 + ranks / 500
    chunks = [range(i, ranks, senders) for i in range(senders)]
    context = multiprocessing.get_context("spawn")
    done = context.Queue()
    processes = [
        context.Process(target=_sender, args=(stack.otlp_grpc_endpoint, run_id, chunk, ranks, ticks, start_at, done))
        for chunk in chunks
    ]
    for process in processes:
        process.start()
    time.sleep(max(0.0, start_at - time.time()))
    cpu_start, _ = _proc(collector_pid)
    wall_start = time.time()
    finished: list[float] = []
    while len(finished) < len(processes):
        try:
            finished.append(done.get(timeout=1))
        except queue.Empty:
            if not any(process.is_alive() for process in processes):
                raise RuntimeError(f"{ranks} ranks: a sender process died") from None
    sent_at = max(finished)
    cpu_end, rss = _proc(collector_pid)
    expected = ranks * ticks * _VALUES_PER_TICK
    total = _total(stack.prometheus_url, run_id)
    while total != expected and time.time() < sent_at + timeout_s:
        time.sleep(0.1)
        total = _total(stack.prometheus_url, run_id)
    lag = time.time() - sent_at
    for process in processes:
        process.join()
    cores = (cpu_end - cpu_start) / max(sent_at - wall_start, 1e-9)
    return {
        "ranks": ranks,
        "ticks": ticks,
        "exact": total == expected,
        "expected_count": expected,
        "got_count": total,
        "lag_after_last_export_s": round(lag, 3),
        "achieved_export_interval_s": round((sent_at - start_at) / max(ticks - 1, 1), 3),
        "collector_cores": round(cores, 3),
        "collector_cpu_ms_per_rank_per_s": round(1000 * cores / ranks, 4),
        "collector_rss_mib": round(rss / 1024, 1),
        "collector_rss_kib_per_rank": round(rss / ranks, 1),
        "all_senders_ok": all(process.exitcode == 0 for process in processes),
    }


def collector_scale(rank_counts: list[int], *, ticks: int, aggregation_interval: str = "1s") -> dict[str, Any]:
    """Measure each rank count against one private stack; stop at the first count that is not exact."""
    import tempfile
    from pathlib import Path

    from otel_rl_ops.stack import install
    from otel_rl_ops.stack.services import Stack, StackConfig, StackPorts

    with tempfile.TemporaryDirectory(prefix="otel-rl-scale-") as state:
        config = StackConfig(
            ports=StackPorts.free(),
            state_dir=Path(state),
            collector_environment={"OTEL_RL_AGGREGATION_INTERVAL": aggregation_interval},
        )
        rows = []
        with Stack(config, binaries=install.install_all()) as stack:
            for ranks in rank_counts:
                row = measure(stack, ranks, ticks=ticks)
                rows.append(row)
                if not row["exact"]:
                    break
    exact = [
        row["ranks"]
        for row in rows
        if row["exact"] and row["lag_after_last_export_s"] < 2 * _TICK_S and row["achieved_export_interval_s"] < 1.2
    ]
    return {
        "aggregation_interval": aggregation_interval,
        "export_interval_s": _TICK_S,
        "rows": rows,
        "largest_exact_with_lag_under_2s": max(exact, default=0),
    }
