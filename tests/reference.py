"""Reference implementations that the tests compare otel_rl's results with, computed independently in numpy."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np


def bucket_counts(values: Sequence[float] | np.ndarray[Any, Any], bounds: Sequence[float]) -> list[int]:
    """Explicit-bucket counts of ``values`` in float64, upper-inclusive as OpenTelemetry defines them: bucket ``i``
    counts ``bounds[i-1] < v <= bounds[i]``, the last one ``v > bounds[-1]``; ``len(bounds) + 1`` counts."""
    index = np.searchsorted(np.asarray(bounds, dtype=np.float64), np.asarray(values, dtype=np.float64), side="left")
    return list(np.bincount(index, minlength=len(bounds) + 1).tolist())


def exponential_index(magnitude: float, scale: int) -> int:
    """The base-2 exponential bucket of ``magnitude > 0`` by its definition, in exact rational arithmetic: the
    ``i`` with ``2**(i / 2**scale) < magnitude <= 2**((i + 1) / 2**scale)``, i.e. ``2**i < m**(2**scale) <=
    2**(i+1)``, clamped to otel_rl's window of 40 octaves on each side of 1."""
    power = Fraction(magnitude) ** (1 << scale)
    upper = power.numerator.bit_length() - power.denominator.bit_length()
    while Fraction(2) ** upper >= power:
        upper -= 1
    while Fraction(2) ** (upper + 1) < power:
        upper += 1
    return min(max(upper, -(40 << scale)), (40 << scale) - 1)


def exponential_sides(
    values: Sequence[float] | np.ndarray[Any, Any], scale: int
) -> tuple[int, dict[int, int], dict[int, int]]:
    """Zero count and ``{index: count}`` of the negative and positive sides of finite ``values``."""
    zero = 0
    negative: Counter[int] = Counter()
    positive: Counter[int] = Counter()
    for value in np.asarray(values, dtype=np.float64).tolist():
        if value == 0:
            zero += 1
        else:
            (positive if value > 0 else negative)[exponential_index(abs(value), scale)] += 1
    return zero, dict(negative), dict(positive)
