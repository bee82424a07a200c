"""TelemetryConfig: everything one process's telemetry needs, validated at construction.

Precedence for every setting: the explicit argument, then the environment variable (see ``otel_rl._env``), then
the default. The environment is read once, here; the hot path never looks at it.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from otel_rl import _env

ExporterKind = Literal["otlp", "console", "file", "none"]
Protocol = Literal["grpc", "http/protobuf"]

_EXPORTERS: tuple[str, ...] = ("otlp", "console", "file", "none")
_PROTOCOLS: tuple[str, ...] = ("grpc", "http/protobuf")
_DEFAULT_PORTS = {"grpc": 4317, "http/protobuf": 4318}

#: Reward buckets: fine around the common [-1, 1] range, coarse tails for shaped rewards.
DEFAULT_REWARD_BOUNDS: tuple[float, ...] = (
    -10.0, -5.0, -2.0, -1.0, -0.75, -0.5, -0.25, -0.1, 0.0,
    0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 2.0, 5.0, 10.0,
)  # fmt: skip
#: Staleness buckets in the user's version unit: every small lag, then roughly doubling.
DEFAULT_STALENESS_BOUNDS: tuple[int, ...] = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256, 512, 1024, 4096)


def _resolve(value: object, env_value: object, default: object) -> object:
    return value if value is not None else env_value if env_value is not None else default


@dataclass(frozen=True, kw_only=True)
class TelemetryConfig:
    """How one process emits telemetry. Unset (None) fields come from the environment, then defaults.

    >>> TelemetryConfig(run_id="r1", rank=0, world_size=1, exporter="none").rank
    0
    """

    service_name: str | None = None
    """``service.name``; env ``OTEL_SERVICE_NAME``; default ``"rl-trainer"``."""
    run_id: str | None = None
    """``rl.run.id``, shared by every rank; env ``OTEL_RL_RUN_ID``, ``TORCHELASTIC_RUN_ID``, ``SLURM_JOB_ID``.
    Required when ``world_size > 1``; a single process gets a random one."""
    rank: int | None = None
    """``rl.rank``; env ``RANK``, ``SLURM_PROCID``; default 0."""
    world_size: int | None = None
    """``rl.world_size``; env ``WORLD_SIZE``, ``SLURM_NTASKS``; default 1."""
    local_rank: int | None = None
    """``rl.local_rank``; env ``LOCAL_RANK``, ``SLURM_LOCALID``; default the rank."""
    role: str | None = None
    """``rl.role``: ``"trainer"``, ``"rollout"``, ...; env ``OTEL_RL_ROLE``; default ``"trainer"``."""
    exporter: ExporterKind | None = None
    """Destination: ``otlp``, ``console`` (a readable summary per step), ``file`` (JSON lines) or ``none``;
    env ``OTEL_RL_EXPORTER``; default ``otlp``."""
    endpoint: str | None = None
    """OTLP endpoint; env ``OTEL_EXPORTER_OTLP_ENDPOINT``; default ``http://localhost:4317`` (gRPC) or
    ``http://localhost:4318`` (HTTP). For HTTP, the base URL: ``/v1/metrics`` and ``/v1/logs`` are appended."""
    protocol: Protocol | None = None
    """``grpc`` or ``http/protobuf``; env ``OTEL_EXPORTER_OTLP_PROTOCOL``; default ``grpc``."""
    headers: Mapping[str, str] | None = None
    """Headers sent with every export (e.g. ``authorization``); env ``OTEL_EXPORTER_OTLP_HEADERS``. Never logged."""
    certificate_file: str | None = None
    """PEM file of trusted CAs, turns on TLS; env ``OTEL_EXPORTER_OTLP_CERTIFICATE``."""
    output_file: str | None = None
    """JSON-lines output for ``exporter="file"``; env ``OTEL_RL_OUTPUT_FILE``; default ``otel-rl-<rank>.jsonl``."""
    export_interval_s: float | None = None
    """Seconds between exports; env ``OTEL_METRIC_EXPORT_INTERVAL`` (ms); default 2. Keep it at most half the
    collector's aggregation interval (5 s by default), so every flush of the collector holds every rank."""
    export_timeout_s: float | None = None
    """Deadline of one export, retries included; env ``OTEL_EXPORTER_OTLP_TIMEOUT`` (ms); default 5."""
    extremes_hold_s: float = 10.0
    """How long each value of the ``*.max``/``*.min`` gauges is repeated in exports: keep it above the collector's
    aggregation interval (5 s by default), which keeps only the newest point of a rank per interval."""
    shutdown_timeout_s: float = 5.0
    """Longest :meth:`Telemetry.shutdown` may take, however the collector behaves."""
    reward_bounds: tuple[float, ...] = DEFAULT_REWARD_BOUNDS
    """Explicit bucket upper bounds of ``rl.reward`` (strictly increasing, finite)."""
    staleness_bounds: tuple[int, ...] = DEFAULT_STALENESS_BOUNDS
    """Explicit bucket upper bounds of ``rl.staleness`` (strictly increasing integers >= 0)."""
    max_reward_fns: int = 32
    """Distinct ``rl.reward.fn`` names before further names fold into ``_overflow``."""
    top_k: int = 2
    """Samples with the highest reward kept per step."""
    bottom_k: int = 2
    """Samples with the lowest reward kept per step."""
    random_k: int = 0
    """Samples kept per step by uniform reservoir sampling, besides the top and bottom."""
    sample_text_budget_bytes: int = 16_384
    """UTF-8 bytes kept of each text (prompt, response, target); longer texts are cut and flagged."""
    redact: Callable[[str, str], str] | None = None
    """``redact(field, text) -> text`` applied to each prompt, response and target before the byte budget; if it
    raises, the sample is dropped (``otel_rl.samples.dropped{reason="redaction"}``), never sent unredacted."""
    sample_queue_size: int = 4_096
    """Sample records waiting for export; beyond it the oldest are dropped and counted."""
    samples_as_span_events: bool = False
    """Also attach kept samples as events of a per-step span ``rl.step``."""
    seed: int | None = None
    """Seed of the reservoir sampler, for reproducible selections."""
    instance_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    """``service.instance.id``: unique per process, so a restarted rank is a new stream."""

    def __post_init__(self) -> None:
        rank = _resolve(self.rank, _env.read_int(_env.RANK_VARS), 0)
        world_size = _resolve(self.world_size, _env.read_int(_env.WORLD_SIZE_VARS), 1)
        local_rank = _resolve(self.local_rank, _env.read_int(_env.LOCAL_RANK_VARS), rank)
        run_id_env = _env.read_first(_env.RUN_ID_VARS)
        run_id = _resolve(self.run_id, run_id_env[1] if run_id_env else None, None)
        protocol = _resolve(self.protocol, _env.read(_env.OTEL_EXPORTER_OTLP_PROTOCOL), "grpc")
        settings = {
            "rank": rank,
            "world_size": world_size,
            "local_rank": local_rank,
            "protocol": protocol,
            "service_name": _resolve(self.service_name, _env.read(_env.OTEL_SERVICE_NAME), "rl-trainer"),
            "role": _resolve(self.role, _env.read(_env.OTEL_RL_ROLE), "trainer"),
            "exporter": _resolve(self.exporter, _env.read(_env.OTEL_RL_EXPORTER), "otlp"),
            "certificate_file": _resolve(self.certificate_file, _env.read(_env.OTEL_EXPORTER_OTLP_CERTIFICATE), None),
            "output_file": _resolve(self.output_file, _env.read(_env.OTEL_RL_OUTPUT_FILE), f"otel-rl-{rank}.jsonl"),
            "export_interval_s": _resolve(
                self.export_interval_s, _env.read_float(_env.OTEL_METRIC_EXPORT_INTERVAL, scale=1e-3), 2.0
            ),
            "export_timeout_s": _resolve(
                self.export_timeout_s, _env.read_float(_env.OTEL_EXPORTER_OTLP_TIMEOUT, scale=1e-3), 5.0
            ),
        }
        if self.headers is not None and not isinstance(self.headers, Mapping):
            raise TypeError(f'"headers" must be a mapping of str to str, got a {type(self.headers).__name__}')
        env_headers = _env.read(_env.OTEL_EXPORTER_OTLP_HEADERS)
        settings["headers"] = dict(
            self.headers
            if self.headers is not None
            else _env.parse_headers(env_headers, setting=_env.OTEL_EXPORTER_OTLP_HEADERS)
            if env_headers
            else {}
        )
        if isinstance(protocol, str) and protocol in _DEFAULT_PORTS:
            default_endpoint = f"http://localhost:{_DEFAULT_PORTS[str(protocol)]}"
            settings["endpoint"] = _resolve(
                self.endpoint, _env.read(_env.OTEL_EXPORTER_OTLP_ENDPOINT), default_endpoint
            )
        if run_id is None:
            if isinstance(world_size, int) and world_size > 1:
                raise ValueError(
                    f'"run_id" is required when "world_size" > 1 (got world_size={world_size!r}): set it, or '
                    f"{_env.OTEL_RL_RUN_ID}, or launch with torchrun --rdzv-id / SLURM"
                )
            run_id = f"run-{uuid.uuid4().hex[:12]}"
        settings["run_id"] = run_id
        for name, value in settings.items():
            object.__setattr__(self, name, value)
        self._validate()

    def _validate(self) -> None:
        _check_choice("exporter", self.exporter, _EXPORTERS)
        _check_choice("protocol", self.protocol, _PROTOCOLS)
        for name in ("service_name", "run_id", "role"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f'"{name}" must be a non-empty string, got {value!r}')
        for name, minimum in (("rank", 0), ("world_size", 1), ("local_rank", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f'"{name}" must be an integer >= {minimum}, got {value!r}')
        assert isinstance(self.rank, int) and isinstance(self.world_size, int)
        if self.rank >= self.world_size:
            raise ValueError(f'"rank" must be < "world_size" ({self.world_size!r}), got {self.rank!r}')
        for name in ("export_interval_s", "export_timeout_s", "shutdown_timeout_s", "extremes_hold_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f'"{name}" must be a positive number of seconds, got {value!r}')
        for name, minimum in (
            ("max_reward_fns", 1),
            ("top_k", 0),
            ("bottom_k", 0),
            ("random_k", 0),
            ("sample_text_budget_bytes", 0),
            ("sample_queue_size", 1),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f'"{name}" must be an integer >= {minimum}, got {value!r}')
        if self.redact is not None and not callable(self.redact):
            raise ValueError(f'"redact" must be a callable (field, text) -> text, got {self.redact!r}')
        _check_bounds("reward_bounds", self.reward_bounds, integer=False)
        _check_bounds("staleness_bounds", self.staleness_bounds, integer=True)
        if self.exporter == "otlp":
            endpoint = self.endpoint or ""
            if not endpoint.startswith(("http://", "https://")):
                raise ValueError(f'"endpoint" must start with http:// or https://, got {self.endpoint!r}')
        assert self.headers is not None
        for key, value in self.headers.items():
            if not isinstance(key, str) or not key:
                raise ValueError(f'"headers" keys must be non-empty strings, got {key!r}')
            if not isinstance(value, str):
                # the value is not shown: headers carry secrets
                raise ValueError(f'"headers" values must be strings, got a {type(value).__name__} for {key!r}')


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f'"{name}" must be one of {", ".join(choices)}, got {value!r}')


def _check_bounds(name: str, bounds: object, *, integer: bool) -> None:
    if not isinstance(bounds, tuple) or not bounds:
        raise ValueError(f'"{name}" must be a non-empty tuple of numbers, got {bounds!r}')
    for value in bounds:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f'"{name}" must hold finite numbers, got {value!r}')
        if integer and (value != int(value) or value < 0):
            raise ValueError(f'"{name}" must hold integers >= 0, got {value!r}')
    if any(b <= a for a, b in zip(bounds, bounds[1:])):
        raise ValueError(f'"{name}" must be strictly increasing, got {bounds!r}')
