"""Fused CPU kernels (compiled with numba): every statistic of one record call in one pass over its inputs.

A call reads each input once: the mask and the values together, never a selected copy of them. The pass goes block
by block (:data:`BLOCK` values, so a block's intermediates stay in the L1 cache) in three stages:

1. statistics, vectorized (SIMD) over the block: validity (masked out, NaN/inf) counted, count, sums in float64
   (positive and negative parts, squares), extremes (as order-preserving integer keys of the float64 bits, whose
   min/max reductions vectorize);
2. each value's slot in the bucket layout, vectorized: for exponential buckets the exponent bits give the octave
   and repeated squaring of the mantissa gives the sub-bucket (``m**(2**scale)``'s exponent is
   ``floor(2**scale * log2(m))``); a value whose squared mantissa lands within ``2**-11`` (float32) or ``2**-22``
   (float64) of a power of two, about one in a thousand, is flagged instead, because rounding could put it on the
   wrong side of a boundary. Explicit bounds below a value are counted eight at a time (up to
   :data:`LINEAR_BOUNDS`; beyond that, flagged). Rejected values go to one of :data:`TRASH` spare slots;
3. the bucket increments, in order, one per value; a flagged value's slot is computed exactly there, from the
   exponent and the correctly rounded float64 boundaries (``otel_rl._record.buckets``), as it always was.

Values exactly representable in float32 (float32, int8, int16, uint8 and bools) take 32-bit lanes in stage 2, twice
as many per instruction; numba promotes 32-bit integer arithmetic to 64 bits, so that stage uses the 32-bit
intrinsics below. The sums are reassociated for SIMD (``fastmath`` reassoc): equal to a sequential float64 sum
within 1e-12 relative; counts, buckets and extremes are exact and do not depend on the order.

Large inputs are split into chunks that the calling thread and pool threads claim from a shared counter
(:func:`claim`, an atomic increment) until none is left; each thread has its own tallies and the caller combines them
(``otel_rl._record.parallel``). Tensors on other devices use the torch path in ``otel_rl._record.stats``.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from otel_rl._record import parallel
from otel_rl._record.buckets import WINDOW_OCTAVES, Layout

BLOCK = 1024
"""Values per block: one block's slots and intermediates stay in the L1 cache between the stages."""
TRASH = 16
"""Spare slots at the end of every tally, where rejected values are counted (value ``j`` in slot ``size + j % 16``):
one shared slot would chain every increment to the previous one through memory."""
LINEAR_BOUNDS = 64
"""Explicit layouts up to this many bounds count the bounds below each value in SIMD; longer ones binary-search."""
INTEGERS = ("count", "nonfinite", "low", "high")
"""The integer accumulators of one distribution (``low``/``high``: extremes as keys, see :func:`value_of`)."""
FLOATS = ("positive", "negative", "squares")
"""The float64 accumulators of one distribution (``negative`` is the sum of the negative values, negated)."""

_FAST = {"reassoc", "nsz", "contract"}
_MAGNITUDE = (1 << 63) - 1
_FRACTION = (1 << 52) - 1
_ONE = 1023 << 52
_INFINITY = 0x7FF0000000000000
_MAGNITUDE32 = 0x7FFFFFFF
_FRACTION32 = 0x7FFFFF
_ONE32 = 0x3F800000
_INFINITY32 = 0x7F800000
_LOOKUP_SHIFT = 42
_INT64_MAX = np.iinfo(np.int64).max
_LOW_KEY = _INFINITY
"""The key of +inf: the running minimum starts there (and stays there when nothing was accepted)."""
_HIGH_KEY = -_INFINITY - 1
"""The key of -inf."""
_LOG2E = 1.4426950408889634
_LN2_HIGH = 6.93147180369123816490e-01
"""ln 2 rounded to 32 significant bits (fdlibm's ``ln2_hi``): ``k * _LN2_HIGH`` is exact for every ``|k| < 2**21``."""
_LN2_LOW = 1.90821492927058770002e-10
_EXP_TERMS = tuple(1.0 / math.factorial(k) for k in range(14))
_NO_MASK = np.empty(0, dtype=np.bool_)
_START = np.array([0, 0, _LOW_KEY, _HIGH_KEY], dtype=np.int64)
"""Each distribution's integer accumulators before any value (:data:`INTEGERS`)."""
_NO_VALUES = np.empty(0, dtype=np.float32)


# -- intrinsics: bit casts, 32-bit integer arithmetic, an atomic counter ------------------------------------------


def _bitcast(source: types.Type, target: types.Type, llvm: ir.Type) -> Any:
    """An intrinsic reinterpreting the bits of a ``source`` scalar as a ``target`` scalar (no conversion)."""

    @intrinsic
    def bitcast(typingctx, x):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
        if x != source:
            return None

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            return builder.bitcast(args[0], llvm)

        return target(source), codegen

    return bitcast


_bits = _bitcast(types.float64, types.int64, ir.IntType(64))
"""The int64 bit pattern of a float64."""
_double = _bitcast(types.int64, types.float64, ir.DoubleType())
"""The float64 of an int64 bit pattern."""
_bits32 = _bitcast(types.float32, types.int32, ir.IntType(32))
"""The int32 bit pattern of a float32."""
_single = _bitcast(types.int32, types.float32, ir.FloatType())
"""The float32 of an int32 bit pattern."""


def _int32(build: Callable[[ir.IRBuilder, ir.Value, ir.Value], ir.Value]) -> Any:
    """An intrinsic computing ``build(a, b)`` on two integers (or bools) truncated to int32, in int32 (numba's own
    integer arithmetic widens to int64, which halves the SIMD lanes)."""

    @intrinsic
    def operation(typingctx, a, b):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
        if not all(isinstance(t, (types.Integer, types.Boolean)) for t in (a, b)):
            return None

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            left, right = (context.cast(builder, v, t, types.int32) for v, t in zip(args, signature.args, strict=True))
            return build(builder, left, right)

        return types.int32(a, b), codegen

    return operation


_add32 = _int32(lambda b, x, y: b.add(x, y))
_sub32 = _int32(lambda b, x, y: b.sub(x, y))
_and32 = _int32(lambda b, x, y: b.and_(x, y))
_or32 = _int32(lambda b, x, y: b.or_(x, y))
_shl32 = _int32(lambda b, x, y: b.shl(x, y))
_sra32 = _int32(lambda b, x, y: b.ashr(x, y))
_min32 = _int32(lambda b, x, y: b.select(b.icmp_signed("<", x, y), x, y))
_max32 = _int32(lambda b, x, y: b.select(b.icmp_signed(">", x, y), x, y))


def _claim(typingctx, counter):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        array = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.atomic_rmw("add", array.data, ir.Constant(ir.IntType(64), 1), "monotonic")

    return types.int64(counter), codegen


claim: Any = intrinsic(_claim)
"""Atomically increment ``counter[0]`` (an int64 array) and return its previous value: the next chunk to do."""


# -- one value ------------------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _bucket(x, bounds):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The first index i with ``x <= bounds[i]`` (``len(bounds)`` when x is above every bound)."""
    lo, hi = 0, bounds.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if x <= bounds[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(cache=True, nogil=True)
def _exact_slot(x, scale, bounds, lookup, fractions):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The slot of finite float64 ``x`` in the layout the arguments describe (explicit ``bounds`` when ``scale < 0``,
    else ``otel_rl._record.buckets.ExponentialLayout(scale)``): the boundaries' exact mantissas decide, through a table
    on the top mantissa bits and one comparison."""
    if scale < 0:
        return _bucket(x, bounds)
    lowest = -(WINDOW_OCTAVES << scale)
    width = -2 * lowest
    bits = _bits(x)
    magnitude = bits & _MAGNITUDE
    if magnitude == 0:
        return width
    fraction = magnitude & _FRACTION
    below = lookup[np.uint64(fraction >> _LOOKUP_SHIFT)]
    below += fractions[np.uint64(below)] < fraction
    index = min(max((((magnitude >> 52) - 1023) << scale) + below - 1, lowest), -lowest - 1) - lowest
    return index + (width + 1) * (1 + (bits >> 63))


@njit(cache=True, nogil=True)
def _slot64(bits, scale):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The exponential slot of the float64 whose bits are ``bits`` (finite), or -1 when it is too close to a boundary
    for the squarings to decide (see the module docstring)."""
    lowest = -(WINDOW_OCTAVES << scale)
    width = -2 * lowest
    magnitude = bits & _MAGNITUDE
    fraction = magnitude & _FRACTION
    y = _double(fraction | _ONE)
    for _ in range(scale):
        y = y * y
    squared = _bits(y)
    power = fraction == 0
    near = (((squared >> 30) + 1) & 0x3FFFFF) <= 1
    index = (((magnitude >> 52) - 1023) << scale) + ((squared >> 52) - 1023) - np.int64(power)
    index = min(max(index, lowest), -lowest - 1) - lowest
    slot = index + (((bits >> 63) ^ -1) & (width + 1))
    slot = width if magnitude == 0 else slot
    return -1 if near & (not power) else slot


@njit(cache=True, nogil=True)
def _slot32(bits, scale):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`_slot64` for a float32's bits, in int32 arithmetic (scales up to 6: ``m**64`` stays a float32)."""
    lowest = np.int32(-(WINDOW_OCTAVES << scale))
    width = np.int32(-2 * lowest)
    magnitude = _and32(bits, _MAGNITUDE32)
    fraction = _and32(magnitude, _FRACTION32)
    y = _single(_or32(fraction, _ONE32))
    for _ in range(scale):
        y = y * y
    squared = _bits32(y)
    power = fraction == np.int32(0)
    near = _and32(_add32(_sra32(squared, 12), 1), 0x7FF) <= np.int32(1)
    index = _sub32(_add32(_shl32(_sub32(_sra32(magnitude, 23), 127), scale), _sub32(_sra32(squared, 23), 127)), power)
    index = _sub32(_max32(_min32(index, -lowest - 1), lowest), lowest)
    slot = _add32(index, _and32(_sra32(bits, 31) ^ np.int32(-1), width + 1))
    slot = width if magnitude == np.int32(0) else slot
    return np.int32(-1) if near & (not power) else slot


@njit(cache=True, nogil=True, fastmath=False)
def _exp(d):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``exp(d)`` in float64 within about one unit in the last place, branch-free so that it vectorizes (numba's
    ``math.exp`` is a call per value): ``d = k ln 2 + r`` (Cody-Waite), a degree-13 Taylor polynomial of ``exp(r)``
    for ``|r| <= ln 2 / 2``, and ``2**k`` from the exponent bits in two halves (subnormal results too). Never with
    fastmath: reassociation would undo the two-part reduction."""
    c = d if d > -746.0 else -746.0
    c = c if c < 710.0 else 710.0
    k = math.floor(c * _LOG2E + 0.5)
    r = (c - k * _LN2_HIGH) - k * _LN2_LOW
    p = _EXP_TERMS[13]
    p = p * r + _EXP_TERMS[12]
    p = p * r + _EXP_TERMS[11]
    p = p * r + _EXP_TERMS[10]
    p = p * r + _EXP_TERMS[9]
    p = p * r + _EXP_TERMS[8]
    p = p * r + _EXP_TERMS[7]
    p = p * r + _EXP_TERMS[6]
    p = p * r + _EXP_TERMS[5]
    p = p * r + _EXP_TERMS[4]
    p = p * r + _EXP_TERMS[3]
    p = p * r + _EXP_TERMS[2]
    p = p * r + 1.0
    p = p * r + 1.0
    n = np.int64(k)
    half = n >> 1
    value = p * _double((half + 1023) << 52) * _double((n - half + 1023) << 52)
    return d if d != d else value


# -- the three stages over one block ---------------------------------------------------------------------------------


def value_of(key: int) -> float:
    """The float64 of a key: the kernels keep extremes as order-preserving int64 keys of the float64 bits (``bits ^
    ((bits >> 63) & 0x7FF...F)``: keys compare as the values do, ``-0.0`` below ``0.0``), because integer min/max
    reductions vectorize."""
    (value,) = struct.unpack("<d", struct.pack("<q", key ^ ((key >> 63) & _MAGNITUDE)))
    return float(value)


@njit(cache=True, nogil=True, fastmath=_FAST)
def _statistics(values, keep, masked, integers, floats):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """Stage 1 over one block, added to one distribution's accumulators (``integers``: :data:`INTEGERS`, ``floats``:
    :data:`FLOATS`)."""
    count = 0
    nonfinite = 0
    positive = 0.0
    negative = 0.0
    squares = 0.0
    low = np.int64(_LOW_KEY)
    high = np.int64(_HIGH_KEY)
    for j in range(values.shape[0]):
        x = np.float64(values[j])
        bits = _bits(x)
        finite = (bits & _MAGNITUDE) < _INFINITY
        kept = keep[j] != 0 if masked else True
        ok = kept & finite
        nonfinite += kept & (not finite)
        count += ok
        v = x if ok else 0.0
        positive += max(v, 0.0)
        negative += min(v, 0.0)
        squares += v * v
        key = bits ^ ((bits >> 63) & _MAGNITUDE)
        low = min(low, key if ok else np.int64(_LOW_KEY))
        high = max(high, key if ok else np.int64(_HIGH_KEY))
    integers[0] += count
    integers[1] += nonfinite
    integers[2] = min(integers[2], low)
    integers[3] = max(integers[3], high)
    floats[0] += positive
    floats[1] -= negative
    floats[2] += squares


@njit(cache=True, nogil=True)
def _above(x, bounds, t):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """How many of ``bounds[t:t + 8]`` lie below ``x``, in int32."""
    pairs = _add32(_add32(x > bounds[t], x > bounds[t + 1]), _add32(x > bounds[t + 2], x > bounds[t + 3]))
    return _add32(
        pairs, _add32(_add32(x > bounds[t + 4], x > bounds[t + 5]), _add32(x > bounds[t + 6], x > bounds[t + 7]))
    )


@njit(cache=True, nogil=True, fastmath=_FAST)
def _slots(values, keep, masked, narrow, scale, bounds, thresholds, size, slots):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Stage 2 over one block: each value's slot into ``slots`` (-1: decide exactly in stage 3; rejected values:
    ``size + j % TRASH``). ``narrow``: the values are exact in float32. Explicit layouts count the bounds below each
    value eight at a time (see :class:`LayoutArguments`: ``thresholds`` are the bounds rounded down to float32, which
    compare with a float32 exactly as the bounds do)."""
    m = values.shape[0]
    if scale < 0:
        if thresholds.shape[0] > LINEAR_BOUNDS:
            for j in range(m):
                slots[j] = -1
        else:
            for j in range(m):
                slots[j] = 0
            for t in range(0, thresholds.shape[0], 8):
                for j in range(m):
                    if narrow:
                        slots[j] = _add32(slots[j], _above(np.float32(values[j]), thresholds, t))
                    else:
                        slots[j] = _add32(slots[j], _above(np.float64(values[j]), bounds, t))
    for j in range(m):
        if narrow:
            bits32 = _bits32(np.float32(values[j]))
            finite = _and32(bits32, _MAGNITUDE32) < np.int32(_INFINITY32)
            slot = _slot32(bits32, scale) if scale >= 0 else slots[j]
        else:
            bits = _bits(np.float64(values[j]))
            finite = (bits & _MAGNITUDE) < _INFINITY
            slot = np.int32(_slot64(bits, scale)) if scale >= 0 else slots[j]
        ok = (keep[j] != 0 if masked else True) & finite
        slots[j] = slot if ok else _add32(size, _and32(j, TRASH - 1))


@njit(cache=True, nogil=True)
def _tally(values, slots, scale, bounds, lookup, fractions, tally):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Stage 3 over one block: one increment per value, at its slot (computed exactly here when stage 2 flagged it)."""
    for j in range(values.shape[0]):
        slot = slots[j]
        if slot < 0:
            slot = _exact_slot(np.float64(values[j]), scale, bounds, lookup, fractions)
        tally[slot] += 1


# -- kernels ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayoutArguments:
    """A layout as the kernels take it: ``scale`` (-1 for explicit bounds), ``bounds`` (float64, padded with +inf to a
    multiple of 8, which changes no slot) and ``thresholds`` (those rounded down to float32), the exponential
    ``lookup`` and ``fractions`` tables, and ``size`` (slots)."""

    scale: int
    bounds: np.ndarray
    thresholds: np.ndarray
    lookup: np.ndarray
    fractions: np.ndarray
    size: int

    @classmethod
    def of(cls, layout: Layout) -> LayoutArguments:
        bounds, scale, lookup, fractions = layout.kernel_arguments
        padded = np.concatenate((bounds, np.full(-len(bounds) % 8, np.inf)))
        with np.errstate(over="ignore"):
            near = padded.astype(np.float32)
            thresholds = np.where(near.astype(np.float64) > padded, np.nextafter(near, np.float32(-np.inf)), near)
        return cls(scale, padded, thresholds.astype(np.float32), lookup, fractions, layout.size)

    def tallies(self, threads: int) -> np.ndarray:
        """Zeroed int64 tallies, one row per thread: the layout's slots and :data:`TRASH`."""
        return np.zeros((threads, self.size + TRASH), dtype=np.int64)


def narrow(dtype: np.dtype[Any], scale: int) -> bool:
    """Whether stage 2 takes values of ``dtype`` in 32-bit lanes: they are exact in float32, and the layout is
    explicit or exponential up to scale 6 (``m**128`` can overflow a float32)."""
    return dtype in (np.float32, np.int8, np.int16, np.uint8, np.bool_) and scale <= 6


def accumulators(fields: int) -> tuple[np.ndarray, np.ndarray]:
    """Fresh ``(integers, floats)`` accumulators of ``fields`` distributions (see :data:`INTEGERS`, :data:`FLOATS`)."""
    return np.tile(_START, (fields, 1)), np.zeros((fields, len(FLOATS)), dtype=np.float64)


@functools.cache
def value_kernel(scale: int, narrow: bool, masked: bool) -> Callable[..., int]:
    """The one-pass kernel of one distribution, compiled for a layout (``scale``; -1 means explicit bounds), for
    values exact in float32 or not (``narrow``) and for input with or without a mask. The flags are compile-time
    constants: at run time they made the loops branch (and a run-time scale made the loop 2x slower).

    ``kernel(values, keep, bounds, thresholds, lookup, fractions, tally, integers, floats, counter, chunk)`` claims
    chunks of ``chunk`` values from ``counter`` until none is left and returns how many it did; ``tally`` (zeroed,
    size + :data:`TRASH`), ``integers`` and ``floats`` (from :func:`accumulators`, one row) receive its results."""

    @njit(cache=True, nogil=True, fastmath=_FAST)
    def summarize_values(values, keep, bounds, thresholds, lookup, fractions, tally, integers, floats, counter, chunk):  # type: ignore[no-untyped-def]  # pragma: no cover
        n = values.shape[0]
        slots = np.empty(BLOCK, dtype=np.int32)
        chunks = (n + chunk - 1) // chunk
        done = 0
        while True:
            c = claim(counter)
            if c >= chunks:
                return done
            done += 1
            end = min(c * chunk + chunk, n)
            for start in range(c * chunk, end, BLOCK):
                stop = min(start + BLOCK, end)
                block = values[start:stop]
                kept = keep[start:stop] if masked else keep
                _statistics(block, kept, masked, integers[0], floats[0])
                _slots(block, kept, masked, narrow, scale, bounds, thresholds, tally.shape[0] - TRASH, slots)
                _tally(block, slots, scale, bounds, lookup, fractions, tally)

    return summarize_values


@functools.cache
def token_kernel(scale: int, narrow_entropy: bool, masked: bool) -> Callable[..., int]:
    """The one-pass kernel of ``record_rollouts``' per-token fields: entropy, and from the two log-probabilities
    ``d = logprobs - inference_logprobs`` (float64) the importance ratio ``r = exp(d)`` and the mismatch KL estimators
    ``k1 = -d`` and ``k3 = (r - 1) - d``, each a distribution (rows 0 to 3 of the accumulators and tallies), and
    which rollouts have a selected token.

    ``kernel(entropy, keep_entropy, logprobs, inference, keep_logprobs, mask, rows, row_length, bounds, thresholds,
    sizes, lookup, fractions, tallies, integers, floats, counter, chunk)``: an empty ``entropy`` or ``logprobs``
    skips that field; ``rows[i]`` is set when ``mask`` (flat uint8, ``row_length`` per rollout; empty for none) has
    a token in row ``i`` (chunks are whole rows). Each field has its own layout of one ``scale`` (see
    :class:`TokenLayouts`). The ratio, k1 and k3 exist only in the block being processed."""

    @njit(cache=True, nogil=True, fastmath=_FAST)
    def summarize_tokens(  # type: ignore[no-untyped-def]  # pragma: no cover
        entropy,
        keep_entropy,
        logprobs,
        inference,
        keep_logprobs,
        mask,
        rows,
        row_length,
        bounds,
        thresholds,
        sizes,
        lookup,
        fractions,
        tallies,
        integers,
        floats,
        counter,
        chunk,
    ):
        n = max(entropy.shape[0], logprobs.shape[0])
        slots = np.empty(BLOCK, dtype=np.int32)
        ratio = np.empty(BLOCK, dtype=np.float64)
        k1 = np.empty(BLOCK, dtype=np.float64)
        k3 = np.empty(BLOCK, dtype=np.float64)
        chunks = (n + chunk - 1) // chunk
        done = 0
        while True:
            c = claim(counter)
            if c >= chunks:
                return done
            done += 1
            end = min(c * chunk + chunk, n)
            for start in range(c * chunk, end, BLOCK):
                stop = min(start + BLOCK, end)
                if entropy.shape[0]:
                    block = entropy[start:stop]
                    kept = keep_entropy[start:stop] if masked else keep_entropy
                    _statistics(block, kept, masked, integers[0], floats[0])
                    _slots(block, kept, masked, narrow_entropy, scale, bounds[0], thresholds[0], sizes[0], slots)
                    _tally(block, slots, scale, bounds[0], lookup, fractions, tallies[0])
                if logprobs.shape[0]:
                    kept = keep_logprobs[start:stop] if masked else keep_logprobs
                    _mismatch(logprobs[start:stop], inference[start:stop], ratio, k1, k3)
                    m = stop - start
                    for field, derived in ((1, ratio[:m]), (2, k1[:m]), (3, k3[:m])):
                        _statistics(derived, kept, masked, integers[field], floats[field])
                        _slots(
                            derived, kept, masked, False, scale, bounds[field], thresholds[field], sizes[field], slots
                        )
                        _tally(derived, slots, scale, bounds[field], lookup, fractions, tallies[field])
            if mask.shape[0]:
                for row in range(c * chunk // row_length, end // row_length):
                    found = np.uint8(0)
                    for j in range(row * row_length, row * row_length + row_length):
                        found |= mask[j]
                    rows[row] = found != 0

    return summarize_tokens


@njit(cache=True, nogil=True, fastmath=False)
def _mismatch(train, inference, ratio, k1, k3):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``r = exp(d)``, ``k1 = -d`` and ``k3 = (r - 1) - d`` of ``d = train - inference`` in float64, per token of one
    block, in strict IEEE arithmetic: ``fastmath=False`` is explicit because numba otherwise compiles a callee with
    its caller's flags, and reassociation folds the two-part ln 2 of :func:`_exp` into one (3 ulps off at d = 11)."""
    for j in range(train.shape[0]):
        d = np.float64(train[j]) - np.float64(inference[j])
        r = _exp(d)
        ratio[j] = r
        k1[j] = -d
        k3[j] = (r - 1.0) - d


@functools.cache
def staleness_kernel(scale: int, masked: bool) -> Callable[..., tuple[int, int, int, int, int]]:
    """The one-pass staleness kernel, compiled for one layout and for input with or without a mask (see
    :func:`value_kernel`).

    ``kernel(versions, keep, current, fine, bounds, lookup, fractions, tally, counter, chunk)`` counts the staleness
    ``s = current - version`` of each kept element: ``fine[s]`` while ``s < table = len(fine) - 4 - TRASH`` (the
    caller folds ``fine`` into buckets and derives sum and extremes from it), ``fine[table]`` masked out,
    ``fine[table + 1]`` unversioned (negative versions: never lag 0), ``fine[table + 2]`` from the future (negative
    staleness, rejected), ``fine[table + 3]`` above the table, which are also summed exactly in int64 and counted at
    their slot in ``tally``. Per block, stage 1 (SIMD) counts the categories and the range of the staleness; when it
    spans fewer than 16 values (the usual few versions of lag) stage 2 counts each with SIMD comparisons, else it
    increments ``fine`` one element at a time. Returns chunks done, and count, sum and extremes of the staleness
    above the table."""

    @njit(cache=True, nogil=True, fastmath=_FAST)
    def summarize_staleness(versions, keep, current, fine, bounds, lookup, fractions, tally, counter, chunk):  # type: ignore[no-untyped-def]  # pragma: no cover
        n = versions.shape[0]
        table = fine.shape[0] - 4 - TRASH
        codes = np.empty(BLOCK, dtype=np.int32)
        above = 0
        above_total = 0
        above_minimum = _INT64_MAX
        above_maximum = -1
        chunks = (n + chunk - 1) // chunk
        done = 0
        while True:
            c = claim(counter)
            if c >= chunks:
                return done, above, above_total, above_minimum, above_maximum
            done += 1
            end = min(c * chunk + chunk, n)
            for start in range(c * chunk, end, BLOCK):
                stop = min(start + BLOCK, end)
                block = versions[start:stop]
                kept = keep[start:stop] if masked else keep
                table32 = np.int32(table)
                dropped = np.int32(0)
                unversioned = np.int32(0)
                future = np.int32(0)
                beyond = np.int32(0)
                low = table32
                high = np.int32(-1)
                for j in range(block.shape[0]):
                    version = np.int64(block[j])
                    # int64 only to clamp (-1: from the future, table: above it; max keeps the subtraction exact),
                    # the rest in int32 lanes, twice as many per instruction
                    lag = np.int32(min(max(current - max(version, 0), -1), table))
                    selected = kept[j] if masked else True
                    versioned = selected & (version >= 0)
                    dropped = _add32(dropped, not selected)
                    unversioned = _add32(unversioned, selected & (version < 0))
                    future = _add32(future, versioned & (lag < np.int32(0)))
                    beyond = _add32(beyond, versioned & (lag == table32))
                    fine_value = versioned & (lag >= np.int32(0)) & (lag < table32)
                    code = lag if fine_value else np.int32(-1)
                    codes[j] = code
                    low = _min32(low, lag if fine_value else table32)
                    high = _max32(high, code)
                fine[table] += dropped
                fine[table + 1] += unversioned
                fine[table + 2] += future
                fine[table + 3] += beyond
                m = stop - start
                if high - low < 16:
                    for value in range(low, high + 1):
                        found = np.int32(0)
                        for j in range(m):
                            found = _add32(found, codes[j] == value)
                        fine[value] += found
                else:
                    for j in range(m):
                        code = codes[j]
                        fine[code if code >= 0 else table + 4 + (j & (TRASH - 1))] += 1
                if beyond:
                    for j in range(m):
                        version = np.int64(block[j])
                        if (kept[j] if masked else True) and version >= 0 and current - version >= table:
                            staleness = current - version
                            above += 1
                            above_total += staleness
                            above_minimum = min(above_minimum, staleness)
                            above_maximum = max(above_maximum, staleness)
                            tally[_exact_slot(np.float64(staleness), scale, bounds, lookup, fractions)] += 1

    return summarize_staleness


@njit(cache=True, nogil=True)
def first_unmasked(values, keep, use_keep, out, present):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Per row of a ``(rollouts, tokens)`` array: the value at the first kept token into ``out``, and whether the
    row had one into ``present``. Stops scanning a row at its first kept token."""
    for row in range(values.shape[0]):
        present[row] = False
        for column in range(values.shape[1]):
            if not use_keep or keep[row, column]:
                out[row] = np.float64(values[row, column])
                present[row] = True
                break


@njit(cache=True, nogil=True)
def group_counts(ids, rewards, codes, offered, placed, solved_reward, spoiled_ids, out):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Prompt-group counts of one call (see ``otel_rl._record.rollouts``) into ``out`` (zeroed): ``[none, some, all,
    zero variance, rollouts that took part, incomplete_group, then the offered rollouts left out by reason code]``.
    ``codes`` (one per rollout) holds each rollout's reason code (0: usable); ``placed``: offered with a usable id;
    ``spoiled_ids``: an offered rollout's id was unusable, so no group has an exact outcome. Groups are runs of equal
    ids after a sort."""
    n = ids.shape[0]
    order = np.argsort(ids, kind="mergesort")
    start = 0
    while start < n:
        group = ids[order[start]]
        stop = start
        size = 0
        spoiled = 0
        solved = 0
        low = np.inf
        high = -np.inf
        while stop < n and ids[order[stop]] == group:
            i = order[stop]
            if placed[i]:
                size += 1
                if codes[i] != 0:
                    spoiled += 1
                else:
                    x = rewards[i]
                    solved += x >= solved_reward
                    low = min(low, x)
                    high = max(high, x)
            stop += 1
        exact = size > 0 and spoiled == 0 and not spoiled_ids
        if exact:
            out[0] += solved == 0
            out[2] += solved == size
            out[1] += solved != 0 and solved != size
            out[3] += low == high
            out[4] += size
        else:
            out[5] += size - spoiled
        start = stop
    for i in range(n):
        if offered[i] and codes[i] != 0:
            out[5 + codes[i]] += 1


# -- calls: one input split over threads, the per-thread results combined -------------------------------------------


@dataclass(frozen=True)
class Summary:
    """One distribution's accepted values: count, extremes (NaN when none), float64 sums, bucket ``counts`` (int64,
    the layout's slots), and ``nonfinite``: selected values that were NaN or inf."""

    count: int
    nonfinite: int
    minimum: float
    maximum: float
    positive: float
    negative: float
    squares: float
    counts: np.ndarray

    @classmethod
    def combine(cls, integers: np.ndarray, floats: np.ndarray, tallies: np.ndarray, size: int) -> Summary:
        """The summary of per-thread accumulators of one distribution (one row per thread)."""
        if integers.shape[0] == 1:  # one thread: no reductions (they cost more than a small call's kernel)
            count, nonfinite, low, high = integers[0].tolist()
            positive, negative, squares = floats[0].tolist()
            counts = tallies[0, :size]
        else:
            count, nonfinite = (int(n) for n in integers[:, :2].sum(axis=0))
            low, high = int(integers[:, 2].min()), int(integers[:, 3].max())
            positive, negative, squares = (sum(column) for column in zip(*floats.tolist(), strict=True))
            counts = tallies[:, :size].sum(axis=0)
        return cls(
            count=count,
            nonfinite=nonfinite,
            minimum=value_of(low) if count else math.nan,
            maximum=value_of(high) if count else math.nan,
            positive=positive,
            negative=negative,
            squares=squares,
            counts=counts,
        )


def summarize_values(layout: LayoutArguments, values: np.ndarray, keep: np.ndarray | None) -> Summary:
    """:func:`value_kernel` over 1-D ``values`` where 1-D bool ``keep`` is set (None: all), on as many threads as
    help (``otel_rl._record.parallel``)."""
    split = parallel.plan(values.shape[0])
    kernel = value_kernel(layout.scale, narrow(values.dtype, layout.scale), keep is not None)
    tallies = layout.tallies(split.threads)
    integers, floats = accumulators(split.threads)
    kept = _NO_MASK if keep is None else keep
    arguments = (layout.bounds, layout.thresholds, layout.lookup, layout.fractions)
    parallel.run(
        [
            functools.partial(
                kernel,
                values,
                kept,
                *arguments,
                tallies[i],
                integers[i : i + 1],
                floats[i : i + 1],
                split.counter,
                split.chunk,
            )
            for i in range(split.threads)
        ],
        split.chunks,
    )
    return Summary.combine(integers, floats, tallies, layout.size)


@dataclass(frozen=True)
class TokenLayouts:
    """The layouts of the per-token distributions of :func:`token_kernel` (entropy, ratio, k1, k3), stacked: one
    ``scale``, ``bounds`` and ``thresholds`` one row per field (padded with +inf to a common width), ``sizes``."""

    scale: int
    bounds: np.ndarray
    thresholds: np.ndarray
    sizes: np.ndarray
    lookup: np.ndarray
    fractions: np.ndarray

    @classmethod
    def of(cls, layouts: tuple[LayoutArguments, LayoutArguments, LayoutArguments, LayoutArguments]) -> TokenLayouts:
        width = max(len(layout.bounds) for layout in layouts)
        bounds = np.full((4, width), np.inf)
        thresholds = np.full((4, width), np.inf, dtype=np.float32)
        for row, layout in enumerate(layouts):
            bounds[row, : len(layout.bounds)] = layout.bounds
            thresholds[row, : len(layout.thresholds)] = layout.thresholds
        sizes = np.array([layout.size for layout in layouts], dtype=np.int64)
        if len({layout.scale for layout in layouts}) != 1:
            raise ValueError(f"per-token layouts must share one scale, got {[layout.scale for layout in layouts]}")
        first = layouts[0]
        return cls(first.scale, bounds, thresholds, sizes, first.lookup, first.fractions)


def summarize_tokens(
    layouts: TokenLayouts,
    entropy: tuple[np.ndarray, np.ndarray | None] | None,
    logprobs: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None,
    mask: np.ndarray | None,
) -> tuple[list[Summary], np.ndarray | None]:
    """:func:`token_kernel` over flat per-token fields of one length: ``entropy`` as ``(values, keep)``,
    ``logprobs`` as ``(trainer, inference, keep)`` (``keep`` None: all; either field None: skipped), and the 2-D
    bool ``mask`` whose rows' ``any`` it also returns (None: not wanted; it has the fields' length). Returns the
    summaries of entropy, ratio, k1 and k3 (the skipped ones empty) and the rows."""
    length = (entropy or logprobs or (_NO_VALUES,))[0].shape[0]
    row_length = mask.shape[1] if mask is not None and mask.shape[1] else 1
    split = parallel.plan(length, unit=row_length)
    masked = (entropy is not None and entropy[1] is not None) or (logprobs is not None and logprobs[2] is not None)
    values, keep_entropy = entropy if entropy is not None else (_NO_VALUES, None)
    trainer, inference, keep_logprobs = logprobs if logprobs is not None else (_NO_VALUES, _NO_VALUES, None)
    everything = np.ones(length, dtype=np.bool_) if masked and (keep_entropy is None or keep_logprobs is None) else None
    kernel = token_kernel(layouts.scale, narrow(values.dtype, layouts.scale), masked)
    tallies = np.zeros((split.threads, 4, int(layouts.sizes.max()) + TRASH), dtype=np.int64)
    integers, floats = accumulators(4 * split.threads)
    integers, floats = integers.reshape(split.threads, 4, -1), floats.reshape(split.threads, 4, -1)
    rows = None if mask is None else np.zeros(mask.shape[0], dtype=np.bool_)
    arguments = (
        values,
        _or(keep_entropy, everything),
        trainer,
        inference,
        _or(keep_logprobs, everything),
        _NO_MASK.view(np.uint8) if mask is None else mask.reshape(-1).view(np.uint8),
        _NO_MASK if rows is None else rows,
        row_length,
        layouts.bounds,
        layouts.thresholds,
        layouts.sizes,
        layouts.lookup,
        layouts.fractions,
    )
    parallel.run(
        [
            functools.partial(kernel, *arguments, tallies[i], integers[i], floats[i], split.counter, split.chunk)
            for i in range(split.threads)
        ],
        split.chunks,
    )
    summaries = [
        Summary.combine(integers[:, field], floats[:, field], tallies[:, field], int(layouts.sizes[field]))
        for field in range(4)
    ]
    return summaries, rows


def _or(keep: np.ndarray | None, everything: np.ndarray | None) -> np.ndarray:
    """``keep``, else the all-selected mask (when another field has a mask), else the empty placeholder."""
    if keep is not None:
        return keep
    return _NO_MASK if everything is None else everything


def summarize_staleness(
    layout: LayoutArguments, versions: np.ndarray, keep: np.ndarray | None, current: int, table: int
) -> tuple[np.ndarray, tuple[int, int, int, int], np.ndarray]:
    """:func:`staleness_kernel` over 1-D int ``versions`` where ``keep`` is set (None: all), on as many threads as
    help. Returns the fine counts (``table + 4``: see the kernel), count, sum and extremes of the staleness above the
    table, and its bucket counts."""
    split = parallel.plan(versions.shape[0])
    kernel = staleness_kernel(layout.scale, keep is not None)
    fine = np.zeros((split.threads, table + 4 + TRASH), dtype=np.int64)
    tallies = layout.tallies(split.threads)
    kept = _NO_MASK if keep is None else keep
    arguments = (versions, kept, current)
    tables = (layout.bounds, layout.lookup, layout.fractions)
    if split.threads == 1:  # one thread: no reductions
        _, count, total, minimum, maximum = kernel(*arguments, fine[0], *tables, tallies[0], split.counter, split.chunk)
        return fine[0, : table + 4], (count, total, minimum, maximum), tallies[0, : layout.size]
    results: list[tuple[int, int, int, int, int]] = []

    def task(i: int) -> int:
        result = kernel(*arguments, fine[i], *tables, tallies[i], split.counter, split.chunk)
        results.append(result)
        return int(result[0])

    parallel.run([functools.partial(task, i) for i in range(split.threads)], split.chunks)
    return (
        fine[:, : table + 4].sum(axis=0),
        (
            sum(r[1] for r in results),
            sum(r[2] for r in results),
            min((r[3] for r in results), default=_INT64_MAX),
            max((r[4] for r in results), default=-1),
        ),
        tallies[:, : layout.size].sum(axis=0),
    )
