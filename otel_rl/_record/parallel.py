"""One compiled pass over a large input, on the calling thread and, when it helps, pool threads beside it.

The kernels in ``otel_rl._record.kernels`` release the GIL and take their work in chunks from a shared counter (an
atomic increment), so a pool thread helps exactly as much as it runs: started at once on a free core it takes half the
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

A helper never runs on the caller's core: before handing work out, the caller moves the pool's threads off the core it
is on (``sched_setaffinity`` of their thread ids to the others; one system call when the caller has moved since the
last call). Woken on the caller's own core, a helper preempted the caller and then ran the whole input while the
caller, runnable, waited for that core: the same time as one thread, the other core idle or busy elsewhere (12 calls
of 1M values at load 3: none beat one thread's 750-830 us; with the helpers placed away, 8 took 443-541 us). A
caller with no other core allowed hands no work out.

The thread count follows torch's intra-op setting (``torch.get_num_threads``, which honours ``OMP_NUM_THREADS`` and
``torch.set_num_threads``), the cores ``x.sum()`` uses.
"""

from __future__ import annotations

import ctypes
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
PARALLEL_CHUNKS = 8
"""The fewest chunks worth a helper thread: 262,144 values. Measured with a helper on the other core (load 6, 200
interleaved calls of one distribution's kernel, median [p10]): 131,072 values 100 us [99] alone, 112 [101] with a
helper; 262,144 values 192 [190] against 167 [149]; 1M values 771 [743] against 588 [449]."""
BACKOFF_NS = 20_000_000
"""How long calls run alone after a call that helpers did not speed up (doubled for each such call in a row)."""
_MAX_BACKOFF_DOUBLINGS = 10

_pool: ThreadPoolExecutor | None = None
_workers = 0
_pool_lock = threading.Lock()
_helpers: list[int] = []
"""The native thread ids of the pool's threads."""
_placed: list[frozenset[int] | None] = [None]
"""The cores the helpers were last restricted to."""


def _current_core() -> Callable[[], int] | None:
    try:
        found: Callable[[], int] = ctypes.CDLL(None).sched_getcpu
        return found
    except (OSError, AttributeError):
        return None


_core = _current_core()


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
    if len(tasks) == 1 or not _away_from_caller():
        return [tasks[0]()] + [0] * (len(tasks) - 1)
    pool, _ = _executor()
    futures: list[Future[int]] = [pool.submit(task) for task in tasks[1:]]
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


def _away_from_caller() -> bool:
    """Restrict the pool's threads to the cores allowed to the caller other than the one it is on; False when there
    is none, so that no work is handed out. Where cores cannot be told apart (no ``sched_getcpu``, an affinity call
    refused) the helpers are left where they are: the backoff still keeps them from holding the caller up."""
    if _core is None or not hasattr(os, "sched_setaffinity"):
        return True
    others = frozenset(os.sched_getaffinity(0)) - {_core()}
    if not others:
        return False
    pool, workers = _executor()
    if len(_helpers) < workers:  # start the pool's threads, so that every helper is placed
        for future in [pool.submit(time.sleep, 0.001) for _ in range(workers)]:
            future.result()
    if _placed[0] != others:
        try:
            for helper in _helpers:
                os.sched_setaffinity(helper, others)
        except OSError:
            return True
        _placed[0] = others
    return True


def _register() -> None:
    _helpers.append(threading.get_native_id())


def _executor() -> tuple[ThreadPoolExecutor, int]:
    """The pool and how many threads it has."""
    global _pool, _workers
    with _pool_lock:
        if _pool is None:
            _workers = max(1, torch.get_num_threads() - 1)
            _pool = ThreadPoolExecutor(max_workers=_workers, thread_name_prefix="otel-rl", initializer=_register)
        return _pool, _workers


def _forget_pool() -> None:
    """A forked child has none of the parent's threads: it starts its own pool when it needs one."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()
    _helpers.clear()
    _placed[0] = None


os.register_at_fork(after_in_child=_forget_pool)
