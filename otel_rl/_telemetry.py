"""Telemetry: the one object a training process records through; it wires the parts and guards the hot path.

Two error regimes. Construction validates its configuration and raises at once. Every ``record_*`` call, ``step``
and ``flush`` never raises into the training loop: a bad part of the input is dropped, counted in
``otel_rl.values.rejected`` and warned about once (``otel_rl._self_telemetry``), and the valid part is kept.

The parts: summarizers turn a call's tensor into :class:`~otel_rl._stats.Statistics` (``otel_rl._stats``), the
:class:`~otel_rl._store.MetricStore` folds them into every metric of the distribution, :class:`StepSamples`
(``otel_rl._steps``) turns a step's kept samples into log records and exemplars, and the export worker
(``otel_rl._export``) sends it all from its own thread.
"""

from __future__ import annotations

import atexit
import operator
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Literal

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import LogRecordExporter
from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from otel_rl import _names
from otel_rl._buckets import ExplicitLayout, ExponentialLayout, Layout
from otel_rl._config import ResolvedConfig, TelemetryConfig
from otel_rl._export import Exporters, ExportWorker, QueueLogProcessor, build_exporters
from otel_rl._samples import EpisodeSample, SampleFilter, TopBottomFilter
from otel_rl._self_telemetry import LabelCap, SelfTelemetry
from otel_rl._rollouts import RolloutSummarizer
from otel_rl._stats import BadInput, StalenessSummarizer, ValueSummarizer
from otel_rl._steps import StepSamples
from otel_rl._store import MetricStore, attributes


def build_resource(config: ResolvedConfig) -> Resource:
    """The process's resource: service, instance, run and rank attributes (plus ``OTEL_RESOURCE_ATTRIBUTES``)."""
    return Resource.create(
        {
            SERVICE_NAME: config.service_name,
            SERVICE_INSTANCE_ID: config.instance_id,
            _names.RUN_ID: config.run_id,
            _names.RANK: config.rank,
            _names.WORLD_SIZE: config.world_size,
            _names.LOCAL_RANK: config.local_rank,
            _names.ROLE: config.role,
        }
    )


class Telemetry:
    """Records rewards, staleness and samples of one process and exports them in the background.

    ``metric_exporter``, ``log_exporter`` and ``span_exporter`` replace the exporters ``config`` would build
    (tests pass the SDK's in-memory ones); ``sample_filter`` makes the filter of each sample table in place of the
    default top/bottom-k one (called once per table).
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
        self._store = MetricStore(
            self.resource,
            start_time_ns=clock(),
            version=_names.SCOPE_VERSION,
            hold_ns=int(settings.extremes_hold_s * 1e9),
        )
        self._self_telemetry = SelfTelemetry(self._store)
        rewards, metrics, staleness = layouts(settings)
        self._rewards = ValueSummarizer(rewards)
        self._metrics = ValueSummarizer(metrics)
        self._staleness = StalenessSummarizer(staleness)
        self._rewards.warm_up()
        self._metrics.warm_up()
        self._staleness.warm_up()
        self._reward_fns = LabelCap(
            _names.REWARDS.histogram.name, "max_reward_fns", settings.max_reward_fns, self._self_telemetry
        )
        self._metric_keys = LabelCap(
            _names.METRICS.histogram.name, "max_metric_keys", settings.max_metric_keys, self._self_telemetry
        )
        self._datasets = LabelCap(_names.DATASET, "max_datasets", settings.max_datasets, self._self_telemetry)
        self._phases = LabelCap(_names.PHASES.name, "max_phases", settings.max_phases, self._self_telemetry)
        self._phase: str | None = None
        self._rollouts = RolloutSummarizer(ValueSummarizer(rewards), solved_reward=settings.solved_reward)
        self._store.set(_names.RUN_START, (), clock() / 1e9)
        self._store.set(_names.RUN_FINISHED, (), 0)
        self._store.set(_names.RANKS_UP, (), 1)
        self._store.set(_names.RANKS_EXPECTED, (), settings.world_size)
        injected = metric_exporter is not None or log_exporter is not None or span_exporter is not None
        exporters = Exporters(metric_exporter, log_exporter, span_exporter) if injected else build_exporters(settings)
        self._output = exporters.output
        self._worker = ExportWorker(
            self._store,
            metric_exporter=exporters.metrics,
            log_exporter=exporters.logs,
            interval_s=settings.export_interval_s,
            timeout_s=settings.export_timeout_s,
            queue_size=settings.sample_queue_size,
            clock=clock,
        )
        self._logger_provider = LoggerProvider(resource=self.resource)
        self._logger_provider.add_log_record_processor(QueueLogProcessor(self._worker))
        self._tracer_provider: TracerProvider | None = None
        if settings.samples_as_span_events and exporters.spans is not None:
            self._tracer_provider = TracerProvider(resource=self.resource)
            self._tracer_provider.add_span_processor(BatchSpanProcessor(exporters.spans))
        self._steps = StepSamples(
            settings,
            new_filter=sample_filter
            or (
                lambda: TopBottomFilter(
                    top_k=settings.top_k, bottom_k=settings.bottom_k, random_k=settings.random_k, seed=settings.seed
                )
            ),
            logger=self._logger_provider.get_logger(_names.SCOPE_NAME, _names.SCOPE_VERSION),
            tracer_provider=self._tracer_provider,
            store=self._store,
            self_telemetry=self._self_telemetry,
            clock=clock,
        )
        self._closed = False
        atexit.register(self._shutdown_at_exit)

    # -- recording (hot path: never raises) -------------------------------------------------------------------

    def record_rewards(
        self, rewards: Any, *, fn: str = _names.REWARD_FN_TOTAL, mask: Any = None, dataset: str | None = None
    ) -> None:
        """Record rewards into ``rl.reward`` under ``rl.reward.fn=fn`` (and ``rl.dataset=dataset`` when given).

        ``rewards``: a torch tensor on any device, numpy array, sequence or scalar. Shape ``(rollouts,)`` is one
        reward per rollout; ``(rollouts, tokens)`` is the per-token broadcast form, counted once per rollout at
        its first token where ``mask`` is set. ``mask`` (same shape, nonzero = keep) selects what is recorded.
        NaN and inf are rejected and counted; everything else is kept. ``dataset`` (the data source) is capped at
        ``max_datasets`` names; later ones are recorded as ``_overflow`` and counted.
        """
        metric = _names.REWARDS.histogram.name
        try:
            labels = {_names.REWARD_FN: self._reward_fns.label(fn), **self._dataset(dataset)}
            statistics = self._rewards.summarize(rewards, mask)
        except Exception as error:  # noqa: BLE001 - the hot path never raises into training
            self._self_telemetry.reject_call(metric, error, rewards)
            return
        self._store.record(_names.REWARDS, attributes(**labels), statistics)
        self._self_telemetry.reject_parts(metric, statistics)

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
    ) -> None:
        """Record one step's rollout health signals in one call; every argument is optional.

        - ``advantages`` ``(rollouts,)`` (or per token, counted at each rollout's first unmasked token) into
          ``rl.advantage``, and rollouts by advantage sign into ``rl.advantage.sign``;
        - ``response_lengths`` ``(rollouts,)`` into ``rl.response.length`` (negative lengths dropped, counted);
        - ``entropy`` ``(rollouts, tokens)`` per token into ``rl.entropy``;
        - ``logprobs`` (trainer) and ``inference_logprobs`` (inference engine), per token: the importance ratio
          ``exp(logprobs - inference_logprobs)`` into ``rl.importance_ratio`` and the mismatch
          KL(pi_inference || pi_train) estimators k1 and k3 into ``rl.mismatch.kl``;
        - ``group_ids`` with ``rewards`` ``(rollouts,)``: prompt groups solved by none / some / all of their
          rollouts (``reward >= solved_reward``) into ``rl.groups``, zero-variance groups into
          ``rl.groups.zero_variance``. A group's rollouts must be recorded in one call.

        ``mask`` ``(rollouts, tokens)`` (nonzero = keep) selects tokens; rollouts without any are left out of the
        per-rollout fields. A bad field is dropped and counted (``otel_rl.values.rejected``), the others kept; NaN
        log-probabilities drop their tokens only.
        """
        try:
            result = self._rollouts.summarize(
                mask=mask,
                advantages=advantages,
                response_lengths=response_lengths,
                entropy=entropy,
                logprobs=logprobs,
                inference_logprobs=inference_logprobs,
                rewards=rewards,
                group_ids=group_ids,
            )
        except Exception as error:  # noqa: BLE001 - the hot path never raises into training
            self._self_telemetry.reject_call("rl.rollouts", error, mask)
            return
        for metric, bad_input, values in result.rejected:
            self._self_telemetry.reject_call(metric, bad_input, values)
        for metric, reason, count in result.rejected_parts:
            if count:
                self._self_telemetry.reject(metric, reason, count, f"{count} value(s) rejected: {reason}")
        for distribution, attrs, statistics in result.distributions:
            self._store.record(distribution, attrs, statistics)
            self._self_telemetry.reject_parts(distribution.histogram.name, statistics)
        for counter, attrs, count in result.counts:
            self._store.add(counter, attrs, count)

    def record_metric(self, key: str, values: Any, *, mask: Any = None) -> None:
        """Record any other scalar series (loss, KL, entropy, ...) under ``rl.metric{rl.metric.key=key}``.

        Exported like rewards (an exponential histogram, so quantiles too; with ``histogram="explicit"`` a single
        bucket, since no bounds fit every key): mean, sum, standard deviation, max and min are all derivable
        downstream, merged exactly across ranks. Used by the torchforge shim.
        """
        metric = _names.METRICS.histogram.name
        try:
            label = self._metric_keys.label(key)
            statistics = self._metrics.summarize(values, mask, argument="values")
        except Exception as error:  # noqa: BLE001 - the hot path never raises into training
            self._self_telemetry.reject_call(metric, error, values)
            return
        self._store.record(_names.METRICS, attributes(**{_names.METRIC_KEY: label}), statistics)
        self._self_telemetry.reject_parts(metric, statistics)

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
        must be integral). Computed in int64 on the tensor's device, exact beyond 2**24. ``mask`` (same shape,
        nonzero = keep) selects tokens. Negative staleness (a version from the future) is rejected and counted.
        A token without a version (a negative version or NaN) is counted in ``rl.staleness.unversioned``, never
        as lag 0. ``dataset`` labels the data source (capped like :meth:`record_rewards`); ``phase`` says whether
        the lag was taken ``in_flight`` (generated while the trainer moved on) or ``in_queue`` (waiting in the
        buffer): ``rl.staleness.phase``.
        """
        metric = _names.STALENESS.histogram.name
        try:
            current = operator.index(current_version)
            if phase not in (None, "in_flight", "in_queue"):
                raise BadInput("phase", f'"phase" must be "in_flight", "in_queue" or None, got {phase!r}')
            source = self._dataset(dataset)
            labels = {**source, **({_names.STALENESS_PHASE: phase} if phase else {})}
            statistics = self._staleness.summarize(versions, current, mask)
        except Exception as error:  # noqa: BLE001 - the hot path never raises into training
            self._self_telemetry.reject_call(metric, error, versions)
            return
        self._store.set(_names.POLICY_VERSION, (), current)
        self._store.record(_names.STALENESS, attributes(**labels), statistics)
        unversioned = statistics.rejected.get("unversioned", 0)
        self._store.add(_names.UNVERSIONED, attributes(**source), unversioned)
        self._self_telemetry.reject_parts(metric, replace(statistics, rejected=_without(statistics.rejected, "unversioned")))

    def record_staleness_drops(self, count: int, *, dataset: str | None = None) -> None:
        """Count ``count`` samples the trainer dropped for being too stale (``rl.staleness.dropped``)."""
        try:
            amount = operator.index(count)
            if amount < 0:
                raise BadInput("negative", f'"count" must be >= 0, got {amount}')
            labels = self._dataset(dataset)
        except Exception as error:  # noqa: BLE001 - the hot path never raises into training
            self._self_telemetry.reject_call(_names.STALENESS_DROPPED.name, error, count)
            return
        self._store.add(_names.STALENESS_DROPPED, attributes(**labels), amount)

    def set_phase(self, phase: str) -> None:
        """Declare what this rank is doing now (``generate``, ``score``, ``train``, ``sync``, ...): the collector
        sums ``rl.phase{rl.phase.name}`` over ranks, so each phase's series counts the ranks in it."""
        label = self._phases.label(phase)
        if self._phase is not None and self._phase != label:
            self._store.set(_names.PHASES, attributes(**{_names.PHASE: self._phase}), 0)
        self._phase = label
        self._store.set(_names.PHASES, attributes(**{_names.PHASE: label}), 1)

    def _dataset(self, dataset: str | None) -> dict[str, str]:
        return {} if dataset is None else {_names.DATASET: self._datasets.label(dataset)}

    def set_policy_version(self, version: int) -> None:
        """Set ``rl.policy.version`` without recording staleness."""
        try:
            self._store.set(_names.POLICY_VERSION, (), operator.index(version))
        except Exception as error:  # noqa: BLE001 - the hot path never raises into training
            self._self_telemetry.reject_call(_names.POLICY_VERSION.name, error, version)

    def record_sample(
        self, sample: EpisodeSample | Mapping[str, Any], *, table: str = _names.SAMPLE_TABLE_DEFAULT
    ) -> None:
        """Offer one episode to this step's sample filter of ``table`` (by default top/bottom-k by reward).

        A dict uses :class:`EpisodeSample`'s field names; unknown keys are dropped and counted (put them under
        ``extra``). A sample without a numeric ``reward`` is dropped and counted. Each table (``train``, ``eval``,
        torchforge's table names) keeps its own top/bottom-k; records carry ``rl.sample.table``.
        """
        try:
            self._steps.offer(sample, table)
        except Exception as error:  # noqa: BLE001 - the hot path never raises into training
            self._self_telemetry.drop_sample("invalid", f"sample dropped: {error}")

    def step(self, step: int) -> None:
        """Declare the current training step; the previous step's kept samples are emitted now."""
        try:
            number = operator.index(step)
        except Exception as error:  # noqa: BLE001 - the hot path never raises into training
            self._self_telemetry.reject_call(_names.STEP.name, error, step)
            return
        self._steps.close(number)
        self._store.set(_names.STEP, (), number)
        if self._settings.exporter == "console":
            self._worker.request()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Export everything recorded so far (not the open step's samples); False if it did not finish in time."""
        return self._worker.wait(self._worker.request(), timeout_s or self._settings.shutdown_timeout_s)

    def shutdown(self, timeout_s: float | None = None) -> bool:
        """Emit the open step's samples, export, and stop, within ``timeout_s`` even if the collector hangs. The
        run counts as finished cleanly (``rl.run.finished`` 1)."""
        return self._shutdown(timeout_s, clean=True)

    def _shutdown_at_exit(self) -> None:
        """At interpreter exit without an explicit shutdown: a process that ends on an uncaught exception (Python
        sets ``sys.last_value`` before exit handlers run) exports everything but is not marked finished, so
        ``RLRunEndedUncleanly`` can tell it from a clean end."""
        self._shutdown(None, clean=getattr(sys, "last_value", None) is None)

    def _shutdown(self, timeout_s: float | None, *, clean: bool) -> bool:
        if self._closed:
            return True
        self._closed = True
        atexit.unregister(self._shutdown_at_exit)
        self._steps.close(None)
        if clean:
            self._store.set(_names.RUN_FINISHED, (), 1)
        finished = self._worker.shutdown(timeout_s or self._settings.shutdown_timeout_s)
        if self._tracer_provider is not None:
            self._tracer_provider.shutdown()
        if self._output is not None:
            self._output.close()
        return finished


def layouts(settings: ResolvedConfig) -> tuple[Layout, Layout, Layout]:
    """The bucket layouts of rewards, ``record_metric`` values and staleness. Explicit ``record_metric`` values get
    one bucket: their bounds are unknown in advance, which is what exponential histograms solve."""
    if settings.histogram == "explicit":
        return (
            ExplicitLayout(tuple(float(b) for b in settings.reward_bounds)),
            ExplicitLayout(()),
            ExplicitLayout(tuple(float(b) for b in settings.staleness_bounds)),
        )
    layout = ExponentialLayout(settings.histogram_scale)
    return layout, layout, layout


def _without(rejected: dict[str, int], reason: str) -> dict[str, int]:
    return {key: count for key, count in rejected.items() if key != reason}
