"""Unit checks of the core fixes the reliability tests exposed (no stack): header validation and case, the private
CA of HTTP exports, log exports split by size, VictoriaLogs flags validation."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, cast

import pytest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

import otel_rl
from otel_rl._export.exporters import _PinnedCASession, build_exporters
from otel_rl._export.worker import _BATCH_BYTES


def test_headers_must_be_a_mapping_of_strings_and_errors_hide_values() -> None:
    """headers=<not a mapping> is a TypeError naming "headers"; a non-string value a ValueError naming its key
    but not showing the value."""
    with pytest.raises(TypeError, match='"headers" must be a mapping of str to str, got a builtin_function'):
        otel_rl.TelemetryConfig(run_id="r", exporter="none", headers=cast(Any, print))
    with pytest.raises(ValueError, match="\"headers\" values must be strings, got a int for 'x-secret'") as info:
        otel_rl.TelemetryConfig(run_id="r", exporter="none", headers={"x-secret": cast(Any, 912873)})
    assert "912873" not in str(info.value)


def test_unhashable_protocol_is_a_value_error_naming_it() -> None:
    """protocol=[] raises ValueError naming "protocol" (it raised an anonymous TypeError)."""
    with pytest.raises(ValueError, match='"protocol" must be one of grpc, http/protobuf, got'):
        otel_rl.TelemetryConfig(run_id="r", exporter="none", protocol=cast(Any, []))


def test_header_names_are_lower_cased_for_grpc() -> None:
    """gRPC refuses capitals in metadata keys (every export failed with "Invalid metadata"): keys go lower-case
    (test_security.py shows it against the real collector, for HTTP too)."""
    config = otel_rl.TelemetryConfig(run_id="r", headers={"Authorization": "Bearer t", "X-Tenant": "a"})
    exporters = build_exporters(config.resolved)
    assert isinstance(exporters.metrics, OTLPMetricExporter)
    headers = exporters.metrics._headers
    assert isinstance(headers, tuple), headers  # gRPC metadata: (key, value) pairs
    assert dict(headers) == {"authorization": "Bearer t", "x-tenant": "a"}


def test_certificate_file_wins_over_requests_ca_bundle(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """With REQUESTS_CA_BUNDLE set, an HTTP export still verifies against the configured certificate_file."""
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/other-bundle.pem")
    ca = tmp_path / "ca.pem"
    ca.write_text("not used here", encoding="utf-8")
    session = _PinnedCASession()
    session.verify = str(ca)
    settings = session.merge_environment_settings("https://collector:4318/v1/logs", {}, None, None, None)
    assert settings["verify"] == str(ca)


class _SizeRecorder(LogRecordExporter):
    def __init__(self) -> None:
        self.batches: list[int] = []
        self.lock = threading.Lock()

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        with self.lock:
            self.batches.append(len(batch))
        return LogRecordExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def test_log_exports_are_split_by_size() -> None:
    """40 samples of 3 x 300 KB texts (36 MB) go out in requests of at most ~4 MiB, all of them."""
    exporter = _SizeRecorder()
    config = otel_rl.TelemetryConfig(
        run_id="r", top_k=40, bottom_k=0, sample_text_budget_bytes=300_000, export_interval_s=60.0
    )
    telemetry = otel_rl.Telemetry(config, log_exporter=exporter)
    try:
        telemetry.step(0)
        text = "x" * 300_000
        for index in range(40):
            telemetry.record_sample(otel_rl.EpisodeSample(reward=float(index), prompt=text, response=text, target=text))
        telemetry.step(1)
        assert telemetry.flush(10)
    finally:
        telemetry.shutdown(10)
    assert sum(exporter.batches) == 40
    assert max(exporter.batches) * 900_000 <= _BATCH_BYTES
    assert len(exporter.batches) >= 9


def test_victorialogs_flags_must_be_flags() -> None:
    """StackConfig.victorialogs_flags is a tuple of "-flag=value" strings."""
    from otel_rl_ops.stack.config import StackConfig

    with pytest.raises(ValueError, match='"victorialogs_flags" must be a tuple of "-flag=value" strings'):
        StackConfig(victorialogs_flags=cast(Any, ["memory.allowedPercent=25"]))
    assert "-memory.allowedPercent=25" in StackConfig().victorialogs_flags
