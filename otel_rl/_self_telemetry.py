"""Self-telemetry: how otel-rl reports its own trouble without ever raising into the training loop.

Bad input is dropped, counted in ``otel_rl.values.rejected{otel_rl.metric, otel_rl.reason}`` (samples in
``otel_rl.samples.dropped{otel_rl.reason}``) and logged once per (metric, reason): a training loop that passes the
same bad tensor every step gets one warning and an exact count, not a flood.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from otel_rl import _names
from otel_rl._stats import BadInput, Statistics
from otel_rl._store import Attributes, MetricStore, attributes

_logger = logging.getLogger(__name__)
_MAX_NAME_LENGTH = 64


class SelfTelemetry:
    """Counts and warns about what one process dropped; the counters travel with its other metrics."""

    def __init__(self, store: MetricStore) -> None:
        self._store = store
        self._warned: set[tuple[str, str]] = set()

    def reject_call(self, metric: str, error: Exception, values: object) -> None:
        """A whole record call was unusable: count all of its ``values`` under the error's reason."""
        reason = error.reason if isinstance(error, BadInput) else "invalid"
        self.reject(metric, reason, _count(values), f"call dropped: {error}")

    def reject_parts(self, metric: str, statistics: Statistics) -> None:
        """Count the values a summarizer left out of ``statistics`` (NaN, negative staleness, ...)."""
        for reason, count in statistics.rejected.items():
            self.reject(metric, reason, count, f"{count} value(s) rejected: {reason}")

    def reject(self, metric: str, reason: str, count: int, message: str) -> None:
        """Count ``count`` rejected values of ``metric`` under ``reason``, and warn the first time."""
        self._store.add(_names.VALUES_REJECTED, _rejected(metric, reason), count)
        self._warn_once(metric, reason, message)

    def drop_sample(self, reason: str, message: str) -> None:
        """Count one sample dropped for ``reason``, and warn the first time."""
        self._store.add(_names.SAMPLES_DROPPED, attributes(**{_names.SELF_REASON: reason}), 1)
        self._warn_once(_names.SAMPLE_EVENT, reason, message)

    def _warn_once(self, metric: str, reason: str, message: str) -> None:
        if (metric, reason) not in self._warned:
            self._warned.add((metric, reason))
            _logger.warning("otel-rl %s: %s (further %r warnings are only counted)", metric, message, reason)


class LabelCap:
    """Bounds the distinct values of one metric attribute (``rl.reward.fn``, ``rl.metric.key``): the first ``cap``
    valid names pass, later ones and invalid ones become ``_overflow`` and are counted (``name_overflow``,
    ``name_invalid``), so a typo in a loop cannot explode the number of series.

    >>> from otel_rl._store import MetricStore
    >>> from opentelemetry.sdk.resources import Resource
    >>> cap = LabelCap("rl.reward", "max_reward_fns", 1, SelfTelemetry(MetricStore(Resource({}), start_time_ns=0, version="")))
    >>> cap.label("format"), cap.label("format"), cap.label("length")
    ('format', 'format', '_overflow')
    """

    def __init__(self, metric: str, setting: str, cap: int, self_telemetry: SelfTelemetry) -> None:
        self._metric = metric
        self._setting = setting
        self._cap = cap
        self._self_telemetry = self_telemetry
        self._known: set[str] = set()

    def label(self, name: object) -> str:
        """``name`` itself while it is among the first ``cap`` valid names, else ``_overflow``."""
        if isinstance(name, str) and name in self._known:
            return name
        valid = isinstance(name, str) and 0 < len(name) <= _MAX_NAME_LENGTH and name.isprintable()
        if isinstance(name, str) and valid and len(self._known) < self._cap:
            self._known.add(name)
            return name
        self._self_telemetry.reject(
            self._metric,
            "name_overflow" if valid else "name_invalid",
            1,
            f"name {name!r} recorded as {_names.OVERFLOW!r}: at most {self._cap} distinct names "
            f'("{self._setting}"), each a printable string of 1..{_MAX_NAME_LENGTH} characters',
        )
        return _names.OVERFLOW


def _rejected(metric: str, reason: str) -> Attributes:
    return attributes(**{_names.SELF_METRIC: metric, _names.SELF_REASON: reason})


def _count(values: object) -> int:
    """How many values a rejected argument held (1 when that cannot be told)."""
    numel = getattr(values, "numel", None)
    if callable(numel):
        try:
            return int(numel())
        except Exception:  # noqa: BLE001 - an odd object still counts once
            return 1
    size = getattr(values, "size", None)
    if isinstance(size, int):
        return size
    if isinstance(values, Sequence) and not isinstance(values, (str, bytes)):
        return len(values)
    return 1
