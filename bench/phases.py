"""What phase spans cost the training thread (issue 22): a step with four phases, traced against the same step
with tracing off, timed interleaved in one run.

Both arms make the same calls (``step()``, ``with telemetry.phase(...)`` for generate, score, train and a nested
sync, ``record_tokens``); the traced arm exports its spans with the real OTLP gRPC exporter to a port nothing
listens on (exports fail on the span processor's own thread, as with an absent collector), the untraced one has
``trace_phases=False`` (the phase gauges only). The difference is the spans' cost per step on the training thread.
"""

from __future__ import annotations

import functools
import socket
from typing import Any

from bench.timing import interleaved, median, percentile
from otel_rl import Telemetry, TelemetryConfig

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
    }
