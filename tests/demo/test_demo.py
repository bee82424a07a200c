"""The demo end to end: a short run through the real stack, its summary checked against what the ranks recorded."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

STEPS, RANKS = 60, 4


def nearest_rank(q: float, values: list[float]) -> float:
    """The recorded value whose rank Prometheus's histogram_quantile looks for: the ceil(q * n)-th smallest."""
    return sorted(values)[max(math.ceil(q * len(values)) - 1, 0)]


@pytest.fixture(scope="module")
def demo_run(
    shared_stack: Any, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("demo")
    run_id = "demo-test"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "demo",
            "--steps",
            str(STEPS),
            "--ranks",
            str(RANKS),
            "--step-seconds",
            "0.1",
            "--endpoint",
            shared_stack.otlp_grpc_endpoint,
            "--prometheus-url",
            shared_stack.prometheus_url,
            "--victorialogs-url",
            shared_stack.victorialogs_url,
            "--jaeger-url",
            shared_stack.jaeger_url,
            "--run-id",
            run_id,
            "--out",
            str(out),
        ],
        check=True,
        timeout=600,
        cwd=Path(__file__).parents[2],
    )
    assert (out / run_id / "report.html").stat().st_size > 10_000  # the rendered dashboard, a PNG inside
    summary = json.loads((out / run_id / "summary.json").read_text())
    records = [
        json.loads(line) for path in sorted((out / run_id / "records").glob("rank-*.jsonl")) for line in path.open()
    ]
    return summary, records


def test_summary_reward_matches_what_ranks_recorded(demo_run: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    """Rollout count and mean reward (overall and per function) in the summary equal the ranks' own records."""
    summary, records = demo_run
    assert len(records) == STEPS * RANKS
    totals = [r for record in records for r in record["rewards"]["total"]]
    assert summary["reward"]["overall"]["count"] == len(totals)
    assert summary["reward"]["overall"]["mean"] == pytest.approx(sum(totals) / len(totals), rel=1e-9)
    for fn in ("correctness", "format"):
        values = [r for record in records for r in record["rewards"][fn]]
        assert summary["reward"]["by_fn"][fn]["mean"] == pytest.approx(sum(values) / len(values), rel=1e-9)


def test_summary_staleness_matches_what_ranks_recorded(demo_run: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    """Per-token staleness count, sum, min and max are exact; p50 and p99, estimated from the native histogram
    (buckets 2^(1/32) wide), rounded (staleness is an integer) and clamped to [min, max], equal the value of that
    rank: small integers each have a bucket narrower than 1/2."""
    summary, records = demo_run
    staleness = [s for record in records for s in record["staleness"]]
    assert summary["staleness"]["count"] == len(staleness)
    assert summary["staleness"]["sum"] == sum(staleness)
    assert summary["staleness"]["max"] == max(staleness) and summary["staleness"]["min"] == min(staleness)
    for q in (0.5, 0.99):
        estimate, exact = summary["staleness"][f"p{round(q * 100)}"], nearest_rank(q, staleness)
        assert max(staleness) <= 22 and estimate == exact, (q, estimate, exact)


def test_summary_health_matches_what_ranks_recorded(demo_run: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    """The demo records every health signal: group outcomes, zero-variance groups and advantage signs in the
    summary equal the ranks' own records; the lagged generator shows as an importance ratio that is not 1
    everywhere; every rank reported and the run finished cleanly."""
    summary, records = demo_run
    health = summary["health"]
    solved = [n for record in records for n in record["solved_per_group"]]
    group_size = len(records[0]["rewards"]["total"]) // len(records[0]["solved_per_group"])
    assert health["groups"] == {
        "none": sum(n == 0 for n in solved),
        "some": sum(0 < n < group_size for n in solved),
        "all": sum(n == group_size for n in solved),
        "zero_variance": sum(record["zero_variance_groups"] for record in records),
    }
    advantages = [a for record in records for a in record["advantages"]]
    assert health["advantage_signs"] == {
        "positive": sum(a > 0 for a in advantages),
        "negative": sum(a < 0 for a in advantages),
        "zero": sum(a == 0 for a in advantages),
    }
    ratio = health["importance_ratio"]
    assert ratio["tokens"] == summary["staleness"]["count"]
    assert ratio["p99"] != ratio["p50"] and 0 < ratio["ess_fraction"] <= 1
    assert health["mismatch_kl"]["k3"] >= 0 and health["entropy_mean"] > 0
    assert health["ranks"] == {"up": RANKS, "expected": RANKS, "finished": 1}
    assert (
        set(health["reward_by_dataset"]) == {"carry", "no_carry"} and None not in health["reward_by_dataset"].values()
    )


def test_summary_samples_are_the_global_extremes(demo_run: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    """The top and bottom samples read from VictoriaLogs carry the highest and lowest reward of the run."""
    summary, records = demo_run
    totals = [r for record in records for r in record["rewards"]["total"]]
    top, bottom = summary["samples"]["top"], summary["samples"]["bottom"]
    assert float(top[0]["rl.reward"]) == max(totals) and float(bottom[0]["rl.reward"]) == min(totals)
    assert all(sample["prompt"].endswith("=") and "_msg" in sample for sample in top + bottom)


def test_the_policy_learns(demo_run: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    """Mean reward late in the run (from Prometheus) is above the early mean, as in the ranks' records."""
    summary, records = demo_run
    assert summary["reward"]["late"]["mean"] > summary["reward"]["early"]["mean"]
    first = [r for record in records if record["step"] < STEPS // 4 for r in record["rewards"]["total"]]
    last = [r for record in records if record["step"] >= STEPS - STEPS // 4 for r in record["rewards"]["total"]]
    assert sum(last) / len(last) > sum(first) / len(first) + 0.2


def test_summary_time_split_and_slowest_step_match_the_ranks(
    demo_run: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    """The time split counts every phase span of every rank and step (spanmetrics through the collector), its shares
    of the ranks' time are fractions that the top-level phases fill at most once; the slowest phase is the one with
    the longest mean span; tokens are the ranks' totals and MFU their rate times the stated FLOPs; the slowest step
    named is the one rank 0 took longest over (its root span runs from one step() to the next), with its trace id."""
    from demo.job import PEAK_FLOPS, PHASES, flops_per_token
    from demo.policy import Policy
    from otel_rl._state.phases import step_trace

    summary, records = demo_run
    performance = summary["performance"]
    split = performance["split"]
    assert sorted(split) == sorted(PHASES)
    assert {phase: stats["spans"] for phase, stats in split.items()} == dict.fromkeys(PHASES, STEPS * RANKS)
    assert all(0 < stats["share"] < 1 for stats in split.values())
    top_level = [phase for phase in PHASES if phase != "allreduce"]
    assert sum(split[phase]["share"] for phase in top_level) > 0.5
    # The shares' wall time comes from Prometheus's sample times (seconds off the loop's): the top-level phases fill
    # at most once the ranks' own loop time, from each rank's first step() to the end of its last step's phases.
    loops = [records[rank * STEPS : (rank + 1) * STEPS] for rank in range(RANKS)]
    loop_seconds = sum((loop[-1]["ended_ns"] - loop[0]["stepped_ns"][0]) / 1e9 for loop in loops)
    assert sum(split[phase]["seconds"] for phase in top_level) <= loop_seconds
    assert performance["slowest_phase"] == max(split, key=lambda phase: split[phase]["mean"])
    tokens = sum(record["tokens"] for record in records)
    assert performance["tokens"]["trained"] == performance["tokens"]["generated"] == tokens
    assert performance["tokens"]["mfu"] == pytest.approx(
        performance["tokens"]["trained_per_s"] * flops_per_token(Policy()) / (RANKS * PEAK_FLOPS), rel=1e-12
    )
    # Each step's root span starts inside step(): between the times taken before and after that call.
    rank0 = [record["stepped_ns"] for record in records[:STEPS]]  # rank-0.jsonl comes first
    bounds = {step: ((b[0] - a[1]) / 1e9, (b[1] - a[0]) / 1e9) for step, (a, b) in enumerate(itertools.pairwise(rank0))}
    step = performance["slowest_step"]
    assert step["trace_id"] == f"{step_trace('demo-test', step['step'])[0]:032x}"
    if step["step"] in bounds:  # the last step's end is not in the records
        shortest, longest = bounds[step["step"]]
        assert shortest - 1e-3 <= step["seconds"] <= longest + 1e-3
    assert step["seconds"] >= max(shortest for shortest, _ in bounds.values()) - 1e-3
