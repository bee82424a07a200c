"""NeMo Lens in, RL dashboards out: a NeMo-RL job with Lens on (NeMo-RL's own OpenTelemetry, no otel-rl code in the
trainer) through the real collector into Prometheus and Jaeger, read back with the dashboards' and rules' own queries.

The sender is the plain OpenTelemetry SDK emitting exactly what Lens emits, transcribed from its repository
(``NVIDIA-NeMo/Lens`` at ``LENS_COMMIT``, v0.1.0, the release NeMo-RL pins; the three gauges added in v0.2.0 at
``LENS_HEAD``): ``providers.py::build_providers`` (the resource, scope ``nemo.lens``, a periodic reader with no views,
cumulative temporality, gRPC OTLP), ``instruments/rl.py`` (synchronous gauges, no point attributes) and
``instruments/inference.py``; and the spans NeMo-RL opens with it (``NVIDIA-NeMo/RL`` at ``NEMO_RL_COMMIT``, the branch
of PR #3655: ``nemo_rl/algorithms/grpo.py``, ``nemo_rl/telemetry``): ``rl.grpo.job`` (scope ``nemo.lens.helpers``)
over ``rl.grpo.step`` (``rl.iteration``) over its phase spans, ``rl.vllm.generate`` inside ``collect_rollouts``; and
a vLLM worker process that sends ``gen_ai.client.token.usage``. Lens exports every ``OTEL_METRIC_EXPORT_INTERVAL``
(10 s by default; 1 s here, through the same reader).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import otel_rl_contract as contract
import pytest
import yaml
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_rl_ops.query import Jaeger, Prometheus
from otel_rl_ops.report.dashboard import substitute

from tests.dashboards.conftest import LENS_ONLY, ROOT, dashboard_targets
from tests.pipeline.harness import eventually

PHASE_CALLS = contract.series(contract.PHASE_CALLS)
PHASE_DURATION_SECONDS = contract.series(contract.PHASE_DURATION)
RANKS_EXPECTED = contract.series(contract.RANKS_EXPECTED)
RANKS_UP = contract.series(contract.RANKS_UP)
REPORTED = contract.series(contract.REPORTED)
REWARD = contract.series(contract.REWARDS.histogram)
RUN_FINISHED = contract.series(contract.RUN_FINISHED)
RUN_START_TIME_SECONDS = contract.series(contract.RUN_START)
STEP = contract.series(contract.STEP)

LENS_COMMIT = "c464001d9756711159fec11111467838eb8439ff"
LENS_HEAD = "b85578fc2b736a1804705e537001b5f45e9c715d"
NEMO_RL_COMMIT = "ce32d4208673843b716b3c87803175c6067a103e"
STEPS = 3

GAUGES = {
    # instruments/rl.py: name -> unit, description, and the canonical key the collector maps it to.
    "rl.reward.mean": ("", "Mean reward across rollout batch.", "reward/mean"),
    "rl.kl_divergence": ("", "KL divergence between policy and reference.", "kl/mean"),
    "rl.policy_loss": ("", "Policy gradient loss.", "loss/policy"),
    "rl.value_loss": ("", "Value function loss.", "loss/value"),
    "rl.entropy": ("", "Policy entropy.", "entropy/mean"),
    "rl.response_length.mean": ("", "Mean generated response length (tokens).", "response_length/mean"),
    # v0.2.0 (LENS_HEAD)
    "rl.grad_norm": ("", "Gradient norm of the policy update.", "grad_norm"),
    "rl.learning_rate": ("", "Current optimizer learning rate.", "learning_rate"),
    "rl.throughput.tokens_per_sec": (
        "{token}/s",
        "Training throughput in tokens per second.",
        "throughput/tokens_per_sec",
    ),
}
PHASES = {
    # NeMo-RL's GRPO phase spans -> the otel-rl phase transform/lens names them.
    "rl.grpo.data_processing": "data",
    "rl.grpo.collect_rollouts": "generate",
    "rl.grpo.compute_rewards": "score",
    "rl.grpo.compute_logprobs": "logprobs",
    "rl.grpo.compute_advantages": "advantage",
    "rl.grpo.policy_update": "train",
}
BUCKETS = {"rl.grpo.data_processing": "overhead", "rl.grpo.compute_rewards": "productive"}
"""rl.bucket of some phase spans, as NeMo-RL sets it (the rest as well in NeMo-RL; kept short here)."""


def _values(step: int) -> dict[str, float]:
    """What the driver's tee sets at ``step``: fractions that float32 could not hold, so the store must keep float64."""
    return {name: (index + 1) * 0.1 + step / 7 for index, name in enumerate(GAUGES)}


def _resource(run_id: str, **extra: Any) -> Resource:
    """build_providers: the base attributes, the caller's, then the SDK's (Resource.create)."""
    return Resource.create(
        {
            "service.name": "nemo-rl",
            "service.version": "0.1.0",
            "dl.rank": 0,
            "nemo.run.id": run_id,
            "service.instance.id": f"{run_id}-rank0",
            "host.name": socket.gethostname(),
            "process.pid": os.getpid(),
            **extra,
        }
    )


@dataclass
class LensRun:
    run_id: str
    values: dict[str, float]
    spans: list[ReadableSpan]
    steps_done_at: float
    heartbeats_after_steps: int
    job_start_s: float


@pytest.fixture(scope="module")
def lens_run(shared_stack: Any) -> Iterator[LensRun]:
    """A GRPO driver and a vLLM worker, three steps, then the driver alive without spans until its heartbeat shows,
    then the job span ends and both shut down as Lens's handle.shutdown() does."""
    run_id = f"lens-{uuid.uuid4().hex[:8]}"
    endpoint = shared_stack.otlp_grpc_endpoint
    prometheus = Prometheus(shared_stack.prometheus_url)
    driver_resource = _resource(
        run_id,
        **{
            "dl.world_size": 1,
            "rl.algorithm": "grpo",
            "rl.model": "Qwen/Qwen2.5-1.5B",
            "nemo.precision": "bfloat16",
            "dl.tensor_parallel.size": 1,
        },
    )
    worker_resource = _resource(run_id, **{"dl.world_size": 2, "rl.worker_group": "vllm_policy"})
    readers = [
        PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=endpoint, insecure=True), export_interval_millis=1000)
        for _ in range(2)
    ]
    driver_meters = MeterProvider(resource=driver_resource, metric_readers=[readers[0]])
    worker_meters = MeterProvider(resource=worker_resource, metric_readers=[readers[1]])
    recorded = InMemorySpanExporter()
    tracers = TracerProvider(resource=driver_resource)
    tracers.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True)))
    tracers.add_span_processor(SimpleSpanProcessor(recorded))
    meter = driver_meters.get_meter("nemo.lens")
    gauges = {name: meter.create_gauge(name, unit=unit, description=text) for name, (unit, text, _) in GAUGES.items()}
    tokens = worker_meters.get_meter("nemo.lens").create_histogram(
        "gen_ai.client.token.usage", unit="{token}", description="Number of input and output tokens used."
    )
    lens = tracers.get_tracer("nemo.lens")
    helpers = tracers.get_tracer("nemo.lens.helpers")
    values: dict[str, float] = {}
    try:
        with helpers.start_as_current_span("rl.grpo.job"):
            for step in range(1, STEPS + 1):
                with lens.start_as_current_span("rl.grpo.step", attributes={"rl.iteration": step, "rl.epoch": 1}):
                    for name in PHASES:
                        attributes: dict[str, Any] = {"rl.bucket": BUCKETS[name]} if name in BUCKETS else {}
                        if name.endswith("policy_update"):
                            attributes["rl.iteration"] = step
                        with lens.start_as_current_span(name, attributes=attributes):
                            if name.endswith("collect_rollouts"):
                                with helpers.start_as_current_span(
                                    "rl.vllm.generate", attributes={"rl.bucket": "productive"}
                                ):
                                    for kind, count in (("input", 512 * step), ("output", 2048 * step)):
                                        tokens.record(
                                            count,
                                            {
                                                "gen_ai.operation.name": "text_completion",
                                                "gen_ai.provider.name": "vllm",
                                                "gen_ai.request.model": "Qwen/Qwen2.5-1.5B",
                                                "gen_ai.token.type": kind,
                                            },
                                        )
                                    time.sleep(0.02 * step)
                            time.sleep(0.005 * step)
                    values = _values(step)
                    for name, value in values.items():
                        gauges[name].set(value)
            tracers.force_flush()
            eventually(
                lambda: prometheus.value(f'max({STEP.name}{{rl_run_id="{run_id}"}})') == STEPS,
                what="the Lens run's last step in Prometheus",
            )
            steps_done_at = time.time()
            window = f'{{rl_run_id="{run_id}"}}'

            def heartbeats() -> int:
                elapsed = max(1, int(time.time() - steps_done_at))
                count = prometheus.value(f"count_over_time({STEP.name}{window}[{elapsed}s])") or 0
                return int(count) if count >= 3 else 0

            heartbeat_count = eventually(
                heartbeats, what=f"{STEP.name} written on, with no span, while the driver lives"
            )
        tracers.force_flush()
        spans = list(recorded.get_finished_spans())
        (job,) = [span for span in spans if span.name == "rl.grpo.job"]
        yield LensRun(run_id, values, spans, steps_done_at, heartbeat_count, (job.start_time or 0) / 1e9)
    finally:
        tracers.shutdown()
        driver_meters.shutdown()
        worker_meters.shutdown()


def _prometheus(shared_stack: Any) -> Prometheus:
    return Prometheus(shared_stack.prometheus_url)


def test_lens_gauges_are_the_runs_reported_means_on_its_panels(shared_stack: Any, lens_run: LensRun) -> None:
    """Each Lens gauge is rl_reported under its canonical key, its last value exact (float64); every dashboard query
    of rl_reported returns it for the run, the reward panel's 'mean (reported)' the batch's mean reward; and no
    distribution is invented: the run has no rl_reward histogram, and Lens's token-usage histogram (not in the
    contract) stays out."""
    prometheus = _prometheus(shared_stack)
    run = f'rl_run_id="{lens_run.run_id}"'
    reported = prometheus.by_label(f"{REPORTED.name}{{{run}}}", "rl_metric_key")
    assert reported == {GAUGES[name][2]: value for name, value in lens_run.values.items()}
    targets = [
        (panel["title"], target) for _, panel, target in dashboard_targets() if LENS_ONLY.search(target.get("expr", ""))
    ]
    assert {title for title, _ in targets} >= {
        "Reward (total): mean and percentiles",
        "Response length: mean and percentiles",
        "Entropy per token: mean and percentiles",
        "Recorded metrics (mean by key)",
    }
    for title, target in targets:
        expr = substitute(target["expr"], run_id=lens_run.run_id, rate_interval="1m", interval="5s")
        assert prometheus.query(expr), (title, expr)
    (reward,) = [t for title, t in targets if title.startswith("Reward (total)")]
    expr = substitute(reward["expr"], run_id=lens_run.run_id, rate_interval="1m", interval="5s")
    assert prometheus.value(expr) == lens_run.values["rl.reward.mean"]
    assert prometheus.query(f"{REWARD.name}{{{run}}}") == []
    assert prometheus.query(f'{{{run},__name__=~"gen_ai.*"}}') == []


def test_lens_spans_are_the_runs_phases(shared_stack: Any, lens_run: LensRun) -> None:
    """Each NeMo-RL phase span counts once per step in rl_phase_calls_total under its otel-rl phase, its durations
    summed exactly as the spans the SDK ended; the step and job spans and rl.vllm.generate (nested in
    collect_rollouts) are no phase; the time-split panel's own query shows every phase (divided among the processes
    that run the step loop: the driver)."""
    prometheus = _prometheus(shared_stack)
    run = f'rl_run_id="{lens_run.run_id}"'
    expected = {
        phase: sum((s.end_time or 0) - (s.start_time or 0) for s in lens_run.spans if s.name == name) / 1e9
        for name, phase in PHASES.items()
    }

    def phases() -> dict[str, float] | None:
        calls = prometheus.by_label(f"sum by (rl_phase_name) ({PHASE_CALLS.name}{{{run}}})", "rl_phase_name")
        return calls if calls == dict.fromkeys(PHASES.values(), float(STEPS)) else None

    eventually(phases, what="every Lens phase counted once per step")
    sums = prometheus.by_label(f"sum by (rl_phase_name) ({PHASE_DURATION_SECONDS.sum}{{{run}}})", "rl_phase_name")
    assert sums == pytest.approx(expected, rel=1e-9)
    (split,) = [t for _, panel, t in dashboard_targets() if panel["title"] == "Time split by phase"]
    expr = substitute(split["expr"], run_id=lens_run.run_id, rate_interval="10m", interval="5s")
    shares = prometheus.by_label(expr, "rl_phase_name")
    assert set(shares) == set(PHASES.values())


def test_lens_run_has_the_lifecycle_gauges_its_alerts_read(shared_stack: Any, lens_run: LensRun) -> None:
    """From Lens's spans and heartbeat: rl_step the last rl.iteration, written on while the driver lives without a
    span (RLTelemetryAbsent's presence), rl:step_unchanged_seconds (RLTrainerStalled's input) computed for the run,
    both processes counted in rl_ranks_up and the driver (its spans carry the step) in rl_ranks_expected, the start
    the job span's, and rl_run_finished 1 once the job span ended (RLTelemetryAbsent and RLRunEndedUncleanly silent
    after a clean end)."""
    prometheus = _prometheus(shared_stack)
    run = f'rl_run_id="{lens_run.run_id}"'
    assert lens_run.heartbeats_after_steps >= 3
    rules = yaml.safe_load((ROOT / "prometheus" / "rules" / "otel_rl.yml").read_text(encoding="utf-8"))
    (unchanged,) = [
        rule["expr"]
        for group in rules["groups"]
        for rule in group["rules"]
        if rule.get("record") == contract.rules.STEP_UNCHANGED.name
    ]

    def stalled() -> list[float]:
        return [
            float(r["value"][1]) for r in prometheus.query(unchanged) if r["metric"]["rl_run_id"] == lens_run.run_id
        ]

    (seconds,) = eventually(stalled, what=f"{contract.rules.STEP_UNCHANGED.name} of the Lens run (15 s subquery steps)")
    assert 0 <= seconds <= time.time() - lens_run.steps_done_at + 30
    assert prometheus.value(f"max_over_time({RANKS_UP.name}{{{run}}}[10m])") == 2
    assert prometheus.value(f"max_over_time({RANKS_EXPECTED.name}{{{run}}}[10m])") == 1
    eventually(
        lambda: prometheus.value(f"last_over_time({RUN_FINISHED.name}{{{run}}}[10m])") == 1,
        what=f"{RUN_FINISHED.name} 1 after the job span ended",
    )
    start = prometheus.value(f"min_over_time({RUN_START_TIME_SECONDS.name}{{{run}}}[10m])")
    assert start == pytest.approx(lens_run.job_start_s, abs=1e-6)


def test_lens_traces_are_in_the_trace_store_under_the_run(shared_stack: Any, lens_run: LensRun) -> None:
    """Jaeger finds the run's trace by rl.run.id (mapped from nemo.run.id), with every step and phase span, the phase
    spans named by rl.phase.name, Lens's own attributes kept."""
    jaeger = Jaeger(shared_stack.jaeger_url)
    now = time.time()

    def found() -> list[dict[str, Any]] | None:
        traces = jaeger.traces(
            "nemo-rl",
            operation="rl.grpo.step",
            tags={"rl.run.id": lens_run.run_id},
            start=now - 600,
            end=now + 60,
            limit=10,
        )
        names = [span["operationName"] for trace in traces for span in trace["spans"]]
        return traces if names.count("rl.grpo.step") == STEPS and "rl.grpo.job" in names else None

    (trace,) = eventually(found, what="the Lens run's trace in Jaeger")
    for span in trace["spans"]:
        tags = {tag["key"]: tag["value"] for tag in span["tags"]}
        assert tags.get("rl.phase.name") == PHASES.get(span["operationName"]), span["operationName"]
    steps = sorted(
        tag["value"]
        for span in trace["spans"]
        if span["operationName"] == "rl.grpo.step"
        for tag in span["tags"]
        if tag["key"] == "rl.iteration"
    )
    assert steps == list(range(1, STEPS + 1))
