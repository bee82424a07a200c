"""Statistics of one step's rollouts: the health signals of RL training in one call.

From the tensors a trainer already holds (advantages, response lengths, per-token entropy, trainer and inference
log-probabilities, rewards and prompt-group ids) :class:`RolloutSummarizer` derives every distribution and count
otel-rl records for them:

- distributions (same histogram form as rewards, exact max/min): advantages, response lengths, per-token entropy,
  per-token importance ratio ``r = exp(logprobs - inference_logprobs)`` (pi_train / pi_inference) and the mismatch
  KL(pi_inference || pi_train) per token with the ``k1 = -log r`` and ``k3 = (r - 1) - log r`` estimators;
- prompt-group counts: groups whose rollouts were solved by none / some / all (a rollout is solved when its
  reward >= ``solved_reward``), groups whose rewards are all equal (zero variance: no GRPO signal), and rollouts
  by the sign of their advantage. Counts, not per-rank averages: the collector sums them exactly.

Each field is optional and validated on its own: a bad field is rejected and counted, the others are kept. On the
CPU each distribution is one compiled pass; on other devices everything is computed there and copied to the host
once (groups too: sorted and segmented on the device, no ``unique`` and its hidden synchronization).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from otel_rl import _kernels, _names
from otel_rl._names import Distribution
from otel_rl._stats import BadInput, Statistics, ValueSummarizer, _first_unmasked, _numpy, as_tensor

Attributes = tuple[tuple[str, str], ...]
_OUTCOMES = ("none", "some", "all")
_SIGNS = ("positive", "negative", "zero")


@dataclass
class RolloutStatistics:
    """What one ``record_rollouts`` call recorded and rejected."""

    distributions: list[tuple[Distribution, Attributes, Statistics]] = field(default_factory=list)
    counts: list[tuple[_names.MetricName, Attributes, int]] = field(default_factory=list)
    rejected: list[tuple[str, BadInput, object]] = field(default_factory=list)
    """``(metric, error, values)`` of each field rejected whole."""
    rejected_parts: list[tuple[str, str, int]] = field(default_factory=list)
    """``(metric, reason, count)`` of values left out of a field that was kept (besides NaN/inf, which the
    statistics carry)."""


@dataclass
class _Pending:
    """A result that is final (computed on the CPU) or a packed device tensor waiting for the one copy; ``unpack``
    turns the copied tensor into the result, ``finish`` files the result."""

    value: Any
    unpack: Callable[[torch.Tensor], Any]
    finish: Callable[[Any], None]


class RolloutSummarizer:
    """Summarizes one step's rollout tensors; see the module docstring."""

    def __init__(self, values: ValueSummarizer, *, solved_reward: float) -> None:
        self._values = values
        self._solved_reward = solved_reward

    def summarize(
        self,
        *,
        mask: Any = None,
        advantages: Any = None,
        response_lengths: Any = None,
        entropy: Any = None,
        logprobs: Any = None,
        inference_logprobs: Any = None,
        rewards: Any = None,
        group_ids: Any = None,
    ) -> RolloutStatistics:
        out = RolloutStatistics()
        pending: list[_Pending] = []
        rows = _row_mask(mask)

        def distribution(
            dist: Distribution, attrs: Attributes, raw: Any, make: Callable[[], Statistics | torch.Tensor]
        ) -> None:
            """Summarize one field with ``make``; a bad field is rejected whole, counted by its ``raw`` values."""
            try:
                value = make()
            except BadInput as error:
                out.rejected.append((dist.histogram.name, error, raw))
                return
            pending.append(_Pending(value, self._values.unpack, lambda s: out.distributions.append((dist, attrs, s))))

        def per_token(values: torch.Tensor, keep: torch.Tensor | None, argument: str) -> Statistics | torch.Tensor:
            return self._values.prepare(values, keep, argument=argument, per_token=True)

        if advantages is not None:
            try:
                values = as_tensor(advantages, argument="advantages")
            except BadInput as error:
                out.rejected.append((_names.ADVANTAGES.histogram.name, error, advantages))
            else:
                selection = rows if rows is not None and values.dim() == 1 else mask
                distribution(_names.ADVANTAGES, (), values, lambda: self._values.prepare(values, selection, argument="advantages"))
                self._signs(values, selection, out, pending)
        if response_lengths is not None:
            distribution(_names.RESPONSE_LENGTHS, (), response_lengths, lambda: self._lengths(response_lengths, rows, out, pending))
        if entropy is not None:
            distribution(_names.ENTROPY, (), entropy, lambda: per_token(*_tokens(entropy, mask, "entropy"), "entropy"))
        if logprobs is not None or inference_logprobs is not None:
            try:
                ratio, k1, k3, keep = _mismatch(logprobs, inference_logprobs, mask)
            except BadInput as error:
                out.rejected.append((_names.IMPORTANCE_RATIO.histogram.name, error, logprobs))
            else:
                distribution(_names.IMPORTANCE_RATIO, (), ratio, lambda: per_token(ratio, keep, "logprobs"))
                distribution(_names.MISMATCH_KL, ((_names.KL_ESTIMATOR, "k1"),), ratio, lambda: per_token(k1, keep, "logprobs"))
                distribution(_names.MISMATCH_KL, ((_names.KL_ESTIMATOR, "k3"),), ratio, lambda: per_token(k3, keep, "logprobs"))
        if group_ids is not None:
            try:
                groups = self._groups(group_ids, rewards, rows)
                pending.append(_Pending(groups, _as_list, lambda counts: _group_counts(counts, out)))
            except BadInput as error:
                out.rejected.append((_names.GROUPS.name, error, group_ids))
        _finish(pending)
        return out

    def _lengths(
        self, response_lengths: Any, rows: torch.Tensor | None, out: RolloutStatistics, pending: list[_Pending]
    ) -> Statistics | torch.Tensor:
        """Lengths must be >= 0: negative ones are left out and counted (reason ``negative``)."""
        lengths = as_tensor(response_lengths, argument="response_lengths")
        if lengths.dim() != 1 or lengths.dtype == torch.bool or lengths.is_complex():
            raise BadInput(
                "shape", f'"response_lengths" must be one number per rollout, got shape {tuple(lengths.shape)} {lengths.dtype}'
            )
        negative = lengths < 0
        if rows is not None and rows.shape == lengths.shape:
            negative &= rows.to(device=lengths.device)

        def finish(counts: list[int]) -> None:
            out.rejected_parts.append((_names.RESPONSE_LENGTHS.histogram.name, "negative", counts[0]))

        pending.append(_Pending(negative.sum().reshape(1), _as_list, finish))
        keep = ~negative if rows is None or rows.shape != lengths.shape else rows.to(device=lengths.device) & ~negative
        return self._values.prepare(lengths, keep, argument="response_lengths")

    def _signs(self, values: torch.Tensor, mask: Any, out: RolloutStatistics, pending: list[_Pending]) -> None:
        """Rollouts by the sign of their advantage (a per-token advantage counts at the rollout's first token)."""
        try:
            keep = _mask_like(values, mask)
        except BadInput:
            return  # the advantages distribution reports the same error once
        if values.dim() == 2:
            values, keep = _first_unmasked(values, keep)
        values = values.reshape(-1).to(torch.float64)
        valid = torch.isfinite(values) if keep is None else torch.isfinite(values) & keep.reshape(-1)
        packed = torch.stack(((valid & (values > 0)).sum(), (valid & (values < 0)).sum(), (valid & (values == 0)).sum()))

        def finish(signs: list[int]) -> None:
            for sign, count in zip(_SIGNS, signs):
                out.counts.append((_names.ADVANTAGE_SIGNS, ((_names.SIGN, sign),), int(count)))

        pending.append(_Pending(packed, _as_list, finish))

    def _groups(self, group_ids: Any, rewards: Any, rows: torch.Tensor | None) -> torch.Tensor:
        """Outcome and zero-variance counts of the prompt groups, as a device tensor: [none, some, all, zero]. A
        rollout without any unmasked token (``rows``, from the per-token mask) counts in no group."""
        ids = as_tensor(group_ids, argument="group_ids")
        if rewards is None:
            raise BadInput("missing", '"group_ids" needs "rewards" (one per rollout) to tell solved groups')
        values = as_tensor(rewards, argument="rewards").to(device=ids.device)
        if ids.dim() != 1 or values.shape != ids.shape:
            raise BadInput(
                "shape", f'"group_ids" and "rewards" must both be one per rollout, got {tuple(ids.shape)} and {tuple(values.shape)}'
            )
        if ids.dtype == torch.bool or ids.is_complex():
            raise BadInput("dtype", f'"group_ids" must be integers, got dtype {ids.dtype}')
        if ids.is_floating_point():
            if not bool((torch.isfinite(ids) & (ids == torch.trunc(ids))).all()):
                raise BadInput("nonintegral", '"group_ids" must be integral')
            ids = ids.to(torch.int64)
        x = values.to(torch.float64)
        valid = torch.isfinite(x)
        if rows is not None and rows.shape == ids.shape:
            valid &= rows.to(device=ids.device)
        order = torch.argsort(ids)
        ids, x, valid = ids[order], x[order], valid[order]
        starts = torch.ones_like(ids, dtype=torch.bool)
        starts[1:] = ids[1:] != ids[:-1]
        segment = torch.cumsum(starts.to(torch.int64), 0) - 1
        n = ids.numel()
        size = torch.zeros(n, dtype=torch.int64, device=ids.device).scatter_add_(0, segment, valid.to(torch.int64))
        solved = valid & (x >= self._solved_reward)
        solved_n = torch.zeros_like(size).scatter_add_(0, segment, solved.to(torch.int64))
        inf = torch.full((n,), float("inf"), dtype=torch.float64, device=ids.device)
        low = inf.clone().scatter_reduce_(0, segment, torch.where(valid, x, inf), "amin")
        high = (-inf).scatter_reduce_(0, segment, torch.where(valid, x, -inf), "amax")
        exists = size > 0
        none = (exists & (solved_n == 0)).sum()
        every = (exists & (solved_n == size)).sum()
        return torch.stack((none, exists.sum() - none - every, every, (exists & (low == high)).sum()))


def _group_counts(counts: list[int], out: RolloutStatistics) -> None:
    for outcome, count in zip(_OUTCOMES, counts[:3]):
        out.counts.append((_names.GROUPS, ((_names.GROUP_OUTCOME, outcome),), int(count)))
    out.counts.append((_names.GROUPS_ZERO_VARIANCE, (), int(counts[3])))


def _mismatch(
    logprobs: Any, inference_logprobs: Any, mask: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per token, with ``d = logprobs - inference_logprobs``: the importance ratio ``r = exp(d)``, ``k1 = -d`` and
    ``k3 = (r - 1) - d``, in float64 on the tensors' device, and the flat mask still to apply (see
    :func:`_tokens`)."""
    if logprobs is None or inference_logprobs is None:
        raise BadInput("missing", '"logprobs" and "inference_logprobs" go together (trainer and inference per token)')
    train = as_tensor(logprobs, argument="logprobs")
    inference = as_tensor(inference_logprobs, argument="inference_logprobs").to(device=train.device)
    if train.shape != inference.shape:
        raise BadInput(
            "shape", f'"logprobs" {tuple(train.shape)} and "inference_logprobs" {tuple(inference.shape)} must have one shape'
        )
    train_tokens, keep = _tokens(train, mask, "logprobs")
    inference_tokens, _ = _tokens(inference, mask, "inference_logprobs")
    d = train_tokens.to(torch.float64) - inference_tokens.to(torch.float64)
    r = torch.exp(d)
    return r, -d, (r - 1).sub_(d), keep


def _tokens(values: Any, mask: Any, argument: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A per-token field as flat values and the flat mask still to apply. On the CPU the unmasked values are
    selected here, once (cheaper than testing the mask per value in each of the four passes); on other
    devices the mask stays a mask, since selecting there would synchronize with the host."""
    tensor = as_tensor(values, argument=argument)
    keep = _mask_like(tensor, mask)
    if keep is None:
        return tensor.reshape(-1), None
    if tensor.device.type != "cpu":
        return tensor.reshape(-1), keep.reshape(-1)
    selected = _kernels.select(_numpy(tensor).reshape(-1), keep.reshape(-1).numpy())
    return torch.from_numpy(selected), None


def _row_mask(mask: Any) -> torch.Tensor | None:
    """Which rollouts have any unmasked token, for the per-rollout fields of a per-token ``(rollouts, tokens)``
    mask (None when there is no usable 2-D mask; the per-token fields then report a bad mask themselves)."""
    if mask is None:
        return None
    try:
        keep = as_tensor(mask, argument="mask")
    except BadInput:
        return None
    if keep.dim() != 2:
        return None
    if keep.device.type == "cpu":  # numpy's any is ten times faster than torch's on the CPU (512 x 2048: 0.02 ms)
        return torch.from_numpy(_numpy(keep).any(axis=1))
    return (keep if keep.dtype == torch.bool else keep != 0).any(dim=1)


def _mask_like(values: torch.Tensor, mask: Any) -> torch.Tensor | None:
    if mask is None:
        return None
    keep = as_tensor(mask, argument="mask").to(device=values.device)
    if keep.shape != values.shape:
        raise BadInput("shape", f'"mask" must have the shape of the values {tuple(values.shape)}, got {tuple(keep.shape)}')
    return keep if keep.dtype == torch.bool else keep != 0


def _as_list(counts: torch.Tensor) -> list[int]:
    return [int(count) for count in counts.tolist()]


def _finish(pending: list[_Pending]) -> None:
    """Copy every device tensor to the host in one transfer (CPU tensors need none), then file each result."""
    on_device = [p for p in pending if isinstance(p.value, torch.Tensor) and p.value.device.type != "cpu"]
    if on_device:
        host = torch.cat([p.value.to(torch.float64) for p in on_device]).cpu()
        for p, part in zip(on_device, torch.split(host, [p.value.numel() for p in on_device])):
            p.value = part
    for p in pending:
        p.finish(p.unpack(p.value) if isinstance(p.value, torch.Tensor) else p.value)
