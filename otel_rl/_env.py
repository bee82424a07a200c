"""Every environment variable otel-rl reads, in one place.

Variables are read once, when a :class:`~otel_rl.TelemetryConfig` is constructed; an explicit argument always
wins over the environment. Invalid values raise ``ValueError`` naming the variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import unquote

#: OTLP collector endpoint, e.g. ``http://collector:4317`` (gRPC) or ``http://collector:4318`` (HTTP); for gRPC
#: also ``collector:4317``, with TLS unless ``OTEL_EXPORTER_OTLP_INSECURE=true`` (as the OpenTelemetry SDK reads it).
OTEL_EXPORTER_OTLP_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
#: ``true``: a gRPC endpoint written without a scheme (``collector:4317``) is plain text; ``false`` (default): TLS.
#: An ``http://`` or ``https://`` scheme says it instead (the OpenTelemetry specification's rule).
OTEL_EXPORTER_OTLP_INSECURE = "OTEL_EXPORTER_OTLP_INSECURE"
#: ``grpc`` (default) or ``http/protobuf``.
OTEL_EXPORTER_OTLP_PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
#: Comma-separated ``key=value`` pairs (URL-encoded values), e.g. ``authorization=Bearer%20abc``.
OTEL_EXPORTER_OTLP_HEADERS = "OTEL_EXPORTER_OTLP_HEADERS"
#: Path to a PEM file of trusted CA certificates; turns on TLS.
OTEL_EXPORTER_OTLP_CERTIFICATE = "OTEL_EXPORTER_OTLP_CERTIFICATE"
#: Path to the PEM certificate chain this process presents (mutual TLS), with the key below.
OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"
#: Path to the PEM private key of the client certificate.
OTEL_EXPORTER_OTLP_CLIENT_KEY = "OTEL_EXPORTER_OTLP_CLIENT_KEY"
#: Export timeout in milliseconds.
OTEL_EXPORTER_OTLP_TIMEOUT = "OTEL_EXPORTER_OTLP_TIMEOUT"
#: Interval between metric exports in milliseconds.
OTEL_METRIC_EXPORT_INTERVAL = "OTEL_METRIC_EXPORT_INTERVAL"
#: ``service.name`` of the resource.
OTEL_SERVICE_NAME = "OTEL_SERVICE_NAME"
#: Extra resource attributes, ``key=value`` pairs (read by the OpenTelemetry SDK itself).
OTEL_RESOURCE_ATTRIBUTES = "OTEL_RESOURCE_ATTRIBUTES"
#: Where telemetry goes: ``otlp`` (default), ``console``, ``file``, ``otlp+file`` or ``none``.
OTEL_RL_EXPORTER = "OTEL_RL_EXPORTER"
#: ``true``: with ``OTEL_RL_EXPORTER=console``, also print otel-rl's own telemetry (canary, export, rejections).
OTEL_RL_CONSOLE_SELF_TELEMETRY = "OTEL_RL_CONSOLE_SELF_TELEMETRY"
#: The folder of the OTLP files written when ``OTEL_RL_EXPORTER`` is ``file`` or ``otlp+file``.
OTEL_RL_OUTPUT_DIR = "OTEL_RL_OUTPUT_DIR"
#: The run id shared by every rank of one run (wins over the launcher's ids below).
OTEL_RL_RUN_ID = "OTEL_RL_RUN_ID"
#: The process's role: ``trainer``, ``rollout``, ...
OTEL_RL_ROLE = "OTEL_RL_ROLE"
#: The run's group (``rl.run.group``): the runs compared as one, e.g. one configuration's seeds.
OTEL_RL_GROUP = "OTEL_RL_GROUP"

#: Launcher variables, torchrun first, then SLURM.
RANK_VARS = ("RANK", "SLURM_PROCID")
WORLD_SIZE_VARS = ("WORLD_SIZE", "SLURM_NTASKS")
LOCAL_RANK_VARS = ("LOCAL_RANK", "SLURM_LOCALID")
RUN_ID_VARS = (OTEL_RL_RUN_ID, "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")

VARIABLES: tuple[str, ...] = (
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_INSECURE,
    OTEL_EXPORTER_OTLP_PROTOCOL,
    OTEL_EXPORTER_OTLP_HEADERS,
    OTEL_EXPORTER_OTLP_CERTIFICATE,
    OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE,
    OTEL_EXPORTER_OTLP_CLIENT_KEY,
    OTEL_EXPORTER_OTLP_TIMEOUT,
    OTEL_METRIC_EXPORT_INTERVAL,
    OTEL_SERVICE_NAME,
    OTEL_RESOURCE_ATTRIBUTES,
    OTEL_RL_EXPORTER,
    OTEL_RL_CONSOLE_SELF_TELEMETRY,
    OTEL_RL_OUTPUT_DIR,
    OTEL_RL_ROLE,
    OTEL_RL_GROUP,
    *RANK_VARS,
    *WORLD_SIZE_VARS,
    *LOCAL_RANK_VARS,
    *RUN_ID_VARS,
)
"""Every variable above: what a test clears to run in a known environment."""

#: torchrun's default rendezvous id, shared by unrelated runs, so it is no run id.
_TORCHRUN_DEFAULT_RUN_ID = "none"


def read(name: str) -> str | None:
    """The variable's value, or None when unset or empty."""
    value = os.environ.get(name, "").strip()
    return value or None


def read_first(names: tuple[str, ...]) -> tuple[str, str] | None:
    """The first of ``names`` that is set, as ``(name, value)``: the name says where a bad value came from."""
    for name in names:
        value = read(name)
        if value is not None and not (name == "TORCHELASTIC_RUN_ID" and value == _TORCHRUN_DEFAULT_RUN_ID):
            return name, value
    return None


def read_int(names: tuple[str, ...]) -> tuple[str, int] | None:
    """The first of ``names`` that is set, as ``(name, int)``; raises ``ValueError`` naming the variable otherwise."""
    found = read_first(names)
    if found is None:
        return None
    name, value = found
    try:
        return name, int(value)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got {value!r}") from None


def read_float(name: str, *, scale: float = 1.0) -> tuple[str, float] | None:
    """The variable as ``(name, float times scale)``; raises ``ValueError`` naming the variable otherwise."""
    value = read(name)
    if value is None:
        return None
    try:
        return name, float(value) * scale
    except ValueError:
        raise ValueError(f"environment variable {name} must be a number, got {value!r}") from None


def read_bool(name: str) -> tuple[str, bool] | None:
    """The variable as ``(name, bool)`` from ``true`` or ``false`` (any case); raises ``ValueError`` naming the
    variable otherwise (the OpenTelemetry SDK reads anything but ``true`` as false: a typo would silently flip it)."""
    value = read(name)
    if value is None:
        return None
    if value.lower() not in ("true", "false"):
        raise ValueError(f"environment variable {name} must be true or false, got {value!r}")
    return name, value.lower() == "true"


def parse_headers(text: str, *, variable: str) -> Mapping[str, str]:
    """Parse ``k=v,k2=v2`` (values URL-encoded). Errors name the key, never a value: headers carry secrets.

    >>> dict(parse_headers("authorization=Bearer%20abc,x-tenant=a", variable="OTEL_EXPORTER_OTLP_HEADERS"))
    {'authorization': 'Bearer abc', 'x-tenant': 'a'}
    """
    headers: dict[str, str] = {}
    for position, item in enumerate(part for part in text.split(",") if part.strip()):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{variable} entry {position} must be 'key=value' (value not shown: it may be secret)")
        headers[unquote(key.strip()).lower()] = unquote(value.strip())
    return headers
