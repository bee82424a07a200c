"""The fused one-pass kernels (``otel_rl._record.kernels``) against plain per-value references, on random inputs and on
the boundary sets: every float32 mantissa at twelve exponents (bucket by bucket), subnormals, NaN, inf and magnitudes
far outside the window; the exponent-squaring fast path and its exact fallback must agree with the definition exactly.
Counts, buckets and extremes are exact; float64 sums within 1e-12 relative of the exactly rounded sum."""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import otel_rl_contract as contract
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from otel_rl._record import kernels, parallel
from otel_rl._record.buckets import ExplicitLayout, ExponentialLayout, Layout, Layouts
from otel_rl._record.rollouts import Rollouts, RolloutSummarizer
from otel_rl._record.stats import ValueSummarizer
from tests.reference import exponential_index
from tests.unit.test_stats import chunked

EXPONENTIAL = [ExponentialLayout(scale) for scale in (0, 3, 5, 6, 7, 8)]
EXPLICIT = [
    ExplicitLayout((-2.0, -0.5, 0.0, 0.5, 1.0, 3.0)),
    ExplicitLayout(()),
    ExplicitLayout((-1e300, -3.5e38, -3.4028234663852886e38, 0.1, 3.4e38, 1e300)),
    ExplicitLayout(tuple(float(b) for b in np.linspace(-4.0, 4.0, 70))),  # beyond LINEAR_BOUNDS: binary search
]
DTYPES = [np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8]
RELATIVE = 1e-12


@dataclass(frozen=True)
class Reference:
    """What one distribution's statistics must be, computed value by value in Python."""

    count: int
    nonfinite: int
    positive: float
    negative: float
    squares: float
    minimum: float
    maximum: float
    counts: list[int]


def reference(values: np.ndarray, keep: np.ndarray | None, layout: Layout) -> Reference:
    """Each selected value as a float64: NaN and inf counted, the others summed exactly (``math.fsum``) and put in
    their slot by the layout's definition (``Layout.slot``: bisection on the rounded boundaries)."""
    finite: list[float] = []
    nonfinite = 0
    counts = [0] * layout.size
    for index, value in enumerate(values.reshape(-1).tolist()):
        if keep is not None and not keep.reshape(-1)[index]:
            continue
        x = float(value)
        if not math.isfinite(x):
            nonfinite += 1
            continue
        finite.append(x)
        counts[layout.slot(x)] += 1
    return Reference(
        count=len(finite),
        nonfinite=nonfinite,
        positive=_sum(x for x in finite if x > 0),
        negative=-_sum(x for x in finite if x < 0),
        squares=_sum(x * x for x in finite),
        minimum=min(finite, default=math.nan),
        maximum=max(finite, default=math.nan),
        counts=counts,
    )


def _sum(values: Iterable[float]) -> float:
    """The exactly rounded sum; ±inf when it (or a partial sum) overflows."""
    terms = list(values)
    try:
        return math.fsum(terms)
    except OverflowError:
        return math.copysign(math.inf, terms[0])


def _close(got: float, want: float) -> bool:
    """Within :data:`RELATIVE`; a sum within a factor 2 of the largest float may overflow in any order."""
    if got == want:
        return True
    if abs(want) > 2.0**1023 and math.isinf(got):
        return True
    return abs(got - want) <= RELATIVE * abs(want)


def assert_matches(summary: kernels.Summary, expected: Reference) -> None:
    """Counts, buckets and extremes exactly; sums within :data:`RELATIVE`."""
    assert (summary.count, summary.nonfinite) == (expected.count, expected.nonfinite)
    assert summary.counts.tolist() == expected.counts
    for got, want in ((summary.minimum, expected.minimum), (summary.maximum, expected.maximum)):
        assert got == want or (math.isnan(got) and math.isnan(want)), (got, want)
    for got, want in (
        (summary.positive, expected.positive),
        (summary.negative, expected.negative),
        (summary.squares, expected.squares),
    ):
        assert _close(got, want), (got, want)


def summarize(values: np.ndarray, keep: np.ndarray | None, layout: Layout) -> kernels.Summary:
    return kernels.summarize_values(kernels.LayoutArguments.of(layout), values, keep)


@st.composite
def numbers(draw: st.DrawFn, dtype: Any, size: int) -> np.ndarray:
    """``size`` values of ``dtype``: any float (NaN, inf, subnormal, huge) or integer, with runs of repeats."""
    if np.issubdtype(dtype, np.floating):
        elements = (
            st.floats(width=32)
            if dtype == np.float32
            else st.floats() | st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 800.0, -800.0, 1e-40])
        )
    else:
        info = np.iinfo(dtype)
        elements = st.integers(int(info.min), int(info.max)) | st.integers(-3, 3).filter(lambda v: v >= info.min)
    values: np.ndarray = draw(arrays(dtype, size, elements=elements))
    return values


@settings(max_examples=100, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    size=st.integers(0, 3000),
    layout=st.sampled_from([ExponentialLayout(5), EXPLICIT[0]]),
    threads=st.booleans(),
    data=st.data(),
)
def test_values_of_every_dtype_match_a_per_value_reference(
    dtype: Any, size: int, layout: Layout, threads: bool, data: st.DataObject
) -> None:
    """Any dtype, any values (NaN, inf, subnormals, huge), masked or not, across blocks and, with ``threads``, in
    chunks of 4 claimed by 3 threads: the statistics equal the per-value reference."""
    values = data.draw(numbers(dtype, size))
    keep = data.draw(arrays(np.bool_, size)) if data.draw(st.booleans()) else None
    if threads:
        with chunked():
            summary = summarize(values, keep, layout)
    else:
        summary = summarize(values, keep, layout)
    assert_matches(summary, reference(values, keep, layout))


@settings(max_examples=100, deadline=None)
@given(
    dtype=st.sampled_from([np.float32, np.float64]),
    size=st.integers(0, 3000),
    layout=st.sampled_from(EXPONENTIAL + EXPLICIT),
    data=st.data(),
)
def test_values_in_every_layout_match_a_per_value_reference(
    dtype: Any, size: int, layout: Layout, data: st.DataObject
) -> None:
    """Exponential layouts from scale 0 to 8 (float32 squarings up to 6, float64 beyond) and explicit ones (none,
    bounds beyond float32, more bounds than the SIMD count takes): the statistics equal the per-value reference."""
    values = data.draw(numbers(dtype, size))
    keep = data.draw(arrays(np.bool_, size)) if data.draw(st.booleans()) else None
    assert_matches(summarize(values, keep, layout), reference(values, keep, layout))


def _mantissas() -> np.ndarray:
    """Every float32 in [1, 2): the 2**23 mantissas, in order."""
    return (np.arange(1 << 23, dtype=np.int32) | np.int32(0x3F800000)).view(np.float32)


EXPONENTS = (-43, -41, -40, -39, -17, -1, 0, 1, 12, 38, 39, 40)
"""Twelve octaves: inside the window, at both of its edges and beyond them (clamped)."""


@pytest.mark.parametrize(
    ("scale", "dtype"),
    [(0, np.float32), (5, np.float32), (6, np.float32), (8, np.float32), (5, np.float64), (8, np.float64)],
)
def test_every_float32_mantissa_lands_in_its_bucket(scale: int, dtype: Any) -> None:
    """Every float32 mantissa at twelve exponents (and negated at two), bucket by bucket: the values between two
    consecutive boundaries must all land in the one slot that the exact definition gives both ends of the run. The
    fast path decides most of them by squaring the mantissa; those near a boundary fall back to the exact table."""
    layout = ExponentialLayout(scale)
    arguments = kernels.LayoutArguments.of(layout)
    mantissas = _mantissas()
    cuts = np.unique(np.concatenate(([0, 1], np.searchsorted(mantissas, layout.boundaries, side="right"), [1 << 23])))
    for exponent in EXPONENTS:
        for sign in (1, -1) if exponent in (-40, 0) else (1,):
            values = (sign * np.ldexp(mantissas, exponent)).astype(dtype)
            for start, stop in pairwise(cuts.tolist()):
                run = values[start:stop]
                slots = {layout.slot(float(run[0])), layout.slot(float(run[-1]))}
                ends = {exponential_index(abs(float(v)), scale) for v in (run[0], run[-1])}
                assert len(slots) == 1 and len(ends) == 1, (exponent, start, stop)
                (slot,) = slots
                counts = kernels.summarize_values(arguments, run, None).counts
                assert counts[slot] == stop - start == counts.sum(), (exponent, sign, start, stop)


@pytest.mark.parametrize("layout", [ExponentialLayout(5), ExponentialLayout(8)])
def test_subnormals_fall_in_the_lowest_bucket_of_their_side(layout: ExponentialLayout) -> None:
    """Every float32 subnormal (and zeros of both signs, and a sweep of float64 subnormals): the lowest bucket of its
    side, zeros in the zero bucket, on the float32 and the float64 paths."""
    magnitudes = np.arange(1, 1 << 23, dtype=np.int32).view(np.float32)
    lowest_positive, lowest_negative = layout.width + 1, 0
    for values in (magnitudes, magnitudes.astype(np.float64)):
        for sign, slot in ((1, lowest_positive), (-1, lowest_negative)):
            counts = summarize(sign * values, None, layout).counts
            assert counts[slot] == values.size == counts.sum()
    tiny = np.arange(1, 1 << 20, 977, dtype=np.int64).view(np.float64)
    assert summarize(-tiny, None, layout).counts[lowest_negative] == tiny.size
    zeros = summarize(np.array([0.0, -0.0, 0.0], dtype=np.float32), None, layout)
    assert zeros.counts[layout.width] == 3 and (zeros.minimum, zeros.maximum) == (0.0, 0.0)


SPECIAL = [math.nan, -math.nan, math.inf, -math.inf, 800.0, -800.0, 2.0**800, -(2.0**800), 2.0**-800, -(2.0**-800)]
SPECIAL += [1e-320, -5e-324, 1.7976931348623157e308, -1.7976931348623157e308, 2.0**40, 2.0**-40, 2.0**40 + 2**-12]


@pytest.mark.parametrize("layout", [*EXPONENTIAL, *EXPLICIT], ids=repr)
def test_nan_inf_and_far_values(layout: Layout) -> None:
    """NaN and inf are counted and kept out; ±800, ±2**±800, the float64 extremes and the window's edges land where
    the exact definition puts them (for exponential layouts also checked against the rational reference)."""
    values = np.array(SPECIAL)
    summary = summarize(values, None, layout)
    assert_matches(summary, reference(values, None, layout))
    assert summary.nonfinite == 4
    if isinstance(layout, ExponentialLayout):
        for value in values[np.isfinite(values)].tolist():
            side = layout.width + 1 if value > 0 else 0
            index = exponential_index(abs(value), layout.scale)
            assert summarize(np.array([value]), None, layout).counts[side + index - layout.lowest] == 1, value


@pytest.mark.parametrize("layout", EXPLICIT[:1] + EXPLICIT[2:], ids=repr)
def test_explicit_bounds_and_their_neighbours(layout: ExplicitLayout) -> None:
    """Each bound, its float32 and float64 neighbours on both sides: upper-inclusive, on both paths (a float32 is
    compared with the bounds rounded down to float32)."""
    bounds = np.array(layout.bounds)
    with np.errstate(over="ignore"):
        near = bounds.astype(np.float32)
        single = np.concatenate((near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, np.float32(-np.inf))))
    double = np.concatenate((bounds, np.nextafter(bounds, np.inf), np.nextafter(bounds, -np.inf)))
    for values in (single, double):
        assert_matches(summarize(values, None, layout), reference(values, None, layout))


def test_exp_is_within_one_unit_in_the_last_place() -> None:
    """The vectorizable ``exp`` of the ratio is within 1 ulp of the C library's, over the whole range, subnormal
    results included, and exact for 0, ±inf and NaN."""
    generator = np.random.default_rng(0)
    d = np.concatenate(
        (
            generator.uniform(-1, 1, 20_000),
            generator.uniform(-745.2, 709.8, 20_000),
            generator.standard_normal(5_000) * 1e-9,
            [0.0, -0.0, 709.78, 709.79, 1e6, -745.1, -745.2, -1e6, math.inf, -math.inf, math.nan, -708.4],
        )
    )
    ratio, k1, k3 = np.empty_like(d), np.empty_like(d), np.empty_like(d)
    kernels._mismatch(d, np.zeros_like(d), ratio, k1, k3)
    with np.errstate(over="ignore"):
        expected = np.exp(d)
    same = (ratio == expected) | (np.isnan(ratio) & np.isnan(expected))
    distance = np.abs(ratio.view(np.int64) - expected.view(np.int64))
    assert (same | (distance <= 1)).all(), d[~(same | (distance <= 1))][:5]
    assert (k1 == -d)[~np.isnan(d)].all()
    arguments = kernels.LayoutArguments.of(ExponentialLayout(5))
    layouts = kernels.TokenLayouts.of((arguments, arguments, arguments, arguments))
    for value in (11.0, -11.0, 0.3, 700.0, -700.0, -740.0, 709.7):
        # inside the fused kernel too, which numba compiles with fastmath (it once leaked into the exp: 3 ulps off)
        (_, ratio_summary, _, _), _ = kernels.summarize_tokens(
            layouts, None, (np.array([value]), np.array([0.0]), None), None
        )
        assert abs(ratio_summary.maximum - math.exp(value)) <= math.ulp(math.exp(value)), value


@dataclass(frozen=True)
class Tokens:
    """One call's per-token fields, flat, and its mask."""

    entropy: np.ndarray
    train: np.ndarray
    inference: np.ndarray
    mask: np.ndarray


@st.composite
def tokens(draw: st.DrawFn) -> Tokens:
    """Log-probabilities whose difference is 0, NaN, ±inf, ±800 or at least 1e-3 in magnitude: below that, k3 =
    (r - 1) - d is all rounding of r (as on every path), and which exp rounds it decides its bucket."""
    rows, columns = draw(st.integers(1, 12)), draw(st.integers(0, 400))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    shape = (rows, columns)
    logits = st.floats(-30, 0, width=32) | st.sampled_from([math.nan, -math.inf, 0.0])
    differences = (
        st.floats(1e-3, 30) | st.floats(-30, -1e-3) | st.sampled_from([0.0, math.nan, math.inf, 800.0, -800.0])
    )
    train = draw(arrays(dtype, shape, elements=logits))
    with np.errstate(invalid="ignore", over="ignore"):
        inference = (train - draw(arrays(np.float64, shape, elements=differences))).astype(dtype)
    return Tokens(
        entropy=draw(arrays(dtype, shape, elements=st.floats(0, 10, width=32) | st.just(math.nan))),
        train=train,
        inference=inference,
        mask=draw(arrays(np.bool_, shape)),
    )


@settings(max_examples=120, deadline=None)
@given(fields=tokens(), entropy=st.booleans(), logprobs=st.booleans(), threads=st.booleans(), masked=st.booleans())
def test_token_pass_matches_a_per_value_reference(
    fields: Tokens, entropy: bool, logprobs: bool, threads: bool, masked: bool
) -> None:
    """Entropy, ratio = exp(d), k1 = -d and k3 = (r - 1) - d of d = trainer - inference log-probabilities (NaN,
    -inf and -800 among them: NaN, inf and 0 ratios), in one pass with or without a mask, whole rows claimed by 3
    threads: each equals the per-value reference (ratio and k3 from the C library's exp: the extremes within 2 ulps),
    and the rows that have a selected token are found."""
    layouts = Layouts.resolve("exponential", scale=5)
    arguments = kernels.LayoutArguments.of(layouts.of(contract.ENTROPY))
    stacked = kernels.TokenLayouts.of((arguments, arguments, arguments, arguments))
    keep = fields.mask.reshape(-1) if masked else None
    call = (
        stacked,
        (fields.entropy.reshape(-1), keep) if entropy else None,
        (fields.train.reshape(-1), fields.inference.reshape(-1), keep) if logprobs else None,
        fields.mask if masked and (entropy or logprobs) else None,
    )
    if threads:
        with chunked():
            summaries, rows = kernels.summarize_tokens(*call)
    else:
        summaries, rows = kernels.summarize_tokens(*call)
    layout = layouts.of(contract.ENTROPY)
    with np.errstate(over="ignore", invalid="ignore"):
        d = fields.train.astype(np.float64) - fields.inference.astype(np.float64)
        ratio = np.exp(d)
        derived = (fields.entropy, ratio, -d, (ratio - 1) - d)
    wanted = (entropy, logprobs, logprobs, logprobs)
    for field, (values, given_) in enumerate(zip(derived, wanted, strict=True)):
        expected = reference(values, keep.reshape(values.shape) if keep is not None else None, layout)
        if not given_:
            assert summaries[field].count == 0 and summaries[field].counts.sum() == 0
        elif field in (1, 3):  # from exp: r within an ulp of the C library's, so k3 = (r - 1) - d within ulps of 1
            got = summaries[field]
            assert (got.count, got.nonfinite, got.counts.tolist()) == (
                expected.count,
                expected.nonfinite,
                expected.counts,
            )
            for a, b in ((got.minimum, expected.minimum), (got.maximum, expected.maximum)):
                slack = 2 * math.ulp(b) if field == 1 else 4 * math.ulp(max(1.0, abs(b)))
                assert a == b or abs(a - b) <= slack or (math.isnan(a) and math.isnan(b)), (field, a, b)
            slack = 0.0 if field == 1 else 4 * math.ulp(1.0) * got.count
            for a, b in ((got.positive, expected.positive), (got.negative, expected.negative)):
                assert a == b or abs(a - b) <= RELATIVE * abs(b) + slack, (field, a, b)
        else:
            assert_matches(summaries[field], expected)
    if masked and (entropy or logprobs):
        assert rows is not None and rows.tolist() == fields.mask.any(axis=1).tolist()


@settings(max_examples=80, deadline=None)
@given(
    lags=arrays(np.int64, st.integers(0, 3000), elements=st.integers(0, 12) | st.integers(-3, 5000)),
    current=st.sampled_from([20, 5000, 2**62, 2**63 - 1]),
    layout=st.sampled_from([ExplicitLayout((0, 1, 2, 4, 8, 100)), ExponentialLayout(5)]),
    threads=st.booleans(),
    data=st.data(),
)
def test_staleness_blocks_count_like_a_per_value_loop(
    lags: np.ndarray, current: int, layout: Layout, threads: bool, data: st.DataObject
) -> None:
    """Blocks of a few lags (SIMD counting) and of many (one increment each), negative versions (unversioned, down to
    -2**63, whose lag would overflow), future versions and lags above the per-integer table, masked or not: the same
    counts as a per-value loop."""
    versions = current - lags
    odd = [-1, -(2**63), 2**63 - 1] + ([current + 1] if current < 2**63 - 1 else [])
    versions[lags < 0] = data.draw(st.sampled_from(odd))
    keep = data.draw(arrays(np.bool_, versions.shape)) if data.draw(st.booleans()) else None
    arguments = kernels.LayoutArguments.of(layout)
    table = 64
    if threads:
        with chunked():
            fine, above, counts = kernels.summarize_staleness(arguments, versions, keep, current, table)
    else:
        fine, above, counts = kernels.summarize_staleness(arguments, versions, keep, current, table)
    expected = np.zeros(table + 4, dtype=np.int64)
    beyond: list[int] = []
    for index, version in enumerate(versions.tolist()):
        if keep is not None and not keep[index]:
            expected[table] += 1
        elif version < 0:
            expected[table + 1] += 1
        elif current - version < 0:
            expected[table + 2] += 1
        elif current - version >= table:
            expected[table + 3] += 1
            beyond.append(current - version)
        else:
            expected[current - version] += 1
    assert fine.tolist() == expected.tolist()
    assert above == (len(beyond), sum(beyond), min(beyond, default=2**63 - 1), max(beyond, default=-1))
    assert counts.tolist() == np.bincount([layout.slot(s) for s in beyond], minlength=layout.size).tolist()


class TorchValues(ValueSummarizer):
    """The device (torch) path, run on the CPU."""

    kernel_devices = frozenset()


@settings(max_examples=150, deadline=None)
@given(
    ids=arrays(np.int64, st.integers(1, 60), elements=st.integers(-2, 6)),
    data=st.data(),
)
def test_group_counts_on_the_cpu_equal_the_device_path(ids: np.ndarray, data: st.DataObject) -> None:
    """Prompt-group outcomes, zero-variance groups and every left-out reason: the compiled CPU pass equals the
    torch path devices take, for rewards with NaN and ties, a mask and float ids that are not all integral."""
    n = ids.size
    rewards = data.draw(arrays(np.float64, n, elements=st.sampled_from([0.0, 1.0, 0.5, 2.0, math.nan])))
    group_ids: Any = ids
    if data.draw(st.booleans()):
        group_ids = ids.astype(np.float64)
        group_ids[data.draw(st.integers(0, n - 1))] = data.draw(st.sampled_from([0.5, math.nan, math.inf]))
    mask = data.draw(arrays(np.bool_, (n, 3))) if data.draw(st.booleans()) else None
    layouts = Layouts.resolve("exponential", scale=5)
    results = [
        RolloutSummarizer(layouts, solved_reward=1.0, summarizer=summarizer).summarize(
            Rollouts(mask=mask, group_ids=group_ids, rewards=torch.from_numpy(rewards))
        )
        for summarizer in (ValueSummarizer, TorchValues)
    ]
    cpu, device = ((r.counts, sorted(r.rejected_parts), r.grouped, r.rejected) for r in results)
    assert cpu == device


def test_a_helper_that_never_starts_is_not_waited_for() -> None:
    """With the pool's threads busy elsewhere (for 2 s), the caller does every chunk itself and returns at once; the
    queued helper is cancelled and never runs."""
    blocker = threading.Event()
    started = threading.Event()
    pool, workers = parallel._executor()
    busy = [pool.submit(blocker.wait) for _ in range(workers)]  # every thread of the pool busy
    release = threading.Timer(2.0, blocker.set)
    release.start()
    counter = [0]
    ran = []

    def claiming(name: str) -> int:
        ran.append(name)
        done = 0
        while counter[0] < 8:
            counter[0] += 1
            done += 1
        return done

    def helper() -> int:
        started.set()
        return claiming("helper")

    try:
        began = time.perf_counter()
        done = parallel.run([lambda: claiming("caller"), helper], 8)
        elapsed = time.perf_counter() - began
    finally:
        release.join()
        for future in busy:
            future.result()
    assert done == [8, 0] and elapsed < 1.0
    assert not started.wait(0.2) and ran == ["caller"]


def test_the_caller_waits_for_chunks_a_helper_claimed() -> None:
    """A helper that took chunks finishes them before the caller combines: run returns only after it is done."""
    lock = threading.Lock()
    claimed = threading.Event()
    counter = [0]
    finished: list[str] = []

    def claim() -> bool:
        with lock:
            if counter[0] >= 6:
                return False
            counter[0] += 1
            return True

    def helper() -> int:
        done = 0
        while claim():
            done += 1
            claimed.set()
            time.sleep(0.05)
        finished.append("helper")
        return done

    def caller() -> int:
        claimed.wait(5)
        done = 0
        while claim():
            done += 1
        return done

    done = parallel.run([caller, helper], 6)
    assert finished == ["helper"] and sum(done) == 6 and done[1] >= 1


def _claiming(counter: list[int], lock: threading.Lock, chunks: int, seconds: float) -> Callable[[], int]:
    """A stand-in kernel: claims chunks until none is left, ``seconds`` each."""

    def task() -> int:
        done = 0
        while True:
            with lock:
                if counter[0] >= chunks:
                    return done
                counter[0] += 1
            done += 1
            time.sleep(seconds)

    return task


def test_helpers_that_made_the_caller_wait_are_backed_off_from(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call whose helper held the caller up (here: a helper 20x slower per chunk, as a descheduled one is) makes
    the next large inputs run on the caller alone; a call the helper sped up hands work out again at once."""
    monkeypatch.setattr(parallel, "_backoff", parallel._Backoff())
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    large = parallel.PARALLEL_CHUNKS * parallel.MIN_CHUNK
    assert parallel.plan(large).threads == 2
    lock = threading.Lock()
    counter = [0]
    first_claimed = threading.Event()
    slow_helper = _claiming(counter, lock, 4, 0.2)

    def helper() -> int:
        first_claimed.set()
        return slow_helper()

    def caller() -> int:
        first_claimed.wait(5)
        return _claiming(counter, lock, 4, 0.01)()

    assert parallel.run([caller, helper], 4) == [3, 1]
    assert parallel.plan(large).threads == 1  # backed off
    monkeypatch.setattr(parallel._backoff, "until", 0)
    assert parallel.plan(large).threads == 2
    counter[0] = 0
    alike = _claiming(counter, lock, 8, 0.02)
    done = parallel.run([alike, alike], 8)
    assert sum(done) == 8 and min(done) >= 2
    assert parallel.plan(large).threads == 2 and parallel._backoff.misses == 0


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2 or parallel._core is None,
    reason="needs two cores and Linux's affinity calls",
)
def test_helpers_run_off_the_callers_core() -> None:
    """Before it hands work out, the caller moves the pool's threads off the core it is on (woken there, a helper
    preempted it and did everything while the caller waited): the helper's allowed cores exclude the caller's."""
    allowed = os.sched_getaffinity(0)
    core = parallel._core
    assert core is not None
    for _ in range(200):  # the caller may move between cores during a call (often on a loaded machine): retried
        seen: list[set[int]] = []
        started = threading.Event()

        def helper() -> int:
            seen.append(os.sched_getaffinity(0))
            started.set()
            return 1

        before = core()
        assert parallel.run([lambda: started.wait(5) and 0, helper], 1) == [0, 1]
        if core() == before:
            assert seen == [allowed - {before}]
            return
    pytest.fail("the caller moved between cores in every attempt")
