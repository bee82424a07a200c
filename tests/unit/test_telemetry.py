"""The Telemetry facade with the real SDK: exported points, samples, bad input, and a failing collector."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import pytest
import torch
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.metrics.export import HistogramDataPoint, MetricExportResult, MetricsData
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_rl import EpisodeSample, Telemetry, TelemetryConfig
from otel_rl._record.buckets import ExponentialLayout
from tests.conftest import EXPORT_WAIT_S, RecordingMetricExporter, attributes_of

BOUNDS = (-1.0, 0.0, 1.0)


def make(exporter: RecordingMetricExporter, logs: LogRecordExporter | None = None, **settings: Any) -> Telemetry:
    config = TelemetryConfig(
        run_id="run-t",
        rank=0,
        world_size=1,
        histogram="explicit",
        reward_bounds=BOUNDS,
        export_interval_s=60,
        **settings,
    )
    return Telemetry(
        config,
        metric_exporter=exporter,
        log_exporter=logs or InMemoryLogRecordExporter(),
        span_exporter=InMemorySpanExporter(),
    )


def rejected(exporter: RecordingMetricExporter) -> dict[tuple[str, str], float]:
    return {
        (dict(labels)["otel_rl.metric"], dict(labels)["otel_rl.reason"]): value
        for labels, value in exporter.numbers("otel_rl.values.rejected").items()
    }


def test_negative_rewards_are_exported_with_exact_totals(metric_exporter: RecordingMetricExporter) -> None:
    """All-negative rewards give a negative histogram sum, exact buckets, and monotone positive/negative parts."""
    telemetry = make(metric_exporter)
    telemetry.record_rewards(torch.tensor([-3.0, -0.5, -0.25]), fn="format")
    telemetry.record_rewards(np.array([-1.0]), fn="format")
    assert telemetry.flush(EXPORT_WAIT_S)
    key = {"rl.reward.fn": "format"}
    histogram = metric_exporter.histogram_point("rl.reward", key)
    assert (histogram.count, histogram.sum) == (4, -4.75)
    assert list(histogram.bucket_counts) == [2, 2, 0, 0]
    assert (histogram.min, histogram.max) == (-3.0, -0.25)
    assert metric_exporter.number("rl.reward.negative", key) == 4.75
    assert metric_exporter.number("rl.reward.positive", key) == 0
    assert metric_exporter.number("rl.reward.squares", key) == pytest.approx(9 + 0.25 + 0.0625 + 1)
    assert metric_exporter.number("rl.reward.max", key) == -0.25
    assert metric_exporter.number("rl.reward.min", key) == -3.0
    telemetry.shutdown()


def test_points_are_cumulative_with_a_stable_start(metric_exporter: RecordingMetricExporter) -> None:
    """Two exports: the second carries running totals and the same start time; with no hold, extremes are per
    export window."""
    telemetry = make(metric_exporter, extremes_hold_s=1e-9)
    telemetry.record_rewards([0.5])
    telemetry.flush(EXPORT_WAIT_S)
    telemetry.record_rewards([-0.5])
    telemetry.flush(EXPORT_WAIT_S)
    first, second = (
        next(m for m in data.resource_metrics[0].scope_metrics[0].metrics if m.name == "rl.reward").data.data_points[0]
        for data in metric_exporter.exports[:2]
    )
    assert isinstance(first, HistogramDataPoint) and isinstance(second, HistogramDataPoint)
    assert (first.count, second.count, second.sum) == (1, 2, 0.0)
    assert first.start_time_unix_nano == second.start_time_unix_nano < second.time_unix_nano
    assert metric_exporter.number("rl.reward.max", {"rl.reward.fn": "total"}) == -0.5
    telemetry.shutdown()


def test_extremes_are_held_across_exports(metric_exporter: RecordingMetricExporter) -> None:
    """Within extremes_hold_s, a max goes out again with later exports (the collector keeps only a rank's newest
    point per aggregation interval); after the hold it gives way to newer values."""
    now = [10**12]
    config = TelemetryConfig(
        run_id="hold", histogram="explicit", reward_bounds=BOUNDS, export_interval_s=60, extremes_hold_s=5
    )
    telemetry = Telemetry(
        config, metric_exporter=metric_exporter, log_exporter=InMemoryLogRecordExporter(), clock=lambda: now[0]
    )
    total = {"rl.reward.fn": "total"}
    telemetry.record_rewards([9.0])
    telemetry.flush(EXPORT_WAIT_S)
    now[0] += 2 * 10**9
    telemetry.record_rewards([0.125])
    telemetry.flush(EXPORT_WAIT_S)
    assert metric_exporter.number("rl.reward.max", total) == 9.0
    now[0] += 6 * 10**9
    telemetry.record_rewards([0.25])
    telemetry.flush(EXPORT_WAIT_S)
    assert metric_exporter.number("rl.reward.max", total) == 0.25
    telemetry.shutdown()


def test_failed_export_keeps_the_window_extremes(metric_exporter: RecordingMetricExporter) -> None:
    """A max seen during a failed export still goes out with the next successful one."""
    telemetry = make(metric_exporter)
    metric_exporter.fail = True
    telemetry.record_rewards([9.0])
    telemetry.flush(EXPORT_WAIT_S)
    metric_exporter.fail = False
    telemetry.record_rewards([0.1])
    telemetry.flush(EXPORT_WAIT_S)
    assert metric_exporter.number("rl.reward.max", {"rl.reward.fn": "total"}) == 9.0
    assert metric_exporter.number("otel_rl.export.failures", {"otel_rl.signal": "metrics"}) == 1
    telemetry.shutdown()


def test_staleness_and_policy_version(metric_exporter: RecordingMetricExporter) -> None:
    """Per-token versions with a mask give the staleness histogram, its extremes, and rl.policy.version."""
    telemetry = make(metric_exporter, staleness_bounds=(0, 1, 2))
    versions = torch.tensor([[10, 9, 7], [8, 8, 12]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 1]])
    telemetry.record_staleness(versions, 10, mask=mask)
    telemetry.flush(EXPORT_WAIT_S)
    histogram = metric_exporter.histogram_point("rl.staleness")
    assert (histogram.count, histogram.sum, list(histogram.bucket_counts)) == (4, 6, [1, 1, 1, 1])
    assert (metric_exporter.number("rl.staleness.max"), metric_exporter.number("rl.staleness.min")) == (3, 0)
    assert metric_exporter.number("rl.policy.version") == 10
    assert rejected(metric_exporter) == {("rl.staleness", "negative"): 1}
    telemetry.shutdown()


@pytest.mark.parametrize(
    ("call", "metric", "reason", "count"),
    [
        (lambda t: t.record_rewards(torch.ones(3), mask=torch.ones(2)), "rl.reward", "shape", 3),
        (lambda t: t.record_rewards("abc"), "rl.reward", "type", 1),
        (lambda t: t.record_rewards(torch.ones(2, dtype=torch.complex64)), "rl.reward", "dtype", 2),
        (lambda t: t.record_rewards([1.0, float("inf"), float("nan")]), "rl.reward", "nonfinite", 2),
        (lambda t: t.record_staleness(torch.tensor([1, 2]), "ten"), "rl.staleness", "type", 2),
        (lambda t: t.record_staleness(torch.tensor([1, 2]), 2.5), "rl.staleness", "nonintegral", 2),
        (lambda t: t.record_staleness(torch.tensor([1, 2]), 2**64), "rl.staleness", "range", 2),
        (lambda t: t.record_staleness(torch.tensor([1, 20]), 10), "rl.staleness", "negative", 1),
        (lambda t: t.record_sample({"reward": 1.0, "scroe": 2}), "rl.sample", "unknown_key", 1),
    ],
)
def test_bad_input_never_raises_and_is_counted(
    metric_exporter: RecordingMetricExporter, call: Callable[[Telemetry], object], metric: str, reason: str, count: int
) -> None:
    """Bad input on the hot path is dropped, counted by metric and reason, and does not raise."""
    telemetry = make(metric_exporter)
    call(telemetry)
    telemetry.flush(EXPORT_WAIT_S)
    assert rejected(metric_exporter)[(metric, reason)] == count
    telemetry.shutdown()


def test_valid_part_of_a_call_is_kept(metric_exporter: RecordingMetricExporter) -> None:
    """NaN among valid rewards: the valid ones are recorded, the NaN counted."""
    telemetry = make(metric_exporter)
    telemetry.record_rewards([1.0, float("nan"), -1.0])
    telemetry.flush(EXPORT_WAIT_S)
    assert metric_exporter.histogram_point("rl.reward", {"rl.reward.fn": "total"}).count == 2
    telemetry.shutdown()


def test_exponential_points_carry_exact_sides_and_the_recorded_count(metric_exporter: RecordingMetricExporter) -> None:
    """With the default exponential form, a cumulative point holds each side trimmed to its used span at the
    configured scale, exact zeros in the zero bucket, min/max; NaN/inf are rejected and counted, the rest kept; the
    self-check counter matches the histogram's count."""
    telemetry = Telemetry(
        TelemetryConfig(run_id="expo", histogram_scale=3, export_interval_s=60), metric_exporter=metric_exporter
    )
    telemetry.record_rewards(torch.tensor([1.0, 2.5, float("nan"), 0.0, -0.3, float("inf"), 1.0], dtype=torch.float64))
    telemetry.record_rewards([100.0])
    telemetry.flush(EXPORT_WAIT_S)
    point = metric_exporter.exponential_point("rl.reward", {"rl.reward.fn": "total"})
    layout = ExponentialLayout(3)
    assert (point.scale, point.count, point.zero_count, point.min, point.max) == (3, 6, 1, -0.3, 100.0)
    assert point.sum == pytest.approx(104.2)
    positive = {point.positive.offset + i: n for i, n in enumerate(point.positive.bucket_counts) if n}
    assert positive == {layout.index(1.0): 2, layout.index(2.5): 1, layout.index(100.0): 1}
    assert point.positive.bucket_counts[0] and point.positive.bucket_counts[-1]
    assert (point.negative.offset, list(point.negative.bucket_counts)) == (layout.index(0.3), [1])
    assert rejected(metric_exporter) == {("rl.reward", "nonfinite"): 2}
    assert metric_exporter.number("otel_rl.values.recorded", {"otel_rl.metric": "rl.reward"}) == 6
    telemetry.shutdown()


def test_reward_fn_cardinality_is_capped(metric_exporter: RecordingMetricExporter) -> None:
    """Beyond max_reward_fns distinct names, rewards go to rl.reward.fn=_overflow and are counted."""
    telemetry = make(metric_exporter, max_reward_fns=3)
    for index in range(200):
        telemetry.record_rewards([1.0], fn=f"fn{index}")
    telemetry.record_rewards([1.0], fn=cast(Any, 123))  # a caller without type checks
    telemetry.flush(EXPORT_WAIT_S)
    fns = {dict(labels)["rl.reward.fn"] for labels in metric_exporter.streams("rl.reward")}
    assert fns == {"fn0", "fn1", "fn2", "_overflow"}
    assert metric_exporter.histogram_point("rl.reward", {"rl.reward.fn": "_overflow"}).count == 198
    assert rejected(metric_exporter) == {("rl.reward", "name_overflow"): 197, ("rl.reward", "name_invalid"): 1}
    telemetry.shutdown()


def test_samples_become_log_records_at_the_step_boundary(metric_exporter: RecordingMetricExporter) -> None:
    """Top and bottom samples of step 1 are emitted as rl.sample records when step 2 begins."""
    logs = InMemoryLogRecordExporter()
    telemetry = make(metric_exporter, logs, top_k=1, bottom_k=1)
    telemetry.step(1)
    for index, reward in enumerate([0.2, 0.9, -0.7, 0.1]):
        telemetry.record_sample(EpisodeSample(reward=reward, episode_id=f"e{index}", prompt="2+2?", response="4"))
    telemetry.step(2)
    telemetry.flush(EXPORT_WAIT_S)
    records = [r.log_record for r in logs.get_finished_logs()]
    assert [
        (r.event_name, attributes_of(r)["rl.sample.selection"], attributes_of(r)["rl.episode.id"]) for r in records
    ] == [
        ("rl.sample", "top", "e1"),
        ("rl.sample", "bottom", "e2"),
    ]
    assert attributes_of(records[0])["rl.step"] == 1 and records[0].body == {"prompt": "2+2?", "response": "4"}
    assert metric_exporter.number("otel_rl.samples.exported") == 2
    assert metric_exporter.number("rl.step") == 2
    telemetry.shutdown()


class _FailingLogs(LogRecordExporter):
    def export(self, batch: object) -> LogRecordExportResult:
        return LogRecordExportResult.FAILURE

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def test_sample_queue_is_bounded_and_drops_are_counted(metric_exporter: RecordingMetricExporter) -> None:
    """With the log store unreachable, at most sample_queue_size records wait; older ones are dropped and counted."""
    telemetry = make(metric_exporter, _FailingLogs(), top_k=5, bottom_k=5, sample_queue_size=8)
    for step in range(5):
        telemetry.step(step)
        for index in range(10):
            telemetry.record_sample(EpisodeSample(reward=float(index)))
    telemetry.step(5)
    telemetry.flush(EXPORT_WAIT_S)
    assert metric_exporter.number("otel_rl.samples.dropped", {"otel_rl.reason": "queue_full"}) == 50 - 8
    assert metric_exporter.number("otel_rl.export.failures", {"otel_rl.signal": "logs"}) >= 1
    telemetry.shutdown(1)


class _HangingMetrics(RecordingMetricExporter):
    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object) -> MetricExportResult:
        self.release.wait(30)
        return super().export(metrics_data, timeout_millis)


def test_shutdown_cannot_hang_on_a_hung_collector() -> None:
    """An exporter that hangs forever does not hold shutdown past its timeout, nor block recording."""
    exporter = _HangingMetrics()
    telemetry = make(exporter)
    telemetry.record_rewards([1.0])
    telemetry.flush(0.1)
    started = time.monotonic()
    telemetry.record_rewards(torch.ones(1000))
    assert telemetry.shutdown(0.5) is False
    assert time.monotonic() - started < 5
    exporter.release.set()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_unreachable_collector_neither_blocks_nor_raises(protocol: Literal["grpc", "http/protobuf"]) -> None:
    """Real OTLP exporters against a closed port: recording stays fast, failures are counted, shutdown is bounded."""
    config = TelemetryConfig(
        run_id="r",
        endpoint=f"http://127.0.0.1:{_closed_port()}",
        protocol=protocol,
        export_interval_s=0.2,
        export_timeout_s=0.5,
        shutdown_timeout_s=2,
    )
    telemetry = Telemetry(config)
    started = time.monotonic()
    for step in range(20):
        telemetry.step(step)
        telemetry.record_rewards(torch.randn(512))
        telemetry.record_staleness(torch.randint(0, 5, (4096,)), 5)
        telemetry.record_sample(EpisodeSample(reward=0.0, response="r"))
    recording = time.monotonic() - started
    time.sleep(1.5)
    failures = telemetry._pipeline.store.counter_value(  # the count exists only in memory: nothing could send it
        __import__("otel_rl_contract", fromlist=["x"]).EXPORT_FAILURES, (("otel_rl.signal", "metrics"),)
    )
    started = time.monotonic()
    telemetry.shutdown()
    assert failures >= 1
    assert recording < 5 and time.monotonic() - started < 6


def test_span_events_carry_the_samples(metric_exporter: RecordingMetricExporter) -> None:
    """With samples_as_span_events, the rank's span of each step carries one rl.sample event per kept sample, and
    the records name that span."""
    spans = InMemorySpanExporter()
    config = TelemetryConfig(run_id="r", samples_as_span_events=True, top_k=1, bottom_k=1, export_interval_s=60)
    logs = InMemoryLogRecordExporter()
    telemetry = Telemetry(config, metric_exporter=metric_exporter, log_exporter=logs, span_exporter=spans)
    telemetry.step(7)
    telemetry.record_sample(EpisodeSample(reward=1.0, response="a"))
    telemetry.record_sample(EpisodeSample(reward=0.0, response="b"))
    telemetry.step(8)
    telemetry.shutdown()
    (span,) = [s for s in spans.get_finished_spans() if s.name == "rl.rank.step" and attributes_of(s)["rl.step"] == 7]
    assert [attributes_of(e)["response"] for e in span.events] == ["a", "b"]
    record = logs.get_finished_logs()[0].log_record
    assert record.trace_id == span.context.trace_id and record.span_id == span.context.span_id
    assert [attributes_of(e)["rl.sample.id"] for e in span.events] == [
        attributes_of(r.log_record)["rl.sample.id"] for r in logs.get_finished_logs()
    ]


def test_every_sample_record_has_its_own_id(metric_exporter: RecordingMetricExporter) -> None:
    """rl.sample.id: 32 hex digits, distinct for every record emitted, also for samples alike but for the reward."""
    logs = InMemoryLogRecordExporter()
    config = TelemetryConfig(run_id="r", top_k=2, bottom_k=2, export_interval_s=60)
    telemetry = Telemetry(config, metric_exporter=metric_exporter, log_exporter=logs)
    for step in range(3):
        telemetry.step(step)
        for reward in range(4):
            telemetry.record_sample(EpisodeSample(reward=float(reward), response="same"))
    telemetry.shutdown()
    ids = [attributes_of(r.log_record)["rl.sample.id"] for r in logs.get_finished_logs()]
    assert len(ids) == 12 and len(set(ids)) == 12
    assert all(isinstance(i, str) and len(i) == 32 and int(i, 16) >= 0 for i in ids)


def test_console_mode_prints_a_readable_line_per_step(capsys: pytest.CaptureFixture[str]) -> None:
    """exporter="console" prints reward statistics and samples, readable, without a collector, under the step they
    were recorded in (tests/unit/test_console.py pins the numbers)."""
    telemetry = Telemetry(TelemetryConfig(run_id="console-run", exporter="console", export_interval_s=60))
    telemetry.step(1)
    telemetry.record_rewards([1.0, 0.0], fn="correctness")
    telemetry.record_sample(EpisodeSample(reward=1.0, response="forty-two"))
    telemetry.step(2)
    telemetry.flush(EXPORT_WAIT_S)
    telemetry.shutdown()
    out = capsys.readouterr().out
    assert "[otel-rl] step 1 rank 0 rl.reward{fn=correctness} n=2 mean=0.5 " in out
    assert "[otel-rl] step 1 rank 0 sample top reward=1 response='forty-two'" in out


def test_file_mode_writes_json_lines(tmp_path: Path) -> None:
    """exporter="file" writes metrics and samples as OTLP/JSON lines, one file per signal."""
    telemetry = Telemetry(TelemetryConfig(run_id="file-run", exporter="file", output_dir=str(tmp_path)))
    telemetry.step(1)
    telemetry.record_rewards([0.5])
    telemetry.record_sample(EpisodeSample(reward=0.5, response="r"))
    telemetry.shutdown()
    (logs,) = tmp_path.glob("*_logs_*.jsonl")
    (metrics,) = tmp_path.glob("*_metrics_*.jsonl")
    records = [
        r
        for line in logs.read_text().splitlines()
        for r in json.loads(line)["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
    ]
    assert [record["eventName"] for record in records] == ["rl.sample"]
    assert all("resourceMetrics" in json.loads(line) for line in metrics.read_text().splitlines())


def test_resource_carries_run_and_rank() -> None:
    """The resource has service, instance, run and rank attributes."""
    telemetry = Telemetry(
        TelemetryConfig(
            run_id="r9", rank=2, world_size=4, local_rank=0, role="rollout", service_name="svc", exporter="none"
        )
    )
    attrs = telemetry.resource.attributes
    assert (attrs["rl.run.id"], attrs["rl.rank"], attrs["rl.world_size"], attrs["rl.local_rank"]) == ("r9", 2, 4, 0)
    assert (attrs["rl.role"], attrs["service.name"]) == ("rollout", "svc") and attrs["service.instance.id"]
    assert "rl.run.group" not in attrs
    telemetry.shutdown()


def test_resource_carries_the_group_when_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """``group`` (argument, else ``OTEL_RL_GROUP``) becomes the resource attribute rl.run.group."""
    telemetry = Telemetry(TelemetryConfig(run_id="seed1", group="lr-3e-6", exporter="none"))
    assert telemetry.resource.attributes["rl.run.group"] == "lr-3e-6"
    telemetry.shutdown()
    monkeypatch.setenv("OTEL_RL_GROUP", "from-env")
    telemetry = Telemetry(TelemetryConfig(run_id="seed2", exporter="none"))
    assert telemetry.resource.attributes["rl.run.group"] == "from-env"
    telemetry.shutdown()


def test_redaction_hook_rewrites_texts_before_they_leave(metric_exporter: RecordingMetricExporter) -> None:
    """redact(field, text) is applied to prompt, response and target before export."""
    logs = InMemoryLogRecordExporter()
    telemetry = make(
        metric_exporter, logs, redact=lambda field, text: f"{field}:" + "".join("#" if c.isdigit() else c for c in text)
    )
    telemetry.step(1)
    telemetry.record_sample(EpisodeSample(reward=1.0, prompt="call 555-0100", response=b"pin 1234", target="42"))
    telemetry.step(2)
    telemetry.flush(EXPORT_WAIT_S)
    (record,) = logs.get_finished_logs()
    assert record.log_record.body == {
        "prompt": "prompt:call ###-####",
        "response": "response:pin ####",
        "target": "target:##",
    }
    telemetry.shutdown()


def test_failing_redaction_drops_the_sample_and_never_leaks(
    metric_exporter: RecordingMetricExporter, caplog: pytest.LogCaptureFixture
) -> None:
    """A redactor that raises drops the sample, counts it, and the warning does not quote the text."""
    logs = InMemoryLogRecordExporter()

    def broken(field: str, text: str) -> str:
        raise RuntimeError(f"cannot redact {text}")

    telemetry = make(metric_exporter, logs, redact=broken)
    telemetry.step(1)
    telemetry.record_sample(EpisodeSample(reward=1.0, prompt="secret-ssn-123"))
    telemetry.step(2)
    telemetry.flush(EXPORT_WAIT_S)
    assert logs.get_finished_logs() == ()
    assert metric_exporter.number("otel_rl.samples.dropped", {"otel_rl.reason": "redaction"}) == 1
    assert "secret-ssn" not in caplog.text
    telemetry.shutdown()


def test_histograms_carry_exemplars_that_lead_to_the_sample(metric_exporter: RecordingMetricExporter) -> None:
    """A kept sample becomes an exemplar of rl.reward{fn=total} and rl.staleness with its episode id and the
    trace and span ids that its log record carries."""
    logs = InMemoryLogRecordExporter()
    telemetry = make(metric_exporter, logs, top_k=1, bottom_k=0)
    telemetry.step(3)
    telemetry.record_rewards([0.2, 0.9])
    telemetry.record_staleness([7, 8], 9)
    telemetry.record_sample(EpisodeSample(reward=0.9, episode_id="ep-9", staleness=2))
    telemetry.step(4)
    telemetry.flush(EXPORT_WAIT_S)
    (record,) = [r.log_record for r in logs.get_finished_logs()]
    (reward,) = metric_exporter.histogram_point("rl.reward", {"rl.reward.fn": "total"}).exemplars
    (staleness,) = metric_exporter.histogram_point("rl.staleness").exemplars
    assert (reward.value, staleness.value) == (0.9, 2)
    for exemplar in (reward, staleness):
        assert exemplar.filtered_attributes == {"rl.episode.id": "ep-9"}
        assert (exemplar.trace_id, exemplar.span_id) == (record.trace_id, record.span_id) and record.trace_id
    telemetry.shutdown()


def test_reward_breakdown_values_become_exemplars_of_their_reward_function(
    metric_exporter: RecordingMetricExporter,
) -> None:
    """A run that records only per-function rewards still gets exemplars: each breakdown value goes to its own
    rl.reward{fn} stream; a function with no recorded rewards takes none."""
    telemetry = make(metric_exporter, top_k=1, bottom_k=0)
    telemetry.step(1)
    telemetry.record_rewards([0.0, 1.0], fn="correctness")
    telemetry.record_rewards([0.5], fn="format")
    breakdown = {"correctness": 1.0, "format": 0.5, "length": -0.2}
    telemetry.record_sample(EpisodeSample(reward=1.3, episode_id="ep-1", reward_breakdown=breakdown))
    telemetry.step(2)
    telemetry.flush(EXPORT_WAIT_S)
    exemplars = {
        dict(labels)["rl.reward.fn"]: [e.value for e in point.exemplars]
        for labels, point in metric_exporter.streams("rl.reward").items()
    }
    assert exemplars == {"correctness": [1.0], "format": [0.5]}
    telemetry.shutdown()


def test_metric_keys_have_their_own_cap(metric_exporter: RecordingMetricExporter) -> None:
    """max_metric_keys caps rl.metric.key independently of max_reward_fns."""
    telemetry = make(metric_exporter, max_reward_fns=1, max_metric_keys=2)
    for key in ("loss", "kl", "entropy"):
        telemetry.record_metric(key, 1.0)
    telemetry.record_rewards([1.0], fn="a")
    telemetry.flush(EXPORT_WAIT_S)
    keys = {dict(a)["rl.metric.key"] for (name, a) in metric_exporter.latest() if name == "rl.metric"}
    assert keys == {"loss", "kl", "_overflow"}
    assert rejected(metric_exporter) == {("rl.metric", "name_overflow"): 1}
    telemetry.shutdown()


def test_exporters_fall_back_one_by_one(tmp_path: Path) -> None:
    """Passing only a metric exporter keeps the configured exporter for samples (passing it alone disabled log and
    span export: no samples at all)."""
    metrics = RecordingMetricExporter()
    telemetry = Telemetry(
        TelemetryConfig(run_id="fallback", exporter="file", output_dir=str(tmp_path), export_interval_s=60),
        metric_exporter=metrics,
    )
    telemetry.step(1)
    telemetry.record_sample(EpisodeSample(reward=1.0, response="kept"))
    telemetry.step(2)
    assert telemetry.shutdown(EXPORT_WAIT_S)
    (logs,) = tmp_path.glob("*_logs_*.jsonl")
    body = json.loads(logs.read_text())["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["body"]
    assert {item["key"]: item["value"] for item in body["kvlistValue"]["values"]}["response"] == {"stringValue": "kept"}
    assert not list(tmp_path.glob("*_metrics_*.jsonl"))
    assert metrics.exports


_FIRST_STEP = """
import gc

import torch
from numba.core.registry import CPUDispatcher

import otel_rl


def compiled() -> int:
    return sum(len(kernel.signatures) for kernel in gc.get_objects() if isinstance(kernel, CPUDispatcher))


telemetry = otel_rl.Telemetry(otel_rl.TelemetryConfig(exporter="none"))
constructed = compiled()
rollouts, tokens = 8, 16
for mask in (torch.ones(rollouts, tokens, dtype=torch.bool), torch.ones(rollouts, tokens, dtype=torch.int64)):
    telemetry.record_rollouts(
        mask=mask, advantages=torch.randn(rollouts, tokens), response_lengths=mask.sum(dim=1),
        entropy=torch.rand(rollouts, tokens), logprobs=-torch.rand(rollouts, tokens),
        inference_logprobs=-torch.rand(rollouts, tokens), rewards=torch.rand(rollouts),
        group_ids=torch.arange(rollouts) // 4, versions_spanned=torch.ones(rollouts, dtype=torch.int64),
    )
telemetry.record_rewards([1.0, 0.5, None])
telemetry.record_rewards(torch.rand(rollouts), fn="correctness")
telemetry.record_staleness([3, 2, 2, -1], 3)
telemetry.record_staleness(torch.tensor([3, 2, 2, -1]), 3, dataset="math")
telemetry.record_metric("loss.policy", 0.25)
print(constructed, compiled())
telemetry.shutdown()
"""


def test_construction_compiles_every_kernel_of_a_training_step() -> None:
    """The numba kernels a training step uses (rollouts with a bool or int64 mask, rewards and staleness as lists or
    tensors, a metric) are all compiled by ``Telemetry()``, so the first step does not pay for it (1.5 s on this path
    with a cold cache): a fresh process compiles nothing more during that step."""
    result = subprocess.run(
        [sys.executable, "-c", _FIRST_STEP], capture_output=True, text=True, timeout=300, check=True
    )
    constructed, after_step = map(int, result.stdout.split())
    assert constructed > 0
    assert after_step == constructed
