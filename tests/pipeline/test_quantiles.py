"""Exponential histograms end to end: quantiles read from Prometheus's native histograms are within 2.5% of the
exact quantiles of every rank's values, for reward shapes no fixed bucket set fits (issue: distributions, 14).

Four rank processes record their own draws of each distribution; the collector merges them at one fixed scale and
Prometheus 3 stores one native histogram per stream. The reference is numpy's inverted-CDF quantile (the smallest
value whose cumulative share reaches q, the definition ``histogram_quantile`` estimates) over all ranks' values.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import otel_rl_contract as contract
import pytest
from otel_rl_ops.promql import clamp_to_extremes
from otel_rl_ops.query import Prometheus

from tests.pipeline.harness import EVERY_RUN, RankProcess, eventually, written

RANKS = 4
PER_RANK = 5_000
QUANTILES = (0.5, 0.9, 0.99)
RELATIVE = 0.025

#: Each reward distribution is recorded under its own ``rl.reward.fn``.
DISTRIBUTIONS: dict[str, Callable[[np.random.Generator], np.ndarray]] = {
    "discrete": lambda rng: rng.choice([-0.5, 0.0, 0.5, 1.0, 1.5], PER_RANK),
    "uniform": lambda rng: rng.uniform(0.0, 100.0, PER_RANK),
    "normal": lambda rng: rng.normal(-30.0, 10.0, PER_RANK),
    "lognormal": lambda rng: rng.lognormal(0.0, 2.5, PER_RANK),
}


@pytest.fixture(scope="module")
def quantile_run(shared_stack: Any) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
    """Four ranks record each reward distribution and per-token staleness 0..5000; returns every value recorded."""
    run_id = f"quantiles-{uuid.uuid4().hex[:8]}"
    ranks = [
        RankProcess(
            endpoint=shared_stack.otlp_grpc_endpoint, run_id=run_id, rank=r, world_size=RANKS, histogram="exponential"
        )
        for r in range(RANKS)
    ]
    recorded: dict[str, list[float]] = {name: [] for name in [*DISTRIBUTIONS, "staleness"]}
    try:
        for rank in ranks:
            rng = np.random.default_rng(100 + rank.rank)
            for name, draw in DISTRIBUTIONS.items():
                values = draw(rng)
                rank.rewards(values.tolist(), fn=name)
                recorded[name] += values.tolist()
            current = 1_000_000
            # Half small lags (each integer its own bucket below ~46 at scale 5), half spread up to 5000; ragged rows.
            lags = np.where(
                rng.random((50, 100)) < 0.5, rng.integers(0, 20, (50, 100)), rng.integers(0, 5001, (50, 100))
            )
            mask = np.arange(100)[None, :] < rng.integers(1, 101, 50)[:, None]
            rank.staleness((current - lags).tolist(), current, mask=mask.tolist())
            recorded["staleness"] += lags[mask].astype(float).tolist()
            assert rank.flush()
        prometheus = Prometheus(shared_stack.prometheus_url)
        for name, kept in recorded.items():

            def merged(name: str = name, count: int = len(kept)) -> bool:
                return prometheus.value(f"histogram_count({_series(run_id, name)})") == count

            eventually(merged, what=f"the merged {name} histogram")
        yield run_id, {name: np.array(values) for name, values in recorded.items()}
    finally:
        for rank in ranks:
            rank.kill()


def _distribution(run_id: str, name: str) -> tuple[contract.Distribution, str]:
    """The distribution ``name`` was recorded into, and the selector of its series."""
    if name == "staleness":
        return contract.STALENESS, f'{{rl_run_id="{run_id}"}}'
    return contract.REWARDS, f'{{rl_run_id="{run_id}",rl_reward_fn="{name}"}}'


def _series(run_id: str, name: str) -> str:
    distribution, selector = _distribution(run_id, name)
    return f"{contract.series(distribution.histogram).name}{selector}"


def _extremes(run_id: str, name: str) -> tuple[str, str]:
    distribution, selector = _distribution(run_id, name)
    low, high = (contract.series(m).name for m in (distribution.minimum, distribution.maximum))
    return f"{low}{selector}", f"{high}{selector}"


@pytest.mark.parametrize("name", [*DISTRIBUTIONS, "staleness"])
def test_quantiles_are_within_the_bucket_resolution(
    shared_stack: Any, quantile_run: tuple[str, dict[str, np.ndarray]], name: str
) -> None:
    """p50, p90, p99 from the merged native histogram (clamped to the exact merged [min, max], as dashboards show
    them) are within 2.5% of the exact quantiles, and never outside [min, max]; count and sum are exact."""
    run_id, recorded = quantile_run
    values = recorded[name]
    prometheus = Prometheus(shared_stack.prometheus_url)
    series = _series(run_id, name)
    assert prometheus.value(f"histogram_count({series})") == len(values)
    assert prometheus.value(f"histogram_sum({series})") == pytest.approx(values.sum(), rel=1e-12, abs=1e-9)
    minimum, maximum = _extremes(run_id, name)
    low = prometheus.value(f"min_over_time({minimum}[10m])")
    high = prometheus.value(f"max_over_time({maximum}[10m])")
    assert (low, high) == (values.min(), values.max())
    assert low is not None and high is not None
    for q in QUANTILES:
        expected = float(np.quantile(values, q, method="inverted_cdf"))
        estimate = f"histogram_quantile({q}, sum by (rl_run_id) ({series}))"
        bounds = (
            f"min by (rl_run_id) (min_over_time({minimum}[10m]))",
            f"max by (rl_run_id) (max_over_time({maximum}[10m]))",
        )
        shown = prometheus.value(clamp_to_extremes(estimate, *bounds, on="rl_run_id"))
        assert shown is not None and low <= shown <= high, (q, shown)
        assert shown == pytest.approx(expected, rel=RELATIVE, abs=1e-9), (name, q, expected, shown)


def test_golden_native_names(shared_stack: Any, quantile_run: tuple[str, dict[str, np.ndarray]]) -> None:
    """The exponential form's series are exactly those the contract derives: native histograms without suffixes,
    everything else as in the explicit form; the self-check counter equals each histogram's count."""
    run_id, recorded = quantile_run
    prometheus = Prometheus(shared_stack.prometheus_url)
    metrics = (*contract.REWARDS.metrics, *contract.STALENESS.metrics, contract.POLICY_VERSION, contract.UNVERSIONED)
    expected = contract.prometheus_names(
        (*metrics, contract.VALUES_RECORDED, *EVERY_RUN), "exponential", exemplars=contract.EXEMPLAR_CARRIERS
    )
    assert written(prometheus, run_id) == expected
    recorded_total = prometheus.by_label(
        f'{contract.series(contract.VALUES_RECORDED).name}{{rl_run_id="{run_id}"}}', "otel_rl_metric"
    )
    rewards = sum(len(recorded[name]) for name in DISTRIBUTIONS)
    assert recorded_total == {"rl.reward": rewards, "rl.staleness": len(recorded["staleness"])}
