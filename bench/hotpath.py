"""The recording hot path, cold and warm, against the read-bandwidth floor; before and after in one run.

Each workload is one record call (or the step's two) on the bench step's tensors (``bench.workload``). Its floor is
what it must read, ``bytes``, at the read bandwidth measured right before the round: ``x.sum()`` of a 256 MB float32
tensor, far larger than any cache. Per round every workload is timed

* **cold**: after a 64 MB read has evicted its inputs from the caches, as in a training step where the tensors were
  just produced elsewhere;
* **warm**: right after the cold call, back to back, inputs in the cache.

Each round's ratio is the call's time over its own round's floor; the report gives the median and the spread
(interquartile range) over rounds, and ``x.sum()`` of the 1M-value tensor as a reference column only (that ratio
swung 17x between runs on the same machine: it measures the cache more than the call).

Before and after in one run (``--baseline PATH``): the same workloads run in two worker processes, one importing
``otel_rl`` from this checkout and one from ``PATH`` (another checkout, say ``git worktree add /tmp/base <commit>``),
both with this checkout's benchmark code; rounds alternate between them (which goes first alternates too), so load
from elsewhere hits both alike. Only ratios within one run are compared.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch

from bench.timing import interleaved, median, percentile

ROOT = Path(__file__).resolve().parent.parent
"""This checkout: its ``otel_rl`` is the one measured as ``current``."""
BANDWIDTH_BYTES = 256 << 20
EVICT_BYTES = 64 << 20
TARGETS = {
    "rewards_1d": {"cold": 8.0, "warm": 6.0},
    "step_2d": {"cold": 4.0, "warm": 2.0},
    "rollouts_2d": {"cold": 20.0, "warm": 20.0},
}
"""Acceptance (issue 40): each workload's median ratio to the bandwidth floor, cold and warm, at most this."""


@dataclass(frozen=True)
class Workload:
    """One timed call and the bytes it must read."""

    call: Callable[[], object]
    bytes: int


def workloads(rollouts: int, tokens: int) -> tuple[dict[str, Workload], Callable[[], None]]:
    """The workloads on a step of ``rollouts`` x ``tokens`` (exponential buckets unless named ``_explicit``), and
    a function that shuts their Telemetry instances down."""
    from bench.workload import CURRENT_VERSION, flat_values, make_rollouts, make_step
    from otel_rl import Telemetry, TelemetryConfig

    def telemetry(histogram: str) -> Telemetry:
        config = TelemetryConfig(run_id="bench", exporter="none", shutdown_timeout_s=1.0, histogram=histogram)  # type: ignore[arg-type]
        return Telemetry(config)

    exponential, explicit = telemetry("exponential"), telemetry("explicit")
    step = make_step(rollouts, tokens)
    flat, flat_mask = flat_values(step.tokens)
    fields: dict[str, Any] = dict(make_rollouts(step))
    rewards = fields["rewards"]
    breakdown = {"correctness": rewards, "format": 0.5 * rewards, "length_penalty": -0.25 * rewards}
    versions_1d, mask_1d = step.versions.reshape(-1), step.mask.reshape(-1)
    # the step reads every version and mask element, and each row's reward up to its first selected token (one)
    step_bytes = step.versions.nbytes + step.mask.nbytes + rollouts * step.rewards.element_size()
    rollout_bytes = step.mask.nbytes + sum(int(t.nbytes) for t in fields.values())

    def record_step(into: Telemetry) -> None:
        into.record_rewards(step.rewards, mask=step.mask)
        into.record_staleness(step.versions, CURRENT_VERSION, mask=step.mask)

    found = {
        "rewards_1d": Workload(
            lambda: exponential.record_rewards(flat, mask=flat_mask), flat.nbytes + flat_mask.nbytes
        ),
        "step_2d": Workload(lambda: record_step(exponential), step_bytes),
        "rollouts_2d": Workload(lambda: exponential.record_rollouts(mask=step.mask, **fields), rollout_bytes),
        "staleness_2d": Workload(
            lambda: exponential.record_staleness(step.versions, CURRENT_VERSION, mask=step.mask),
            step.versions.nbytes + step.mask.nbytes,
        ),
        "staleness_1d": Workload(
            lambda: exponential.record_staleness(versions_1d, CURRENT_VERSION, mask=mask_1d),
            versions_1d.nbytes + mask_1d.nbytes,
        ),
        "metric_1d": Workload(lambda: exponential.record_metric("loss", flat), flat.nbytes),
        "rewards_1d_explicit": Workload(
            lambda: explicit.record_rewards(flat, mask=flat_mask), flat.nbytes + flat_mask.nbytes
        ),
        "step_2d_explicit": Workload(lambda: record_step(explicit), step_bytes),
        "rollouts_2d_breakdown": Workload(
            lambda: exponential.record_rollouts(mask=step.mask, reward_breakdown=breakdown, **fields),
            rollout_bytes + 3 * rewards.nbytes,
        ),
    }

    def close() -> None:
        exponential.shutdown(1.0)
        explicit.shutdown(1.0)

    return found, close


class Round:
    """One round's samples, timed in this process: the floor first, then every workload cold and warm."""

    def __init__(self, rollouts: int, tokens: int) -> None:
        self.workloads, self.close = workloads(rollouts, tokens)
        self._bandwidth = torch.ones(BANDWIDTH_BYTES // 4)
        self._evict = torch.ones(EVICT_BYTES // 4)
        self._reference = torch.randn(rollouts * tokens)
        for workload in self.workloads.values():  # compile, allocate, fill the pools
            workload.call()
            workload.call()

    def run(self) -> dict[str, Any]:
        """``bandwidth_bytes_per_ns``, ``sum_ns`` (``x.sum()`` of the 1M-value tensor, warm) and per workload its
        ``cold_ns`` and two ``warm_ns``."""
        reads = [_timed(self._bandwidth.sum) for _ in range(3)]
        sums = [_timed(self._reference.sum) for _ in range(3)]
        samples: dict[str, Any] = {"bandwidth_bytes_per_ns": BANDWIDTH_BYTES / median(reads), "sum_ns": median(sums)}
        for name, workload in self.workloads.items():
            self._evict.sum()
            cold = _timed(workload.call)
            samples[name] = {"cold_ns": cold, "warm_ns": [_timed(workload.call), _timed(workload.call)]}
        return samples


def _timed(call: Callable[[], object]) -> int:
    start = time.perf_counter_ns()
    call()
    return time.perf_counter_ns() - start


def serve(rollouts: int, tokens: int, threads: int) -> None:
    """A worker process: announces itself, then answers each ``round`` line on stdin with one round as JSON."""
    import otel_rl

    torch.set_num_threads(threads)
    current = Round(rollouts, tokens)
    bytes_ = {name: workload.bytes for name, workload in current.workloads.items()}
    _send(sys.stdout, {"otel_rl": otel_rl.__file__, "bytes": bytes_})
    for line in sys.stdin:
        if line.strip() != "round":
            break
        _send(sys.stdout, current.run())
    current.close()


def _send(stream: TextIO, message: dict[str, Any]) -> None:
    stream.write(json.dumps(message) + "\n")
    stream.flush()


class Worker:
    """A worker process measuring the ``otel_rl`` of ``tree`` with this checkout's benchmark code."""

    def __init__(self, tree: Path, *, rollouts: int, tokens: int, threads: int) -> None:
        bootstrap = (
            "import sys; "
            f"sys.path.insert(0, {str(tree)!r}); import otel_rl; "  # otel_rl from the tree measured
            f"sys.path.insert(0, {str(ROOT)!r}); from bench.hotpath import serve; "  # bench code from here
            f"serve({rollouts}, {tokens}, {threads})"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", bootstrap],
            cwd=tree,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        hello = self._receive()
        self.otel_rl: str = hello["otel_rl"]
        self.bytes: dict[str, int] = hello["bytes"]

    def round(self) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write("round\n")
        self.process.stdin.flush()
        return self._receive()

    def _receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"benchmark worker exited with {self.process.wait()}")
        message: dict[str, Any] = json.loads(line)
        return message

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def hotpath(
    *, rounds: int = 21, rollouts: int = 512, tokens: int = 2048, baseline: Path | None = None, threads: int = 2
) -> dict[str, Any]:
    """Every workload cold and warm against its floor, ``rounds`` times, for this checkout and, with ``baseline``,
    the checkout at that path, alternating; medians and interquartile ranges of times and ratios."""
    trees = {"current": ROOT, **({"baseline": baseline.resolve()} if baseline is not None else {})}
    workers = {name: Worker(tree, rollouts=rollouts, tokens=tokens, threads=threads) for name, tree in trees.items()}
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in workers}
    load = [os.getloadavg()[0]] if hasattr(os, "getloadavg") else []
    try:
        for index in range(rounds):
            order = list(workers) if index % 2 == 0 else list(reversed(workers))
            for name in order:
                samples[name].append(workers[name].round())
            if hasattr(os, "getloadavg"):
                load.append(os.getloadavg()[0])
    finally:
        for worker in workers.values():
            worker.close()
    results: dict[str, Any] = {
        "shape": [rollouts, tokens],
        "rounds": rounds,
        "load_average_1min": {"min": min(load, default=None), "max": max(load, default=None)},
        "trees": {name: {"path": str(trees[name]), "otel_rl": worker.otel_rl} for name, worker in workers.items()},
        "targets": TARGETS,
    }
    for name, worker in workers.items():
        results[name] = _summary(samples[name], worker.bytes)
    results["targets_met"] = {
        workload: {
            mode: results["current"][workload][mode]["x_floor"]["median"] <= limit for mode, limit in modes.items()
        }
        for workload, modes in TARGETS.items()
    }
    if "baseline" in results:
        results["speedup"] = {
            workload: {
                mode: results["baseline"][workload][mode]["median_ns"] / results["current"][workload][mode]["median_ns"]
                for mode in ("cold", "warm")
            }
            for workload in results["current"]["workloads"]
        }
    return results


def _summary(rounds: list[dict[str, Any]], bytes_: dict[str, int]) -> dict[str, Any]:
    """Per workload and mode: median and quartiles of the times, of the ratios to each round's bandwidth floor and
    (reference) to each round's ``x.sum()``."""
    bandwidth = [r["bandwidth_bytes_per_ns"] for r in rounds]
    out: dict[str, Any] = {
        "read_bandwidth_gb_s": _spread(bandwidth),
        "sum_ns": _spread([r["sum_ns"] for r in rounds]),
        "workloads": list(bytes_),
    }
    for name, size in bytes_.items():
        entry: dict[str, Any] = {"bytes": size, "floor_ns": _spread([size / b for b in bandwidth])}
        for mode in ("cold", "warm"):
            times: list[float] = []
            floors: list[float] = []
            sums: list[float] = []
            for r in rounds:
                values = r[name][f"{mode}_ns"]
                for value in values if isinstance(values, list) else [values]:
                    times.append(value)
                    floors.append(value / (size / r["bandwidth_bytes_per_ns"]))
                    sums.append(value / r["sum_ns"])
            entry[mode] = {
                **_spread(times, key="ns"),
                "x_floor": _spread(floors),
                "x_sum_reference": _spread(sums),
            }
        out[name] = entry
    return out


def _spread(values: list[float], *, key: str = "") -> dict[str, float]:
    """Median and quartiles (as ``median_<key>`` etc. when ``key`` is given)."""
    suffix = f"_{key}" if key else ""
    return {
        f"median{suffix}": median(values),
        f"p25{suffix}": percentile(values, 25),
        f"p75{suffix}": percentile(values, 75),
        f"min{suffix}": min(values),
        f"max{suffix}": max(values),
    }


def thread_threshold(sizes: list[int], *, repeats: int = 41) -> list[dict[str, Any]]:
    """One distribution's kernel (1-D float32 values, 70% selected) on the calling thread alone against two threads
    claiming chunks (no backoff), at each size, interleaved: where the second thread starts to help (``_parallel``
    hands work to it from ``PARALLEL_CHUNKS`` chunks of ``MIN_CHUNK`` values). Medians and quartiles of each."""
    from otel_rl._record import kernels, parallel
    from otel_rl._record.buckets import ExponentialLayout

    arguments = kernels.LayoutArguments.of(ExponentialLayout(5))
    generator = torch.Generator().manual_seed(3)
    rows = []
    threads = torch.get_num_threads()
    minimum, backoff = parallel.PARALLEL_CHUNKS, parallel.BACKOFF_NS
    try:
        parallel.PARALLEL_CHUNKS, parallel.BACKOFF_NS = 0, 0  # two threads at every size, helped or not
        for size in sizes:
            values = torch.randn(size, generator=generator).numpy()
            keep = (torch.rand(size, generator=generator) < 0.7).numpy()
            timings: dict[int, list[int]] = {1: [], 2: []}
            for _ in range(repeats):
                for count in (1, 2):
                    torch.set_num_threads(count)
                    call = functools.partial(kernels.summarize_values, arguments, values, keep)
                    timings[count].append(_timed(call))
            one, two = (_spread([float(t) for t in timings[count]], key="ns") for count in (1, 2))
            rows.append(
                {"values": size, "one_thread": one, "two_threads": two, "speedup": one["median_ns"] / two["median_ns"]}
            )
    finally:
        parallel.PARALLEL_CHUNKS, parallel.BACKOFF_NS = minimum, backoff
        torch.set_num_threads(threads)
    return rows


def breakdown(*, rollouts: int = 512, tokens: int = 2048, repeats: int = 21) -> dict[str, Any]:
    """Where a warm call's time goes, on the calling thread alone (``torch.set_num_threads(1)``): for the 1-D rewards
    each stage of the value kernel over the same block loop (statistics, slots, increments), the whole kernel, and
    the call around it; the staleness kernel; the token pass of ``record_rollouts`` and the call around it. Medians
    of ``repeats`` interleaved rounds, nanoseconds per value where it says so."""
    import numba

    from bench.workload import CURRENT_VERSION, flat_values, make_rollouts, make_step
    from otel_rl._record import kernels
    from otel_rl._record.buckets import ExponentialLayout

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    layout = kernels.LayoutArguments.of(ExponentialLayout(5))
    values, keep = (t.numpy() for t in flat_values(rollouts * tokens))
    slots = np.empty(values.shape[0], dtype=np.int32)
    tally = layout.tallies(1)[0]
    integers, floats = kernels.accumulators(1)
    block = kernels.BLOCK
    fast = {"reassoc", "nsz", "contract"}

    @numba.njit(nogil=True, fastmath=fast)
    def statistics(values, keep, integers, floats):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
        for start in range(0, values.shape[0], block):
            stop = min(start + block, values.shape[0])
            kernels._statistics(  # noqa: SLF001 - one stage alone
                values[start:stop], keep[start:stop], True, integers[0], floats[0]
            )

    @numba.njit(nogil=True, fastmath=fast)
    def slot_stage(values, keep, bounds, thresholds, size, slots):  # type: ignore[no-untyped-def]  # pragma: no cover
        for start in range(0, values.shape[0], block):
            stop = min(start + block, values.shape[0])
            kernels._slots(  # noqa: SLF001 - one stage alone
                values[start:stop], keep[start:stop], True, True, 5, bounds, thresholds, size, slots[start:stop]
            )

    @numba.njit(nogil=True)
    def increments(values, slots, bounds, lookup, fractions, tally):  # type: ignore[no-untyped-def]  # pragma: no cover
        for start in range(0, values.shape[0], block):
            stop = min(start + block, values.shape[0])
            kernels._tally(  # noqa: SLF001 - one stage alone
                values[start:stop], slots[start:stop], 5, bounds, lookup, fractions, tally
            )

    step = make_step(rollouts, tokens)
    fields: dict[str, Any] = dict(make_rollouts(step))
    found, close = workloads(rollouts, tokens)
    versions, mask = step.versions.reshape(-1).numpy(), step.mask.reshape(-1).numpy()
    token_layouts = kernels.TokenLayouts.of((layout, layout, layout, layout))
    flat = {name: fields[name].reshape(-1).numpy() for name in ("entropy", "logprobs", "inference_logprobs")}
    parts: dict[str, Callable[[], object]] = {
        "rewards_1d: statistics (stage 1)": lambda: statistics(values, keep, integers, floats),
        "rewards_1d: slots (stage 2)": lambda: slot_stage(
            values, keep, layout.bounds, layout.thresholds, layout.size, slots
        ),
        "rewards_1d: increments (stage 3)": lambda: increments(
            values, slots, layout.bounds, layout.lookup, layout.fractions, tally
        ),
        "rewards_1d: value kernel": lambda: kernels.summarize_values(layout, values, keep),
        "rewards_1d: whole call": found["rewards_1d"].call,
        "staleness_2d: staleness kernel": lambda: kernels.summarize_staleness(
            layout, versions, mask, CURRENT_VERSION, 4096
        ),
        "step_2d: whole call": found["step_2d"].call,
        "rollouts_2d: token pass": lambda: kernels.summarize_tokens(
            token_layouts,
            (flat["entropy"], mask),
            (flat["logprobs"], flat["inference_logprobs"], mask),
            step.mask.numpy(),
        ),
        "rollouts_2d: whole call": found["rollouts_2d"].call,
    }
    try:
        samples = interleaved(parts, repeats=repeats)
    finally:
        close()
        torch.set_num_threads(threads)
    size = values.shape[0]
    return {
        name: {"median_ns": median(times), "p25_ns": percentile(times, 25), "p75_ns": percentile(times, 75)}
        | ({"ns_per_value": median(times) / size} if name.startswith("rewards_1d") else {})
        for name, times in samples.items()
    }
