"""The merge canary: a histogram every rank records the same way, whose merged buckets show whether the collector
merged the run's exponential histograms exactly.

Why: the stock contrib collector (v0.161.0, and v0.165.1 unchanged) adds two exponential histograms' buckets by
position instead of by index when their offsets differ, and its ``delta_to_cumulative`` downscales a histogram that
spans more than 160 buckets (``collector_config/patches/``). A run merged that way looks normal, but its buckets and
quantiles are wrong. So at every ``step()`` each rank records one value at the centre of each of two buckets of
``otel_rl.merge.canary`` (:data:`~otel_rl_contract.MERGE_CANARY_BUCKETS`: even ranks one pair, odd ranks the other),
at a fixed scale. The ranks' increments then start at different offsets, leave gaps and span more than 160 buckets:
an exact merge keeps every count in those four buckets, a positional merge moves some out, a downscale spreads them
over twice as wide buckets. ``otel_rl:merge_canary_misplaced:ratio`` (``prometheus/rules/otel_rl_collector.yml``,
:func:`otel_rl_ops.promql.merge_canary_misplaced`) is the fraction of the canary's counts outside the four buckets, and
``OtelRLInexactMerge`` fires when it is above zero.

Only with ``histogram="exponential"``: explicit histograms merge exactly on any collector, and backends without
native histograms (the reason for ``"explicit"``) could not store the canary.
"""

from __future__ import annotations

import otel_rl_contract as contract

from otel_rl._config import ResolvedConfig
from otel_rl._record.buckets import ExponentialLayout
from otel_rl._record.stats import Statistics, ValueSummarizer
from otel_rl._state.store import MetricStore


def bucket_centre(index: int) -> float:
    """The geometric centre of exponential bucket ``index`` at the canary's scale: far from both boundaries, so
    every layout puts it in that bucket.

    >>> bucket_centre(-1) < 1.0 < bucket_centre(0)
    True
    """
    return float(2.0 ** ((index + 0.5) / (1 << contract.MERGE_CANARY_SCALE)))


class MergeCanary:
    """Records a rank's canary values into ``store`` at each :meth:`step`."""

    def __init__(self, settings: ResolvedConfig, store: MetricStore) -> None:
        self._store = store
        self._statistics: Statistics | None = None
        if settings.histogram == "exponential":
            values = [bucket_centre(index) for index in contract.MERGE_CANARY_BUCKETS[(settings.rank or 0) % 2]]
            summarizer = ValueSummarizer(ExponentialLayout(contract.MERGE_CANARY_SCALE))
            self._statistics = summarizer.summarize(values, None, argument="canary")

    def step(self) -> None:
        """Record this rank's canary values once more (nothing with explicit histograms)."""
        if self._statistics is not None:
            self._store.record_histogram(contract.MERGE_CANARY, (), self._statistics)
