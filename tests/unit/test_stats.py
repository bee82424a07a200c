"""The statistics equal a float64 numpy reference on random inputs, on both paths: the compiled CPU kernels
and the torch operations that tensors on other devices (GPUs) go through."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from otel_rl._record import parallel
from otel_rl._record.buckets import ExplicitLayout, ExponentialLayout, Layout
from otel_rl._record.inputs import BadInput
from otel_rl._record.stats import StalenessSummarizer, ValueSummarizer
from tests.reference import bucket_counts, exponential_sides


class TorchRewards(ValueSummarizer):
    """The device (torch) path, run on the CPU: what a GPU tensor goes through."""

    kernel_devices = frozenset()


class TorchStaleness(StalenessSummarizer):
    """The device (torch) path, run on the CPU."""

    kernel_devices = frozenset()


@contextmanager
def chunked() -> Iterator[None]:
    """The CPU kernels split over 3 threads in chunks of a few values, as a large input is (helpers that do not speed
    these tiny inputs up are not backed off from)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        with mock.patch.object(parallel, "MIN_CHUNK", 4), mock.patch.object(parallel, "BACKOFF_NS", 0):
            yield
    finally:
        torch.set_num_threads(threads)


class ChunkedRewards(ValueSummarizer):
    """The CPU kernel on several threads (``otel_rl._record.parallel``)."""

    def summarize(self, *args: Any, **kwargs: Any) -> Any:
        with chunked():
            return super().summarize(*args, **kwargs)


class ChunkedStaleness(StalenessSummarizer):
    """The CPU kernel on several threads."""

    def summarize(self, *args: Any, **kwargs: Any) -> Any:
        with chunked():
            return super().summarize(*args, **kwargs)


REWARDS = pytest.mark.parametrize("summarizer", [ValueSummarizer, TorchRewards, ChunkedRewards])
STALENESS = pytest.mark.parametrize("summarizer", [StalenessSummarizer, TorchStaleness, ChunkedStaleness])
REWARD_BOUNDS = (-2.0, -0.5, 0.0, 0.5, 1.0, 3.0)
STALENESS_BOUNDS = (0, 1, 2, 4, 8, 100)


floats = st.floats(allow_nan=True, allow_infinity=True, width=32)
EXPONENTIAL = [ExponentialLayout(0), ExponentialLayout(3), ExponentialLayout(5)]


def assert_buckets(counts: np.ndarray, values: np.ndarray, layout: Layout) -> None:
    """``counts`` hold exactly the reference buckets of the finite ``values`` (explicit or exponential)."""
    if isinstance(layout, ExplicitLayout):
        assert list(counts) == bucket_counts(values, layout.bounds)
        return
    assert isinstance(layout, ExponentialLayout), layout
    sides = layout.sides(counts)
    negative = {sides.negative_offset + i: c for i, c in enumerate(sides.negative) if c}
    positive = {sides.positive_offset + i: c for i, c in enumerate(sides.positive) if c}
    assert (sides.zero_count, negative, positive) == exponential_sides(values, layout.scale)


def test_boundaries_fall_in_the_lower_bucket_on_every_path() -> None:
    """A value exactly on a (float64-rounded) boundary belongs to the bucket below it (upper-inclusive), its float64
    successor to the one above, on both paths (scale 8, the finest). float32 inputs never fall between a rounded
    boundary and the true one, so for them the exact reference of the other tests is the definition itself."""
    layout = ExponentialLayout(8)
    assert all(np.float32(b) != b for b in layout.boundaries[1:])
    octaves, k = np.meshgrid(np.array([-3, 0, 7]), np.arange(1 << 8), indexing="ij")
    edges = np.ldexp(layout.boundaries[k.ravel()], octaves.ravel())
    below = (octaves.ravel() << 8) + k.ravel() - 1
    values = np.concatenate((edges, np.nextafter(edges, np.inf), -edges))
    indices = np.concatenate((below, below + 1, below))
    expected = np.where(values > 0, layout.width + 1, 0) + indices - layout.lowest
    for summarizer in (ValueSummarizer, TorchRewards):
        counts = summarizer(layout).summarize(torch.from_numpy(values), None).bucket_counts
        assert counts.tolist() == np.bincount(expected, minlength=layout.size).tolist()


@REWARDS
@settings(max_examples=200, deadline=None)
@given(
    values=arrays(np.float32, st.integers(0, 300), elements=floats),
    layout=st.sampled_from([ExplicitLayout(REWARD_BOUNDS), *EXPONENTIAL]),
    data=st.data(),
)
def test_rewards_match_numpy_reference(
    values: np.ndarray, layout: Layout, data: st.DataObject, summarizer: type[ValueSummarizer]
) -> None:
    """Count, sum, squares, extremes and buckets (explicit and exponential) of masked rewards equal a float64
    reference; non-finite counted."""
    mask = data.draw(arrays(np.bool_, values.shape)) if data.draw(st.booleans()) else None
    summary = summarizer(layout).summarize(torch.from_numpy(values), mask)
    selected = values.astype(np.float64)[mask] if mask is not None else values.astype(np.float64)
    finite = selected[np.isfinite(selected)]
    assert summary.count == finite.size
    positive, negative = finite[finite > 0].sum(), -finite[finite < 0].sum()
    # The total is the positive sum minus the negative one (the exported counters), so its error is theirs: relative
    # to their size, not to the total's (-max, max, 1 in float32 totals 0, not 1).
    assert summary.total == pytest.approx(positive - negative, rel=1e-9, abs=1e-6 + 1e-9 * (positive + negative))
    assert summary.squares == pytest.approx((finite**2).sum(), rel=1e-9, abs=1e-6)
    assert summary.positive == pytest.approx(positive, rel=1e-9, abs=1e-6)
    assert summary.negative == pytest.approx(negative, rel=1e-9, abs=1e-6)
    assert_buckets(summary.bucket_counts, finite, layout)
    assert summary.rejected.get("nonfinite", 0) == selected.size - finite.size
    if finite.size:
        assert summary.minimum == finite.min() and summary.maximum == finite.max()
    else:
        assert summary.minimum is None and summary.maximum is None


@REWARDS
@settings(max_examples=100, deadline=None)
@given(
    shape=st.sampled_from([(0,), (1,), (7,), (300,), (5, 4), (0, 3)]),
    layout=st.sampled_from([ExplicitLayout(REWARD_BOUNDS), *EXPONENTIAL]),
    data=st.data(),
)
def test_bools_summarize_as_ones_and_zeros(
    shape: tuple[int, ...], layout: Layout, data: st.DataObject, summarizer: type[ValueSummarizer]
) -> None:
    """A bool tensor or array (``pred == target``), with or without a mask, per rollout or per token, gives exactly
    the statistics of the same values as float64 ones and zeros."""
    flags = data.draw(arrays(np.bool_, shape))
    mask = data.draw(arrays(np.bool_, shape)) if data.draw(st.booleans()) else None
    per_token = data.draw(st.booleans())
    values = torch.from_numpy(flags) if data.draw(st.booleans()) else flags
    got = summarizer(layout).summarize(values, mask, per_token=per_token)
    expected = summarizer(layout).summarize(flags.astype(np.float64), mask, per_token=per_token)
    assert (got.count, got.total, got.squares, got.minimum, got.maximum, got.rejected) == (
        expected.count,
        expected.total,
        expected.squares,
        expected.minimum,
        expected.maximum,
        expected.rejected,
    )
    assert got.bucket_counts.tolist() == expected.bucket_counts.tolist()


@STALENESS
@settings(max_examples=200, deadline=None)
@given(
    offsets=arrays(np.int64, st.integers(0, 300), elements=st.integers(-5, 300) | st.integers(4_000, 10**7)),
    current=st.sampled_from([10, 2**24 + 1, 2**53 - 7, 2**62]),
    layout=st.sampled_from([ExplicitLayout(STALENESS_BOUNDS), ExplicitLayout((0, 3, 100_000)), *EXPONENTIAL]),
    data=st.data(),
)
def test_staleness_matches_numpy_reference(
    summarizer: type[StalenessSummarizer], offsets: np.ndarray, current: int, layout: Layout, data: st.DataObject
) -> None:
    """Staleness is exact in int64 (near 2**53 too); negatives are counted and not folded in, and so are tokens
    without a version (negative versions), as their own reason (both histogram paths, explicit and exponential
    buckets)."""
    versions = current - offsets
    mask = data.draw(arrays(np.bool_, versions.shape)) if data.draw(st.booleans()) else None
    summary = summarizer(layout).summarize(torch.from_numpy(versions), current, mask)
    selected = versions[mask] if mask is not None else versions
    versioned = selected[selected >= 0]
    staleness = current - versioned
    valid = staleness[staleness >= 0]
    assert summary.count == valid.size
    assert summary.total == int(valid.sum())
    assert_buckets(summary.bucket_counts, valid.astype(np.float64), layout)
    assert summary.rejected.get("negative", 0) == int((staleness < 0).sum())
    assert summary.unversioned == int((selected < 0).sum())
    if valid.size:
        assert (summary.minimum, summary.maximum) == (int(valid.min()), int(valid.max()))


@STALENESS
def test_staleness_is_exact_above_float32_precision(summarizer: type[StalenessSummarizer]) -> None:
    """Versions beyond 2**24 (where float32 rounds) give exact staleness."""
    current = 2**24 + 3
    summary = summarizer(ExplicitLayout(STALENESS_BOUNDS)).summarize(
        torch.tensor([2**24 + 2, 2**24 + 3]), current, None
    )
    assert (summary.total, summary.minimum, summary.maximum) == (1, 0, 1)


@STALENESS
def test_large_staleness_bounds_use_bucketize_path(summarizer: type[StalenessSummarizer]) -> None:
    """Bounds above the bincount limit (documents-seen units) give the same buckets as the reference."""
    bounds = (0, 1_000, 100_000, 10_000_000)
    versions = np.array([10_000_000, 9_999_000, 9_000_000, 0, 5, 10_000_001, 7], dtype=np.int64)
    mask = np.array([1, 1, 1, 1, 1, 1, 0], dtype=bool)
    summary = summarizer(ExplicitLayout(bounds)).summarize(versions, 10_000_000, mask)
    staleness = (10_000_000 - versions)[mask]
    assert list(summary.bucket_counts) == bucket_counts(staleness[staleness >= 0].astype(np.float64), bounds)
    assert (summary.count, summary.rejected) == (5, {"negative": 1})


@STALENESS
def test_float_versions_must_be_integral(summarizer: type[StalenessSummarizer]) -> None:
    """Float versions are accepted when integral; fractional ones are rejected and counted."""
    summary = summarizer(ExplicitLayout(STALENESS_BOUNDS)).summarize(torch.tensor([3.0, 2.5, 1.0]), 4, None)
    assert (summary.count, summary.total, summary.rejected) == (2, 4, {"nonintegral": 1})


@REWARDS
def test_per_token_rewards_count_once_per_rollout(summarizer: type[ValueSummarizer]) -> None:
    """A (rollouts, tokens) broadcast reward counts each rollout once, at its first unmasked token."""
    rewards = torch.tensor([[-1.0] * 4, [2.0] * 4, [9.0] * 4])
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    summary = summarizer(ExplicitLayout(REWARD_BOUNDS)).summarize(rewards, mask)
    assert (summary.count, summary.total, summary.minimum, summary.maximum) == (2, 1.0, -1.0, 2.0)


@REWARDS
def test_all_negative_rewards_keep_their_sum(summarizer: type[ValueSummarizer]) -> None:
    """Negative rewards are recorded (the SDK's Histogram.record would drop them)."""
    summary = summarizer(ExplicitLayout(REWARD_BOUNDS)).summarize(np.array([-1.0, -3.0]), None)
    assert (summary.count, summary.total, summary.negative, summary.positive) == (2, -4.0, 4.0, 0.0)


@REWARDS
@pytest.mark.parametrize(
    ("values", "mask", "reason"),
    [
        (torch.zeros(3), torch.ones(4), "shape"),
        (torch.zeros(2, 2, 2), None, "shape"),
        (torch.tensor([1j]), None, "dtype"),
        (np.array(["a"]), None, "dtype"),
        ("text", None, "type"),
        ([[1.0], [2.0, 3.0]], None, "shape"),
        ([1.0, [2.0]], None, "shape"),
    ],
)
def test_unusable_calls_raise_bad_input(
    values: object, mask: object, reason: str, summarizer: type[ValueSummarizer]
) -> None:
    """Type, dtype and shape errors are reported with a reason (the facade counts them)."""
    with pytest.raises(BadInput, match=r'"(rewards|mask)"') as error:
        summarizer(ExplicitLayout(REWARD_BOUNDS)).summarize(values, mask)
    assert error.value.reason == reason


@pytest.mark.parametrize(
    ("rewards", "staleness"), [(ValueSummarizer, StalenessSummarizer), (TorchRewards, TorchStaleness)]
)
def test_empty_inputs_give_empty_summaries(
    rewards: type[ValueSummarizer], staleness: type[StalenessSummarizer]
) -> None:
    """Empty tensors (and fully masked ones) give count 0 and no extremes."""
    for values, mask in ((torch.empty(0), None), (torch.ones(3), torch.zeros(3)), (torch.ones(2, 0), None)):
        summary = rewards(ExplicitLayout(REWARD_BOUNDS)).summarize(values, mask)
        assert summary.count == 0 and summary.minimum is None and sum(summary.bucket_counts) == 0
    assert staleness(ExplicitLayout(STALENESS_BOUNDS)).summarize(torch.empty(0, dtype=torch.int64), 3, None).count == 0


@REWARDS
def test_scalar_reward(summarizer: type[ValueSummarizer]) -> None:
    """A Python scalar is one observation."""
    summary = summarizer(ExplicitLayout(REWARD_BOUNDS)).summarize(0.25, None)
    assert (summary.count, summary.total) == (1, 0.25) and not math.isnan(summary.squares)
