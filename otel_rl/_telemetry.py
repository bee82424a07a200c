"""Telemetry: the one object a training process records through; it wires the parts and guards every entry point.

Two error regimes. Construction validates its configuration and raises at once. After that no method raises into
the training loop: each runs under the guard of ``otel_rl._guard``; inputs are converted by ``otel_rl._record.inputs``;
a bad part of the input is dropped, counted in ``otel_rl.values.rejected`` and warned about once
(``otel_rl._state.self_telemetry``), and the valid part is kept.

The parts: summarizers turn a call's values into :class:`~otel_rl._record.stats.Statistics` (``otel_rl._record.stats``,
``otel_rl._record.rollouts``), the :class:`~otel_rl._state.store.MetricStore` folds them into every metric of the
distribution, :class:`StepSamples` (``otel_rl._state.steps``) turns a step's kept samples into log records and
exemplars, and the export worker (``otel_rl._export.worker``) sends it all from its own thread.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

import otel_rl_contract as contract
from opentelemetry.sdk._logs.export import LogRecordExporter
from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExporter

from otel_rl._config import TelemetryConfig
from otel_rl._export.exporters import Exporters
from otel_rl._export.worker import shutdown_within
from otel_rl._guard import failed, guarded
from otel_rl._pipeline import Pipeline, build_pipeline
from otel_rl._record import joint
from otel_rl._record.inputs import BadInput, TensorLike, as_integer, as_real, as_values, describe
from otel_rl._record.rollouts import Rollouts
from otel_rl._record.samples import EpisodeSample, SampleFilter
from otel_rl._record.stats import Statistics
from otel_rl._state.phases import TrajectoryContext
from otel_rl._state.self_telemetry import SelfTelemetry
from otel_rl._state.store import attributes

_P = ParamSpec("_P")
_Fields = TypeVar("_Fields")
_Self = TypeVar("_Self")


def _takes(
    fields: Callable[_P, _Fields],
) -> Callable[[Callable[[_Self, _Fields], None]], Callable[Concatenate[_Self, _P], None]]:
    """Give a method the keyword arguments of the dataclass ``fields`` (declared there once, with their documents):
    the method receives them as one ``fields`` instance. An unknown keyword raises ``TypeError`` like any Python
    call, which the method's guard counts."""

    def decorate(method: Callable[[_Self, _Fields], None]) -> Callable[Concatenate[_Self, _P], None]:
        @functools.wraps(method)
        def call(self: _Self, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
            method(self, fields(*args, **kwargs))

        own = inspect.signature(method).parameters["self"]
        call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [own, *inspect.signature(fields).parameters.values()], return_annotation=None
        )
        call.takes = fields  # type: ignore[attr-defined]  # docs/generate_api.py documents the fields
        return call

    return decorate


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
        self._pipeline: Pipeline = build_pipeline(
            self.config.resolved,
            Exporters(metric_exporter, log_exporter, span_exporter),
            sample_filter=sample_filter,
            clock=clock,
        )
        self._policy_version: int | None = None
        self._closed = False
        atexit.register(self._shutdown_at_exit)

    @property
    def resource(self) -> Resource:
        """The process's OpenTelemetry resource: service, instance, run and rank attributes."""
        return self._pipeline.resource

    @property
    def self_telemetry(self) -> SelfTelemetry:
        """Where this process counts what it dropped (the guard of every method counts there)."""
        return self._pipeline.self_telemetry

    # -- recording (never raises) -------------------------------------------------------------------------------

    @guarded(contract.REWARDS.histogram.name, values="rewards")
    def record_rewards(
        self,
        rewards: TensorLike,
        *,
        fn: str = contract.REWARD_FN_TOTAL,
        mask: TensorLike | None = None,
        dataset: str | None = None,
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
        statistics = self._pipeline.summarizers.rewards.summarize(rewards, mask)
        self._record(
            contract.REWARDS,
            statistics,
            lambda: {contract.REWARD_FN: self._pipeline.caps.reward_fns.label(fn), **self._dataset(dataset)},
        )

    @guarded("rl.rollouts", values="mask")
    @_takes(Rollouts)
    def record_rollouts(self, rollouts: Rollouts) -> None:
        """Record one step's rollout health signals in one call; every argument is optional (the table below).

        Per-token fields (``entropy``, ``logprobs``, ``inference_logprobs``) are read where ``mask`` selects; the
        per-rollout ones (``(rollouts,)``) must have as many rollouts as the mask, else they are rejected
        (``shape``). A bad field is dropped and counted (``otel_rl.values.rejected``), the others kept; signs are
        counted only with accepted advantages; NaN log-probabilities drop their tokens only; an unusable mask
        rejects every field. Prompt groups are solved when their reward is at least ``solved_reward``. The joint
        sums (``rl.joint``: the total reward with the response length and with each reward function, over the
        rollouts that have both; the others counted ``unpaired``) feed the audit rules: whether length is paid,
        which function drives the total. Record the functions' own distributions with :meth:`record_rewards`.
        """
        pipeline = self._pipeline
        breakdown = [
            (f"reward.{pipeline.caps.reward_fns.label(fn)}", values)
            for fn, values in (rollouts.reward_breakdown or {}).items()
        ]
        result = pipeline.summarizers.rollouts.summarize(rollouts, breakdown=breakdown)
        for metric, bad_input, values in result.rejected:
            self._pipeline.self_telemetry.reject_call(metric, bad_input, values)
        for metric, reason, amount in result.rejected_parts:
            if amount:
                self._pipeline.self_telemetry.reject(metric, reason, amount, f"{amount} value(s) rejected: {reason}")
        for distribution, attrs, statistics in result.distributions:
            self._pipeline.store.record(distribution, attrs, statistics)
            self._pipeline.self_telemetry.reject_parts(distribution.histogram.name, statistics)
        for counter, attrs, amount in result.counts:
            self._pipeline.store.add(counter, attrs, amount)
        for label, sums in result.joint:
            for moment, total in zip(joint.MOMENTS, sums, strict=True):
                pipeline.store.add(contract.JOINT, ((contract.JOINT_MOMENT, moment), (contract.JOINT_X, label)), total)

    @guarded(contract.METRICS.histogram.name, values="values")
    def record_metric(self, key: str, values: TensorLike, *, mask: TensorLike | None = None) -> None:
        """Record any other scalar series (loss, KL, entropy, ...) under ``rl.metric{rl.metric.key=key}``.

        ``values``: a number or any number of values, of any shape (every element is a value). Exported like
        rewards (an exponential histogram, so quantiles too; with ``histogram="explicit"`` a single bucket, since
        no bounds fit every key): mean, sum, standard deviation, max and min are all derivable downstream, merged
        exactly across ranks. A key takes one of the ``max_metric_keys`` slots only once a value of it is kept.
        """
        statistics = self._pipeline.summarizers.metrics.summarize(values, mask, argument="values", per_token=True)
        self._record(
            contract.METRICS, statistics, lambda: {contract.METRIC_KEY: self._pipeline.caps.metric_keys.label(key)}
        )

    @guarded(contract.STALENESS.histogram.name, values="versions")
    def record_staleness(
        self,
        versions: TensorLike,
        current_version: int,
        *,
        mask: TensorLike | None = None,
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
        statistics = self._pipeline.summarizers.staleness.summarize(versions, current, mask)
        source = self._dataset(dataset)
        self._pipeline.store.set(contract.POLICY_VERSION, (), current)
        self._pipeline.store.add(contract.UNVERSIONED, attributes(**source), statistics.unversioned)
        self._record(
            contract.STALENESS, statistics, lambda: {**source, **({contract.STALENESS_PHASE: phase} if phase else {})}
        )

    @guarded(contract.STALENESS_DROPPED.name, values="count")
    def record_staleness_drops(
        self,
        count: int | None = None,
        *,
        response_lengths: TensorLike | None = None,
        staleness: TensorLike | None = None,
        dataset: str | None = None,
    ) -> None:
        """Count samples the trainer dropped for being too stale (``rl.staleness.dropped``), and what they were like.

        ``count``: an integer >= 0; by default the number of ``response_lengths`` (else of ``staleness``).
        ``response_lengths`` and ``staleness`` (policy versions behind), one per dropped rollout, go into
        ``rl.dropped.response.length`` and ``rl.dropped.staleness``, beside the kept rollouts' ``rl.response.length``
        and ``rl.staleness``: dropping stale rollouts drops the long ones first (they take longest to generate), which
        biases training toward short, easy problems; the audit rule RLStaleDropsBiasedByLength compares the two."""
        source = attributes(**self._dataset(dataset))
        summarizers = self._pipeline.summarizers
        for values, distribution, argument, summarizer in (
            (response_lengths, contract.DROPPED_LENGTHS, "response_lengths", summarizers.dropped_lengths),
            (staleness, contract.DROPPED_STALENESS, "staleness", summarizers.dropped_staleness),
        ):
            if values is None:
                continue
            name = distribution.histogram.name
            try:
                converted = as_values(values, argument=argument)
                negative = int((converted.tensor < 0).sum())
                statistics = summarizer.summarize(converted, ~(converted.tensor < 0), argument=argument)
            except BadInput as error:
                self._pipeline.self_telemetry.reject_call(name, error, values)
                continue
            self._pipeline.store.record(distribution, source, statistics)
            self._pipeline.self_telemetry.reject_parts(name, statistics)
            if negative:
                self._pipeline.self_telemetry.reject(
                    name, "negative", negative, f"{negative} value(s) rejected: negative"
                )
            if count is None:
                count = statistics.count + negative + sum(statistics.rejected.values())
        amount = as_integer(0 if count is None else count, argument="count", minimum=0)
        self._pipeline.store.add(contract.STALENESS_DROPPED, source, amount)

    @guarded(contract.PHASES.name, values="phase")
    def set_phase(self, phase: str) -> None:
        """Declare what this rank is doing now (``generate``, ``score``, ``train``, ``sync``, ``wait_data``, ...), in
        place of its current (innermost) phase: the collector sums ``rl.phase{rl.phase.name}`` over ranks, so each
        phase's series counts the ranks in it, and each phase is a span of the step's trace
        (``otel_rl._state.phases``)."""
        self._pipeline.phases.set(self._pipeline.caps.phases.label(phase))

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
                self._pipeline.self_telemetry.reject_call(contract.PHASES.name, error, 1)
                continue
            phases.append((self._pipeline.caps.phases.label(name), value))
        self._pipeline.phases.completed(phases)

    @guarded("rl.trajectory", fallback="")
    def trajectory_context(self) -> str:
        """The current phase's span as a string to send along with a trajectory, for the consuming phase's
        ``links`` (see :meth:`phase`); "" if it cannot be made."""
        return self._pipeline.phases.context()

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
            self._pipeline.store.add(counter, (), amount)

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
            self._pipeline.store.set(gauge, (), value)

    @guarded(contract.POLICY_VERSION.name, values="version")
    def set_policy_version(self, version: int) -> None:
        """Set ``rl.policy.version`` (an integer >= 0) without recording staleness."""
        self._policy_version = as_integer(version, argument="version", minimum=0)
        self._pipeline.store.set(contract.POLICY_VERSION, (), self._policy_version)

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
        self._pipeline.steps.offer(sample, table)

    @guarded(contract.STEP.name, values="step")
    def step(self, step: int) -> None:
        """Declare the current training step (an integer >= 0); the previous step's kept samples are emitted now."""
        number = as_integer(step, argument="step", minimum=0)
        self._pipeline.steps.close(number, self._pipeline.phases.step_span)
        self._pipeline.phases.step(number, policy_version=self._policy_version)
        if self._pipeline.settings.exporter == "console":  # print the step just finished, under its own number
            self._pipeline.worker.wait(self._pipeline.worker.request(), self._pipeline.settings.export_timeout_s)
        self._pipeline.store.set(contract.STEP, (), number)
        self._pipeline.canary.step()

    @guarded("otel_rl.flush", fallback=False)
    def flush(self, timeout_s: float | None = None) -> bool:
        """Export everything recorded so far (not the open step's samples), spans included, waiting at most
        ``timeout_s`` (None: ``shutdown_timeout_s``; 0: not at all); False if it did not finish in time."""
        deadline = time.monotonic() + self._timeout(timeout_s)
        workers = [worker for worker in (self._pipeline.span_worker, self._pipeline.worker) if worker is not None]
        tickets = [(worker, worker.request()) for worker in workers]
        return all(worker.wait(ticket, max(0.0, deadline - time.monotonic())) for worker, ticket in tickets)

    @guarded("otel_rl.shutdown", fallback=False)
    def shutdown(self, timeout_s: float | None = None) -> bool:
        """Emit the open step's samples, export, and stop, within ``timeout_s`` (None: ``shutdown_timeout_s``) even
        if the collector hangs. The run counts as finished cleanly (``rl.run.finished`` 1). Every part is done
        whatever the others do: a sample that cannot be emitted does not stop the final export."""
        return self._shutdown(timeout_s, clean=True)

    # -- internals ----------------------------------------------------------------------------------------------

    def _record(
        self, distribution: contract.Distribution, statistics: Statistics, labels: Callable[[], dict[str, str]]
    ) -> None:
        """Fold a call's statistics into ``distribution`` under the labels ``labels()`` makes, and count what it
        rejected. The labels are made only when a value was kept, so a call whose values were all rejected takes no
        slot of a label cap."""
        if statistics.count:
            self._pipeline.store.record(distribution, attributes(**labels()), statistics)
        self._pipeline.self_telemetry.reject_parts(distribution.histogram.name, statistics)

    def _dataset(self, dataset: object) -> dict[str, str]:
        return {} if dataset is None else {contract.DATASET: self._pipeline.caps.datasets.label(dataset)}

    def _timeout(self, timeout_s: object) -> float:
        """A caller's timeout in seconds: None means ``shutdown_timeout_s``; anything but a number >= 0 is counted
        and replaced by it too, so a bad timeout never stops a flush or the final export."""
        if timeout_s is None:
            return self._pipeline.settings.shutdown_timeout_s
        try:
            value = as_real(timeout_s, argument="timeout_s")
        except BadInput as error:
            self._pipeline.self_telemetry.reject_call("otel_rl.timeout", error, timeout_s)
            return self._pipeline.settings.shutdown_timeout_s
        if math.isnan(value) or value < 0:
            self._pipeline.self_telemetry.reject_call(
                "otel_rl.timeout", BadInput("negative", f'"timeout_s" must be >= 0, got {value!r}'), 1
            )
            return self._pipeline.settings.shutdown_timeout_s
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
        self._closing("rl.sample", lambda: self._pipeline.steps.close(None, self._pipeline.phases.step_span))
        self._closing("otel_rl.phases", self._pipeline.phases.close)
        if clean:
            self._pipeline.store.set(contract.RUN_FINISHED, (), 1)
        finished = True
        if self._pipeline.span_worker is not None:  # first: the metrics then carry the last spans' counts
            span_worker = self._pipeline.span_worker
            finished = bool(self._closing("otel_rl.spans", lambda: span_worker.shutdown(timeout / 2)))
        remaining = deadline - time.monotonic()
        finished = bool(self._closing("otel_rl.export", lambda: self._pipeline.worker.shutdown(remaining))) and finished
        if self._pipeline.tracer_provider is not None:
            provider, remaining = self._pipeline.tracer_provider, deadline - time.monotonic()
            finished = (
                bool(self._closing("otel_rl.tracer", lambda: shutdown_within(provider.shutdown, remaining, "spans")))
                and finished
            )
        if self._pipeline.output is not None and finished:  # else the export thread may still write to it
            self._closing("otel_rl.output", self._pipeline.output.close)
        return finished

    def _closing(self, what: str, part: Callable[[], object]) -> object:
        """Run one part of the shutdown; a failure is counted and the shutdown goes on."""
        try:
            return part()
        except Exception as error:  # noqa: BLE001 - each part of a shutdown is done whatever the others do
            failed(self._pipeline.self_telemetry, what, error, None)
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
        pipeline = telemetry._pipeline  # noqa: SLF001 - Telemetry's own scope object
        phases, names = pipeline.phases, pipeline.caps.phases
        self._depth = phases.enter(names.label(self._phase), links=contexts)

    @guarded(contract.PHASES.name)
    def __exit__(self, *error: object) -> None:
        if self._depth is not None:
            self._telemetry._pipeline.phases.leave(self._depth)  # noqa: SLF001 - Telemetry's own scope object


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
