"""The demo end to end: a short run through the real stack, its summary checked against what the ranks recorded."""

from __future__ import annotations

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
def demo_run(shared_stack: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("demo")
    run_id = "demo-test"
    subprocess.run(
        [
            sys.executable, "-m", "demo", "--steps", str(STEPS), "--ranks", str(RANKS), "--step-seconds", "0.1",
            "--endpoint", shared_stack.otlp_grpc_endpoint, "--prometheus-url", shared_stack.prometheus_url,
            "--victorialogs-url", shared_stack.victorialogs_url, "--run-id", run_id, "--out", str(out),
        ],  # fmt: skip
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
    assert set(health["reward_by_dataset"]) == {"carry", "no_carry"} and None not in health["reward_by_dataset"].values()


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
