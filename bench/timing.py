"""Timing primitives: interleaved repetitions, medians and percentiles, in nanoseconds.

Operations compared with each other are timed in interleaved rounds (one call of each per round), so that load
from other processes on a shared machine hits all of them alike and their ratios stay meaningful.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping


def interleaved(
    operations: Mapping[str, Callable[[], object]],
    *,
    repeats: Mapping[str, int] | int,
    warmup: int = 2,
) -> dict[str, list[int]]:
    """Nanoseconds of each call of each operation: ``warmup`` untimed calls each, then interleaved rounds.

    ``repeats`` is a count for all, or per operation (an operation drops out of the rounds once it has its count).
    """
    wanted = {name: repeats if isinstance(repeats, int) else repeats[name] for name in operations}
    for operation in operations.values():
        for _ in range(warmup):
            operation()
    samples: dict[str, list[int]] = {name: [] for name in operations}
    for round_index in range(max(wanted.values())):
        for name, operation in operations.items():
            if round_index < wanted[name]:
                start = time.perf_counter_ns()
                operation()
                samples[name].append(time.perf_counter_ns() - start)
    return samples


def median(values: list[int] | list[float]) -> float:
    """The median (mean of the middle two for an even count)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return float(ordered[middle]) if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def percentile(values: list[int] | list[float], q: float) -> float:
    """The ``q``-th percentile (0..100), nearest rank."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[rank - 1])
