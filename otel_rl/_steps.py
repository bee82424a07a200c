"""Closing a training step: the step's kept samples become log records (and span events), and exemplars.

While a step runs, samples are offered to the sample filter (by default top/bottom-k by reward). When the next step
is declared (or at shutdown), the kept ones are emitted as ``rl.sample`` log records carrying the step's trace and
span ids, optionally as events of a per-step ``rl.step`` span, and as exemplars of the reward and staleness
histograms, so a dashboard point links to the sample that explains it.
"""

from __future__ import annotations

import math
import secrets
import threading
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import Logger, SeverityNumber
from opentelemetry.sdk.metrics import Exemplar
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

from otel_rl import _names
from otel_rl._config import ResolvedConfig
from otel_rl._samples import EpisodeSample, SampleFilter, sample_from_mapping, to_record
from otel_rl._self_telemetry import LabelCap, SelfTelemetry
from otel_rl._store import MetricStore, attributes

_MAX_EXEMPLAR_ID = 40
"""Prometheus refuses exemplars whose labels exceed 128 characters; trace and span ids take 63 of them."""


class StepSamples:
    """The samples of the open step, one filter per sample table, and what happens to the kept ones when it closes.

    Tables are independent (torchforge keeps top/bottom-k per table): an ``eval`` table's samples are kept whatever
    the rewards of the ``train`` table. Their number is capped by ``max_sample_tables``.
    """

    def __init__(
        self,
        config: ResolvedConfig,
        *,
        new_filter: Callable[[], SampleFilter],
        logger: Logger,
        tracer_provider: TracerProvider | None,
        store: MetricStore,
        self_telemetry: SelfTelemetry,
        clock: Callable[[], int],
    ) -> None:
        self._config = config
        self._new_filter = new_filter
        self._filters: dict[str, SampleFilter] = {}
        self._tables = LabelCap(_names.SAMPLE_EVENT, "max_sample_tables", config.max_sample_tables, self_telemetry)
        self._logger = logger
        self._tracer_provider = tracer_provider
        self._store = store
        self._self_telemetry = self_telemetry
        self._clock = clock
        self._ids = RandomIdGenerator()
        self._lock = threading.Lock()
        self._step: int | None = None
        self._started_ns = clock()

    def offer(self, sample: EpisodeSample | Mapping[str, Any], table: str) -> None:
        """Offer one sample to the step's filter of ``table``; raises on a sample without a numeric reward."""
        if isinstance(sample, EpisodeSample):
            episode = sample
        else:
            episode, unknown = sample_from_mapping(sample)
            if unknown:
                self._self_telemetry.reject(
                    _names.SAMPLE_EVENT, "unknown_key", len(unknown), f"unknown sample keys {unknown!r} dropped"
                )
        float(episode.reward)
        label = self._tables.label(table)
        with self._lock:
            sample_filter = self._filters.get(label)
            if sample_filter is None:
                sample_filter = self._filters[label] = self._new_filter()
            sample_filter.add(episode)

    def close(self, next_step: int | None) -> None:
        """Emit the kept samples of the open step and open ``next_step`` (None: no step follows)."""
        now = self._clock()
        with self._lock:
            kept = [(table, *item) for table, each in self._filters.items() for item in each.drain()]
            step, started = self._step, self._started_ns
            self._step, self._started_ns = next_step, now
        if not kept:
            return
        span = self._span(step, started)
        context = trace.set_span_in_context(span)
        for table, selection, sample in kept:
            try:
                record = to_record(
                    sample,
                    step=step,
                    selection=selection,
                    table=table,
                    budget_bytes=self._config.sample_text_budget_bytes,
                    redact=self._config.redact,
                )
            except Exception as error:  # noqa: BLE001 - a broken sample or redactor must not break the others
                reason = "redaction" if self._config.redact is not None else "invalid"
                self._self_telemetry.drop_sample(reason, f"sample dropped: {type(error).__name__}")
                continue
            record_attributes = {_names.SAMPLE_ID: secrets.token_hex(16), **record.attributes}
            self._logger.emit(
                event_name=_names.SAMPLE_EVENT,
                body=record.body,
                attributes=record_attributes,
                severity_number=SeverityNumber.INFO,
                context=context,
            )
            self._add_exemplars(sample, span.get_span_context(), now)
            if span.is_recording():
                span.add_event(_names.SAMPLE_EVENT, attributes={**record_attributes, **record.body})
        span.end(end_time=now)

    def _span(self, step: int | None, started_ns: int) -> trace.Span:
        """The step's span: recorded when samples go out as span events too, else only ids for the log records."""
        if self._tracer_provider is not None:
            tracer = self._tracer_provider.get_tracer(_names.SCOPE_NAME, _names.SCOPE_VERSION)
            return tracer.start_span(
                _names.STEP_SPAN, start_time=started_ns, attributes={} if step is None else {_names.SAMPLE_STEP: step}
            )
        return trace.NonRecordingSpan(
            trace.SpanContext(
                trace_id=self._ids.generate_trace_id(),
                span_id=self._ids.generate_span_id(),
                is_remote=False,
                trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
            )
        )

    def _add_exemplars(self, sample: EpisodeSample, span: trace.SpanContext, now: int) -> None:
        """Link the histograms to a kept sample (its episode id, and the step's trace and span ids, which its log
        record carries too): its total reward on ``rl.reward{fn="total"}``, each reward-breakdown value on its own
        ``rl.reward{fn}``, its staleness on ``rl.staleness``, each on the streams of the sample's dataset. Only
        streams that have values take exemplars."""
        labels = {} if sample.episode_id is None else {_names.SAMPLE_EPISODE_ID: str(sample.episode_id)[:_MAX_EXEMPLAR_ID]}
        source = {} if sample.dataset is None else {_names.DATASET: str(sample.dataset)}
        values: list[tuple[_names.MetricName, tuple[tuple[str, str], ...], float]] = [
            (_names.REWARDS.histogram, attributes(**{_names.REWARD_FN: fn}, **source), float(value))
            for fn, value in {**sample.reward_breakdown, _names.REWARD_FN_TOTAL: sample.reward}.items()
        ]
        if sample.staleness is not None:
            values.append((_names.STALENESS.histogram, attributes(**source), float(int(sample.staleness))))
        for histogram, attrs, value in values:
            if math.isfinite(value):
                exemplar = Exemplar(labels, value, now, span_id=span.span_id, trace_id=span.trace_id)
                self._store.add_exemplar(histogram, attrs, exemplar)
