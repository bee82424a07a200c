"""A tiny autoregressive policy and a lagged rollout generator, so staleness is real and varies.

The generator samples with older snapshots of the policy, as an asynchronous actor does, and may switch to a newer
snapshot in the middle of a response (in-flight weight updates, as in PipelineRL): every token carries the version
that generated it. Training corrects for the lag with a clipped importance ratio (GRPO/PPO-style).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call

from demo.task import EOS, MAX_TOKENS, VOCAB

_BOS = len(VOCAB)


class Policy(nn.Module):
    """logits(token_t | a, b, t, token_{t-1}) from a two-layer MLP over summed embeddings."""

    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.operand_a = nn.Embedding(10, hidden)
        self.operand_b = nn.Embedding(10, hidden)
        self.position = nn.Embedding(MAX_TOKENS, hidden)
        self.previous = nn.Embedding(len(VOCAB) + 1, hidden)
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, len(VOCAB)))

    def forward(self, operands: torch.Tensor, position: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        x = self.operand_a(operands[:, 0]) + self.operand_b(operands[:, 1])
        return self.head(x + self.position(position) + self.previous(previous))

    def token_logprobs(self, operands: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities of ``tokens`` (teacher-forced) and the policy's entropy at each position,
        both of shape ``(rollouts, MAX_TOKENS)``."""
        rows = operands.shape[0]
        previous = torch.cat((torch.full((rows, 1), _BOS), tokens[:, :-1]), dim=1)
        logprobs, entropies = [], []
        for t in range(MAX_TOKENS):
            log_probs = torch.log_softmax(self(operands, torch.full((rows,), t), previous[:, t]), dim=-1)
            logprobs.append(log_probs.gather(1, tokens[:, t : t + 1]).squeeze(1))
            entropies.append(-(log_probs.exp() * log_probs).sum(dim=-1))
        return torch.stack(logprobs, dim=1), torch.stack(entropies, dim=1)


@dataclass(frozen=True)
class Rollouts:
    operands: torch.Tensor
    tokens: torch.Tensor
    behaviour_logprobs: torch.Tensor
    versions: torch.Tensor
    """The policy version that generated each token."""


class LaggedGenerator:
    """Samples rollouts from snapshots of the policy that lag the trainer by ``lag`` versions or more."""

    def __init__(self, policy: Policy, *, keep: int, switch_probability: float, generator: torch.Generator) -> None:
        self._policy = policy
        self._snapshots: collections.OrderedDict[int, dict[str, torch.Tensor]] = collections.OrderedDict()
        self._keep = keep
        self._switch = switch_probability
        self._generator = generator

    @property
    def held(self) -> int:
        """How many policy snapshots the generator holds (its weight buffer)."""
        return len(self._snapshots)

    @property
    def capacity(self) -> int:
        """How many snapshots it keeps at most."""
        return self._keep

    def publish(self, version: int) -> None:
        """Make the policy's current weights available to the generator as ``version``."""
        self._snapshots[version] = {k: v.detach().clone() for k, v in self._policy.state_dict().items()}
        while len(self._snapshots) > self._keep:
            self._snapshots.popitem(last=False)

    @torch.no_grad()
    def generate(self, operands: torch.Tensor, lag: int) -> Rollouts:
        """Sample one response per row; each starts ``lag`` versions (or fewer) behind the newest."""
        versions_available = list(self._snapshots)
        rows = operands.shape[0]
        start = max(0, len(versions_available) - 1 - lag)
        jitter = torch.randint(0, 2, (rows,), generator=self._generator)
        index = (start + jitter).clamp(max=len(versions_available) - 1)
        tokens = torch.zeros((rows, MAX_TOKENS), dtype=torch.long)
        logprobs = torch.zeros((rows, MAX_TOKENS))
        versions = torch.zeros((rows, MAX_TOKENS), dtype=torch.long)
        previous = torch.full((rows,), _BOS)
        for t in range(MAX_TOKENS):
            if t:
                switch = torch.rand(rows, generator=self._generator) < self._switch
                index = torch.where(switch, (index + 1).clamp(max=len(versions_available) - 1), index)
            logits = torch.empty((rows, len(VOCAB)))
            for slot in index.unique().tolist():
                rows_here = index == slot
                params = self._snapshots[versions_available[slot]]
                logits[rows_here] = functional_call(
                    self._policy,
                    params,
                    (operands[rows_here], torch.full((int(rows_here.sum()),), t), previous[rows_here]),
                )
            dist = torch.distributions.Categorical(logits=logits)
            token = dist.sample()
            tokens[:, t] = token
            logprobs[:, t] = dist.log_prob(token)
            versions[:, t] = torch.tensor(versions_available)[index]
            previous = token
        return Rollouts(operands, tokens, logprobs, versions)


def grpo_loss(
    policy: Policy,
    rollouts: Rollouts,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip: float = 0.2,
    entropy_bonus: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clipped importance-weighted policy gradient over masked tokens (GRPO with group-normalized advantages),
    plus an entropy bonus that keeps the policy exploring instead of collapsing onto one answer. Returns the loss
    and, detached, the trainer's per-token log-probabilities and entropy (what telemetry compares with the
    generator's)."""
    logprobs, entropy = policy.token_logprobs(rollouts.operands, rollouts.tokens)
    ratio = torch.exp(logprobs - rollouts.behaviour_logprobs)
    adv = advantages.unsqueeze(1)
    objective = torch.minimum(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv) + entropy_bonus * entropy
    loss = -(objective * mask).sum() / mask.sum().clamp(min=1)
    return loss, logprobs.detach(), entropy.detach()


def group_advantages(total: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages normalized within each prompt's group, and which groups had zero reward variance."""
    groups = total.view(-1, group_size)
    std = groups.std(dim=1, keepdim=True)
    advantages = (groups - groups.mean(dim=1, keepdim=True)) / (std + 1e-4)
    return advantages.reshape(-1), (std.squeeze(1) == 0)


__all__ = ["EOS", "LaggedGenerator", "Policy", "Rollouts", "group_advantages", "grpo_loss"]
