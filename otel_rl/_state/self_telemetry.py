"""Self-telemetry: how otel-rl reports its own trouble without ever raising into the training loop.

Bad input is dropped, counted in ``otel_rl.values.rejected{otel_rl.metric, otel_rl.reason}`` (samples in
``otel_rl.samples.dropped{otel_rl.reason}``) and logged once per (metric, reason): a training loop that passes the
same bad tensor every step gets one warning and an exact count, not a flood.
"""

from __future__ import annotations

import logging

import otel_rl_contract as contract

from otel_rl._record.inputs import BadInput, Reason, count, describe
from otel_rl._record.stats import Statistics
from otel_rl._state.store import Attributes, MetricStore, attributes

_logger = logging.getLogger(__name__)
MAX_NAME_LENGTH = 256
"""The longest label name (reward function, metric key, dataset, phase, table) kept as it is: verl's validation
keys (``val-aux/<data source>/<variable>/<statistic>@<n>``) reach about 90 characters."""


class SelfTelemetry:
    """Counts and warns about what one process dropped; the counters travel with its other metrics."""

    def __init__(self, store: MetricStore) -> None:
        self._store = store
        self._warned: set[tuple[str, str]] = set()
        self._tally: dict[str, int] = {}

    def reject_call(self, metric: str, error: Exception, values: object) -> None:
        """A whole call was unusable: count all of its ``values`` under the error's reason (a sample offered to
        ``record_sample`` counts as one dropped sample). Anything but :class:`BadInput` is otel-rl's own failure,
        counted as ``invalid`` and logged once with its traceback."""
        reason: Reason = error.reason if isinstance(error, BadInput) else "invalid"
        message = f"call dropped: {describe(error)}"
        if metric == contract.SAMPLE_EVENT:
            self.drop_sample(reason, message)
        else:
            self.reject(metric, reason, count(values), message)
        if not isinstance(error, BadInput) and (metric, "traceback") not in self._warned:
            self._warned.add((metric, "traceback"))
            _logger.warning("otel-rl %s: unexpected error", metric, exc_info=error)

    def reject_parts(self, metric: str, statistics: Statistics) -> None:
        """Count the values a summarizer left out of ``statistics`` (NaN, negative staleness, ...)."""
        for reason, amount in statistics.rejected.items():
            self.reject(metric, reason, amount, f"{amount} value(s) rejected: {reason}")

    def reject(self, metric: str, reason: Reason, amount: int, message: str) -> None:
        """Count ``amount`` rejected values of ``metric`` under ``reason``, and warn the first time."""
        self._store.add(contract.VALUES_REJECTED, _rejected(metric, reason), amount)
        self._tally[metric] = self._tally.get(metric, 0) + amount
        self._warn_once(metric, reason, message)

    def rejected(self, metric: str) -> int:
        """How many values of ``metric`` were rejected so far, whatever the reason."""
        return self._tally.get(metric, 0)

    def drop_sample(self, reason: str, message: str) -> None:
        """Count one sample dropped for ``reason``, and warn the first time."""
        self._store.add(contract.SAMPLES_DROPPED, attributes(**{contract.SELF_REASON: reason}), 1)
        self._warn_once(contract.SAMPLE_EVENT, reason, message)

    def _warn_once(self, metric: str, reason: str, message: str) -> None:
        if (metric, reason) not in self._warned:
            self._warned.add((metric, reason))
            _logger.warning("otel-rl %s: %s (further %r warnings are only counted)", metric, message, reason)


class LabelCap:
    """Bounds the distinct values of one metric attribute (``rl.reward.fn``, ``rl.metric.key``): the first ``cap``
    valid names pass, later ones and invalid ones become ``_overflow`` and are counted (``name_overflow``,
    ``name_invalid``), so a typo in a loop cannot explode the number of series.

    >>> from otel_rl._state.store import MetricStore
    >>> from opentelemetry.sdk.resources import Resource
    >>> store = MetricStore(Resource({}), start_time_ns=0, version="")
    >>> cap = LabelCap("rl.reward", "max_reward_fns", 1, SelfTelemetry(store))
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
        valid = isinstance(name, str) and 0 < len(name) <= MAX_NAME_LENGTH and name.isprintable()
        if isinstance(name, str) and valid and len(self._known) < self._cap:
            self._known.add(name)
            return name
        self._self_telemetry.reject(
            self._metric,
            "name_overflow" if valid else "name_invalid",
            1,
            f"name {describe(name)} recorded as {contract.OVERFLOW!r}: at most {self._cap} distinct names "
            f'("{self._setting}"), each a printable string of 1..{MAX_NAME_LENGTH} characters',
        )
        return contract.OVERFLOW


def _rejected(metric: str, reason: str) -> Attributes:
    return attributes(**{contract.SELF_METRIC: metric, contract.SELF_REASON: reason})
