"""The offline files of ``exporter="file"``: OTLP/JSON lines per signal, named by version, rank and process, rotated
and bounded, what a rotation deletes counted; ``"otlp+file"`` writes them beside the collector's export."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import otel_rl_contract as contract
import pytest
from google.protobuf.json_format import ParseDict
from opentelemetry.proto.logs.v1.logs_pb2 import LogsData
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData
from otel_rl_contract.files import ids_from_hex, parse_name

from otel_rl import EpisodeSample, Telemetry, TelemetryConfig
from otel_rl._export.exporters import destination
from tests.conftest import EXPORT_WAIT_S

_MESSAGES: dict[str, Any] = {"metrics": MetricsData, "logs": LogsData, "traces": TracesData}


def _messages(folder: Path, signal: str) -> list[Any]:
    """Every line of ``signal``'s files in ``folder``, oldest file first, parsed as its OTLP message."""
    files = sorted(folder.glob(f"*_{signal}_*.jsonl"), key=lambda path: path.name)
    return [
        ParseDict(ids_from_hex(json.loads(line)), _MESSAGES[signal]())
        for path in files
        for line in path.read_text(encoding="utf-8").splitlines()
    ]


def _run(folder: Path, **settings: Any) -> Telemetry:
    telemetry = Telemetry(
        TelemetryConfig(
            run_id="offline",
            rank=1,
            world_size=2,
            exporter="file",
            output_dir=str(folder),
            export_interval_s=60,
            **settings,
        )
    )
    for step in range(3):
        telemetry.step(step)
        with telemetry.phase("generate"):
            telemetry.record_rewards([0.5, -0.25])
            telemetry.record_sample(EpisodeSample(reward=0.5, response=f"r{step}", episode_id=f"e{step}"))
    return telemetry


def test_each_signal_is_otlp_json_lines_in_files_named_by_version_rank_and_process(tmp_path: Path) -> None:
    """Metrics, sample records and spans each go to their own file of OTLP/JSON lines (hex ids), named by the otel-rl
    version, the rank, the process and the signal."""
    telemetry = _run(tmp_path)
    assert telemetry.shutdown(EXPORT_WAIT_S)
    names = [parse_name(path.name) for path in tmp_path.iterdir()]
    assert sorted((name.version, name.rank, name.signal, name.index) for name in names if name) == [
        (contract.__version__, 1, signal, 0) for signal in ("logs", "metrics", "traces")
    ]
    assert {name.instance for name in names if name} == {telemetry.config.instance_id}
    metrics = _messages(tmp_path, "metrics")
    finished = [m for m in metrics[-1].resource_metrics[0].scope_metrics[0].metrics if m.name == "rl.run.finished"]
    assert finished[0].gauge.data_points[0].as_int == 1
    records = [r for m in _messages(tmp_path, "logs") for r in m.resource_logs[0].scope_logs[0].log_records]
    assert [r.event_name for r in records] == ["rl.sample"] * 3
    spans = [s for m in _messages(tmp_path, "traces") for s in m.resource_spans[0].scope_spans[0].spans]
    assert {span.name for span in spans} >= {"generate", contract.RANK_STEP_SPAN}
    raw = json.loads((next(tmp_path.glob("*_traces_*.jsonl"))).read_text().splitlines()[0])
    span_id = raw["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"]
    assert len(span_id) == 16 and int(span_id, 16) >= 0


def test_rotation_keeps_at_most_the_bound_and_counts_what_it_deleted(tmp_path: Path) -> None:
    """With files of a few hundred bytes and two kept per signal, older files are deleted; the sample records they
    held are counted as dropped (reason rotated), and those kept plus those counted are every record exported."""
    telemetry = _run(tmp_path, output_max_bytes=300, output_max_files=2)
    assert telemetry.flush(EXPORT_WAIT_S)
    for step in range(3, 12):
        telemetry.step(step)
        telemetry.record_sample(EpisodeSample(reward=0.5, response=f"r{step}", episode_id=f"e{step}"))
        assert telemetry.flush(EXPORT_WAIT_S)
    store = telemetry._pipeline.store
    assert telemetry.shutdown(EXPORT_WAIT_S)
    assert max(len(list(tmp_path.glob(f"*_{signal}_*.jsonl"))) for signal in ("logs", "metrics", "traces")) == 2
    kept = sum(len(m.resource_logs[0].scope_logs[0].log_records) for m in _messages(tmp_path, "logs"))
    rotated = store.counter_value(contract.SAMPLES_DROPPED, ((contract.SELF_REASON, "rotated"),))
    assert rotated > 0 and kept + rotated == store.counter_value(contract.SAMPLES_EXPORTED, ())


def test_a_write_that_fails_fails_the_export_and_never_raises(tmp_path: Path) -> None:
    """An output folder that cannot be made (a file is in the way) fails each export, counted as a metrics export
    failure; nothing raises into the caller."""
    blocked = tmp_path / "blocked"
    blocked.write_text("a file, not a folder")
    telemetry = _run(blocked / "files")
    store = telemetry._pipeline.store
    assert telemetry.flush(EXPORT_WAIT_S)
    telemetry.shutdown(EXPORT_WAIT_S)
    assert store.counter_value(contract.EXPORT_FAILURES, ((contract.SELF_SIGNAL, "metrics"),)) >= 1


def test_otlp_and_file_write_the_files_and_report_the_collectors_result(tmp_path: Path) -> None:
    """exporter="otlp+file" writes every export into the files and sends it to the collector, whose result counts:
    with no collector listening, the files still get each metrics export and each one is counted as failed."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = TelemetryConfig(
        run_id="both",
        exporter="otlp+file",
        output_dir=str(tmp_path),
        endpoint=closed,
        protocol="http/protobuf",
        export_interval_s=60,
        export_timeout_s=0.5,
    )
    assert destination(config.resolved) == f"{closed} (OTLP/HTTP, plain text) and OTLP files in {tmp_path}"
    telemetry = Telemetry(config)
    telemetry.record_rewards([0.5])
    telemetry.flush(EXPORT_WAIT_S)
    store = telemetry._pipeline.store
    telemetry.shutdown(EXPORT_WAIT_S)
    assert len(_messages(tmp_path, "metrics")) >= 2
    assert store.counter_value(contract.EXPORT_FAILURES, ((contract.SELF_SIGNAL, "metrics"),)) >= 1


@pytest.mark.parametrize(("setting", "value"), [("output_max_bytes", 0), ("output_max_files", 0), ("output_dir", "")])
def test_bad_file_settings_are_refused(setting: str, value: Any) -> None:
    """A bound below one or an empty folder is refused, naming the setting."""
    with pytest.raises(ValueError, match=f'"{setting}" must be'):
        TelemetryConfig(run_id="bad", exporter="file", **{setting: value})
