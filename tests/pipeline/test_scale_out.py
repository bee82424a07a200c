"""Scale-out: agents route by rl.run.id to two gateways; each run is merged exactly by one gateway (pipeline, 5)."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import otel_rl_contract as contract
import pytest
import requests
from otel_rl_ops.query import Prometheus
from otel_rl_ops.stack.config import find_free_ports

from tests.pipeline.harness import REWARD_BOUNDS, RankProcess, eventually, expected_buckets

REWARD = contract.series(contract.REWARDS.histogram)

CONFIGS = Path(__file__).parents[2] / "collector_config"


class Collector:
    """One extra collector process (agent or gateway) on free ports."""

    def __init__(self, binary: Path, configs: list[str], env: dict[str, str], log: Path) -> None:
        grpc, http, health, metrics = find_free_ports(4)
        self.endpoint = f"127.0.0.1:{grpc}"
        self._health = f"http://127.0.0.1:{health}/"
        environment = {
            **os.environ,
            "OTEL_RL_OTLP_GRPC_ENDPOINT": self.endpoint,
            "OTEL_RL_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{http}",
            "OTEL_RL_HEALTH_ENDPOINT": f"127.0.0.1:{health}",
            "OTEL_RL_COLLECTOR_METRICS_HOST": "127.0.0.1",
            "OTEL_RL_COLLECTOR_METRICS_PORT": str(metrics),
            **env,
        }
        argv = [str(binary)] + [f"--config={CONFIGS / name}" for name in configs]
        self._log = log.open("w")
        self.process = subprocess.Popen(argv, env=environment, stdout=self._log, stderr=subprocess.STDOUT)
        eventually(self._healthy, what=f"collector {configs} healthy ({log})", timeout_s=60)

    def _healthy(self) -> bool:
        try:
            return requests.get(self._health, timeout=1).status_code == 200
        except requests.RequestException:
            return False

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)
        self._log.close()


@pytest.fixture(scope="module")
def topology(
    shared_stack: Any, stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Collector]]:
    """Two gateways writing to the shared Prometheus and VictoriaLogs, and two agents in front of them."""
    logs = tmp_path_factory.mktemp("scale-out")
    common = {
        "OTEL_RL_REMOTE_WRITE_URL": shared_stack.prometheus_url + "/api/v1/write",
        "OTEL_RL_VICTORIALOGS_URL": shared_stack.victorialogs_url,
        "OTEL_RL_AGGREGATION_INTERVAL": "1s",
    }
    gateways = [
        Collector(
            stack_binaries.collector,
            ["collector.yaml", "gateway.yaml"],
            {**common, "OTEL_RL_GATEWAY_ID": name},
            logs / f"{name}.log",
        )
        for name in ("gateway-a", "gateway-b")
    ]
    hostnames = "[" + ",".join(g.endpoint for g in gateways) + "]"
    agents = [
        Collector(stack_binaries.collector, ["agent.yaml"], {"OTEL_RL_GATEWAYS": hostnames}, logs / f"agent-{i}.log")
        for i in range(2)
    ]
    yield agents
    for collector in agents + gateways:
        collector.stop()


def test_each_run_is_merged_exactly_by_one_gateway(shared_stack: Any, topology: list[Collector]) -> None:
    """Two runs at once, each with 4 ranks spread over 2 agents: every run's aggregate is exact and single-gateway."""
    agents = topology
    prometheus = Prometheus(shared_stack.prometheus_url)
    rng = np.random.default_rng(17)
    runs = {f"scale-{name}-{uuid.uuid4().hex[:6]}": [] for name in ("a", "b")}  # type: dict[str, list[float]]
    ranks = [
        RankProcess(endpoint=f"http://{agents[rank % 2].endpoint}", run_id=run_id, rank=rank, world_size=4)
        for run_id in runs
        for rank in range(4)
    ]
    try:
        for _ in range(3):
            for rank in ranks:
                values = rng.normal(0, 1, 30).round(3).tolist()
                rank.rewards(values)
                runs[rank.run_id].extend(values)
            for rank in ranks:
                assert rank.flush()
        for run_id, recorded in runs.items():
            selector = f'{{rl_run_id="{run_id}",rl_reward_fn="total"}}'
            eventually(
                lambda: prometheus.value(f"sum({REWARD.count}{selector})") == len(recorded),
                what=f"run {run_id} merged",
            )
            assert prometheus.buckets(REWARD, selector) == expected_buckets(recorded, REWARD_BOUNDS)
            gateways = {s["metric"].get("otel_rl_gateway") for s in prometheus.query(f"{REWARD.count}{selector}")}
            assert len(gateways) == 1 and gateways <= {"gateway-a", "gateway-b"}
    finally:
        for rank in ranks:
            rank.kill()
