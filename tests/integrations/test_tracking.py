"""The metrics-dict bridge against the real stack: a recorded verl-style sequence of metrics dicts, logged through
``MetricsDictLogger.log(data, step)``, becomes the documented series in Prometheus."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import otel_rl_contract as contract
from otel_rl_ops.query import Prometheus

import otel_rl
from otel_rl.tracking import MetricsDictLogger
from tests.pipeline.harness import eventually

METRIC = contract.series(contract.METRICS.histogram)
METRIC_POSITIVE, METRIC_NEGATIVE, METRIC_SQUARES = map(contract.series, contract.METRICS.sums)
POLICY_VERSION = contract.series(contract.POLICY_VERSION)
REWARD = contract.series(contract.REWARDS.histogram)
REWARD_POSITIVE, REWARD_NEGATIVE, REWARD_SQUARES = map(contract.series, contract.REWARDS.sums)
STEP = contract.series(contract.STEP)
VALUES_REJECTED = contract.series(contract.VALUES_REJECTED)

STEPS = 5


def _verl_step(step: int, rng: np.random.Generator) -> dict[str, Any]:
    """What verl's RayPPOTrainer hands Tracking.log at one step (fully-async recipe keys included), plus a
    per-sample reward array and a value that is not a number (a W&B-style table)."""
    scores = rng.choice([0.0, 1.0], 16)
    lengths = rng.integers(5, 200, 16)
    return {
        "critic/score/mean": float(scores.mean()),
        "critic/score/max": float(scores.max()),
        "critic/score/min": float(scores.min()),
        "critic/rewards/mean": float(scores.mean()) - 0.01,
        "critic/advantages/mean": 0.0,
        "response_length/mean": float(lengths.mean()),
        "response_length/max": float(lengths.max()),
        "response_length/clip_ratio": 0.0,
        "actor/pg_loss": float(rng.normal()),
        "actor/entropy": float(rng.uniform(0.5, 1.0)),
        "timing_s/gen": float(rng.uniform(1, 2)),
        "fully_async/count/current_param_version": float(10 + step),
        "rewards/correctness": scores.tolist(),
        "response_length": lengths,
        "val/generations": {"table": ["a", "b"]},
    }


def test_verl_metrics_dicts_become_series(shared_stack: Any) -> None:
    """Known keys land under canonical rl.metric keys, arrays as exact distributions, the version and step as
    gauges; unknown keys keep their own key; a non-number is rejected and counted, not raised."""
    run_id = f"tracking-{uuid.uuid4().hex[:8]}"
    telemetry = otel_rl.Telemetry(
        otel_rl.TelemetryConfig(run_id=run_id, endpoint=shared_stack.otlp_grpc_endpoint, export_interval_s=0.5)
    )
    logger = MetricsDictLogger(telemetry)
    rng = np.random.default_rng(3)
    logged = [_verl_step(step, rng) for step in range(1, STEPS + 1)]
    for step, data in enumerate(logged, start=1):
        logger.log(data, step=step)
    logger.finish()
    assert telemetry.shutdown()

    prometheus = Prometheus(shared_stack.prometheus_url)
    run = f'rl_run_id="{run_id}",rl_rank=""'

    def metric(name: str, key: str) -> float | None:
        if name == METRIC.count:  # exponential histograms: the native histogram's count
            return prometheus.value(f'histogram_count(sum({METRIC.name}{{{run},rl_metric_key="{key}"}}))')
        return prometheus.value(f'sum({name}{{{run},rl_metric_key="{key}"}})')

    scores = np.concatenate([d["rewards/correctness"] for d in logged])
    eventually(
        lambda: (
            prometheus.value(f'histogram_count(sum({REWARD.name}{{{run},rl_reward_fn="correctness"}}))') == scores.size
        ),
        what="the per-sample rewards",
    )
    assert prometheus.value(f'sum({REWARD_POSITIVE.name}{{{run},rl_reward_fn="correctness"}})') == scores.sum()
    eventually(lambda: metric(METRIC.count, "reward/mean") == STEPS, what="the canonical reward mean")
    means = [d["critic/score/mean"] for d in logged]
    assert metric(METRIC_POSITIVE.name, "reward/mean") == sum(means)
    for key, _source in (
        ("reward/max", "critic/score/max"),
        ("reward_penalized/mean", "critic/rewards/mean"),
        ("advantage/mean", "critic/advantages/mean"),
        ("response_length/clip_ratio", "response_length/clip_ratio"),
        ("actor/pg_loss", "actor/pg_loss"),
        ("timing_s/gen", "timing_s/gen"),
    ):
        assert metric(METRIC.count, key) == STEPS, key
    lengths = np.concatenate([d["response_length"] for d in logged])
    assert metric(METRIC.count, "response_length") == lengths.size
    assert metric(METRIC_POSITIVE.name, "response_length") == lengths.sum()
    assert prometheus.value(f"max({POLICY_VERSION.name}{{{run}}})") == 10 + STEPS
    assert prometheus.value(f"max({STEP.name}{{{run}}})") == STEPS
    rejected = prometheus.value(
        f'sum({VALUES_REJECTED.name}{{{run},otel_rl_metric="rl.metric",otel_rl_reason="type"}})'
    )
    assert rejected == STEPS
