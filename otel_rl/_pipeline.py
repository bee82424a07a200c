"""Construction: everything a :class:`~otel_rl.Telemetry` records through, built in one place from its configuration.

The stages, in the order a value meets them: the summarizers of :mod:`otel_rl._record` (one per distribution kind,
their kernels compiled here once), the label caps, the state of :mod:`otel_rl._state` (the cumulative store with the
run's start gauges, the merge canary, the phase tracer, a step's samples), and what leaves the process from
:mod:`otel_rl._export` (the exporters, one export worker for metrics and records and one for spans, the SDK's
logger and tracer providers wired to them). ``Telemetry`` holds the :class:`Pipeline` and calls into its parts; it
builds nothing itself.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

import otel_rl_contract as contract
import torch
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_rl._config import ResolvedConfig
from otel_rl._export.console import PhaseSummary
from otel_rl._export.exporters import Exporters, build_exporters, destination
from otel_rl._export.files import OfflineFiles
from otel_rl._export.health import ExportHealth
from otel_rl._export.outbox import DROPPED_ROTATED
from otel_rl._export.worker import ExportWorker, QueueLogProcessor, QueueSpanProcessor
from otel_rl._record.buckets import Layouts
from otel_rl._record.rollouts import RolloutSummarizer
from otel_rl._record.samples import SampleFilter, TopBottomFilter
from otel_rl._record.stats import StalenessSummarizer, ValueSummarizer
from otel_rl._state.canary import MergeCanary
from otel_rl._state.phases import DerivedIds, PhaseTracer
from otel_rl._state.self_telemetry import LabelCap, SelfTelemetry
from otel_rl._state.steps import StepSamples
from otel_rl._state.store import MetricStore

_ROTATED = {"logs": contract.SAMPLES_DROPPED, "traces": contract.SPANS_DROPPED}
"""The counter of the items a rotation of the offline files deletes (a metrics file holds none: cumulative
snapshots)."""
_CONSOLE_INTERVAL_S = 1e9
"""Console mode exports at each ``step()`` (and flush and shutdown) only, never halfway through a step."""


@dataclass(frozen=True)
class Summarizers:
    """A call's values → :class:`~otel_rl._record.stats.Statistics`, one summarizer per kind of distribution."""

    rewards: ValueSummarizer
    metrics: ValueSummarizer
    staleness: StalenessSummarizer
    dropped_lengths: ValueSummarizer
    dropped_staleness: ValueSummarizer
    rollouts: RolloutSummarizer


@dataclass(frozen=True)
class Caps:
    """The cardinality caps of the names callers choose: reward functions, metric keys, datasets, phases."""

    reward_fns: LabelCap
    metric_keys: LabelCap
    datasets: LabelCap
    phases: LabelCap


@dataclass(frozen=True)
class Pipeline:
    """What one process records through, from a call's values to the exporters."""

    settings: ResolvedConfig
    resource: Resource
    summarizers: Summarizers
    caps: Caps
    store: MetricStore
    self_telemetry: SelfTelemetry
    canary: MergeCanary
    phases: PhaseTracer
    steps: StepSamples
    worker: ExportWorker
    """Exports metrics and sample records (and, in console mode, prints each step)."""
    span_worker: ExportWorker | None
    """Exports spans on a thread of their own, so a failing trace path never holds metrics back (None: no spans, or
    the console's, which print with the step)."""
    tracer_provider: TracerProvider | None
    output: OfflineFiles | None
    """The offline files the file exporters write (closed at shutdown)."""


def build_resource(config: ResolvedConfig) -> Resource:
    """The process's resource: service, instance, run (its group when given) and rank attributes (plus
    ``OTEL_RESOURCE_ATTRIBUTES``)."""
    return Resource.create(
        {
            SERVICE_NAME: config.service_name,
            SERVICE_INSTANCE_ID: config.instance_id,
            contract.RUN_ID: config.run_id,
            contract.RANK: config.rank,
            contract.WORLD_SIZE: config.world_size,
            contract.LOCAL_RANK: config.local_rank,
            contract.ROLE: config.role,
            **({} if config.group is None else {contract.RUN_GROUP: config.group}),
        }
    )


def layouts(settings: ResolvedConfig) -> Layouts:
    """The bucket layout of every distribution role under ``settings`` (see
    :class:`~otel_rl._record.buckets.Layouts`)."""
    return Layouts.resolve(
        settings.histogram,
        scale=settings.histogram_scale,
        reward_bounds=settings.reward_bounds,
        staleness_bounds=settings.staleness_bounds,
    )


def build_pipeline(
    settings: ResolvedConfig,
    injected: Exporters,
    *,
    sample_filter: Callable[[], SampleFilter] | None,
    clock: Callable[[], int] = time.time_ns,
) -> Pipeline:
    """Build every part for ``settings``: ``injected`` exporters replace, each on its own, those ``settings`` would
    build; ``sample_filter`` makes each sample table's filter (default: top/bottom-k); ``clock`` gives the wall-clock
    time of points and records in nanoseconds. The run's start gauges are recorded here, once."""
    resource = build_resource(settings)
    console = settings.exporter == "console"
    store = MetricStore(
        resource,
        start_time_ns=clock(),
        version=contract.SCOPE_VERSION,
        hold_ns=0 if console else int(settings.extremes_hold_s * 1e9),  # console: each step's own extremes
    )
    self_telemetry = SelfTelemetry(store)
    summarizers = _summarizers(settings)
    caps = Caps(
        reward_fns=LabelCap(contract.REWARDS.histogram.name, "max_reward_fns", settings.max_reward_fns, self_telemetry),
        metric_keys=LabelCap(
            contract.METRICS.histogram.name, "max_metric_keys", settings.max_metric_keys, self_telemetry
        ),
        datasets=LabelCap(contract.DATASET, "max_datasets", settings.max_datasets, self_telemetry),
        phases=LabelCap(contract.PHASES.name, "max_phases", settings.max_phases, self_telemetry),
    )
    _record_run_start(store, settings, clock)
    exporters = build_exporters(
        settings, injected, dropped=lambda signal, items: store.add(_ROTATED[signal], DROPPED_ROTATED, items)
    )
    traced = (settings.trace_phases or settings.samples_as_span_events) and exporters.spans is not None
    workers: list[ExportWorker] = []
    health = ExportHealth(
        destination(settings),
        queue_size=settings.sample_queue_size,
        span_queue_size=settings.span_queue_size,
        pending=lambda: (workers[0].pending()[0], workers[1].pending()[1] if len(workers) > 1 else 0),
    )
    worker = functools.partial(
        ExportWorker,
        store,
        interval_s=_CONSOLE_INTERVAL_S if console else settings.export_interval_s,
        timeout_s=settings.export_timeout_s,
        queue_size=settings.sample_queue_size,
        span_queue_size=settings.span_queue_size,
        clock=clock,
        health=health,
    )
    workers.append(worker(metric_exporter=exporters.metrics, log_exporter=exporters.logs))
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(QueueLogProcessor(workers[0]))
    tracer_provider: TracerProvider | None = None
    ids = DerivedIds()
    if traced and isinstance(exporters.spans, PhaseSummary):
        tracer_provider = TracerProvider(resource=resource, id_generator=ids)
        # only appends: the step's phases are there when it prints
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporters.spans))
    elif traced:
        metrics_worker = workers[0]
        workers.append(
            worker(
                metric_exporter=None,
                log_exporter=None,
                span_exporter=exporters.spans,
                collector_up=lambda: metrics_worker.metrics_up,
            )
        )
        tracer_provider = TracerProvider(resource=resource, id_generator=ids)
        tracer_provider.add_span_processor(QueueSpanProcessor(workers[1]))
    phases = PhaseTracer(
        run_id=settings.run_id, rank=settings.rank, store=store, tracer_provider=tracer_provider, ids=ids, clock=clock
    )
    steps = StepSamples(
        settings,
        new_filter=sample_filter or functools.partial(_top_bottom, settings),
        logger=logger_provider.get_logger(contract.SCOPE_NAME, contract.SCOPE_VERSION),
        store=store,
        self_telemetry=self_telemetry,
        clock=clock,
    )
    return Pipeline(
        settings=settings,
        resource=resource,
        summarizers=summarizers,
        caps=caps,
        store=store,
        self_telemetry=self_telemetry,
        canary=MergeCanary(settings, store),
        phases=phases,
        steps=steps,
        worker=workers[0],
        span_worker=workers[1] if len(workers) > 1 else None,
        tracer_provider=tracer_provider,
        output=exporters.output,
    )


def _summarizers(settings: ResolvedConfig) -> Summarizers:
    """One summarizer per kind of distribution, their CPU kernels compiled now (numba caches them per machine)."""
    layout = layouts(settings)
    summarizers = Summarizers(
        rewards=ValueSummarizer(layout.of(contract.REWARDS)),
        metrics=ValueSummarizer(layout.of(contract.METRICS)),
        staleness=StalenessSummarizer(layout.of(contract.STALENESS)),
        dropped_lengths=ValueSummarizer(layout.of(contract.DROPPED_LENGTHS)),
        dropped_staleness=ValueSummarizer(layout.of(contract.DROPPED_STALENESS)),
        rollouts=RolloutSummarizer(layout, solved_reward=settings.solved_reward),
    )
    for warmed in (summarizers.rewards, summarizers.metrics, summarizers.staleness, summarizers.rollouts):
        warmed.warm_up()
    return summarizers


def _record_run_start(store: MetricStore, settings: ResolvedConfig, clock: Callable[[], int]) -> None:
    """The run gauges a rank states once: its start, not finished, one rank up of the world size, what it says about
    FLOPs and cost, and the ground-truth reward function."""
    store.set(contract.RUN_START, (), clock() / 1e9)
    store.set(contract.RUN_FINISHED, (), 0)
    store.set(contract.RANKS_UP, (), 1)
    store.set(contract.RANKS_EXPECTED, (), settings.world_size)
    if settings.flops_per_token is not None:
        store.set(contract.FLOPS_PER_TOKEN, (), settings.flops_per_token)
    if settings.peak_flops is not None:
        store.set(contract.FLOPS_PEAK, (), settings.peak_flops)
    store.accrue(contract.GPU_SECONDS, (), _gpus(settings.gpus_per_rank))
    if settings.gpu_hour_price is not None:
        store.set(contract.GPU_HOUR_PRICE, (), settings.gpu_hour_price)
    store.set(contract.GROUND_TRUTH, ((contract.REWARD_FN, settings.ground_truth_reward),), 1)


def _gpus(stated: float | None) -> float:
    """The GPUs a rank holds: as stated, else one when CUDA is available to the process (a rank drives one device)."""
    if stated is not None:
        return stated
    return 1.0 if torch.cuda.is_available() else 0.0


def _top_bottom(settings: ResolvedConfig) -> SampleFilter:
    """The default sample filter of a table: top/bottom-k by reward, with the run's settings."""
    return TopBottomFilter(
        top_k=settings.top_k,
        bottom_k=settings.bottom_k,
        random_k=settings.random_k,
        seed=settings.seed,
        distinct_prompts=settings.distinct_prompts,
    )
