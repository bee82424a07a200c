"""Chunked kernels on the thread pool: a forked child (a DataLoader worker, say) gets a pool of its own."""

from __future__ import annotations

import multiprocessing

import torch

from otel_rl._record.buckets import ExponentialLayout
from otel_rl._record.stats import ValueSummarizer
from tests.unit.test_stats import chunked

VALUES = torch.linspace(-3.0, 5.0, 1001)


def _summary_count() -> int:
    with chunked():
        return ValueSummarizer(ExponentialLayout(5)).summarize(VALUES, None).count


def _child(results: multiprocessing.Queue[int]) -> None:
    results.put(_summary_count())


def test_forked_child_summarizes_on_its_own_pool() -> None:
    """The parent's pool threads do not exist in a forked child; without a fresh pool its chunks would never run."""
    assert _summary_count() == VALUES.numel()  # the parent's pool now exists
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_child, args=(results,))
    child.start()
    child.join(timeout=30)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0
    assert results.get(timeout=5) == VALUES.numel()
