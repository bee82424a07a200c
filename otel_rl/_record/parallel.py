"""One compiled pass over a large input, run on several CPU threads.

The kernels in ``otel_rl._record.kernels`` release the GIL, so an input split into contiguous chunks is summarized on
several cores at once; each chunk keeps its own bucket counts and the caller combines the partial results (sums
add, extremes take min and max). The thread count follows torch's intra-op setting (``torch.get_num_threads``,
which honours ``OMP_NUM_THREADS`` and ``torch.set_num_threads``), the same cores ``x.sum()`` uses. Inputs below
:data:`MIN_CHUNK` values per thread run in the calling thread: handing work to a thread costs tens of
microseconds.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

T = TypeVar("T")

MIN_CHUNK = 1 << 17
"""The fewest values worth a thread of their own."""

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def chunks(length: int) -> list[slice]:
    """Contiguous slices covering ``range(length)``, one per thread to use (a single slice for small inputs)."""
    parts = max(1, min(torch.get_num_threads(), length // MIN_CHUNK))
    edges = [length * i // parts for i in range(parts + 1)]
    return [slice(start, stop) for start, stop in itertools.pairwise(edges)]


def run_all(tasks: Sequence[Callable[[], T]]) -> list[T]:
    """The results of ``tasks`` in order: the first runs in the calling thread, the others on the shared pool; a
    task no pool thread has started by the time the caller is free runs in the caller too, so a busy machine
    never makes the caller wait for a thread to be scheduled (no worse than running them all itself)."""
    if len(tasks) <= 1:
        return [task() for task in tasks]
    futures = [_executor().submit(task) for task in tasks[1:]]
    results = [tasks[0]()]
    for task, future in zip(tasks[1:], futures, strict=True):
        results.append(task() if future.cancel() else future.result())
    return results


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(1, torch.get_num_threads() - 1), thread_name_prefix="otel-rl")
        return _pool


def _forget_pool() -> None:
    """A forked child has none of the parent's threads: it starts its own pool when it needs one."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)
