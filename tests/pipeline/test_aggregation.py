"""Ranks merged at the collector: what Prometheus holds equals the exact totals over ranks (issue: pipeline, 1)."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import otel_rl_contract as contract
import pytest
from otel_rl_ops.query import Prometheus

from tests.pipeline.harness import (
    EVERY_RUN,
    REWARD_BOUNDS,
    STALENESS_BOUNDS,
    RankProcess,
    eventually,
    expected_buckets,
    written,
)

RANKS = 4
STEPS = 3
FNS = ("total", "format")
REWARD = contract.series(contract.REWARDS.histogram)
STALENESS = contract.series(contract.STALENESS.histogram)


@pytest.fixture(scope="module")
def exact_run(shared_stack: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Four rank processes record known rewards (with values on bucket bounds) and per-token staleness."""
    run_id = f"exact-{uuid.uuid4().hex[:8]}"
    rng = np.random.default_rng(7)
    ranks = [
        RankProcess(endpoint=shared_stack.otlp_grpc_endpoint, run_id=run_id, rank=r, world_size=RANKS)
        for r in range(RANKS)
    ]
    expected: dict[str, Any] = {fn: [] for fn in FNS} | {"staleness": []}
    for step in range(STEPS):
        for rank in ranks:
            rank.step(step)
            total = np.concatenate((rng.normal(0.2, 2.0, 40).round(3), [-1.0, 0.0, 1.0, 10.0, 25.0]))
            fmt = rng.choice([-0.5, 0.5], 30)
            rank.rewards(total.tolist())
            rank.rewards(fmt.tolist(), fn="format")
            current = 2**40 + 10 * step
            versions = current - rng.integers(0, 40, (8, 16))
            lengths = rng.integers(0, 17, 8)
            mask = np.arange(16)[None, :] < lengths[:, None]
            rank.staleness(versions.tolist(), current, mask=mask.tolist())
            rank.metric("loss.policy", [0.5, -0.25])
            expected["total"] += total.tolist()
            expected["format"] += fmt.tolist()
            expected["staleness"] += (current - versions)[mask].tolist()
    for rank in ranks:
        assert rank.flush()
    prometheus = Prometheus(shared_stack.prometheus_url)
    count = len(expected["total"])
    eventually(
        lambda: prometheus.value(f'sum({REWARD.count}{{rl_run_id="{run_id}",rl_reward_fn="total"}})') == count,
        what="the aggregated reward count",
    )
    eventually(
        lambda: prometheus.value(f'sum({STALENESS.count}{{rl_run_id="{run_id}"}})') == len(expected["staleness"]),
        what="the aggregated staleness count",
    )
    yield run_id, expected
    for rank in ranks:
        rank.shutdown()


@pytest.mark.parametrize("fn", FNS)
def test_reward_histogram_is_the_exact_sum_over_ranks(
    shared_stack: Any, exact_run: tuple[str, dict[str, Any]], fn: str
) -> None:
    """Every bucket and the count are exact, the sum is within float tolerance, max and min are exact."""
    run_id, expected = exact_run
    prometheus = Prometheus(shared_stack.prometheus_url)
    selector = f'{{rl_run_id="{run_id}",rl_reward_fn="{fn}"}}'
    values = expected[fn]
    assert prometheus.buckets(REWARD, selector) == expected_buckets(values, REWARD_BOUNDS)
    assert prometheus.value(f"{REWARD.count}{selector}") == len(values)
    assert prometheus.value(f"{REWARD.sum}{selector}") == pytest.approx(sum(values), rel=1e-12, abs=1e-9)
    low, high = (contract.series(m).name for m in (contract.REWARDS.minimum, contract.REWARDS.maximum))
    assert prometheus.value(f"max_over_time({high}{selector}[10m])") == max(values)
    assert prometheus.value(f"min_over_time({low}{selector}[10m])") == min(values)
    positive, negative, squares = (
        prometheus.value(f"{contract.series(part).name}{selector}") for part in contract.REWARDS.sums
    )
    assert positive is not None and negative is not None
    assert positive - negative == pytest.approx(sum(values), rel=1e-12, abs=1e-9)
    assert squares == pytest.approx(sum(v * v for v in values), rel=1e-12)


def test_staleness_histogram_is_exact_per_token(shared_stack: Any, exact_run: tuple[str, dict[str, Any]]) -> None:
    """Masked per-token staleness with versions near 2**40: buckets, count, sum, max and min are exact."""
    run_id, expected = exact_run
    prometheus = Prometheus(shared_stack.prometheus_url)
    selector = f'{{rl_run_id="{run_id}"}}'
    values = expected["staleness"]
    assert prometheus.buckets(STALENESS, selector) == expected_buckets(values, STALENESS_BOUNDS)
    assert prometheus.value(f"{STALENESS.count}{selector}") == len(values)
    assert prometheus.value(f"{STALENESS.sum}{selector}") == sum(values)
    low, high = (contract.series(m).name for m in (contract.STALENESS.minimum, contract.STALENESS.maximum))
    assert prometheus.value(f"max_over_time({high}{selector}[10m])") == max(values)
    assert prometheus.value(f"min_over_time({low}{selector}[10m])") == min(values)
    assert prometheus.value(f"{contract.series(contract.POLICY_VERSION).name}{selector}") == 2**40 + 10 * (STEPS - 1)
    assert prometheus.value(f"{contract.series(contract.STEP).name}{selector}") == STEPS - 1


def test_one_series_per_run_without_rank_labels(shared_stack: Any, exact_run: tuple[str, dict[str, Any]]) -> None:
    """Four ranks give one series per metric and attribute set, carrying no per-rank label."""
    run_id, _ = exact_run
    prometheus = Prometheus(shared_stack.prometheus_url)
    series = prometheus.query(f'{REWARD.count}{{rl_run_id="{run_id}"}}')
    assert sorted(s["metric"]["rl_reward_fn"] for s in series) == sorted(FNS)
    for item in prometheus.query(f'{{rl_run_id="{run_id}"}}'):
        assert not {"rl_rank", "rl_local_rank", "service_instance_id", "instance"} & set(item["metric"])


def test_a_flush_stamps_every_series_of_a_run_alike(shared_stack: Any, exact_run: tuple[str, dict[str, Any]]) -> None:
    """Every series of a run carries the same sample time for one collector flush (one stamp per run and flush), so a
    ratio's numerator and denominator always fall in the same window; stamping each point apart put one flush's
    series up to 16 ms apart. Flushes are 1 s apart here, so two distinct times closer than 0.5 s are one flush."""
    run_id, _ = exact_run
    prometheus = Prometheus(shared_stack.prometheus_url)

    def times() -> list[float]:
        series = prometheus.query(f'{{__name__=~"rl_.+",rl_run_id="{run_id}"}}[5m]')  # remote-written, not scraped
        found = sorted({float(time) for item in series for time, _ in item["values"]})
        return found if len(series) >= 20 and len(found) >= 3 else []

    found = eventually(times, what="three flushes of the run")
    gaps = [later - earlier for earlier, later in itertools.pairwise(found)]
    assert min(gaps) >= 0.5, f"one flush stamped apart: {[gap for gap in gaps if gap < 0.5]}"


def test_mean_of_all_negative_rewards_over_a_window(shared_stack: Any) -> None:
    """A phase of all-negative rewards: the PromQL window mean from the monotone sum parts is exactly right."""
    run_id = f"negative-{uuid.uuid4().hex[:8]}"
    prometheus = Prometheus(shared_stack.prometheus_url)
    ranks = [
        RankProcess(endpoint=shared_stack.otlp_grpc_endpoint, run_id=run_id, rank=r, world_size=RANKS)
        for r in range(RANKS)
    ]
    rng = np.random.default_rng(11)
    try:
        _negative_phase_checks(run_id, ranks, rng, prometheus)
    finally:
        for rank in ranks:
            rank.kill()


def _negative_phase_checks(
    run_id: str, ranks: list[RankProcess], rng: np.random.Generator, prometheus: Prometheus
) -> None:
    selector = f'{{rl_run_id="{run_id}",rl_reward_fn="total"}}'
    first = [rng.uniform(-1, 3, 20).round(3).tolist() for _ in ranks]
    for rank, values in zip(ranks, first, strict=True):
        rank.rewards(values)
        rank.flush()
    eventually(lambda: prometheus.value(f"{REWARD.count}{selector}") == 20 * RANKS, what="the first phase")
    time.sleep(3)
    gap = time.time()
    time.sleep(2)
    second = [(-rng.uniform(0.1, 5, 30)).round(3).tolist() for _ in ranks]
    for rank, values in zip(ranks, second, strict=True):
        rank.rewards(values)
        rank.flush()
    eventually(lambda: prometheus.value(f"{REWARD.count}{selector}") == 50 * RANKS, what="the negative phase")
    time.sleep(3)
    end = time.time()
    offset = f"offset {round((end - gap) * 1000)}ms"

    def window(metric: str) -> str:
        return f"({metric}{selector} - {metric}{selector} {offset})"

    positive, negative, _ = (contract.series(part).name for part in contract.REWARDS.sums)
    mean = prometheus.value(f"({window(positive)} - {window(negative)}) / {window(REWARD.count)}", at=end)
    negatives = [v for values in second for v in values]
    assert mean == pytest.approx(sum(negatives) / len(negatives), rel=1e-9)
    histogram_sum = prometheus.value(f"{REWARD.sum}{selector}", at=end)
    histogram_sum_before = prometheus.value(f"{REWARD.sum}{selector} {offset}", at=end)
    assert histogram_sum is not None and histogram_sum_before is not None
    histogram_sum_decreased = histogram_sum < histogram_sum_before
    assert histogram_sum_decreased  # why the sum also goes out as two monotone counters


def test_golden_prometheus_names(shared_stack: Any, exact_run: tuple[str, dict[str, Any]]) -> None:
    """The series a run in the explicit form produces are exactly those the contract derives for what it recorded
    (tests/unit/test_series.py pins the names)."""
    run_id, _ = exact_run
    recorded = (*contract.REWARDS.metrics, *contract.STALENESS.metrics, *contract.METRICS.metrics)
    extra = (contract.POLICY_VERSION, contract.STEP, contract.UNVERSIONED, contract.VALUES_RECORDED)
    expected = contract.prometheus_names(
        (*recorded, *extra, *EVERY_RUN), "explicit", exemplars=contract.EXEMPLAR_CARRIERS
    )
    assert written(Prometheus(shared_stack.prometheus_url), run_id) == expected
