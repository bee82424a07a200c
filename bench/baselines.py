"""What users run today to get a reward histogram, as callables to time against otel-rl.

The per-value Python loops (OpenTelemetry SDK ``Histogram.record``, prometheus_client ``Histogram.observe``) are
far too slow to run on a million values every repetition: they are timed on a sample of ``sample_size`` values
(including the ``tolist()`` a loop needs first) and extrapolated linearly per value, which is what they are.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import otel_rl_contract as contract
import torch

from otel_rl._record.buckets import DEFAULT_REWARD_BOUNDS


@dataclass(frozen=True)
class Baseline:
    """A timed callable; its time is multiplied by ``scale`` to stand for the full input."""

    call: Callable[[], object]
    scale: float = 1.0
    note: str = ""


def floor(values: torch.Tensor) -> Baseline:
    """One pass over the values: ``x.sum()`` of float32, the least any statistic can cost."""
    return Baseline(lambda: values.sum(), note="x.sum() of float32, one pass")


def numpy_histogram(values: torch.Tensor, bins: int = 64) -> Baseline:
    """``np.histogram`` with 64 uniform bins (on the tensor's numpy view, no copy)."""
    array = values.numpy()
    return Baseline(lambda: np.histogram(array, bins=bins), note=f"{bins} uniform bins")


def torch_histc(values: torch.Tensor, bins: int = 64) -> Baseline:
    """``torch.histc`` with 64 uniform bins."""
    return Baseline(lambda: torch.histc(values, bins=bins), note=f"{bins} uniform bins")


def otel_sdk_loop(values: torch.Tensor, sample_size: int) -> Baseline:
    """OpenTelemetry SDK ``Histogram.record`` per value, with the same explicit buckets as otel-rl.

    Absolute values are recorded, because the SDK silently drops negative ones (the loop would then time the
    drop path, not recording).
    """
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View

    reader = InMemoryMetricReader()
    provider = MeterProvider(
        metric_readers=[reader],
        views=[
            View(instrument_name="rl.reward", aggregation=ExplicitBucketHistogramAggregation(DEFAULT_REWARD_BOUNDS))
        ],
    )
    histogram = provider.get_meter("bench").create_histogram("rl.reward")
    sample = values[:sample_size].abs()

    def loop() -> None:
        record = histogram.record
        for value in sample.tolist():
            record(value)

    return Baseline(loop, scale=values.numel() / sample.numel(), note=f"{sample.numel():,} values, extrapolated")


def prometheus_loop(values: torch.Tensor, sample_size: int) -> Baseline:
    """prometheus_client ``Histogram.observe`` per value, same buckets, in a private registry."""
    from prometheus_client import CollectorRegistry, Histogram

    name = contract.series(contract.REWARDS.histogram).name
    histogram = Histogram(name, "reward", registry=CollectorRegistry(), buckets=DEFAULT_REWARD_BOUNDS)
    sample = values[:sample_size]

    def loop() -> None:
        observe = histogram.observe
        for value in sample.tolist():
            observe(value)

    return Baseline(loop, scale=values.numel() / sample.numel(), note=f"{sample.numel():,} values, extrapolated")


class TensorBoard:
    """TensorBoard ``SummaryWriter.add_histogram`` (default bins) writing to a temporary logdir."""

    def __init__(self) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._dir = tempfile.TemporaryDirectory(prefix="otel-rl-bench-tb-")
        self._writer: Any = SummaryWriter(self._dir.name)
        self._step = 0

    def baseline(self, values: torch.Tensor) -> Baseline:
        def add() -> None:
            self._step += 1
            self._writer.add_histogram("rl/reward", values, self._step)

        return Baseline(add, note="default bins, temp logdir")

    def close(self) -> None:
        self._writer.close()
        self._dir.cleanup()
