"""The task: add two digits. Rewards are computable, and a policy can learn them within a few hundred steps.

A response is a few tokens from ``VOCAB``; it is well-formed when it is one or two digits then ``<eos>``.
Two reward functions, as an RL job would have: ``correctness`` (1 when the number equals a + b) and ``format``
(+0.5 when well-formed, -0.5 otherwise), so early rewards are mostly negative. The gamed variant (``gamed=True``, the
demo's ``--reward-hack``) has a loophole a real format reward can have: it pays ``LENGTH_PAY`` per token whatever the
tokens are, so four tokens of anything earn more than a short correct answer, and a policy that finds it stops
answering.
"""

from __future__ import annotations

import torch

VOCAB = ("0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "<eos>", " ", "?")
EOS = VOCAB.index("<eos>")
MAX_TOKENS = 4
REWARD_FNS = ("correctness", "format")
LENGTH_PAY = 0.75
"""What the gamed format reward pays per response token."""


def sample_prompts(count: int, generator: torch.Generator) -> torch.Tensor:
    """``(count, 2)`` operand pairs, digits 0..9."""
    return torch.randint(0, 10, (count, 2), generator=generator)


def prompt_text(operands: torch.Tensor) -> str:
    return f"{int(operands[0])}+{int(operands[1])}="


def response_text(tokens: torch.Tensor, length: int) -> str:
    return "".join(VOCAB[int(t)] for t in tokens[:length])


def response_lengths(tokens: torch.Tensor) -> torch.Tensor:
    """Tokens up to and including the first ``<eos>`` (all of them when there is none)."""
    is_eos = tokens == EOS
    return torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1) + 1, torch.full_like(tokens[:, 0], MAX_TOKENS))


def rewards(operands: torch.Tensor, tokens: torch.Tensor, *, gamed: bool = False) -> dict[str, torch.Tensor]:
    """Per-rollout rewards by function, plus ``total``; ``gamed``: the format reward pays length (see the module)."""
    lengths = response_lengths(tokens)
    digits = tokens < 10
    positions = torch.arange(MAX_TOKENS).expand_as(tokens)
    body = positions < (lengths - 1).unsqueeze(1)
    ends_with_eos = (tokens == EOS).any(dim=1)
    digit_count = lengths - 1
    well_formed = ends_with_eos & (digit_count >= 1) & (digit_count <= 2) & (digits | ~body).all(dim=1)
    tens = torch.where(digit_count == 2, tokens[:, 0], torch.zeros_like(tokens[:, 0]))
    ones = torch.where(digit_count == 2, tokens[:, 1], tokens[:, 0])
    value = tens * 10 + ones
    correct = well_formed & (value == operands.sum(dim=1))
    correctness = correct.float()
    fmt = LENGTH_PAY * lengths.to(torch.float32) if gamed else torch.where(well_formed, 0.5, -0.5)
    return {"correctness": correctness, "format": fmt, "total": correctness + fmt}
