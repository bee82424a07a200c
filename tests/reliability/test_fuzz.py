"""Bad input, fuzzed: the hot path never raises, samples cannot overwrite contract attributes, configuration errors
raise ValueError/TypeError naming the setting (issue 7, 2). No stack: in-memory exporters only."""

from __future__ import annotations

import dataclasses
import os
import math
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter

import otel_rl
from otel_rl import _names
from tests.conftest import RecordingMetricExporter

FUZZ = settings(max_examples=int(os.environ.get("OTEL_RL_FUZZ_EXAMPLES", "150")), deadline=None, suppress_health_check=list(HealthCheck))

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.complex_numbers(allow_nan=True),
)
_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int32, torch.int64,
           torch.uint8, torch.bool, torch.complex64]  # fmt: skip


@st.composite
def tensors(draw: st.DrawFn) -> Any:
    shape = draw(st.lists(st.integers(0, 5), max_size=3))
    dtype = draw(st.sampled_from(_DTYPES))
    values = torch.randn(shape, dtype=torch.float64) * draw(st.sampled_from([1.0, 1e3, 1e40]))
    if draw(st.booleans()) and values.numel():
        values.view(-1)[0] = draw(st.sampled_from([math.nan, math.inf, -math.inf, -5.0]))
    tensor = values.to(dtype)
    return tensor if draw(st.booleans()) else tensor.numpy() if dtype not in (torch.bfloat16,) else tensor


inputs = st.one_of(
    scalars,
    tensors(),
    st.lists(scalars, max_size=6),
    st.lists(st.lists(st.floats(), max_size=3), max_size=3),  # ragged
    st.dictionaries(st.text(max_size=5), scalars, max_size=3),
    st.just(np.array(["a", "b"], dtype=object)),
    st.just(torch.empty(0)),
    st.just(object()),
)
names = st.one_of(st.text(max_size=80), st.none(), st.integers(), st.binary(max_size=10), st.just("x" * 10_000))
RESERVED = ["rl.reward", "rl.step", "rl.sample.selection", "rl.episode.id", "rl.policy.version", "rl.staleness",
            "rl.sample.truncated", "rl.advantage", "rl.reward.total", "", "..", "rl.sample.extra.x"]  # fmt: skip
keys = st.one_of(st.sampled_from(RESERVED), st.text(max_size=30), st.integers(), st.none())


def _deep(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


class _Weird:
    def __repr__(self) -> str:
        raise RuntimeError("repr fails")


extras = st.dictionaries(
    keys,
    st.one_of(scalars, st.just(_deep(5000)), st.just({1, 2}), st.just(_Weird()), st.just(float("nan")),
              st.lists(scalars, max_size=3), st.just("z" * 3_000_000)),  # fmt: skip
    max_size=5,
)
texts = st.one_of(st.none(), st.text(max_size=50), st.binary(max_size=50), st.just(b"\xff\xfe\x80" * 1000),
                  st.just("é" * 2_000_000), st.integers())  # fmt: skip


@st.composite
def samples(draw: st.DrawFn) -> Any:
    fields = {
        "reward": draw(st.one_of(st.floats(), st.integers(), st.text(max_size=5), st.none(), tensors())),
        "episode_id": draw(st.one_of(st.none(), st.text(max_size=10), st.integers(), st.just(_Weird()))),
        "policy_version": draw(st.one_of(st.none(), st.integers(), st.floats(), st.just(torch.tensor(3)))),
        "prompt": draw(texts),
        "response": draw(texts),
        "target": draw(texts),
        "reward_breakdown": draw(
            st.one_of(st.dictionaries(keys, st.one_of(st.floats(), st.text(max_size=3)), max_size=3), st.just([1]))
        ),
        "advantage": draw(st.one_of(st.none(), st.floats())),
        "staleness": draw(st.one_of(st.none(), st.integers())),
        "extra": draw(extras),
    }
    if draw(st.booleans()):
        return fields | draw(st.dictionaries(st.text(max_size=8), scalars, max_size=2))
    try:
        return otel_rl.EpisodeSample(**fields)
    except Exception:  # noqa: BLE001 - a frozen dataclass does not validate; construction never fails
        return fields


@pytest.fixture
def telemetry() -> Iterator[tuple[otel_rl.Telemetry, InMemoryLogRecordExporter]]:
    logs = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    config = otel_rl.TelemetryConfig(run_id="fuzz", rank=0, world_size=1, top_k=3, bottom_k=3, random_k=2,
                                     export_interval_s=30.0, sample_text_budget_bytes=1024)  # fmt: skip
    instance = otel_rl.Telemetry(config, metric_exporter=RecordingMetricExporter(), log_exporter=logs)
    yield instance, logs
    assert instance.shutdown(10)


@FUZZ
@given(data=st.data())
def test_recording_calls_never_raise(telemetry: tuple[otel_rl.Telemetry, Any], data: st.DataObject) -> None:
    """Any values, masks, names, versions and steps: record_rewards/metric/staleness, step and
    set_policy_version return normally (bad parts are counted, not raised)."""
    instance, _ = telemetry
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(data.draw(st.integers(1, 4))):
            call = data.draw(st.sampled_from(["rewards", "metric", "staleness", "step", "version"]))
            values, mask = data.draw(inputs), data.draw(st.one_of(st.none(), inputs))
            if call == "rewards":
                instance.record_rewards(values, fn=data.draw(names), mask=mask)  # type: ignore[arg-type]
            elif call == "metric":
                instance.record_metric(data.draw(names), values, mask=mask)  # type: ignore[arg-type]
            elif call == "staleness":
                instance.record_staleness(values, data.draw(st.one_of(st.integers(-(2**70), 2**70), scalars)), mask=mask)
            elif call == "step":
                instance.step(data.draw(st.one_of(st.integers(-(2**70), 2**70), scalars)))
            else:
                instance.set_policy_version(data.draw(scalars))


@FUZZ
@given(batch=st.lists(samples(), min_size=1, max_size=6), step=st.integers(0, 2**40))
def test_samples_never_raise_and_cannot_overwrite_contract_attributes(
    telemetry: tuple[otel_rl.Telemetry, InMemoryLogRecordExporter], batch: list[Any], step: int
) -> None:
    """Arbitrary samples (non-UTF-8 bytes, 2 MB texts, deep or non-JSON extras, reserved names in extra and the
    breakdown) never raise; every exported record has the contract attributes of its own sample and step,
    extras only under rl.sample.extra., texts within the byte budget."""
    instance, logs = telemetry
    logs.clear()
    instance.step(step)
    for sample in batch:
        instance.record_sample(sample)
    instance.step(step + 1)
    assert instance.flush(10)
    rewards = {_reward(sample) for sample in batch} - {None}
    for exported in logs.get_finished_logs():
        record = exported.log_record
        attributes = dict(record.attributes or {})
        assert attributes["rl.step"] == step
        assert attributes["rl.sample.selection"] in ("top", "bottom", "random")
        assert attributes["rl.sample.table"] == "samples"
        assert attributes["rl.reward"] in rewards or math.isnan(attributes["rl.reward"])  # type: ignore[arg-type]
        assert isinstance(attributes[_names.SAMPLE_TRUNCATED], bool)
        for key in attributes:
            assert key in _CONTRACT or key.startswith(("rl.reward.", _names.SAMPLE_EXTRA_PREFIX)), key
        assert isinstance(record.body, dict)
        for value in record.body.values():
            assert len(value.encode("utf-8")) <= 1024


_CONTRACT = {"rl.sample.id", "rl.step", "rl.sample.selection", "rl.sample.table", "rl.episode.id", "rl.policy.version", "rl.reward", "rl.advantage",
             "rl.staleness", "rl.request.length", "rl.response.length", _names.SAMPLE_TRUNCATED}  # fmt: skip


def _reward(sample: Any) -> float | None:
    reward = sample.reward if isinstance(sample, otel_rl.EpisodeSample) else sample.get("reward")
    try:
        return float(reward)
    except Exception:  # noqa: BLE001
        return None


def test_huge_inputs_and_hundreds_of_reward_fns() -> None:
    """A 4M-value tensor, a 16 MB response and 500 reward-fn names: no raise, the cap folds names into _overflow,
    every value is counted once."""
    metrics = RecordingMetricExporter()
    config = otel_rl.TelemetryConfig(run_id="huge", rank=0, world_size=1, export_interval_s=30.0)
    instance = otel_rl.Telemetry(config, metric_exporter=metrics, log_exporter=InMemoryLogRecordExporter())  # type: ignore[no-untyped-call]
    try:
        instance.record_rewards(torch.zeros(4_000_000))
        instance.record_sample(otel_rl.EpisodeSample(reward=1.0, response="x" * 16_000_000))
        for index in range(500):
            instance.record_rewards([1.0, -1.0], fn=f"fn_{index}")
        assert instance.flush(10)
    finally:
        instance.shutdown(10)
    latest = metrics.latest()
    counts = {dict(attrs).get(_names.REWARD_FN): point.count for (name, attrs), point in latest.items()  # type: ignore[attr-defined]
              if name == _names.REWARDS.histogram.name}  # fmt: skip
    assert counts["total"] == 4_000_000
    assert len(counts) == config.max_reward_fns + 1  # 32 names ("total" is one of them), then _overflow
    assert counts[_names.OVERFLOW] == 2 * (500 - (config.max_reward_fns - 1))


_FIELDS = [f.name for f in dataclasses.fields(otel_rl.TelemetryConfig)]


@FUZZ
@given(
    overrides=st.dictionaries(
        st.sampled_from([*_FIELDS, "unknown_setting", "exporter_kind"]),
        st.one_of(scalars, st.lists(scalars, max_size=3), st.tuples(st.floats(), st.floats()), st.just(()),
                  st.dictionaries(scalars, scalars, max_size=2), st.just(print)),  # fmt: skip
        min_size=1,
        max_size=3,
    )
)
def test_configuration_errors_name_the_setting(overrides: dict[str, Any]) -> None:
    """TelemetryConfig with arbitrary values either builds or raises ValueError/TypeError naming one of the
    settings given (never another exception type)."""
    settings_ = {"run_id": "cfg", "rank": 0, "world_size": 1, "exporter": "none", **overrides}
    try:
        otel_rl.TelemetryConfig(**settings_)
    except (ValueError, TypeError) as error:
        message = str(error)
        assert any(name in message for name in settings_), message
