"""A run with classic histograms, beside the demo in test_live.py: ``python -m tests.dashboards.classic_rank``.

Two ranks of their own run record with ``TelemetryConfig(histogram="explicit")`` (classic ``_bucket`` series in
Prometheus) what the demo records by default as exponential histograms: rewards per function, staleness, a loss,
and what tests/dashboards/health_rank.py records (rollouts, datasets, staleness
phases, drops, phases), for a few export periods. The dashboards and rules read native histograms first and
these classic ones as the fallback; test_live.py checks that every histogram query has data for this run too.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import random
import time

import torch

import otel_rl
from tests.dashboards.health_rank import record_step


def _rank(rank: int, endpoint: str, run_id: str, seconds: float) -> None:
    telemetry = otel_rl.setup(
        otel_rl.TelemetryConfig(
            service_name="otel-rl-demo",
            run_id=run_id,
            rank=rank,
            world_size=2,
            role="trainer",
            exporter="otlp",
            endpoint=endpoint,
            export_interval_s=0.5,
            shutdown_timeout_s=10,
            histogram="explicit",
        )
    )
    rng = random.Random(rank)
    generator = torch.Generator().manual_seed(rank)
    step, deadline = 0, math.inf
    while time.monotonic() < deadline:
        telemetry.step(step)
        telemetry.set_policy_version(step)
        correctness = [float(rng.random() < 0.5) for _ in range(16)]
        formatting = [rng.choice((0.0, 0.5)) for _ in range(16)]
        telemetry.record_rewards([c + f for c, f in zip(correctness, formatting, strict=True)])
        telemetry.record_rewards(correctness, fn="correctness")
        telemetry.record_rewards(formatting, fn="format")
        telemetry.record_staleness([max(step - rng.randrange(4), 0) for _ in range(64)], step)
        telemetry.record_metric("loss.policy", rng.uniform(-1.0, 1.0))
        record_step(telemetry, step, generator)
        if step == 0:  # the window starts after a first step (it once paid the kernels)
            deadline = time.monotonic() + seconds
        step += 1
        time.sleep(0.25)
    otel_rl.reset()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    ranks = [
        multiprocessing.get_context("spawn").Process(
            target=_rank, args=(rank, args.endpoint, args.run_id, args.seconds)
        )
        for rank in range(2)
    ]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(timeout=120)
    if any(process.exitcode != 0 for process in ranks):
        raise SystemExit(f"a rank failed: exit codes {[process.exitcode for process in ranks]}")


if __name__ == "__main__":
    main()
