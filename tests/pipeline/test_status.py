"""``otel-rl status`` on any run, through the real stack: a new user's short first run (30 steps, one rank, the
library's defaults) and a longer two-rank run, their quantiles, samples and numbers checked against the exact values
the ranks recorded, read while fresh and an hour after the end."""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import otel_rl_contract as contract
import pytest
from otel_rl_ops import promql
from otel_rl_ops.alerts.client import Alertmanager
from otel_rl_ops.cli import main
from otel_rl_ops.query import Prometheus, VictoriaLogs
from otel_rl_ops.report.summary import Sources, number
from otel_rl_ops.status import latest_run, render, status

from tests.pipeline.harness import RankProcess, eventually, start_ranks
from tests.reference import exponential_index

SCALE = 5
"""The default histogram scale: the quantiles' buckets."""
DOCS = Path(__file__).parents[2] / "docs" / "dashboards.md"


def _ranked(values: Sequence[float], q: float) -> float:
    """The recorded value whose bucket ``histogram_quantile`` picks for ``q`` (Prometheus's ``HistogramQuantile``):
    walking the buckets from the lowest for ``q < 0.5``, the first where the count reaches ``q * count``, so the
    ``ceil(q * n)``-th smallest value; from the highest for ``q >= 0.5``, the ``ceil((1 - q) * n)``-th largest (the
    ranks computed in doubles, as Prometheus does). The estimate lies in that value's bucket."""
    ordered = sorted(values)
    if q < 0.5:
        return float(ordered[max(1, math.ceil(q * len(ordered))) - 1])
    return float(ordered[len(ordered) - max(1, math.ceil((1 - q) * len(ordered)))])


def _in_bucket(estimate: float | None, value: float) -> bool:
    """Whether ``estimate`` lies in the exponential bucket (scale 5) that holds ``value`` (neither is 0)."""
    assert estimate is not None and value != 0
    index = exponential_index(abs(value), SCALE)
    low, high = 2 ** (index / 2**SCALE), 2 ** ((index + 1) / 2**SCALE)
    magnitude = abs(estimate) * (1 if (estimate > 0) == (value > 0) else -1)
    return bool(low * (1 - 1e-12) <= magnitude <= high * (1 + 1e-12))


def _check_quantiles(found: dict[str, Any], rewards: list[float], lags: list[int]) -> None:
    for q, key in ((0.1, "p10"), (0.5, "p50"), (0.9, "p90")):
        assert _in_bucket(found["reward"][key], _ranked(rewards, q)), (key, found["reward"][key])
    assert found["reward"]["mean"] == pytest.approx(math.fsum(rewards) / len(rewards), rel=1e-12)
    assert found["staleness_p50"] == _ranked(lags, 0.5)
    assert found["staleness_p99"] == _ranked(lags, 0.99)
    assert found["staleness_max"] == max(lags)


def _settled(sources: Sources, count: int) -> None:
    """Wait until Prometheus holds all ``count`` total rewards of the run, and its last report has come."""
    prometheus = Prometheus(sources.prometheus_url)
    total = sources.selector(rl_rank="", rl_reward_fn="total")
    eventually(
        lambda: (
            prometheus.value(promql.count(contract.series(contract.REWARDS.histogram), total, window=None)) == count
        ),
        what=f"{count} rewards",
    )
    eventually(
        lambda: prometheus.value(f"min(rl_run_finished{{{sources.selector(rl_rank='')}}})") == 1, what="finished"
    )


def _keys(value: Any, prefix: str = "") -> set[str]:
    """The dotted paths of a JSON object's keys (``samples.top[].step``)."""
    if isinstance(value, dict):
        return {k for key, item in value.items() for k in {f"{prefix}{key}", *_keys(item, f"{prefix}{key}.")}}
    if isinstance(value, list):
        return {k for item in value for k in _keys(item, f"{prefix[:-1]}[].")}
    return set()


def test_a_short_first_run_has_its_quantiles_and_worst_samples(
    shared_stack: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new user's first run: 30 steps on one rank with the defaults (exponential histograms, top-2/bottom-2 with
    one sample a step, so every sample is its step's top), over in seconds. Status gives the reward p10/p50/p90 in
    the buckets of the exact quantiles, the exact staleness p50, p99 and max, the exact mean, the two lowest rewards
    as the worst samples; the screen shows them to 3 digits; read an hour later, the same; every key is documented."""
    run_id = f"first-run-{uuid.uuid4().hex[:8]}"
    rank = RankProcess(
        endpoint=shared_stack.otlp_grpc_endpoint, run_id=run_id, rank=0, world_size=1, histogram="exponential"
    )
    rng = np.random.default_rng(30)
    rewards: list[float] = []
    lags: list[int] = []
    samples: list[float] = []
    try:
        for step in range(30):
            rank.step(step)
            values = rng.uniform(0.01, 1.0, 16) * rng.choice([-1.0, 1.0], 16)
            rank.rewards(values.tolist())
            lag = rng.integers(0, 4, 16)
            rank.staleness((100 + step - lag).tolist(), 100 + step)
            mean = float(values.mean())
            rank.sample(reward=mean, episode_id=f"s{step}", prompt=f"prompt {step}", response=f"response {step}")
            rewards += values.tolist()
            lags += lag.tolist()
            samples.append(mean)
        assert rank.shutdown()
    finally:
        if rank.alive():
            rank.kill()
    sources = Sources(shared_stack.prometheus_url, shared_stack.victorialogs_url, run_id)
    alertmanager = Alertmanager(shared_stack.alertmanager_url)
    _settled(sources, len(rewards))
    logs = VictoriaLogs(shared_stack.victorialogs_url)
    eventually(lambda: len(logs.query(promql.logsql_stream(contract.RUN_ID, run_id))) == 30, what="30 samples")

    found = status(sources, alertmanager)
    later = status(sources, alertmanager, now=time.time() + 3600)
    for answer in (found, later):
        _check_quantiles(answer, rewards, lags)
        assert answer["step"]["value"] == 29 and answer["ranks"] == {"up": 1, "expected": 1, "finished": 1}
        assert answer["last_report"] == found["last_report"]
        worst = [sample["reward"] for sample in answer["samples"]["bottom"]]
        best = [sample["reward"] for sample in answer["samples"]["top"]]
        assert worst == pytest.approx(sorted(samples)[:2], rel=1e-15)
        assert best == pytest.approx(sorted(samples, reverse=True)[:2], rel=1e-15)
        assert {sample["response"] for sample in answer["samples"]["bottom"]} <= {f"response {s}" for s in range(30)}
    assert later["step"]["unchanged_s"] >= 3600
    assert latest_run(Prometheus(shared_stack.prometheus_url), at=time.time() + 3600), "an ended run is found"

    screen = render(found)
    reward = found["reward"]
    assert f"p10 {number(reward['p10'])}, p50 {number(reward['p50'])}, p90 {number(reward['p90'])}" in screen
    assert f"reward {number(worst[0])}: prompt" in screen and "worst samples" in screen
    assert not re.search(r"\d\.\d{5,}", screen.split("\n", 1)[1]), screen
    assert "as it ended" in render(later) and "as it ended" not in screen

    urls = ["--prometheus-url", shared_stack.prometheus_url, "--victorialogs-url", shared_stack.victorialogs_url]
    capsys.readouterr()
    assert main(["status", "--run-id", run_id, "--json", *urls, "--alertmanager-url", alertmanager.url]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["staleness_p99"] == found["staleness_p99"]
    documented = DOCS.read_text(encoding="utf-8").split("## `otel-rl status`")[1].split("\n## ")[0]
    missing = sorted(key for key in _keys(printed) if f"`{key}`" not in documented)
    assert missing == [], f"keys of otel-rl status --json not in docs/dashboards.md: {missing}"


WINDOW_S = 30
HOLD_S = 10
"""The ranks' extremes_hold_s (the default): a window's min and max gauges hold a value this long."""


def test_a_longer_run_answers_with_its_last_window(shared_stack: Any) -> None:
    """Two ranks record a first phase (rewards in [-2, -1], staleness 0-2), wait out the window, then a second
    (rewards in [1, 2], staleness 5-7) and end. Status over a window that holds only the second phase gives that
    phase's quantiles, mean and maximum; over an hour, the whole run's."""
    run_id = f"longer-run-{uuid.uuid4().hex[:8]}"
    ranks = start_ranks(2, endpoint=shared_stack.otlp_grpc_endpoint, run_id=run_id, histogram="exponential")
    rng = np.random.default_rng(31)
    phases: list[tuple[list[float], list[int]]] = []
    sources = Sources(shared_stack.prometheus_url, shared_stack.victorialogs_url, run_id)
    prometheus = Prometheus(shared_stack.prometheus_url)
    total = sources.selector(rl_rank="", rl_reward_fn="total")
    try:
        for phase, (low, lag_low) in enumerate(((-2.0, 0), (1.0, 5))):
            rewards: list[float] = []
            lags: list[int] = []
            for step in range(phase * 40, phase * 40 + 40):
                for rank in ranks:
                    rank.step(step)
                    values = rng.uniform(low, low + 1.0, 8)
                    lag = rng.integers(lag_low, lag_low + 3, 8)
                    rank.rewards(values.tolist())
                    rank.staleness((1000 + step - lag).tolist(), 1000 + step)
                    rewards += values.tolist()
                    lags += lag.tolist()
            phases.append((rewards, lags))
            for rank in ranks:
                assert rank.flush()
            if phase == 0:
                eventually(
                    lambda: (
                        prometheus.value(promql.count(contract.series(contract.REWARDS.histogram), total, window=None))
                        == len(rewards)
                    ),
                    what="the first phase's rewards",
                )
                time.sleep(WINDOW_S + HOLD_S + 2)  # the first phase and its held extremes leave the window
        for rank in ranks:
            assert rank.shutdown()
    finally:
        for rank in ranks:
            if rank.alive():
                rank.kill()
    _settled(sources, sum(len(rewards) for rewards, _ in phases))
    alertmanager = Alertmanager(shared_stack.alertmanager_url)
    last = status(sources, alertmanager, window_s=WINDOW_S)
    (rewards, lags), (first_rewards, first_lags) = phases[1], phases[0]
    in_window = prometheus.value(
        promql.count(contract.series(contract.REWARDS.histogram), total, window=f"{WINDOW_S}s"), last["last_report"]
    )
    assert in_window == len(rewards), "the window up to the last report holds the second phase only"
    _check_quantiles(last, rewards, lags)
    whole = status(sources, alertmanager, window_s=3600)
    _check_quantiles(whole, first_rewards + rewards, first_lags + lags)
    assert whole["step"]["value"] == 79 and whole["ranks"]["expected"] == 2
