"""Steps and phases as spans (issue 22), with the real SDK's in-memory span exporter: one trace per step across
ranks without collectives, phases nested and carried across step boundaries, trajectories linked to the phase that
consumes them, and the throughput and async-pipeline signals."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import otel_rl_contract as contract
import pytest
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_rl
from otel_rl._state.phases import step_trace
from tests.conftest import (
    EXPORT_WAIT_S,
    EncodingMetricExporter,
    RecordingMetricExporter,
    attributes_of,
    duration_s,
    parent_id,
)


class Clock:
    """Nanoseconds that move only when told."""

    def __init__(self) -> None:
        self.now = 10**18

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1e9)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def _rank(
    rank: int, spans: InMemorySpanExporter, clock: Clock, metrics: EncodingMetricExporter | None = None
) -> otel_rl.Telemetry:
    return otel_rl.Telemetry(
        otel_rl.TelemetryConfig(
            run_id="phases",
            rank=rank,
            world_size=2,
            exporter="none",
            export_interval_s=60,
            flops_per_token=6e9,
            peak_flops=1e15 if rank == 0 else None,
        ),
        metric_exporter=metrics or EncodingMetricExporter(),
        log_exporter=InMemoryLogRecordExporter(),
        span_exporter=spans,
        clock=clock,
    )


@pytest.fixture
def ranks(spans: InMemorySpanExporter, clock: Clock) -> Iterator[list[otel_rl.Telemetry]]:
    instances = [_rank(0, spans, clock), _rank(1, spans, clock)]
    yield instances
    for instance in instances:
        instance.shutdown(EXPORT_WAIT_S)


def _finished(spans: InMemorySpanExporter, ranks: list[otel_rl.Telemetry]) -> list[ReadableSpan]:
    for rank in ranks:
        assert rank.flush(EXPORT_WAIT_S)
    return list(spans.get_finished_spans())


def test_every_rank_puts_its_phases_in_the_steps_one_trace(
    ranks: list[otel_rl.Telemetry], spans: InMemorySpanExporter, clock: Clock
) -> None:
    """Step 5 of two ranks: one trace whose id both derive; rank 0's root, one rank span per rank under it, each
    rank's phases under its rank span, a nested phase under its enclosing one, durations from the clock."""
    for rank in ranks:
        rank.step(5)
    for index, rank in enumerate(ranks):
        with rank.phase("generate"):
            clock.advance(2.0 + index)
        with rank.phase("train"):
            with rank.phase("sync"):
                clock.advance(0.5)
            clock.advance(1.0)
    for rank in ranks:
        rank.step(6)
    finished = [s for s in _finished(spans, ranks) if s.attributes and s.attributes.get("rl.step") == 5]
    trace_id, root_id = step_trace("phases", 5)
    assert {s.context.trace_id for s in finished} == {trace_id}
    (root,) = [s for s in finished if s.name == "rl.step"]
    assert root.context.span_id == root_id and root.parent is None
    rank_spans = {attributes_of(s)["rl.rank"]: s for s in finished if s.name == "rl.rank.step"}
    assert set(rank_spans) == {0, 1} and all(s.parent and s.parent.span_id == root_id for s in rank_spans.values())
    for rank_number in (0, 1):
        rank_span = rank_spans[rank_number]
        mine = {
            s.name: s
            for s in finished
            if attributes_of(s).get("rl.rank") == rank_number and s.name not in ("rl.step", "rl.rank.step")
        }
        assert set(mine) == {"generate", "train", "sync"}
        assert parent_id(mine["generate"]) == parent_id(mine["train"]) == rank_span.context.span_id
        assert parent_id(mine["sync"]) == mine["train"].context.span_id
        assert duration_s(mine["generate"]) == 2.0 + rank_number
        assert duration_s(mine["train"]) == 1.5
        assert attributes_of(mine["sync"])["rl.phase.name"] == "sync"


def test_an_imperative_phase_carries_over_into_the_next_step(
    ranks: list[otel_rl.Telemetry], spans: InMemorySpanExporter, clock: Clock
) -> None:
    """set_phase replaces the current phase; a step boundary ends its span and opens it again in the next step's
    trace, so each step's trace holds the rank's phases; the phase gauge counts the rank throughout."""
    rank = ranks[0]
    rank.step(1)
    rank.set_phase("generate")
    clock.advance(1.0)
    rank.set_phase("train")
    clock.advance(1.0)
    rank.step(2)
    clock.advance(1.0)
    rank.step(3)
    finished = _finished(spans, ranks)
    trains = sorted((s for s in finished if s.name == "train"), key=lambda s: s.start_time or 0)
    assert [attributes_of(s)["rl.step"] for s in trains] == [1, 2]
    assert [s.context.trace_id for s in trains] == [step_trace("phases", 1)[0], step_trace("phases", 2)[0]]
    assert [
        s.name for s in finished if attributes_of(s).get("rl.step") == 1 and s.name not in ("rl.step", "rl.rank.step")
    ] == ["generate", "train"]
    started = rank._pipeline.store.collect(clock())[0]
    assert started is not None
    gauges = RecordingMetricExporter()
    gauges.export(started)
    assert gauges.number(contract.PHASES.name, {"rl.phase.name": "train"}) == 1
    assert gauges.number(contract.PHASES.name, {"rl.phase.name": "generate"}) == 0
    assert gauges.number(contract.PHASE_STARTED.name, {"rl.phase.name": "train"}) == (clock() - 2 * 10**9) / 1e9
    assert (("rl.phase.name", "generate"),) not in gauges.streams(contract.PHASE_STARTED.name)


def test_a_trajectory_is_linked_to_the_phase_that_consumes_it(
    ranks: list[otel_rl.Telemetry], spans: InMemorySpanExporter, clock: Clock
) -> None:
    """A rollout worker's generation context, sent with its trajectory, links the trainer's phase to it and puts a
    queue span (generated → consumed) in the trajectory's own trace: generate → queue → train."""
    trainer, worker = ranks
    worker.step(1)
    with worker.phase("generate"):
        clock.advance(1.0)
        context = worker.trajectory_context()
    clock.advance(3.0)
    trainer.step(1)
    with trainer.phase("train", links=[context, "not a context"]):
        clock.advance(1.0)
    trainer.step(2)
    worker.step(2)
    finished = _finished(spans, ranks)
    (generate,) = [s for s in finished if s.name == "generate"]
    (train,) = [s for s in finished if s.name == "train"]
    (queue,) = [s for s in finished if s.name == "queue"]
    assert [link.context.span_id for link in train.links] == [generate.context.span_id]
    assert parent_id(queue) == generate.context.span_id and queue.context.trace_id == generate.context.trace_id
    assert duration_s(queue) == 3.0
    assert trainer.self_telemetry.rejected("rl.trajectory") == 1


def test_phases_never_raise_and_never_swallow(ranks: list[otel_rl.Telemetry]) -> None:
    """Hostile phase names and links are counted, not raised; an exception of the block goes on as it is."""
    rank = ranks[0]

    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    hostile: Any = Hostile()  # as from a caller without type checks
    with rank.phase(hostile, links=hostile):
        pass
    with pytest.raises(KeyError), rank.phase("train"):
        raise KeyError("the trainer's own")
    assert rank.self_telemetry.rejected(contract.PHASES.name) >= 1


def test_throughput_and_async_state_are_exact_counters_and_gauges(spans: InMemorySpanExporter, clock: Clock) -> None:
    """Tokens and samples are counters; the async pipeline's gauges take integers >= 0 (a bad one is counted and the
    others kept); FLOPs per token and peak FLOP/s come from the configuration."""
    metrics = EncodingMetricExporter()
    rank = _rank(0, spans, clock, metrics)
    rank.record_tokens(generated=4096, trained=3000, samples=8)
    rank.record_tokens(generated=2**53 + 1, trained=1)
    rank.set_async_state(queue_depth=3, in_flight=5, buffer_used=120, buffer_capacity=512)
    rank.set_async_state(queue_depth=-1)
    assert rank.flush(EXPORT_WAIT_S)

    def value(metric: contract.MetricName) -> int | float:
        return metrics.number(metric.name)

    assert (value(contract.TOKENS_GENERATED), value(contract.TOKENS_TRAINED), value(contract.SAMPLES_TRAINED)) == (
        4096 + 2**53 + 1,
        3001,
        8,
    )
    assert (
        value(contract.QUEUE_DEPTH),
        value(contract.IN_FLIGHT),
        value(contract.BUFFER_USED),
        value(contract.BUFFER_CAPACITY),
    ) == (3, 5, 120, 512)
    assert (value(contract.FLOPS_PER_TOKEN), value(contract.FLOPS_PEAK)) == (6e9, 1e15)
    assert rank.self_telemetry.rejected(contract.QUEUE_DEPTH.name) == 1
    rank.shutdown(EXPORT_WAIT_S)


def test_without_trace_export_records_still_name_the_step(clock: Clock) -> None:
    """With exporter="none" no span is exported, but sample records carry the step's derived trace id."""
    logs = InMemoryLogRecordExporter()
    rank = otel_rl.Telemetry(
        otel_rl.TelemetryConfig(run_id="phases", exporter="none", export_interval_s=60),
        metric_exporter=EncodingMetricExporter(),
        log_exporter=logs,
        clock=clock,
    )
    rank.step(9)
    rank.record_sample(otel_rl.EpisodeSample(reward=1.0))
    rank.step(10)
    rank.shutdown(EXPORT_WAIT_S)
    (record,) = logs.get_finished_logs()
    assert record.log_record.trace_id == step_trace("phases", 9)[0]
