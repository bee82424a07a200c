"""A rank that records the health signals, run beside the demo in test_live.py:
``python -m tests.dashboards.health_rank``.

For a few export periods it records what the "Run", "Rollout health" and "Data & staleness" rows read: one
``record_rollouts`` call per step (advantages, response lengths, entropy, trainer and inference log-probabilities,
rewards of prompt groups and their correctness breakdown), rewards and staleness per dataset and staleness phase (a
few tokens without a version), staleness drops with their lengths and lags, tokens and the async pipeline's gauges,
policy versions per trajectory, and a phase that alternates between ``generate`` and ``train``. Then it shuts down
cleanly, or with ``--hang`` stops stepping and waits, still exporting, until the test kills it: a stalled trainer
that then dies without a clean shutdown, and, with a world size it does not fill, a run with ranks missing.
"""

from __future__ import annotations

import argparse
import math
import time

import torch

import otel_rl

ROLLOUTS, TOKENS, GROUP = 16, 24, 4
"""Rollouts per step, tokens per rollout (the last 4 are padding), rollouts per prompt group."""


def record_step(telemetry: otel_rl.Telemetry, step: int, rng: torch.Generator) -> None:
    """Record one step's rollouts, rewards and staleness (datasets ``math`` and ``code``) and a drop."""
    telemetry.set_phase("generate")
    mask = torch.ones(ROLLOUTS, TOKENS)
    mask[:, -4:] = 0
    rewards = (torch.rand(ROLLOUTS, generator=rng) < 0.5).float()
    rewards[:GROUP] = 1.0  # one group solved by every rollout: zero variance
    groups = torch.arange(ROLLOUTS) // GROUP
    means = rewards.view(-1, GROUP).mean(dim=1).repeat_interleave(GROUP)
    inference = -3 * torch.rand(ROLLOUTS, TOKENS, generator=rng)
    telemetry.record_rollouts(
        mask=mask,
        advantages=rewards - means,
        response_lengths=mask.sum(dim=1) + torch.randint(0, 8, (ROLLOUTS,), generator=rng),
        entropy=2 * torch.rand(ROLLOUTS, TOKENS, generator=rng),
        logprobs=inference + 0.1 * torch.randn(ROLLOUTS, TOKENS, generator=rng),
        inference_logprobs=inference,
        rewards=rewards,
        group_ids=groups,
        versions_spanned=torch.randint(1, 3, (ROLLOUTS,), generator=rng),
        reward_breakdown={"correctness": rewards},
    )
    tokens = int(mask.sum())
    telemetry.record_tokens(generated=tokens, trained=tokens, samples=ROLLOUTS)
    telemetry.set_async_state(queue_depth=ROLLOUTS, in_flight=0, buffer_used=step % 4, buffer_capacity=4)
    telemetry.set_phase("train")
    half = ROLLOUTS // 2
    telemetry.record_rewards(rewards[:half], dataset="math")
    telemetry.record_rewards(rewards[half:], dataset="code")
    versions = step - torch.randint(0, 4, (64,), generator=rng)
    versions[:2] = -1  # no version: counted in rl.staleness.unversioned
    telemetry.record_staleness(versions.clamp(min=-1), step, dataset="math", phase="in_flight")
    telemetry.record_staleness(step - torch.randint(0, 8, (64,), generator=rng), step, dataset="code", phase="in_queue")
    telemetry.record_staleness_drops(response_lengths=[30, 31], staleness=[9, 12], dataset="code")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--hang", action="store_true", help="after --seconds, stop stepping and wait to be killed")
    args = parser.parse_args()
    telemetry = otel_rl.setup(
        otel_rl.TelemetryConfig(
            service_name="otel-rl-demo",
            run_id=args.run_id,
            rank=args.rank,
            world_size=args.world_size,
            role="trainer",
            exporter="otlp",
            endpoint=args.endpoint,
            export_interval_s=0.5,
            shutdown_timeout_s=10,
        )
    )
    rng = torch.Generator().manual_seed(args.rank)
    step, deadline = 0, math.inf
    while time.monotonic() < deadline:
        telemetry.step(step)
        record_step(telemetry, step, rng)
        if step == 0:  # the window starts after a first step (it once paid the kernels)
            deadline = time.monotonic() + args.seconds
        step += 1
        time.sleep(0.25)
    if args.hang:
        print("hanging", flush=True)
        time.sleep(3600)  # the export thread keeps sending the same step until the test kills this process
    otel_rl.reset()


if __name__ == "__main__":
    main()
