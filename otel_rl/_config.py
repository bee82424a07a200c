"""TelemetryConfig: everything one process's telemetry needs, resolved and validated once, at construction.

Precedence for every setting: the explicit argument, then the environment variable (see ``otel_rl._env``), then
the default. The environment is read once, here, into a :class:`ResolvedConfig` whose fields are all set and
typed; the rest of the package reads only that, and the hot path never looks at the environment.
"""

from __future__ import annotations

import ipaddress
import itertools
import logging
import math
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import InitVar, dataclass, field, fields
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from otel_rl import _env
from otel_rl._record.buckets import (
    DEFAULT_REWARD_BOUNDS,
    DEFAULT_SCALE,
    DEFAULT_STALENESS_BOUNDS,
    MAX_SCALE,
    HistogramForm,
)
from otel_rl._record.inputs import describe

_logger = logging.getLogger(__name__)

ExporterKind = Literal["otlp", "console", "file", "otlp+file", "none"]
OtlpProtocol = Literal["grpc", "http/protobuf"]

_DEFAULT_ENDPOINTS = {"grpc": "http://localhost:4317", "http/protobuf": "http://localhost:4318"}
_warned_plaintext: set[str] = set()


class Headers(Mapping[str, str]):
    """Export headers whose values never show: ``repr`` and ``str`` print the names only (they carry tokens).

    >>> Headers({"authorization": "Bearer secret"})
    Headers({'authorization': '<redacted>'})
    """

    def __init__(self, values: Mapping[str, str]) -> None:
        self._values = dict(values)

    def __getitem__(self, key: str) -> str:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Headers({dict.fromkeys(self._values, '<redacted>')!r})"


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
    group: str | None = None
    """``rl.run.group``: the group of runs this run belongs to, e.g. one configuration's seeds, which the comparison
    dashboard and ``otel-rl report --group`` draw as their mean with a min-max band; env ``OTEL_RL_GROUP``; default
    none. Every rank of a run must give the same group."""
    exporter: ExporterKind | None = None
    """Destination: ``otlp``, ``console`` (a readable summary per step), ``file`` (OTLP files in ``output_dir`` for
    ``otel-rl replay``, on nodes that cannot reach a collector), ``otlp+file`` (both) or ``none``; env
    ``OTEL_RL_EXPORTER``; default ``otlp``."""
    console_self_telemetry: bool | None = None
    """With ``exporter="console"``, also print otel-rl's own telemetry (the merge canary, sample export and value
    rejection counters); env ``OTEL_RL_CONSOLE_SELF_TELEMETRY`` (``true`` or ``false``); default off."""
    endpoint: str | None = None
    """OTLP endpoint; env ``OTEL_EXPORTER_OTLP_ENDPOINT``; default ``http://localhost:4317`` (gRPC) or
    ``http://localhost:4318`` (HTTP). Read as the OpenTelemetry SDK reads it: ``http://`` is plain text, ``https://``
    TLS; gRPC also takes ``host:port``, TLS unless env ``OTEL_EXPORTER_OTLP_INSECURE=true`` (the resolved endpoint
    then carries the scheme that says which). For HTTP, the base URL: ``/v1/metrics`` and ``/v1/logs`` are
    appended."""
    protocol: OtlpProtocol | None = None
    """``grpc`` or ``http/protobuf``; env ``OTEL_EXPORTER_OTLP_PROTOCOL``; default ``grpc``."""
    headers: Mapping[str, str] | None = None
    """Headers sent with every export (e.g. ``authorization``); env ``OTEL_EXPORTER_OTLP_HEADERS``. Never logged,
    never shown by ``repr``. Sent over plain ``http://`` to a host other than this one, they are warned about once."""
    certificate_file: str | None = None
    """PEM file of trusted CAs, turns on TLS; env ``OTEL_EXPORTER_OTLP_CERTIFICATE``."""
    client_certificate_file: str | None = None
    """PEM certificate chain this process presents to the collector (mutual TLS), with ``client_key_file``; env
    ``OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE``."""
    client_key_file: str | None = None
    """PEM private key of ``client_certificate_file``; env ``OTEL_EXPORTER_OTLP_CLIENT_KEY``."""
    output_dir: str | None = None
    """Folder of the OTLP files of ``exporter="file"`` (and ``"otlp+file"``): per signal, JSON lines of OTLP
    (opentelemetry-specification ``protocol/file-exporter.md``) in files named by the otel-rl version, rank, process
    and signal (:mod:`otel_rl_contract.files`); env ``OTEL_RL_OUTPUT_DIR``; default ``otel-rl-files``."""
    output_max_bytes: int = 64 * 1024 * 1024
    """Size at which a signal's file is closed and the next one begun."""
    output_max_files: int = 16
    """Files kept per signal and process: beyond them the oldest is deleted, its sample records and spans counted as
    dropped (``reason="rotated"``); a metrics file holds cumulative snapshots, so the newest always has the totals."""
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
    max_metric_keys: int = 512
    """Distinct ``rl.metric.key`` names (``record_metric``) before further keys fold into ``_overflow``. A verl GRPO
    step logs 81 keys, 113 with rollout correction, and its validation 75 more with ``n=16`` over two data sources
    (docs/contract.md); each key becomes six series per run."""
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
    span_queue_size: int = 16_384
    """Spans (steps and phases) waiting for export; beyond it the oldest are dropped and counted. A rank ends about
    3 + its phases spans per step: the default holds a few minutes of collector outage at several steps a second."""
    samples_as_span_events: bool = False
    """Also attach kept samples as events of this rank's step span ``rl.rank.step`` (with ``trace_phases``)."""
    trace_phases: bool = True
    """Export each step and phase as spans (one trace per step across ranks, ``otel_rl._state.phases``). Off: no spans;
    the phase durations and counts (the rank's own metrics) and the phase gauges still."""
    flops_per_token: float | None = None
    """Training FLOPs per trained token (about 6N for a model of N parameters, 2N more with a reference model);
    with ``peak_flops`` the dashboards show MFU = tokens trained/s x flops_per_token / sum of peak_flops."""
    peak_flops: float | None = None
    """Peak FLOP/s of this rank's device (e.g. 989e12 for an H100 SXM in BF16 dense); set on training ranks only."""
    gpus_per_rank: float | None = None
    """GPUs this rank holds, for the run's cost (``rl.gpu.seconds``: GPUs times the rank's lifetime); None counts one
    when CUDA is available to the process, else none."""
    gpu_hour_price: float | None = None
    """Price of one GPU-hour (any currency); with it the dashboards, the report and ``otel-rl status`` show cost so
    far, per step, per million trained tokens and per solved prompt group."""
    ground_truth_reward: str = "correctness"
    """The reward function (``rl.reward.fn``) the audit trusts as ground truth: RLRewardGaming fires when the total
    reward rises while this one stalls or falls. A run without it stays silent."""
    distinct_prompts: bool = True
    """Top and bottom samples prefer episodes of different prompts (see :class:`~otel_rl.TopBottomFilter`): a
    GRPO group's rollouts share a prompt and often a reward, and a table of one prompt twice says little."""
    seed: int | None = None
    """Seed of the reservoir sampler, for reproducible selections."""
    instance_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    """``service.instance.id``: unique per process, so a restarted rank is a new stream."""
    resolved: ResolvedConfig = field(init=False, repr=False, compare=False)
    """The settings in force: every field resolved (argument, then environment, then default) and validated."""

    def __post_init__(self) -> None:
        if self.headers is not None and isinstance(self.headers, Mapping):
            object.__setattr__(self, "headers", Headers(self.headers))
        object.__setattr__(self, "resolved", _resolve(self))


@dataclass(frozen=True, kw_only=True)
class ResolvedConfig(TelemetryConfig):
    """The settings in force for one process: a :class:`TelemetryConfig` whose every field is set (argument, then
    environment, then default) and checked. Only the fields that can come from the environment are declared again,
    with the types they have once resolved; the others mean and hold what the user form says."""

    service_name: str
    run_id: str
    rank: int
    world_size: int
    local_rank: int
    role: str
    exporter: ExporterKind
    console_self_telemetry: bool
    endpoint: str
    protocol: OtlpProtocol
    headers: Mapping[str, str]
    output_dir: str
    export_interval_s: float
    export_timeout_s: float
    reward_bounds: tuple[float, ...]
    staleness_bounds: tuple[int, ...]
    sources: InitVar[Mapping[str, str] | None] = None
    """The environment variable each setting that came from the environment was read from, so that an error names
    it (``environment variable OTEL_RL_EXPORTER must be ...``) rather than an argument the user never passed."""

    def __post_init__(self, sources: Mapping[str, str] | None) -> None:
        object.__setattr__(self, "headers", Headers(self.headers))
        object.__setattr__(self, "resolved", self)
        _validate(self, _Labels(sources or {}))


class _Labels:
    """How an error names a setting: ``"rank"`` when it was an argument (or its default), ``environment variable
    SLURM_PROCID`` when it came from there."""

    def __init__(self, sources: Mapping[str, str]) -> None:
        self.sources = dict(sources)

    def __call__(self, name: str) -> str:
        variable = self.sources.get(name)
        return f"environment variable {variable}" if variable is not None else f'"{name}"'

    def pick(self, name: str, value: object, found: tuple[str, object] | None, default: object) -> Any:
        """The argument if given, else the environment's value (remembering its variable), else ``default``."""
        if value is not None:
            return value
        if found is not None:
            self.sources[name] = found[0]
            return found[1]
        return default


def _resolve(config: TelemetryConfig) -> ResolvedConfig:
    """Apply argument > environment > default to every field of ``config``, then validate the result; errors name
    the argument or the environment variable the bad value came from."""
    label = _Labels({})
    pick = label.pick
    rank = pick("rank", config.rank, _env.read_int(_env.RANK_VARS), 0)
    world_size = pick("world_size", config.world_size, _env.read_int(_env.WORLD_SIZE_VARS), 1)
    _check_integer(label("rank"), rank, 0)  # now: the defaults below are made from them
    _check_integer(label("world_size"), world_size, 1)
    run_id = pick("run_id", config.run_id, _env.read_first(_env.RUN_ID_VARS), None)
    protocol = pick("protocol", config.protocol, _env.read_first((_env.OTEL_EXPORTER_OTLP_PROTOCOL,)), "grpc")
    _check_choice(label("protocol"), protocol, get_args(OtlpProtocol))
    exporter = pick("exporter", config.exporter, _env.read_first((_env.OTEL_RL_EXPORTER,)), "otlp")
    _check_choice(label("exporter"), exporter, get_args(ExporterKind))
    endpoint = pick("endpoint", config.endpoint, _env.read_first((_env.OTEL_EXPORTER_OTLP_ENDPOINT,)), None)
    if exporter in ("otlp", "otlp+file"):
        endpoint = otlp_endpoint(endpoint, protocol, label=label("endpoint"))
    elif endpoint is None:
        endpoint = _DEFAULT_ENDPOINTS[protocol]
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
                f'"run_id" is required when {label("world_size")} > 1 (got {describe(world_size)}): set it, or '
                f"{_env.OTEL_RL_RUN_ID}, or launch with torchrun --rdzv-id / SLURM"
            )
        run_id = f"run-{uuid.uuid4().hex[:12]}"
    values: dict[str, Any] = {item.name: getattr(config, item.name) for item in fields(config) if item.init}
    values.update(
        service_name=pick(
            "service_name", config.service_name, _env.read_first((_env.OTEL_SERVICE_NAME,)), "rl-trainer"
        ),
        run_id=run_id,
        rank=rank,
        world_size=world_size,
        local_rank=pick("local_rank", config.local_rank, _env.read_int(_env.LOCAL_RANK_VARS), rank),
        role=pick("role", config.role, _env.read_first((_env.OTEL_RL_ROLE,)), "trainer"),
        group=pick("group", config.group, _env.read_first((_env.OTEL_RL_GROUP,)), None),
        exporter=exporter,
        console_self_telemetry=pick(
            "console_self_telemetry",
            config.console_self_telemetry,
            _env.read_bool(_env.OTEL_RL_CONSOLE_SELF_TELEMETRY),
            False,
        ),
        endpoint=endpoint,
        protocol=protocol,
        headers=dict(headers),
        certificate_file=pick(
            "certificate_file", config.certificate_file, _env.read_first((_env.OTEL_EXPORTER_OTLP_CERTIFICATE,)), None
        ),
        client_certificate_file=pick(
            "client_certificate_file",
            config.client_certificate_file,
            _env.read_first((_env.OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE,)),
            None,
        ),
        client_key_file=pick(
            "client_key_file", config.client_key_file, _env.read_first((_env.OTEL_EXPORTER_OTLP_CLIENT_KEY,)), None
        ),
        output_dir=pick("output_dir", config.output_dir, _env.read_first((_env.OTEL_RL_OUTPUT_DIR,)), "otel-rl-files"),
        export_interval_s=pick(
            "export_interval_s",
            config.export_interval_s,
            _env.read_float(_env.OTEL_METRIC_EXPORT_INTERVAL, scale=1e-3),
            2.0,
        ),
        export_timeout_s=pick(
            "export_timeout_s",
            config.export_timeout_s,
            _env.read_float(_env.OTEL_EXPORTER_OTLP_TIMEOUT, scale=1e-3),
            5.0,
        ),
        reward_bounds=config.reward_bounds if config.reward_bounds is not None else DEFAULT_REWARD_BOUNDS,
        staleness_bounds=config.staleness_bounds if config.staleness_bounds is not None else DEFAULT_STALENESS_BOUNDS,
    )
    if config.histogram == "exponential":
        for name in ("reward_bounds", "staleness_bounds"):
            if getattr(config, name) is not None:
                raise ValueError(
                    f'"{name}" applies to histogram="explicit" only, got {name}={describe(getattr(config, name))} with '
                    f'histogram="exponential" (exponential buckets need no bounds; set histogram="explicit")'
                )
    resolved = ResolvedConfig(**values, sources=label.sources)
    _warn_plaintext_headers(resolved)
    return resolved


def otlp_endpoint(value: object, protocol: str, *, label: str = '"endpoint"') -> str:
    """The OTLP endpoint ``value`` (None: the protocol's default) as a URL whose scheme says whether TLS is used,
    read as the OpenTelemetry SDK reads it: ``http://`` plain text, ``https://`` TLS; for gRPC also ``host:port``,
    which is TLS unless ``OTEL_EXPORTER_OTLP_INSECURE=true``. HTTP needs a URL (the SDK would fail on every export).
    Errors name ``label``, the argument or variable the value came from.

    >>> otlp_endpoint("collector:4317", "grpc")
    'https://collector:4317'
    """
    if value is None:
        return _DEFAULT_ENDPOINTS[protocol]
    forms = "http://host:port or https://host:port" + (" or host:port" if protocol == "grpc" else "")
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise ValueError(f"{label} must be {forms}, got {describe(value)}")
    url = value
    if "://" not in value:
        if protocol != "grpc":
            raise ValueError(
                f'{label} must start with http:// or https:// with protocol "{protocol}" (host:port is a form of '
                f"gRPC endpoints), got {describe(value)}"
            )
        insecure = _env.read_bool(_env.OTEL_EXPORTER_OTLP_INSECURE)
        url = f"{'http' if insecure is not None and insecure[1] else 'https'}://{value}"
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises ValueError on a port that is not one
    except ValueError:
        raise ValueError(f"{label} has a port that is not a number from 0 to 65535, got {describe(value)}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{label} must be {forms}, got {describe(value)}")
    if parts.query or parts.fragment or (protocol == "grpc" and parts.path not in ("", "/")):
        what = "no path (a gRPC endpoint is a host and port)" if protocol == "grpc" else "no query"
        raise ValueError(f"{label} must be {forms} with {what}, got {describe(value)}")
    return url


def sends_otlp(config: ResolvedConfig) -> bool:
    """Whether ``config`` sends to a collector (``otlp`` or ``otlp+file``)."""
    return config.exporter in ("otlp", "otlp+file")


def writes_files(config: ResolvedConfig) -> bool:
    """Whether ``config`` writes the offline files (``file`` or ``otlp+file``)."""
    return config.exporter in ("file", "otlp+file")


def _warn_plaintext_headers(config: ResolvedConfig) -> None:
    """Warn once per endpoint when headers (tokens) would go over plain ``http://`` to another host."""
    if not sends_otlp(config) or not config.headers or config.certificate_file is not None:
        return
    parts = urlsplit(config.endpoint)
    if parts.scheme != "http" or _is_loopback(parts.hostname or "") or config.endpoint in _warned_plaintext:
        return
    _warned_plaintext.add(config.endpoint)
    _logger.warning(
        "otel-rl: export headers (%s) go to %s over plain http: anyone on the network can read them; use https:// "
        "(certificate_file for a private CA)",
        ", ".join(sorted(config.headers)),
        config.endpoint,
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _validate(config: ResolvedConfig, label: _Labels) -> None:
    _check_choice(label("exporter"), config.exporter, get_args(ExporterKind))
    for name in ("service_name", "run_id", "role", "output_dir"):
        value = getattr(config, name)
        if not isinstance(value, str) or not value:
            raise ValueError(f"{label(name)} must be a non-empty string, got {describe(value)}")
    if config.group is not None and (not isinstance(config.group, str) or not config.group):
        raise ValueError(f"{label('group')} must be a non-empty string or None, got {describe(config.group)}")
    for name, minimum in (("rank", 0), ("world_size", 1), ("local_rank", 0)):
        _check_integer(label(name), getattr(config, name), minimum)
    if config.rank >= config.world_size:
        raise ValueError(
            f"{label('rank')} must be < {label('world_size')} ({describe(config.world_size)}), "
            f"got {describe(config.rank)}"
        )
    for name in ("export_interval_s", "export_timeout_s", "shutdown_timeout_s", "extremes_hold_s"):
        value = getattr(config, name)
        if not _finite(value) or not 0 < value <= _LONGEST_S:
            raise ValueError(
                f"{label(name)} must be a positive number of seconds up to {_LONGEST_S:g}, got {describe(value)}"
                + (" (it is read in milliseconds)" if name in label.sources else "")
            )
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
        ("span_queue_size", 1),
        ("output_max_bytes", 1),
        ("output_max_files", 1),
    ):
        _check_integer(label(name), getattr(config, name), minimum)
    if not _finite(config.solved_reward):
        raise ValueError(f'"solved_reward" must be a finite number, got {describe(config.solved_reward)}')
    for name in ("flops_per_token", "peak_flops"):
        value = getattr(config, name)
        if value is not None and (not _finite(value) or value <= 0):
            raise ValueError(f'"{name}" must be a positive number or None, got {describe(value)}')
    for name in ("gpus_per_rank", "gpu_hour_price"):
        value = getattr(config, name)
        if value is not None and (not _finite(value) or value < 0):
            raise ValueError(f'"{name}" must be a number >= 0 or None, got {describe(value)}')
    if not isinstance(config.ground_truth_reward, str) or not config.ground_truth_reward:
        raise ValueError(
            f'"ground_truth_reward" must be a reward function name, got {describe(config.ground_truth_reward)}'
        )
    for name in ("samples_as_span_events", "distinct_prompts", "trace_phases", "console_self_telemetry"):
        if not isinstance(getattr(config, name), bool):
            raise ValueError(f'"{name}" must be a bool, got {describe(getattr(config, name))}')
    if (config.client_certificate_file is None) != (config.client_key_file is None):
        raise ValueError(
            '"client_certificate_file" and "client_key_file" go together (mutual TLS), got '
            f"client_certificate_file={describe(config.client_certificate_file)} "
            f"client_key_file={describe(config.client_key_file)}"
        )
    if config.redact is not None and not callable(config.redact):
        raise ValueError(f'"redact" must be a callable (field, text) -> text, got {describe(config.redact)}')
    _check_choice(label("histogram"), config.histogram, get_args(HistogramForm))
    if isinstance(config.histogram_scale, bool) or config.histogram_scale not in range(MAX_SCALE + 1):
        raise ValueError(
            f'"histogram_scale" must be an integer from 0 to {MAX_SCALE}, got {describe(config.histogram_scale)}'
        )
    _check_bounds("reward_bounds", config.reward_bounds, integer=False)
    _check_bounds("staleness_bounds", config.staleness_bounds, integer=True)
    if sends_otlp(config) and otlp_endpoint(config.endpoint, config.protocol, label=label("endpoint")) != (
        config.endpoint
    ):
        raise ValueError(f"{label('endpoint')} must be resolved to a URL, got {describe(config.endpoint)}")
    for key, value in config.headers.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f'"headers" keys must be non-empty strings, got {describe(key)}')
        if not isinstance(value, str):
            # the value is not shown: headers carry secrets
            raise ValueError(f'"headers" values must be strings, got a {type(value).__name__} for {describe(key)}')


_LONGEST_S = 1e9
"""The longest duration a seconds setting may have (about 31 years): nanosecond arithmetic stays in range."""


def _finite(value: object) -> bool:
    """Whether ``value`` is a real number (not a bool) that a double holds finitely."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond a double's range
        return False


def _check_integer(label: str, value: object, minimum: int) -> None:
    """``label``: how the error names the setting (``"rank"``, ``environment variable RANK``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{label} must be an integer >= {minimum}, got {describe(value)}")


def _check_choice(label: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{label} must be one of {', '.join(choices)}, got {describe(value)}")


def _check_bounds(name: str, bounds: object, *, integer: bool) -> None:
    if not isinstance(bounds, tuple) or not bounds:
        raise ValueError(f'"{name}" must be a non-empty tuple of numbers, got {describe(bounds)}')
    for value in bounds:
        if not _finite(value):
            raise ValueError(f'"{name}" must hold finite numbers, got {describe(value)}')
        if integer and (value != int(value) or value < 0):
            raise ValueError(f'"{name}" must hold integers >= 0, got {describe(value)}')
    if any(b <= a for a, b in itertools.pairwise(bounds)):
        raise ValueError(f'"{name}" must be strictly increasing, got {describe(bounds)}')
