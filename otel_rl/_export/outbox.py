"""Outbox: the bounded queue of one signal's items (sample records, spans) between the training thread and the export
worker, and their export with retries.

The training thread only appends; the export worker sends the oldest items in capped batches. A batch that fails
goes back to the front of the queue, so an outage shorter than the queue loses nothing; beyond the queue's size the
oldest items are dropped and counted (``queue_full``). An item that fails to encode (the exporter raises, where a
collector's refusal is a returned failure) is found by encoding each on its own, dropped and counted
(``unencodable``); an item the collector keeps refusing while it accepts metrics, even alone, is dropped after a few
tries (``refused``) instead of blocking the items behind it.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import otel_rl_contract as contract
from otel_rl_contract import MetricName

from otel_rl._export.health import ExportHealth, Signal, captured
from otel_rl._state.store import Attributes, MetricStore, attributes

_logger = logging.getLogger(__name__)
_BATCH = 512
REFUSALS = 5
"""Cycles in which an item sent alone was refused while metrics went through, before it is dropped."""
DROPPED_QUEUE_FULL = attributes(**{contract.SELF_REASON: "queue_full"})
DROPPED_SHUTDOWN = attributes(**{contract.SELF_REASON: "shutdown"})
DROPPED_OVERSIZED = attributes(**{contract.SELF_REASON: "oversized"})
DROPPED_ROTATED = attributes(**{contract.SELF_REASON: "rotated"})
"""Deleted with the oldest of the offline files (``output_max_files``)."""
_DROPPED_REFUSED = attributes(**{contract.SELF_REASON: "refused"})
_DROPPED_UNENCODABLE = attributes(**{contract.SELF_REASON: "unencodable"})

Item = TypeVar("Item")


class Outbox(Generic[Item]):
    """The queue of one signal and its export.

    ``export`` sends a batch and returns the exporter's result (``success`` when it went through; it may raise on an
    item it cannot encode); ``encodes`` says whether one item encodes; ``cost`` is an item's estimated bytes, and a
    batch holds at most ``batch_bytes`` of them (the collector's receive limit). ``exported`` and ``dropped`` are the
    counters of items sent and lost (by ``otel_rl.reason``)."""

    def __init__(
        self,
        *,
        signal: Signal,
        export: Callable[[list[Item]], object],
        success: object,
        encodes: Callable[[Item], bool],
        cost: Callable[[Item], int],
        batch_bytes: int,
        exported: MetricName,
        dropped: MetricName,
        store: MetricStore,
        health: ExportHealth,
        queue_size: int,
        monotonic: Callable[[], float],
    ) -> None:
        self._signal = signal
        self._export = export
        self._success = success
        self._encodes = encodes
        self._cost = cost
        self._batch_bytes = batch_bytes
        self._exported = exported
        self._dropped = dropped
        self._store = store
        self._health = health
        self._queue_size = queue_size
        self._monotonic = monotonic
        self._failures: Attributes = attributes(**{contract.SELF_SIGNAL: signal})
        self._queue: collections.deque[Item] = collections.deque()
        self._lock = threading.Lock()
        self._batch_limit = _BATCH
        self._refusals = 0
        for counter, attrs in (
            (exported, ()),
            (dropped, DROPPED_QUEUE_FULL),
            (contract.EXPORT_FAILURES, self._failures),
        ):
            store.add(counter, attrs, 0)
        store.add(contract.EXPORT_UNENCODABLE, self._failures, 0)

    def __len__(self) -> int:
        with self._lock:
            return len(self._queue)

    def submit(self, items: Sequence[Item]) -> None:
        """Queue ``items``; when the queue is full the oldest are dropped and counted."""
        with self._lock:
            self._queue.extend(items)
        self._trim()

    def send(self, *, collector_up: bool, timeout_s: float) -> None:
        """Export the queued items in capped batches; a failed batch stays queued.

        While the collector accepts metrics (``collector_up``), a refused batch is halved (for the next try), and an
        item refused alone in :data:`REFUSALS` cycles is dropped. Failed tries go on in the same cycle only while they
        took less than ``timeout_s`` together: a hung collector costs one timeout per cycle, so the metrics (exported
        after, with their counts) still go out in time."""
        failing_s = 0.0
        while True:
            batch = self._next_batch()
            if not batch:
                return
            began = self._monotonic()
            with self._health.exporting() as errors:
                result = call_exporter(functools.partial(self._export, batch))
                if result is RAISED:
                    batch = self._encodable(batch)
                    result = call_exporter(functools.partial(self._export, batch)) if batch else self._success
            if result == self._success:
                self._health.exported(self._signal, True, errors, items=len(batch))
                self._store.add(self._exported, (), len(batch))
                self._batch_limit = min(_BATCH, self._batch_limit * 2)
                self._refusals = 0
                continue
            self._store.add(contract.EXPORT_FAILURES, self._failures, 1)
            with self._lock:
                self._queue.extendleft(reversed(batch))
            self._health.exported(self._signal, False, errors)  # now that the batch is queued again
            failing_s += self._monotonic() - began
            again = failing_s < timeout_s
            if collector_up and len(batch) > 1:
                self._batch_limit = max(1, len(batch) // 2)  # the collector is up: find the item it refuses
                if again:
                    continue
            elif collector_up:
                self._refusals += 1
                if self._refusals >= REFUSALS:
                    self._refusals = 0
                    with self._lock:
                        self._queue.popleft()
                    self._store.add(self._dropped, _DROPPED_REFUSED, 1)
                    _logger.warning(
                        "otel-rl: one of the %s refused %d times, alone, while metrics went through, was dropped",
                        self._signal,
                        REFUSALS,
                    )
                    if again:
                        continue
            self._trim()
            return

    def discard(self) -> None:
        """Drop (and count, as ``shutdown``) whatever is still queued: the last export did not finish in time."""
        with self._lock:
            lost = len(self._queue)
            self._queue.clear()
        self._store.add(self._dropped, DROPPED_SHUTDOWN, lost)

    def _next_batch(self) -> list[Item]:
        """The oldest queued items, at most ``_batch_limit`` of them and ``batch_bytes`` together."""
        with self._lock:
            batch: list[Item] = []
            size = 0
            while self._queue and len(batch) < self._batch_limit:
                cost = self._cost(self._queue[0])
                if batch and size + cost > self._batch_bytes:
                    break
                batch.append(self._queue.popleft())
                size += cost
        return batch

    def _encodable(self, batch: list[Item]) -> list[Item]:
        """The items of ``batch`` that encode on their own; the others are dropped and counted."""
        kept = [item for item in batch if self._encodes(item)]
        if len(kept) < len(batch):
            lost = len(batch) - len(kept)
            self._store.add(self._dropped, _DROPPED_UNENCODABLE, lost)
            self._store.add(contract.EXPORT_UNENCODABLE, self._failures, lost)
            _logger.warning("otel-rl: %d of the %s could not be encoded and were dropped", lost, self._signal)
        return kept

    def _trim(self) -> None:
        """Drop (and count) the oldest items beyond the queue's size."""
        with self._lock:
            overflow = len(self._queue) - self._queue_size
            for _ in range(max(overflow, 0)):
                self._queue.popleft()
        if overflow > 0:
            self._store.add(self._dropped, DROPPED_QUEUE_FULL, overflow)
            self._health.dropped(self._signal, overflow)


RAISED = object()
"""What :func:`_call` returns when the exporter raised (an encoding error), rather than returning a failure."""


def call_exporter(export: Callable[[], object]) -> object:
    """The exporter's result, or :data:`RAISED` when it raised (an item it cannot encode)."""
    try:
        return export()
    except Exception as error:
        if not captured(error):  # inside an export, the health warning quotes it once
            _logger.warning("otel-rl: export raised", exc_info=True)
        return RAISED
