"""Faults of the stack's components against real rank processes: each test measures what is lost (issue 7, 1).

One private stack for the module (its components are stopped, killed and restarted); every test leaves all three
running. Rewards are rounded to 1e-3 so float64 sums are exact and every count and bucket can be compared with ==.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import otel_rl_contract as contract
import pytest
from otel_rl_contract import foreign
from otel_rl_ops.query import Prometheus, VictoriaLogs

from tests.pipeline.harness import REWARD_BOUNDS, RankProcess, eventually, expected_buckets, private_stack
from tests.reliability.helpers import collector_metrics, flush_ok

REWARD = contract.series(contract.REWARDS.histogram)

RANKS = 2
FAST_RANK = {"export_interval_s": 0.2, "export_timeout_s": 1.0}


@pytest.fixture(scope="module")
def stack(stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with private_stack(stack_binaries, tmp_path_factory.mktemp("reliability-faults")) as running:
        yield running


@pytest.fixture
def healthy_stack(stack: Any) -> Iterator[Any]:
    """The module's stack, with every component running again after the test (whatever it did)."""
    yield stack
    for name in stack.component_names:
        if stack.pid(name) is not None:
            stack.resume_component(name)
        else:
            stack.start_component(name)


class Run:
    """The ranks of one run and the exact record of what they recorded."""

    def __init__(self, stack: Any, prefix: str, *, ranks: int = RANKS, **settings: Any) -> None:
        self.run_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.endpoint = stack.otlp_grpc_endpoint
        self.settings = {**FAST_RANK, **settings}
        self.ranks = [self._start(r, ranks) for r in range(ranks)]
        self.recorded: list[float] = []
        self.rng = np.random.default_rng(abs(hash(prefix)) % 2**32)
        self.prometheus = Prometheus(stack.prometheus_url)
        self.selector = f'{{rl_run_id="{self.run_id}",rl_reward_fn="total"}}'

    def _start(self, rank: int, world_size: int) -> RankProcess:
        return RankProcess(
            endpoint=self.endpoint, run_id=self.run_id, rank=rank, world_size=world_size, **self.settings
        )

    def steps(self, first: int, count: int, *, per_rank: int = 10) -> tuple[list[float], float]:
        """Record ``count`` steps on every rank; returns the values and the wall time of the record calls."""
        values: list[float] = []
        started = time.monotonic()
        for step in range(first, first + count):
            for rank in self.ranks:
                rank.step(step)
                batch = self.rng.normal(0, 1, per_rank).round(3).tolist()
                rank.rewards(batch)
                values += batch
        elapsed = time.monotonic() - started
        self.recorded += values
        return values, elapsed

    def count(self) -> float | None:
        return self.prometheus.value(f"{REWARD.count}{self.selector}")

    def wait_count(self, expected: int, what: str) -> None:
        eventually(lambda: self.count() == expected, what=f"{what}: {REWARD.count} == {expected}")
        time.sleep(2.5)  # two more collector ticks: nothing else may arrive
        assert self.count() == expected, f"{what}: the count moved past {expected}"

    def assert_buckets(self, values: list[float]) -> None:
        assert self.prometheus.buckets(REWARD, self.selector) == expected_buckets(values, REWARD_BOUNDS)

    def close(self) -> None:
        for rank in self.ranks:
            rank.kill()


def test_collector_absent_at_start(healthy_stack: Any) -> None:
    """Ranks start with no collector: recording never blocks, failures are counted, and once the collector is up
    everything recorded before is present (cumulative export + ``initial_value: keep``): nothing lost."""
    stack = healthy_stack
    stack.stop_component("collector")
    run = Run(stack, "late")
    try:
        before, elapsed = run.steps(0, 20)
        assert elapsed < 5.0, f"20 steps took {elapsed:.1f}s with no collector"
        eventually(
            lambda: all(rank.stats()["export_failures_metrics"] > 0 for rank in run.ranks),
            what="export failures counted by every rank",
            timeout_s=10,
        )
        stack.start_component("collector")
        for rank in run.ranks:
            flush_ok(rank)
        after, _ = run.steps(20, 10)
        for rank in run.ranks:
            flush_ok(rank)
        run.wait_count(len(before + after), "late collector")
        run.assert_buckets(before + after)
    finally:
        run.close()


def test_collector_killed_and_restarted(healthy_stack: Any) -> None:
    """SIGKILL the collector mid-run: ranks are unaffected, and the restarted collector (merge state lost) counts
    every live rank's whole history again: the run's series continues with the exact totals, no counter reset."""
    stack = healthy_stack
    run = Run(stack, "kill")
    started = time.time()
    try:
        phase_a, _ = run.steps(0, 8)
        for rank in run.ranks:
            flush_ok(rank)
        run.wait_count(len(phase_a), "before the kill")
        stack.kill_component("collector")
        down, elapsed = run.steps(8, 5)
        assert elapsed < 5.0, f"5 steps took {elapsed:.1f}s with a dead collector"
        stack.start_component("collector")
        for rank in run.ranks:
            flush_ok(rank)
        time.sleep(2.5)
        phase_c, _ = run.steps(13, 2)
        for rank in run.ranks:
            flush_ok(rank)
        run.wait_count(len(phase_a) + len(down) + len(phase_c), "after the restart")
        run.assert_buckets(phase_a + down + phase_c)
        resets = run.prometheus.value(f"resets({REWARD.count}{run.selector}[{int(time.time() - started) + 5}s])")
        assert resets == 0
    finally:
        run.close()


def test_log_store_down_samples_arrive_after_recovery(healthy_stack: Any) -> None:
    """VictoriaLogs stopped while ranks emit samples: the collector's sending queue retries them; every sample
    arrives after VictoriaLogs is back, none is counted as dropped by the collector or the ranks."""
    stack = healthy_stack
    run = Run(stack, "vl-down", top_k=2, bottom_k=2)
    collector_before = collector_metrics(stack)
    try:
        stack.stop_component("victorialogs")
        for step in range(6):
            for rank in run.ranks:
                rank.step(step)
                for index in range(5):
                    rank.sample(reward=float(index), episode_id=f"{rank.rank}-{step}-{index}", response=f"s{step}")
        for rank in run.ranks:
            rank.step(6)  # emits step 5's samples
            flush_ok(rank)
        time.sleep(3.0)
        stack.start_component("victorialogs")
        expected = 6 * RANKS * 4  # top 2 + bottom 2 of 5 samples per step and rank
        logs = VictoriaLogs(stack.victorialogs_url)
        records = eventually(
            lambda: (found := logs.query(f'{{rl.run.id="{run.run_id}"}}')) and len(found) >= expected and found,
            what=f"{expected} samples in VictoriaLogs",
        )
        assert len(records) == expected
        assert len({r["rl.episode.id"] for r in records}) == expected
        collector_after = collector_metrics(stack)
        for failed in (foreign.COLLECTOR_LOG_RECORDS_SEND_FAILED, foreign.COLLECTOR_LOG_RECORDS_ENQUEUE_FAILED):
            name = foreign.text_name(failed)
            assert collector_after.get(name, 0.0) == collector_before.get(name, 0.0), name
        for rank in run.ranks:
            stats = rank.stats()
            assert stats["samples_exported"] == 6 * 4 and stats["samples_dropped_queue_full"] == 0
    finally:
        run.close()


def test_prometheus_down_totals_exact_after_recovery_and_rank_memory_flat(healthy_stack: Any) -> None:
    """Prometheus stopped for ~8 s while ranks record: remote write retries, the totals are exact after it is
    back, and the ranks' RSS does not grow (< 8 MiB) across the outage."""
    stack = healthy_stack
    run = Run(stack, "prom-down")
    try:
        phase_a, _ = run.steps(0, 5)
        for rank in run.ranks:
            flush_ok(rank)
        run.wait_count(len(phase_a), "before the outage")
        rss_before = [rank.rss_kib() for rank in run.ranks]
        stack.stop_component("prometheus")
        down: list[float] = []
        for chunk in range(8):
            values, _ = run.steps(5 + chunk * 5, 5)
            down += values
            time.sleep(1.0)
        stack.start_component("prometheus")
        after, _ = run.steps(45, 5)
        for rank in run.ranks:
            flush_ok(rank)
        run.wait_count(len(phase_a) + len(down) + len(after), "after Prometheus is back")
        run.assert_buckets(run.recorded)
        assert run.prometheus.value(f"{REWARD.sum}{run.selector}") == pytest.approx(sum(run.recorded), abs=1e-9)
        rss_after = [rank.rss_kib() for rank in run.ranks]
        growth = max(after_ - before_ for before_, after_ in zip(rss_before, rss_after, strict=True))
        assert growth < 8 * 1024, f"rank RSS grew by {growth} KiB over the outage"
    finally:
        run.close()


def test_shutdown_flushes_and_a_hung_collector_cannot_hang_exit(healthy_stack: Any) -> None:
    """shutdown() exports what the periodic exports never sent (exact in Prometheus); with the collector SIGSTOPped
    a rank process exits within shutdown_timeout_s + 3 s and reports the flush as unfinished."""
    stack = healthy_stack
    slow: dict[str, Any] = {"export_interval_s": 600.0, "export_timeout_s": 10.0, "shutdown_timeout_s": 2.0}
    run = Run(stack, "shutdown", **slow)
    try:
        values, _ = run.steps(0, 3)
        started = time.monotonic()
        finished = [bool(json.loads(rank.send("shutdown", timeout_s=10))["finished"]) for rank in run.ranks]
        assert finished == [True] * RANKS and time.monotonic() - started < 10
        run.wait_count(len(values), "after shutdown")
    finally:
        run.close()
    hung = Run(stack, "hung", **slow)
    try:
        hung.steps(0, 3)
        stack.pause_component("collector")
        shutdowns = []
        for rank in hung.ranks:
            started = time.monotonic()
            reply = json.loads(rank.send("shutdown", timeout_s=2.0))
            shutdowns.append(time.monotonic() - started)
            rank.wait()
            assert reply == {"finished": False}
        assert max(shutdowns) < 2.0 + 1.5, f"shutdown(timeout_s=2.0) took {shutdowns}"
    finally:
        stack.resume_component("collector")
        hung.close()
