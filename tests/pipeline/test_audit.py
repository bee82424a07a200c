"""The audit's inputs through the real pipeline: the joint statistics of ``record_rollouts`` (``rl.joint``), the
stale-drop distributions and the cost, from four rank processes through the real collector into Prometheus, against a
float64 reference; then ``otel-rl status`` in both forms against the live run.

Every value is a multiple of 1/4 and every length an integer, so every sum the ranks and the collector add is exact
in float64 whatever the order: the moments are compared with ``==``; the correlation and the variance shares, which
Prometheus computes from them, to 1e-12.
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
from otel_rl_ops import cli, promql
from otel_rl_ops.alerts.client import Alertmanager
from otel_rl_ops.query import Prometheus
from otel_rl_ops.report.summary import Sources
from otel_rl_ops.status import latest_run, render, status

from tests.pipeline.harness import RankProcess, eventually

DROPPED_RESPONSE_LENGTH = contract.series(contract.DROPPED_LENGTHS.histogram)
DROPPED_STALENESS = contract.series(contract.DROPPED_STALENESS.histogram)
GROUPS = contract.series(contract.GROUPS)
JOINT = contract.series(contract.JOINT)
REWARD_GROUND_TRUTH = contract.series(contract.GROUND_TRUTH)
STALENESS_DROPPED = contract.series(contract.STALENESS_DROPPED)
VALUES_REJECTED = contract.series(contract.VALUES_REJECTED)

pytestmark = pytest.mark.stack

RANKS = 4
STEPS = 3
ROLLOUTS = 32
GPUS_PER_RANK = 0.5
PRICE = 3.0


def _step(rng: np.random.Generator) -> dict[str, Any]:
    """One rank's step: lengths, correctness (0/1) and format (quarters) rewards, their total; one NaN total, which
    leaves its rollout out of every pair (``unpaired``)."""
    lengths = rng.integers(1, 200, ROLLOUTS)
    correctness = (rng.random(ROLLOUTS) < 0.4).astype(float)
    fmt = rng.integers(-4, 5, ROLLOUTS) / 4 + lengths / 64  # partly paid by length
    fmt = np.round(fmt * 4) / 4
    total = correctness + fmt
    total[0] = np.nan
    return {"response_lengths": lengths, "correctness": correctness, "format": fmt, "rewards": total}


@pytest.fixture(scope="module")
def audited_run(shared_stack: Any) -> Iterator[tuple[str, list[dict[str, Any]], float, float]]:
    """Four ranks record ``STEPS`` steps of rollouts with a reward breakdown, stale drops and samples; yields the run
    id, every rank-step's values, the time before the first rank started and the sum of the ranks' lifetimes up to
    their last flush at least (each counted from when it answered ready, after its telemetry began)."""
    run_id = f"audit-{uuid.uuid4().hex[:8]}"
    rng = np.random.default_rng(7)
    born = time.time()
    ranks, ready = [], []
    for r in range(RANKS):
        ranks.append(
            RankProcess(
                endpoint=shared_stack.otlp_grpc_endpoint,
                run_id=run_id,
                rank=r,
                world_size=RANKS,
                gpus_per_rank=GPUS_PER_RANK,
                gpu_hour_price=PRICE,
            )
        )
        ready.append(time.time())
    steps: list[dict[str, Any]] = []
    for step in range(STEPS):
        for rank in ranks:
            rank.step(step)
            values = _step(rng)
            steps.append(values)
            rank.rollouts(
                response_lengths=values["response_lengths"].tolist(),
                rewards=values["rewards"].tolist(),
                reward_breakdown={fn: values[fn].tolist() for fn in ("correctness", "format")},
            )
            rank.rewards(values["rewards"].tolist())
            rank.rewards(values["correctness"].tolist(), fn="correctness")
            rank.staleness_drops(None, response_lengths=[400.0, 600.0], staleness=[9.0, 12.0])
            for reward in values["rewards"][1:6]:
                rank.sample(prompt=f"1+{step}=", response="2", reward=float(reward), episode_id=uuid.uuid4().hex)
    for rank in ranks:
        rank.step(STEPS)
        assert rank.flush()
    flushed = time.time()
    yield run_id, steps, born, sum(flushed - started for started in ready)
    for rank in ranks:
        rank.shutdown()


def _reference(steps: list[dict[str, Any]], x: str) -> dict[str, float]:
    """The ``rl.joint`` sums of ``x`` with the total over every rank-step, in float64."""
    xs = np.concatenate([s[x] for s in steps]).astype(float)
    ys = np.concatenate([s["rewards"] for s in steps])
    keep = np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    return {
        "n": float(len(xs)),
        "x.positive": float(np.clip(xs, 0, None).sum()),
        "x.negative": float(np.clip(-xs, 0, None).sum()),
        "y.positive": float(np.clip(ys, 0, None).sum()),
        "y.negative": float(np.clip(-ys, 0, None).sum()),
        "xx": float((xs * xs).sum()),
        "yy": float((ys * ys).sum()),
        "xy.positive": float(np.clip(xs * ys, 0, None).sum()),
        "xy.negative": float(np.clip(-xs * ys, 0, None).sum()),
    }


@pytest.mark.parametrize(
    ("x", "field"),
    [("response_length", "response_lengths"), ("reward.correctness", "correctness"), ("reward.format", "format")],
)
def test_joint_sums_are_exact_over_ranks(
    shared_stack: Any, audited_run: tuple[str, list[dict[str, Any]], float, float], x: str, field: str
) -> None:
    """Each ``rl_joint_total`` sum is the float64 sum over all ranks' rollouts that have both values, exactly; the
    correlation and (for reward functions) the variance share Prometheus computes from them match numpy's."""
    run_id, steps, _, _ = audited_run
    prometheus = Prometheus(shared_stack.prometheus_url)
    selector = promql.matchers(rl_run_id=run_id, rl_rank="", rl_joint_x=x)
    expected = _reference(steps, field)
    query = f"sum by (rl_joint_moment) ({JOINT.name}{{{selector}}})"
    found = eventually(
        lambda: (lambda got: got if got.get("n") == expected["n"] else None)(
            prometheus.by_label(query, "rl_joint_moment")
        ),
        what=f"{JOINT.name} of {x} with n = {expected['n']}",
    )
    assert found == expected
    xs = np.concatenate([s[field] for s in steps]).astype(float)
    ys = np.concatenate([s["rewards"] for s in steps])
    keep = np.isfinite(ys)
    correlation = prometheus.value(promql.correlation(selector, window=None))
    assert correlation == pytest.approx(np.corrcoef(xs[keep], ys[keep])[0, 1], rel=1e-12)
    if x.startswith("reward."):
        share = prometheus.value(
            promql.variance_share(promql.matchers(rl_run_id=run_id, rl_rank="", rl_joint_x=x), window=None)
        )
        assert share == pytest.approx(np.cov(xs[keep], ys[keep], bias=True)[0, 1] / ys[keep].var(), rel=1e-12)


def test_variance_shares_of_functions_that_add_up_sum_to_one(
    shared_stack: Any, audited_run: tuple[str, list[dict[str, Any]], float, float]
) -> None:
    """total = correctness + format, so their shares of the total's variance add up to 1."""
    run_id, _, _, _ = audited_run
    prometheus = Prometheus(shared_stack.prometheus_url)
    shares = prometheus.by_label(
        promql.variance_share(promql.matchers(rl_run_id=run_id, rl_rank=""), window=None), "rl_joint_x"
    )
    assert set(shares) == {"reward.correctness", "reward.format"}
    assert sum(shares.values()) == pytest.approx(1.0, rel=1e-12)


def test_unpaired_rollouts_and_stale_drops_are_counted(
    shared_stack: Any, audited_run: tuple[str, list[dict[str, Any]], float, float]
) -> None:
    """The NaN total of each rank-step leaves one rollout out of each of the three pairs, counted as ``unpaired``;
    the dropped rollouts' lengths and lags arrive whole, and the drops are counted."""
    run_id, steps, _, _ = audited_run
    prometheus = Prometheus(shared_stack.prometheus_url)
    run = promql.matchers(rl_run_id=run_id, rl_rank="")
    unpaired = prometheus.value(
        f'sum({VALUES_REJECTED.name}{{{run},otel_rl_metric="rl.joint",otel_rl_reason="unpaired"}})'
    )
    assert unpaired == 3 * len(steps)
    assert prometheus.value(promql.count(DROPPED_RESPONSE_LENGTH, run, window=None)) == 2 * len(steps)
    assert prometheus.value(promql.histogram_mean(DROPPED_RESPONSE_LENGTH, run, window=None)) == 500
    assert prometheus.value(promql.histogram_mean(DROPPED_STALENESS, run, window=None)) == 10.5
    assert prometheus.value(f"sum({STALENESS_DROPPED.name}{{{run}}})") == 2 * len(steps)


def test_cost_is_the_ranks_gpu_time_at_the_stated_price(
    shared_stack: Any, audited_run: tuple[str, list[dict[str, Any]], float, float]
) -> None:
    """GPU-hours are the ranks' GPUs times their lifetimes so far (between what the test saw of their lives and
    their whole possible lives up to now), and the cost is that at the stated price; per step and per solved group
    divide by what Prometheus holds."""
    run_id, _, born, lived = audited_run
    prometheus = Prometheus(shared_stack.prometheus_url)
    run = promql.matchers(rl_run_id=run_id, rl_rank="")
    now = time.time()
    hours = prometheus.value(promql.gpu_hours(run), now)
    assert hours is not None
    assert GPUS_PER_RANK * lived / 3600 <= hours <= RANKS * GPUS_PER_RANK * (now - born) / 3600
    assert prometheus.value(promql.cost(run), now) == pytest.approx(hours * PRICE, rel=1e-9)
    solved = prometheus.value(f'sum({GROUPS.name}{{{run},rl_group_outcome=~"some|all"}})', now)
    if solved:
        assert prometheus.value(promql.cost_per(run, "solved_group"), now) == pytest.approx(
            hours * PRICE / solved, rel=1e-9
        )
    assert prometheus.value(promql.cost_per(run, "step"), now) == pytest.approx(hours * PRICE / STEPS, rel=1e-9)
    truth = prometheus.by_label(f"{REWARD_GROUND_TRUTH.name}{{{run}}}", "rl_reward_fn")
    assert truth == {"correctness": 1.0}


def test_status_answers_for_the_live_run_as_a_screen_and_as_json(
    shared_stack: Any, audited_run: tuple[str, list[dict[str, Any]], float, float], capsys: pytest.CaptureFixture[str]
) -> None:
    """``otel-rl status --json`` gives the run's step, ranks, reward and ground truth (the exact means of what the
    ranks recorded), cost, samples and alerts (the NaN rewards make RLNonFiniteRewards pending, then firing); the
    screen form names the same; without --run-id, the run that reported last is one of those reporting."""
    run_id, steps, _, _ = audited_run
    sources = Sources(shared_stack.prometheus_url, shared_stack.victorialogs_url, run_id)
    totals = np.concatenate([s["rewards"] for s in steps])
    correctness = np.concatenate([s["correctness"] for s in steps])

    def settled() -> dict[str, Any] | None:
        found = status(sources, Alertmanager(shared_stack.alertmanager_url))
        alerts = {alert["name"] for alert in found["alerts"]}
        ready = found["samples"]["bottom"] and found["reward"]["mean"] is not None and "RLNonFiniteRewards" in alerts
        return found if ready else None

    found = eventually(settled, what="the run's status with samples")
    assert found["step"]["value"] == STEPS
    assert found["ranks"] == {"up": RANKS, "expected": RANKS, "finished": 0}
    assert found["reward"]["mean"] == pytest.approx(float(np.nanmean(totals)), rel=1e-12)
    assert found["ground_truth"]["fn"] == "correctness"
    assert found["ground_truth"]["mean"] == pytest.approx(float(correctness.mean()), rel=1e-12)
    assert found["cost"]["so_far"] == pytest.approx(found["cost"]["gpu_hours"] * PRICE, rel=1e-3)
    assert found["samples"]["top"][0]["reward"] is not None and found["samples"]["bottom"]
    assert (
        cli.main(
            [
                "status",
                "--run-id",
                run_id,
                "--json",
                "--prometheus-url",
                shared_stack.prometheus_url,
                "--victorialogs-url",
                shared_stack.victorialogs_url,
                "--alertmanager-url",
                shared_stack.alertmanager_url,
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    assert printed["run_id"] == run_id and printed["ranks"]["expected"] == RANKS
    screen = render(found)
    assert f"run {run_id}" in screen and "ground truth  correctness" in screen and "4 of 4 reporting" in screen
    assert "RLNonFiniteRewards" in screen
    assert latest_run(Prometheus(shared_stack.prometheus_url))
