"""What phase spans cost the training thread (issue 22): a step with four phases, traced against the same step
with tracing off, timed interleaved in one run.

Both arms make the same calls (``step()``, ``with telemetry.phase(...)`` for generate, score, train and a nested
sync, ``record_tokens``); the traced arm exports its spans with the real OTLP gRPC exporter to a port nothing
listens on (exports fail on the span processor's own thread, as with an absent collector), the untraced one has
``trace_phases=False`` (the phase gauges, durations and counts). The difference is the spans' cost per step on the
training thread. Beside it, what counting one phase in the rank's own metrics costs (``rl.phase.calls`` and
``rl.phase.duration``, at every phase's end, traced or not): ending a phase through the phase tracer against ending
its span alone, interleaved.
"""

from __future__ import annotations

import functools
import socket
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import INVALID_SPAN

from bench.timing import interleaved, median, percentile
from otel_rl import Telemetry, TelemetryConfig
from otel_rl._state.phases import DerivedIds, PhaseTracer, _Open
from otel_rl._state.store import MetricStore

PHASES = ("generate", "score", "train")


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _telemetry(traced: bool, port: int) -> Telemetry:
    return Telemetry(
        TelemetryConfig(
            run_id="bench-phases",
            endpoint=f"http://127.0.0.1:{port}",
            trace_phases=traced,
            export_interval_s=30,
            export_timeout_s=0.5,
            shutdown_timeout_s=1.0,
        )
    )


def phase_spans(*, steps: int = 2000) -> dict[str, Any]:
    """Median and p99 of one step's phase calls, traced and not, and their difference per step."""
    port = _closed_port()
    arms = {"traced": _telemetry(True, port), "untraced": _telemetry(False, port)}
    counters = dict.fromkeys(arms, 0)

    def step(name: str) -> None:
        telemetry = arms[name]
        counters[name] += 1
        telemetry.step(counters[name])
        for phase in PHASES:
            with telemetry.phase(phase):
                if phase == "train":
                    with telemetry.phase("sync"):
                        pass
        telemetry.record_tokens(generated=4096, trained=4096, samples=8)

    try:
        times = interleaved({name: functools.partial(step, name) for name in arms}, repeats=steps, warmup=20)
    finally:
        for telemetry in arms.values():
            telemetry.shutdown(1.0)
    summary = {
        name: {"median_ns": median(samples), "p99_ns": percentile(samples, 99)} for name, samples in times.items()
    }
    spans = 2 + len(PHASES) + 1  # root, rank span, the phases and the nested sync
    extra = summary["traced"]["median_ns"] - summary["untraced"]["median_ns"]
    return {
        "steps": steps,
        "spans_per_step": spans,
        "arms": summary,
        "traced_vs_untraced_median": summary["traced"]["median_ns"] / summary["untraced"]["median_ns"],
        "span_cost_per_step_us": extra / 1e3,
        "span_cost_per_span_us": extra / 1e3 / spans,
        "phase_metrics": phase_metrics(repeats=steps),
    }


def phase_metrics(*, repeats: int) -> dict[str, Any]:
    """Median cost of ending one phase with its metrics counted (the phase tracer's end of a phase) against ending
    its span alone, and the difference: what the rank's own phase metrics add per phase."""
    store = MetricStore(Resource.create({}), start_time_ns=0, version="bench")
    tracer = PhaseTracer(run_id="bench-phases", rank=0, store=store, tracer_provider=None, ids=DerivedIds(), clock=int)
    end = functools.partial(tracer._end, _Open("train", INVALID_SPAN, 0, 0), 12_345_678)  # noqa: SLF001 - the cost measured
    times = interleaved({"counted": end, "span_only": INVALID_SPAN.end}, repeats=repeats, warmup=20)
    counted, alone = median(times["counted"]), median(times["span_only"])
    return {"counted_median_ns": counted, "span_only_median_ns": alone, "cost_per_phase_us": (counted - alone) / 1e3}
