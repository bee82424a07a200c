"""Telemetry: the one object a training process records through.

Two error regimes. Construction validates its configuration and raises at once. Every ``record_*`` call, ``step``
and ``flush`` never raises into the training loop: a bad part of the input is dropped, counted in
``otel_rl.values.rejected`` and warned about once, and the valid part is kept.
"""

from __future__ import annotations

import atexit
import logging
import math
import operator
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider, LogRecordProcessor, ReadableLogRecord, ReadWriteLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter
from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from opentelemetry.sdk.metrics import Exemplar
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from otel_rl import _names
from otel_rl._config import TelemetryConfig
from otel_rl._export import Exporters, ExportWorker, build_exporters
from otel_rl._samples import EpisodeSample, SampleFilter, TopBottomFilter, sample_from_mapping, to_record
from otel_rl._stats import BadInput, RewardSummarizer, StalenessSummarizer, Summary
from otel_rl._store import Attributes, MetricStore, attributes

_logger = logging.getLogger(__name__)
_VERSION = "0.1.0"
_STALENESS_EXTREMES = (_names.STALENESS_MAX, _names.STALENESS_MIN)
_MAX_FN_LENGTH = 64
_MAX_EXEMPLAR_ID = 40
"""Prometheus refuses exemplars whose labels exceed 128 characters; trace and span ids take 63 of them."""
_TOTAL = (("rl.reward.fn", _names.REWARD_FN_TOTAL),)


def build_resource(config: TelemetryConfig) -> Resource:
    """The process's resource: service, instance, run and rank attributes (plus ``OTEL_RESOURCE_ATTRIBUTES``)."""
    return Resource.create(
        {
            SERVICE_NAME: str(config.service_name),
            SERVICE_INSTANCE_ID: config.instance_id,
            _names.RUN_ID: str(config.run_id),
            _names.RANK: int(config.rank or 0),
            _names.WORLD_SIZE: int(config.world_size or 1),
            _names.LOCAL_RANK: int(config.local_rank or 0),
            _names.ROLE: str(config.role),
        }
    )


class _QueueProcessor(LogRecordProcessor):
    """Hands each emitted log record to the export worker's bounded queue."""

    def __init__(self, worker: ExportWorker) -> None:
        self._worker = worker

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        resource = log_record.resource if log_record.resource is not None else Resource.create({})
        self._worker.submit(
            [
                ReadableLogRecord(
                    log_record=log_record.log_record,
                    resource=resource,
                    instrumentation_scope=log_record.instrumentation_scope,
                    limits=log_record.limits,
                )
            ]
        )

    def shutdown(self) -> None:
        """Nothing to release: the worker is shut down by :class:`Telemetry`."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class Telemetry:
    """Records rewards, staleness and samples of one process and exports them in the background.

    ``metric_exporter``, ``log_exporter`` and ``span_exporter`` replace the exporters ``config`` would build
    (tests pass the SDK's in-memory ones); ``sample_filter`` replaces the default top/bottom-k filter.
    """

    def __init__(
        self,
        config: TelemetryConfig | None = None,
        *,
        metric_exporter: MetricExporter | None = None,
        log_exporter: LogRecordExporter | None = None,
        span_exporter: SpanExporter | None = None,
        sample_filter: SampleFilter | None = None,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.config = config if config is not None else TelemetryConfig()
        cfg = self.config
        self.resource = build_resource(cfg)
        self._clock = clock
        self._store = MetricStore(
            self.resource, start_time_ns=clock(), version=_VERSION, hold_ns=int(cfg.extremes_hold_s * 1e9)
        )
        self._rewards = RewardSummarizer(cfg.reward_bounds)
        self._staleness = StalenessSummarizer(cfg.staleness_bounds)
        self._rewards.warm_up()
        self._staleness.warm_up()
        self._reward_bounds = tuple(float(b) for b in cfg.reward_bounds)
        self._staleness_bounds = tuple(float(b) for b in cfg.staleness_bounds)
        self._metrics = RewardSummarizer(())
        self._reward_fns: dict[str, str] = {}
        self._metric_keys: dict[str, str] = {}
        self._warned: set[tuple[str, str]] = set()
        self._filter: SampleFilter = sample_filter or TopBottomFilter(
            top_k=cfg.top_k, bottom_k=cfg.bottom_k, random_k=cfg.random_k, seed=cfg.seed
        )
        self._step_lock = threading.Lock()
        self._step: int | None = None
        self._step_started_ns = clock()
        injected = metric_exporter is not None or log_exporter is not None or span_exporter is not None
        exporters = Exporters(metric_exporter, log_exporter, span_exporter) if injected else build_exporters(cfg)
        self._output = exporters.output
        self._worker = ExportWorker(
            self._store,
            metric_exporter=exporters.metrics,
            log_exporter=exporters.logs,
            interval_s=float(cfg.export_interval_s or 2.0),
            timeout_s=float(cfg.export_timeout_s or 5.0),
            queue_size=cfg.sample_queue_size,
            clock=clock,
        )
        self._logger_provider = LoggerProvider(resource=self.resource)
        self._logger_provider.add_log_record_processor(_QueueProcessor(self._worker))
        self._logger = self._logger_provider.get_logger(_names.SCOPE_NAME, _VERSION)
        self._tracer_provider: TracerProvider | None = None
        if cfg.samples_as_span_events and exporters.spans is not None:
            self._tracer_provider = TracerProvider(resource=self.resource)
            self._tracer_provider.add_span_processor(BatchSpanProcessor(exporters.spans))
        self._ids = RandomIdGenerator()
        self._closed = False
        atexit.register(self.shutdown)

    # -- recording (hot path: never raises) -------------------------------------------------------------------

    def record_rewards(self, rewards: Any, *, fn: str = _names.REWARD_FN_TOTAL, mask: Any = None) -> None:
        """Record rewards into ``rl.reward`` under ``rl.reward.fn=fn``.

        ``rewards``: a torch tensor on any device, numpy array, sequence or scalar. Shape ``(rollouts,)`` is one
        reward per rollout; ``(rollouts, tokens)`` is the per-token broadcast form, counted once per rollout at
        its first token where ``mask`` is set. ``mask`` (same shape, nonzero = keep) selects what is recorded.
        NaN and inf are rejected and counted; everything else is kept.
        """
        try:
            label = self._label(self._reward_fns, fn, _names.REWARD.name, self.config.max_reward_fns)
            summary = self._rewards.summarize(rewards, mask)
        except Exception as error:  # noqa: BLE001 - the hot path never raises into training
            self._reject(_names.REWARD.name, error, _size(rewards))
            return
        self._record_distribution(_names.REWARDS, attributes(**{_names.REWARD_FN: label}), summary, self._reward_bounds)

    def record_metric(self, key: str, values: Any, *, mask: Any = None) -> None:
        """Record any other scalar series (loss, KL, entropy, ...) under ``rl.metric{rl.metric.key=key}``.

        Exported like rewards but with a single bucket, so the mean, sum, standard deviation, max and min are all
        derivable downstream, merged exactly across ranks. Used by the torchforge shim.
        """
        try:
            label = self._label(self._metric_keys, key, _names.METRIC.name, self.config.max_reward_fns)
            summary = self._metrics.summarize(values, mask, setting="value")
        except Exception as error:  # noqa: BLE001 - the hot path never raises into training
            self._reject(_names.METRIC.name, error, _size(values))
            return
        self._record_distribution(_names.METRICS, attributes(**{_names.METRIC_KEY: label}), summary, ())

    def record_staleness(self, versions: Any, current_version: int, *, mask: Any = None) -> None:
        """Record staleness ``current_version - versions`` into ``rl.staleness`` and set ``rl.policy.version``.

        ``versions``: the policy version each token (or rollout) was generated with, any shape, integers (floats
        must be integral). Computed in int64 on the tensor's device, exact beyond 2**24. ``mask`` (same shape,
        nonzero = keep) selects tokens. Negative staleness (a version from the future) is rejected and counted.
        """
        try:
            current = operator.index(current_version)
            summary = self._staleness.summarize(versions, current, mask)
        except Exception as error:  # noqa: BLE001 - the hot path never raises into training
            self._reject(_names.STALENESS.name, error, _size(versions))
            return
        self._store.set(_names.POLICY_VERSION, (), current)
        self._store.record(
            _names.STALENESS, (), summary, extremes=_STALENESS_EXTREMES, bounds=self._staleness_bounds
        )
        self._count_rejected(_names.STALENESS.name, summary)

    def set_policy_version(self, version: int) -> None:
        """Set ``rl.policy.version`` without recording staleness."""
        try:
            self._store.set(_names.POLICY_VERSION, (), operator.index(version))
        except Exception as error:  # noqa: BLE001 - the hot path never raises into training
            self._reject(_names.POLICY_VERSION.name, error, 1)

    def record_sample(self, sample: EpisodeSample | Mapping[str, Any]) -> None:
        """Offer one episode to this step's sample filter (by default top/bottom-k by reward).

        A dict uses :class:`EpisodeSample`'s field names; unknown keys are dropped and counted (put them under
        ``extra``). A sample without a numeric ``reward`` is dropped and counted.
        """
        try:
            if isinstance(sample, EpisodeSample):
                episode = sample
            else:
                episode, unknown = sample_from_mapping(sample)
                if unknown:
                    self._reject(
                        _names.SAMPLE_EVENT, BadInput("unknown_key", f"unknown sample keys {unknown!r}"), len(unknown)
                    )
            float(episode.reward)
            with self._step_lock:
                self._filter.add(episode)
        except Exception as error:  # noqa: BLE001 - the hot path never raises into training
            self._store.add(_names.SAMPLES_DROPPED, attributes(**{_names.SELF_REASON: "invalid"}), 1)
            self._warn_once(_names.SAMPLE_EVENT, "invalid", f"sample dropped: {error}")

    def step(self, step: int) -> None:
        """Declare the current training step; the previous step's kept samples are emitted now."""
        try:
            number = operator.index(step)
        except Exception as error:  # noqa: BLE001 - the hot path never raises into training
            self._reject(_names.STEP.name, error, 1)
            return
        self._close_step(number)
        self._store.set(_names.STEP, (), number)
        if self.config.exporter == "console":
            self._worker.request()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Export everything recorded so far (not the open step's samples); False if it did not finish in time."""
        return self._worker.wait(self._worker.request(), timeout_s or self.config.shutdown_timeout_s)

    def shutdown(self, timeout_s: float | None = None) -> bool:
        """Emit the open step's samples, export, and stop, within ``timeout_s`` even if the collector hangs."""
        if self._closed:
            return True
        self._closed = True
        atexit.unregister(self.shutdown)
        self._close_step(None)
        finished = self._worker.shutdown(timeout_s or self.config.shutdown_timeout_s)
        if self._tracer_provider is not None:
            self._tracer_provider.shutdown()
        if self._output is not None:
            self._output.close()
        return finished

    # -- internals --------------------------------------------------------------------------------------------

    def _close_step(self, next_step: int | None) -> None:
        now = self._clock()
        with self._step_lock:
            kept = self._filter.drain()
            step, started = self._step, self._step_started_ns
            self._step, self._step_started_ns = next_step, now
        if not kept:
            return
        span: trace.Span
        if self._tracer_provider is not None:
            tracer = self._tracer_provider.get_tracer(_names.SCOPE_NAME, _VERSION)
            span = tracer.start_span(
                "rl.step", start_time=started, attributes={} if step is None else {"rl.step": step}
            )
        else:
            span = trace.NonRecordingSpan(
                trace.SpanContext(
                    trace_id=self._ids.generate_trace_id(),
                    span_id=self._ids.generate_span_id(),
                    is_remote=False,
                    trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
                )
            )
        context = trace.set_span_in_context(span)
        for selection, sample in kept:
            try:
                record = to_record(
                    sample,
                    step=step,
                    selection=selection,
                    budget_bytes=self.config.sample_text_budget_bytes,
                    redact=self.config.redact,
                )
            except Exception as error:  # noqa: BLE001 - a broken sample or redactor must not break the others
                reason = "redaction" if self.config.redact is not None else "invalid"
                self._store.add(_names.SAMPLES_DROPPED, attributes(**{_names.SELF_REASON: reason}), 1)
                self._warn_once(_names.SAMPLE_EVENT, reason, f"sample dropped: {type(error).__name__}")
                continue
            self._logger.emit(
                event_name=_names.SAMPLE_EVENT,
                body=record.body,
                attributes=record.attributes,
                severity_number=SeverityNumber.INFO,
                context=context,
            )
            self._add_exemplars(sample, span.get_span_context(), now)
            if span.is_recording():
                span.add_event(_names.SAMPLE_EVENT, attributes={**record.attributes, **record.body})
        span.end(end_time=now)

    def _add_exemplars(self, sample: EpisodeSample, span: trace.SpanContext, now: int) -> None:
        """Link the reward and staleness histograms to a kept sample: its episode id, and the step's trace and
        span ids, which its log record carries too."""
        attributes_ = {} if sample.episode_id is None else {"rl.episode.id": str(sample.episode_id)[:_MAX_EXEMPLAR_ID]}
        reward = float(sample.reward)
        if math.isfinite(reward):
            self._store.add_exemplar(
                _names.REWARD,
                _TOTAL,
                Exemplar(attributes_, reward, now, span_id=span.span_id, trace_id=span.trace_id),
            )
        if sample.staleness is not None:
            self._store.add_exemplar(
                _names.STALENESS,
                (),
                Exemplar(attributes_, int(sample.staleness), now, span_id=span.span_id, trace_id=span.trace_id),
            )

    def _record_distribution(
        self, family: _names.Distribution, attrs: Attributes, summary: Summary, bounds: tuple[float, ...]
    ) -> None:
        self._store.record(
            family.histogram, attrs, summary, extremes=(family.maximum, family.minimum), bounds=bounds
        )
        self._store.add_many(
            {
                (family.positive, attrs): summary.positive,
                (family.negative, attrs): summary.negative,
                (family.squares, attrs): summary.squares,
            }
        )
        self._count_rejected(family.histogram.name, summary)

    def _label(self, known: dict[str, str], name: object, metric: str, cap: int) -> str:
        """``name`` itself while fewer than ``cap`` distinct names were seen; ``_overflow`` after that."""
        if isinstance(name, str) and name in known:
            return known[name]
        valid = isinstance(name, str) and 0 < len(name) <= _MAX_FN_LENGTH and name.isprintable()
        if isinstance(name, str) and valid and len(known) < cap:
            known[name] = name
            return name
        reason = "name_overflow" if valid else "name_invalid"
        self._warn_once(
            metric,
            reason,
            f"name {name!r} recorded as {_names.REWARD_FN_OVERFLOW!r}: at most {cap} distinct names "
            f'("max_reward_fns"), each a printable string of 1..{_MAX_FN_LENGTH} characters',
        )
        self._store.add(_names.VALUES_REJECTED, _rejected_attrs(metric, reason), 1)
        return _names.REWARD_FN_OVERFLOW

    def _count_rejected(self, metric: str, summary: Summary) -> None:
        for reason, count in summary.rejected.items():
            self._store.add(_names.VALUES_REJECTED, _rejected_attrs(metric, reason), count)
            self._warn_once(metric, reason, f"{count} value(s) rejected: {reason}")

    def _reject(self, metric: str, error: Exception, count: int) -> None:
        reason = error.reason if isinstance(error, BadInput) else "invalid"
        self._store.add(_names.VALUES_REJECTED, _rejected_attrs(metric, reason), count)
        self._warn_once(metric, reason, f"call dropped: {error}")

    def _warn_once(self, metric: str, reason: str, message: str) -> None:
        if (metric, reason) not in self._warned:
            self._warned.add((metric, reason))
            _logger.warning("otel-rl %s: %s (further %r warnings are only counted)", metric, message, reason)


def _rejected_attrs(metric: str, reason: str) -> tuple[tuple[str, str], ...]:
    return attributes(**{_names.SELF_METRIC: metric, _names.SELF_REASON: reason})


def _size(values: object) -> int:
    numel = getattr(values, "numel", None)
    if callable(numel):
        try:
            return int(numel())
        except Exception:  # noqa: BLE001
            return 1
    size = getattr(values, "size", None)
    if isinstance(size, int):
        return size
    if isinstance(values, Sequence) and not isinstance(values, (str, bytes)):
        return len(values)
    return 1
