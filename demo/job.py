"""One rank of the demo job: GRPO on the addition task, with every statistic going out through otel_rl.

Ranks average gradients with gloo (the training's own collective); telemetry never uses a collective. Each step's
time is spent in phases (``telemetry.phase``): ``generate``, ``score``, ``train`` with the gradients' all-reduce
nested as ``allreduce``, ``sync`` (the weight sync: the new weights to the rollout generator), and ``wait_data`` for
the rest of the step's minimum time (idle); each step is a trace across the ranks in Jaeger and the collector turns
the phases into duration histograms. Tokens, samples, FLOPs and the generator's weight buffer feed the performance
row. Each rank also writes what it recorded to ``<record_dir>/rank-<r>.jsonl``, the ground truth the tests compare
against.
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
PEAK_FLOPS = 5e10
"""The peak FLOP/s the demo states for each rank (one CPU thread, order of magnitude): what its MFU is relative to."""
PHASES = ("generate", "score", "train", "allreduce", "sync", "wait_data")
"""The phases of every demo step, in order (``allreduce`` inside ``train``)."""


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
    group: str | None = None
    """The run's group (``TelemetryConfig.group``): demo runs of one group and different seeds compare as a band."""
    max_staleness: int = 5
    """Rollouts whose oldest token is more versions behind than this are dropped from the loss, as an async trainer
    drops data too stale to correct (``record_staleness_drops``): in the stall of the middle fifth, all of them."""
    gpu_hour_price: float = 2.0
    """The price per GPU-hour the demo states (each rank stands for one GPU): the cost panel, report and status."""
    reward_hack: bool = False
    """From ``hack_from`` of the steps on, the format reward pays length (``demo.task``, ``gamed``): the policy learns
    to be long instead of right, and the audit (RLRewardGaming, RLLengthRewardCorrelationRising, ...) should say so."""
    hack_from: float = 0.3
    runaway: bool = False
    """After ``steps`` steps, keep training while the rollout generator gets no new weights (a stuck weight sync), so
    staleness grows by one version a step, until the main process sets the ranks' stop event
    (``python -m demo --provoke-alert``: until RLStalenessHigh's notification arrived)."""


def lag_for(step: int, steps: int) -> int:
    """How far the generator runs behind: a slow wave of 0..3 versions, and a stall (6) in the middle fifth."""
    if 0.4 * steps <= step < 0.6 * steps:
        return 6
    return round(1.5 * (1 - math.cos(2 * math.pi * step / max(steps, 1))))


def _stopped(rank: int, stop: Any) -> bool:
    """Whether the main process asked the runaway to stop, as rank 0 saw it: broadcast, so that every rank leaves
    the loop at the same step (the gradients' all-reduce needs all of them)."""
    flag = torch.tensor([int(rank == 0 and stop.is_set())])
    dist.broadcast(flag, src=0)
    return bool(flag.item())


def run_rank(rank: int, settings: JobSettings, progress: Any, stop: Any = None) -> None:
    """Train for ``settings.steps`` steps as rank ``rank`` (then, with ``settings.runaway``, until ``stop`` is set,
    publishing no new weights to the generator); report each finished step on ``progress``."""
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
            flops_per_token=flops_per_token(Policy()),
            peak_flops=PEAK_FLOPS,
            gpus_per_rank=1.0,
            gpu_hour_price=settings.gpu_hour_price,
            group=settings.group,
        )
    )
    torch.manual_seed(settings.seed)
    policy = Policy()
    optimizer = torch.optim.Adam(policy.parameters(), lr=settings.learning_rate)
    generator = torch.Generator().manual_seed(settings.seed * 1000 + rank + 1)
    rollout_generator = LaggedGenerator(policy, keep=8, switch_probability=0.25, generator=generator)
    rollout_generator.publish(0)
    truth = open(Path(settings.record_dir) / f"rank-{rank}.jsonl", "w", encoding="utf-8")  # noqa: SIM115 - closed at the end of the run
    step = 0
    while step < settings.steps or (settings.runaway and not _stopped(rank, stop)):
        started = time.monotonic()
        stepped_ns = [time.time_ns()]
        telemetry.step(step)
        stepped_ns.append(time.time_ns())
        record = train_step(step, settings, policy, optimizer, rollout_generator, generator, telemetry)
        with telemetry.phase("wait_data"):
            time.sleep(max(0.0, settings.step_seconds - (time.monotonic() - started)))
        truth.write(json.dumps({**record, "stepped_ns": stepped_ns, "ended_ns": time.time_ns()}) + "\n")
        progress.put(1)
        step += 1
    telemetry.step(step)
    truth.close()
    otel_rl.reset()
    dist.destroy_process_group()


def flops_per_token(policy: Policy) -> float:
    """Training FLOPs per token: 6 per parameter (forward and backward), the usual estimate."""
    return 6.0 * sum(parameter.numel() for parameter in policy.parameters())


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
    prompts = sample_prompts(settings.prompts_per_rank, generator).repeat_interleave(settings.group_size, dim=0)
    telemetry.set_async_state(
        in_flight=prompts.shape[0], buffer_used=rollout_generator.held, buffer_capacity=rollout_generator.capacity
    )
    with telemetry.phase("generate"):
        rollouts = rollout_generator.generate(prompts, lag_for(step, settings.steps))
    telemetry.set_async_state(in_flight=0, queue_depth=prompts.shape[0])
    return _score_and_train(step, settings, policy, optimizer, rollout_generator, prompts, rollouts, telemetry)


def _score_and_train(
    step: int,
    settings: JobSettings,
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    rollout_generator: LaggedGenerator,
    prompts: torch.Tensor,
    rollouts: Any,
    telemetry: otel_rl.Telemetry,
) -> dict[str, Any]:
    """Score the step's rollouts and record them (phase ``score``), then train and publish the new weights."""
    with telemetry.phase("score"):
        by_fn = rewards(
            prompts, rollouts.tokens, gamed=settings.reward_hack and step >= settings.hack_from * settings.steps
        )
        lengths = response_lengths(rollouts.tokens)
        mask = torch.arange(MAX_TOKENS).expand_as(rollouts.tokens) < lengths.unsqueeze(1)
        advantages, zero_variance = group_advantages(by_fn["total"], settings.group_size)

        hard = prompts.sum(dim=1) >= 10  # two datasets: sums with a carry are harder
        for dataset, rows in (("carry", hard), ("no_carry", ~hard)):
            telemetry.record_rewards(by_fn["total"][rows], dataset=dataset)
            telemetry.record_staleness(
                rollouts.versions[rows], step, mask=mask[rows], dataset=dataset, phase="in_flight"
            )
        for fn in REWARD_FNS:
            telemetry.record_rewards(by_fn[fn], fn=fn)
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

    newest = rollouts.versions.masked_fill(~mask, -1).max(dim=1).values
    oldest = rollouts.versions.masked_fill(~mask, 2**62).min(dim=1).values
    spanned = (newest - oldest + 1).clamp(min=1)  # the versions a response's tokens were generated with (monotone)
    rollout_staleness = staleness.max(dim=1).values
    stale = rollout_staleness > settings.max_staleness
    if bool(stale.any()):
        telemetry.record_staleness_drops(response_lengths=lengths[stale], staleness=rollout_staleness[stale])
    with telemetry.phase("train"):
        loss, logprobs, entropy = grpo_loss(
            policy, rollouts, advantages, (mask & ~stale.unsqueeze(1)).float(), entropy_bonus=settings.entropy_bonus
        )
        telemetry.record_rollouts(
            mask=mask,
            advantages=advantages,
            response_lengths=lengths,
            entropy=entropy,
            logprobs=logprobs,
            inference_logprobs=rollouts.behaviour_logprobs,
            rewards=by_fn["total"],
            group_ids=torch.arange(prompts.shape[0]) // settings.group_size,
            versions_spanned=spanned,
            reward_breakdown={fn: by_fn[fn] for fn in REWARD_FNS},
        )
        optimizer.zero_grad()
        loss.backward()
        with telemetry.phase("allreduce"):
            for parameter in policy.parameters():
                if parameter.grad is not None:
                    dist.all_reduce(parameter.grad)
                    parameter.grad /= settings.ranks
        optimizer.step()
    tokens = int(mask.sum())
    telemetry.record_tokens(generated=tokens, trained=tokens, samples=prompts.shape[0])
    telemetry.set_async_state(queue_depth=0)
    telemetry.record_metric("loss.policy", loss.item())
    if step < settings.steps:  # in the runaway the weight sync is stuck: staleness grows a version a step
        with telemetry.phase("sync"):  # the weight sync: the new weights to the rollout generator
            rollout_generator.publish(step + 1)
    return {
        "step": step,
        "rewards": {fn: by_fn[fn].tolist() for fn in (*REWARD_FNS, "total")},
        "staleness": staleness[mask].tolist(),
        "zero_variance_groups": int(zero_variance.sum()),
        "solved_per_group": (by_fn["total"] >= 1.0).view(-1, settings.group_size).sum(dim=1).tolist(),
        "advantages": advantages.tolist(),
        "tokens": tokens,
        "dropped_stale": int(stale.sum()),
    }
