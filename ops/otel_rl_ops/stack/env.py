"""Environment variables of the local stack tooling, declared in one place.

Two directions:

* Read by this package (at construction, never at import): :data:`OTEL_RL_HOME`.
* Exported by :class:`~otel_rl_ops.stack.services.Stack` to the collector process, whose configuration files in
  ``collector_config/`` read them with ``${env:NAME}``: the ``COLLECTOR_*`` names below. They are the contract
  between the Python side and the collector configuration; changing one means changing both.
* Exported to the Jaeger process, whose ``jaeger/*.yaml`` read them the same way: the ``JAEGER_*`` names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

OTEL_RL_HOME: Final = "OTEL_RL_HOME"
"""Root of everything the stack tooling installs and runs: ``bin/`` (Go-installed tools), ``collector/<digest>/``
(built collectors) and ``stack/`` (the default state directory). Defaults to ``~/.cache/otel-rl``."""

COLLECTOR_OTLP_GRPC_ENDPOINT: Final = "OTEL_RL_OTLP_GRPC_ENDPOINT"
"""``host:port`` of the collector's OTLP/gRPC receiver (e.g. ``"127.0.0.1:4317"``)."""

COLLECTOR_OTLP_HTTP_ENDPOINT: Final = "OTEL_RL_OTLP_HTTP_ENDPOINT"
"""``host:port`` of the collector's OTLP/HTTP receiver (e.g. ``"127.0.0.1:4318"``)."""

COLLECTOR_HEALTH_ENDPOINT: Final = "OTEL_RL_HEALTH_ENDPOINT"
"""``host:port`` of the collector's ``health_check`` extension (e.g. ``"127.0.0.1:13133"``); ``GET /`` answers
200 when ready."""

COLLECTOR_METRICS_HOST: Final = "OTEL_RL_COLLECTOR_METRICS_HOST"
"""Address on which the collector serves its own metrics in Prometheus format (e.g. ``"127.0.0.1"``)."""

COLLECTOR_METRICS_PORT: Final = "OTEL_RL_COLLECTOR_METRICS_PORT"
"""Port of the collector's own metrics (e.g. ``"8888"``)."""

COLLECTOR_REMOTE_WRITE_URL: Final = "OTEL_RL_REMOTE_WRITE_URL"
"""The whole remote-write URL (Prometheus ``http://127.0.0.1:9090/api/v1/write``, a Thanos receiver's
``/api/v1/receive``, Mimir's ``/api/v1/push``, VictoriaMetrics' ``/api/v1/write``)."""

COLLECTOR_VICTORIALOGS_URL: Final = "OTEL_RL_VICTORIALOGS_URL"
"""Base URL of VictoriaLogs without a trailing slash (e.g. ``"http://127.0.0.1:9428"``); OTLP/HTTP logs go to
``${env:OTEL_RL_VICTORIALOGS_URL}/insert/opentelemetry/v1/logs``."""

COLLECTOR_JAEGER_URL: Final = "OTEL_RL_JAEGER_URL"
"""Base URL of Jaeger's OTLP/HTTP receiver without a trailing slash (e.g. ``"http://127.0.0.1:4319"``); the collector's
``otlp_http/jaeger`` exporter sends every span to ``${env:OTEL_RL_JAEGER_URL}/v1/traces``."""

COLLECTOR_QUEUE_DIR: Final = "OTEL_RL_QUEUE_DIR"
"""Folder of the gateway's persistent sending queue (``collector_config/gateway.yaml``, ``file_storage/queue``);
each gateway keeps its queue file in the sub-folder named by its gRPC listen address. The stack puts it under
``<state_dir>/data/collector/queue``; ``collector.yaml`` alone does not read it."""

COLLECTOR_TLS_CERT_FILE: Final = "OTEL_RL_TLS_CERT_FILE"
"""Secure profile (``collector_config/secure.yaml``): the OTLP receivers' server certificate (PEM, chain)."""

COLLECTOR_TLS_KEY_FILE: Final = "OTEL_RL_TLS_KEY_FILE"
"""Secure profile: the server certificate's private key."""

COLLECTOR_BEARER_TOKEN_FILE: Final = "OTEL_RL_BEARER_TOKEN_FILE"  # noqa: S105 - a variable's name, no secret
"""Secure profile: the file holding the token ranks must send (``authorization: Bearer <token>``)."""

COLLECTOR_TLS_CLIENT_CA_FILE: Final = "OTEL_RL_TLS_CLIENT_CA_FILE"
"""Secure profile: the CA client certificates must be signed by (mutual TLS), or empty for none."""

COLLECTOR_TLS_CA_FILE: Final = "OTEL_RL_TLS_CA_FILE"
"""Secure profile: the CA the collector trusts for Prometheus's and VictoriaLogs's certificates."""

COLLECTOR_PROMETHEUS_AUTHORIZATION_FILE: Final = "OTEL_RL_PROMETHEUS_AUTHORIZATION_FILE"
"""Secure profile: the file holding remote write's ``Authorization`` header value (``Basic ...``)."""

COLLECTOR_VICTORIALOGS_AUTHORIZATION_FILE: Final = "OTEL_RL_VICTORIALOGS_AUTHORIZATION_FILE"
"""Secure profile: the file holding the log exporter's ``Authorization`` header value."""

COLLECTOR_JAEGER_AUTHORIZATION_FILE: Final = "OTEL_RL_JAEGER_AUTHORIZATION_FILE"
"""Secure profile: the file holding the trace exporter's ``Authorization`` header value (Jaeger's basic auth)."""

COLLECTOR_ENV_NAMES: Final = (
    COLLECTOR_OTLP_GRPC_ENDPOINT,
    COLLECTOR_OTLP_HTTP_ENDPOINT,
    COLLECTOR_HEALTH_ENDPOINT,
    COLLECTOR_METRICS_HOST,
    COLLECTOR_METRICS_PORT,
    COLLECTOR_REMOTE_WRITE_URL,
    COLLECTOR_VICTORIALOGS_URL,
    COLLECTOR_JAEGER_URL,
    COLLECTOR_QUEUE_DIR,
    COLLECTOR_TLS_CERT_FILE,
    COLLECTOR_TLS_KEY_FILE,
    COLLECTOR_BEARER_TOKEN_FILE,
    COLLECTOR_TLS_CLIENT_CA_FILE,
    COLLECTOR_TLS_CA_FILE,
    COLLECTOR_PROMETHEUS_AUTHORIZATION_FILE,
    COLLECTOR_VICTORIALOGS_AUTHORIZATION_FILE,
    COLLECTOR_JAEGER_AUTHORIZATION_FILE,
)
"""Every variable the stack sets for the collector process (the secure profile's only with ``secure=True``)
(``collector_config/collector.yaml`` reads them as ``${env:NAME:-default}``; its other knobs, such as
``OTEL_RL_AGGREGATION_INTERVAL``, can be passed through ``StackConfig.collector_environment``)."""


JAEGER_OTLP_ENDPOINT: Final = "OTEL_RL_JAEGER_OTLP_ENDPOINT"
"""``host:port`` of Jaeger's OTLP/HTTP receiver (``jaeger/jaeger.yaml``), where the collector sends spans."""

JAEGER_QUERY_ENDPOINT: Final = "OTEL_RL_JAEGER_QUERY_ENDPOINT"
"""``host:port`` of Jaeger's query API over HTTP (``/api/v3/traces/<id>``, ``/api/traces``; its web UI)."""

JAEGER_QUERY_GRPC_ENDPOINT: Final = "OTEL_RL_JAEGER_QUERY_GRPC_ENDPOINT"
"""``host:port`` of Jaeger's query API over gRPC (api_v2, api_v3)."""

JAEGER_HEALTH_ENDPOINT: Final = "OTEL_RL_JAEGER_HEALTH_ENDPOINT"
"""``host:port`` of Jaeger's ``healthcheckv2`` extension; ``GET /status`` answers 200 when ready."""

JAEGER_DATA_DIR: Final = "OTEL_RL_JAEGER_DATA_DIR"
"""Folder of Jaeger's Badger storage (``keys/`` and ``values/`` below it)."""

JAEGER_RETENTION: Final = "OTEL_RL_JAEGER_RETENTION"
"""How long Jaeger keeps spans, a Go duration (``168h``)."""

JAEGER_HTPASSWD_FILE: Final = "OTEL_RL_JAEGER_HTPASSWD_FILE"
"""Secure profile (``jaeger/secure.yaml``): the htpasswd file (bcrypt) of Jaeger's basic auth."""

JAEGER_ENV_NAMES: Final = (
    JAEGER_OTLP_ENDPOINT,
    JAEGER_QUERY_ENDPOINT,
    JAEGER_QUERY_GRPC_ENDPOINT,
    JAEGER_HEALTH_ENDPOINT,
    JAEGER_DATA_DIR,
    JAEGER_RETENTION,
    JAEGER_HTPASSWD_FILE,
    COLLECTOR_TLS_CERT_FILE,
    COLLECTOR_TLS_KEY_FILE,
)
"""Every variable the stack sets for the Jaeger process (the last three only with ``secure=True``: the server
certificate is the collector's); ``jaeger/*.yaml`` read them as ``${env:NAME}``."""


def otel_rl_home(environ: Mapping[str, str] | None = None) -> Path:
    """Return the tooling's home directory: ``$OTEL_RL_HOME`` if set and non-empty, else ``~/.cache/otel-rl``.

    ``environ`` defaults to :data:`os.environ`; tests pass their own mapping. The directory is not created.

    >>> otel_rl_home({"OTEL_RL_HOME": "/opt/otel-rl"})
    PosixPath('/opt/otel-rl')
    """
    env = os.environ if environ is None else environ
    value = env.get(OTEL_RL_HOME, "")
    if value:
        return Path(value).expanduser()
    return Path("~/.cache/otel-rl").expanduser()
