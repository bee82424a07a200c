"""Faults against the real stack: a rank killed and restarted, the collector paused (issue: pipeline, 2 and 3); phase
counts and spans through a paused and a restarted collector, and a span queue overflowing (issue 29, item 2)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import otel_rl_contract as contract
import pytest
from otel_rl_ops.query import Jaeger, Prometheus

from otel_rl._state.phases import step_trace
from tests.conftest import never_decreasing
from tests.pipeline.harness import REWARD_BOUNDS, RankProcess, eventually, expected_buckets, private_stack

PHASE_CALLS = contract.series(contract.PHASE_CALLS)
REWARD = contract.series(contract.REWARDS.histogram)
REWARD_MAX = contract.series(contract.REWARDS.maximum)
REWARD_POSITIVE, REWARD_NEGATIVE, REWARD_SQUARES = map(contract.series, contract.REWARDS.sums)
SPANS_DROPPED = contract.series(contract.SPANS_DROPPED)


@pytest.fixture(scope="module")
def fault_stack(stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A stack of this module's own, since these tests pause and kill its components."""
    with private_stack(stack_binaries, tmp_path_factory.mktemp("fault-stack")) as running:
        yield running


def _ranks(stack: Any, run_id: str, count: int) -> list[RankProcess]:
    return [
        RankProcess(endpoint=stack.otlp_grpc_endpoint, run_id=run_id, rank=r, world_size=count) for r in range(count)
    ]


def test_killed_and_restarted_rank_keeps_counters_monotone_and_exact(fault_stack: Any) -> None:
    """SIGKILL a rank after a flushed step, restart it with the same rank id: totals never dip and end exact."""
    run_id = f"restart-{uuid.uuid4().hex[:8]}"
    prometheus = Prometheus(fault_stack.prometheus_url)
    selector = f'{{rl_run_id="{run_id}",rl_reward_fn="total"}}'
    rng = np.random.default_rng(3)
    ranks = _ranks(fault_stack, run_id, 4)
    recorded: list[float] = []
    started = time.time()
    try:
        for step in range(6):
            if step == 3:
                ranks[2].kill()  # everything it recorded was flushed at the end of step 2
                time.sleep(2.5)
                ranks[2] = RankProcess(endpoint=fault_stack.otlp_grpc_endpoint, run_id=run_id, rank=2, world_size=4)
            for rank in ranks:
                values = rng.normal(0, 1, 25).round(3).tolist()
                rank.rewards(values)
                recorded += values
                assert rank.flush()
            time.sleep(1.2)
        eventually(lambda: prometheus.value(f"{REWARD.count}{selector}") == len(recorded), what="the final count")
        assert prometheus.buckets(REWARD, selector) == expected_buckets(recorded, REWARD_BOUNDS)
        for metric in (REWARD.count, REWARD_POSITIVE.name, REWARD_NEGATIVE.name):
            never_decreasing(prometheus, f"{metric}{selector}", started)
    finally:
        for rank in ranks:
            rank.kill()


def test_paused_collector_loses_nothing(fault_stack: Any) -> None:
    """SIGSTOP the collector for more than two export intervals while ranks keep recording; totals end exact."""
    run_id = f"paused-{uuid.uuid4().hex[:8]}"
    prometheus = Prometheus(fault_stack.prometheus_url)
    selector = f'{{rl_run_id="{run_id}",rl_reward_fn="total"}}'
    rng = np.random.default_rng(5)
    ranks = _ranks(fault_stack, run_id, 4)
    recorded: list[float] = []
    maxima: list[float] = []
    try:
        for phase in range(3):
            if phase == 1:
                fault_stack.pause_component("collector")
            for rank in ranks:
                values = rng.normal(phase, 1, 20).round(3).tolist()
                rank.rewards(values)
                recorded += values
            maxima.append(max(recorded[-80:]))
            time.sleep(3.5)  # > 3 export intervals of 1 s
            if phase == 1:
                fault_stack.resume_component("collector")
        for rank in ranks:
            assert rank.flush()
        eventually(lambda: prometheus.value(f"{REWARD.count}{selector}") == len(recorded), what="the final count")
        assert prometheus.buckets(REWARD, selector) == expected_buckets(recorded, REWARD_BOUNDS)
        assert prometheus.value(f"{REWARD.sum}{selector}") == pytest.approx(sum(recorded), abs=1e-9)
        assert prometheus.value(f"max_over_time({REWARD_MAX.name}{selector}[10m])") == max(recorded)
    finally:
        fault_stack.resume_component("collector")
        for rank in ranks:
            rank.kill()


PHASES = ("generate", "train")


def _step_with_phases(ranks: list[RankProcess], step: int) -> None:
    """Every rank steps, then goes through each phase (a few ms each): 2 phase spans per rank and step."""
    for rank in ranks:
        rank.step(step)
        for phase in PHASES:
            rank.phase_enter(phase)
            time.sleep(0.005)
            rank.phase_leave()


def _phase_calls(prometheus: Prometheus, run_id: str) -> dict[str, float]:
    return prometheus.by_label(f'sum by (rl_phase_name) ({PHASE_CALLS.name}{{rl_run_id="{run_id}"}})', "rl_phase_name")


def test_phase_counts_survive_a_paused_and_a_restarted_collector_and_spans_a_pause(fault_stack: Any) -> None:
    """Two ranks step through phases while the collector is SIGSTOPped for 20 s, then SIGKILLed and started again:
    every phase's rl_phase_calls_total ends exact (the ranks count their phase spans in their own cumulative metrics,
    which a restarted collector recounts whole), and every span of the steps up to the pause's end is in Jaeger (the
    ranks' span queues kept and retried them), none dropped. (Spans a killed collector had accepted and not yet
    written are lost with it: the kill is checked on the counts.)"""
    run_id = f"span-faults-{uuid.uuid4().hex[:8]}"
    prometheus = Prometheus(fault_stack.prometheus_url)
    ranks = _ranks(fault_stack, run_id, 2)
    steps = 0
    try:
        for _ in range(2):
            _step_with_phases(ranks, steps)
            steps += 1
        fault_stack.pause_component("collector")
        paused_until = time.monotonic() + 20
        while time.monotonic() < paused_until:
            _step_with_phases(ranks, steps)
            steps += 1
            time.sleep(1.0)
        fault_stack.resume_component("collector")
        paused_steps = steps
        _step_with_phases(ranks, steps)  # ends the last paused step's step spans
        steps += 1
        for rank in ranks:
            assert rank.flush()
        jaeger = Jaeger(fault_stack.jaeger_url)
        whole = sorted(["rl.step", *["rl.rank.step", *PHASES] * len(ranks)])

        def whole_trace(step: int) -> Callable[[], bool]:
            return lambda: sorted(span.name for span in jaeger.trace(f"{step_trace(run_id, step)[0]:032x}")) == whole

        for step in range(paused_steps):
            eventually(whole_trace(step), what=f"step {step}'s whole trace in Jaeger")
        fault_stack.kill_component("collector")
        for _ in range(3):
            _step_with_phases(ranks, steps)
            steps += 1
        fault_stack.start_component("collector")
        _step_with_phases(ranks, steps)
        steps += 1
        for rank in ranks:
            assert rank.flush()
        expected = dict.fromkeys(PHASES, float(len(ranks) * steps))
        eventually(lambda: _phase_calls(prometheus, run_id) == expected, what="every phase counted exactly")
        stats = [rank.stats() for rank in ranks]
        assert all(stat[f"spans_dropped_{reason}"] == 0 for stat in stats for reason in ("queue_full", "refused"))
    finally:
        fault_stack.resume_component("collector")
        fault_stack.start_component("collector")
        for rank in ranks:
            rank.kill()


def test_an_outage_longer_than_the_span_queue_drops_the_oldest_and_counts_them(fault_stack: Any) -> None:
    """A rank whose span queue holds 10 spans goes on stepping while the collector is paused: every span it ended is
    either in Jaeger or counted as dropped (queue_full), the count in Prometheus too; its phase counts stay exact."""
    run_id = f"span-queue-{uuid.uuid4().hex[:8]}"
    prometheus = Prometheus(fault_stack.prometheus_url)
    (rank,) = [
        RankProcess(endpoint=fault_stack.otlp_grpc_endpoint, run_id=run_id, rank=0, world_size=1, span_queue_size=10)
    ]
    steps = 8
    try:
        _step_with_phases([rank], 0)
        assert rank.flush()
        fault_stack.pause_component("collector")
        for step in range(1, steps):
            _step_with_phases([rank], step)
        time.sleep(3)  # a few failed export cycles
        fault_stack.resume_component("collector")
        assert rank.flush()
        rank.step(steps)  # ends the last step's spans
        assert rank.flush()
        ended = steps * (2 + len(PHASES))  # each step's root and rank span, and its phases
        stats = rank.stats()
        assert stats["spans_dropped_queue_full"] > 0
        assert stats["spans_exported"] + stats["spans_dropped_queue_full"] == ended
        jaeger = Jaeger(fault_stack.jaeger_url)

        def stored() -> int:
            return sum(len(jaeger.trace(f"{step_trace(run_id, step)[0]:032x}")) for step in range(steps))

        eventually(lambda: stored() == stats["spans_exported"], what="Jaeger holding exactly the spans exported")
        dropped = f'{SPANS_DROPPED.name}{{rl_run_id="{run_id}",otel_rl_reason="queue_full"}}'
        eventually(
            lambda: prometheus.value(dropped) == stats["spans_dropped_queue_full"], what="the drop count in Prometheus"
        )
        expected = dict.fromkeys(PHASES, float(steps))
        eventually(lambda: _phase_calls(prometheus, run_id) == expected, what="every phase counted exactly")
    finally:
        fault_stack.resume_component("collector")
        rank.kill()
