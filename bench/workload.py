"""Synthetic training-step tensors shaped like a real RL step (512 rollouts x 2048 tokens by default)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: The version the trainer is at; tokens were generated with versions ``CURRENT_VERSION - {0..8}``.
CURRENT_VERSION = 1_000
MAX_LAG = 8


@dataclass(frozen=True)
class Step:
    """One step's per-token tensors."""

    rewards: torch.Tensor
    """(rollouts, tokens) float32: each rollout's reward broadcast over its tokens."""
    mask: torch.Tensor
    """(rollouts, tokens) bool loss mask: each row a prefix of ones of random length (~70% ones overall)."""
    versions: torch.Tensor
    """(rollouts, tokens) int64 policy version each token was generated with."""
    per_rollout: torch.Tensor
    """(rollouts,) float32 rewards, one per rollout."""

    @property
    def tokens(self) -> int:
        return self.mask.numel()


def make_step(rollouts: int = 512, tokens: int = 2048, *, seed: int = 0) -> Step:
    """A step of ``rollouts`` x ``tokens``; the mask's row lengths are uniform in [0.4, 1.0] x tokens."""
    generator = torch.Generator().manual_seed(seed)
    per_rollout = torch.randn(rollouts, generator=generator)
    lengths = ((torch.rand(rollouts, generator=generator) * 0.6 + 0.4) * tokens).long().clamp(min=1)
    mask = torch.arange(tokens)[None, :] < lengths[:, None]
    versions = CURRENT_VERSION - torch.randint(0, MAX_LAG + 1, (rollouts, tokens), generator=generator)
    rewards = per_rollout[:, None].expand(rollouts, tokens).contiguous()
    return Step(rewards=rewards, mask=mask, versions=versions, per_rollout=per_rollout)


def flat_values(count: int, *, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` per-element float32 rewards (standard normal) and a bool mask with ~70% ones."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(count, generator=generator), torch.rand(count, generator=generator) < 0.7


def make_rollouts(step: Step, *, group_size: int = 8, seed: int = 2) -> dict[str, torch.Tensor]:
    """Every field of ``record_rollouts`` on the step's shape: per-rollout advantages, lengths, rewards and prompt
    groups of ``group_size``; per-token entropy and trainer / inference log-probabilities that differ slightly."""
    generator = torch.Generator().manual_seed(seed)
    rollouts, tokens = step.mask.shape
    inference = -torch.rand(rollouts, tokens, generator=generator) * 4
    return {
        "advantages": torch.randn(rollouts, generator=generator),
        "response_lengths": step.mask.sum(dim=1),
        "entropy": torch.rand(rollouts, tokens, generator=generator) * 3,
        "logprobs": inference + torch.randn(rollouts, tokens, generator=generator) * 0.05,
        "inference_logprobs": inference,
        "rewards": (torch.rand(rollouts, generator=generator) < 0.5).float(),
        "group_ids": torch.arange(rollouts) // group_size,
    }
