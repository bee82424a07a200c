"""record_rollouts: the health-signal statistics equal plain Python/numpy references, on the compiled CPU path and
on the torch path that tensors on other devices take; bad fields are dropped and counted, the rest kept."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import otel_rl_contract as contract
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from otel_rl import Telemetry, TelemetryConfig
from otel_rl._record.buckets import ExponentialLayout, Layout, Layouts
from otel_rl._record.rollouts import Rollouts, RolloutStatistics, RolloutSummarizer
from otel_rl._record.stats import ValueSummarizer
from tests.conftest import EXPORT_WAIT_S, DataPoint, RecordingMetricExporter
from tests.reference import exponential_sides


class TorchValues(ValueSummarizer):
    """The device (torch) path, run on the CPU."""

    kernel_devices = frozenset()


def _exponential(layout: Layout) -> ExponentialLayout:
    """``layout`` as the exponential layout an ``"exponential"`` resolve gives every role."""
    assert isinstance(layout, ExponentialLayout), layout
    return layout


LAYOUTS = Layouts.resolve("exponential", scale=5)
LAYOUT = _exponential(LAYOUTS.of(contract.REWARDS))
PATHS = pytest.mark.parametrize("values", [ValueSummarizer, TorchValues])


def counts_of(result: RolloutStatistics) -> dict[str, int]:
    out: dict[str, int] = {}
    for metric, attrs, count in result.counts:
        key = dict(attrs).get("rl.group.outcome") or dict(attrs).get("rl.sign") or metric.name
        out[{"rl.groups.zero_variance": "zero"}.get(key, key)] = count
    return out


@PATHS
@settings(max_examples=100, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 8), st.integers(1, 16)),
    data=st.data(),
)
def test_per_token_signals_match_numpy(
    values: type[ValueSummarizer], shape: tuple[int, int], data: st.DataObject
) -> None:
    """Entropy, importance ratio and the k1/k3 mismatch KL over unmasked tokens; advantages and lengths per
    rollout with a row mask: counts, sums, extremes and buckets equal a float64 numpy reference."""
    logits = st.floats(-8, 0, width=32)
    train = data.draw(arrays(np.float32, shape, elements=logits))
    inference = data.draw(arrays(np.float32, shape, elements=logits))
    entropy = data.draw(arrays(np.float32, shape, elements=st.floats(0, 5, width=32)))
    mask = data.draw(arrays(np.bool_, shape))
    advantages = data.draw(arrays(np.float32, shape[0], elements=st.floats(-3, 3, width=32)))
    lengths = data.draw(arrays(np.int64, shape[0], elements=st.integers(0, 4096)))
    result = RolloutSummarizer(LAYOUTS, solved_reward=1.0, summarizer=values).summarize(
        Rollouts(
            mask=torch.from_numpy(mask),
            advantages=torch.from_numpy(advantages),
            response_lengths=torch.from_numpy(lengths),
            entropy=torch.from_numpy(entropy),
            logprobs=torch.from_numpy(train),
            inference_logprobs=torch.from_numpy(inference),
        )
    )
    assert not result.rejected
    log_ratio = (train.astype(np.float64) - inference.astype(np.float64))[mask]
    ratio = np.exp(log_ratio)
    rows = mask.any(axis=1)
    expected = {
        ("rl.entropy", ()): entropy.astype(np.float64)[mask],
        ("rl.importance_ratio", ()): ratio,
        ("rl.mismatch.kl", (("rl.kl.estimator", "k1"),)): -log_ratio,
        ("rl.mismatch.kl", (("rl.kl.estimator", "k3"),)): ratio - 1 - log_ratio,
        ("rl.advantage", ()): advantages.astype(np.float64)[rows],
        ("rl.response.length", ()): lengths.astype(np.float64)[rows],
    }
    got = {(d.histogram.name, attrs): s for d, attrs, s in result.distributions}
    assert set(got) == set(expected)
    for key, reference in expected.items():
        statistics = got[key]
        assert statistics.count == reference.size, key
        assert statistics.total == pytest.approx(reference.sum(), rel=1e-9, abs=1e-9), key
        if reference.size:
            assert (statistics.minimum, statistics.maximum) == pytest.approx(
                (reference.min(), reference.max()), rel=1e-12
            )
        sides = LAYOUT.sides(statistics.bucket_counts)
        negative = {sides.negative_offset + i: c for i, c in enumerate(sides.negative) if c}
        positive = {sides.positive_offset + i: c for i, c in enumerate(sides.positive) if c}
        if key[0] in ("rl.entropy", "rl.advantage", "rl.response.length"):  # exact float32 inputs: exact buckets
            assert (sides.zero_count, negative, positive) == exponential_sides(reference, LAYOUT.scale), key
        else:
            assert sides.zero_count + sum(negative.values()) + sum(positive.values()) == reference.size
    signs = counts_of(result)
    valid = advantages[rows]
    assert (signs["positive"], signs["negative"], signs["zero"]) == (
        int((valid > 0).sum()),
        int((valid < 0).sum()),
        int((valid == 0).sum()),
    )


def _telemetry(exporter: RecordingMetricExporter, **settings: Any) -> Telemetry:
    return Telemetry(TelemetryConfig(run_id="rollouts", export_interval_s=60, **settings), metric_exporter=exporter)


def _rejected(exporter: RecordingMetricExporter) -> dict[tuple[str, str], float]:
    return {
        (dict(labels)["otel_rl.metric"], dict(labels)["otel_rl.reason"]): value
        for labels, value in exporter.numbers("otel_rl.values.rejected").items()
    }


def test_bad_fields_are_dropped_and_counted_the_rest_kept(metric_exporter: RecordingMetricExporter) -> None:
    """Mismatched shapes, NaN log-probabilities, a non-integral group id and negative lengths: each bad part is
    dropped and counted with its reason, never raised (the other rollout's group cannot have an exact outcome:
    incomplete_group); every valid field and token is recorded."""
    telemetry = _telemetry(metric_exporter)
    mask = torch.ones(2, 3, dtype=torch.bool)
    logprobs = torch.tensor([[-1.0, float("nan"), -0.5], [-0.2, -0.3, -0.4]])
    telemetry.record_rollouts(
        mask=mask,
        entropy=torch.ones(2, 4),  # wrong shape: dropped
        logprobs=logprobs,
        inference_logprobs=torch.full((2, 3), -0.5),
        response_lengths=torch.tensor([10, -3]),
        group_ids=torch.tensor([0.5, 1.0]),  # 0.5 is not integral: no exact group outcome
        rewards=torch.tensor([1.0, 0.0]),
        advantages=torch.tensor([0.5, -0.5]),
    )
    telemetry.record_rollouts(logprobs=torch.zeros(3))  # no inference_logprobs: dropped
    telemetry.flush(EXPORT_WAIT_S)
    assert metric_exporter.exponential_point("rl.importance_ratio").count == 5
    assert metric_exporter.exponential_point("rl.mismatch.kl", {"rl.kl.estimator": "k3"}).count == 5
    assert metric_exporter.exponential_point("rl.response.length").count == 1
    assert metric_exporter.exponential_point("rl.advantage").count == 2
    assert () not in metric_exporter.streams("rl.entropy")
    assert metric_exporter.number("rl.groups", {"rl.group.outcome": "all"}) == 0
    assert _rejected(metric_exporter) == {
        ("rl.entropy", "shape"): 8,
        ("rl.importance_ratio", "nonfinite"): 1,
        ("rl.mismatch.kl", "nonfinite"): 2,
        ("rl.response.length", "negative"): 1,
        ("rl.groups", "nonintegral"): 1,
        ("rl.groups", "incomplete_group"): 1,
        ("rl.importance_ratio", "missing"): 3,
        ("rl.joint", "unpaired"): 1,  # the negative length has no pair with its reward
    }
    telemetry.shutdown()


def test_staleness_health_counters(metric_exporter: RecordingMetricExporter) -> None:
    """Datasets are labels capped at max_datasets; tokens without a version are counted, never lag 0; drops for
    staleness count per dataset; the phase is an attribute."""
    telemetry = _telemetry(metric_exporter, max_datasets=2)
    telemetry.record_staleness(torch.tensor([10, 9, -1, -1]), 10, dataset="math", phase="in_flight")
    telemetry.record_staleness(torch.tensor([8.0, float("nan")]), 10, dataset="code", phase="in_queue")
    telemetry.record_staleness(torch.tensor([7]), 10, dataset="poetry")  # third dataset: _overflow
    telemetry.record_staleness_drops(3, dataset="math")
    telemetry.record_rewards([1.0, 0.0], dataset="code")
    telemetry.flush(EXPORT_WAIT_S)
    staleness = {
        labels: metric_exporter.exponential_point("rl.staleness", dict(labels)).count
        for labels in metric_exporter.streams("rl.staleness")
    }
    assert staleness == {
        (("rl.dataset", "math"), ("rl.staleness.phase", "in_flight")): 2,
        (("rl.dataset", "code"), ("rl.staleness.phase", "in_queue")): 1,
        (("rl.dataset", "_overflow"),): 1,
    }
    assert metric_exporter.numbers("rl.staleness.unversioned") == {
        (("rl.dataset", "math"),): 2,
        (("rl.dataset", "code"),): 1,
        (("rl.dataset", "_overflow"),): 0,
    }
    assert metric_exporter.number("rl.staleness.dropped", {"rl.dataset": "math"}) == 3
    assert metric_exporter.exponential_point("rl.reward", {"rl.dataset": "code", "rl.reward.fn": "total"}).count == 2
    assert _rejected(metric_exporter) == {("rl.dataset", "name_overflow"): 1}
    telemetry.shutdown()


def test_lifecycle_gauges(metric_exporter: RecordingMetricExporter) -> None:
    """Start time, ranks up/expected and the phase while running; rl.run.finished turns 1 at a clean shutdown."""
    telemetry = Telemetry(
        TelemetryConfig(run_id="life", rank=1, world_size=4, export_interval_s=60), metric_exporter=metric_exporter
    )
    telemetry.set_phase("generate")
    telemetry.set_phase("train")
    telemetry.flush(EXPORT_WAIT_S)
    assert metric_exporter.number("rl.run.finished") == 0
    assert (metric_exporter.number("rl.ranks.up"), metric_exporter.number("rl.ranks.expected")) == (1, 4)
    phases = {dict(labels)["rl.phase.name"]: value for labels, value in metric_exporter.numbers("rl.phase").items()}
    assert phases == {"generate": 0, "train": 1}
    assert metric_exporter.number("rl.run.start_time") == pytest.approx(time.time(), abs=60)
    telemetry.shutdown()
    assert metric_exporter.number("rl.run.finished") == 1


def test_exemplars_reach_dataset_streams(metric_exporter: RecordingMetricExporter) -> None:
    """Rewards and staleness recorded only per dataset still take the kept samples' exemplars: on the sample's
    dataset stream when it names one, else on the first stream of its reward function."""
    telemetry = _telemetry(metric_exporter, top_k=1, bottom_k=1)
    telemetry.step(1)
    telemetry.record_rewards([0.5, 0.75], dataset="math")
    telemetry.record_rewards([0.25], dataset="code")
    telemetry.record_staleness([3, 4], 5, dataset="math", phase="in_queue")
    telemetry.record_sample({"reward": 0.75, "staleness": 1, "dataset": "math", "episode_id": "m"})
    telemetry.record_sample({"reward": 0.25, "episode_id": "c"})
    telemetry.step(2)
    telemetry.flush(EXPORT_WAIT_S)
    exemplars = {
        labels: _episode_ids(point)
        for name in ("rl.reward", "rl.staleness")
        for labels, point in metric_exporter.streams(name).items()
    }
    assert exemplars == {
        (("rl.dataset", "code"), ("rl.reward.fn", "total")): ["c"],
        (("rl.dataset", "math"), ("rl.reward.fn", "total")): ["m"],
        (("rl.dataset", "math"), ("rl.staleness.phase", "in_queue")): ["m"],
    }
    telemetry.shutdown()


def _episode_ids(point: DataPoint) -> list[str]:
    """The episode ids of the point's exemplars, sorted."""
    ids: list[str] = []
    for exemplar in point.exemplars:
        assert exemplar.filtered_attributes is not None, exemplar
        episode = exemplar.filtered_attributes["rl.episode.id"]
        assert isinstance(episode, str), episode
        ids.append(episode)
    return sorted(ids)


_EXIT_SCRIPT = """
import sys
from otel_rl import Telemetry, TelemetryConfig
from tests.conftest import RecordingMetricExporter

class Reporting(RecordingMetricExporter):
    def shutdown(self, timeout_millis=30_000, **kwargs):
        print("finished", self.number("rl.run.finished"), flush=True)

telemetry = Telemetry(TelemetryConfig(run_id="exit", export_interval_s=60), metric_exporter=Reporting())
telemetry.record_rewards([1.0])
if sys.argv[1] == "raise":
    raise RuntimeError("the training loop crashed")
"""


@pytest.mark.parametrize(("ending", "finished"), [("return", 1), ("raise", 0)])
def test_process_exit_marks_the_run_finished_only_without_an_uncaught_exception(ending: str, finished: int) -> None:
    """Without an explicit shutdown the exit handler still exports; a process ending on an uncaught exception keeps
    rl.run.finished at 0, so RLRunEndedUncleanly fires for it and not for a clean end."""
    root = Path(__file__).parents[2]
    result = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT, ending], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert f"finished {finished}" in result.stdout, result.stderr
    assert (result.returncode != 0) == (ending == "raise")
