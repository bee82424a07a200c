"""The torchforge shim, called the way torchforge's own code calls forge.observability.metrics."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pytest
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter

import otel_rl
from otel_rl import torchforge
from otel_rl.torchforge import Reduce, record_episode_sample, record_metric
from tests.conftest import EXPORT_WAIT_S, RecordingMetricExporter


@dataclass
class Completion:
    """The part of torchforge's Completion an Episode reads."""

    text: str
    generator_version: int


@dataclass
class Episode:
    """Shaped like torchforge's GRPO Episode: ids and lengths, a completion, the reward and its breakdown."""

    episode_id: str
    pad_id: int
    request_len: int
    response_len: int
    target: Any | None = None
    completion: Completion | None = None
    reward: float | None = None
    reward_breakdown: dict[str, float] | None = None
    advantage: float | None = None
    truncated: bool = False
    request: str = ""

    @property
    def policy_version(self) -> int | None:
        return None if self.completion is None else self.completion.generator_version

    @property
    def response(self) -> str | None:
        return None if self.completion is None else self.completion.text


@pytest.fixture
def logs() -> InMemoryLogRecordExporter:
    return InMemoryLogRecordExporter()


@pytest.fixture
def telemetry(metric_exporter: RecordingMetricExporter, logs: InMemoryLogRecordExporter) -> Iterator[otel_rl.Telemetry]:
    config = otel_rl.TelemetryConfig(run_id="tf", export_interval_s=60, top_k=1, bottom_k=1)
    yield otel_rl.setup(config, metric_exporter=metric_exporter, log_exporter=logs)
    otel_rl.reset()


def _records(telemetry: otel_rl.Telemetry, logs: InMemoryLogRecordExporter) -> list[dict[str, Any]]:
    telemetry.step(99)
    telemetry.flush(EXPORT_WAIT_S)
    records: list[dict[str, Any]] = []
    for r in logs.get_finished_logs():
        body = r.log_record.body
        assert isinstance(body, Mapping), body
        records.append({**dict(r.log_record.attributes or {}), **body})
    return records


def test_episode_objects_become_samples(telemetry: otel_rl.Telemetry, logs: InMemoryLogRecordExporter) -> None:
    """record_episode_sample(table, episode) reads a torchforge Episode by attribute, breakdown included."""
    episode = Episode(
        episode_id="ep-1",
        pad_id=0,
        request_len=12,
        response_len=5,
        target=42,
        request="6*7=",
        completion=Completion(text="42", generator_version=3),
        reward=1.5,
        reward_breakdown={"correctness": 1.0, "format": 0.5, "reward": 1.5},
        advantage=0.25,
        truncated=True,
    )
    telemetry.step(1)
    record_episode_sample("rollout/sample", episode)
    (record,) = _records(telemetry, logs)
    assert record["rl.episode.id"] == "ep-1" and record["rl.policy.version"] == 3
    assert (record["prompt"], record["response"], record["target"]) == ("6*7=", "42", "42")
    assert (record["rl.reward"], record["rl.reward.correctness"], record["rl.reward.format"]) == (1.5, 1.0, 0.5)
    assert (record["rl.advantage"], record["rl.request.length"], record["rl.response.length"]) == (0.25, 12, 5)
    assert record["rl.sample.extra.truncated"] is True and record["rl.sample.table"] == "rollout/sample"


def test_each_table_keeps_its_own_extremes(telemetry: otel_rl.Telemetry, logs: InMemoryLogRecordExporter) -> None:
    """An eval table's samples are kept even when the train table has more extreme rewards (top/bottom per table)."""
    telemetry.step(1)
    for reward in (10.0, -10.0, 5.0):
        record_metric("train/sample", {"reward": reward, "response": f"t{reward}"}, Reduce.SAMPLE)
    for reward in (0.2, 0.1, 0.3):
        record_episode_sample("eval/sample", {"reward": reward, "response": f"e{reward}"})
    kept = {(r["rl.sample.table"], r["rl.sample.selection"], r["rl.reward"]) for r in _records(telemetry, logs)}
    assert kept == {
        ("train/sample", "top", 10.0),
        ("train/sample", "bottom", -10.0),
        ("eval/sample", "top", 0.3),
        ("eval/sample", "bottom", 0.1),
    }


def test_sample_dicts_in_torchforge_form(telemetry: otel_rl.Telemetry, logs: InMemoryLogRecordExporter) -> None:
    """A Reduce.SAMPLE dict flattens the breakdown into its keys (``reward`` is the total) and names the prompt
    ``prompt`` or ``request``; ``pad_id`` and unknown non-numeric keys go to extra, not dropped, and ``score`` (the
    reward again, torchforge's ranking key) is not a reward function."""
    telemetry.step(1)
    sample = {
        "episode_id": 7,
        "request": "1+1=",
        "response": "2",
        "reward": 1.0,
        "correctness": np.float32(1.0),
        "pad_id": 0,
        "note": "x",
        "score": 1.0,
    }
    record_metric("rollout/sample", sample, reduction=Reduce.SAMPLE)
    (record,) = _records(telemetry, logs)
    assert (record["prompt"], record["rl.reward"], record["rl.reward.correctness"]) == ("1+1=", 1.0, 1.0)
    assert record["rl.sample.extra.pad_id"] == 0 and record["rl.sample.extra.note"] == "x"
    assert "rl.reward.pad_id" not in record and "rl.reward.score" not in record


def test_numpy_scalars_and_the_reduction_keyword(
    telemetry: otel_rl.Telemetry, metric_exporter: RecordingMetricExporter
) -> None:
    """np.float32 / np.int64 values are numbers; ``reduction=`` is the keyword; every Reduce is exported the same."""
    record_metric("loss", np.float32(2.0), reduction=Reduce.MEAN)
    record_metric("loss", np.int64(-4), Reduce.STD)
    record_metric("loss", 1.0, reduction=Reduce.MAX)
    telemetry.flush(EXPORT_WAIT_S)
    key = {"rl.metric.key": "loss"}
    histogram = metric_exporter.exponential_point("rl.metric", key)
    assert (histogram.count, histogram.sum) == (3, -1.0)
    assert metric_exporter.number("rl.metric.squares", key) == 21.0
    assert (metric_exporter.number("rl.metric.max", key), metric_exporter.number("rl.metric.min", key)) == (2.0, -4.0)


def test_bad_input_never_raises_and_is_counted(
    telemetry: otel_rl.Telemetry, metric_exporter: RecordingMetricExporter, logs: InMemoryLogRecordExporter
) -> None:
    """A non-numeric value, a sample that is neither dict nor Episode, and an unknown reduction never raise: the
    first two are dropped and counted, the value of the third is kept."""
    telemetry.step(1)
    record_metric("loss", "nan-ish")
    record_episode_sample("rollout/sample", object())
    record_metric("loss", 3.0, reduction=cast(Any, "mean"))  # as from a caller without type checks
    telemetry.flush(EXPORT_WAIT_S)
    rejected = metric_exporter.number(
        "otel_rl.values.rejected", {"otel_rl.metric": "rl.metric", "otel_rl.reason": "type"}
    )
    assert rejected == 1
    assert metric_exporter.number("otel_rl.samples.dropped", {"otel_rl.reason": "type"}) == 1
    assert metric_exporter.exponential_point("rl.metric", {"rl.metric.key": "loss"}).count == 1
    assert _records(telemetry, logs) == []


def test_calls_before_setup_are_warned_no_ops(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before otel_rl.setup() nothing raises (torchforge skips and warns once): one warning, nothing configured."""
    monkeypatch.setattr(torchforge, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="otel_rl.torchforge"):
        record_metric("loss", 1.0)
        record_episode_sample("rollout/sample", {"reward": 1.0})
    assert otel_rl._global.current() is None
    assert len([r for r in caplog.records if "otel_rl.setup()" in r.getMessage()]) == 1


def test_forge_disable_metrics_turns_calls_off(
    telemetry: otel_rl.Telemetry, metric_exporter: RecordingMetricExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FORGE_DISABLE_METRICS=true makes every call a no-op, as in torchforge."""
    monkeypatch.setenv("FORGE_DISABLE_METRICS", "true")
    record_metric("loss", 1.0)
    monkeypatch.setenv("FORGE_DISABLE_METRICS", "false")
    record_metric("kl", 1.0)
    telemetry.flush(EXPORT_WAIT_S)
    keys = {dict(a)["rl.metric.key"] for (name, a) in metric_exporter.latest() if name == "rl.metric"}
    assert keys == {"kl"}
