"""The exporters of one process: OTLP over gRPC or HTTP (TLS, client certificates, headers), the offline OTLP files
(:mod:`otel_rl._export.files`), both, the console, or none, each signal replaceable by an injected exporter (tests pass
the SDK's in-memory ones)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import grpc
import requests
from opentelemetry.sdk._logs.export import LogRecordExporter
from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.trace.export import SpanExporter
from otel_rl_contract import SCOPE_VERSION
from otel_rl_contract.files import Signal

from otel_rl._config import ResolvedConfig, sends_otlp, writes_files
from otel_rl._export.console import console_exporters
from otel_rl._export.files import (
    FileLogExporter,
    FileMetricExporter,
    FileSpanExporter,
    OfflineFiles,
    TeeLogExporter,
    TeeMetricExporter,
    TeeSpanExporter,
)

Dropped = Callable[[Signal, int], None]
"""Told how many sample records (``logs``) or spans (``traces``) a rotation of the offline files deleted."""


@dataclass(frozen=True)
class Exporters:
    """The exporters of one process, and the offline files they write to (closed on shutdown)."""

    metrics: MetricExporter | None
    logs: LogRecordExporter | None
    spans: SpanExporter | None = None
    output: OfflineFiles | None = None


def build_exporters(
    config: ResolvedConfig, injected: Exporters = Exporters(None, None), *, dropped: Dropped = lambda signal, n: None
) -> Exporters:
    """The ``injected`` exporters, and for each signal without one, the exporter ``config`` asks for; ``dropped``
    counts what a rotation of the offline files deletes."""
    if None not in (injected.metrics, injected.logs, injected.spans):
        return injected
    built = _configured(config, dropped)
    for mine, theirs in ((built.metrics, injected.metrics), (built.logs, injected.logs), (built.spans, injected.spans)):
        if mine is not None and theirs is not None:
            mine.shutdown()
    return Exporters(
        injected.metrics or built.metrics, injected.logs or built.logs, injected.spans or built.spans, built.output
    )


def destination(config: ResolvedConfig) -> str:
    """Where ``config`` sends telemetry, as log lines name it: ``http://localhost:4317 (OTLP/gRPC, plain text)``."""
    places = []
    if sends_otlp(config):
        tls = "TLS" if config.endpoint.startswith("https://") or config.certificate_file is not None else "plain text"
        places.append(f"{config.endpoint} (OTLP/{'gRPC' if config.protocol == 'grpc' else 'HTTP'}, {tls})")
    if writes_files(config):
        places.append(f"OTLP files in {config.output_dir}")
    if places:
        return " and ".join(places)
    return "the console (stdout)" if config.exporter == "console" else "nowhere (exporter none)"


def _configured(config: ResolvedConfig, dropped: Dropped) -> Exporters:
    """The exporters ``config`` asks for."""
    if config.exporter == "none":
        return Exporters(None, None)
    if config.exporter == "console":
        printed = console_exporters(sys.stdout, self_telemetry=config.console_self_telemetry)
        return Exporters(printed.metrics, printed.logs, printed.spans)
    if not writes_files(config):
        return Exporters(*_otlp_exporters(config))
    files = OfflineFiles(
        config.output_dir,
        version=SCOPE_VERSION,
        rank=config.rank,
        instance=config.instance_id,
        max_bytes=config.output_max_bytes,
        max_files=config.output_max_files,
        dropped=dropped,
    )
    metrics, logs, spans = (
        FileMetricExporter(files.metrics),
        FileLogExporter(files.logs),
        FileSpanExporter(files.traces),
    )
    if not sends_otlp(config):
        return Exporters(metrics, logs, spans, files)
    to_metrics, to_logs, to_spans = _otlp_exporters(config)
    return Exporters(
        TeeMetricExporter(metrics, to_metrics), TeeLogExporter(logs, to_logs), TeeSpanExporter(spans, to_spans), files
    )


class _PinnedCASession(requests.Session):
    """A requests session whose ``verify`` (the configured CA file) wins over ``REQUESTS_CA_BUNDLE`` and
    ``CURL_CA_BUNDLE``: plain requests lets those variables replace a session's ``verify``, so a trainer in an
    environment that sets them would not trust the collector's private CA given in ``certificate_file``."""

    def merge_environment_settings(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        settings: dict[str, Any] = super().merge_environment_settings(*args, **kwargs)
        settings["verify"] = self.verify
        return settings


def _otlp_exporters(config: ResolvedConfig) -> tuple[MetricExporter, LogRecordExporter, SpanExporter]:
    """The OTLP exporters of metrics, logs and spans."""
    endpoint, timeout = config.endpoint, config.export_timeout_s
    # gRPC refuses metadata keys with capitals ("Invalid metadata", every export fails); HTTP header names are
    # case-insensitive, so lower-casing is right for both.
    headers = {str(key).lower(): value for key, value in config.headers.items()}
    if config.protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter

        base = endpoint.rstrip("/")

        def common() -> dict[str, Any]:
            session = None
            if config.certificate_file is not None or config.client_certificate_file is not None:
                session = _PinnedCASession()
                session.verify = config.certificate_file if config.certificate_file is not None else True
                if config.client_certificate_file is not None and config.client_key_file is not None:
                    session.cert = (config.client_certificate_file, config.client_key_file)
            return {
                "certificate_file": config.certificate_file,
                "headers": headers,
                "timeout": timeout,
                "session": session,
                "client_certificate_file": config.client_certificate_file,
                "client_key_file": config.client_key_file,
            }

        return (
            HttpMetricExporter(endpoint=f"{base}/v1/metrics", **common()),
            HttpLogExporter(endpoint=f"{base}/v1/logs", **common()),
            HttpSpanExporter(endpoint=f"{base}/v1/traces", **common()),
        )
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

    # config.endpoint is resolved to http(s)://host:port (otel_rl._config.otlp_endpoint): the scheme says TLS
    parts = urlsplit(endpoint)
    secure = parts.scheme == "https" or config.certificate_file is not None
    credentials = None
    if secure:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(config.certificate_file),
            private_key=_read(config.client_key_file),
            certificate_chain=_read(config.client_certificate_file),
        )
    grpc_common: dict[str, Any] = {
        "endpoint": parts.netloc,
        "insecure": not secure,
        "credentials": credentials,
        "headers": headers,
        "timeout": timeout,
    }
    return GrpcMetricExporter(**grpc_common), GrpcLogExporter(**grpc_common), GrpcSpanExporter(**grpc_common)


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as pem:
        return pem.read()
