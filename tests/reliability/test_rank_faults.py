"""Faults of the ranks: killed in the middle of an export, restarted with the same rank id, clocks seconds apart.

The shared stack is enough: these tests only add data, each under its own run id.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import numpy as np
import otel_rl_contract as contract
import pytest
from otel_rl_ops.query import Prometheus, VictoriaLogs

from tests.conftest import never_decreasing
from tests.pipeline.harness import REWARD_BOUNDS, RankProcess, eventually, expected_buckets
from tests.reliability.helpers import flush_ok

REWARD = contract.series(contract.REWARDS.histogram)
REWARD_MAX = contract.series(contract.REWARDS.maximum)
REWARD_POSITIVE, REWARD_NEGATIVE, REWARD_SQUARES = map(contract.series, contract.REWARDS.sums)
STEP = contract.series(contract.STEP)


def _selector(run_id: str) -> str:
    return f'{{rl_run_id="{run_id}",rl_reward_fn="total"}}'


def test_rank_killed_mid_export_then_restarted_with_same_rank_id(shared_stack: Any) -> None:
    """A rank exporting every 20 ms is SIGKILLed right after a record: the run's totals hold either all or none of
    that last batch (never a part, never a dip), and its restart with the same rank id adds exactly its records."""
    run_id = f"midexport-{uuid.uuid4().hex[:8]}"
    prometheus = Prometheus(shared_stack.prometheus_url)
    selector = _selector(run_id)
    endpoint = shared_stack.otlp_grpc_endpoint
    rng = np.random.default_rng(11)
    ranks = [
        RankProcess(endpoint=endpoint, run_id=run_id, rank=r, world_size=3, export_interval_s=0.02) for r in range(3)
    ]
    kept: list[float] = []
    try:
        for rank in ranks:
            values = rng.normal(0, 1, 30).round(3).tolist()
            rank.rewards(values)
            kept += values
            flush_ok(rank)
        last = rng.normal(5, 1, 7).round(3).tolist()  # 7 values, all in buckets of their own range
        ranks[1].rewards(last)
        ranks[1].kill()
        time.sleep(2.5)
        count = eventually(lambda: prometheus.value(f"{REWARD.count}{selector}"), what="the run's count")
        assert count in (len(kept), len(kept) + len(last))
        with_last = count == len(kept) + len(last)
        expected = kept + last if with_last else kept
        restarted = RankProcess(endpoint=endpoint, run_id=run_id, rank=1, world_size=3, export_interval_s=0.02)
        ranks[1] = restarted
        again = rng.normal(-1, 1, 11).round(3).tolist()
        restarted.rewards(again)
        flush_ok(restarted)
        expected += again
        eventually(lambda: prometheus.value(f"{REWARD.count}{selector}") == len(expected), what="the final count")
        time.sleep(2.5)
        assert prometheus.value(f"{REWARD.count}{selector}") == len(expected)
        assert prometheus.buckets(REWARD, selector) == expected_buckets(expected, REWARD_BOUNDS)
        never_decreasing(prometheus, f"{REWARD.count}{selector}", time.time() - 30)
    finally:
        for rank in ranks:
            rank.kill()


def test_rank_clocks_seconds_apart_keep_the_aggregate_exact(shared_stack: Any) -> None:
    """Four ranks whose clocks are -4 s, 0, +3 s and +7 s off: counts, buckets and sums are exact, max is right."""
    run_id = f"skew-{uuid.uuid4().hex[:8]}"
    prometheus = Prometheus(shared_stack.prometheus_url)
    selector = _selector(run_id)
    rng = np.random.default_rng(13)
    ranks = [
        RankProcess(
            endpoint=shared_stack.otlp_grpc_endpoint,
            run_id=run_id,
            rank=r,
            world_size=4,
            clock_offset_s=offset,
            export_interval_s=0.3,
        )
        for r, offset in enumerate((-4.0, 0.0, 3.0, 7.0))
    ]
    recorded: list[float] = []
    try:
        for step in range(6):
            for rank in ranks:
                rank.step(step)
                values = rng.normal(step, 1, 15).round(3).tolist()
                rank.rewards(values)
                recorded += values
            time.sleep(0.6)
        for rank in ranks:
            flush_ok(rank)
        eventually(lambda: prometheus.value(f"{REWARD.count}{selector}") == len(recorded), what="the final count")
        assert prometheus.buckets(REWARD, selector) == expected_buckets(recorded, REWARD_BOUNDS)
        positive = sum(v for v in recorded if v > 0)
        assert prometheus.value(f"{REWARD_POSITIVE.name}{selector}") == pytest.approx(positive, abs=1e-9)
        assert prometheus.value(f"max_over_time({REWARD_MAX.name}{selector}[5m])") == max(recorded)
        assert prometheus.value(f'max_over_time({STEP.name}{{rl_run_id="{run_id}"}}[5m])') == 5
    finally:
        for rank in ranks:
            rank.kill()


def test_a_backlog_of_large_samples_is_exported_under_the_receiver_limit(shared_stack: Any) -> None:
    """500 kept samples of 3 x 16 KiB texts (24 MiB, more than the collector's 16 MiB gRPC limit) queued at once
    all reach VictoriaLogs: the rank splits log exports by size, so no batch is refused forever."""
    run_id = f"backlog-{uuid.uuid4().hex[:8]}"
    rank = RankProcess(
        endpoint=shared_stack.otlp_grpc_endpoint,
        run_id=run_id,
        rank=0,
        world_size=1,
        top_k=500,
        bottom_k=0,
        export_interval_s=0.5,
        export_timeout_s=5.0,
    )
    try:
        rank.step(0)
        rank.synthetic(seed=1, rollouts=500, samples=500, text_bytes=16_384)
        rank.step(1)
        count = f'{{rl.run.id="{run_id}"}} | stats count() as n'
        eventually(
            lambda: (rows := VictoriaLogs(shared_stack.victorialogs_url).query(count)) and rows[0]["n"] == "500",
            what="500 samples in VictoriaLogs",
            timeout_s=60,
        )
        stats = rank.stats()
        assert stats["samples_exported"] == 500 and stats["samples_dropped_queue_full"] == 0
    finally:
        rank.kill()
