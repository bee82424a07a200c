"""The SLURM recipe on a real single-node SLURM (Debian's slurmctld, slurmd and munge as plain processes:
tests/deploy/slurm.py), run as a team without a checkout runs it: the recipe and ``otel-rl agent`` from the installed
tooling (``otel-rl-ops``'s package data and command), the ranks from the installed trainer library, both built from
this repository as users install them (tests/packaging/installs.py). ``sbatch otel-rl.sbatch`` starts one collector
agent on the node and two ranks that export to it with the job's id as run id; a gateway (collector.yaml +
gateway.yaml) merges them into Prometheus.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import otel_rl_contract as contract
import pytest
from otel_rl_ops.query import Prometheus
from otel_rl_ops.stack.config import find_free_ports
from otel_rl_ops.stack.env import otel_rl_home

from tests.deploy import slurm_rank
from tests.deploy.slurm import LocalSlurm, local_slurm
from tests.packaging.installs import Installs
from tests.pipeline.harness import eventually
from tests.pipeline.test_scale_out import Collector

REWARD = contract.series(contract.REWARDS.histogram)
RANKS = 2
GATEWAY_ID = "slurm-gateway"

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    with local_slurm(otel_rl_home(), tmp_path_factory.mktemp("slurm")) as running:
        yield running


@pytest.fixture(scope="module")
def gateway(shared_stack: Any, stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Collector]:
    """One gateway outside the job, writing to the shared stack's Prometheus and VictoriaLogs."""
    env = {
        "OTEL_RL_REMOTE_WRITE_URL": shared_stack.prometheus_url + "/api/v1/write",
        "OTEL_RL_VICTORIALOGS_URL": shared_stack.victorialogs_url,
        "OTEL_RL_AGGREGATION_INTERVAL": "1s",
        "OTEL_RL_GATEWAY_ID": GATEWAY_ID,
        "OTEL_RL_QUEUE_DIR": str(tmp_path_factory.mktemp("gateway-queue")),
    }
    log = tmp_path_factory.mktemp("gateway") / "gateway.log"
    collector = Collector(stack_binaries.collector, ["collector.yaml", "gateway.yaml"], env, log)
    yield collector
    collector.stop()


def test_the_sbatch_recipe_runs_an_agent_per_node_and_the_ranks_through_it(
    cluster: LocalSlurm, gateway: Collector, shared_stack: Any, installed: Installs, tmp_path: Path
) -> None:
    """Each rank exports to its node's agent with run id = SLURM_JOB_ID; the run arrives merged and exact."""
    data = subprocess.run(
        [str(installed.tooling / "otel-rl"), "stack", "data"], capture_output=True, text=True, check=True
    ).stdout.strip()
    recipe = Path(data) / "deploy" / "slurm" / "otel-rl.sbatch"
    script = shutil.copy(slurm_rank.__file__, installed.work / "slurm_rank.py")  # the user's training script
    grpc, http, health, metrics = find_free_ports(4)
    env = {
        "OTEL_RL": str(installed.tooling / "otel-rl"),
        "OTEL_RL_GATEWAYS": f"[{gateway.endpoint}]",
        "OTEL_RL_AGENT_OPTIONS": (
            f"--grpc-port {grpc} --http-port {http} --health-port {health} --metrics-port {metrics}"
        ),
        "OTEL_METRIC_EXPORT_INTERVAL": "1000",
        "OTEL_SERVICE_NAME": "slurm-test",
    }
    output = tmp_path / "job.out"
    submitted = cluster.command(
        "sbatch",
        "--parsable",
        "--wait",
        f"--output={output}",
        "--nodes=1",
        f"--ntasks-per-node={RANKS}",
        f"--chdir={installed.work}",
        recipe,
        installed.trainer / "python",
        script,
        tmp_path,
        env=env,
    )
    job_log = output.read_text() if output.exists() else ""
    assert submitted.returncode == 0, f"{submitted.stdout}{submitted.stderr}\n{job_log}"
    job_id = submitted.stdout.strip().split(";")[0]

    seen = [json.loads((tmp_path / f"rank-{rank}.json").read_text()) for rank in range(RANKS)]
    assert [rank["SLURM_PROCID"] for rank in seen] == [str(rank) for rank in range(RANKS)]
    for rank in seen:
        assert rank["SLURM_JOB_ID"] == job_id and rank["OTEL_RL_RUN_ID"] == job_id
        assert rank["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"http://127.0.0.1:{grpc}"
        assert rank["SLURM_NTASKS"] == str(RANKS) and rank["SLURMD_NODENAME"] == cluster.node
    assert job_log.count("Everything is ready") == 1, job_log  # one agent on the one node
    assert job_log.count("Shutdown complete.") == 1, job_log  # stopped by SIGTERM after the ranks, not killed

    recorded = [value for rank in range(RANKS) for value in slurm_rank.rewards(rank)]
    prometheus = Prometheus(shared_stack.prometheus_url)
    selector = f'{{rl_run_id="{job_id}",rl_reward_fn="total"}}'
    eventually(
        lambda: prometheus.value(f"histogram_count({REWARD.name}{selector})") == len(recorded), what="the job merged"
    )
    assert prometheus.value(f"histogram_sum({REWARD.name}{selector})") == sum(recorded)
    gateways = {series["metric"].get("otel_rl_gateway") for series in prometheus.query(f"{REWARD.name}{selector}")}
    assert gateways == {GATEWAY_ID}
