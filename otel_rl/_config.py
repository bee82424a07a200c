"""TelemetryConfig: everything one process's telemetry needs, resolved and validated once, at construction.

Precedence for every setting: the explicit argument, then the environment variable (see ``otel_rl._env``), then
the default. The environment is read once, here, into a :class:`ResolvedConfig` whose fields are all set and
typed; the rest of the package reads only that, and the hot path never looks at the environment.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from otel_rl import _env
from otel_rl._buckets import DEFAULT_SCALE, MAX_SCALE

ExporterKind = Literal["otlp", "console", "file", "none"]
Protocol = Literal["grpc", "http/protobuf"]
HistogramForm = Literal["exponential", "explicit"]

_EXPORTERS: tuple[str, ...] = ("otlp", "console", "file", "none")
_PROTOCOLS: tuple[str, ...] = ("grpc", "http/protobuf")
_HISTOGRAM_FORMS: tuple[str, ...] = ("exponential", "explicit")
_DEFAULT_ENDPOINTS = {"grpc": "http://localhost:4317", "http/protobuf": "http://localhost:4318"}

#: Reward buckets: fine around the common [-1, 1] range, coarse tails for shaped rewards.
DEFAULT_REWARD_BOUNDS: tuple[float, ...] = (
    -10.0, -5.0, -2.0, -1.0, -0.75, -0.5, -0.25, -0.1, 0.0,
    0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 2.0, 5.0, 10.0,
)  # fmt: skip
#: Staleness buckets in the user's version unit: every small lag, then roughly doubling.
DEFAULT_STALENESS_BOUNDS: tuple[int, ...] = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256, 512, 1024, 4096)


@dataclass(frozen=True, kw_only=True)
class TelemetryConfig:
    """How one process emits telemetry, as the user says it: unset (None) fields come from the environment, then
    defaults. Resolved and validated once, at construction; :attr:`resolved` holds the outcome.

    >>> TelemetryConfig(run_id="r1", exporter="none").resolved.rank
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
    histogram: HistogramForm = "exponential"
    """How ``rl.reward``, ``rl.staleness`` and ``rl.metric`` are bucketed: ``exponential`` (base-2 exponential
    histograms at ``histogram_scale``, native histograms in Prometheus; no bounds to choose) or ``explicit``
    (classic buckets at ``reward_bounds`` / ``staleness_bounds``, for backends without native histograms)."""
    histogram_scale: int = DEFAULT_SCALE
    """Scale of the exponential histograms, 0 to 8: buckets are ``2**(1/2**scale)`` wide (5: 2.2%). Every rank
    of a run must use the same scale: the collector adds buckets of equal index and never rescales."""
    reward_bounds: tuple[float, ...] | None = None
    """Explicit bucket upper bounds of ``rl.reward`` (strictly increasing, finite), with ``histogram="explicit"``;
    default :data:`DEFAULT_REWARD_BOUNDS`."""
    staleness_bounds: tuple[int, ...] | None = None
    """Explicit bucket upper bounds of ``rl.staleness`` (strictly increasing integers >= 0), with
    ``histogram="explicit"``; default :data:`DEFAULT_STALENESS_BOUNDS`."""
    max_reward_fns: int = 32
    """Distinct ``rl.reward.fn`` names before further names fold into ``_overflow``."""
    max_metric_keys: int = 32
    """Distinct ``rl.metric.key`` names (``record_metric``) before further keys fold into ``_overflow``."""
    max_sample_tables: int = 16
    """Distinct sample tables (``record_sample(..., table=...)``) before further tables fold into ``_overflow``."""
    max_datasets: int = 16
    """Distinct ``rl.dataset`` names (``dataset=`` of rewards and staleness) before further ones fold into
    ``_overflow``."""
    max_phases: int = 16
    """Distinct ``rl.phase.name`` values (:meth:`Telemetry.set_phase`) before further ones fold into ``_overflow``."""
    solved_reward: float = 1.0
    """A rollout counts as solved when its reward is at least this (prompt-group outcomes of ``record_rollouts``)."""
    top_k: int = 2
    """Samples with the highest reward kept per step and table."""
    bottom_k: int = 2
    """Samples with the lowest reward kept per step and table."""
    random_k: int = 0
    """Samples kept per step and table by uniform reservoir sampling, besides the top and bottom."""
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
    resolved: ResolvedConfig = field(init=False, repr=False, compare=False)
    """The settings in force: every field resolved (argument, then environment, then default) and validated."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "resolved", _resolve(self))


@dataclass(frozen=True, kw_only=True)
class ResolvedConfig:
    """The settings in force for one process: :class:`TelemetryConfig` with every field resolved and checked.

    Fields mean what the same-named fields of :class:`TelemetryConfig` say; none is left unset.
    """

    service_name: str
    run_id: str
    rank: int
    world_size: int
    local_rank: int
    role: str
    exporter: ExporterKind
    endpoint: str
    protocol: Protocol
    headers: Mapping[str, str]
    certificate_file: str | None
    output_file: str
    export_interval_s: float
    export_timeout_s: float
    extremes_hold_s: float
    shutdown_timeout_s: float
    histogram: HistogramForm
    histogram_scale: int
    reward_bounds: tuple[float, ...]
    staleness_bounds: tuple[int, ...]
    max_reward_fns: int
    max_metric_keys: int
    max_sample_tables: int
    max_datasets: int
    max_phases: int
    solved_reward: float
    top_k: int
    bottom_k: int
    random_k: int
    sample_text_budget_bytes: int
    redact: Callable[[str, str], str] | None
    sample_queue_size: int
    samples_as_span_events: bool
    seed: int | None
    instance_id: str


def _pick(value: object, env_value: object, default: object) -> Any:
    return value if value is not None else env_value if env_value is not None else default


def _resolve(config: TelemetryConfig) -> ResolvedConfig:
    """Apply argument > environment > default to every field of ``config``, then validate the result."""
    rank = _pick(config.rank, _env.read_int(_env.RANK_VARS), 0)
    world_size = _pick(config.world_size, _env.read_int(_env.WORLD_SIZE_VARS), 1)
    run_id_env = _env.read_first(_env.RUN_ID_VARS)
    run_id = _pick(config.run_id, run_id_env[1] if run_id_env else None, None)
    protocol = _pick(config.protocol, _env.read(_env.OTEL_EXPORTER_OTLP_PROTOCOL), "grpc")
    _check_choice("protocol", protocol, _PROTOCOLS)
    if config.headers is not None and not isinstance(config.headers, Mapping):
        raise TypeError(f'"headers" must be a mapping of str to str, got a {type(config.headers).__name__}')
    env_headers = _env.read(_env.OTEL_EXPORTER_OTLP_HEADERS)
    headers = (
        config.headers
        if config.headers is not None
        else _env.parse_headers(env_headers, variable=_env.OTEL_EXPORTER_OTLP_HEADERS)
        if env_headers
        else {}
    )
    if run_id is None:
        if isinstance(world_size, int) and world_size > 1:
            raise ValueError(
                f'"run_id" is required when "world_size" > 1 (got world_size={world_size!r}): set it, or '
                f"{_env.OTEL_RL_RUN_ID}, or launch with torchrun --rdzv-id / SLURM"
            )
        run_id = f"run-{uuid.uuid4().hex[:12]}"
    values: dict[str, Any] = {item.name: getattr(config, item.name) for item in fields(ResolvedConfig)}
    values.update(
        service_name=_pick(config.service_name, _env.read(_env.OTEL_SERVICE_NAME), "rl-trainer"),
        run_id=run_id,
        rank=rank,
        world_size=world_size,
        local_rank=_pick(config.local_rank, _env.read_int(_env.LOCAL_RANK_VARS), rank),
        role=_pick(config.role, _env.read(_env.OTEL_RL_ROLE), "trainer"),
        exporter=_pick(config.exporter, _env.read(_env.OTEL_RL_EXPORTER), "otlp"),
        endpoint=_pick(config.endpoint, _env.read(_env.OTEL_EXPORTER_OTLP_ENDPOINT), _DEFAULT_ENDPOINTS[protocol]),
        protocol=protocol,
        headers=dict(headers),
        certificate_file=_pick(config.certificate_file, _env.read(_env.OTEL_EXPORTER_OTLP_CERTIFICATE), None),
        output_file=_pick(config.output_file, _env.read(_env.OTEL_RL_OUTPUT_FILE), f"otel-rl-{rank}.jsonl"),
        export_interval_s=_pick(
            config.export_interval_s, _env.read_float(_env.OTEL_METRIC_EXPORT_INTERVAL, scale=1e-3), 2.0
        ),
        export_timeout_s=_pick(
            config.export_timeout_s, _env.read_float(_env.OTEL_EXPORTER_OTLP_TIMEOUT, scale=1e-3), 5.0
        ),
        reward_bounds=_pick(config.reward_bounds, None, DEFAULT_REWARD_BOUNDS),
        staleness_bounds=_pick(config.staleness_bounds, None, DEFAULT_STALENESS_BOUNDS),
    )
    if config.histogram == "exponential":
        for name in ("reward_bounds", "staleness_bounds"):
            if getattr(config, name) is not None:
                raise ValueError(
                    f'"{name}" applies to histogram="explicit" only, got {name}={getattr(config, name)!r} with '
                    f'histogram="exponential" (exponential buckets need no bounds; set histogram="explicit")'
                )
    resolved = ResolvedConfig(**values)
    _validate(resolved)
    return resolved


def _validate(config: ResolvedConfig) -> None:
    _check_choice("exporter", config.exporter, _EXPORTERS)
    for name in ("service_name", "run_id", "role"):
        value = getattr(config, name)
        if not isinstance(value, str) or not value:
            raise ValueError(f'"{name}" must be a non-empty string, got {value!r}')
    for name, minimum in (("rank", 0), ("world_size", 1), ("local_rank", 0)):
        _check_integer(name, getattr(config, name), minimum)
    if config.rank >= config.world_size:
        raise ValueError(f'"rank" must be < "world_size" ({config.world_size!r}), got {config.rank!r}')
    for name in ("export_interval_s", "export_timeout_s", "shutdown_timeout_s", "extremes_hold_s"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f'"{name}" must be a positive number of seconds, got {value!r}')
    for name, minimum in (
        ("max_reward_fns", 1),
        ("max_metric_keys", 1),
        ("max_sample_tables", 1),
        ("max_datasets", 1),
        ("max_phases", 1),
        ("top_k", 0),
        ("bottom_k", 0),
        ("random_k", 0),
        ("sample_text_budget_bytes", 0),
        ("sample_queue_size", 1),
    ):
        _check_integer(name, getattr(config, name), minimum)
    if isinstance(config.solved_reward, bool) or not isinstance(config.solved_reward, (int, float)) or not math.isfinite(
        config.solved_reward
    ):
        raise ValueError(f'"solved_reward" must be a finite number, got {config.solved_reward!r}')
    if config.redact is not None and not callable(config.redact):
        raise ValueError(f'"redact" must be a callable (field, text) -> text, got {config.redact!r}')
    _check_choice("histogram", config.histogram, _HISTOGRAM_FORMS)
    if isinstance(config.histogram_scale, bool) or config.histogram_scale not in range(MAX_SCALE + 1):
        raise ValueError(f'"histogram_scale" must be an integer from 0 to {MAX_SCALE}, got {config.histogram_scale!r}')
    _check_bounds("reward_bounds", config.reward_bounds, integer=False)
    _check_bounds("staleness_bounds", config.staleness_bounds, integer=True)
    if config.exporter == "otlp" and not (isinstance(config.endpoint, str) and config.endpoint.startswith(("http://", "https://"))):
        raise ValueError(f'"endpoint" must start with http:// or https://, got {config.endpoint!r}')
    for key, value in config.headers.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f'"headers" keys must be non-empty strings, got {key!r}')
        if not isinstance(value, str):
            # the value is not shown: headers carry secrets
            raise ValueError(f'"headers" values must be strings, got a {type(value).__name__} for {key!r}')


def _check_integer(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f'"{name}" must be an integer >= {minimum}, got {value!r}')


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
