"""One compiled pass over a large input, on the calling thread and, when it helps, pool threads beside it.

The kernels in ``otel_rl._kernels`` release the GIL and take their work in chunks from a shared counter (an atomic
increment), so a pool thread helps exactly as much as it runs: started at once on a free core it takes half the
chunks, started late it takes the rest of them, never started it takes none. The caller never waits for a thread
that has not claimed a chunk, and waits at most for the chunk a helper is in the middle of (:data:`MIN_CHUNK`
values, tens of microseconds on a free core). Handing out whole halves instead made the times bimodal: a helper that
started late (its core busy, or woken on the caller's own core) made the caller wait for a whole half.

Helpers are used only when they help:

* an input of fewer than :data:`PARALLEL_CHUNKS` chunks runs on the calling thread alone: below that, waking a helper
  (a futex wake-up, tens of microseconds before it runs) costs more than it saves;
* no core free: a call where the caller waited for helpers and ended later than it would have alone (judged from
  its own pace) stops handing work out for :data:`BACKOFF_NS`, doubling with each such call in a row up to 2**10
  times that; on a saturated machine a helper descheduled in the middle of its chunk made the caller wait
  milliseconds for it. A helper that started too late to take any chunk costs the caller only its wake-up.

The thread count follows torch's intra-op setting (``torch.get_num_threads``, which honours ``OMP_NUM_THREADS`` and
``torch.set_num_threads``), the cores ``x.sum()`` uses.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

MIN_CHUNK = 1 << 15
"""Values per chunk, the unit of work a thread claims: small enough that waiting for a helper's last chunk is short,
large enough that claiming is free (one atomic increment per chunk)."""
PARALLEL_CHUNKS = 4
"""The fewest chunks worth a helper thread (measured: see docs/performance.md, "Threads")."""
BACKOFF_NS = 20_000_000
"""How long calls run alone after a call that helpers did not speed up (doubled for each such call in a row)."""
_MAX_BACKOFF_DOUBLINGS = 10

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


@dataclass(frozen=True)
class Plan:
    """How one input is split: ``threads`` kernel calls (the caller's and ``threads - 1`` helpers') claiming
    ``chunks`` chunks of ``chunk`` values from ``counter``."""

    threads: int
    chunk: int
    chunks: int
    counter: np.ndarray


class _Backoff:
    """When helpers last failed to speed a call up, and how many calls in a row they did."""

    def __init__(self) -> None:
        self.until = 0
        self.misses = 0

    def allows(self) -> bool:
        return time.perf_counter_ns() >= self.until

    def record(self, helped: bool) -> None:
        if helped:
            self.misses = 0
            return
        self.until = time.perf_counter_ns() + (BACKOFF_NS << self.misses)
        self.misses = min(self.misses + 1, _MAX_BACKOFF_DOUBLINGS)


_backoff = _Backoff()


def plan(length: int, *, unit: int = 1) -> Plan:
    """The split of ``length`` values whose chunks are whole multiples of ``unit`` (a row of a 2-D input)."""
    unit = max(1, unit)
    wanted = length >= PARALLEL_CHUNKS * MIN_CHUNK and _backoff.allows()
    threads = max(1, torch.get_num_threads()) if wanted else 1
    chunk = max(unit, MIN_CHUNK // unit * unit) if threads > 1 else max(unit, length)
    return Plan(threads, chunk, max(1, -(-length // chunk)), np.zeros(1, dtype=np.int64))


def run(tasks: Sequence[Callable[[], int]], chunks: int) -> list[int]:
    """Run ``tasks[0]`` on the calling thread and the others on the pool; each is one kernel call claiming chunks and
    returning how many it did. Returns those counts, 0 for a task that never ran: when the caller did every chunk it
    returns at once (a helper that starts later finds none left and writes nothing); otherwise it cancels the helpers
    that have not started and waits for the others, which hold the chunks it did not do. Whether the helpers made
    the call faster decides whether the next calls use them (see the module docstring)."""
    if len(tasks) == 1:
        return [tasks[0]()]
    futures: list[Future[int]] = [_executor().submit(task) for task in tasks[1:]]
    start = time.perf_counter_ns()
    done = [tasks[0]()]
    caller = time.perf_counter_ns() - start
    if done[0] == chunks:
        for future in futures:
            future.cancel()
        return done + [0] * len(futures)
    done += [0 if future.cancel() else future.result() for future in futures]
    alone = caller * chunks / max(done[0], 1)  # the caller's pace over every chunk
    _backoff.record(helped=time.perf_counter_ns() - start < alone)
    return done


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
