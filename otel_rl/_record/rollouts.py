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

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import otel_rl_contract as contract
import torch
from otel_rl_contract import Distribution

from otel_rl._record import joint, kernels
from otel_rl._record.buckets import Layouts
from otel_rl._record.inputs import (
    REASONS,
    BadInput,
    Reason,
    TensorLike,
    Values,
    as_integers,
    as_mask,
    as_selection,
    as_values,
    combined,
    numpy_view,
)
from otel_rl._record.stats import Statistics, ValueSummarizer, first_unmasked, statistics_of, with_dropped

Attributes = tuple[tuple[str, str], ...]


@dataclass(frozen=True, kw_only=True)
class Rollouts:
    """One step's rollouts, as :meth:`otel_rl.Telemetry.record_rollouts` takes them: its keyword arguments are these
    fields, declared here once. Every field is optional; ``(rollouts,)`` fields hold one value per rollout."""

    mask: TensorLike | None = None
    """``(rollouts, tokens)`` or ``(rollouts,)``, nonzero = keep: the tokens to record. Rollouts without any are left
    out of the per-rollout fields, and a per-rollout field must have as many rollouts as the mask."""
    advantages: TensorLike | None = None
    """``(rollouts,)`` (or per token, counted at each rollout's first selected token): ``rl.advantage``, and the
    rollouts by advantage sign ``rl.advantage.sign``."""
    response_lengths: TensorLike | None = None
    """``(rollouts,)``: ``rl.response.length`` (negative lengths are dropped and counted)."""
    entropy: TensorLike | None = None
    """Per token, any shape (the mask's when there is one): ``rl.entropy``."""
    logprobs: TensorLike | None = None
    """The trainer's per-token log-probabilities: with ``inference_logprobs``, the importance ratio
    ``exp(logprobs - inference_logprobs)`` (``rl.importance_ratio``) and the mismatch KL(pi_inference || pi_train)
    estimators k1 and k3 (``rl.mismatch.kl``)."""
    inference_logprobs: TensorLike | None = None
    """The inference engine's per-token log-probabilities (see ``logprobs``)."""
    rewards: TensorLike | None = None
    """The total reward, ``(rollouts,)``: with ``group_ids`` the prompt-group outcomes (``rl.groups``,
    ``rl.groups.zero_variance``); with ``response_lengths`` and ``reward_breakdown`` the joint sums ``rl.joint``."""
    group_ids: TensorLike | None = None
    """``(rollouts,)``: each rollout's prompt group; a group's rollouts must be recorded in one call."""
    versions_spanned: TensorLike | None = None
    """``(rollouts,)``: how many policy versions each trajectory's tokens were generated with
    (``rl.trajectory.versions``)."""
    reward_breakdown: Mapping[str, TensorLike] | None = None
    """Reward function name → ``(rollouts,)`` values, each paired with ``rewards`` in ``rl.joint``
    (``rl.joint.x`` = ``reward.<fn>``)."""


_OUTCOMES = ("none", "some", "all")
_SIGNS = ("positive", "negative", "zero")
_NONFINITE = REASONS.index("nonfinite") + 1
_MISMATCH: tuple[tuple[Distribution, Attributes], ...] = (
    (contract.IMPORTANCE_RATIO, ()),
    (contract.MISMATCH_KL, ((contract.KL_ESTIMATOR, "k1"),)),
    (contract.MISMATCH_KL, ((contract.KL_ESTIMATOR, "k3"),)),
)
"""The distributions derived from the two log-probabilities, in :func:`_mismatch`'s order."""
_GROUP_REASONS: tuple[Reason, ...] = ("incomplete_group", *REASONS)
"""The reasons of the rollouts ``_groups`` leaves out, in the order it counts them."""
_FIELDS: tuple[tuple[str, str], ...] = (
    ("advantages", contract.ADVANTAGES.histogram.name),
    ("response_lengths", contract.RESPONSE_LENGTHS.histogram.name),
    ("entropy", contract.ENTROPY.histogram.name),
    ("logprobs", contract.IMPORTANCE_RATIO.histogram.name),
    ("inference_logprobs", contract.IMPORTANCE_RATIO.histogram.name),
    ("group_ids", contract.GROUPS.name),
    ("versions_spanned", contract.TRAJECTORY_VERSIONS.histogram.name),
)
"""Each field of ``record_rollouts`` and the metric its rejections are counted under."""


@dataclass
class RolloutStatistics:
    """What one ``record_rollouts`` call recorded and rejected."""

    distributions: list[tuple[Distribution, Attributes, Statistics]] = field(default_factory=list)
    counts: list[tuple[contract.MetricName, Attributes, int]] = field(default_factory=list)
    rejected: list[tuple[str, BadInput, object]] = field(default_factory=list)
    """``(metric, error, values)`` of each field rejected whole."""
    rejected_parts: list[tuple[str, Reason, int]] = field(default_factory=list)
    """``(metric, reason, count)`` of values left out of a field that was kept (besides what the statistics
    carry)."""
    joint: list[tuple[str, list[float]]] = field(default_factory=list)
    """``(rl.joint.x, sums)`` of each pair with the total reward, the sums in :data:`otel_rl._record.joint.MOMENTS`
    order."""
    grouped: int = 0
    """Rollouts that took part in the prompt-group outcomes (``rl.groups``): with the ``rl.groups`` parts of
    ``rejected_parts``, every offered rollout."""


@dataclass
class _Pending:
    """A result that is final (computed on the CPU) or a packed device tensor waiting for the one copy; ``unpack``
    turns the copied tensor into the result, ``finish`` files the result."""

    value: Any
    unpack: Callable[[torch.Tensor], Any]
    finish: Callable[[Any], None]


class _Masks:
    """The call's mask as given (``tokens``: per token, or per rollout when it is 1-D; None without a mask) and which
    rollouts have any selected token (``rows``: computed when first needed, unless the per-token pass over the same
    mask found it already)."""

    def __init__(self, tokens: torch.Tensor | None) -> None:
        self.tokens = tokens
        self._rows: torch.Tensor | None = None if tokens is None or tokens.dim() == 2 else tokens

    @classmethod
    def of(cls, mask: Any) -> _Masks:
        if mask is None:
            return cls(None)
        tokens = as_selection(mask)
        if tokens.dim() not in (1, 2):
            raise BadInput(
                "shape", f'"mask" must be (rollouts, tokens) or (rollouts,), got shape {tuple(tokens.shape)}'
            )
        return cls(tokens)

    @property
    def rows(self) -> torch.Tensor | None:
        """Per rollout, whether it has a selected token (None without a mask)."""
        if self.tokens is not None and self._rows is None:
            # on the CPU numpy's any of the bool view (512 x 2048: 0.02 ms; never a float copy of the mask)
            cpu = self.tokens.device.type == "cpu"
            self._rows = torch.from_numpy(self.tokens.numpy().any(axis=1)) if cpu else self.tokens.any(dim=1)
        return self._rows

    @property
    def rows_pending(self) -> bool:
        """Whether :attr:`rows` is still to be computed from a 2-D mask on the CPU."""
        return self.tokens is not None and self._rows is None and self.tokens.device.type == "cpu"

    def found(self, rows: np.ndarray) -> None:
        """The rows the per-token pass found (what :attr:`rows` would compute)."""
        self._rows = torch.from_numpy(rows)

    def per_rollout(self, values: Values, argument: str) -> torch.Tensor | None:
        """The selection of a per-rollout field: one value per rollout, as many as the mask has rollouts."""
        tensor = values.tensor
        if tensor.dim() != 1:
            raise BadInput("shape", f'"{argument}" must be one value per rollout, got shape {tuple(tensor.shape)}')
        rollouts = None if self.tokens is None else self.tokens.shape[0]
        if rollouts is not None and rollouts != tensor.shape[0]:
            raise BadInput("shape", f'"{argument}" has {tensor.shape[0]} rollouts, the mask {rollouts}')
        rows = self.rows
        return combined(values.usable, None if rows is None else rows.to(device=tensor.device))

    def per_token(self, values: Values, argument: str) -> torch.Tensor | None:
        """The selection of a per-token field: any shape without a mask, else the mask's."""
        return combined(values.usable, as_mask(self.tokens, values.tensor, argument=argument))


class RolloutSummarizer:
    """Summarizes one step's rollout tensors; see the module docstring. ``summarizer`` makes the summarizer of each
    distribution from its layout (tests pass the torch path's)."""

    def __init__(
        self, layouts: Layouts, *, solved_reward: float, summarizer: type[ValueSummarizer] = ValueSummarizer
    ) -> None:
        self._summarizers = {
            distribution: summarizer(layouts.of(distribution))
            for distribution in (
                contract.ADVANTAGES,
                contract.RESPONSE_LENGTHS,
                contract.ENTROPY,
                contract.IMPORTANCE_RATIO,
                contract.MISMATCH_KL,
                contract.TRAJECTORY_VERSIONS,
            )
        }
        self._solved_reward = solved_reward
        self._kernel_devices = summarizer.kernel_devices
        self._token_layouts = kernels.TokenLayouts.of(
            (
                kernels.LayoutArguments.of(layouts.of(contract.ENTROPY)),
                kernels.LayoutArguments.of(layouts.of(contract.IMPORTANCE_RATIO)),
                kernels.LayoutArguments.of(layouts.of(contract.MISMATCH_KL)),
                kernels.LayoutArguments.of(layouts.of(contract.MISMATCH_KL)),
            )
        )

    def warm_up(self) -> None:
        """Compile the kernels of every field now, as :meth:`ValueSummarizer.warm_up` does for rewards: one step of
        two float32 rollouts (a cold numba cache costs 1.5 s on this path, which the first training step would pay)."""
        tokens = torch.zeros((2, 2))
        self.summarize(
            Rollouts(
                mask=torch.ones((2, 2)),
                advantages=tokens,
                response_lengths=torch.full((2,), 2),
                entropy=tokens,
                logprobs=tokens,
                inference_logprobs=tokens,
                rewards=torch.zeros(2),
                group_ids=torch.zeros(2),
                versions_spanned=torch.ones(2),
            )
        )

    def summarize(self, rollouts: Rollouts, *, breakdown: Sequence[tuple[str, Any]] = ()) -> RolloutStatistics:
        """The statistics of every field given; a bad field is in ``rejected``, the others are kept. An unusable
        mask rejects every field, each under its own metric: without it, padding would be recorded as values.
        ``breakdown``: ``(rl.joint.x label, values)`` of each reward function to pair with ``rewards`` (the caller
        labels ``rollouts.reward_breakdown``'s names, capped)."""
        mask, rewards, response_lengths = rollouts.mask, rollouts.rewards, rollouts.response_lengths
        advantages, entropy, group_ids = rollouts.advantages, rollouts.entropy, rollouts.group_ids
        logprobs, inference_logprobs = rollouts.logprobs, rollouts.inference_logprobs
        versions_spanned, reward_breakdown = rollouts.versions_spanned, breakdown
        out = RolloutStatistics()
        given = {
            "advantages": advantages,
            "response_lengths": response_lengths,
            "entropy": entropy,
            "logprobs": logprobs,
            "inference_logprobs": inference_logprobs,
            "group_ids": group_ids,
            "versions_spanned": versions_spanned,
        }
        try:
            masks = _Masks.of(mask)
        except BadInput as error:
            for argument, metric in _FIELDS:
                if given[argument] is not None:
                    out.rejected.append((metric, error, given[argument]))
            if rewards is not None and (response_lengths is not None or reward_breakdown):
                out.rejected.append((contract.JOINT.name, error, rewards))
            return out
        pending: list[_Pending] = []

        def field_of(
            dist: Distribution, attrs: Attributes, raw: Any, make: Callable[[], Statistics | torch.Tensor]
        ) -> bool:
            """Summarize one field with ``make``; a bad field is rejected whole, counted by its ``raw`` values."""
            try:
                value = make()
            except BadInput as error:
                out.rejected.append((dist.histogram.name, error, raw))
                return False
            unpack = self._summarizers[dist].unpack
            pending.append(_Pending(value, unpack, lambda s: out.distributions.append((dist, attrs, s))))
            return True

        if entropy is not None or logprobs is not None or inference_logprobs is not None:
            self._per_token(entropy, logprobs, inference_logprobs, masks, out, field_of)
        if advantages is not None:
            self._advantages(advantages, masks, out, pending, field_of)
        if response_lengths is not None:
            field_of(
                contract.RESPONSE_LENGTHS,
                (),
                response_lengths,
                lambda: self._counts_per_rollout(
                    contract.RESPONSE_LENGTHS, response_lengths, "response_lengths", masks, out, pending
                ),
            )
        if versions_spanned is not None:
            field_of(
                contract.TRAJECTORY_VERSIONS,
                (),
                versions_spanned,
                lambda: self._counts_per_rollout(
                    contract.TRAJECTORY_VERSIONS, versions_spanned, "versions_spanned", masks, out, pending
                ),
            )
        if group_ids is not None:
            try:
                groups = self._groups(group_ids, rewards, masks)
                pending.append(_Pending(groups, _as_list, lambda counts: _group_counts(counts, out)))
            except BadInput as error:
                out.rejected.append((contract.GROUPS.name, error, group_ids))
        if rewards is not None:
            pairs = [("response_length", response_lengths)] if response_lengths is not None else []
            for label, values in (*pairs, *reward_breakdown):
                self._joint(label, values, rewards, masks, out, pending)
        _finish(pending)
        return out

    @staticmethod
    def _joint(
        label: str, values: Any, rewards: Any, masks: _Masks, out: RolloutStatistics, pending: list[_Pending]
    ) -> None:
        """The co-moments of ``values`` with the total reward (``rl.joint``); the offered rollouts left out of the pair
        are counted (``unpaired``), a pair whose shapes do not fit is rejected whole."""
        argument = "response_lengths" if label == "response_length" else f"reward_breakdown[{label[7:]!r}]"
        try:
            sums = joint.comoments(
                values, rewards, masks.rows, argument=argument, nonnegative=label == "response_length"
            )
        except BadInput as error:
            out.rejected.append((contract.JOINT.name, error, values))
            return

        def finish(found: list[float]) -> None:
            out.joint.append((label, found[:-1]))
            if found[-1]:
                out.rejected_parts.append((contract.JOINT.name, "unpaired", int(found[-1])))

        pending.append(_Pending(sums, lambda t: [float(v) for v in t.tolist()], finish))

    def _advantages(
        self,
        advantages: Any,
        masks: _Masks,
        out: RolloutStatistics,
        pending: list[_Pending],
        field_of: Callable[[Distribution, Attributes, Any, Callable[[], Statistics | torch.Tensor]], bool],
    ) -> None:
        """Advantages per rollout (or per token, counted at each rollout's first selected token), and rollouts by
        the sign of their advantage; signs are counted only when the advantages themselves are accepted."""
        summarizer = self._summarizers[contract.ADVANTAGES]
        selection: list[torch.Tensor | None] = []

        def make() -> Statistics | torch.Tensor:
            values = as_values(advantages, argument="advantages")
            per_token = values.tensor.dim() == 2
            keep = masks.per_token(values, "advantages") if per_token else masks.per_rollout(values, "advantages")
            selection.append(keep)
            return summarizer.prepare(values, keep, argument="advantages")

        if field_of(contract.ADVANTAGES, (), advantages, make):
            self._signs(as_values(advantages, argument="advantages").tensor, selection[0], out, pending)

    def _per_token(
        self,
        entropy: Any,
        logprobs: Any,
        inference_logprobs: Any,
        masks: _Masks,
        out: RolloutStatistics,
        field_of: Callable[[Distribution, Attributes, Any, Callable[[], Statistics | torch.Tensor]], bool],
    ) -> None:
        """Entropy, the importance ratio and the mismatch KL estimators: on the CPU in one fused pass over the tokens
        (``otel_rl._record.kernels.token_kernel``), which also finds the rollouts that have a selected token; on other
        devices with tensor operations there. Each field is validated on its own."""
        fused_entropy: tuple[Values, torch.Tensor | None] | None = None
        fused_logprobs: tuple[Values, Values, torch.Tensor | None] | None = None
        if entropy is not None:
            try:
                values = as_values(entropy, argument="entropy")
                keep = masks.per_token(values, "entropy")
            except BadInput as error:
                out.rejected.append((contract.ENTROPY.histogram.name, error, entropy))
            else:
                if values.tensor.device.type in self._kernel_devices:
                    fused_entropy = (values, keep)
                else:
                    plain = Values(values.tensor, None, values.dropped)
                    make = functools.partial(self._on_device, contract.ENTROPY, plain, keep, "entropy")
                    field_of(contract.ENTROPY, (), entropy, make)
        if logprobs is not None or inference_logprobs is not None:
            try:
                train, inference, keep = _mismatch_inputs(logprobs, inference_logprobs, masks)
            except BadInput as error:
                out.rejected.append((contract.IMPORTANCE_RATIO.histogram.name, error, logprobs))
            else:
                if train.tensor.device.type in self._kernel_devices:
                    fused_logprobs = (train, inference, keep)
                else:
                    for (dist, attrs), derived in zip(_MISMATCH, _mismatch(train, inference), strict=True):
                        make = functools.partial(self._on_device, dist, derived, keep, "logprobs")
                        field_of(dist, attrs, logprobs, make)
        if fused_entropy is not None or fused_logprobs is not None:
            self._fused(fused_entropy, fused_logprobs, masks, out)

    def _on_device(
        self, dist: Distribution, values: Values, keep: torch.Tensor | None, argument: str
    ) -> Statistics | torch.Tensor:
        """Summarize per-token ``values`` (any shape, ``keep`` of the same) with tensor operations on their device."""
        return self._summarizers[dist].prepare(values, keep, argument=argument, per_token=True)

    def _fused(
        self,
        entropy: tuple[Values, torch.Tensor | None] | None,
        logprobs: tuple[Values, Values, torch.Tensor | None] | None,
        masks: _Masks,
        out: RolloutStatistics,
    ) -> None:
        """The CPU fields in one kernel call (two when they differ in length, which only a call without a mask
        allows); the rollouts' ``any`` of a 2-D CPU mask comes with it."""
        entropy_arrays = None if entropy is None else (_flat(entropy[0].tensor), _flat_keep(entropy[1]))
        logprob_arrays = (
            None
            if logprobs is None
            else (_flat(logprobs[0].tensor), _flat(logprobs[1].tensor), _flat_keep(logprobs[2]))
        )
        mask = masks.tokens.numpy() if masks.rows_pending and masks.tokens is not None else None
        if (
            entropy_arrays is not None
            and logprob_arrays is not None
            and len(entropy_arrays[0]) != len(logprob_arrays[0])
        ):
            calls = [(entropy_arrays, None), (None, logprob_arrays)]
        else:
            calls = [(entropy_arrays, logprob_arrays)]
        summaries: list[kernels.Summary | None] = [None] * 4
        for entropy_call, logprob_call in calls:
            found, rows = kernels.summarize_tokens(self._token_layouts, entropy_call, logprob_call, mask)
            if rows is not None:
                masks.found(rows)
                mask = None
            if entropy_call is not None:
                summaries[0] = found[0]
            if logprob_call is not None:
                summaries[1:] = found[1:]
        if entropy is not None and summaries[0] is not None:
            statistics = statistics_of(self._summarizers[contract.ENTROPY].layout, summaries[0])
            out.distributions.append((contract.ENTROPY, (), with_dropped(statistics, dict(entropy[0].dropped))))
        if logprobs is not None:
            dropped = dict(logprobs[0].dropped)
            for reason, n in logprobs[1].dropped.items():
                dropped[reason] = dropped.get(reason, 0) + n
            for (dist, attrs), summary in zip(_MISMATCH, summaries[1:], strict=True):
                statistics = statistics_of(self._summarizers[dist].layout, cast(kernels.Summary, summary))
                out.distributions.append((dist, attrs, with_dropped(statistics, dropped) if not attrs else statistics))

    def _counts_per_rollout(
        self,
        dist: Distribution,
        raw: Any,
        argument: str,
        masks: _Masks,
        out: RolloutStatistics,
        pending: list[_Pending],
    ) -> Statistics | torch.Tensor:
        """A count per rollout (tokens, versions): negative ones are left out and counted (reason ``negative``)."""
        values = as_values(raw, argument=argument)
        keep = masks.per_rollout(values, argument)
        counts = values.tensor
        negative = counts < 0 if keep is None else keep & (counts < 0)

        def finish(found: list[int]) -> None:
            out.rejected_parts.append((dist.histogram.name, "negative", found[0]))

        pending.append(_Pending(negative.sum().reshape(1), _as_list, finish))
        kept = ~negative if keep is None else keep & ~negative
        return self._summarizers[dist].prepare(Values(counts, None, values.dropped), kept, argument=argument)

    def _signs(
        self, values: torch.Tensor, keep: torch.Tensor | None, out: RolloutStatistics, pending: list[_Pending]
    ) -> None:
        """Rollouts by the sign of their advantage (a per-token advantage counts at the rollout's first token)."""
        if values.dim() == 2:
            values, keep = first_unmasked(values, keep)
        values = values.reshape(-1).to(torch.float64)
        valid = torch.isfinite(values) if keep is None else torch.isfinite(values) & keep.reshape(-1)
        packed = torch.stack(
            ((valid & (values > 0)).sum(), (valid & (values < 0)).sum(), (valid & (values == 0)).sum())
        )

        def finish(signs: list[int]) -> None:
            for sign, count in zip(_SIGNS, signs, strict=True):
                out.counts.append((contract.ADVANTAGE_SIGNS, ((contract.SIGN, sign),), int(count)))

        pending.append(_Pending(packed, _as_list, finish))

    def _groups(self, group_ids: Any, rewards: Any, masks: _Masks) -> torch.Tensor:
        """Prompt-group counts as one device tensor: outcomes none / some / all, zero variance, rollouts that took
        part, then rollouts left out by reason (index 0: ``incomplete_group``, then :data:`REASONS` codes).

        A rollout without any selected token is not offered. An offered rollout whose id is unusable could belong
        to any group, so no group of the call has an exact outcome: every other offered rollout is left out as
        ``incomplete_group``. An offered rollout whose reward is unusable (NaN, inf, None, ...) leaves its group's
        outcome unknown: the rest of that group is left out as ``incomplete_group``. Each rollout is counted once,
        under its id's reason when the id is unusable, else its reward's. Tensor operations only (no copy to the
        host); per-rollout reason codes are built only for inputs that have any (lists, float or uint64 ids). On the
        CPU the sort and the segments are one compiled call (``otel_rl._record.kernels.group_counts``)."""
        if rewards is None:
            raise BadInput("missing", '"group_ids" needs "rewards" (one per rollout) to tell solved groups')
        id_values = as_values(group_ids, argument="group_ids", integers=True)
        reward_values = as_values(rewards, argument="rewards")
        masks.per_rollout(id_values, "group_ids")  # checks the shape against the mask
        ids, id_codes = as_integers(id_values, argument="group_ids")
        device = ids.device
        x = reward_values.tensor.to(device=device, dtype=torch.float64)
        if x.shape != ids.shape:
            raise BadInput(
                "shape",
                f'"group_ids" and "rewards" must both be one per rollout, got {tuple(ids.shape)} and {tuple(x.shape)}',
            )
        offered = torch.ones_like(ids, dtype=torch.bool) if masks.rows is None else masks.rows.to(device)
        bad = ~torch.isfinite(x)
        code: torch.Tensor | None = None
        if id_codes is not None or reward_values.reasons is not None:
            reward_code = torch.where(bad, _NONFINITE, 0)
            if reward_values.reasons is not None:
                reasons = reward_values.reasons.to(device=device, dtype=torch.int64)
                reward_code = torch.where(reasons != 0, reasons, reward_code)
            code = (
                reward_code if id_codes is None else torch.where(id_codes != 0, id_codes.to(torch.int64), reward_code)
            )
            bad = code != 0
        placed = offered if id_codes is None else offered & (id_codes == 0)
        if device.type in self._kernel_devices:
            found = np.zeros(5 + len(REASONS) + 1, dtype=np.int64)
            kernels.group_counts(
                ids.numpy(),
                x.numpy(),
                (torch.where(bad, _NONFINITE, 0) if code is None else code).to(torch.int8).numpy(),
                offered.numpy(),
                placed.numpy(),
                self._solved_reward,
                id_codes is not None and bool((offered & (id_codes != 0)).any()),
                found,
            )
            return torch.from_numpy(found)
        order = torch.argsort(ids)
        ids, x, bad, placed = ids[order], x[order], bad[order], placed[order]
        starts = torch.ones_like(ids, dtype=torch.bool)
        starts[1:] = ids[1:] != ids[:-1]
        segment = torch.cumsum(starts, 0) - 1
        usable = placed & ~bad
        tallies = torch.stack((placed, placed & bad, usable & (x >= self._solved_reward)), dim=1).to(torch.int64)
        size, spoiled, solved = torch.zeros_like(tallies).index_add_(0, segment, tallies).unbind(1)
        exact = (size > 0) & (spoiled == 0)
        if id_codes is not None:
            exact &= ~(offered & (id_codes != 0)).any()
        inf = torch.full_like(x, float("inf"))
        low = inf.clone().scatter_reduce_(0, segment, torch.where(usable, x, inf), "amin")
        high = (-inf).scatter_reduce_(0, segment, torch.where(usable, x, -inf), "amax")
        none = (exact & (solved == 0)).sum()
        every = (exact & (solved == size)).sum()
        left_out = torch.zeros(len(REASONS) + 1, dtype=torch.int64, device=device)
        if code is None:
            left_out[_NONFINITE] = spoiled.sum()
        else:
            left_out.scatter_add_(0, code, offered.to(torch.int64))  # slot 0 (usable) is overwritten below
        left_out[0] = ((size - spoiled) * ~exact).sum()
        counts = (none, exact.sum() - none - every, every, (exact & (low == high)).sum(), (size * exact).sum())
        return torch.cat((torch.stack(counts), left_out))


def _group_counts(counts: list[int], out: RolloutStatistics) -> None:
    for outcome, count in zip(_OUTCOMES, counts[:3], strict=True):
        out.counts.append((contract.GROUPS, ((contract.GROUP_OUTCOME, outcome),), int(count)))
    out.counts.append((contract.GROUPS_ZERO_VARIANCE, (), int(counts[3])))
    out.grouped += counts[4]
    for reason, count in zip(_GROUP_REASONS, counts[5:], strict=True):
        if count:
            out.rejected_parts.append((contract.GROUPS.name, reason, count))


def _mismatch_inputs(
    logprobs: Any, inference_logprobs: Any, masks: _Masks
) -> tuple[Values, Values, torch.Tensor | None]:
    """Both log-probabilities (the inference ones on the trainer ones' device) and the tokens selected: the mask's,
    where both are usable; the ratio counts what the conversion of either input dropped."""
    if logprobs is None or inference_logprobs is None:
        raise BadInput("missing", '"logprobs" and "inference_logprobs" go together (trainer and inference per token)')
    train = as_values(logprobs, argument="logprobs")
    inference = as_values(inference_logprobs, argument="inference_logprobs")
    if train.tensor.shape != inference.tensor.shape:
        raise BadInput(
            "shape",
            f'"logprobs" {tuple(train.tensor.shape)} and "inference_logprobs" {tuple(inference.tensor.shape)} '
            "must have one shape",
        )
    selected = combined(inference.usable, masks.per_token(train, "logprobs"))
    moved = Values(inference.tensor.to(device=train.tensor.device), None, inference.dropped)
    return train, moved, selected


def _mismatch(train: Values, inference: Values) -> tuple[Values, Values, Values]:
    """Per token on the tensors' device, with ``d = logprobs - inference_logprobs`` in float64: the importance ratio
    ``r = exp(d)`` (carrying what the conversion of either input dropped), ``k1 = -d`` and ``k3 = (r - 1) - d``."""
    d = train.tensor.to(torch.float64) - inference.tensor.to(torch.float64)
    r = torch.exp(d)
    dropped = dict(train.dropped)
    for reason, n in inference.dropped.items():
        dropped[reason] = dropped.get(reason, 0) + n
    return Values(r, None, dropped), Values(-d), Values((r - 1).sub_(d))


def _flat(tensor: torch.Tensor) -> np.ndarray:
    """A CPU tensor of values as a flat numpy array (a view; see ``numpy_view``)."""
    return numpy_view(tensor).reshape(-1)


def _flat_keep(keep: torch.Tensor | None) -> np.ndarray | None:
    """A CPU bool selection as a flat numpy bool array (a view: never a float copy)."""
    return None if keep is None else keep.numpy().reshape(-1)


def _as_list(counts: torch.Tensor) -> list[int]:
    return [int(count) for count in counts.tolist()]


def _finish(pending: list[_Pending]) -> None:
    """Copy every device tensor to the host in one transfer (CPU tensors need none), then file each result."""
    on_device = [p for p in pending if isinstance(p.value, torch.Tensor) and p.value.device.type != "cpu"]
    if on_device:
        host = torch.cat([p.value.to(torch.float64) for p in on_device]).cpu()
        for p, part in zip(on_device, torch.split(host, [p.value.numel() for p in on_device]), strict=True):
            p.value = part
    for p in pending:
        p.finish(p.unpack(p.value) if isinstance(p.value, torch.Tensor) else p.value)
