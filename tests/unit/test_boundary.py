"""The boundary between the user and otel-rl (issue 18): each defect found by trying the API the way verl, TRL,
torchforge and hostile callers do, pinned by its behaviour. Exports go through the OTLP exporters' own encoder
(``EncodingMetricExporter``), so "the next export succeeds" means what it means on the wire."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import numpy as np
import otel_rl_contract as contract
import pytest
import torch
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter

import otel_rl
from otel_rl.torchforge import Reduce, record_episode_sample, record_metric
from tests.conftest import EXPORT_WAIT_S, EncodingMetricExporter


@pytest.fixture
def exporter() -> EncodingMetricExporter:
    return EncodingMetricExporter()


@pytest.fixture
def logs() -> InMemoryLogRecordExporter:
    return InMemoryLogRecordExporter()


@pytest.fixture
def telemetry(exporter: EncodingMetricExporter, logs: InMemoryLogRecordExporter) -> Iterator[otel_rl.Telemetry]:
    instance = otel_rl.Telemetry(
        otel_rl.TelemetryConfig(run_id="boundary", exporter="none", export_interval_s=60),
        metric_exporter=exporter,
        log_exporter=logs,
    )
    yield instance
    instance.shutdown(EXPORT_WAIT_S)


def _rejected(exporter: EncodingMetricExporter) -> dict[tuple[str, str], float]:
    return {
        (dict(labels)[contract.SELF_METRIC], dict(labels)[contract.SELF_REASON]): value
        for labels, value in exporter.numbers(contract.VALUES_REJECTED.name).items()
    }


class _BrokenRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr fails")

    __str__ = __repr__


@pytest.mark.parametrize("staleness", [math.nan, "3", 2**70, -1, _BrokenRepr()])
def test_a_bad_sample_field_never_breaks_step_or_shutdown(
    exporter: EncodingMetricExporter, logs: InMemoryLogRecordExporter, staleness: object
) -> None:
    """A kept sample whose staleness is NaN, a string, a huge int, negative or unprintable: step() and shutdown()
    return, the record goes out without that field (counted), the final export is made and the run is finished."""
    telemetry = otel_rl.Telemetry(
        otel_rl.TelemetryConfig(run_id="bad-field", exporter="none", export_interval_s=60),
        metric_exporter=exporter,
        log_exporter=logs,
    )
    telemetry.step(1)
    telemetry.record_rewards([0.5])
    telemetry.record_staleness([3], 4)
    telemetry.record_sample(otel_rl.EpisodeSample(reward=0.5, staleness=cast(Any, staleness), response="r"))
    telemetry.step(2)
    assert telemetry.shutdown(EXPORT_WAIT_S)
    (record,) = logs.get_finished_logs()
    attributes = dict(record.log_record.attributes or {})
    assert contract.SAMPLE_STALENESS not in attributes
    assert attributes[contract.SAMPLE_REWARD] == 0.5 and attributes[contract.SAMPLE_STEP] == 1
    assert exporter.number(contract.RUN_FINISHED.name) == 1
    assert sum(count for (metric, _), count in _rejected(exporter).items() if metric == contract.SAMPLE_EVENT) == 1


@pytest.mark.parametrize(
    ("call", "metric"),
    [
        (lambda t: t.step(2**63), contract.STEP.name),
        (lambda t: t.set_policy_version(2**64 + 3), contract.POLICY_VERSION.name),
        (lambda t: t.record_staleness_drops(2**63), contract.STALENESS_DROPPED.name),
        (lambda t: t.record_staleness([1], 2**63), contract.STALENESS.histogram.name),
        (lambda t: t.step(-(2**63) - 1), contract.STEP.name),
    ],
)
def test_integers_beyond_int64_are_rejected_and_exports_keep_encoding(
    telemetry: otel_rl.Telemetry, exporter: EncodingMetricExporter, call: Any, metric: str
) -> None:
    """An integer OTLP cannot carry is rejected as "range" (or "negative"), and every export after it still
    encodes: before the boundary, one such value made every later export of the rank fail."""
    telemetry.step(5)
    call(telemetry)
    telemetry.record_rewards([1.0])
    assert telemetry.flush(EXPORT_WAIT_S)
    assert exporter.number(contract.STEP.name) == 5
    assert sum(count for (name, _), count in _rejected(exporter).items() if name == metric) >= 1


def test_a_counter_that_outgrows_int64_is_exported_as_a_double(
    telemetry: otel_rl.Telemetry, exporter: EncodingMetricExporter
) -> None:
    """Valid drops that add up past 2**63 keep being exported (as a double) instead of breaking every export."""
    for _ in range(3):
        telemetry.record_staleness_drops(2**62)
    assert telemetry.flush(EXPORT_WAIT_S)
    assert exporter.number(contract.STALENESS_DROPPED.name) == float(3 * 2**62)


def test_set_phase_with_an_unprintable_name_is_counted(
    telemetry: otel_rl.Telemetry, exporter: EncodingMetricExporter
) -> None:
    """A phase whose repr raises becomes ``_overflow`` and is counted; the call returns."""
    telemetry.set_phase(cast(Any, _BrokenRepr()))  # as from a caller without type checks
    assert telemetry.flush(EXPORT_WAIT_S)
    assert exporter.number(contract.PHASES.name, {contract.PHASE: contract.OVERFLOW}) == 1
    assert _rejected(exporter)[(contract.PHASES.name, "name_invalid")] == 1


@pytest.mark.parametrize(
    "value",
    [1e-6, 0.7, 50331651.0, np.float64(1e-6), np.float64(0.1), [0.1, 0.7, 1e-6], 2**70, [2**53 + 1.0]],
)
def test_python_and_float64_values_stay_exact(
    telemetry: otel_rl.Telemetry, exporter: EncodingMetricExporter, value: Any
) -> None:
    """Python floats, np.float64 scalars and float lists keep float64 precision: the exported max, min and sum are
    the exact values (verl's actor/lr 1e-6, TRL's num_tokens 50331651, a reward list's 0.7); before, they went
    through float32."""
    values = [float(v) for v in (value if isinstance(value, list) else [value])]
    telemetry.record_metric("key", value)
    telemetry.record_rewards(value)
    assert telemetry.flush(EXPORT_WAIT_S)
    for distribution, attrs in (
        (contract.METRICS, {contract.METRIC_KEY: "key"}),
        (contract.REWARDS, {contract.REWARD_FN: "total"}),
    ):
        assert exporter.number(distribution.maximum.name, attrs) == max(values)
        assert exporter.number(distribution.minimum.name, attrs) == min(values)
        histogram = exporter.exponential_point(distribution.histogram.name, attrs)
        assert histogram.sum == math.fsum(values) and histogram.count == len(values)


def test_none_inside_a_list_is_dropped_alone(telemetry: otel_rl.Telemetry, exporter: EncodingMetricExporter) -> None:
    """TRL reward functions return None for completions they do not score: each None is counted ("missing"), a
    string inside the list too ("type"), and every number of the list is kept (a bool is 1 or 0)."""
    telemetry.record_rewards([1.0, None, 0.25, "x", True, None, False], fn="accuracy")
    assert telemetry.flush(EXPORT_WAIT_S)
    histogram = exporter.exponential_point(contract.REWARDS.histogram.name, {contract.REWARD_FN: "accuracy"})
    assert (histogram.count, histogram.sum) == (4, 2.25)
    assert _rejected(exporter) == {("rl.reward", "missing"): 2, ("rl.reward", "type"): 1}


def test_rollout_fields_that_disagree_with_the_mask_are_rejected(
    telemetry: otel_rl.Telemetry, exporter: EncodingMetricExporter
) -> None:
    """Response lengths and group ids with another rollout count than the mask are rejected as "shape" (they were
    used with the mask ignored); the other fields of the call are kept."""
    mask = torch.ones(4, 3, dtype=torch.bool)
    telemetry.record_rollouts(
        mask=mask,
        response_lengths=torch.tensor([10, 20, 30]),
        group_ids=torch.tensor([0, 0, 1]),
        rewards=torch.tensor([1.0, 0.0, 1.0]),
        entropy=torch.full((4, 3), 0.5),
    )
    assert telemetry.flush(EXPORT_WAIT_S)
    rejected = _rejected(exporter)
    assert rejected[(contract.RESPONSE_LENGTHS.histogram.name, "shape")] == 3
    assert rejected[(contract.GROUPS.name, "shape")] == 3
    assert exporter.exponential_point(contract.ENTROPY.histogram.name).count == 12
    assert (("rl.group.outcome", "none"),) not in exporter.streams(contract.GROUPS.name)


@pytest.mark.parametrize("advantages", [torch.tensor([1j, 2j]), torch.zeros(2, 2, 2)])
def test_rejected_advantages_count_no_signs(
    telemetry: otel_rl.Telemetry, exporter: EncodingMetricExporter, advantages: torch.Tensor
) -> None:
    """Advantages rejected whole (complex dtype, three dimensions) count no advantage signs either."""
    telemetry.record_rollouts(advantages=advantages)
    assert telemetry.flush(EXPORT_WAIT_S)
    assert not exporter.streams(contract.ADVANTAGE_SIGNS.name)
    assert (
        sum(n for (metric, _), n in _rejected(exporter).items() if metric == contract.ADVANTAGES.histogram.name)
        == advantages.numel()
    )


def test_sparse_and_strided_tensors_are_read_like_dense_ones(
    telemetry: otel_rl.Telemetry, exporter: EncodingMetricExporter
) -> None:
    """A sparse entropy tensor is read as the dense tensor it stands for (it dropped the whole call, valid fields
    included); a transposed log-probability tensor and a non-contiguous advantage slice too."""
    dense = torch.tensor([[0.5, 0.0], [0.0, 2.0]])
    logprobs = torch.tensor([[-1.0, -2.0], [-0.5, -0.25]]).t()
    telemetry.record_rollouts(
        entropy=dense.to_sparse(),
        logprobs=logprobs,
        inference_logprobs=logprobs.clone(),
        advantages=torch.arange(8.0)[::4],
    )
    assert telemetry.flush(EXPORT_WAIT_S)
    entropy = exporter.exponential_point(contract.ENTROPY.histogram.name)
    assert (entropy.count, entropy.sum) == (4, 2.5)
    assert exporter.exponential_point(contract.IMPORTANCE_RATIO.histogram.name).count == 4
    assert exporter.number(contract.ADVANTAGES.maximum.name) == 4.0
    assert not _rejected(exporter)


def test_a_sample_with_hundreds_of_extras_keeps_its_identity(
    telemetry: otel_rl.Telemetry, logs: InMemoryLogRecordExporter
) -> None:
    """200 breakdown entries and 200 scalar extras: the record keeps id, step, selection, table and reward (the
    SDK's 128-attribute limit evicted them before), no attribute is evicted, and what does not fit as an attribute
    is in the body."""
    breakdown = {f"fn{i}": float(i) for i in range(200)}
    extra = {f"x{i}": i for i in range(200)}
    telemetry.step(3)
    telemetry.record_sample(otel_rl.EpisodeSample(reward=1.0, reward_breakdown=breakdown, extra=extra))
    telemetry.step(4)
    assert telemetry.flush(EXPORT_WAIT_S)
    (exported,) = logs.get_finished_logs()
    record = exported.log_record
    attributes = dict(record.attributes or {})
    for key in (
        contract.SAMPLE_ID,
        contract.SAMPLE_STEP,
        contract.SAMPLE_SELECTION,
        contract.SAMPLE_TABLE,
        contract.SAMPLE_REWARD,
    ):
        assert key in attributes, key
    assert exported.dropped_attributes == 0 and len(attributes) <= 128
    assert isinstance(record.body, Mapping), record.body
    body_extra = record.body["extra"]
    assert isinstance(body_extra, str), body_extra
    assert '"x199": 199' in body_extra and '"fn199": 199.0' in body_extra


def test_torchforge_shim_takes_malformed_samples(
    telemetry: otel_rl.Telemetry, exporter: EncodingMetricExporter, logs: InMemoryLogRecordExporter
) -> None:
    """A reward breakdown or extra that is not a mapping, and an array ``truncated``: no raise, the malformed fields
    are counted, the samples still go out."""

    class ArrayTruncated:
        episode_id = "e1"
        reward = 0.5
        truncated = np.array([True, False])
        reward_breakdown = None

    otel_rl._global._current = telemetry
    try:
        telemetry.step(1)
        record_metric("rollout/sample", {"reward": 1.0, "reward_breakdown": [1, 2], "extra": "text"}, Reduce.SAMPLE)
        record_episode_sample("rollout/sample", ArrayTruncated())
        telemetry.step(2)
        assert telemetry.flush(EXPORT_WAIT_S)
    finally:
        otel_rl._global._current = None
    assert len(logs.get_finished_logs()) == 2
    assert _rejected(exporter)[(contract.SAMPLE_EVENT, "type")] == 2


def test_metric_keys_take_a_cap_slot_only_with_a_kept_value(exporter: EncodingMetricExporter) -> None:
    """A key whose values are all rejected uses no slot of ``max_metric_keys``: the valid keys after it keep their
    own names."""
    telemetry = otel_rl.Telemetry(
        otel_rl.TelemetryConfig(run_id="cap", exporter="none", export_interval_s=60, max_metric_keys=2),
        metric_exporter=exporter,
    )
    telemetry.record_metric("table", {"a": 1})  # type: ignore[arg-type]
    telemetry.record_metric("strings", ["x", "y"])
    telemetry.record_metric("loss", 0.5)
    telemetry.record_metric("kl", 0.1)
    assert telemetry.flush(EXPORT_WAIT_S)
    keys = {dict(labels)[contract.METRIC_KEY] for labels in exporter.streams(contract.METRICS.histogram.name)}
    assert keys == {"loss", "kl"}
    telemetry.shutdown(EXPORT_WAIT_S)


def test_flush_with_a_zero_timeout_does_not_wait(exporter: EncodingMetricExporter) -> None:
    """``flush(0)`` returns at once while an export is stuck (it waited ``shutdown_timeout_s``: ``timeout_s or
    default``); a bad timeout is counted and the default used, so shutdown still makes its final export."""
    release = threading.Event()

    class Stuck(EncodingMetricExporter):
        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: object) -> Any:
            release.wait()
            return super().export(metrics_data, timeout_millis)

    stuck = Stuck()
    telemetry = otel_rl.Telemetry(
        otel_rl.TelemetryConfig(run_id="zero", exporter="none", export_interval_s=60, shutdown_timeout_s=600),
        metric_exporter=stuck,
    )
    results: list[bool] = []
    flushing = threading.Thread(target=lambda: results.append(telemetry.flush(0)), daemon=True)
    try:
        flushing.start()
        flushing.join(60)  # a liveness bound: the old code waited the 600 s default
        assert not flushing.is_alive() and results == [False]
    finally:
        release.set()
    assert telemetry.shutdown(cast(Any, "soon")) is True  # as from a caller without type checks
    assert _rejected(stuck)[("otel_rl.timeout", "type")] == 1


_PRED = np.array([3, 1, 4, 1, 5, 9])
_TARGET = np.array([3, 0, 4, 0, 5, 0])
_BOOLS: dict[str, Callable[[], Any]] = {
    "torch": lambda: torch.from_numpy(_PRED) == torch.from_numpy(_TARGET),
    "torch-strided": lambda: (torch.from_numpy(np.repeat(_PRED, 2)) == torch.from_numpy(np.repeat(_TARGET, 2)))[::2],
    "numpy": lambda: _PRED == _TARGET,
    "list": lambda: [bool(v) for v in (_PRED == _TARGET)],
    "numpy-scalars": lambda: list(_PRED == _TARGET),
}
"""``pred == target`` (three of six correct) in every form a caller has it."""


@pytest.mark.parametrize("form", sorted(_BOOLS))
def test_bools_are_rewards_and_metrics(
    telemetry: otel_rl.Telemetry, exporter: EncodingMetricExporter, form: str
) -> None:
    """A correctness mask is a reward and a metric of ones and zeros: record_rewards, record_metric and every value
    field of record_rollouts take bool tensors, arrays and lists, and record what 1.0/0.0 would; nothing is
    rejected."""
    correct = _BOOLS[form]
    telemetry.record_rewards(correct(), fn="correct")
    telemetry.record_rewards(correct(), fn="masked", mask=np.array([1, 1, 1, 0, 0, 0]))
    telemetry.record_metric("accuracy", correct())
    telemetry.record_rollouts(
        group_ids=[0, 0, 1, 1, 2, 2],
        rewards=correct(),
        advantages=correct(),
        response_lengths=correct(),
        versions_spanned=correct(),
        entropy=correct(),
        logprobs=correct(),
        inference_logprobs=correct(),
    )
    telemetry.record_rewards(True, fn="scalar")
    telemetry.record_metric("flag", np.bool_(False))
    assert telemetry.flush(EXPORT_WAIT_S)
    rewards = exporter.exponential_point(contract.REWARDS.histogram.name, {contract.REWARD_FN: "correct"})
    masked = exporter.exponential_point(contract.REWARDS.histogram.name, {contract.REWARD_FN: "masked"})
    accuracy = exporter.exponential_point(contract.METRICS.histogram.name, {contract.METRIC_KEY: "accuracy"})
    assert (rewards.count, rewards.sum, rewards.min, rewards.max) == (6, 3.0, 0.0, 1.0)
    assert (masked.count, masked.sum) == (3, 2.0)
    assert (accuracy.count, accuracy.sum) == (6, 3.0)
    for distribution in (
        contract.ADVANTAGES,
        contract.RESPONSE_LENGTHS,
        contract.TRAJECTORY_VERSIONS,
        contract.ENTROPY,
    ):
        histogram = exporter.exponential_point(distribution.histogram.name)
        assert (histogram.count, histogram.sum) == (6, 3.0), distribution
    ratio = exporter.exponential_point(contract.IMPORTANCE_RATIO.histogram.name)
    assert ratio.sum == 6.0  # exp(0): equal log-probabilities
    signs = {
        dict(labels)[contract.SIGN]: value for labels, value in exporter.numbers(contract.ADVANTAGE_SIGNS.name).items()
    }
    assert signs == {"positive": 3, "negative": 0, "zero": 3}
    outcomes = {
        dict(labels)[contract.GROUP_OUTCOME]: value for labels, value in exporter.numbers(contract.GROUPS.name).items()
    }
    assert outcomes == {"none": 0, "some": 3, "all": 0}
    assert exporter.exponential_point(contract.REWARDS.histogram.name, {contract.REWARD_FN: "scalar"}).sum == 1.0
    assert exporter.exponential_point(contract.METRICS.histogram.name, {contract.METRIC_KEY: "flag"}).count == 1
    assert _rejected(exporter) == {}


def test_bool_rewards_take_the_device_path_too() -> None:
    """The torch path (tensors off the CPU) reads a bool tensor as the CPU kernels do, per rollout and per token."""
    from otel_rl._record.buckets import ExponentialLayout
    from otel_rl._record.stats import ValueSummarizer

    class TorchValues(ValueSummarizer):
        kernel_devices = frozenset()

    correct = torch.tensor([[True, False], [False, True], [True, True]])
    for summarizer in (ValueSummarizer(ExponentialLayout(5)), TorchValues(ExponentialLayout(5))):
        rollouts = summarizer.summarize(correct, None)
        tokens = summarizer.summarize(correct, None, per_token=True)
        assert (rollouts.count, rollouts.total, tokens.count, tokens.total) == (3, 2.0, 6, 4.0)


@pytest.mark.parametrize("versions", [torch.tensor([True, False]), np.array([True, False]), [True, False], True])
def test_bool_versions_are_rejected_as_dtype(
    telemetry: otel_rl.Telemetry, exporter: EncodingMetricExporter, versions: Any
) -> None:
    """A policy version is an identity, not a truth value: record_staleness rejects bools as dtype, each counted."""
    telemetry.record_staleness(versions, 3)
    assert telemetry.flush(EXPORT_WAIT_S)
    assert _rejected(exporter) == {(contract.STALENESS.histogram.name, "dtype"): 1 if versions is True else 2}
