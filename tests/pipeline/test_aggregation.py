"""Ranks merged at the collector: what Prometheus holds equals the exact totals over ranks (issue: pipeline, 1)."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from otel_rl_ops.query import Prometheus

from tests.pipeline.harness import REWARD_BOUNDS, STALENESS_BOUNDS, RankProcess, eventually, expected_buckets

RANKS = 4
STEPS = 3
FNS = ("total", "format")


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
        lambda: prometheus.value(f'sum(rl_reward_count{{rl_run_id="{run_id}",rl_reward_fn="total"}})') == count,
        what="the aggregated reward count",
    )
    eventually(
        lambda: prometheus.value(f'sum(rl_staleness_count{{rl_run_id="{run_id}"}})') == len(expected["staleness"]),
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
    assert prometheus.buckets("rl_reward", selector) == expected_buckets(values, REWARD_BOUNDS)
    assert prometheus.value(f"rl_reward_count{selector}") == len(values)
    assert prometheus.value(f"rl_reward_sum{selector}") == pytest.approx(sum(values), rel=1e-12, abs=1e-9)
    assert prometheus.value(f"max_over_time(rl_reward_max{selector}[10m])") == max(values)
    assert prometheus.value(f"min_over_time(rl_reward_min{selector}[10m])") == min(values)
    positive = prometheus.value(f"rl_reward_positive_total{selector}")
    negative = prometheus.value(f"rl_reward_negative_total{selector}")
    assert positive is not None and negative is not None
    assert positive - negative == pytest.approx(sum(values), rel=1e-12, abs=1e-9)
    squares = prometheus.value(f"rl_reward_squares_total{selector}")
    assert squares == pytest.approx(sum(v * v for v in values), rel=1e-12)


def test_staleness_histogram_is_exact_per_token(shared_stack: Any, exact_run: tuple[str, dict[str, Any]]) -> None:
    """Masked per-token staleness with versions near 2**40: buckets, count, sum, max and min are exact."""
    run_id, expected = exact_run
    prometheus = Prometheus(shared_stack.prometheus_url)
    selector = f'{{rl_run_id="{run_id}"}}'
    values = expected["staleness"]
    assert prometheus.buckets("rl_staleness", selector) == expected_buckets(values, STALENESS_BOUNDS)
    assert prometheus.value(f"rl_staleness_count{selector}") == len(values)
    assert prometheus.value(f"rl_staleness_sum{selector}") == sum(values)
    assert prometheus.value(f"max_over_time(rl_staleness_max{selector}[10m])") == max(values)
    assert prometheus.value(f"min_over_time(rl_staleness_min{selector}[10m])") == min(values)
    assert prometheus.value(f"rl_policy_version{selector}") == 2**40 + 10 * (STEPS - 1)
    assert prometheus.value(f"rl_step{selector}") == STEPS - 1


def test_one_series_per_run_without_rank_labels(shared_stack: Any, exact_run: tuple[str, dict[str, Any]]) -> None:
    """Four ranks give one series per metric and attribute set, carrying no per-rank label."""
    run_id, _ = exact_run
    prometheus = Prometheus(shared_stack.prometheus_url)
    series = prometheus.query(f'rl_reward_count{{rl_run_id="{run_id}"}}')
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
    eventually(lambda: prometheus.value(f"rl_reward_count{selector}") == 20 * RANKS, what="the first phase")
    time.sleep(3)
    gap = time.time()
    time.sleep(2)
    second = [(-rng.uniform(0.1, 5, 30)).round(3).tolist() for _ in ranks]
    for rank, values in zip(ranks, second, strict=True):
        rank.rewards(values)
        rank.flush()
    eventually(lambda: prometheus.value(f"rl_reward_count{selector}") == 50 * RANKS, what="the negative phase")
    time.sleep(3)
    end = time.time()
    offset = f"offset {round((end - gap) * 1000)}ms"

    def window(metric: str) -> str:
        return f"({metric}{selector} - {metric}{selector} {offset})"

    mean = prometheus.value(
        f"({window('rl_reward_positive_total')} - {window('rl_reward_negative_total')}) / {window('rl_reward_count')}",
        at=end,
    )
    negatives = [v for values in second for v in values]
    assert mean == pytest.approx(sum(negatives) / len(negatives), rel=1e-9)
    histogram_sum = prometheus.value(f"rl_reward_sum{selector}", at=end)
    histogram_sum_before = prometheus.value(f"rl_reward_sum{selector} {offset}", at=end)
    assert histogram_sum is not None and histogram_sum_before is not None
    histogram_sum_decreased = histogram_sum < histogram_sum_before
    assert histogram_sum_decreased  # why the sum also goes out as two monotone counters


GOLDEN_SERIES = {
    "rl_reward_bucket",
    "rl_reward_count",
    "rl_reward_sum",
    "rl_reward_positive_total",
    "rl_reward_negative_total",
    "rl_reward_squares_total",
    "rl_reward_max",
    "rl_reward_min",
    "rl_staleness_bucket",
    "rl_staleness_count",
    "rl_staleness_sum",
    "rl_staleness_max",
    "rl_staleness_min",
    "rl_policy_version",
    "rl_step",
    "rl_reward_exemplars_bucket",
    "rl_reward_exemplars_count",
    "rl_reward_exemplars_sum",
    "rl_staleness_exemplars_bucket",
    "rl_staleness_exemplars_count",
    "rl_staleness_exemplars_sum",
    "rl_metric_bucket",
    "rl_metric_count",
    "rl_metric_sum",
    "rl_metric_positive_total",
    "rl_metric_negative_total",
    "rl_metric_squares_total",
    "rl_metric_max",
    "rl_metric_min",
    "otel_rl_samples_exported_total",
    "otel_rl_samples_dropped_total",
    "otel_rl_spans_exported_total",
    "otel_rl_spans_dropped_total",
    "otel_rl_export_failures_total",
    "otel_rl_export_unencodable_total",
    "otel_rl_values_recorded_total",
    "rl_run_start_time_seconds",
    "rl_run_finished",
    "rl_ranks_up",
    "rl_ranks_expected",
    "rl_reward_ground_truth",
    "rl_gpu_seconds_total",
    "rl_staleness_unversioned_total",
}
"""The exact Prometheus series names the OpenTelemetry names of docs/contract.md become."""


def test_golden_prometheus_names(shared_stack: Any, exact_run: tuple[str, dict[str, Any]]) -> None:
    """The series a run produces are exactly the golden names, and docs/contract.md documents each of them."""
    run_id, _ = exact_run
    raw_series = f'{{rl_run_id="{run_id}",otel_scope_name="otel_rl"}}'  # not the recording rules' series
    names = {series["__name__"] for series in Prometheus(shared_stack.prometheus_url).series(raw_series)}
    assert names == GOLDEN_SERIES
    contract = (Path(__file__).parents[2] / "docs" / "contract.md").read_text()
    assert [
        name for name in sorted(GOLDEN_SERIES | {"otel_rl_values_rejected_total"}) if f"`{name}`" not in contract
    ] == []
