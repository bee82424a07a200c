"""A rank process driven over a pipe by the pipeline tests: one command (a dict) in, one reply line out.

Runs the real otel_rl package with the real OTLP exporter, so what reaches the collector is exactly what a trainer
sends. Commands: ``rewards`` and ``staleness`` (each with an optional ``dataset``; staleness also ``phase`` and the
versions' ``dtype``), ``staleness_drops``, ``rollouts`` (``record_rollouts``: JSON lists become tensors, float64
where the values are floats), ``set_phase``, ``metric``, ``sample``, ``step``, ``flush``, ``shutdown``, ``stats``
(the rank's own counters and RSS) and ``synthetic`` (generate and record one step's data in-process, reply with
the reference aggregates); for the time a step takes, ``phase_enter`` / ``phase_leave`` (``Telemetry.phase`` as a
context manager held across commands, ``links`` optional), ``trajectory_context`` (replies with it), ``tokens``
(``record_tokens``) and ``async_state`` (``set_async_state``). Setting ``clock_offset_s`` (not a TelemetryConfig
field) shifts the rank's clock.

The harness starts each rank as a fork of a forkserver that imported this module (torch, numba, the OpenTelemetry
SDK and otel_rl) once, so a rank starts in a fraction of a second instead of the ~6 s of CPU those imports take; the
rank then takes the environment and standard error the test gives it.
"""

from __future__ import annotations

import json
import os
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import torch

import otel_rl
from tests.reference import bucket_counts


def serve(settings: dict[str, Any], environment: dict[str, str], stderr: str | None, connection: Connection) -> None:
    """Run one rank: ``environment`` replaces the process's (the forkserver's is the one it was started with),
    ``stderr`` (a file's path) takes its log output, and commands come over ``connection`` until ``shutdown``."""
    os.environ.clear()
    os.environ.update(environment)
    if stderr is not None:
        log = os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(log, 2)
        os.close(log)

    offset_ns = int(float(settings.pop("clock_offset_s", 0.0)) * 1e9)
    clock = (lambda: time.time_ns() + offset_ns) if offset_ns else time.time_ns
    config = otel_rl.TelemetryConfig(**settings)
    telemetry = otel_rl.Telemetry(config, clock=clock)
    connection.send("ready")
    phases: list[Any] = []
    while True:
        try:
            command = connection.recv()
        except EOFError:
            return
        kind = command.pop("command")
        if kind == "rewards":
            mask = command.get("mask")
            telemetry.record_rewards(
                torch.tensor(command["values"], dtype=torch.float64),
                fn=command.get("fn", "total"),
                mask=None if mask is None else torch.tensor(mask),
                dataset=command.get("dataset"),
            )
        elif kind == "staleness":
            mask = command.get("mask")
            dtype = command.get("dtype")
            telemetry.record_staleness(
                torch.tensor(command["versions"], dtype=None if dtype is None else getattr(torch, dtype)),
                command["current"],
                mask=None if mask is None else torch.tensor(mask),
                dataset=command.get("dataset"),
                phase=command.get("phase"),
            )
        elif kind == "staleness_drops":
            telemetry.record_staleness_drops(
                command.get("count"),
                response_lengths=command.get("response_lengths"),
                staleness=command.get("staleness"),
                dataset=command.get("dataset"),
            )
        elif kind == "rollouts":
            fields = command["fields"]
            breakdown = fields.pop("reward_breakdown", None)
            telemetry.record_rollouts(
                **{name: _rollout_tensor(name, values) for name, values in fields.items()},
                reward_breakdown=None
                if breakdown is None
                else {fn: torch.tensor(values, dtype=torch.float64) for fn, values in breakdown.items()},
            )
        elif kind == "set_phase":
            telemetry.set_phase(command["phase"])
        elif kind == "phase_enter":
            phases.append(telemetry.phase(command["phase"], links=command.get("links", ())))
            phases[-1].__enter__()
        elif kind == "phase_leave":
            phases.pop().__exit__(None, None, None)
        elif kind == "trajectory_context":
            connection.send(json.dumps({"context": telemetry.trajectory_context()}))
            continue
        elif kind == "tokens":
            telemetry.record_tokens(**command["counts"])
        elif kind == "async_state":
            telemetry.set_async_state(**command["state"])
        elif kind == "metric":
            telemetry.record_metric(command["key"], torch.tensor(command["values"], dtype=torch.float64))
        elif kind == "sample":
            telemetry.record_sample(otel_rl.EpisodeSample(**command["sample"]))
        elif kind == "step":
            telemetry.step(command["step"])
        elif kind == "flush":
            connection.send(json.dumps({"flushed": telemetry.flush(command.get("timeout_s", 30))}))
            continue
        elif kind == "stats":
            connection.send(json.dumps(_stats(telemetry)))
            continue
        elif kind == "synthetic":
            connection.send(json.dumps(_synthetic(telemetry, reward_bounds=config.resolved.reward_bounds, **command)))
            continue
        elif kind == "shutdown":
            connection.send(json.dumps({"finished": telemetry.shutdown(command.get("timeout_s", 30))}))
            return
        connection.send("ok")


ROLLOUT_DTYPES = {
    "mask": torch.bool,
    "advantages": torch.float64,
    "response_lengths": torch.int64,
    "entropy": torch.float64,
    "logprobs": torch.float64,
    "inference_logprobs": torch.float64,
    "rewards": torch.float64,
    "group_ids": torch.int64,
    "versions_spanned": torch.int64,
}
"""The dtype of each ``record_rollouts`` field the ``rollouts`` command builds: float64 for float values, so that
the test's float64 reference is exactly what the rank recorded."""


def _rollout_tensor(name: str, values: Any) -> Any:
    """``values`` (a JSON list, or None) as the tensor of field ``name``."""
    return None if values is None else torch.tensor(values, dtype=ROLLOUT_DTYPES[name])


def _stats(telemetry: otel_rl.Telemetry) -> dict[str, float]:
    import otel_rl_contract as contract

    from otel_rl._state.store import attributes

    store = telemetry._pipeline.store
    stats: dict[str, float] = {
        "samples_exported": store.counter_value(contract.SAMPLES_EXPORTED, ()),
        "rss_kib": float(_rss_kib()),
    }
    for signal in ("metrics", "logs"):
        stats[f"export_failures_{signal}"] = store.counter_value(
            contract.EXPORT_FAILURES, attributes(**{contract.SELF_SIGNAL: signal})
        )
    for reason in ("queue_full", "shutdown", "invalid", "redaction", "oversized", "refused"):
        stats[f"samples_dropped_{reason}"] = store.counter_value(
            contract.SAMPLES_DROPPED, attributes(**{contract.SELF_REASON: reason})
        )
    stats["spans_exported"] = store.counter_value(contract.SPANS_EXPORTED, ())
    for reason in ("queue_full", "shutdown", "refused", "unencodable"):
        stats[f"spans_dropped_{reason}"] = store.counter_value(
            contract.SPANS_DROPPED, attributes(**{contract.SELF_REASON: reason})
        )
    return stats


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _synthetic(
    telemetry: otel_rl.Telemetry,
    *,
    reward_bounds: tuple[float, ...],
    seed: int,
    rollouts: int,
    tokens: int,
    fn: str,
    samples: int,
    text_bytes: int = 0,
) -> dict[str, Any]:
    """One step of a realistic job: ``rollouts`` rewards (rounded to 1e-3, so sums are exact in float64),
    ``rollouts x tokens`` staleness values, ``samples`` episode samples with ~1 KiB responses (or, with
    ``text_bytes``, prompt, response and target of that many bytes each). ``reward_bounds`` are the rank's
    configured ones, for the reference bucket counts."""
    rng = np.random.default_rng(seed)
    rewards = rng.normal(0.2, 1.0, rollouts).round(3)
    telemetry.record_rewards(torch.from_numpy(rewards), fn=fn)
    reply: dict[str, Any] = {
        "reward_count": int(rewards.size),
        "reward_sum": float(rewards.sum()),
        "reward_buckets": bucket_counts(rewards, reward_bounds),
        "staleness_count": 0,
    }
    if tokens:
        current = 1000 + seed % 1000
        versions = current - rng.integers(0, 40, (rollouts, tokens))
        telemetry.record_staleness(torch.from_numpy(versions), current)
        reply["staleness_count"] = int(versions.size)
    for index in range(samples):
        telemetry.record_sample(
            otel_rl.EpisodeSample(
                reward=float(rewards[index % rollouts]),
                episode_id=f"{seed}-{index}",
                prompt="q" * (text_bytes or 200),
                response="r" * (text_bytes or 1000),
                target=("t" * text_bytes) if text_bytes else None,
            )
        )
    return reply
