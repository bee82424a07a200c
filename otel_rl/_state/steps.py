"""Closing a training step: the step's kept samples become log records (and span events), and exemplars.

While a step runs, samples are offered to the sample filter (by default top/bottom-k by reward). When the next step
is declared (or at shutdown), the kept ones are emitted as ``rl.sample`` log records carrying the step's trace and
span ids (this rank's ``rl.rank.step`` span, ``otel_rl._state.phases``), optionally as events of that span, and as
exemplars of the reward and staleness histograms, so a dashboard point links to the sample that explains it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import secrets
import threading
from collections.abc import Callable, Mapping
from typing import Any

import otel_rl_contract as contract
from opentelemetry import trace
from opentelemetry._logs import Logger, SeverityNumber
from opentelemetry.sdk.metrics import Exemplar
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

from otel_rl._config import ResolvedConfig
from otel_rl._record.inputs import BadInput, as_value, describe
from otel_rl._record.samples import EpisodeSample, SampleFilter, SampleRecord, sample_from_mapping, to_record
from otel_rl._state.self_telemetry import LabelCap, SelfTelemetry
from otel_rl._state.store import MetricStore, attributes

_logger = logging.getLogger(__name__)
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
        store: MetricStore,
        self_telemetry: SelfTelemetry,
        clock: Callable[[], int],
    ) -> None:
        self._config = config
        self._new_filter = new_filter
        self._filters: dict[str, SampleFilter] = {}
        self._tables = LabelCap(contract.SAMPLE_EVENT, "max_sample_tables", config.max_sample_tables, self_telemetry)
        self._logger = logger
        self._store = store
        self._self_telemetry = self_telemetry
        self._clock = clock
        self._ids = RandomIdGenerator()
        self._lock = threading.Lock()
        self._step: int | None = None
        self._stepped = False
        """Whether a step was ever declared (samples offered before are warned about, once)."""

    def offer(self, sample: EpisodeSample | Mapping[str, Any], table: str) -> None:
        """Offer one sample to the step's filter of ``table`` (its reward as a float). Raises
        :class:`~otel_rl._record.inputs.BadInput` for a sample that is neither an :class:`EpisodeSample` nor a mapping,
        or has no numeric reward."""
        if isinstance(sample, EpisodeSample):
            episode = sample
        elif isinstance(sample, Mapping):
            episode, unknown = sample_from_mapping(sample)
            if unknown:
                self._self_telemetry.reject(
                    contract.SAMPLE_EVENT,
                    "unknown_key",
                    len(unknown),
                    f"unknown sample keys {describe(unknown)} dropped",
                )
        else:
            raise BadInput("type", f'"sample" must be an EpisodeSample or a mapping, got {type(sample).__name__}')
        episode = dataclasses.replace(episode, reward=as_value(episode.reward, argument="reward"))
        if not self._stepped:
            self._warn_unstepped()
        label = self._tables.label(table)
        with self._lock:
            sample_filter = self._filters.get(label)
            if sample_filter is None:
                sample_filter = self._filters[label] = self._new_filter()
            sample_filter.add(episode)

    def close(self, next_step: int | None, span: trace.Span) -> None:
        """Emit the kept samples of the open step, naming ``span`` (the step's span of this rank: its records
        carry its trace and span ids, and with ``samples_as_span_events`` it carries them as events), and open
        ``next_step`` (None: no step follows)."""
        now = self._clock()
        with self._lock:
            kept = [(table, *item) for table, each in self._filters.items() for item in each.drain()]
            step = self._step
            self._step = next_step
            self._stepped = self._stepped or next_step is not None
        if not kept:
            return
        if not span.get_span_context().is_valid:  # samples before the first step: ids of their own
            span = trace.NonRecordingSpan(
                trace.SpanContext(
                    trace_id=self._ids.generate_trace_id(),
                    span_id=self._ids.generate_span_id(),
                    is_remote=False,
                    trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
                )
            )
        events = self._config.samples_as_span_events and span.is_recording()
        context = trace.set_span_in_context(span)
        for table, selection, sample in kept:
            sample_id = secrets.token_hex(16)
            try:
                record = to_record(
                    sample,
                    step=step,
                    selection=selection,
                    table=table,
                    budget_bytes=self._config.sample_text_budget_bytes,
                    redact=self._config.redact,
                    sample_id=sample_id,
                )
            except Exception as error:  # noqa: BLE001 - a broken sample or redactor must not break the others
                reason = "redaction" if self._config.redact is not None else "invalid"
                self._self_telemetry.drop_sample(reason, f"sample dropped: {type(error).__name__}")
                continue
            for reason, amount in record.rejected.items():
                self._self_telemetry.reject(
                    contract.SAMPLE_EVENT, reason, amount, f"sample field(s) left out: {reason}"
                )
            self._logger.emit(
                event_name=contract.SAMPLE_EVENT,
                body=record.body,
                attributes=record.attributes,
                severity_number=SeverityNumber.INFO,
                context=context,
            )
            self._add_exemplars(record, span.get_span_context(), now)
            if events:
                span.add_event(contract.SAMPLE_EVENT, attributes={**record.attributes, **record.body})

    def _warn_unstepped(self) -> None:
        """Say once what happens to samples offered before any step: one step's selection is all that is kept."""
        self._stepped = True  # warned: stop checking
        config = self._config
        _logger.warning(
            "otel-rl: record_sample() before the first step(): samples are selected per step (the default filter "
            "keeps top_k + bottom_k + random_k = %d per step and table), so until step() is called all the samples of "
            "a table compete for one step's places and the rest are dropped; the kept ones are exported without a "
            "step number at the first step() or at shutdown. Call telemetry.step(n) at each training step.",
            config.top_k + config.bottom_k + config.random_k,
        )

    def _add_exemplars(self, record: SampleRecord, span: trace.SpanContext, now: int) -> None:
        """Link the histograms to a kept sample (its episode id, and the step's trace and span ids, which its log
        record carries too): its total reward on ``rl.reward{fn="total"}``, each reward-breakdown value on its own
        ``rl.reward{fn}``, its staleness on ``rl.staleness``, each on the streams of the sample's dataset. Only
        streams that have values take exemplars, and only finite values are exemplars."""
        labels = {} if record.episode_id is None else {contract.SAMPLE_EPISODE_ID: record.episode_id[:_MAX_EXEMPLAR_ID]}
        source = {} if record.dataset is None else {contract.DATASET: record.dataset}
        values: list[tuple[contract.MetricName, tuple[tuple[str, str], ...], float]] = [
            (contract.REWARDS.histogram, attributes(**{contract.REWARD_FN: fn}, **source), value)
            for fn, value in {**record.breakdown, contract.REWARD_FN_TOTAL: record.reward}.items()
        ]
        if record.staleness is not None:
            values.append((contract.STALENESS.histogram, attributes(**source), float(record.staleness)))
        for histogram, attrs, value in values:
            if math.isfinite(value):
                exemplar = Exemplar(labels, value, now, span_id=span.span_id, trace_id=span.trace_id)
                self._store.add_exemplar(histogram, attrs, exemplar)
