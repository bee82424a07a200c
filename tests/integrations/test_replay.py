"""What real trainers hand their logging layer, replayed through otel-rl's integrations with the default
configuration (issue 18): every key keeps its own (or canonical) series, nothing lands in ``_overflow``, and every
value is exact to float64. The inputs (keys, order and value types) come from the trainers' own code:
``tests/fixtures/trainer_inputs.py`` cites the upstream files. The OTLP exporters' encoder sees every export."""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
import otel_rl_contract as contract
import pytest
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
from opentelemetry.sdk.metrics.export import ExponentialHistogramDataPoint, HistogramDataPoint

import otel_rl
from otel_rl.tracking import MetricsDictLogger, canonical_key
from tests.conftest import EXPORT_WAIT_S, EncodingMetricExporter, attributes_of, duration_s
from tests.fixtures import trainer_inputs

_VERSION_KEYS = ("current_param_version", "param_version", "policy_version")


def _telemetry(exporter: EncodingMetricExporter, logs: InMemoryLogRecordExporter | None = None) -> otel_rl.Telemetry:
    return otel_rl.Telemetry(
        otel_rl.TelemetryConfig(run_id="replay", exporter="none", export_interval_s=60),
        metric_exporter=exporter,
        log_exporter=logs or InMemoryLogRecordExporter(),
    )


def _metric_points(exporter: EncodingMetricExporter) -> dict[str, dict[str, float]]:
    """key -> {"count", "sum", "max", "min"} of every exported ``rl.metric`` stream."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for labels, point in exporter.streams(contract.METRICS.histogram.name).items():
        assert isinstance(point, HistogramDataPoint | ExponentialHistogramDataPoint), labels
        out[dict(labels)[contract.METRIC_KEY]].update(count=point.count, sum=point.sum)
    for field, metric in (("max", contract.METRICS.maximum), ("min", contract.METRICS.minimum)):
        for labels, value in exporter.numbers(metric.name).items():
            out[dict(labels)[contract.METRIC_KEY]][field] = value
    return dict(out)


@pytest.mark.parametrize("rollout_correction", [False, True])
def test_a_verl_step_keeps_every_key_exact(rollout_correction: bool) -> None:
    """verl's GRPO step (81 keys; 113 with rollout correction) plus a validation step's 75 keys, logged through
    ``MetricsDictLogger`` as verl's ``Tracking`` calls it: one series per key under its canonical name, each value
    exact (np.float64, np.int32, Python ints and floats alike), no key in ``_overflow``."""
    exporter = EncodingMetricExporter()
    telemetry = _telemetry(exporter)
    step = trainer_inputs.verl_grpo_step(7, rollout_correction=rollout_correction, validation=True)
    expected_keys = (
        trainer_inputs.VERL_GRPO_STEP_KEYS_ROLLOUT_CORRECTION
        if rollout_correction
        else trainer_inputs.VERL_GRPO_STEP_KEYS
    )
    assert len(step) == expected_keys + trainer_inputs.VERL_VALIDATION_KEYS + 1  # and timing_s/testing
    MetricsDictLogger(telemetry).log(step, step=7)
    assert telemetry.flush(EXPORT_WAIT_S)
    points = _metric_points(exporter)
    assert contract.OVERFLOW not in points
    expected = {canonical_key(key): value for key, value in step.items() if not key.endswith(_VERSION_KEYS)}
    assert set(points) == set(expected)
    for key, value in expected.items():
        assert points[key] == {"count": 1, "sum": float(value), "max": float(value), "min": float(value)}, key
    assert not {labels: n for labels, n in exporter.numbers(contract.VALUES_REJECTED.name).items() if n}
    telemetry.shutdown(EXPORT_WAIT_S)


def test_verl_keys_longer_than_64_characters_keep_their_names() -> None:
    """A DAPO-style validation variable makes verl keys up to 72 characters; they are kept as they are."""
    exporter = EncodingMetricExporter()
    telemetry = _telemetry(exporter)
    validation = trainer_inputs.verl_validation(3, extra_infos=("acc", "overlong_reward"))
    longest = max(validation, key=len)
    assert len(longest) > 64
    MetricsDictLogger(telemetry).log(validation, step=3)
    assert telemetry.flush(EXPORT_WAIT_S)
    points = _metric_points(exporter)
    assert longest in points and contract.OVERFLOW not in points
    telemetry.shutdown(EXPORT_WAIT_S)


def test_trl_logs_are_forwarded_exactly_and_summaries_are_not() -> None:
    """TRL 1.16's per-step ``on_log`` (vLLM and KL keys included, a reward function that scored nothing logs
    None) and its end-of-training log: every training number goes exactly to the key TRL's W&B and TensorBoard
    loggers give it (``train/<key>``, canonical where the bridge knows it: ``kl/mean``, ``entropy/mean``), epoch
    included (``num_tokens`` is an integer-valued float past float32's precision); None is skipped, and of the
    end-of-training log only what W&B's history gets (epoch, tokens per second) is kept, not the summaries."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from otel_rl.trl import OtelRLCallback

    exporter = EncodingMetricExporter()
    telemetry = _telemetry(exporter)
    callback = OtelRLCallback(telemetry=telemetry)
    args, state = TrainingArguments(output_dir="unused", use_cpu=True, report_to=[]), TrainerState()
    logs = trainer_inputs.trl_log(10, use_vllm=True, beta=0.04, unscored=("think_format_reward",))
    end = {**trainer_inputs.trl_train_end(), "train_tokens_per_second": 1234.5}
    callback.on_log(args, state, TrainerControl(), logs=dict(logs))
    callback.on_log(args, state, TrainerControl(), logs=end)
    assert telemetry.flush(EXPORT_WAIT_S)
    points = _metric_points(exporter)
    forwarded = {canonical_key(f"train/{key}"): value for key, value in logs.items() if value is not None}
    assert {"kl/mean", "entropy/mean", "response_length/mean", "reward/mean", "reward/std", "train/loss"} <= set(
        forwarded
    )
    assert set(points) == {*forwarded, "train/train_tokens_per_second"}
    for key, value in forwarded.items():
        count = 2 if key == "train/epoch" else 1
        assert points[key]["count"] == count and value in (points[key]["max"], points[key]["min"]), key
    assert points["train/epoch"]["max"] == end["epoch"]
    tokens = forwarded["train/num_tokens"]
    assert tokens != float(np.float32(tokens)) or tokens < 2**24
    assert callback.errors == 0
    telemetry.shutdown(EXPORT_WAIT_S)


def test_torchforge_calls_record_every_key_and_sample() -> None:
    """torchforge's own record_metric calls of a rollout and a training step (166 calls, 8 of them samples):
    every numeric call lands under its key with its exact values; every sample dict becomes a record of its table,
    with its reward breakdown and without ``score``/``pad_id`` taken for rewards."""
    from otel_rl.torchforge import Reduce, record_metric

    exporter = EncodingMetricExporter()
    logs = InMemoryLogRecordExporter()
    telemetry = otel_rl.setup(
        otel_rl.TelemetryConfig(
            run_id="forge", exporter="none", export_interval_s=60, top_k=8, bottom_k=8, distinct_prompts=False
        ),
        metric_exporter=exporter,
        log_exporter=logs,
    )
    try:
        calls = trainer_inputs.torchforge_metric_calls(3)
        assert len(calls) == trainer_inputs.TORCHFORGE_METRIC_CALLS
        telemetry.step(3)
        for key, value, reduction in calls:
            record_metric(key, value, Reduce[reduction])
        telemetry.step(4)
        assert telemetry.flush(EXPORT_WAIT_S)
    finally:
        otel_rl.reset(5)
    values: dict[str, list[float]] = defaultdict(list)
    for key, value, reduction in calls:
        if reduction != "SAMPLE":
            values[key].append(float(value))
    points = _metric_points(exporter)
    assert set(points) == set(values)
    for key, recorded in values.items():
        assert (points[key]["count"], points[key]["max"], points[key]["min"]) == (
            len(recorded),
            max(recorded),
            min(recorded),
        ), key
    records = [record.log_record for record in logs.get_finished_logs()]
    assert len(records) == sum(reduction == "SAMPLE" for _, _, reduction in calls)
    for record in records:
        attributes = dict(record.attributes or {})
        assert attributes[contract.SAMPLE_TABLE] == trainer_inputs.TORCHFORGE_SAMPLE_TABLE
        breakdown = {
            key.removeprefix(contract.SAMPLE_REWARD_PREFIX)
            for key in attributes
            if key.startswith(contract.SAMPLE_REWARD_PREFIX)
        }
        assert breakdown == set(trainer_inputs.TORCHFORGE_REWARD_FUNCS)
        assert (
            attributes[contract.SAMPLE_EXTRA_PREFIX + "pad_id"] == 0
            or contract.SAMPLE_EXTRA_PREFIX + "pad_id" in attributes
        )


def test_verl_timings_become_phase_spans_and_tokens_a_counter() -> None:
    """verl's timed sections of a step become phase spans of that step (generate, score, train, sync, ...) with
    verl's exact durations, laid end to end up to the log; ``perf/total_num_tokens`` counts tokens trained on."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    exporter = EncodingMetricExporter()
    telemetry = otel_rl.Telemetry(
        otel_rl.TelemetryConfig(run_id="replay", exporter="none", export_interval_s=60),
        metric_exporter=exporter,
        log_exporter=InMemoryLogRecordExporter(),
        span_exporter=spans,
    )
    step = trainer_inputs.verl_grpo_step(4, rollout_correction=False)
    MetricsDictLogger(telemetry).log(step, step=4)
    assert telemetry.flush(EXPORT_WAIT_S) and telemetry.shutdown(EXPORT_WAIT_S)
    phases = {s.name: s for s in spans.get_finished_spans() if s.attributes and "rl.phase.name" in s.attributes}
    sections = {
        "generate": "gen",
        "score": "reward",
        "old_log_prob": "old_log_prob",
        "ref": "ref",
        "advantage": "adv",
        "train": "update_actor",
        "sync": "update_weights",
    }
    assert set(phases) == set(sections)
    for phase, section in sections.items():
        span = phases[phase]
        assert abs(duration_s(span) - step[f"timing_s/{section}"]) < 1e-6, phase
        assert attributes_of(span)["rl.step"] == 4
    ordered = sorted(phases.values(), key=lambda s: s.start_time or 0)
    assert all(a.end_time == b.start_time for a, b in itertools.pairwise(ordered))
    assert exporter.number(contract.TOKENS_TRAINED.name) == step["perf/total_num_tokens"]
