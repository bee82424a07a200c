"""Telemetry: the one object a training process records through; it wires the parts and guards every entry point.

Two error regimes. Construction validates its configuration and raises at once. After that no method raises into
the training loop: each runs under the guard of ``otel_rl._guard``; inputs are converted by ``otel_rl._inputs``;
a bad part of the input is dropped, counted in ``otel_rl.values.rejected`` and warned about once
(``otel_rl._self_telemetry``), and the valid part is kept.

The parts: summarizers turn a call's values into :class:`~otel_rl._stats.Statistics` (``otel_rl._stats``,
``otel_rl._rollouts``), the :class:`~otel_rl._store.MetricStore` folds them into every metric of the distribution,
:class:`StepSamples` (``otel_rl._steps``) turns a step's kept samples into log records and exemplars, and the export
worker (``otel_rl._export``) sends it all from its own thread.
"""

from __future__ import annotations

import atexit
import functools
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal

import otel_rl_contract as contract
import torch
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import LogRecordExporter
from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter

from otel_rl import _joint
from otel_rl._buckets import Layouts
from otel_rl._canary import MergeCanary
from otel_rl._config import ResolvedConfig, TelemetryConfig
from otel_rl._console import PhaseSummary
from otel_rl._export import (
    Exporters,
    ExportWorker,
    QueueLogProcessor,
    QueueSpanProcessor,
    build_exporters,
    destination,
    shutdown_within,
)
from otel_rl._export_health import ExportHealth
from otel_rl._guard import failed, guarded
from otel_rl._inputs import BadInput, as_integer, as_real, as_values, describe
from otel_rl._phases import DerivedIds, PhaseTracer, TrajectoryContext
from otel_rl._rollouts import RolloutSummarizer
from otel_rl._samples import EpisodeSample, SampleFilter, TopBottomFilter
from otel_rl._self_telemetry import LabelCap, SelfTelemetry
from otel_rl._stats import StalenessSummarizer, Statistics, ValueSummarizer
from otel_rl._steps import StepSamples
from otel_rl._store import MetricStore, attributes

_CONSOLE_INTERVAL_S = 1e9
"""Console mode exports at each ``step()`` (and flush and shutdown) only, never halfway through a step."""


def build_resource(config: ResolvedConfig) -> Resource:
    """The process's resource: service, instance, run and rank attributes (plus ``OTEL_RESOURCE_ATTRIBUTES``)."""
    return Resource.create(
        {
            SERVICE_NAME: config.service_name,
            SERVICE_INSTANCE_ID: config.instance_id,
            contract.RUN_ID: config.run_id,
            contract.RANK: config.rank,
            contract.WORLD_SIZE: config.world_size,
            contract.LOCAL_RANK: config.local_rank,
            contract.ROLE: config.role,
        }
    )


def layouts(settings: ResolvedConfig) -> Layouts:
    """The bucket layout of every distribution role under ``settings`` (see :class:`~otel_rl._buckets.Layouts`)."""
    return Layouts.resolve(
        settings.histogram,
        scale=settings.histogram_scale,
        reward_bounds=settings.reward_bounds,
        staleness_bounds=settings.staleness_bounds,
    )


def _gpus(stated: float | None) -> float:
    """The GPUs a rank holds: as stated, else one when CUDA is available to the process (a rank drives one device)."""
    if stated is not None:
        return stated
    return 1.0 if torch.cuda.is_available() else 0.0


class Telemetry:
    """Records rewards, staleness and samples of one process and exports them in the background.

    ``metric_exporter``, ``log_exporter`` and ``span_exporter`` replace, each on its own, the exporters ``config``
    would build (tests pass the SDK's in-memory ones); ``sample_filter`` makes the filter of each sample table in
    place of the default top/bottom-k one (called once per table); ``clock`` gives the wall-clock time of points
    and records, in nanoseconds.
    """

    def __init__(
        self,
        config: TelemetryConfig | None = None,
        *,
        metric_exporter: MetricExporter | None = None,
        log_exporter: LogRecordExporter | None = None,
        span_exporter: SpanExporter | None = None,
        sample_filter: Callable[[], SampleFilter] | None = None,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.config = config if config is not None else TelemetryConfig()
        settings = self.config.resolved
        self._settings = settings
        self.resource = build_resource(settings)
        console = settings.exporter == "console"
        self._store = MetricStore(
            self.resource,
            start_time_ns=clock(),
            version=contract.SCOPE_VERSION,
            hold_ns=0 if console else int(settings.extremes_hold_s * 1e9),  # console: each step's own extremes
        )
        self._self_telemetry = SelfTelemetry(self._store)
        self._canary = MergeCanary(settings, self._store)
        layout = layouts(settings)
        self._rewards = ValueSummarizer(layout.of(contract.REWARDS))
        self._metrics = ValueSummarizer(layout.of(contract.METRICS))
        self._staleness = StalenessSummarizer(layout.of(contract.STALENESS))
        self._rewards.warm_up()
        self._metrics.warm_up()
        self._staleness.warm_up()
        self._dropped = {
            d: ValueSummarizer(layout.of(d)) for d in (contract.DROPPED_LENGTHS, contract.DROPPED_STALENESS)
        }
        self._rollouts = RolloutSummarizer(layout, solved_reward=settings.solved_reward)
        self._rollouts.warm_up()
        self._reward_fns = LabelCap(
            contract.REWARDS.histogram.name, "max_reward_fns", settings.max_reward_fns, self._self_telemetry
        )
        self._metric_keys = LabelCap(
            contract.METRICS.histogram.name, "max_metric_keys", settings.max_metric_keys, self._self_telemetry
        )
        self._datasets = LabelCap(contract.DATASET, "max_datasets", settings.max_datasets, self._self_telemetry)
        self._phase_names = LabelCap(contract.PHASES.name, "max_phases", settings.max_phases, self._self_telemetry)
        self._policy_version: int | None = None
        self._store.set(contract.RUN_START, (), clock() / 1e9)
        self._store.set(contract.RUN_FINISHED, (), 0)
        self._store.set(contract.RANKS_UP, (), 1)
        self._store.set(contract.RANKS_EXPECTED, (), settings.world_size)
        if settings.flops_per_token is not None:
            self._store.set(contract.FLOPS_PER_TOKEN, (), settings.flops_per_token)
        if settings.peak_flops is not None:
            self._store.set(contract.FLOPS_PEAK, (), settings.peak_flops)
        self._store.accrue(contract.GPU_SECONDS, (), _gpus(settings.gpus_per_rank))
        if settings.gpu_hour_price is not None:
            self._store.set(contract.GPU_HOUR_PRICE, (), settings.gpu_hour_price)
        self._store.set(contract.GROUND_TRUTH, ((contract.REWARD_FN, settings.ground_truth_reward),), 1)
        exporters = build_exporters(settings, Exporters(metric_exporter, log_exporter, span_exporter))
        self._output = exporters.output
        traced = (settings.trace_phases or settings.samples_as_span_events) and exporters.spans is not None
        interval_s = _CONSOLE_INTERVAL_S if console else settings.export_interval_s
        self._span_worker: ExportWorker | None = None
        health = ExportHealth(
            destination(settings),
            queue_size=settings.sample_queue_size,
            span_queue_size=settings.span_queue_size,
            pending=self._pending,
        )
        worker = functools.partial(
            ExportWorker,
            self._store,
            interval_s=interval_s,
            timeout_s=settings.export_timeout_s,
            queue_size=settings.sample_queue_size,
            span_queue_size=settings.span_queue_size,
            clock=clock,
            health=health,
        )
        self._worker = worker(metric_exporter=exporters.metrics, log_exporter=exporters.logs)
        self._logger_provider = LoggerProvider(resource=self.resource)
        self._logger_provider.add_log_record_processor(QueueLogProcessor(self._worker))
        self._tracer_provider: TracerProvider | None = None
        ids = DerivedIds()
        if traced and isinstance(exporters.spans, PhaseSummary):
            self._tracer_provider = TracerProvider(resource=self.resource, id_generator=ids)
            # only appends: the step's phases are there when it prints
            self._tracer_provider.add_span_processor(SimpleSpanProcessor(exporters.spans))
        elif traced:
            self._span_worker = worker(
                metric_exporter=None,
                log_exporter=None,
                span_exporter=exporters.spans,
                collector_up=lambda: self._worker.metrics_up,
            )
            self._tracer_provider = TracerProvider(resource=self.resource, id_generator=ids)
            self._tracer_provider.add_span_processor(QueueSpanProcessor(self._span_worker))
        self._phases = PhaseTracer(
            run_id=settings.run_id,
            rank=settings.rank,
            store=self._store,
            tracer_provider=self._tracer_provider,
            ids=ids,
            clock=clock,
        )
        self._steps = StepSamples(
            settings,
            new_filter=sample_filter
            or (
                lambda: TopBottomFilter(
                    top_k=settings.top_k,
                    bottom_k=settings.bottom_k,
                    random_k=settings.random_k,
                    seed=settings.seed,
                    distinct_prompts=settings.distinct_prompts,
                )
            ),
            logger=self._logger_provider.get_logger(contract.SCOPE_NAME, contract.SCOPE_VERSION),
            store=self._store,
            self_telemetry=self._self_telemetry,
            clock=clock,
        )
        self._closed = False
        atexit.register(self._shutdown_at_exit)

    @property
    def self_telemetry(self) -> SelfTelemetry:
        """Where this process counts what it dropped (the guard of every method counts there)."""
        return self._self_telemetry

    # -- recording (never raises) -------------------------------------------------------------------------------

    @guarded(contract.REWARDS.histogram.name, values="rewards")
    def record_rewards(
        self, rewards: Any, *, fn: str = contract.REWARD_FN_TOTAL, mask: Any = None, dataset: str | None = None
    ) -> None:
        """Record rewards into ``rl.reward`` under ``rl.reward.fn=fn`` (and ``rl.dataset=dataset`` when given).

        ``rewards``: a torch tensor on any device, numpy array, number, list or list of lists. Shape
        ``(rollouts,)`` (or a scalar) is one reward per rollout; ``(rollouts, tokens)`` is the per-token broadcast
        form, counted once per rollout at its first token where ``mask`` is set; more dimensions are rejected
        (``shape``). ``mask`` (same shape, nonzero = keep) selects what is recorded. NaN and inf, and ``None`` or
        non-numbers inside a list, are rejected and counted one by one; everything else is kept, in float64 for
        Python numbers. ``dataset`` (the data source) is capped at ``max_datasets`` names; later ones are recorded
        as ``_overflow`` and counted.
        """
        statistics = self._rewards.summarize(rewards, mask)
        self._record(
            contract.REWARDS,
            statistics,
            lambda: {contract.REWARD_FN: self._reward_fns.label(fn), **self._dataset(dataset)},
        )

    @guarded("rl.rollouts", values="mask")
    def record_rollouts(
        self,
        *,
        mask: Any = None,
        advantages: Any = None,
        response_lengths: Any = None,
        entropy: Any = None,
        logprobs: Any = None,
        inference_logprobs: Any = None,
        rewards: Any = None,
        group_ids: Any = None,
        versions_spanned: Any = None,
        reward_breakdown: Mapping[str, Any] | None = None,
    ) -> None:
        """Record one step's rollout health signals in one call; every argument is optional.

        - ``advantages`` ``(rollouts,)`` (or per token, counted at each rollout's first selected token) into
          ``rl.advantage``, and rollouts by advantage sign into ``rl.advantage.sign``;
        - ``response_lengths`` ``(rollouts,)`` into ``rl.response.length`` (negative lengths dropped, counted);
        - ``entropy`` per token (any shape; the mask's when there is one) into ``rl.entropy``;
        - ``logprobs`` (trainer) and ``inference_logprobs`` (inference engine), per token: the importance ratio
          ``exp(logprobs - inference_logprobs)`` into ``rl.importance_ratio`` and the mismatch
          KL(pi_inference || pi_train) estimators k1 and k3 into ``rl.mismatch.kl``;
        - ``group_ids`` with ``rewards`` ``(rollouts,)``: prompt groups solved by none / some / all of their
          rollouts (``reward >= solved_reward``) into ``rl.groups``, zero-variance groups into
          ``rl.groups.zero_variance``. A group's rollouts must be recorded in one call;
        - ``versions_spanned`` ``(rollouts,)``: how many policy versions each trajectory's tokens were generated
          with (1 unless generation went on across weight updates) into ``rl.trajectory.versions``;
        - ``rewards`` (the total, ``(rollouts,)``) with ``response_lengths`` and with each entry of
          ``reward_breakdown`` (reward function name to ``(rollouts,)``): the sums their correlation and covariance
          need, over the rollouts that have both, into ``rl.joint`` (``rl.joint.x`` ``response_length`` or
          ``reward.<fn>``); rollouts missing either value are counted (``unpaired``). The audit rules read them:
          whether length is paid, which function drives the total. Record the functions' own distributions with
          :meth:`record_rewards`.

        ``mask`` ``(rollouts, tokens)`` (or ``(rollouts,)``; nonzero = keep) selects tokens; rollouts without any
        are left out of the per-rollout fields, and a per-rollout field must have as many rollouts as the mask
        (else it is rejected, ``shape``). A bad field is dropped and counted (``otel_rl.values.rejected``), the
        others kept; signs are counted only with accepted advantages; NaN log-probabilities drop their tokens only;
        an unusable mask rejects every field.
        """
        result = self._rollouts.summarize(
            mask=mask,
            advantages=advantages,
            response_lengths=response_lengths,
            entropy=entropy,
            logprobs=logprobs,
            inference_logprobs=inference_logprobs,
            rewards=rewards,
            group_ids=group_ids,
            versions_spanned=versions_spanned,
            reward_breakdown=[
                (f"reward.{self._reward_fns.label(fn)}", v) for fn, v in (reward_breakdown or {}).items()
            ],
        )
        for metric, bad_input, values in result.rejected:
            self._self_telemetry.reject_call(metric, bad_input, values)
        for metric, reason, amount in result.rejected_parts:
            if amount:
                self._self_telemetry.reject(metric, reason, amount, f"{amount} value(s) rejected: {reason}")
        for distribution, attrs, statistics in result.distributions:
            self._store.record(distribution, attrs, statistics)
            self._self_telemetry.reject_parts(distribution.histogram.name, statistics)
        for counter, attrs, amount in result.counts:
            self._store.add(counter, attrs, amount)
        for label, sums in result.joint:
            for moment, total in zip(_joint.MOMENTS, sums, strict=True):
                self._store.add(contract.JOINT, ((contract.JOINT_MOMENT, moment), (contract.JOINT_X, label)), total)

    @guarded(contract.METRICS.histogram.name, values="values")
    def record_metric(self, key: str, values: Any, *, mask: Any = None) -> None:
        """Record any other scalar series (loss, KL, entropy, ...) under ``rl.metric{rl.metric.key=key}``.

        ``values``: a number or any number of values, of any shape (every element is a value). Exported like
        rewards (an exponential histogram, so quantiles too; with ``histogram="explicit"`` a single bucket, since
        no bounds fit every key): mean, sum, standard deviation, max and min are all derivable downstream, merged
        exactly across ranks. A key takes one of the ``max_metric_keys`` slots only once a value of it is kept.
        """
        statistics = self._metrics.summarize(values, mask, argument="values", per_token=True)
        self._record(contract.METRICS, statistics, lambda: {contract.METRIC_KEY: self._metric_keys.label(key)})

    @guarded(contract.STALENESS.histogram.name, values="versions")
    def record_staleness(
        self,
        versions: Any,
        current_version: int,
        *,
        mask: Any = None,
        dataset: str | None = None,
        phase: Literal["in_flight", "in_queue"] | None = None,
    ) -> None:
        """Record staleness ``current_version - versions`` into ``rl.staleness`` and set ``rl.policy.version``.

        ``versions``: the policy version each token (or rollout) was generated with, any shape, integers (floats
        must be integral). Computed in int64 on the tensor's device, exact beyond 2**24. ``current_version``: an
        integer >= 0 (an integral float counts). ``mask`` (same shape, nonzero = keep) selects tokens. Negative
        staleness (a version from the future) is rejected and counted. A token without a version (a negative
        version, NaN, or None in a list) is counted in ``rl.staleness.unversioned``, never as lag 0.
        ``dataset`` labels the data source (capped like :meth:`record_rewards`); ``phase`` says whether the lag was
        taken ``in_flight`` (generated while the trainer moved on) or ``in_queue`` (waiting in the buffer):
        ``rl.staleness.phase``.
        """
        current = as_integer(current_version, argument="current_version", minimum=0)
        self._policy_version = current
        if phase not in (None, "in_flight", "in_queue"):
            raise BadInput("phase", f'"phase" must be "in_flight", "in_queue" or None, got {describe(phase)}')
        statistics = self._staleness.summarize(versions, current, mask)
        source = self._dataset(dataset)
        self._store.set(contract.POLICY_VERSION, (), current)
        self._store.add(contract.UNVERSIONED, attributes(**source), statistics.unversioned)
        self._record(
            contract.STALENESS, statistics, lambda: {**source, **({contract.STALENESS_PHASE: phase} if phase else {})}
        )

    @guarded(contract.STALENESS_DROPPED.name, values="count")
    def record_staleness_drops(
        self,
        count: int | None = None,
        *,
        response_lengths: Any = None,
        staleness: Any = None,
        dataset: str | None = None,
    ) -> None:
        """Count samples the trainer dropped for being too stale (``rl.staleness.dropped``), and what they were like.

        ``count``: an integer >= 0; by default the number of ``response_lengths`` (else of ``staleness``).
        ``response_lengths`` and ``staleness`` (policy versions behind), one per dropped rollout, go into
        ``rl.dropped.response.length`` and ``rl.dropped.staleness``, beside the kept rollouts' ``rl.response.length``
        and ``rl.staleness``: dropping stale rollouts drops the long ones first (they take longest to generate), which
        biases training toward short, easy problems; the audit rule RLStaleDropsBiasedByLength compares the two."""
        source = attributes(**self._dataset(dataset))
        for values, distribution, argument in (
            (response_lengths, contract.DROPPED_LENGTHS, "response_lengths"),
            (staleness, contract.DROPPED_STALENESS, "staleness"),
        ):
            if values is None:
                continue
            name = distribution.histogram.name
            try:
                converted = as_values(values, argument=argument)
                negative = int((converted.tensor < 0).sum())
                statistics = self._dropped[distribution].summarize(
                    converted, ~(converted.tensor < 0), argument=argument
                )
            except BadInput as error:
                self._self_telemetry.reject_call(name, error, values)
                continue
            self._store.record(distribution, source, statistics)
            self._self_telemetry.reject_parts(name, statistics)
            if negative:
                self._self_telemetry.reject(name, "negative", negative, f"{negative} value(s) rejected: negative")
            if count is None:
                count = statistics.count + negative + sum(statistics.rejected.values())
        amount = as_integer(0 if count is None else count, argument="count", minimum=0)
        self._store.add(contract.STALENESS_DROPPED, source, amount)

    @guarded(contract.PHASES.name, values="phase")
    def set_phase(self, phase: str) -> None:
        """Declare what this rank is doing now (``generate``, ``score``, ``train``, ``sync``, ``wait_data``, ...), in
        place of its current (innermost) phase: the collector sums ``rl.phase{rl.phase.name}`` over ranks, so each
        phase's series counts the ranks in it, and each phase is a span of the step's trace (``otel_rl._phases``)."""
        self._phases.set(self._phase_names.label(phase))

    def phase(self, phase: str, *, links: Sequence[str] = ()) -> AbstractContextManager[None]:
        """``with telemetry.phase("generate"): ...``: this rank is in ``phase`` for the block, as a span of the
        step's trace (a child of the enclosing phase, if any) and in the phase gauges; when the block ends, the
        enclosing phase is current again. ``links``: the :meth:`trajectory_context` strings of the trajectories this
        phase consumes (async RL): the span links to their generation, and each trajectory's trace gets a ``queue``
        span up to now. Never raises; an exception of the block itself goes on as it is."""
        return _PhaseScope(self, phase, links)

    @guarded(contract.PHASES.name, values="durations")
    def record_phases(self, durations: Mapping[str, float]) -> None:
        """Phases that already ran in the current step, ``{phase: seconds}`` in the order they ran, for trainers that
        time their own sections (verl's ``timing_s/*``): spans of those durations, laid end to end up to now. A
        duration that is not a number >= 0 is counted and left out."""
        phases: list[tuple[str, float]] = []
        for name, seconds in list(durations.items()):
            try:
                value = as_real(seconds, argument="seconds")
                if not (math.isfinite(value) and value >= 0):
                    raise BadInput("negative", f'phase "seconds" must be a finite number >= 0, got {value!r}')
            except BadInput as error:
                self._self_telemetry.reject_call(contract.PHASES.name, error, 1)
                continue
            phases.append((self._phase_names.label(name), value))
        self._phases.completed(phases)

    @guarded("rl.trajectory", fallback="")
    def trajectory_context(self) -> str:
        """The current phase's span as a string to send along with a trajectory, for the consuming phase's
        ``links`` (see :meth:`phase`); "" if it cannot be made."""
        return self._phases.context()

    @guarded(contract.TOKENS_TRAINED.name)
    def record_tokens(self, *, generated: int = 0, trained: int = 0, samples: int = 0) -> None:
        """Count tokens generated (by rollouts), tokens trained on and samples trained on, each an integer >= 0:
        the dashboards' tokens/s, samples/s and MFU are rates of these counters, exact over ranks."""
        amounts = {
            contract.TOKENS_GENERATED: as_integer(generated, argument="generated", minimum=0),
            contract.TOKENS_TRAINED: as_integer(trained, argument="trained", minimum=0),
            contract.SAMPLES_TRAINED: as_integer(samples, argument="samples", minimum=0),
        }
        for counter, amount in amounts.items():
            self._store.add(counter, (), amount)

    @guarded(contract.QUEUE_DEPTH.name)
    def set_async_state(
        self,
        *,
        queue_depth: int | None = None,
        in_flight: int | None = None,
        buffer_used: int | None = None,
        buffer_capacity: int | None = None,
    ) -> None:
        """The asynchronous pipeline as this rank sees it, each an integer >= 0 or None (unchanged): trajectories
        waiting for the trainer, rollouts being generated, and the replay buffer's use and capacity. The collector
        sums each over ranks."""
        given = {
            contract.QUEUE_DEPTH: ("queue_depth", queue_depth),
            contract.IN_FLIGHT: ("in_flight", in_flight),
            contract.BUFFER_USED: ("buffer_used", buffer_used),
            contract.BUFFER_CAPACITY: ("buffer_capacity", buffer_capacity),
        }
        values = {
            gauge: as_integer(value, argument=name, minimum=0)
            for gauge, (name, value) in given.items()
            if value is not None
        }
        for gauge, value in values.items():
            self._store.set(gauge, (), value)

    @guarded(contract.POLICY_VERSION.name, values="version")
    def set_policy_version(self, version: int) -> None:
        """Set ``rl.policy.version`` (an integer >= 0) without recording staleness."""
        self._policy_version = as_integer(version, argument="version", minimum=0)
        self._store.set(contract.POLICY_VERSION, (), self._policy_version)

    @guarded(contract.SAMPLE_EVENT, values="sample")
    def record_sample(
        self, sample: EpisodeSample | Mapping[str, Any], *, table: str = contract.SAMPLE_TABLE_DEFAULT
    ) -> None:
        """Offer one episode to this step's sample filter of ``table`` (by default top/bottom-k by reward).

        A dict uses :class:`EpisodeSample`'s field names; unknown keys are dropped and counted (put them under
        ``extra``). A sample without a numeric ``reward`` is dropped and counted; fields of the wrong type are
        left out of its record and counted. Each table (``train``, ``eval``, torchforge's table names) keeps its
        own top/bottom-k; records carry ``rl.sample.table``.
        """
        self._steps.offer(sample, table)

    @guarded(contract.STEP.name, values="step")
    def step(self, step: int) -> None:
        """Declare the current training step (an integer >= 0); the previous step's kept samples are emitted now."""
        number = as_integer(step, argument="step", minimum=0)
        self._steps.close(number, self._phases.step_span)
        self._phases.step(number, policy_version=self._policy_version)
        if self._settings.exporter == "console":  # print the step just finished, under its own number
            self._worker.wait(self._worker.request(), self._settings.export_timeout_s)
        self._store.set(contract.STEP, (), number)
        self._canary.step()

    @guarded("otel_rl.flush", fallback=False)
    def flush(self, timeout_s: float | None = None) -> bool:
        """Export everything recorded so far (not the open step's samples), spans included, waiting at most
        ``timeout_s`` (None: ``shutdown_timeout_s``; 0: not at all); False if it did not finish in time."""
        deadline = time.monotonic() + self._timeout(timeout_s)
        workers = [worker for worker in (self._span_worker, self._worker) if worker is not None]
        tickets = [(worker, worker.request()) for worker in workers]
        return all(worker.wait(ticket, max(0.0, deadline - time.monotonic())) for worker, ticket in tickets)

    @guarded("otel_rl.shutdown", fallback=False)
    def shutdown(self, timeout_s: float | None = None) -> bool:
        """Emit the open step's samples, export, and stop, within ``timeout_s`` (None: ``shutdown_timeout_s``) even
        if the collector hangs. The run counts as finished cleanly (``rl.run.finished`` 1). Every part is done
        whatever the others do: a sample that cannot be emitted does not stop the final export."""
        return self._shutdown(timeout_s, clean=True)

    # -- internals ----------------------------------------------------------------------------------------------

    def _pending(self) -> tuple[int, int]:
        """Sample records and spans waiting for export now (the export warnings quote them)."""
        spans = self._span_worker.pending()[1] if self._span_worker is not None else 0
        return self._worker.pending()[0], spans

    def _record(
        self, distribution: contract.Distribution, statistics: Statistics, labels: Callable[[], dict[str, str]]
    ) -> None:
        """Fold a call's statistics into ``distribution`` under the labels ``labels()`` makes, and count what it
        rejected. The labels are made only when a value was kept, so a call whose values were all rejected takes no
        slot of a label cap."""
        if statistics.count:
            self._store.record(distribution, attributes(**labels()), statistics)
        self._self_telemetry.reject_parts(distribution.histogram.name, statistics)

    def _dataset(self, dataset: object) -> dict[str, str]:
        return {} if dataset is None else {contract.DATASET: self._datasets.label(dataset)}

    def _timeout(self, timeout_s: object) -> float:
        """A caller's timeout in seconds: None means ``shutdown_timeout_s``; anything but a number >= 0 is counted
        and replaced by it too, so a bad timeout never stops a flush or the final export."""
        if timeout_s is None:
            return self._settings.shutdown_timeout_s
        try:
            value = as_real(timeout_s, argument="timeout_s")
        except BadInput as error:
            self._self_telemetry.reject_call("otel_rl.timeout", error, timeout_s)
            return self._settings.shutdown_timeout_s
        if math.isnan(value) or value < 0:
            self._self_telemetry.reject_call(
                "otel_rl.timeout", BadInput("negative", f'"timeout_s" must be >= 0, got {value!r}'), 1
            )
            return self._settings.shutdown_timeout_s
        return value

    def _shutdown_at_exit(self) -> None:
        """At interpreter exit without an explicit shutdown: a process that ends on an uncaught exception (Python
        sets ``sys.last_value`` before exit handlers run) exports everything but is not marked finished, so
        ``RLRunEndedUncleanly`` can tell it from a clean end."""
        self._shutdown(None, clean=getattr(sys, "last_value", None) is None)

    def _shutdown(self, timeout_s: object, *, clean: bool) -> bool:
        if self._closed:
            return True
        self._closed = True
        atexit.unregister(self._shutdown_at_exit)
        timeout = self._timeout(timeout_s)
        deadline = time.monotonic() + timeout
        self._closing("rl.sample", lambda: self._steps.close(None, self._phases.step_span))
        self._closing("otel_rl.phases", self._phases.close)
        if clean:
            self._store.set(contract.RUN_FINISHED, (), 1)
        finished = True
        if self._span_worker is not None:  # first: the metrics then carry the last spans' counts
            span_worker = self._span_worker
            finished = bool(self._closing("otel_rl.spans", lambda: span_worker.shutdown(timeout / 2)))
        remaining = deadline - time.monotonic()
        finished = bool(self._closing("otel_rl.export", lambda: self._worker.shutdown(remaining))) and finished
        if self._tracer_provider is not None:
            provider, remaining = self._tracer_provider, deadline - time.monotonic()
            finished = (
                bool(self._closing("otel_rl.tracer", lambda: shutdown_within(provider.shutdown, remaining, "spans")))
                and finished
            )
        if self._output is not None and finished:  # else the export thread may still write to it
            self._closing("otel_rl.output", self._output.close)
        return finished

    def _closing(self, what: str, part: Callable[[], object]) -> object:
        """Run one part of the shutdown; a failure is counted and the shutdown goes on."""
        try:
            return part()
        except Exception as error:  # noqa: BLE001 - each part of a shutdown is done whatever the others do
            failed(self._self_telemetry, what, error, None)
            return None


class _PhaseScope:
    """The context manager of :meth:`Telemetry.phase`: entering and leaving are guarded, the block's own exception
    is never swallowed."""

    def __init__(self, telemetry: Telemetry, phase: object, links: object) -> None:
        self._telemetry = telemetry
        self._phase = phase
        self._links = links
        self._depth: int | None = None

    @property
    def self_telemetry(self) -> SelfTelemetry:
        return self._telemetry.self_telemetry

    @guarded(contract.PHASES.name, values="_phase")
    def __enter__(self) -> None:
        telemetry = self._telemetry
        contexts = _links(telemetry, self._links)
        phases, names = telemetry._phases, telemetry._phase_names  # noqa: SLF001 - Telemetry's own scope object
        self._depth = phases.enter(names.label(self._phase), links=contexts)

    @guarded(contract.PHASES.name)
    def __exit__(self, *error: object) -> None:
        if self._depth is not None:
            self._telemetry._phases.leave(self._depth)  # noqa: SLF001 - Telemetry's own scope object


def _links(telemetry: Telemetry, links: object) -> list[TrajectoryContext]:
    """The trajectory contexts of ``links``; each one that is not one is counted (``rl.trajectory``) and left out."""
    if links is None or isinstance(links, (str, bytes)):
        links = [links] if isinstance(links, str) else []
    contexts = []
    for link in links if isinstance(links, Sequence) else []:
        try:
            contexts.append(TrajectoryContext.decode(link))
        except BadInput as error:
            telemetry.self_telemetry.reject_call("rl.trajectory", error, link)
    return contexts
