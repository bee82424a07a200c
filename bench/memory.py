"""Item 4: the trainer's resident memory over many steps, and the RSS reader the other checks use."""

from __future__ import annotations

import gc
from typing import Any

from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

from bench.workload import CURRENT_VERSION, make_step
from otel_rl import Telemetry, TelemetryConfig


def rss_kb() -> int:
    """This process's resident set size in KiB (``VmRSS`` of /proc/self/status); 0 where there is no /proc."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    spread = sum((x - mean_x) ** 2 for x in xs)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread if spread else 0.0


class DiscardingMetricExporter(MetricExporter):
    """Accepts every export and keeps nothing: the export path runs, nothing accumulates in the exporter."""

    def __init__(self) -> None:
        super().__init__()
        self.exports = 0

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        self.exports += 1
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        return None


class DiscardingLogExporter(LogRecordExporter):
    """Accepts every batch of sample records and keeps nothing."""

    def __init__(self) -> None:
        self.records = 0

    def export(self, batch: Any) -> LogRecordExportResult:
        self.records += len(batch)
        return LogRecordExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        return None


def memory_growth(*, steps: int, every: int, warmup: int, rollouts: int = 64, tokens: int = 256) -> dict[str, Any]:
    """RSS every ``every`` steps over ``steps`` steps (after ``warmup``), with samples and a live export path."""
    step = make_step(rollouts, tokens)
    rewards = step.per_rollout.tolist()
    metrics, logs = DiscardingMetricExporter(), DiscardingLogExporter()
    telemetry = Telemetry(
        TelemetryConfig(run_id="bench-memory", export_interval_s=0.05, shutdown_timeout_s=2.0),
        metric_exporter=metrics,
        log_exporter=logs,
    )
    points: list[tuple[int, int]] = []
    try:
        for index in range(warmup + steps):
            telemetry.record_rewards(step.rewards, mask=step.mask)
            telemetry.record_rewards(step.per_rollout, fn="correctness")
            telemetry.record_staleness(step.versions + index, CURRENT_VERSION + index, mask=step.mask)
            for rollout, reward in enumerate(rewards):
                telemetry.record_sample(
                    {"reward": reward, "episode_id": f"{index}-{rollout}", "prompt": "p" * 200, "response": "r" * 800}
                )
            telemetry.step(index)
            done = index - warmup + 1
            if done > 0 and done % every == 0:
                gc.collect()
                points.append((done, rss_kb()))
    finally:
        telemetry.shutdown(2.0)
    xs = [float(p[0]) for p in points]
    ys = [float(p[1]) for p in points]
    return {
        "steps": steps,
        "warmup_steps": warmup,
        "sample_every": every,
        "shape": [rollouts, tokens],
        "samples_per_step": rollouts,
        "rss_kb": [[p[0], p[1]] for p in points],
        "slope_kb_per_1000_steps": slope(xs, ys) * 1000 if len(points) > 1 else 0.0,
        "rss_first_kb": points[0][1] if points else 0,
        "rss_last_kb": points[-1][1] if points else 0,
        "metric_exports": metrics.exports,
        "sample_records_exported": logs.records,
    }
