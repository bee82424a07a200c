"""Bucket layouts: which bucket of a histogram each value falls in, as a slot of one flat counts array.

Two layouts, one interface (``size``, ``slot`` for one number, ``slots`` for a tensor on its device, and the
arguments of the compiled kernels in ``otel_rl._record.kernels``):

- :class:`ExplicitLayout`: upper-inclusive explicit bounds, as OpenTelemetry defines them (slot ``i`` counts
  ``bounds[i-1] < v <= bounds[i]``).
- :class:`ExponentialLayout`: OpenTelemetry's base-2 exponential buckets at one fixed ``scale``: bucket ``i`` of
  the positive side counts ``b(i) < v <= b(i+1)`` with ``b(i) = 2**(i / 2**scale)``, the negative side mirrors
  it, and the zero bucket counts exact zeros. Every rank uses the same scale, so the collector merges ranks by
  adding counts of equal indices: no rescaling, nothing approximated at merge time.

The exponential index is computed from the float's exponent and mantissa bits (the exponent gives the octave, a
1024-entry table on the top mantissa bits plus one comparison gives the sub-bucket), not with a logarithm, so it
is exact and the same on every device. The boundaries are the correctly rounded float64 values of
``2**(k / 2**scale)``. Indices are clamped to a window of :data:`WINDOW_OCTAVES` octaves on each side of 1
(``2**-40 < |v| <= 2**40``, about 1e-12 to 1e12): a value outside falls into the outermost bucket of its side.
The exact ``min``/``max`` of every point still say where such values really were, and quantiles are clamped to
them; the window only bounds the buckets a point can carry (``2 * 40 * 2**scale`` per side at most).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal, Protocol, get_args

import numpy as np
import torch
from opentelemetry.sdk.metrics import Exemplar
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Buckets,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Histogram,
    HistogramDataPoint,
)
from otel_rl_contract import Distribution, LayoutRole

WINDOW_OCTAVES = 40
"""Octaves of the exponential window on each side of 1: indices from ``-(40 << scale)`` to ``(40 << scale) - 1``."""
MAX_SCALE = 8
"""The finest scale: Prometheus native histograms go up to schema 8."""
DEFAULT_SCALE = 5
"""Buckets 2.2% wide: a quantile read from them is within 1.1% (geometric midpoint) to 2.2% of the value."""
_LOOKUP_BITS = 10
_FRACTION_BITS = 52

#: Reward buckets: fine around the common [-1, 1] range, coarse tails for shaped rewards.
DEFAULT_REWARD_BOUNDS: tuple[float, ...] = (
    -10.0,
    -5.0,
    -2.0,
    -1.0,
    -0.75,
    -0.5,
    -0.25,
    -0.1,
    0.0,
    0.1,
    0.25,
    0.5,
    0.75,
    0.9,
    1.0,
    2.0,
    5.0,
    10.0,
)
#: Staleness buckets in the user's version unit: every small lag, then roughly doubling.
DEFAULT_STALENESS_BOUNDS: tuple[int, ...] = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256, 512, 1024, 4096)
#: The explicit bounds of the roles that have no setting: token counts double up to 128 Ki tokens; importance
#: ratios are dense around 1; small signed values (entropy in nats, KL estimates) span decades on both sides of 0.
ROLE_BOUNDS: Mapping[LayoutRole, tuple[float, ...]] = {
    "unbounded": (),
    "length": (0, *(float(1 << k) for k in range(18))),
    "ratio": (0.5, 0.8, 0.9, 0.95, 0.98, 0.99, 1.0, 1.01, 1.02, 1.05, 1.1, 1.25, 2.0, 5.0),
    "small": (-1.0, -0.1, -0.01, -0.001, 0.0, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0),
}
HistogramForm = Literal["exponential", "explicit"]


@dataclass(frozen=True)
class PointFields:
    """What a cumulative histogram point carries besides its buckets (OpenTelemetry's field names)."""

    attributes: dict[str, str]
    start_time_unix_nano: int
    time_unix_nano: int
    count: int
    sum: float
    min: float
    max: float
    exemplars: list[Exemplar]


HistogramPoint = HistogramDataPoint | ExponentialHistogramDataPoint


class Layout(Protocol):
    """Where each value falls (one slot of a flat counts array), and how counts go on the wire."""

    @property
    def size(self) -> int:
        """Slots of the counts array."""

    def slot(self, value: float) -> int:
        """The slot of one finite value."""

    def slots(self, values: torch.Tensor) -> torch.Tensor:
        """The slots of a float64 tensor of finite values, on its device."""

    @property
    def kernel_arguments(self) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
        """``(bounds, scale, lookup, fractions)`` for ``otel_rl._record.kernels``."""

    def point(self, fields: PointFields, counts: np.ndarray) -> HistogramPoint:
        """The OTLP point of ``counts`` in this layout."""

    def metric_data(self, points: Sequence[HistogramPoint]) -> Histogram | ExponentialHistogram:
        """The cumulative OTLP histogram of ``points`` (all from :meth:`point` of this layout)."""


@dataclass(frozen=True)
class ExplicitLayout:
    """Upper-inclusive explicit bucket bounds."""

    bounds: tuple[float, ...]
    _on_device: dict[torch.device, torch.Tensor] = field(default_factory=dict, compare=False, repr=False)

    @property
    def size(self) -> int:
        """Slots of the counts array: one per bound, plus the bucket above every bound."""
        return len(self.bounds) + 1

    def slot(self, value: float) -> int:
        """The slot of one value."""
        return bisect.bisect_left(self.bounds, value)

    def slots(self, values: torch.Tensor) -> torch.Tensor:
        """The slots of a float64 tensor of finite values, on its device."""
        if values.device not in self._on_device:
            self._on_device[values.device] = torch.tensor(self.bounds, dtype=torch.float64, device=values.device)
        return torch.bucketize(values, self._on_device[values.device])

    @property
    def kernel_arguments(self) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
        """``(bounds, scale, lookup, fractions)`` for ``otel_rl._record.kernels``; scale -1 selects explicit bounds."""
        empty = np.empty(0, dtype=np.int64)
        return np.asarray(self.bounds, dtype=np.float64), -1, empty, empty

    def point(self, fields: PointFields, counts: np.ndarray) -> HistogramPoint:
        """A classic histogram point: one count per bound, plus the bucket above every bound."""
        return HistogramDataPoint(
            **vars(fields), bucket_counts=tuple(counts.tolist()), explicit_bounds=tuple(float(b) for b in self.bounds)
        )

    def metric_data(self, points: Sequence[HistogramPoint]) -> Histogram:
        return Histogram(data_points=list(points), aggregation_temporality=AggregationTemporality.CUMULATIVE)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ExponentialSides:
    """An exponential histogram's counts as OpenTelemetry carries them: each side from its lowest to its highest
    non-empty bucket (``offset`` is the index of the first), and the zero bucket."""

    zero_count: int
    negative_offset: int
    negative: tuple[int, ...]
    positive_offset: int
    positive: tuple[int, ...]


class ExponentialLayout:
    """Base-2 exponential buckets at a fixed ``scale``; slots are ``[negative window | zero | positive window]``,
    the negative window holding ``|v|``'s index like the positive one."""

    def __init__(self, scale: int) -> None:
        self.scale = scale
        self.lowest = -(WINDOW_OCTAVES << scale)
        """The lowest bucket index of each side; the highest is ``-lowest - 1``."""
        self.width = 2 * WINDOW_OCTAVES << scale
        """Buckets per side."""
        self.boundaries = np.array([_root_of_two(k, scale) for k in range(1 << scale)], dtype=np.float64)
        """``2**(k / 2**scale)`` for ``k < 2**scale``, correctly rounded: the bucket boundaries within one octave."""
        self._boundary_list = tuple(self.boundaries.tolist())
        fractions = self.boundaries.view(np.int64) & ((1 << _FRACTION_BITS) - 1)
        self.lookup = np.searchsorted(
            fractions, np.arange(1 << _LOOKUP_BITS, dtype=np.int64) << (_FRACTION_BITS - _LOOKUP_BITS)
        ).astype(np.int64)
        """For each value of the top mantissa bits: how many boundaries lie below the smallest such mantissa. A
        range of mantissas this narrow holds at most one boundary up to scale 8, so one comparison finishes."""
        self.fractions = np.append(fractions, np.iinfo(np.int64).max)
        """The boundaries' mantissa bits, then a sentinel above every mantissa (the comparison needs no check)."""
        self._on_device: dict[torch.device, torch.Tensor] = {}

    def __repr__(self) -> str:
        return f"ExponentialLayout(scale={self.scale})"

    @property
    def size(self) -> int:
        return 2 * self.width + 1

    def index(self, magnitude: float) -> int:
        """The bucket index of ``magnitude > 0`` on its side, clamped to the window."""
        mantissa, exponent = math.frexp(magnitude)
        below = bisect.bisect_left(self._boundary_list, 2 * mantissa)
        return min(max(((exponent - 1) << self.scale) + below - 1, self.lowest), -self.lowest - 1)

    def slot(self, value: float) -> int:
        """The slot of one finite value."""
        if value == 0:
            return self.width
        side = self.width + 1 if value > 0 else 0
        return side + self.index(abs(value)) - self.lowest

    def slots(self, values: torch.Tensor) -> torch.Tensor:
        """The slots of a float64 tensor of finite values, on its device (the same as :meth:`slot`)."""
        if values.device not in self._on_device:
            self._on_device[values.device] = torch.from_numpy(self.boundaries).to(values.device)
        mantissa, exponent = torch.frexp(values.abs())
        below = torch.bucketize(2 * mantissa, self._on_device[values.device])
        index = ((exponent.to(torch.int64) - 1) << self.scale) + below - 1
        offset = index.clamp(self.lowest, -self.lowest - 1) - self.lowest
        side = torch.where(values > 0, self.width + 1, 0)
        return torch.where(values == 0, self.width, side + offset)

    @property
    def kernel_arguments(self) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
        """``(bounds, scale, lookup, fractions)`` for ``otel_rl._record.kernels``."""
        return np.empty(0, dtype=np.float64), self.scale, self.lookup, self.fractions

    def point(self, fields: PointFields, counts: np.ndarray) -> HistogramPoint:
        """An exponential histogram point: each side trimmed to its non-empty span, zero threshold 0."""
        sides = self.sides(counts)
        return ExponentialHistogramDataPoint(
            **vars(fields),
            scale=self.scale,
            zero_count=sides.zero_count,
            positive=Buckets(offset=sides.positive_offset, bucket_counts=sides.positive),
            negative=Buckets(offset=sides.negative_offset, bucket_counts=sides.negative),
            flags=0,
        )

    def metric_data(self, points: Sequence[HistogramPoint]) -> ExponentialHistogram:
        return ExponentialHistogram(data_points=list(points), aggregation_temporality=AggregationTemporality.CUMULATIVE)  # type: ignore[arg-type]

    def sides(self, counts: np.ndarray) -> ExponentialSides:
        """The counts array as OpenTelemetry's sides, each trimmed to its non-empty span."""
        negative_offset, negative = _trimmed(counts[: self.width], self.lowest)
        positive_offset, positive = _trimmed(counts[self.width + 1 :], self.lowest)
        return ExponentialSides(int(counts[self.width]), negative_offset, negative, positive_offset, positive)


def _trimmed(window: np.ndarray, lowest: int) -> tuple[int, tuple[int, ...]]:
    used = np.flatnonzero(window)
    if used.size == 0:
        return 0, ()
    first, last = int(used[0]), int(used[-1])
    return lowest + first, tuple(window[first : last + 1].tolist())


def _root_of_two(k: int, scale: int) -> float:
    """``2**(k / 2**scale)`` rounded to the nearest float64, decided in exact integer arithmetic."""
    n = 1 << scale
    guess = 2.0 ** (k / n)
    candidates = (math.nextafter(guess, 0), guess, math.nextafter(guess, 2))
    # t = 2**(k/n) lies above the midpoint m of two neighbours iff m**n < 2**k; compare exactly as integers.
    best = candidates[0]
    for low, high in itertools.pairwise(candidates):
        midpoint = (Fraction(low) + Fraction(high)) / 2
        numerator, denominator = midpoint.numerator, midpoint.denominator
        if numerator**n < (1 << k) * denominator**n:
            best = high
    return best


@dataclass(frozen=True)
class Layouts:
    """The bucket layout of every :data:`~otel_rl_contract.LayoutRole`, resolved once per process: one instance per
    role, shared by every summarizer of that role (layouts cache their device tensors)."""

    by_role: Mapping[LayoutRole, Layout]

    def of(self, distribution: Distribution) -> Layout:
        """The layout of ``distribution``'s role."""
        return self.by_role[distribution.role]

    @classmethod
    def resolve(
        cls,
        form: HistogramForm,
        *,
        scale: int,
        reward_bounds: tuple[float, ...] = DEFAULT_REWARD_BOUNDS,
        staleness_bounds: tuple[int, ...] = DEFAULT_STALENESS_BOUNDS,
    ) -> Layouts:
        """Every role's layout: one exponential layout at ``scale`` for all of them, or each role's explicit bounds
        (``reward_bounds`` and ``staleness_bounds`` for those roles, :data:`ROLE_BOUNDS` for the others).

        >>> Layouts.resolve("explicit", scale=5).by_role["length"].bounds[:4]
        (0.0, 1.0, 2.0, 4.0)
        """
        if form == "exponential":
            exponential = ExponentialLayout(scale)
            return cls(dict.fromkeys(get_args(LayoutRole), exponential))
        bounds = {**ROLE_BOUNDS, "reward": reward_bounds, "staleness": staleness_bounds}
        return cls({role: ExplicitLayout(tuple(float(b) for b in bounds[role])) for role in get_args(LayoutRole)})
