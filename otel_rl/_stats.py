"""Vectorized statistics of one record call, on the tensor's own device, with one device-to-host transfer.

Each ``summarize_*`` function computes every statistic of a call (count, sum, extremes, bucket counts, what was
rejected) with tensor operations only, packs them into one small tensor and copies it to the host once. No Python
loop ever touches the values. Bad parts of the input (NaN, inf, masked-out, negative staleness) are excluded and
counted, never folded in.

Speed (see docs/performance.md): on the CPU, comparisons producing bool tensors, ``where`` and ``isfinite`` cost
several times an arithmetic pass, so selection is done by arithmetic: masks become 0/1 factors, rejected rewards
are parked at the dtype's largest value (neutral for the minimum, one known bucket), staleness becomes one int64
code per element (0 masked, 1 future, staleness + 2) whose small histogram gives every count. float32 rewards are
compared with float32 bounds rounded down, which gives the float64 answer; sums still accumulate in float64.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

#: Integer bucket bounds up to this value are histogrammed by ``bincount`` plus a lookup table, which is far
#: faster than ``bucketize``; larger bounds fall back to ``bucketize``.
_BINCOUNT_LIMIT = 1 << 16
_INT64_MAX = torch.iinfo(torch.int64).max
#: Float dtypes computed in natively (exactly: sums accumulate in float64); others are widened first, exactly.
_NATIVE_FLOATS = (torch.float32, torch.float64)
_WORKING_FLOAT = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


class BadInput(ValueError):
    """A whole record call is unusable (wrong type, shape or dtype); ``reason`` names the rule."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Summary:
    """Host-side statistics of the accepted values of one call. Extremes are None when nothing was accepted."""

    count: int
    total: float
    """Sum of accepted values; an exact int for staleness."""
    squares: float
    positive: float
    negative: float
    minimum: float | None
    maximum: float | None
    bucket_counts: tuple[int, ...]
    rejected: dict[str, int] = field(default_factory=dict)


def as_tensor(values: Any, *, setting: str) -> torch.Tensor:
    """A tensor view of a torch tensor, numpy array, sequence or scalar (no copy for tensors and arrays)."""
    if isinstance(values, torch.Tensor):
        return values.detach()
    if isinstance(values, np.ndarray):
        if values.dtype == object or values.dtype.kind in "USV":
            raise BadInput("dtype", f'"{setting}" must be numeric, got an array of dtype {values.dtype}')
        return torch.from_numpy(np.ascontiguousarray(values))
    if isinstance(values, (bool, int, float)) or isinstance(values, Sequence) and not isinstance(values, (str, bytes)):
        try:
            return torch.as_tensor(values)
        except (TypeError, ValueError, RuntimeError) as error:
            raise BadInput("type", f'"{setting}" must be numbers, got {type(values).__name__}: {error}') from None
    raise BadInput("type", f'"{setting}" must be a tensor, array, sequence or number, got {type(values).__name__}')


def _selection(values: torch.Tensor, mask: Any, *, setting: str) -> torch.Tensor | None:
    if mask is None:
        return None
    selected = as_tensor(mask, setting="mask")
    if selected.shape != values.shape:
        raise BadInput(
            "shape", f'"mask" must have the shape of "{setting}" {tuple(values.shape)}, got {tuple(selected.shape)}'
        )
    selected = selected.to(device=values.device)
    return selected if selected.dtype == torch.bool else selected != 0


class _Scratch:
    """Reusable work buffers, so a large call does not allocate (and page-fault in) fresh memory every time.

    On the CPU, tensors of several MB come from ``mmap`` and are returned on free: a fresh 8 MB int64 tensor costs
    more in page faults than the pass that fills it. Buffers up to ``limit`` elements are kept (at most
    ``limit * 8`` bytes each); larger calls allocate. Callers hold ``lock`` while they use what ``take`` returned.
    """

    def __init__(self, limit: int = 1 << 22) -> None:
        self.lock = threading.Lock()
        self._limit = limit
        self._buffers: dict[tuple[int, torch.dtype, torch.device], torch.Tensor] = {}

    def take(self, count: int, size: int, dtype: torch.dtype, device: torch.device) -> list[torch.Tensor]:
        """``count`` distinct tensors of ``size`` elements (contents undefined)."""
        if size > self._limit:
            return [torch.empty(size, dtype=dtype, device=device) for _ in range(count)]
        out = []
        for slot in range(count):
            buffer = self._buffers.get((slot, dtype, device))
            if buffer is None or buffer.numel() < size:
                buffer = self._buffers[(slot, dtype, device)] = torch.empty(size, dtype=dtype, device=device)
            out.append(buffer[:size])
        return out


def _bincount(index: torch.Tensor, size: int) -> torch.Tensor:
    """int64 counts of the values of ``index``, all in ``range(size)``.

    ``bincount`` on the CPU (the fastest histogram there); ``scatter_add_`` elsewhere, because CUDA's ``bincount``
    reads the maximum back to the host, a second device-to-host synchronization.
    """
    if index.device.type == "cpu":
        return torch.bincount(index, minlength=size)
    wide = index.to(torch.int64)
    return torch.zeros(size, dtype=torch.int64, device=index.device).scatter_add_(0, wide, torch.ones_like(wide))


class RewardSummarizer:
    """Summarizes rewards into the explicit buckets ``bounds`` (upper-inclusive, as OpenTelemetry defines them).

    Shapes: ``(n,)`` or a scalar is one reward per rollout; ``(rollouts, tokens)`` is the per-token form in which
    each rollout's reward is broadcast over its tokens (as Fast-LLM carries it): each rollout counts once, with the
    value at its first unmasked token, and rollouts with no unmasked token are skipped.

    >>> s = RewardSummarizer((0.0, 1.0)).summarize(torch.tensor([-1.0, 0.5, float("nan"), 2.0]), None)
    >>> (s.count, s.total, s.minimum, s.maximum, s.bucket_counts, s.rejected)
    (3, 1.5, -1.0, 2.0, (1, 1, 1), {'nonfinite': 1})
    """

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bound_values = tuple(float(b) for b in bounds)
        self._bounds = torch.tensor(self._bound_values, dtype=torch.float64)
        self._on_device: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}

    def _bounds_on(self, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """The bounds in ``dtype``, rounded down, so that ``x <= bound`` gives the float64 answer for every x."""
        key = (device, dtype)
        if key not in self._on_device:
            exact = self._bounds.numpy()
            if dtype == torch.float32:
                rounded = exact.astype(np.float32)
                rounded = np.where(rounded > exact, np.nextafter(rounded, np.float32(-np.inf)), rounded)
                self._on_device[key] = torch.from_numpy(rounded.astype(np.float32)).to(device)
            else:
                self._on_device[key] = self._bounds.to(device)
        return self._on_device[key]

    def _bucket_of_largest(self, dtype: torch.dtype) -> int:
        """The bucket of the largest finite value of ``dtype``, where rejected elements are parked."""
        return bisect.bisect_left(self._bound_values, float(torch.finfo(dtype).max))

    def summarize(self, values: Any, mask: Any, *, setting: str = "rewards") -> Summary:
        rewards = as_tensor(values, setting=setting)
        if rewards.dtype == torch.bool or rewards.is_complex():
            raise BadInput("dtype", f'"{setting}" must be real numbers, got dtype {rewards.dtype}')
        selected = _selection(rewards, mask, setting=setting)
        if rewards.dim() > 2:
            raise BadInput("shape", f'"{setting}" must have 0, 1 or 2 dimensions, got shape {tuple(rewards.shape)}')
        if rewards.dim() == 2:
            rewards, selected = _first_unmasked(rewards, selected)
        rewards = rewards.reshape(-1)
        buckets = len(self._bounds) + 1
        if rewards.numel() == 0:
            return Summary(0, 0.0, 0.0, 0.0, 0.0, None, None, (0,) * buckets)
        x = rewards if rewards.dtype in _NATIVE_FLOATS else rewards.to(_WORKING_FLOAT.get(rewards.dtype, torch.float64))
        # Float arithmetic only: comparisons and ``where`` on bool tensors are several times slower on CPU.
        # ``bad`` is 1 where x is NaN or +-inf (x - x is NaN exactly there), ``weight`` 1 where the value is kept.
        bad = torch.nan_to_num(x - x, nan=1.0)
        if selected is not None:
            bad.mul_(selected.reshape(-1).view(torch.uint8).to(x.dtype))
            weight = selected.reshape(-1).view(torch.uint8).to(x.dtype).sub_(bad)
        else:
            weight = torch.ones_like(x).sub_(bad)
        kept = torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0).mul_(weight)
        wide = kept.to(torch.float64)
        largest = torch.finfo(x.dtype).max
        # Rejected elements become +largest (for the min) and -largest (for the max): neutral, never selected
        # over an accepted value, and no bool tensor is materialized. In ``high`` they all land in one known
        # bucket, whose count is corrected by the number rejected.
        rejected_weight = 1.0 - weight
        high = torch.add(kept, rejected_weight, alpha=largest)
        low = torch.add(kept, rejected_weight, alpha=-largest)
        counts = _bincount(torch.bucketize(high, self._bounds_on(x.device, x.dtype)), buckets)
        count = weight.sum(dtype=torch.float64)
        counts[self._bucket_of_largest(x.dtype)] -= x.numel() - count.to(torch.int64)
        packed = torch.cat(
            (
                torch.stack(
                    (
                        count,
                        wide.clamp(min=0).sum(),
                        -wide.clamp(max=0).sum(),
                        torch.dot(wide, wide),
                        high.min().to(torch.float64),
                        low.max().to(torch.float64),
                        bad.sum(dtype=torch.float64),
                    )
                ),
                counts.to(torch.float64),
            )
        ).cpu()
        head = packed[:7].tolist()
        count, pos, neg, squares, minimum, maximum, nonfinite = head
        rejected = {"nonfinite": int(nonfinite)} if nonfinite else {}
        return Summary(
            count=int(count),
            total=pos - neg,
            squares=squares,
            positive=pos,
            negative=neg,
            minimum=minimum if count else None,
            maximum=maximum if count else None,
            bucket_counts=tuple(int(c) for c in packed[7:].tolist()),
            rejected=rejected,
        )


def _first_unmasked(rewards: torch.Tensor, selected: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One reward per row of a per-token ``(rollouts, tokens)`` tensor, and whether the row had any token."""
    if rewards.shape[1] == 0:
        return rewards.new_empty((0,)), None
    if selected is None:
        return rewards[:, 0], None
    # max along a row returns the index of its first maximum, and the maximum itself says whether there was one.
    present, first = selected.view(torch.uint8).max(dim=1, keepdim=True)
    return rewards.gather(1, first).squeeze(1), present.squeeze(1).view(torch.bool)


class StalenessSummarizer:
    """Summarizes staleness = ``current_version - versions`` in exact int64 arithmetic on the tensor's device.

    Negative staleness (a version from the future) and non-integral float versions are rejected and counted.

    >>> s = StalenessSummarizer((0, 1, 4)).summarize(torch.tensor([10, 9, 3, 11]), 10, None)
    >>> (s.count, s.total, s.minimum, s.maximum, s.bucket_counts, s.rejected)
    (3, 8, 0, 7, (1, 1, 0, 1), {'negative': 1})
    """

    def __init__(self, bounds: Sequence[int]) -> None:
        self._bounds = torch.tensor(bounds, dtype=torch.int64)
        self._cap = int(bounds[-1]) + 1
        self._use_bincount = self._cap <= _BINCOUNT_LIMIT
        # lookup[s] is the bucket of integer staleness s, for 0 <= s <= cap (cap means "above every bound").
        self._lookup = torch.bucketize(torch.arange(self._cap + 1, dtype=torch.int64), self._bounds)
        self._on_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        self._scratch = _Scratch()

    def _tables_on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if device not in self._on_device:
            self._on_device[device] = (self._bounds.to(device), self._lookup.to(device))
        return self._on_device[device]

    def summarize(self, versions: Any, current_version: int, mask: Any, *, setting: str = "versions") -> Summary:
        generated = as_tensor(versions, setting=setting)
        if generated.dtype == torch.bool or generated.is_complex():
            raise BadInput("dtype", f'"{setting}" must be integer versions, got dtype {generated.dtype}')
        selected = _selection(generated, mask, setting=setting)
        buckets = len(self._bounds) + 1
        generated = generated.reshape(-1)
        if generated.numel() == 0:
            return Summary(0, 0.0, 0.0, 0.0, 0.0, None, None, (0,) * buckets)
        keep = selected.reshape(-1) if selected is not None else None
        nonintegral: torch.Tensor | None = None
        if generated.is_floating_point():
            integral = torch.isfinite(generated) & (generated == torch.trunc(generated))
            nonintegral = (~integral if keep is None else keep & ~integral).sum()
            keep = integral if keep is None else keep & integral
            generated = torch.where(integral, generated, torch.zeros_like(generated))
        generated = generated.to(torch.int64)
        # One int64 code per element, by arithmetic only (no bool tensors, no where): 0 masked out, 1 from the
        # future (negative staleness), staleness + 2 when accepted.
        with self._scratch.lock:
            code, shifted = self._scratch.take(2, generated.numel(), torch.int64, generated.device)
            torch.sub(generated, current_version + 2, out=code).neg_().clamp_(min=1)
            if keep is not None:
                code.mul_(keep.view(torch.uint8))  # twice as fast as masked_fill_ with a negated mask
            total, maximum = code.sum(), code.max()
            # code - 2 is -2 (masked), -1 (future) or the staleness; & INT64_MAX sends -2 and -1 to the top of the
            # range, where they never win the minimum.
            minimum = torch.sub(code, 2, out=shifted).bitwise_and_(_INT64_MAX).min()
            packed = self._pack(code, shifted, total, maximum, minimum, nonintegral)
        count, total, minimum, maximum, negative, nonint = packed[:6].tolist()
        rejected = {reason: n for reason, n in (("negative", negative), ("nonintegral", nonint)) if n}
        return Summary(
            count=count,
            total=total,
            squares=0.0,
            positive=total,
            negative=0.0,
            minimum=minimum if count else None,
            maximum=maximum if count else None,
            bucket_counts=tuple(packed[6:].tolist()),
            rejected=rejected,
        )

    def _pack(
        self,
        code: torch.Tensor,
        shifted: torch.Tensor,
        total: torch.Tensor,
        maximum: torch.Tensor,
        minimum: torch.Tensor,
        nonintegral: torch.Tensor | None,
    ) -> torch.Tensor:
        """Bucket counts from ``code`` (clobbered) and every statistic, packed and copied to the host once."""
        buckets = len(self._bounds) + 1
        bounds, lookup = self._tables_on(code.device)
        if not self._use_bincount:
            # Masked and future elements land in bucket 0 (staleness 0) and are taken out of it below.
            counts = _bincount(torch.bucketize(shifted.copy_(code).sub_(2).clamp_(min=0), bounds), buckets)
        top = self._cap + 2 if self._use_bincount else 2
        fine = _bincount(code.clamp_(max=top), top + 1)
        count = fine[2:].sum()
        if self._use_bincount:
            counts = torch.zeros(buckets, dtype=torch.int64, device=code.device).index_add_(0, lookup, fine[2:])
        else:
            counts[0] -= fine[0] + fine[1]
        return torch.cat(
            (
                torch.stack(
                    (
                        count,
                        total - 2 * count - fine[1],
                        minimum,
                        maximum - 2,
                        fine[1],
                        code.new_zeros(()) if nonintegral is None else nonintegral,
                    )
                ),
                counts,
            )
        ).cpu()
