"""Joint statistics of one step's rollouts: the co-moments of a per-rollout quantity with the total reward.

An audit reads rewards together with what earned them: whether longer responses are paid more (the correlation of
response length with the reward), and which reward function moves the total (each function's covariance with the
total, whose sum over functions that add up to the total is the total's variance). Those need sums over the same
rollouts, ``n, Σx, Σy, Σx², Σy², Σxy``, which add across ranks and steps, so the collector merges them exactly and
Prometheus computes any window's correlation from their increases. Signed sums are kept as two monotone parts
(``.positive`` and ``.negative``), as for rewards, so every stream is a counter.
"""

from __future__ import annotations

from typing import Any

import torch

from otel_rl._record.inputs import BadInput, as_values

MOMENTS: tuple[str, ...] = (
    "n",
    "x.positive",
    "x.negative",
    "y.positive",
    "y.negative",
    "xx",
    "yy",
    "xy.positive",
    "xy.negative",
)
"""The ``rl.joint.moment`` of each sum, in the order :func:`comoments` packs them."""


def comoments(
    x: Any, total: Any, offered: torch.Tensor | None, *, argument: str, nonnegative: bool = False
) -> torch.Tensor:
    """The sums of :data:`MOMENTS` over the offered rollouts where ``x`` and ``total`` are both usable, then how many
    offered rollouts were left out: one float64 tensor on the values' device (no copy to the host).

    ``x`` and ``total`` are one value per rollout; ``offered`` (rollouts with a selected token, or None for all)
    has their shape. A rollout is left out when either value is not finite (or, with ``nonnegative``, ``x`` is
    negative: a length). Raises :class:`BadInput` when the shapes differ or either is not one value per rollout."""
    xs = as_values(x, argument=argument)
    ys = as_values(total, argument="rewards")
    if xs.tensor.dim() != 1 or xs.tensor.shape != ys.tensor.shape:
        raise BadInput(
            "shape",
            f'"{argument}" and "rewards" must both be one value per rollout, got {tuple(xs.tensor.shape)} and '
            f"{tuple(ys.tensor.shape)}",
        )
    device = xs.tensor.device
    a = xs.tensor.to(torch.float64)
    b = ys.tensor.to(device=device, dtype=torch.float64)
    offer = torch.ones_like(a, dtype=torch.bool) if offered is None else offered.to(device=device, dtype=torch.bool)
    if offer.shape != a.shape:
        raise BadInput("shape", f'"{argument}" has {a.shape[0]} rollouts, the mask {offer.shape[0]}')
    keep = offer & torch.isfinite(a) & torch.isfinite(b)
    for usable in (xs.usable, ys.usable):
        if usable is not None:
            keep &= usable.to(device)
    if nonnegative:
        keep &= a >= 0
    a = torch.where(keep, a, 0.0)
    b = torch.where(keep, b, 0.0)
    ab = a * b
    return torch.stack(
        (
            keep.sum().to(torch.float64),
            a.clamp(min=0).sum(),
            (-a).clamp(min=0).sum(),
            b.clamp(min=0).sum(),
            (-b).clamp(min=0).sum(),
            (a * a).sum(),
            (b * b).sum(),
            ab.clamp(min=0).sum(),
            (-ab).clamp(min=0).sum(),
            (offer & ~keep).sum().to(torch.float64),
        )
    )
