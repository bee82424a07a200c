"""Item 3: what a typical step costs the training thread when the collector is healthy, absent or hung.

A typical step: 4 reward functions (``record_rewards`` per rollout, by name) plus the per-token total, per-token
staleness, one ``record_sample`` per rollout (top/bottom-2 kept) and ``step()``. Modes:

* ``healthy``: ``exporter="none"`` (the baseline);
* ``closed_port``: the real OTLP gRPC exporter pointed at a port where nothing listens;
* ``slow_sink``: the real OTLP gRPC exporter pointed at a socket that listens but never accepts or answers, so
  every export runs into its deadline.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from typing import Any

from bench.memory import rss_kb
from bench.timing import median, percentile
from bench.workload import CURRENT_VERSION, Step, make_step
from otel_rl import Telemetry, TelemetryConfig

MODES = ("healthy", "closed_port", "slow_sink")
REWARD_FNS = ("correctness", "format", "length", "style")
#: The target: p99 of a failing-collector mode within 1.5x of the healthy p99.
P99_RATIO_MAX = 1.5


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    yield port


@contextlib.contextmanager
def silent_listener() -> Iterator[int]:
    """A listening socket that is never accepted from: connections complete in the kernel, nothing answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


def _config(mode: str, port: int | None) -> TelemetryConfig:
    if mode == "healthy":
        return TelemetryConfig(run_id="bench-thread", exporter="none", shutdown_timeout_s=1.0)
    return TelemetryConfig(
        run_id="bench-thread",
        exporter="otlp",
        protocol="grpc",
        endpoint=f"http://127.0.0.1:{port}",
        export_interval_s=0.2,
        export_timeout_s=1.0,
        shutdown_timeout_s=1.0,
    )


def typical_step(telemetry: Telemetry, step: Step, index: int, samples: list[dict[str, Any]]) -> None:
    """One training step's worth of otel-rl calls."""
    for offset, name in enumerate(REWARD_FNS):
        telemetry.record_rewards(step.per_rollout + offset, fn=name)
    telemetry.record_rewards(step.rewards, mask=step.mask)
    telemetry.record_staleness(step.versions, CURRENT_VERSION, mask=step.mask)
    for sample in samples:
        telemetry.record_sample(sample)
    telemetry.step(index)


def _run_mode(mode: str, step: Step, samples: list[dict[str, Any]], steps: int, warmup: int) -> dict[str, Any]:
    endpoint: contextlib.AbstractContextManager[int | None] = (
        closed_port()
        if mode == "closed_port"
        else silent_listener()
        if mode == "slow_sink"
        else contextlib.nullcontext()
    )
    with endpoint as port:
        telemetry = Telemetry(_config(mode, port))
        times: list[int] = []
        rss_start = rss_kb()
        rss_max = rss_start
        try:
            for index in range(warmup + steps):
                start = time.perf_counter_ns()
                typical_step(telemetry, step, index, samples)
                elapsed = time.perf_counter_ns() - start
                if index >= warmup:
                    times.append(elapsed)
                rss_max = max(rss_max, rss_kb())
        finally:
            telemetry.shutdown(1.0)
    return {"times_ns": times, "rss_start_kb": rss_start, "rss_end_kb": rss_kb(), "rss_max_kb": rss_max}


def training_thread(*, steps: int = 500, rounds: int = 2, warmup: int = 3, rollouts: int = 512) -> dict[str, Any]:
    """Per-step time (median, p99) and RSS of each mode; modes alternate in ``rounds`` blocks against drift."""
    step = make_step(rollouts, 2048)
    samples = [
        {"reward": reward, "episode_id": i, "prompt": "q" * 300, "response": "a" * 1500, "policy_version": 999}
        for i, reward in enumerate(step.per_rollout.tolist())
    ]
    pooled: dict[str, dict[str, Any]] = {m: {"times_ns": [], "rss_kb": []} for m in MODES}
    per_round = max(1, steps // rounds)
    for _ in range(rounds):
        for mode in MODES:
            run = _run_mode(mode, step, samples, per_round, warmup)
            pooled[mode]["times_ns"].extend(run["times_ns"])
            pooled[mode]["rss_kb"].append([run["rss_start_kb"], run["rss_max_kb"], run["rss_end_kb"]])
    results: dict[str, Any] = {}
    for mode, data in pooled.items():
        times = data["times_ns"]
        results[mode] = {
            "steps": len(times),
            "median_ns": median(times),
            "p99_ns": percentile(times, 99),
            "max_ns": float(max(times)),
            "rss_kb_start_max_end": data["rss_kb"],
        }
    healthy = results["healthy"]
    ratios = {
        f"{mode}_p99_vs_healthy": results[mode]["p99_ns"] / healthy["p99_ns"] for mode in MODES if mode != "healthy"
    }
    ratios.update(
        {
            f"{mode}_median_vs_healthy": results[mode]["median_ns"] / healthy["median_ns"]
            for mode in MODES
            if mode != "healthy"
        }
    )
    return {
        "rollouts": rollouts,
        "tokens": step.tokens,
        "reward_fns": list(REWARD_FNS),
        "samples_per_step": len(samples),
        "modes": results,
        "ratios": ratios,
        "target_p99_ratio_max": P99_RATIO_MAX,
        "targets_met": {
            f"{mode}_p99": ratios[f"{mode}_p99_vs_healthy"] <= P99_RATIO_MAX for mode in MODES if mode != "healthy"
        },
    }
