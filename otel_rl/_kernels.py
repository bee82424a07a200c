"""Single-pass CPU kernels (compiled with numba) for the statistics of one record call.

On the CPU, torch's eager operations each make a full pass over the data and most allocate a new tensor: a
staleness summary took a dozen passes over 8 MB. These kernels read each value once and keep only scalars and the
bucket counts, which is as close to the one-pass floor as a histogram gets. Tensors on other devices use the
torch path in ``otel_rl._stats``, where the operations run on the device.

Semantics match the torch path exactly (and both match a float64 numpy reference in the tests): explicit buckets
are upper-inclusive (bucket i counts ``bounds[i-1] < x <= bounds[i]``), reward sums accumulate in float64,
staleness in int64.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_INT64_MAX = np.iinfo(np.int64).max


@njit(cache=True, nogil=True)
def _bucket(x: float, bounds: np.ndarray) -> int:  # pragma: no cover - compiled
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
def summarize_values(values, keep, use_keep, bounds, counts):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Count, positive and negative sums, sum of squares, extremes and NaN/inf of the kept ``values``.

    ``counts`` (zeroed, ``len(bounds) + 1``) receives the bucket counts. ``keep`` is read only if ``use_keep``.
    """
    count = 0
    nonfinite = 0
    positive = 0.0
    negative = 0.0
    squares = 0.0
    minimum = np.inf
    maximum = -np.inf
    for i in range(values.shape[0]):
        if use_keep and not keep[i]:
            continue
        x = np.float64(values[i])
        if not np.isfinite(x):
            nonfinite += 1
            continue
        count += 1
        if x > 0:
            positive += x
        else:
            negative -= x
        squares += x * x
        minimum = min(minimum, x)
        maximum = max(maximum, x)
        counts[_bucket(x, bounds)] += 1
    return count, positive, negative, squares, minimum, maximum, nonfinite


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
def summarize_staleness(versions, keep, use_keep, current, fine, bounds, counts):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Count, exact int64 sum and extremes of ``current - versions`` (integers) over kept elements, and how many
    were from the future (negative staleness, rejected).

    Staleness ``s`` is counted in ``fine[s]`` while ``s < len(fine)`` (the caller folds ``fine`` into buckets),
    else straight into ``counts`` at its bucket of ``bounds``. The hot loop only counts; sum and extremes of the
    small values come from ``fine`` afterwards.
    """
    future = 0
    above = 0
    above_total = 0
    above_minimum = _INT64_MAX
    above_maximum = -1
    table = fine.shape[0]
    for i in range(versions.shape[0]):
        if use_keep and not keep[i]:
            continue
        staleness = current - np.int64(versions[i])
        if staleness < 0:
            future += 1
        elif staleness < table:
            fine[staleness] += 1
        else:
            above += 1
            above_total += staleness
            above_minimum = min(above_minimum, staleness)
            above_maximum = max(above_maximum, staleness)
            counts[_bucket(staleness, bounds)] += 1
    count = above
    total = above_total
    minimum = above_minimum
    maximum = above_maximum
    for value in range(table):
        seen = fine[value]
        if seen:
            count += seen
            total += seen * value
            minimum = min(minimum, value)
            maximum = max(maximum, value)
    return count, total, minimum, maximum, future
