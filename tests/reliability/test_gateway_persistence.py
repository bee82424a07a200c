"""A gateway (collector.yaml + gateway.yaml) SIGKILLed while both backends are down: what its persistent log queue
keeps and what the in-memory remote-write queue loses (issue 13, 1; docs/reliability.md, "Gateway crash").

One private stack whose collector runs the gateway configuration; VictoriaLogs and Prometheus are stopped before
the ranks record, so everything the gateway accepts sits in its queues when it is killed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import otel_rl_contract as contract
import pytest
from otel_rl_ops.query import VictoriaLogs

from tests.pipeline.harness import eventually, private_stack
from tests.reliability.helpers import CONFIG_DIR, flush_ok
from tests.reliability.test_stack_faults import RANKS, Run

REWARD = contract.series(contract.REWARDS.histogram)

STEPS = 6
KEPT_PER_STEP = 4  # top 2 + bottom 2 of 5 offered samples


@pytest.fixture(scope="module")
def gateway_stack(stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    configs = (CONFIG_DIR / "collector.yaml", CONFIG_DIR / "gateway.yaml")
    with private_stack(
        stack_binaries, tmp_path_factory.mktemp("gateway-persistence"), collector_configs=configs
    ) as stack:
        yield stack


def test_gateway_killed_with_backends_down_loses_no_sample_and_keeps_exact_totals(gateway_stack: Any) -> None:
    """Backends down, ranks record, the gateway is SIGKILLed and restarted, then the backends return: every sample
    the gateway accepted is in VictoriaLogs exactly once (its disk queue), and the metric totals are exact because
    the ranks' cumulative points recount everything; the remote-write points queued before the kill are lost."""
    stack = gateway_stack
    run = Run(stack, "gw-kill", top_k=2, bottom_k=2)
    try:
        stack.stop_component("victorialogs")
        stack.stop_component("prometheus")
        for step in range(STEPS):
            for rank in run.ranks:
                rank.step(step)
                rank.rewards(batch := run.rng.normal(0, 1, 10).round(3).tolist())
                run.recorded += batch
                for index in range(5):
                    rank.sample(reward=float(index), episode_id=f"{rank.rank}-{step}-{index}", response=f"s{step}")
        for rank in run.ranks:
            rank.step(STEPS)  # emits the last step's samples
            flush_ok(rank)
        expected = STEPS * RANKS * KEPT_PER_STEP
        eventually(
            lambda: all(rank.stats()["samples_exported"] == STEPS * KEPT_PER_STEP for rank in run.ranks),
            what="every rank's samples accepted by the gateway",
            timeout_s=30,
        )
        time.sleep(2.5)  # two merge ticks: the metrics too are past the gateway's receiver, in its memory
        stack.kill_component("collector")
        queue_files = sorted((stack.state_dir / "data" / "collector" / "queue").rglob("*"))
        assert any(path.is_file() and path.stat().st_size > 0 for path in queue_files), queue_files
        stack.start_component("collector")
        restarted = time.time()
        stack.start_component("victorialogs")
        stack.start_component("prometheus")
        for rank in run.ranks:
            flush_ok(rank)
        logs = VictoriaLogs(stack.victorialogs_url)
        records = eventually(
            lambda: (found := logs.query(f'{{rl.run.id="{run.run_id}"}}')) and len(found) >= expected and found,
            what=f"{expected} samples in VictoriaLogs",
            timeout_s=60,
        )
        time.sleep(2.0)  # a late duplicate would show up here
        records = logs.query(f'{{rl.run.id="{run.run_id}"}}')
        assert len(records) == expected
        assert len({r["rl.episode.id"] for r in records}) == expected
        run.wait_count(len(run.recorded), "after the gateway restart")
        run.assert_buckets(run.recorded)
        # What the in-memory remote-write queue held at the kill never arrives: the series starts after the restart.
        samples = run.prometheus.query(f"{REWARD.count}{run.selector}[10m]")
        assert len(samples) == 1 and min(float(ts) for ts, _ in samples[0]["values"]) >= restarted - 1.0, samples
    finally:
        run.close()
