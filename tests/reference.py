"""Reference implementations that the tests compare otel_rl's results with, computed independently in numpy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def bucket_counts(values: Sequence[float] | np.ndarray[Any, Any], bounds: Sequence[float]) -> list[int]:
    """Explicit-bucket counts of ``values`` in float64, upper-inclusive as OpenTelemetry defines them: bucket ``i``
    counts ``bounds[i-1] < v <= bounds[i]``, the last one ``v > bounds[-1]``; ``len(bounds) + 1`` counts."""
    index = np.searchsorted(np.asarray(bounds, dtype=np.float64), np.asarray(values, dtype=np.float64), side="left")
    return list(np.bincount(index, minlength=len(bounds) + 1).tolist())
