"""A first run explains itself: setup() says which run it is and how to see it, endpoints are read as the
OpenTelemetry SDK reads them and bad ones are named by where they came from, failing exports are told once (not the
SDK's line per retry), and samples or phases recorded before any step() are warned about."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
from opentelemetry.sdk.metrics.export import MetricExportResult, MetricsData
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_rl
from otel_rl import Telemetry, TelemetryConfig, _env
from otel_rl._config import OtlpProtocol
from otel_rl._export.health import SDK_LOGGERS
from tests.conftest import EXPORT_WAIT_S, EncodingMetricExporter

SDK_PREFIX = "opentelemetry.exporter"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in _env.VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield
    otel_rl.reset(0.5)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ours(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("otel_rl") and text in r.getMessage()]


# -- setup() says what it set up ------------------------------------------------------------------------------------


def test_setup_logs_the_run_id_rank_destination_and_report_command(caplog: pytest.LogCaptureFixture) -> None:
    """One INFO line on rank 0 with the run id, rank and world size, the exporter's endpoint and TLS mode, and the
    ``otel-rl report --run-id`` command for that run id."""
    port = _closed_port()
    with caplog.at_level(logging.DEBUG, logger="otel_rl"):
        telemetry = otel_rl.setup(TelemetryConfig(endpoint=f"http://127.0.0.1:{port}", export_timeout_s=0.5))
    run_id = telemetry.config.resolved.run_id
    (line,) = [r for r in caplog.records if r.name == "otel_rl._global"]
    assert line.levelno == logging.INFO
    message = line.getMessage()
    assert f"run id {run_id}, rank 0 of world size 1" in message
    assert f"http://127.0.0.1:{port} (OTLP/gRPC, plain text)" in message
    assert f"otel-rl report --run-id {run_id} --prometheus-url http://127.0.0.1:9090" in message


def test_other_ranks_log_the_line_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    """Under torchrun every rank writes to one terminal: ranks other than 0 say it at DEBUG, with their rank."""
    with caplog.at_level(logging.DEBUG, logger="otel_rl"):
        otel_rl.setup(TelemetryConfig(run_id="shared", rank=3, world_size=4, exporter="none"))
    (line,) = [r for r in caplog.records if r.name == "otel_rl._global"]
    assert line.levelno == logging.DEBUG and "run id shared, rank 3 of world size 4" in line.getMessage()
    assert "otel-rl report" not in line.getMessage()  # exporter none: nothing to report on


@pytest.mark.parametrize(
    ("configure", "shown"),
    [
        ("", 1),  # a plain script: logging unconfigured, lastResort would drop an INFO line
        ("logging.basicConfig(level=logging.INFO)", 1),  # once, not twice
        ("logging.basicConfig(level=logging.WARNING)", 0),  # the application's level decides
    ],
)
def test_the_line_reaches_a_plain_script(configure: str, shown: int) -> None:
    """A script that never configured logging sees the line on stderr; once the application configures logging,
    its handlers and levels decide, and the line is not duplicated."""
    script = (
        f"import logging, otel_rl\n{configure}\n"
        "otel_rl.setup(otel_rl.TelemetryConfig(run_id='plain-run', exporter='none'))\notel_rl.reset()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("run id plain-run, rank 0 of world size 1") == shown, done.stderr
    assert "logging" not in done.stdout


# -- endpoints as the SDK reads them, errors named by their source --------------------------------------------------


def test_grpc_host_port_is_tls_unless_insecure(monkeypatch: pytest.MonkeyPatch) -> None:
    """``OTEL_EXPORTER_OTLP_ENDPOINT=localhost:4317`` is accepted for gRPC as the SDK accepts it: TLS by default,
    plain text with ``OTEL_EXPORTER_OTLP_INSECURE=true``; the resolved endpoint's scheme says which."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4317")
    assert TelemetryConfig(run_id="r").resolved.endpoint == "https://localhost:4317"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "TRUE")
    assert TelemetryConfig(run_id="r").resolved.endpoint == "http://localhost:4317"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "yes")
    with pytest.raises(ValueError, match="environment variable OTEL_EXPORTER_OTLP_INSECURE must be true or false"):
        TelemetryConfig(run_id="r")


def test_an_endpoint_error_names_the_variable_or_the_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same bad endpoint is named ``OTEL_EXPORTER_OTLP_ENDPOINT`` when it came from there and ``"endpoint"`` when
    it was an argument; host:port with HTTP says it is a gRPC form."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318")
    with pytest.raises(
        ValueError,
        match=r"environment variable OTEL_EXPORTER_OTLP_ENDPOINT must start with http:// or https:// with protocol "
        r"\"http/protobuf\" \(host:port is a form of gRPC endpoints\), got 'localhost:4318'",
    ):
        TelemetryConfig(run_id="r")
    with pytest.raises(ValueError, match=r"^\"endpoint\" must start with http:// or https://"):
        TelemetryConfig(run_id="r", endpoint="localhost:4318")
    monkeypatch.setenv("OTEL_RL_EXPORTER", "none")  # not exporting over OTLP: the endpoint does not matter
    assert TelemetryConfig(run_id="r").resolved.exporter == "none"


def test_rank_errors_name_the_launcher_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank at or beyond the world size from SLURM's variables is reported under their names."""
    monkeypatch.setenv("SLURM_PROCID", "4")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    with pytest.raises(
        ValueError, match=r"environment variable SLURM_PROCID must be < environment variable SLURM_NTASKS \(4\), got 4"
    ):
        TelemetryConfig(run_id="r")


# -- failing exports: told once, the SDK's retry lines taken out, other exporters' lines left alone ---------------


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_closed_port_is_one_warning_and_no_sdk_lines(
    caplog: pytest.LogCaptureFixture, protocol: OtlpProtocol
) -> None:
    """Real OTLP exporters against a closed port for several export cycles: one otel-rl warning naming the endpoint
    and the error, and none of the SDK's own lines (``Transient error ...`` every retry)."""
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    config = TelemetryConfig(
        run_id="closed",
        endpoint=endpoint,
        protocol=protocol,
        export_interval_s=0.1,
        export_timeout_s=1.5,
        shutdown_timeout_s=3,
    )
    with caplog.at_level(logging.INFO):
        telemetry = Telemetry(config)
        for step in range(8):
            telemetry.step(step)
            telemetry.record_rewards([1.0, 0.5])
            telemetry.record_sample({"reward": 1.0, "response": "r"})
            time.sleep(0.5)
        telemetry.shutdown()
    failing = _ours(caplog, "are failing")
    assert len(failing) == 1, [r.getMessage() for r in failing]
    message = failing[0].getMessage()
    assert endpoint in message and "sample records and spans wait in queues of 4096 and 16384" in message
    assert any(error in message for error in ("UNAVAILABLE", "Connection")), message  # the SDK's error, quoted
    assert not [r for r in caplog.records if r.name.startswith(SDK_PREFIX) and r.levelno >= logging.WARNING]


def test_other_exporters_sdk_lines_still_show(caplog: pytest.LogCaptureFixture) -> None:
    """The SDK's lines of an exporter that is not otel-rl's (the application's own, same logger) pass, while
    otel-rl's exporters fail on the same logger in the same process."""
    port = _closed_port()
    telemetry = Telemetry(
        TelemetryConfig(run_id="mine", endpoint=f"http://127.0.0.1:{port}", export_interval_s=0.1, export_timeout_s=1)
    )
    theirs = OTLPMetricExporter(endpoint=f"127.0.0.1:{port}", insecure=True, timeout=1)
    with caplog.at_level(logging.INFO):
        time.sleep(1.5)
        assert theirs.export(MetricsData(resource_metrics=[])) == MetricExportResult.FAILURE
    telemetry.shutdown(1)
    theirs.shutdown()
    sdk = [r for r in caplog.records if r.name == SDK_LOGGERS[0] and r.levelno >= logging.WARNING]
    assert sdk and all(r.threadName == "MainThread" for r in sdk)
    assert len(_ours(caplog, "are failing")) == 1


# -- before the first step() ---------------------------------------------------------------------------------------


def test_samples_before_any_step_are_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    """Ten loops of 8 samples without step() keep one step's top 2 and bottom 2, four records in all: one warning
    says so, with the number; after a step() the next samples are kept per step, without a warning."""
    logs = InMemoryLogRecordExporter()
    telemetry = Telemetry(
        TelemetryConfig(run_id="unstepped", exporter="none"),
        metric_exporter=EncodingMetricExporter(),
        log_exporter=logs,
    )
    with caplog.at_level(logging.WARNING):
        for loop in range(10):
            for index in range(8):
                telemetry.record_sample({"reward": float(loop * 8 + index)})
        assert telemetry.flush(EXPORT_WAIT_S)
        telemetry.step(1)
        telemetry.record_sample({"reward": 0.0})
        telemetry.shutdown()
    (warning,) = _ours(caplog, "before the first step()")
    assert "record_sample()" in warning.getMessage() and "= 4 per step and table" in warning.getMessage()
    records = logs.get_finished_logs()
    unstepped = [r for r in records if "rl.step" not in (r.log_record.attributes or {})]
    assert len(unstepped) == 4 and len(records) == 5


def test_phases_before_any_step_are_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    """Phases with no step are each a trace of their own: one warning says so; inside steps they share the step's
    trace. With phase tracing off nothing is lost and nothing is said."""
    spans = InMemorySpanExporter()
    telemetry = Telemetry(
        TelemetryConfig(run_id="unstepped", exporter="none"),
        metric_exporter=EncodingMetricExporter(),
        log_exporter=InMemoryLogRecordExporter(),
        span_exporter=spans,
    )
    with caplog.at_level(logging.WARNING):
        for name in ("generate", "train", "generate"):
            with telemetry.phase(name):
                pass
        telemetry.record_phases({"score": 0.1})
        telemetry.shutdown()
    (warning,) = _ours(caplog, "before the first step()")
    assert "'generate'" in warning.getMessage() and "a trace of its own" in warning.getMessage()
    traces = {span.context.trace_id for span in spans.get_finished_spans()}
    assert len(traces) == 4
    caplog.clear()
    untraced = Telemetry(
        TelemetryConfig(run_id="untraced", exporter="none", trace_phases=False),
        metric_exporter=EncodingMetricExporter(),
        span_exporter=InMemorySpanExporter(),
    )
    with caplog.at_level(logging.WARNING):
        untraced.set_phase("generate")
        untraced.shutdown()
    assert not _ours(caplog, "before the first step()")
