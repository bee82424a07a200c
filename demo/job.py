"""One rank of the demo job: GRPO on the addition task, with every statistic going out through otel_rl.

Ranks average gradients with gloo (the training's own collective); telemetry never uses a collective. Each rank
also writes what it recorded to ``<record_dir>/rank-<r>.jsonl``, the ground truth the tests compare against.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import otel_rl
from demo.policy import LaggedGenerator, Policy, group_advantages, grpo_loss
from demo.task import MAX_TOKENS, REWARD_FNS, prompt_text, response_lengths, response_text, rewards, sample_prompts

SERVICE_NAME = "otel-rl-demo"


@dataclass(frozen=True, kw_only=True)
class JobSettings:
    """What every rank of one demo run needs to know."""

    run_id: str
    steps: int
    ranks: int
    exporter: str
    endpoint: str | None
    record_dir: str
    master_port: int
    prompts_per_rank: int = 16
    group_size: int = 8
    step_seconds: float = 0.1
    export_interval_s: float = 1.0
    learning_rate: float = 1e-2
    entropy_bonus: float = 0.02
    seed: int = 0


def lag_for(step: int, steps: int) -> int:
    """How far the generator runs behind: a slow wave of 0..3 versions, and a stall (6) in the middle fifth."""
    if 0.4 * steps <= step < 0.6 * steps:
        return 6
    return round(1.5 * (1 - math.cos(2 * math.pi * step / max(steps, 1))))


def run_rank(rank: int, settings: JobSettings, progress: Any) -> None:
    """Train for ``settings.steps`` steps as rank ``rank``; report each finished step on ``progress``."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(settings.master_port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=settings.ranks)
    telemetry = otel_rl.setup(
        otel_rl.TelemetryConfig(
            service_name=SERVICE_NAME,
            run_id=settings.run_id,
            rank=rank,
            world_size=settings.ranks,
            local_rank=rank,
            role="trainer",
            exporter=settings.exporter,  # type: ignore[arg-type]
            endpoint=settings.endpoint,
            export_interval_s=settings.export_interval_s,
            shutdown_timeout_s=10,
        )
    )
    torch.manual_seed(settings.seed)
    policy = Policy()
    optimizer = torch.optim.Adam(policy.parameters(), lr=settings.learning_rate)
    generator = torch.Generator().manual_seed(settings.seed * 1000 + rank + 1)
    rollout_generator = LaggedGenerator(policy, keep=8, switch_probability=0.25, generator=generator)
    rollout_generator.publish(0)
    truth = open(Path(settings.record_dir) / f"rank-{rank}.jsonl", "w", encoding="utf-8")
    for step in range(settings.steps):
        started = time.monotonic()
        telemetry.step(step)
        record = train_step(step, settings, policy, optimizer, rollout_generator, generator, telemetry)
        truth.write(json.dumps(record) + "\n")
        progress.put(1)
        time.sleep(max(0.0, settings.step_seconds - (time.monotonic() - started)))
    telemetry.step(settings.steps)
    truth.close()
    otel_rl.reset()
    dist.destroy_process_group()


def train_step(
    step: int,
    settings: JobSettings,
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    rollout_generator: LaggedGenerator,
    generator: torch.Generator,
    telemetry: otel_rl.Telemetry,
) -> dict[str, Any]:
    """Generate, reward, record telemetry, update; returns what was recorded (the ground truth)."""
    telemetry.set_phase("generate")
    prompts = sample_prompts(settings.prompts_per_rank, generator).repeat_interleave(settings.group_size, dim=0)
    rollouts = rollout_generator.generate(prompts, lag_for(step, settings.steps))
    telemetry.set_phase("score")
    by_fn = rewards(prompts, rollouts.tokens)
    lengths = response_lengths(rollouts.tokens)
    mask = torch.arange(MAX_TOKENS).expand_as(rollouts.tokens) < lengths.unsqueeze(1)
    advantages, zero_variance = group_advantages(by_fn["total"], settings.group_size)

    hard = prompts.sum(dim=1) >= 10  # two datasets: sums with a carry are harder
    for dataset, rows in (("carry", hard), ("no_carry", ~hard)):
        telemetry.record_rewards(by_fn["total"][rows], dataset=dataset)
        telemetry.record_staleness(rollouts.versions[rows], step, mask=mask[rows], dataset=dataset, phase="in_flight")
    for fn in REWARD_FNS:
        telemetry.record_rewards(by_fn[fn], fn=fn)
    telemetry.record_metric("grpo.zero_variance_groups", zero_variance.float())
    staleness = (step - rollouts.versions).masked_fill(~mask, -1)
    for row in range(prompts.shape[0]):
        telemetry.record_sample(
            otel_rl.EpisodeSample(
                episode_id=f"{settings.run_id}-{step}-r{torch.distributed.get_rank()}-{row}",
                policy_version=int(rollouts.versions[row, 0]),
                prompt=prompt_text(prompts[row]),
                response=response_text(rollouts.tokens[row], int(lengths[row])),
                target=str(int(prompts[row].sum())),
                reward=float(by_fn["total"][row]),
                reward_breakdown={fn: float(by_fn[fn][row]) for fn in REWARD_FNS},
                advantage=float(advantages[row]),
                staleness=int(staleness[row].max()),
                request_len=2,
                response_len=int(lengths[row]),
                dataset="carry" if bool(hard[row]) else "no_carry",
            )
        )

    telemetry.set_phase("train")
    loss, logprobs, entropy = grpo_loss(policy, rollouts, advantages, mask.float(), entropy_bonus=settings.entropy_bonus)
    telemetry.record_rollouts(
        mask=mask,
        advantages=advantages,
        response_lengths=lengths,
        entropy=entropy,
        logprobs=logprobs,
        inference_logprobs=rollouts.behaviour_logprobs,
        rewards=by_fn["total"],
        group_ids=torch.arange(prompts.shape[0]) // settings.group_size,
    )
    optimizer.zero_grad()
    loss.backward()
    telemetry.set_phase("sync")
    for parameter in policy.parameters():
        if parameter.grad is not None:
            dist.all_reduce(parameter.grad)
            parameter.grad /= settings.ranks
    optimizer.step()
    telemetry.record_metric("loss.policy", loss.item())
    rollout_generator.publish(step + 1)
    return {
        "step": step,
        "rewards": {fn: by_fn[fn].tolist() for fn in (*REWARD_FNS, "total")},
        "staleness": staleness[mask].tolist(),
        "zero_variance_groups": int(zero_variance.sum()),
        "solved_per_group": (by_fn["total"] >= 1.0).view(-1, settings.group_size).sum(dim=1).tolist(),
        "advantages": advantages.tolist(),
    }

