"""Statistics of one record call: validation, then one pass on the CPU or tensor operations on the device.

Each summarizer validates the input (type, dtype, shape, mask), then computes every statistic of the call (count,
sums, extremes, bucket counts, what was rejected) without a Python loop over values: on the CPU with the compiled
one-pass kernels of ``otel_rl._record.kernels``; on other devices (GPUs) with tensor operations on the device, packed
into one small tensor and copied to the host once. Bad parts of the input (NaN, inf, masked-out, negative staleness)
are excluded and counted, never folded in. Both paths give the same results (tests/unit/test_stats.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from otel_rl._record import kernels
from otel_rl._record.buckets import ExplicitLayout, Layout
from otel_rl._record.inputs import BadInput, Reason, as_mask, as_values, combined, numpy_view

#: Integer bucket bounds up to this value are histogrammed by ``bincount`` plus a lookup table, which is far
#: faster than ``bucketize``; larger bounds fall back to ``bucketize``.
_BINCOUNT_LIMIT = 1 << 16
#: Staleness below this is counted per integer and folded into exponential buckets with a lookup table.
_EXPONENTIAL_TABLE = 4096
_INT64_MAX = torch.iinfo(torch.int64).max
_WIDE_UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)
_NO_KEEP = np.empty((0, 0), dtype=np.bool_)


@dataclass(frozen=True)
class Statistics:
    """Host-side statistics of the accepted values of one record call: everything a mergeable distribution needs.
    Extremes are None when nothing was accepted; ``bucket_counts[i]`` counts the values in slot ``i`` of
    ``layout`` (see ``otel_rl._record.buckets``)."""

    layout: Layout
    count: int
    total: float
    """Sum of accepted values; an exact int for staleness."""
    squares: float
    positive: float
    negative: float
    minimum: float | None
    maximum: float | None
    bucket_counts: np.ndarray
    """int64, ``layout.size`` slots."""
    rejected: dict[Reason, int] = field(default_factory=dict)
    """Values left out as bad input, by reason."""
    unversioned: int = 0
    """Staleness only: tokens without a version (a negative version, NaN or None), which are not lag 0 and not bad
    input either (``rl.staleness.unversioned``)."""


def with_dropped(statistics: Statistics, dropped: dict[Reason, int]) -> Statistics:
    """``statistics`` with the values the input conversion dropped counted among the rejected."""
    if not dropped:
        return statistics
    rejected = dict(statistics.rejected)
    for reason, n in dropped.items():
        rejected[reason] = rejected.get(reason, 0) + n
    return Statistics(**{**vars(statistics), "rejected": rejected})


def _histogram(index: torch.Tensor, accepted: torch.Tensor, buckets: int) -> torch.Tensor:
    """Counts of ``index`` values in ``range(buckets)`` over the accepted elements."""
    parked = torch.where(accepted, index, torch.full_like(index, buckets))
    return _bincount(parked, buckets + 1)[:buckets]


def _bincount(index: torch.Tensor, size: int) -> torch.Tensor:
    """int64 counts of the values of ``index``, all in ``range(size)``.

    ``bincount`` on the CPU (the fastest histogram there); ``scatter_add_`` elsewhere, because CUDA's ``bincount``
    reads the maximum back to the host, a second device-to-host synchronization.
    """
    if index.device.type == "cpu":
        return torch.bincount(index, minlength=size)
    wide = index.to(torch.int64)
    return torch.zeros(size, dtype=torch.int64, device=index.device).scatter_add_(0, wide, torch.ones_like(wide))


class ValueSummarizer:
    """Summarizes signed values (rewards, ``record_metric`` values) into the buckets of ``layout``.

    Shapes: ``(n,)`` or a scalar is one value per rollout; ``(rollouts, tokens)`` is the per-token form in which
    each rollout's reward is broadcast over its tokens (as Fast-LLM carries it): each rollout counts once, with the
    value at its first unmasked token, and rollouts with no unmasked token are skipped.

    >>> s = ValueSummarizer(ExplicitLayout((0.0, 1.0))).summarize(torch.tensor([-1.0, 0.5, float("nan"), 2.0]), None)
    >>> (s.count, s.total, s.minimum, s.maximum, s.bucket_counts.tolist(), s.rejected)
    (3, 1.5, -1.0, 2.0, [1, 1, 1], {'nonfinite': 1})
    """

    kernel_devices: frozenset[str] = frozenset({"cpu"})
    """Devices summarized by the compiled one-pass kernels; tensors elsewhere use torch operations on the device."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._arguments = kernels.LayoutArguments.of(layout)

    def summarize(self, values: Any, mask: Any, *, argument: str = "rewards", per_token: bool = False) -> Statistics:
        """The statistics of ``values`` where ``mask`` is set. A 2-D input counts once per rollout (its first
        unmasked token) unless ``per_token``, which counts every unmasked element."""
        pending = self.prepare(values, mask, argument=argument, per_token=per_token)
        return pending if isinstance(pending, Statistics) else self.unpack(pending.cpu())

    def prepare(
        self, values: Any, mask: Any, *, argument: str = "rewards", per_token: bool = False
    ) -> Statistics | torch.Tensor:
        """Validate and summarize: the statistics themselves on the CPU; on other devices a packed float64 tensor
        still on the device, for :meth:`unpack` after the caller's one copy to the host (so a caller summarizing
        several tensors copies once). With ``per_token`` any number of dimensions is taken, every element a value;
        otherwise 0, 1 or 2 (see the class).

        Values the input conversion dropped (``None`` or a non-number inside a list) are counted among the rejected
        on the CPU path; on other devices the input was a device tensor, which has none."""
        converted = as_values(values, argument=argument)
        rewards = converted.tensor
        selected = combined(converted.usable, as_mask(mask, rewards, argument=argument))
        if rewards.dim() > 2 and not per_token:
            raise BadInput("shape", f'"{argument}" must have 0, 1 or 2 dimensions, got shape {tuple(rewards.shape)}')
        if per_token:
            rewards = rewards.reshape(-1)
            selected = selected.reshape(-1) if selected is not None else None
        if rewards.device.type in self.kernel_devices:
            return with_dropped(self._summarize_on_cpu(rewards, selected), dict(converted.dropped))
        if rewards.dim() == 2:
            rewards, selected = first_unmasked(rewards, selected)
        x = rewards.reshape(-1).to(torch.float64)
        selected = selected.reshape(-1) if selected is not None else torch.ones_like(x, dtype=torch.bool)
        if x.numel() == 0:  # one unselected placeholder: reductions need an element, and it counts nothing
            x, selected = x.new_zeros(1), selected.new_zeros(1)
        finite = torch.isfinite(x)
        accepted = finite & selected
        kept = torch.where(accepted, x, torch.zeros_like(x))
        return torch.cat(
            (
                torch.stack(
                    (
                        accepted.sum().to(torch.float64),
                        kept.clamp(min=0).sum(),
                        -kept.clamp(max=0).sum(),
                        (kept * kept).sum(),
                        torch.where(accepted, x, torch.full_like(x, math.inf)).min(),
                        torch.where(accepted, x, torch.full_like(x, -math.inf)).max(),
                        (selected & ~finite).sum().to(torch.float64),
                    )
                ),
                _histogram(self.layout.slots(kept), accepted, self.layout.size).to(torch.float64),
            )
        )

    def unpack(self, packed: torch.Tensor) -> Statistics:
        """The statistics of a packed tensor from :meth:`prepare`, once on the host."""
        count, positive, negative, squares, minimum, maximum, nonfinite = packed[:7].tolist()
        bucket_counts = packed[7:].numpy().astype(np.int64)
        return _value_statistics(
            self.layout, int(count), positive, negative, squares, minimum, maximum, int(nonfinite), bucket_counts
        )

    def warm_up(self) -> None:
        """Compile the CPU kernels for the common dtypes now (once per machine: numba caches them), so the first
        record call of a training loop does not pay for it. Bools too: ``pred == target`` is a common reward. With
        and without a mask: the kernels are compiled for each (a run-time flag would make their loops branch)."""
        for dtype in (torch.float32, torch.float64, torch.bool):
            for shape in ((1,), (1, 1)):
                self.summarize(torch.zeros(shape, dtype=dtype), torch.ones(shape, dtype=torch.bool))
                self.summarize(torch.zeros(shape, dtype=dtype), None)

    def _summarize_on_cpu(self, rewards: torch.Tensor, selected: torch.Tensor | None) -> Statistics:
        """The same statistics in one compiled pass over values and mask together (see ``otel_rl._record.kernels``)."""
        values = numpy_view(rewards)
        keep = None if selected is None else selected.numpy()
        if values.ndim == 2:
            first = np.zeros(values.shape[0], dtype=np.float64)
            present = np.zeros(values.shape[0], dtype=np.bool_)
            kernels.first_unmasked(values, _NO_KEEP if keep is None else keep, keep is not None, first, present)
            values, keep = first, present
        keep = None if keep is None else keep.reshape(-1)
        return statistics_of(self.layout, kernels.summarize_values(self._arguments, values.reshape(-1), keep))


def statistics_of(layout: Layout, summary: kernels.Summary) -> Statistics:
    """The statistics of a kernel's summary of signed values in ``layout``."""
    return _value_statistics(
        layout,
        summary.count,
        summary.positive,
        summary.negative,
        summary.squares,
        summary.minimum,
        summary.maximum,
        summary.nonfinite,
        summary.counts,
    )


def _fold(
    fine: np.ndarray, above: tuple[int, int, int, int], lookup: np.ndarray, counts: np.ndarray
) -> tuple[int, int, int, int]:
    """Count, exact sum and extremes of the staleness counted per integer in ``fine`` (``fine[s]``: how many were
    ``s``) and of the ``above`` ones (count, sum, min, max); ``fine`` is added into ``counts`` at ``lookup[s]``."""
    used = np.flatnonzero(fine)
    np.add.at(counts, lookup[used], fine[used])
    above_count, above_total, above_minimum, above_maximum = above
    count = int(fine[used].sum()) + above_count
    total = int((fine[used] * used).sum()) + above_total
    minimum = int(used[0]) if used.size else above_minimum
    maximum = above_maximum if above_count else int(used[-1]) if used.size else -1
    return count, total, minimum, maximum


def _empty(layout: Layout) -> Statistics:
    return Statistics(layout, 0, 0.0, 0.0, 0.0, 0.0, None, None, np.zeros(layout.size, dtype=np.int64))


def _value_statistics(
    layout: Layout,
    count: int,
    positive: float,
    negative: float,
    squares: float,
    minimum: float,
    maximum: float,
    nonfinite: int,
    bucket_counts: np.ndarray,
) -> Statistics:
    return Statistics(
        layout=layout,
        count=count,
        total=positive - negative,
        squares=squares,
        positive=positive,
        negative=negative,
        minimum=minimum if count else None,
        maximum=maximum if count else None,
        bucket_counts=bucket_counts,
        rejected={"nonfinite": nonfinite} if nonfinite else {},
    )


def first_unmasked(rewards: torch.Tensor, selected: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One reward per row of a per-token ``(rollouts, tokens)`` tensor, and whether the row had any token."""
    if rewards.shape[1] == 0:
        return rewards.new_empty((0,)), None
    if selected is None:
        return rewards[:, 0], None
    # max along a row returns the index of its first maximum, and the maximum itself says whether there was one.
    present, first = selected.view(torch.uint8).max(dim=1, keepdim=True)
    return rewards.gather(1, first).squeeze(1), present.squeeze(1).view(torch.bool)


class StalenessSummarizer:
    """Summarizes staleness = ``current_version - versions`` in exact int64 arithmetic on the tensor's device, into
    the buckets of ``layout``.

    Negative staleness (a version from the future) and non-integral float versions are rejected and counted;
    tokens without a version (a negative version, NaN, or None in a list) are counted as ``unversioned``, never as
    lag 0.

    >>> s = StalenessSummarizer(ExplicitLayout((0, 1, 4))).summarize([10, 9, 3, 11, None, -1], 10, None)
    >>> (s.count, s.total, s.minimum, s.maximum, s.bucket_counts.tolist(), s.rejected, s.unversioned)
    (3, 8, 0, 7, [1, 1, 0, 1], {'negative': 1}, 2)
    """

    kernel_devices: frozenset[str] = frozenset({"cpu"})
    """Devices summarized by the compiled one-pass kernel; tensors elsewhere use torch operations on the device."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        # Small staleness is counted per integer, then folded into slots with ``lookup`` (lookup[s] = slot of s).
        # With explicit bounds everything above the last bound shares a slot, so the table ends there; the
        # device path uses it too while it is small enough for bincount.
        explicit = isinstance(layout, ExplicitLayout)
        table = int(layout.bounds[-1]) + 2 if isinstance(layout, ExplicitLayout) else _EXPONENTIAL_TABLE
        self._table_on_device = explicit and table <= _BINCOUNT_LIMIT
        self._lookup = layout.slots(torch.arange(min(table, _BINCOUNT_LIMIT), dtype=torch.float64))
        self._cpu_lookup = self._lookup.numpy()
        self._arguments = kernels.LayoutArguments.of(layout)
        self._on_device: dict[torch.device, torch.Tensor] = {}

    def _lookup_on(self, device: torch.device) -> torch.Tensor:
        if device not in self._on_device:
            self._on_device[device] = self._lookup.to(device)
        return self._on_device[device]

    def summarize(self, versions: Any, current_version: int, mask: Any, *, argument: str = "versions") -> Statistics:
        """The staleness of ``versions`` (any shape) behind ``current_version`` (an int >= 0) where ``mask`` is set.

        Float versions must be integral (``nonintegral``) and below 2**63 in magnitude (``range``); NaN, a negative
        version and a ``None`` inside a list are unversioned."""
        converted = as_values(versions, argument=argument, integers=True)
        generated = converted.tensor
        selected = combined(converted.usable, as_mask(mask, generated, argument=argument))
        dropped = dict(converted.dropped)
        missing = dropped.pop("missing", 0)
        generated = generated.reshape(-1)
        if generated.numel() == 0:
            return _empty(self.layout)
        keep = selected.reshape(-1) if selected is not None else None
        nonintegral = torch.zeros((), dtype=torch.int64, device=generated.device)
        out_of_range = torch.zeros((), dtype=torch.int64, device=generated.device)
        if generated.dtype in _WIDE_UNSIGNED:
            generated = generated.to(torch.float64)
        if generated.is_floating_point():
            wide = generated.to(torch.float64)
            absent = torch.isnan(wide)
            integral = torch.isfinite(wide) & (wide == torch.trunc(wide))
            fits = wide.abs() < 2.0**63
            counted = ~absent if keep is None else keep & ~absent
            nonintegral = (counted & ~integral).sum()
            out_of_range = (counted & integral & ~fits).sum()
            usable = absent | integral & fits
            keep = usable if keep is None else keep & usable
            generated = torch.where(integral & fits, wide, torch.full_like(wide, -1)).to(torch.int64)
        if generated.device.type in self.kernel_devices:
            fine, above, bucket_counts = kernels.summarize_staleness(
                self._arguments,
                numpy_view(generated),
                None if keep is None else keep.numpy(),
                current_version,
                len(self._cpu_lookup),
            )
            count, total, minimum, maximum = _fold(
                fine[: len(self._cpu_lookup)], above, self._cpu_lookup, bucket_counts
            )
            future, unversioned = int(fine[-2]), int(fine[-3])
            nonint, beyond = int(nonintegral), int(out_of_range)
        else:
            count, total, minimum, maximum, future, nonint, beyond, unversioned, bucket_counts = (
                self._summarize_on_device(generated.to(torch.int64), keep, current_version, nonintegral, out_of_range)
            )
        reasons: tuple[tuple[Reason, int], ...] = (("negative", future), ("nonintegral", nonint), ("range", beyond))
        rejected = {reason: n for reason, n in reasons if n}
        return with_dropped(
            Statistics(
                layout=self.layout,
                count=count,
                total=total,
                squares=0.0,
                positive=total,
                negative=0.0,
                minimum=minimum if count else None,
                maximum=maximum if count else None,
                bucket_counts=bucket_counts,
                rejected=rejected,
                unversioned=unversioned + missing,
            ),
            dropped,
        )

    def warm_up(self) -> None:
        """Compile the CPU kernel for the common dtypes now (see :meth:`ValueSummarizer.warm_up`)."""
        for dtype in (torch.int64, torch.int32):
            self.summarize(torch.zeros(1, dtype=dtype), 0, torch.ones(1, dtype=torch.bool))
            self.summarize(torch.zeros(1, dtype=dtype), 0, None)

    def _summarize_on_device(
        self,
        generated: torch.Tensor,
        keep: torch.Tensor | None,
        current_version: int,
        nonintegral: torch.Tensor,
        out_of_range: torch.Tensor,
    ) -> tuple[int, int, int, int, int, int, int, int, np.ndarray]:
        """Count, sum, min, max, future, non-integral, out-of-range and unversioned counts and bucket counts with
        tensor operations, one copy to the host."""
        size = self.layout.size
        staleness = current_version - generated
        versioned = generated >= 0 if keep is None else keep & (generated >= 0)
        unversioned = (generated < 0) if keep is None else keep & (generated < 0)
        accepted = versioned & (staleness >= 0)
        future = versioned & (staleness < 0)
        kept = torch.where(accepted, staleness, torch.zeros_like(staleness))
        if self._table_on_device:
            lookup = self._lookup_on(staleness.device)
            fine = _histogram(kept.clamp(max=len(lookup) - 1), accepted, len(lookup))
            counts = torch.zeros(size, dtype=torch.int64, device=staleness.device).index_add_(0, lookup, fine)
        else:
            counts = _histogram(self.layout.slots(kept.to(torch.float64)), accepted, size)
        packed = torch.cat(
            (
                torch.stack(
                    (
                        accepted.sum(),
                        kept.sum(),
                        torch.where(accepted, staleness, torch.full_like(staleness, _INT64_MAX)).min(),
                        torch.where(accepted, staleness, torch.full_like(staleness, -1)).max(),
                        future.sum(),
                        nonintegral,
                        out_of_range,
                        unversioned.sum(),
                    )
                ),
                counts,
            )
        ).cpu()
        count, total, minimum, maximum, future_count, nonint, beyond, missing = packed[:8].tolist()
        return count, total, minimum, maximum, future_count, nonint, beyond, missing, packed[8:].numpy()
