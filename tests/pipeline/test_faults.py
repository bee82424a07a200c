"""Faults against the real stack: a rank killed and restarted, the collector paused (issue: pipeline, 2 and 3)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from otel_rl.ops.query import Prometheus
from tests.conftest import never_decreasing
from tests.pipeline.harness import REWARD_BOUNDS, RankProcess, eventually, expected_buckets, private_stack


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
        eventually(lambda: prometheus.value(f"rl_reward_count{selector}") == len(recorded), what="the final count")
        assert prometheus.buckets("rl_reward", selector) == expected_buckets(recorded, REWARD_BOUNDS)
        for metric in ("rl_reward_count", "rl_reward_positive_total", "rl_reward_negative_total"):
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
        eventually(lambda: prometheus.value(f"rl_reward_count{selector}") == len(recorded), what="the final count")
        assert prometheus.buckets("rl_reward", selector) == expected_buckets(recorded, REWARD_BOUNDS)
        assert prometheus.value(f"rl_reward_sum{selector}") == pytest.approx(sum(recorded), abs=1e-9)
        assert prometheus.value(f"max_over_time(rl_reward_max{selector}[10m])") == max(recorded)
    finally:
        fault_stack.resume_component("collector")
        for rank in ranks:
            rank.kill()
