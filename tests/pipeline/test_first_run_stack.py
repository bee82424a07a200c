"""A first run against the real collector explains its export trouble: a gRPC exporter on the OTLP/HTTP port (or
the reverse) is one warning that says so, a collector outage is one warning when it starts and one when it ends (in
place of the SDK's line per retry), and a ``host:port`` endpoint works as the OpenTelemetry SDK reads it."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from otel_rl import Telemetry, TelemetryConfig, _env
from tests.pipeline.harness import private_stack


@pytest.fixture(scope="module")
def stack(stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A stack of this module's own: the outage test stops and restarts its collector."""
    with private_stack(stack_binaries, tmp_path_factory.mktemp("first-run-stack")) as running:
        yield running


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _env.VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _telemetry(**settings: Any) -> Telemetry:
    base: dict[str, Any] = {
        "run_id": f"first-run-{uuid.uuid4().hex[:8]}",
        "export_interval_s": 0.2,
        "export_timeout_s": 2.0,
        "shutdown_timeout_s": 3.0,
    }
    return Telemetry(TelemetryConfig(**{**base, **settings}))


def _steps(telemetry: Telemetry, seconds: float, first: int = 0) -> int:
    """Record a step (rewards, two samples, a phase) every 0.25 s for ``seconds``; returns the next step number."""
    step = first
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        telemetry.step(step)
        with telemetry.phase("generate"):
            telemetry.record_rewards([1.0, 0.0])
            telemetry.record_sample({"reward": 1.0, "response": f"step {step}"})
            telemetry.record_sample({"reward": 0.0, "response": f"step {step}"})
        step += 1
        time.sleep(0.25)
    return step


def _ours(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("otel_rl") and text in r.getMessage()]


def _sdk_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("opentelemetry.exporter") and r.levelno >= logging.WARNING
    ]


def test_grpc_pointed_at_the_http_port_says_so(stack: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A gRPC exporter at the collector's OTLP/HTTP port: one warning that the port answered HTTP/1.1 and which
    port or protocol to use, and none of the SDK's raw HTTP/2 errors."""
    with caplog.at_level(logging.INFO):
        telemetry = _telemetry(endpoint=stack.otlp_http_endpoint, protocol="grpc")
        _steps(telemetry, 4.0)
        telemetry.shutdown()
    (warning,) = _ours(caplog, "are failing")
    assert "it looks like an OTLP/HTTP port" in warning and stack.otlp_http_endpoint in warning, warning
    assert not _sdk_lines(caplog)


def test_http_pointed_at_the_grpc_port_says_so(stack: Any, caplog: pytest.LogCaptureFixture) -> None:
    """An OTLP/HTTP exporter at the collector's gRPC port: one warning that the port did not answer HTTP/1.1 and
    looks like the gRPC one, and none of the SDK's connection errors."""
    with caplog.at_level(logging.INFO):
        telemetry = _telemetry(endpoint=stack.otlp_grpc_endpoint, protocol="http/protobuf")
        _steps(telemetry, 4.0)
        telemetry.shutdown()
    (warning,) = _ours(caplog, "are failing")
    assert "it looks like an OTLP/gRPC port" in warning and stack.otlp_grpc_endpoint in warning, warning
    assert not _sdk_lines(caplog)


def test_host_port_is_read_as_the_sdk_reads_it(
    stack: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``OTEL_EXPORTER_OTLP_ENDPOINT=host:port`` exports to the plain-text collector with
    ``OTEL_EXPORTER_OTLP_INSECURE=true``; without it the SDK's rule means TLS, and the warning says TLS failed."""
    host_port = stack.otlp_grpc_endpoint.split("://", 1)[1]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", host_port)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
    plain = _telemetry()
    plain.record_rewards([1.0])
    assert plain.flush(10) and plain.flush(10)
    assert not plain._pipeline.worker.health.failing
    plain.shutdown()
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_INSECURE")
    tls = _telemetry()
    assert tls.config.resolved.endpoint == f"https://{host_port}"
    tls.record_rewards([1.0])
    with caplog.at_level(logging.INFO):
        assert tls.flush(10)
        assert tls._pipeline.worker.health.failing
        tls.shutdown()
    (warning,) = _ours(caplog, "are failing")
    assert "TLS failed" in warning, warning


def test_an_outage_is_told_when_it_starts_and_when_it_ends(stack: Any, caplog: pytest.LogCaptureFixture) -> None:
    """The collector stopped for a while, then started again: one warning when exports start failing, one when they
    recover (how long, how many sample records went out late), and no SDK retry lines in between."""
    with caplog.at_level(logging.INFO):
        telemetry = _telemetry(endpoint=stack.otlp_grpc_endpoint)
        step = _steps(telemetry, 2.0)
        assert not _ours(caplog, "are failing")
        stack.stop_component("collector")
        try:
            step = _steps(telemetry, 8.0, step)
        finally:
            stack.start_component("collector")
        deadline = time.monotonic() + 60
        while not _ours(caplog, "recovered after") and time.monotonic() < deadline:
            step = _steps(telemetry, 1.0, step)
        telemetry.shutdown()
    (failing,) = _ours(caplog, "are failing")
    assert stack.otlp_grpc_endpoint in failing and "sample records and spans wait in queues" in failing
    (recovered,) = _ours(caplog, "recovered after")
    late = int(recovered.split("sent late: ", 1)[1].split(" ", 1)[0])
    assert late >= 8, recovered  # two samples a step for the ~8 s the collector was down
    assert "lost (queues full): 0 sample record(s) and 0 span(s)" in recovered
    assert not _sdk_lines(caplog)
