"""Where the time goes, through the real collector, Jaeger and Prometheus (issue 22): four rank processes step through
phases; each step's trace in Jaeger holds every rank's phase spans, the ranks' phase metrics merge into one series
set per run whose counts and sums are those of the spans Jaeger holds, and tokens, FLOPs and the async pipeline's gauges
are the exact totals of what the ranks recorded."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import otel_rl_contract as contract
import pytest
from otel_rl_ops import promql
from otel_rl_ops.query import Jaeger, Prometheus, Span

from otel_rl._state.phases import step_trace
from tests.pipeline.harness import eventually, expected_buckets, start_ranks

RANKS = 4
STEPS = 3
FLOPS_PER_TOKEN = 6e9
PEAK_FLOPS = 1e15
PHASES = ("generate", "train", "sync")
"""The phases every rank goes through each step: generate, then train with a nested sync."""
BUCKETS = contract.PHASE_BOUNDS
"""The bounds of rl_phase_duration_seconds (otel_rl_contract.PHASE_BOUNDS; the collector's spanmetrics the same)."""
DURATIONS = contract.series(contract.PHASE_DURATION)
CALLS = contract.series(contract.PHASE_CALLS)


def _sleep_for(rank: int, step: int, phase: str) -> float:
    """How long the test keeps rank ``rank`` in ``phase`` at ``step``: different per rank and step, so that the
    buckets differ."""
    return {"generate": 0.05, "train": 0.02, "sync": 0.01}[phase] * (1 + rank + step)


@pytest.fixture(scope="module")
def timeline(shared_stack: Any) -> Iterator[dict[str, Any]]:
    """Four ranks, three steps: generate, then train with a nested sync; rank 1's trajectory, generated in step 0, is
    consumed by rank 0's train of step 1 (a span link and a queue span); tokens and the async gauges recorded."""
    run_id = f"timeline-{uuid.uuid4().hex[:8]}"
    ranks = start_ranks(
        RANKS,
        endpoint=shared_stack.otlp_grpc_endpoint,
        run_id=run_id,
        flops_per_token=FLOPS_PER_TOKEN,
        peak_flops=PEAK_FLOPS,
    )
    inputs: dict[str, Any] = {"generated": 0, "trained": 0, "samples": 0, "trajectory": ""}
    try:
        for step in range(STEPS):
            for rank in ranks:
                rank.step(step)
            for rank in ranks:
                rank.phase_enter("generate")
                if step == 0 and rank.rank == 1:
                    inputs["trajectory"] = rank.trajectory_context()
                time.sleep(_sleep_for(rank.rank, step, "generate"))
                rank.phase_leave()
                links = [inputs["trajectory"]] if step == 1 and rank.rank == 0 else []
                rank.phase_enter("train", links=links)
                time.sleep(_sleep_for(rank.rank, step, "train"))
                rank.phase_enter("sync")
                time.sleep(_sleep_for(rank.rank, step, "sync"))
                rank.phase_leave()
                rank.phase_leave()
                counts = {"generated": 100 * (rank.rank + 1), "trained": 64 * (step + 1), "samples": 8}
                rank.tokens(**counts)
                for name, amount in counts.items():
                    inputs[name] += amount
                rank.async_state(queue_depth=rank.rank, in_flight=2, buffer_used=10 + step, buffer_capacity=64)
        for rank in ranks:
            rank.step(STEPS)  # ends the last step's spans
            assert rank.flush()
        yield {"run_id": run_id, "ranks": ranks, **inputs}
    finally:
        for rank in ranks:
            rank.shutdown()


def _trace(shared_stack: Any, step: int, run_id: str) -> list[Span]:
    trace_id, _ = step_trace(run_id, step)
    return Jaeger(shared_stack.jaeger_url).trace(f"{trace_id:032x}")


def _complete(spans: list[Span]) -> bool:
    """Whether a step's trace holds the root, every rank's step span and each rank's phases."""
    names = [(span.name, span.attributes.get("rl.rank")) for span in spans]
    expected = [("rl.step", None)] + [(name, rank) for rank in range(RANKS) for name in ("rl.rank.step", *PHASES)]
    return all(item in names for item in expected)


@pytest.fixture(scope="module")
def traces(shared_stack: Any, timeline: dict[str, Any]) -> dict[int, list[Span]]:
    """Every step's trace as Jaeger returns it, once complete (spans leave the ranks in batches every few seconds)."""
    run_id = timeline["run_id"]
    return {
        step: eventually(
            lambda: (spans := _trace(shared_stack, step, run_id)) and _complete(spans) and spans,
            what=f"step {step}'s complete trace in Jaeger",
        )
        for step in range(STEPS)
    }


def test_each_steps_trace_holds_every_ranks_phase_spans(
    traces: dict[int, list[Span]], timeline: dict[str, Any]
) -> None:
    """Read back from Jaeger: one trace per step, rank 0's root rl.step, one rl.rank.step per rank under it, each rank's
    generate and train under its rank span and sync under its train, each once, all naming the step and the rank."""
    for step, spans in traces.items():
        (root,) = [span for span in spans if span.name == "rl.step"]
        assert root.parent_id == "" and root.resource["rl.rank"] == 0 and root.attributes["rl.step"] == step
        assert {span.resource["rl.run.id"] for span in spans} == {timeline["run_id"]}
        rank_spans = {span.attributes["rl.rank"]: span for span in spans if span.name == "rl.rank.step"}
        assert sorted(rank_spans) == list(range(RANKS))
        for rank, rank_span in rank_spans.items():
            assert rank_span.parent_id == root.span_id
            mine = [span for span in spans if span.attributes.get("rl.rank") == rank and span.name in PHASES]
            assert sorted(span.name for span in mine) == sorted(PHASES), (step, rank)
            by_name = {span.name: span for span in mine}
            assert by_name["generate"].parent_id == by_name["train"].parent_id == rank_span.span_id
            assert by_name["sync"].parent_id == by_name["train"].span_id
            assert all(
                span.attributes["rl.phase.name"] == span.name and span.attributes["rl.step"] == step for span in mine
            )
            assert by_name["generate"].duration_s >= _sleep_for(rank, step, "generate")
            assert rank_span.start_ns <= by_name["generate"].start_ns <= by_name["sync"].end_ns <= rank_span.end_ns


def test_a_consumed_trajectory_links_its_generation_and_the_train_step(traces: dict[int, list[Span]]) -> None:
    """Rank 1's step-0 generation is linked from rank 0's train of step 1, and step 0's trace holds the trajectory's
    queue span, from its generation to its consumption, under the generate span."""
    (generate,) = [s for s in traces[0] if s.name == "generate" and s.attributes["rl.rank"] == 1]
    (train,) = [s for s in traces[1] if s.name == "train" and s.attributes["rl.rank"] == 0]
    assert generate.span_id in train.links
    (queue,) = [s for s in traces[0] if s.name == "queue"]
    assert queue.parent_id == generate.span_id and queue.attributes["rl.phase.name"] == "queue"
    assert queue.end_ns == train.start_ns and queue.start_ns <= generate.end_ns


def _phase_spans(traces: dict[int, list[Span]]) -> dict[str, list[float]]:
    """The durations of every phase span of the run (queue spans included), by phase."""
    durations: dict[str, list[float]] = {}
    for spans in traces.values():
        for span in spans:
            if "rl.phase.name" in span.attributes:
                durations.setdefault(span.attributes["rl.phase.name"], []).append(span.duration_s)
    return durations


def test_phase_durations_per_run_match_the_spans(
    shared_stack: Any, traces: dict[int, list[Span]], timeline: dict[str, Any]
) -> None:
    """rl_phase_duration_seconds per run and phase, merged over the four ranks: its count and every bucket exactly
    those of the phase spans Jaeger holds, its sum theirs within float rounding, one series set per run (no rank,
    no instance), rl_phase_calls_total the same count; the step spans make no phase durations."""
    prometheus = Prometheus(shared_stack.prometheus_url)
    durations = _phase_spans(traces)
    assert sorted(durations) == sorted((*PHASES, "queue")) and len(durations["generate"]) == RANKS * STEPS
    selector = promql.matchers(rl_run_id=timeline["run_id"], rl_rank="")
    counted = f"sum by (rl_phase_name) ({DURATIONS.count}{{{selector}}})"
    expected = {phase: float(len(values)) for phase, values in durations.items()}
    eventually(lambda: prometheus.by_label(counted, "rl_phase_name") == expected, what="the phase span counts")
    sums = prometheus.by_label(f"sum by (rl_phase_name) ({DURATIONS.sum}{{{selector}}})", "rl_phase_name")
    assert sums == pytest.approx({phase: sum(values) for phase, values in durations.items()}, rel=1e-9, abs=1e-9)
    calls = f"sum by (rl_phase_name) ({CALLS.name}{{{selector}}})"
    eventually(lambda: prometheus.by_label(calls, "rl_phase_name") == expected, what="the phase calls")
    for phase, values in durations.items():
        held = prometheus.buckets(DURATIONS, f"{{{selector},{promql.match('rl_phase_name', phase)}}}")
        assert held == expected_buckets(values, BUCKETS), phase
    series = prometheus.series(f"{DURATIONS.count}{{{selector}}}")
    assert sorted(s["rl_phase_name"] for s in series) == sorted(durations)
    assert all(not {"rl_rank", "instance", "service_instance_id"} & set(s) for s in series)
    assert {s["span_name"] for s in series} == set(durations)


def test_tokens_flops_and_async_state_are_the_exact_totals(shared_stack: Any, timeline: dict[str, Any]) -> None:
    """Tokens and samples are the sums over ranks and steps, FLOPs per token as configured and the peak summed over
    the training ranks; the dashboard's tokens/s and MFU queries are those rates times the inputs' FLOPs (exact);
    queue depth, in-flight rollouts and buffer occupancy are the last values summed over ranks."""
    prometheus = Prometheus(shared_stack.prometheus_url)
    selector = promql.matchers(rl_run_id=timeline["run_id"], rl_rank="")
    counters = {
        contract.TOKENS_GENERATED: timeline["generated"],
        contract.TOKENS_TRAINED: timeline["trained"],
        contract.SAMPLES_TRAINED: timeline["samples"],
    }
    eventually(
        lambda: {m: prometheus.value(f"sum({contract.series(m).name}{{{selector}}})") for m in counters} == counters,
        what="the token counters",
    )
    assert prometheus.value(f"{contract.series(contract.FLOPS_PER_TOKEN).name}{{{selector}}}") == FLOPS_PER_TOKEN
    assert prometheus.value(f"{contract.series(contract.FLOPS_PEAK).name}{{{selector}}}") == RANKS * PEAK_FLOPS
    now = time.time()
    rate = prometheus.value(promql.rate(contract.series(contract.TOKENS_TRAINED), selector, window="5m"), at=now)
    assert rate is not None and rate > 0
    assert prometheus.value(promql.mfu(selector, window="5m"), at=now) == pytest.approx(
        rate * FLOPS_PER_TOKEN / (RANKS * PEAK_FLOPS), rel=1e-12
    )
    gauges = {
        contract.QUEUE_DEPTH: sum(range(RANKS)),
        contract.IN_FLIGHT: 2 * RANKS,
        contract.BUFFER_USED: (10 + STEPS - 1) * RANKS,
        contract.BUFFER_CAPACITY: 64 * RANKS,
    }
    assert {m: prometheus.value(f"{contract.series(m).name}{{{selector}}}") for m in gauges} == gauges


def test_golden_phase_series_names(shared_stack: Any, traces: dict[int, list[Span]], timeline: dict[str, Any]) -> None:
    """The series of the ranks' phase metrics (scope otel_rl: none from spanmetrics, which skips the ranks' own
    spans) are exactly those the contract derives: classic buckets and the calls counter."""
    names = "|".join(re.escape(item.name) for item in (DURATIONS, CALLS))
    series = Prometheus(shared_stack.prometheus_url).series(
        f'{{rl_run_id="{timeline["run_id"]}",__name__=~"({names}).*"}}'
    )
    assert {item["otel_scope_name"] for item in series} == {contract.SCOPE_NAME}
    expected = contract.prometheus_names((contract.PHASE_DURATION, contract.PHASE_CALLS), "explicit")
    assert {item["__name__"] for item in series} == expected
