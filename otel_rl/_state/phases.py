"""Where a rank's time goes: its steps and phases as OpenTelemetry spans, one trace per step across ranks.

Every rank derives the trace of step ``n`` from the run id and ``n`` alone, so the ranks of a run put their spans in
one trace without talking to each other (no collectives): rank 0 emits the step's root span ``rl.step``, whose span
id is derived the same way; every rank emits its own ``rl.rank.step`` span under that root, and its phases
(``generate``, ``score``, ``train``, ``sync``, ``wait_data``, ...) under its rank span. A phase is a span named for
the phase, with ``rl.phase.name``. Each phase span the rank ends is also counted in its own cumulative metrics
(``rl.phase.calls``, ``rl.phase.duration``: the span's duration, the buckets of the collector's spanmetrics), which the
collector merges over ranks like every metric: exact through collector outages and restarts, where spans, however
retried, can only be counted once they reach a collector (docs/pipeline.md).

Phases nest (``with telemetry.phase("train"): with telemetry.phase("sync"): ...``): the inner one is a child span,
and the phase gauges name the innermost. :meth:`PhaseTracer.set` replaces the innermost phase (imperative style);
a step boundary ends every open span and opens the still-current phases again under the new step, so each step's
trace holds that rank's phases. Per phase the rank also reports when it entered it (``rl.phase.started``, merged
by ``min``: the longest-running rank), which the stuck-stage alert compares with the phase's usual duration.

Asynchronous RL: :meth:`PhaseTracer.context` gives the innermost phase's span as a string a rollout worker sends
along with its trajectory; the trainer passes such strings as ``links`` of the phase that consumes them, which
links that phase to each trajectory's generation and adds a ``queue`` span to the trajectory's trace, from when it
was generated to when it was consumed: one trajectory's path generate → queue → train.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import otel_rl_contract as contract
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags

from otel_rl._record.buckets import ExplicitLayout
from otel_rl._record.inputs import BadInput
from otel_rl._record.stats import Statistics
from otel_rl._state.store import MetricStore, attributes

_logger = logging.getLogger(__name__)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def step_trace(run_id: str, step: int) -> tuple[int, int]:
    """The trace id of step ``step`` of run ``run_id`` and the span id of its root, the same on every rank.

    >>> step_trace("run", 3) == step_trace("run", 3) != step_trace("run", 4)
    True
    """
    digest = hashlib.sha256(f"otel-rl/{run_id}/{step}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


class DerivedIds(RandomIdGenerator):
    """Random ids, except for the next root span a caller announces with :meth:`next_root_is` (the step's root must
    have the ids every rank derives; the SDK draws ids from its provider's generator)."""

    def __init__(self) -> None:
        self._next = threading.local()

    def next_root_is(self, trace_id: int, span_id: int) -> None:
        self._next.trace_id, self._next.span_id = trace_id, span_id

    def generate_trace_id(self) -> int:
        value: int | None = getattr(self._next, "trace_id", None)
        self._next.trace_id = None
        return super().generate_trace_id() if value is None else value

    def generate_span_id(self) -> int:
        value: int | None = getattr(self._next, "span_id", None)
        self._next.span_id = None
        return super().generate_span_id() if value is None else value


@dataclass(frozen=True)
class TrajectoryContext:
    """Where a trajectory was generated: its generation span, and when it was generated (ns)."""

    span: SpanContext
    generated_ns: int

    def encode(self) -> str:
        """``00-<trace>-<span>-01;<generated ns>``: a W3C traceparent and the generation time."""
        return f"00-{self.span.trace_id:032x}-{self.span.span_id:016x}-01;{self.generated_ns}"

    @classmethod
    def decode(cls, text: object) -> TrajectoryContext:
        """Raises :class:`~otel_rl._record.inputs.BadInput` (``type``) for anything :meth:`encode` did not make."""
        error = BadInput("type", '"links" must hold strings from Telemetry.trajectory_context()')
        if not isinstance(text, str):
            raise error
        try:
            parent, _, generated = text.partition(";")
            version, trace_hex, span_hex, _ = parent.split("-")
            if version != "00" or len(trace_hex) != 32 or len(span_hex) != 16:
                raise error
            span = SpanContext(int(trace_hex, 16), int(span_hex, 16), is_remote=True, trace_flags=_SAMPLED)
            return cls(span, int(generated))
        except ValueError:
            raise error from None


class PhaseTracer:
    """The spans of one rank's steps and phases (see the module docstring), and its phase gauges.

    ``tracer_provider`` None means no trace export: spans are then non-recording but keep their ids, so records
    and exemplars still name the step's trace. A provider must draw its span ids from ``ids``."""

    def __init__(
        self,
        *,
        run_id: str,
        rank: int,
        store: MetricStore,
        tracer_provider: TracerProvider | None,
        ids: DerivedIds,
        clock: Callable[[], int],
    ) -> None:
        self._ids = ids
        self._run_id = run_id
        self._rank = rank
        self._store = store
        self._tracer = (
            tracer_provider.get_tracer(contract.SCOPE_NAME, contract.SCOPE_VERSION)
            if tracer_provider is not None
            else None
        )
        self._clock = clock
        self._lock = threading.Lock()
        self._step: int | None = None
        self._root: trace.Span | None = None
        self._rank_span: trace.Span = trace.INVALID_SPAN
        self._phases: list[_Open] = []
        """The open phases, outermost first."""
        self._reported: str | None = None
        self._warned_unstepped = False

    # -- steps ----------------------------------------------------------------------------------------------------

    def step(self, number: int | None, *, policy_version: int | None = None) -> None:
        """End the current step's spans and open step ``number``'s (None: no step follows), reopening the current
        phases under it."""
        now = self._clock()
        with self._lock:
            names = [(phase.name, phase.entered) for phase in self._phases]
            self._end_all(now)
            self._step = number
            if number is not None:
                self._open_step(number, now, policy_version)
                for name, entered in names:
                    self._phases.append(_Open(name, self._start(name, now, links=()), entered, now))

    @property
    def step_span(self) -> trace.Span:
        """This rank's span of the current step (samples' records and exemplars name it)."""
        return self._rank_span

    def _open_step(self, number: int, now: int, policy_version: int | None) -> None:
        trace_id, root_id = step_trace(self._run_id, number)
        root = SpanContext(trace_id, root_id, is_remote=True, trace_flags=_SAMPLED)
        step_attributes: dict[str, int] = {contract.SAMPLE_STEP: number}
        if policy_version is not None:
            step_attributes[contract.SAMPLE_POLICY_VERSION] = policy_version
        if self._tracer is None:
            self._rank_span = NonRecordingSpan(
                SpanContext(trace_id, _span_id(self._run_id, number, self._rank), is_remote=False, trace_flags=_SAMPLED)
            )
            return
        if self._rank == 0:
            self._ids.next_root_is(trace_id, root_id)
            self._root = self._tracer.start_span(
                contract.STEP_SPAN, context=Context(), start_time=now, attributes=step_attributes
            )
        self._rank_span = self._tracer.start_span(
            contract.RANK_STEP_SPAN,
            context=trace.set_span_in_context(NonRecordingSpan(root)),
            start_time=now,
            attributes={**step_attributes, contract.RANK: self._rank},
        )

    # -- phases ---------------------------------------------------------------------------------------------------

    def enter(self, name: str, *, links: Sequence[TrajectoryContext] = ()) -> int:
        """Open phase ``name`` inside the current ones; returns its depth, for :meth:`leave`."""
        self._check_stepped(name)
        now = self._clock()
        with self._lock:
            self._phases.append(_Open(name, self._start(name, now, links=links), now, now))
            self._report(now)
            self._queue_spans(links, now)
            return len(self._phases)

    def leave(self, depth: int) -> None:
        """Close the phase opened at ``depth`` (and any still open inside it)."""
        now = self._clock()
        with self._lock:
            while len(self._phases) >= depth and self._phases:
                self._end(self._phases.pop(), now)
            self._report(now)

    def set(self, name: str) -> None:
        """Make ``name`` the innermost phase, in place of the innermost one (imperative style)."""
        self._check_stepped(name)
        now = self._clock()
        with self._lock:
            if self._phases and self._phases[-1].name == name:
                return
            if self._phases:
                self._end(self._phases.pop(), now)
            self._phases.append(_Open(name, self._start(name, now, links=()), now, now))
            self._report(now)

    def completed(self, durations: Sequence[tuple[str, float]]) -> None:
        """Phases that already ran in this step, with their seconds, as spans laid end to end up to now (a trainer
        that times its own sections: durations exact, positions as if the sections ran one after the other)."""
        if durations:
            self._check_stepped(durations[0][0])
        now = self._clock()
        with self._lock:
            start = now - sum(int(seconds * 1e9) for _, seconds in durations)
            for name, seconds in durations:
                end = start + int(seconds * 1e9)
                self._end(_Open(name, self._start(name, start, links=()), start, start), end)
                start = end

    def context(self) -> str:
        """The innermost phase's span (else the step's) as a string for :meth:`enter`'s ``links`` elsewhere."""
        with self._lock:
            span = self._phases[-1].span if self._phases else self._rank_span
        return TrajectoryContext(span.get_span_context(), self._clock()).encode()

    def close(self) -> None:
        """End every open span (at shutdown); the phase gauges say no phase."""
        now = self._clock()
        with self._lock:
            self._end_all(now)
            self._report(now)

    # -- internals ------------------------------------------------------------------------------------------------

    def _check_stepped(self, name: str) -> None:
        """Say once, when phases are traced, what a phase before any step becomes: a trace of its own."""
        if self._step is not None or self._warned_unstepped or self._tracer is None:
            return
        self._warned_unstepped = True
        _logger.warning(
            "otel-rl: phase %r before the first step(): phases are spans of their step's trace, so until step() is "
            "called every phase becomes a trace of its own, with no step, outside the step timeline (the phase "
            "gauges are not affected). Call telemetry.step(n) at each training step.",
            name,
        )

    def _start(self, name: str, now: int, *, links: Sequence[TrajectoryContext]) -> trace.Span:
        parent = self._phases[-1].span if self._phases else self._rank_span
        if self._tracer is None:
            return NonRecordingSpan(parent.get_span_context())
        span_attributes: dict[str, str | int] = {contract.PHASE: name, contract.RANK: self._rank}
        if self._step is not None:
            span_attributes[contract.SAMPLE_STEP] = self._step
        return self._tracer.start_span(
            name,
            context=trace.set_span_in_context(parent),
            start_time=now,
            attributes=span_attributes,
            links=[Link(link.span, {"rl.link": "consumes"}) for link in links],
        )

    def _queue_spans(self, links: Sequence[TrajectoryContext], now: int) -> None:
        """One ``queue`` span per consumed trajectory, in its own trace, from its generation to now."""
        for link in links:
            start = min(link.generated_ns, now)
            span = (
                self._tracer.start_span(
                    contract.QUEUE_PHASE,
                    context=trace.set_span_in_context(NonRecordingSpan(link.span)),
                    start_time=start,
                    attributes={contract.PHASE: contract.QUEUE_PHASE, contract.RANK: self._rank},
                )
                if self._tracer is not None
                else NonRecordingSpan(link.span)
            )
            self._end(_Open(contract.QUEUE_PHASE, span, start, start), now)

    def _end(self, phase: _Open, now: int) -> None:
        """End a phase's span and count it in the rank's own phase metrics (the same durations as the span's), which
        the collector merges like any cumulative metric: exact across collector outages and restarts."""
        phase.span.end(end_time=now)
        seconds = (now - phase.started) / 1e9
        labels = attributes(**{contract.PHASE: phase.name, contract.SPAN_NAME: phase.name})
        self._store.add(contract.PHASE_CALLS, labels, 1)
        self._store.record_histogram(contract.PHASE_DURATION, labels, _single(seconds))

    def _end_all(self, now: int) -> None:
        for phase in reversed(self._phases):
            self._end(phase, now)
        self._phases.clear()
        for ended in (self._rank_span, self._root):
            if ended is not None and ended.is_recording():
                ended.end(end_time=now)
        self._root = None
        self._rank_span = trace.INVALID_SPAN

    def _report(self, now: int) -> None:
        """The gauges: 1 for the innermost phase (0 for the one before), and when this rank entered each open
        phase (the streams of phases it left are removed: the merged minimum is over the ranks in the phase)."""
        current = self._phases[-1].name if self._phases else None
        if self._reported is not None and self._reported != current:
            self._store.set(contract.PHASES, attributes(**{contract.PHASE: self._reported}), 0)
        if current is not None:
            self._store.set(contract.PHASES, attributes(**{contract.PHASE: current}), 1)
        self._reported = current
        open_phases = {phase.name: phase.entered for phase in self._phases}
        self._store.retain(contract.PHASE_STARTED, {attributes(**{contract.PHASE: name}) for name in open_phases})
        for name, entered in open_phases.items():
            self._store.set(contract.PHASE_STARTED, attributes(**{contract.PHASE: name}), entered / 1e9)


@dataclass
class _Open:
    """An open phase: its name, its span, when this rank entered the phase and when the span began (ns; later than
    the entry for a phase reopened under a new step)."""

    name: str
    span: trace.Span
    entered: int
    started: int


_PHASE_LAYOUT = ExplicitLayout(contract.PHASE_BOUNDS)


def _single(seconds: float) -> Statistics:
    """The statistics of one phase duration in the phase histogram's layout."""
    counts = np.zeros(_PHASE_LAYOUT.size, dtype=np.int64)
    counts[_PHASE_LAYOUT.slot(seconds)] = 1
    return Statistics(
        _PHASE_LAYOUT, 1, seconds, seconds * seconds, max(seconds, 0.0), max(-seconds, 0.0), seconds, seconds, counts
    )


def _span_id(run_id: str, step: int, rank: int) -> int:
    return int.from_bytes(hashlib.sha256(f"otel-rl/{run_id}/{step}/{rank}".encode()).digest()[:8], "big") or 1
