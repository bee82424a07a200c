"""Item 6b: the per-run and per-sample costs docs/scale.md plans capacity from.

- Series per run: 4 real ``Telemetry`` ranks record everything a GRPO step has (3 reward functions, 2 datasets,
  staleness in flight and in queue, every ``record_rollouts`` field, phases, samples) for a few steps; Prometheus
  is asked how many series the run has, and how many of them carry a rank (not merged).
- The log store: sender processes emit sample records (1 KiB prompt and 2 KiB response of random words from a
  5,000-word vocabulary, so that they compress like text, in the real record form) as fast as the pipeline takes
  them; the VictoriaLogs process's CPU seconds and data-folder growth per record give
  samples per second per core and bytes per sample on disk.
"""

from __future__ import annotations

import multiprocessing
import random
import string
import time
import uuid
from pathlib import Path
from typing import Any

import torch
from otel_rl_ops import promql
from otel_rl_ops.query import Prometheus, VictoriaLogs

from bench.collector_scale import _proc
from otel_rl import EpisodeSample, Telemetry, TelemetryConfig

_RANKS = 4
_PROMPT_BYTES = 1024
_RESPONSE_BYTES = 2048
_VOCABULARY = ["".join(random.Random(i).choices(string.ascii_lowercase, k=2 + i % 9)) for i in range(5_000)]


def _text(rng: random.Random, size: int) -> str:
    """``size`` characters of random words."""
    words: list[str] = []
    length = 0
    while length < size:
        words.append(rng.choice(_VOCABULARY))
        length += len(words[-1]) + 1
    return " ".join(words)[:size]


def _config(endpoint: str, run_id: str, rank: int, **overrides: Any) -> TelemetryConfig:
    return TelemetryConfig(
        endpoint=endpoint, run_id=run_id, rank=rank, world_size=_RANKS, export_interval_s=0.5, **overrides
    )


def _record_step(telemetry: Telemetry, step: int, generator: torch.Generator) -> None:
    """One GRPO step's worth of every signal (64 rollouts x 256 tokens, groups of 8)."""
    telemetry.step(step)
    for phase in ("generate", "score", "train", "sync"):
        telemetry.set_phase(phase)
    rewards = (torch.rand(64, generator=generator) < 0.5).float()
    mask = torch.rand(64, 256, generator=generator) < 0.8
    versions = torch.full((64, 256), step) - torch.randint(0, 4, (64, 256), generator=generator)
    for dataset in ("math", "code"):
        for fn in ("total", "correctness", "format"):
            telemetry.record_rewards(rewards, fn=fn, dataset=dataset)
        telemetry.record_staleness(versions, step, mask=mask, dataset=dataset, phase="in_flight")
        telemetry.record_staleness(versions, step, mask=mask, dataset=dataset, phase="in_queue")
    inference = -torch.rand(64, 256, generator=generator) * 4
    telemetry.record_rollouts(
        mask=mask,
        advantages=torch.randn(64, generator=generator),
        response_lengths=mask.sum(dim=1),
        entropy=torch.rand(64, 256, generator=generator),
        logprobs=inference + torch.randn(64, 256, generator=generator) * 0.05,
        inference_logprobs=inference,
        rewards=rewards,
        group_ids=torch.arange(64) // 8,
    )
    telemetry.set_policy_version(step)
    for index in range(8):
        telemetry.record_sample(EpisodeSample(reward=float(rewards[index]), prompt="q", response="a", dataset="math"))


def series_per_run(stack: Any, *, steps: int = 5) -> dict[str, Any]:
    """Series one run of ``_RANKS`` ranks leaves in Prometheus, merged and per rank."""
    run_id = f"capacity-{uuid.uuid4().hex[:8]}"
    ranks = [Telemetry(_config(stack.otlp_grpc_endpoint, run_id, rank)) for rank in range(_RANKS)]
    generator = torch.Generator().manual_seed(0)
    for step in range(steps):
        for telemetry in ranks:
            _record_step(telemetry, step, generator)
    for telemetry in ranks:
        telemetry.shutdown()
    prometheus = Prometheus(stack.prometheus_url, timeout_s=10)
    selector = promql.selector(rl_run_id=run_id)
    deadline = time.time() + 60
    total = 0.0
    while time.time() < deadline:
        time.sleep(2)
        now = prometheus.value(f"count(last_over_time({selector}[5m]))") or 0.0
        if now and now == total:
            break
        total = now
    per_rank = f"{{{promql.matchers(rl_run_id=run_id)},{promql.match('rl_rank', '', '!=')}}}"
    per_rank_series = prometheus.value(f"count(last_over_time({per_rank}[5m]))") or 0.0
    names = prometheus.query(f"count by (__name__) (last_over_time({selector}[5m]))")
    return {
        "ranks": _RANKS,
        "series": int(total),
        "series_with_rank_label": int(per_rank_series),
        "metric_names": len(names),
        "note": "3 reward fns x 2 datasets, staleness in flight and in queue per dataset, every record_rollouts "
        "field, 4 phases, samples; native histograms (one series per histogram stream)",
    }


def _emit_samples(endpoint: str, run_id: str, rank: int, steps: int, per_step: int) -> None:
    telemetry = Telemetry(_config(endpoint, run_id, rank, top_k=per_step, bottom_k=0, sample_queue_size=65_536))
    rng = random.Random(rank)
    for step in range(steps):
        telemetry.step(step)
        for index in range(per_step):
            telemetry.record_sample(
                EpisodeSample(
                    reward=float(index),
                    prompt=_text(rng, _PROMPT_BYTES),
                    response=_text(rng, _RESPONSE_BYTES),
                    episode_id=f"{rank}-{step}-{index}",
                )
            )
    telemetry.shutdown(60)


def _folder_bytes(path: Path) -> int:
    return sum(item.stat().st_size for item in path.rglob("*") if item.is_file())


def log_store(stack: Any, *, senders: int = 2, steps: int = 50, per_step: int = 200) -> dict[str, Any]:
    """Sample records per CPU-second of one VictoriaLogs node, and bytes per record on its disk."""
    run_id = f"logstore-{uuid.uuid4().hex[:8]}"
    expected = senders * steps * per_step
    pid = stack.pid("victorialogs")
    assert pid is not None, "VictoriaLogs is not running"
    data = stack.state_dir / "data" / "victorialogs"
    cpu_start, _ = _proc(pid)
    disk_start = _folder_bytes(data)
    started = time.time()
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=_emit_samples, args=(stack.otlp_grpc_endpoint, run_id, rank, steps, per_step))
        for rank in range(senders)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(300)
    logs = VictoriaLogs(stack.victorialogs_url)
    count = 0
    deadline = time.time() + 60
    while time.time() < deadline:
        found = logs.query(f"{promql.logsql_stream('rl.run.id', run_id)} | stats count() as n")
        count = int(found[0]["n"]) if found else 0
        if count >= expected:
            break
        time.sleep(1)
    elapsed = time.time() - started
    time.sleep(12)  # the node flushes in-memory parts to disk within ~10 s (docs/scale.md)
    cpu_end, rss = _proc(pid)
    cpu = cpu_end - cpu_start
    return {
        "records_expected": expected,
        "records_stored": count,
        "record_text_bytes": _PROMPT_BYTES + _RESPONSE_BYTES,
        "wall_s": round(elapsed, 1),
        "records_per_s_achieved": round(count / elapsed, 1),
        "victorialogs_cpu_s": round(cpu, 2),
        "records_per_cpu_s": round(count / max(cpu, 1e-9)),
        "disk_bytes_per_record": round((_folder_bytes(data) - disk_start) / max(count, 1)),
        "victorialogs_rss_mib": round(rss / 1024, 1),
        "note": "the senders and the collector share the machine's cores with VictoriaLogs, so achieved records/s "
        "is a floor; records per VictoriaLogs CPU-second is the node's cost",
    }


def capacity(*, steps: int = 50, per_step: int = 200) -> dict[str, Any]:
    """Both measurements against one private stack (``steps`` x ``per_step`` samples per sender)."""
    import tempfile

    from otel_rl_ops.stack import install
    from otel_rl_ops.stack.services import Stack, StackConfig, StackPorts

    with tempfile.TemporaryDirectory(prefix="otel-rl-capacity-") as state:
        config = StackConfig(ports=StackPorts.free(), state_dir=Path(state))
        with Stack(config, binaries=install.install_all()) as stack:
            return {
                "series_per_run": series_per_run(stack),
                "log_store": log_store(stack, steps=steps, per_step=per_step),
            }
