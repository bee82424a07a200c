"""Sample records from every rank reach VictoriaLogs; LogsQL finds a step's global top-k and bottom-k (pipeline, 4)."""

from __future__ import annotations

import uuid
from typing import Any

import otel_rl_contract as contract
import pytest
from otel_rl_ops.query import Prometheus, VictoriaLogs

from tests.pipeline.harness import RankProcess, eventually

REWARD_EXEMPLARS = contract.exemplar_series(contract.REWARDS.histogram)

RANKS = 4


def test_samples_from_every_rank_give_the_global_extremes(shared_stack: Any) -> None:
    """Each rank keeps its top-2/bottom-2 of step 5; across ranks the log store returns the global ones."""
    run_id = f"samples-{uuid.uuid4().hex[:8]}"
    ranks = [
        RankProcess(endpoint=shared_stack.otlp_grpc_endpoint, run_id=run_id, rank=r, world_size=RANKS)
        for r in range(RANKS)
    ]
    rewards: dict[str, float] = {}
    try:
        for rank in ranks:
            rank.step(5)
            for index in range(10):
                reward = round((rank.rank * 10 + index) * 0.37 % 3.1 - 1.2, 3)
                episode = f"r{rank.rank}-e{index}"
                rewards[episode] = reward
                rank.sample(
                    reward=reward,
                    episode_id=episode,
                    policy_version=7,
                    prompt=f"prompt {episode}",
                    response=f"response {episode} ✓",
                    reward_breakdown={"correctness": reward},
                    staleness=1,
                )
            rank.step(6)
            assert rank.flush()
        query = f'{{rl.run.id="{run_id}"}} rl.step:=5'
        logs = VictoriaLogs(shared_stack.victorialogs_url)
        records = eventually(
            lambda: len(logs.query(query)) == 4 * RANKS and logs.query(query), what="16 sample records"
        )
        assert {r["rl.rank"] for r in records} == {str(rank) for rank in range(RANKS)}
        for record in records:
            episode = record["rl.episode.id"]
            assert float(record["rl.reward"]) == rewards[episode] == float(record["rl.reward.correctness"])
            assert record["prompt"] == f"prompt {episode}" and record["_msg"] == f"response {episode} ✓"
            assert record["rl.sample.selection"] in ("top", "bottom") and record["rl.policy.version"] == "7"
            assert record["_stream"] == f'{{rl.run.id="{run_id}",service.name="otel-rl-test"}}'
        ranked = sorted(rewards.values())
        top = logs.query(f"{query} | sort by (rl.reward desc) | limit 2")
        bottom = logs.query(f"{query} | sort by (rl.reward) | limit 2")
        assert [float(r["rl.reward"]) for r in top] == ranked[::-1][:2]
        assert [float(r["rl.reward"]) for r in bottom] == ranked[:2]
    finally:
        for rank in ranks:
            rank.kill()


@pytest.mark.parametrize(
    ("histogram", "series"), [("exponential", REWARD_EXEMPLARS.name), ("explicit", REWARD_EXEMPLARS.bucket)]
)
def test_an_exemplar_leads_to_the_sample_record(shared_stack: Any, histogram: str, series: str) -> None:
    """A reward exemplar read from Prometheus's exemplar API (of the native histogram, or of the classic buckets)
    names an episode and a step trace that the log store returns as that sample's record, with the same reward."""
    import time

    run_id = f"exemplar-{histogram}-{uuid.uuid4().hex[:8]}"
    ranks = [
        RankProcess(
            endpoint=shared_stack.otlp_grpc_endpoint, run_id=run_id, rank=r, world_size=RANKS, histogram=histogram
        )
        for r in range(RANKS)
    ]
    try:
        for rank in ranks:
            rank.step(1)
            values = [rank.rank + index / 10 for index in range(5)]
            rank.rewards(values)
            for index, reward in enumerate(values):
                rank.sample(reward=reward, episode_id=f"r{rank.rank}-e{index}", response=f"answer {index}")
            rank.step(2)
            assert rank.flush()

        prometheus = Prometheus(shared_stack.prometheus_url)

        def exemplars() -> list[dict[str, Any]]:
            query, now = f'{series}{{rl_run_id="{run_id}"}}', time.time()
            return [e for series in prometheus.exemplars(query, now - 600, now + 60) for e in series["exemplars"]]

        def of_every_rank() -> list[dict[str, Any]] | None:
            """The exemplars once every rank has one (the ranks' flushes may fall in two collector intervals)."""
            found = exemplars()
            every = {e["labels"]["rl.episode.id"][:2] for e in found} == {f"r{rank}" for rank in range(RANKS)}
            return found if every else None

        found = eventually(of_every_rank, what="reward exemplars of every rank")
        for exemplar in found:
            labels = exemplar["labels"]
            (record,) = logs_for(shared_stack, f'{{rl.run.id="{run_id}"}} rl.episode.id:="{labels["rl.episode.id"]}"')
            assert float(record["rl.reward"]) == pytest.approx(float(exemplar["value"]), rel=1e-9)
            assert record["_msg"] == f"answer {labels['rl.episode.id'][-1]}"
            assert (record["trace_id"], record["span_id"]) == (labels["trace_id"], labels["span_id"])
    finally:
        for rank in ranks:
            rank.kill()


def logs_for(stack: Any, query: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = eventually(
        lambda: VictoriaLogs(stack.victorialogs_url).query(query), what=f"log records for {query}"
    )
    return records
