"""A distributed TSDB behind the same remote-write contract (StackConfig.tsdb_cluster: two Thanos receivers in one
hashring and a Thanos querier instead of Prometheus), fed by the scale-out topology: ranks -> 2 agents -> 2 gateways
-> Thanos (metrics) and VictoriaLogs (samples) (issue 13; docs/scale.md). The receiver that holds a run's
reward histogram is SIGKILLed mid-run and restarted on the same ports and data folder.
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import otel_rl_contract as contract
import pytest
from otel_rl_ops.query import Prometheus, QueryError, VictoriaLogs
from otel_rl_ops.stack import versions
from otel_rl_ops.stack.env import otel_rl_home
from otel_rl_ops.stack.gotools import ensure_go_binary

from tests.cluster.workload import record_steps
from tests.pipeline.harness import RankProcess, eventually, private_stack
from tests.pipeline.test_scale_out import Collector

REWARD = contract.series(contract.REWARDS.histogram)
REWARD_MAX = contract.series(contract.REWARDS.maximum)
REWARD_MIN = contract.series(contract.REWARDS.minimum)

RANKS = 8
KEPT = 4  # top 2 + bottom 2 of 5 offered samples per step and rank
EXTREME = 79 / 8  # the run's max and -min, recorded in the first step
DOWN_S = 12.0  # how long the receiver stays down


@pytest.fixture(scope="module")
def tsdb_cluster(
    stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Any, list[Collector], list[Path]]]:
    """A private stack in the TSDB cluster profile, two gateways remote-writing to its first receiver and two
    agents in front of them; also yields the gateways' log files."""
    binaries = dataclasses.replace(stack_binaries, thanos=ensure_go_binary(versions.THANOS, home=otel_rl_home()))
    state = tmp_path_factory.mktemp("tsdb-cluster")
    with private_stack(binaries, state / "stack", tsdb_cluster=True) as stack:
        common = {
            "OTEL_RL_REMOTE_WRITE_URL": stack.collector_environment()["OTEL_RL_REMOTE_WRITE_URL"],
            "OTEL_RL_VICTORIALOGS_URL": stack.victorialogs_url,
            "OTEL_RL_AGGREGATION_INTERVAL": "1s",
            "OTEL_RL_QUEUE_DIR": str(state / "queues"),
        }
        logs = [state / f"{name}.log" for name in ("gateway-a", "gateway-b")]
        gateways = [
            Collector(
                binaries.collector, ["collector.yaml", "gateway.yaml"], {**common, "OTEL_RL_GATEWAY_ID": log.stem}, log
            )
            for log in logs
        ]
        hostnames = "[" + ",".join(g.endpoint for g in gateways) + "]"
        agents = [
            Collector(binaries.collector, ["agent.yaml"], {"OTEL_RL_GATEWAYS": hostnames}, state / f"agent-{i}.log")
            for i in range(2)
        ]
        try:
            yield stack, agents, logs
        finally:
            for collector in agents + gateways:
                collector.stop()


def _remote_write_log(logs: list[Path]) -> dict[str, int]:
    """Counts of the gateways' remote-write log lines: attempts answered with an HTTP error (connection errors are
    not logged per attempt), and requests dropped with the data points in them."""
    lines = [line for log in logs for line in log.read_text(encoding="utf-8").splitlines()]
    exporter = [line for line in lines if "prometheus_remote_write/aggregated" in line]
    dropped = [match for line in exporter if (match := re.search(r'Dropping data.*"dropped_items": (\d+)', line))]
    return {
        "http_errors": sum("failed to send WriteRequest" in line for line in exporter),
        "dropped_requests": len(dropped),
        "dropped_points": sum(int(match.group(1)) for match in dropped),
    }


def _answers(prometheus: Prometheus, promql: str) -> bool:
    """Whether the querier answers ``promql`` at all (it fails while a receiver is unreachable)."""
    try:
        prometheus.query(promql)
    except QueryError:
        return False
    return True


def test_two_runs_through_thanos_with_a_receiver_restart_are_exact(
    tsdb_cluster: tuple[Any, list[Collector], list[Path]],
) -> None:
    """2 runs x 8 ranks over 2 agents and 2 gateways into 2 Thanos receivers: while the receiver holding a run's
    reward histogram is down, queries through the querier fail (no partial responses); after it returns on the same
    ports and data folder, every run's native histogram count and sum and its max/min gauges are exact through the
    querier, every sample is in VictoriaLogs once, and the gateways dropped no remote-write request (they retry
    through the outage; docs/scale.md)."""
    stack, agents, logs = tsdb_cluster
    run_ids = [f"tsdb-{name}-{uuid.uuid4().hex[:6]}" for name in ("a", "b")]
    started = time.monotonic()
    with ThreadPoolExecutor(2 * RANKS) as pool:
        ranks = list(
            pool.map(
                lambda spec: RankProcess(
                    endpoint=f"http://{agents[spec[1] % 2].endpoint}",
                    run_id=spec[0],
                    rank=spec[1],
                    world_size=RANKS,
                    export_interval_s=0.2,
                    top_k=2,
                    bottom_k=2,
                    histogram="exponential",
                ),
                [(run_id, rank) for run_id in run_ids for rank in range(RANKS)],
            )
        )
    ranks_started_s = time.monotonic() - started
    rng = np.random.default_rng(31)
    recorded: dict[str, list[float]] = {run_id: [] for run_id in run_ids}
    prometheus = Prometheus(stack.prometheus_url)
    logs_client = VictoriaLogs(stack.victorialogs_url)

    def rewards(rank: RankProcess, step: int) -> list[float]:
        # Multiples of 1/8: every partial sum is exact in float64, so sums compare with ==.
        values: list[float] = (rng.integers(-60, 60, 20) / 8).tolist()
        if step == 0 and rank.rank == 0:
            values[:2] = [EXTREME, -EXTREME]
        return values

    def steps(first: int, count: int) -> None:
        record_steps(ranks, first, count, rewards, recorded)

    def selector(run_id: str) -> str:
        return f'{{rl_run_id="{run_id}",rl_reward_fn="total"}}'

    def counts_exact() -> bool:
        try:
            return all(
                prometheus.value(f"sum(histogram_count({REWARD.name}{selector(run_id)}))") == len(values)
                for run_id, values in recorded.items()
            )
        except QueryError:  # the querier reconnects to a restarted receiver
            return False

    victim: Any = None
    try:
        steps(0, 3)
        eventually(counts_exact, what="phase A exact through thanos-query", timeout_s=60)
        holders = {s["metric"]["receive_node"] for s in prometheus.query(f"{REWARD.name}{selector(run_ids[0])}")}
        assert len(holders) == 1, holders
        victim = holders.pop()
        per_node = prometheus.by_label(
            f'count by (receive_node) ({{rl_run_id=~"{"|".join(run_ids)}",receive_node!=""}})', "receive_node"
        )
        log_before = _remote_write_log(logs)
        probe = f"sum(histogram_count({REWARD.name}{selector(run_ids[0])}))"
        stack.kill_component(victim)
        killed = time.monotonic()
        steps(4, 3)
        with pytest.raises(QueryError):
            prometheus.value(probe)
        time.sleep(max(0.0, DOWN_S - (time.monotonic() - killed)))
        stack.start_component(victim)
        restarted = time.monotonic()
        down_s = restarted - killed
        eventually(lambda: _answers(prometheus, probe), what="the querier answers again", timeout_s=60)
        answers_after_s = time.monotonic() - restarted
        steps(8, 2)
        eventually(counts_exact, what="counts exact after the restart", timeout_s=120)
        exact_after_s = time.monotonic() - restarted
        log_down = {key: value - log_before[key] for key, value in _remote_write_log(logs).items()}
        for run_id, values in recorded.items():
            series = selector(run_id)
            assert prometheus.value(f"sum(histogram_sum({REWARD.name}{series}))") == sum(values)
            assert prometheus.value(f"max(max_over_time({REWARD_MAX.name}{series}[10m]))") == max(values) == EXTREME
            assert prometheus.value(f"min(min_over_time({REWARD_MIN.name}{series}[10m]))") == min(values) == -EXTREME
        expected = 8 * 2 * RANKS * KEPT
        query = " or ".join(f'rl.run.id:="{run_id}"' for run_id in run_ids)

        def stored() -> int:
            found = logs_client.query(f"{query} | stats count() as n")
            return int(found[0]["n"]) if found else 0

        eventually(lambda: stored() >= expected, what=f"{expected} samples in VictoriaLogs", timeout_s=60)
        assert stored() == expected
        # The gateways retried every request through the outage (collector.yaml: the export call's timeout above
        # retry_on_failure.max_elapsed_time); at the exporter's default 5 s timeout they dropped some (docs/scale.md).
        assert _remote_write_log(logs)["dropped_requests"] == 0
        print(
            f"\n{2 * RANKS} ranks started in {ranks_started_s:.1f} s; series per receiver {per_node}; killed {victim} "
            f"(holds {run_ids[0]}'s {REWARD.name}) for {down_s:.1f} s; gateways while down {log_down}; querier answers "
            f"{answers_after_s:.1f} s and counts exact {exact_after_s:.1f} s after the restart (2 steps in between); "
            f"test {time.monotonic() - started:.1f} s"
        )
    finally:
        for rank in ranks:
            rank.kill()
        if victim is not None and stack.pid(victim) is None:
            stack.start_component(victim)


def test_tsdb_cluster_profile_components(tsdb_cluster: tuple[Any, list[Collector], list[Path]]) -> None:
    """The TSDB cluster profile runs the receivers before the querier and no Prometheus, all healthy, records the
    profile in stack.json (an attached Stack sees the same components), and its query URL is the querier's."""
    stack, _, _ = tsdb_cluster
    assert stack.component_names == (
        "alertmanager",
        "victorialogs",
        "jaeger",
        "thanos-receive-0",
        "thanos-receive-1",
        "thanos-store",
        "thanos-query",
        "thanos-rule",
        "collector",
    )
    assert all(status.healthy for status in stack.status().values())
    from otel_rl_ops.stack.services import Stack

    assert Stack.attach(Path(stack.state_dir)).component_names == stack.component_names
    assert stack.prometheus_url.endswith(f":{stack.config.ports.thanos_query}")
    assert Prometheus(stack.prometheus_url).value("vector(1)") == 1
