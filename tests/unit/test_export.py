"""The export worker on a fake clock (no real sleeps): its back-off schedule, and that nothing can stall an export
for good: an unencodable point or record, a record too large to send, a record the collector keeps refusing."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import otel_rl_contract as contract
import pytest
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.metrics.export import Gauge, MetricExportResult, MetricsData, NumberDataPoint, Sum
from opentelemetry.sdk.resources import Resource

from otel_rl._export.worker import ExportWorker, QueueLogProcessor, Timer
from otel_rl._state.store import MetricStore
from tests.conftest import EncodingMetricExporter


class FakeClock:
    """Time that moves only when the test says: ``advance`` moves it and returns once the worker has acted on it
    (it is waiting again, in a wait the new time does not end)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._changed = threading.Condition()
        self._deadline: float | None = None

    def timer(self) -> Timer:
        return Timer(monotonic=lambda: self.now, wait=self._wait)

    def _wait(self, event: threading.Event, timeout_s: float) -> bool:
        with self._changed:
            self._deadline = self.now + timeout_s
            self._changed.notify_all()
            while not event.is_set() and self.now < self._deadline:
                self._changed.wait(0.005)  # only to notice event.set(), which cannot notify this condition
            self._deadline = None
            return event.is_set()

    def settle(self) -> None:
        """Wait until the worker is blocked in a wait that the current time does not end."""
        with self._changed:
            self._changed.wait_for(lambda: self._deadline is not None and self.now < self._deadline, timeout=30)

    def advance(self, seconds: float) -> None:
        self.settle()
        with self._changed:
            self.now += seconds
            self._changed.notify_all()
        self.settle()


class CountingExporter(EncodingMetricExporter):
    """Records the fake time of every attempt."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.attempts: list[float] = []

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object) -> MetricExportResult:
        self.attempts.append(self.clock.now)
        return super().export(metrics_data, timeout_millis)


def _store() -> MetricStore:
    return MetricStore(Resource({"service.name": "t"}), start_time_ns=1, version="0")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def _worker(store: MetricStore, clock: FakeClock, **exporters: Any) -> ExportWorker:
    return ExportWorker(
        store,
        interval_s=1.0,
        timeout_s=1.0,
        queue_size=100,
        timer=clock.timer(),
        metric_exporter=exporters.get("metrics"),
        log_exporter=exporters.get("logs"),
    )


def test_failing_exports_back_off_on_schedule_and_a_flush_still_tries(clock: FakeClock) -> None:
    """While exports fail, periodic attempts pause 2, 4, then 5 s (capped); a flush tries at once; after a success
    the worker exports every interval again. Exact fake times: no sleeping, no flakiness on a loaded machine."""
    store = _store()
    store.add(contract.STEP, (), 1)
    exporter = CountingExporter(clock)
    exporter.fail = True
    worker = _worker(store, clock, metrics=exporter)
    for _ in range(20):
        clock.advance(1.0)
    assert exporter.attempts == [1.0, 3.0, 7.0, 12.0, 17.0]
    assert worker.wait(worker.request(), 30)
    assert exporter.attempts[-1] == 20.0
    exporter.fail = False
    assert worker.wait(worker.request(), 30)
    healed = len(exporter.attempts)
    for _ in range(4):
        clock.advance(1.0)
    assert exporter.attempts[healed:] == [21.0, 22.0, 23.0, 24.0]
    assert worker.shutdown(30)


class _BadPointStore(MetricStore):
    """A store that hands the worker one point OTLP cannot encode (an int beyond 64 bits), as a bug would."""

    def collect(self, now_ns: int) -> Any:
        data, window = super().collect(now_ns)
        assert data is not None
        metric = next(m for m in data.resource_metrics[0].scope_metrics[0].metrics if m.name == contract.STEP.name)
        assert isinstance(metric.data, Gauge | Sum) and isinstance(metric.data.data_points, list)
        metric.data.data_points.append(
            NumberDataPoint(attributes={"bad": "1"}, start_time_unix_nano=1, time_unix_nano=now_ns, value=2**70)
        )
        return data, window


def test_an_unencodable_point_is_left_out_and_counted(clock: FakeClock) -> None:
    """A point that fails to encode stops only its own stream: it is found, counted in otel_rl.export.unencodable,
    and every other point goes out in the same cycle and the next ones."""
    store = _BadPointStore(Resource({"service.name": "t"}), start_time_ns=1, version="0")
    store.set(contract.STEP, (), 7)
    exporter = EncodingMetricExporter()
    worker = _worker(store, clock, metrics=exporter)
    assert worker.wait(worker.request(), 30)
    assert worker.wait(worker.request(), 30)
    assert exporter.number(contract.STEP.name) == 7
    assert (("bad", "1"),) not in exporter.streams(contract.STEP.name)
    assert exporter.number(contract.EXPORT_UNENCODABLE.name, {contract.SELF_SIGNAL: "metrics"}) == 1
    assert len(exporter.exports) == 2
    assert worker.shutdown(30)


class EncodingLogExporter(InMemoryLogRecordExporter):
    """Encodes like the OTLP log exporters before keeping the batch; ``refuse`` makes it refuse any batch holding a
    record whose body says so (as a collector refuses a request over its size limit); ``hang`` makes every export
    fail after its whole timeout has passed on ``clock`` (as a SIGSTOPped collector does); ``fail`` makes every export
    fail at once (as an absent collector does)."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        InMemoryLogRecordExporter.__init__(self)  # named: mypy's untyped_calls_exclude does not apply through super()
        self.refuse = False
        self.hang = False
        self.fail = False
        self.clock = clock
        self.batches: list[int] = []

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        encode_logs(batch)
        self.batches.append(len(batch))
        if self.hang and self.clock is not None:
            self.clock.now += 1.0  # the worker's timeout_s
            return LogRecordExportResult.FAILURE
        if self.fail or (self.refuse and any(record.log_record.body == "refused" for record in batch)):
            return LogRecordExportResult.FAILURE
        kept: LogRecordExportResult = super().export(batch)  # the SDK leaves this method unannotated
        return kept


def _records(worker: ExportWorker, *bodies: Any) -> None:
    logger = LoggerProvider(resource=Resource({"service.name": "t"}))
    logger.add_log_record_processor(QueueLogProcessor(worker))
    for body in bodies:
        logger.get_logger("t").emit(body=body, event_name="rl.sample")


def _dropped(store: MetricStore, reason: str) -> float:
    return store.counter_value(contract.SAMPLES_DROPPED, ((contract.SELF_REASON, reason),))


@pytest.fixture
def log_worker(clock: FakeClock) -> Iterator[tuple[ExportWorker, MetricStore, EncodingLogExporter]]:
    store = _store()
    logs = EncodingLogExporter(clock)
    worker = _worker(store, clock, metrics=EncodingMetricExporter(), logs=logs)
    yield worker, store, logs
    assert worker.shutdown(30)


def test_unencodable_and_oversized_records_are_dropped_alone(
    log_worker: tuple[ExportWorker, MetricStore, EncodingLogExporter],
) -> None:
    """A record OTLP cannot encode, and one larger than any request may be, are dropped and counted; the records
    around them are exported."""
    worker, store, logs = log_worker
    _records(worker, "before", {"n": 2**70}, "x" * (5 * 1024 * 1024), "after")
    assert worker.wait(worker.request(), 30)
    assert [record.log_record.body for record in logs.get_finished_logs()] == ["before", "after"]
    assert (_dropped(store, "unencodable"), _dropped(store, "oversized")) == (1, 1)


def test_a_record_the_collector_keeps_refusing_does_not_stall_the_queue(
    clock: FakeClock, log_worker: tuple[ExportWorker, MetricStore, EncodingLogExporter]
) -> None:
    """While metrics go through, a refused batch is halved until the refused record is alone; after 5 cycles of
    refusal it is dropped and counted, and the records queued behind it go out."""
    worker, store, logs = log_worker
    logs.refuse = True
    assert worker.wait(worker.request(), 30)  # a first cycle, so the worker knows the collector takes metrics
    _records(worker, "refused", *[f"later {i}" for i in range(7)])
    for _ in range(5):
        worker.wait(worker.request(), 30)
    assert _dropped(store, "refused") == 1
    exported = [record.log_record.body for record in logs.get_finished_logs()]
    assert exported == [f"later {i}" for i in range(7)]


def test_a_hung_collector_costs_one_log_attempt_per_cycle(
    log_worker: tuple[ExportWorker, MetricStore, EncodingLogExporter],
) -> None:
    """A log export that fails only after its whole timeout is a hung collector, not a refusal: the batch is not
    halved (which would spend a timeout per halving before the metrics go out), nothing is dropped, and every record
    goes out once the collector answers."""
    worker, store, logs = log_worker
    assert worker.wait(worker.request(), 30)  # the collector took metrics
    _records(worker, *[f"r{i}" for i in range(8)])
    logs.hang = True
    assert worker.wait(worker.request(), 30)
    assert logs.batches == [8]
    logs.hang = False
    assert worker.wait(worker.request(), 30)
    assert [record.log_record.body for record in logs.get_finished_logs()] == [f"r{i}" for i in range(8)]
    assert _dropped(store, "refused") == 0


def test_a_counter_refuses_to_go_down() -> None:
    """A negative amount is a caller's bug, raised (it was silently ignored); the callers check their input first."""
    with pytest.raises(ValueError, match=r'"amount" of \'rl.staleness.dropped\' must be >= 0, got -1'):
        _store().add(contract.STALENESS_DROPPED, (), -1)


def test_an_outage_is_told_once_when_it_starts_and_once_when_it_ends(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Metrics and samples failing for a while: one warning when the first export fails, none while it lasts
    (back-off cycles included), one when every signal exports again, with how long it lasted on the worker's
    clock, the sample records sent late and those dropped from the full queue."""
    store = _store()
    metrics, logs = CountingExporter(clock), EncodingLogExporter()
    worker = _worker(store, clock, metrics=metrics, logs=logs)
    metrics.fail = logs.fail = True
    with caplog.at_level(logging.WARNING, logger="otel_rl"):
        _records(worker, *[f"r{i}" for i in range(60)])
        for _ in range(10):
            clock.advance(1.0)
        _records(worker, *[f"s{i}" for i in range(60)])  # 120 queued: the 20 oldest are dropped
        for _ in range(10):
            clock.advance(1.0)
        assert worker.health.failing
        metrics.fail = logs.fail = False
        assert worker.wait(worker.request(), 30)
        assert worker.shutdown(30)
    messages = [r.getMessage() for r in caplog.records if r.name == "otel_rl._export.health"]
    assert len(messages) == 2, messages
    assert "are failing (logs)" in messages[0] and "queues of 100 and 16384 (60 and 0 now" in messages[0]
    assert messages[1].startswith("otel-rl: exports to the configured exporters recovered after 19.0s")
    assert "sent late: 100 sample record(s), 0 span(s)" in messages[1]
    assert "lost (queues full): 20 sample record(s) and 0 span(s)" in messages[1]
    assert len(logs.get_finished_logs()) == 100 and _dropped(store, "queue_full") == 20
