"""Test harness for the real pipeline: rank processes driven over pipes, and what Prometheus must hold for them."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import otel_rl_contract as contract
from otel_rl_ops import promql
from otel_rl_ops.query import Prometheus

from otel_rl import DEFAULT_REWARD_BOUNDS, DEFAULT_STALENESS_BOUNDS
from tests.pipeline import rank_worker
from tests.reference import bucket_counts

ROOT = Path(__file__).parents[2]
WAIT_S = 90.0
EVERY_RUN: tuple[contract.MetricName, ...] = (
    contract.RUN_START,
    contract.RUN_FINISHED,
    contract.RANKS_UP,
    contract.RANKS_EXPECTED,
    contract.GPU_SECONDS,
    contract.GROUND_TRUTH,
    contract.SAMPLES_EXPORTED,
    contract.SAMPLES_DROPPED,
    contract.SPANS_EXPORTED,
    contract.SPANS_DROPPED,
    contract.EXPORT_FAILURES,
    contract.EXPORT_UNENCODABLE,
)
"""What every rank exports whatever it records: the run gauges it states when it starts, and its export counters.
A live golden test adds what its run recorded and compares with the series Prometheus holds (:func:`written`)."""
_FORKSERVER = multiprocessing.get_context("forkserver")
_FORKSERVER.set_forkserver_preload([rank_worker.__name__])
"""Rank processes are forks of one server per test process that imported torch, numba and otel_rl once: a rank
then starts in a fraction of a second instead of the ~6 s of CPU those imports take (the suite starts hundreds)."""


@contextmanager
def private_stack(binaries: Any, state_dir: Path, **settings: Any) -> Iterator[Any]:
    """A stack of the caller's own (these tests stop, pause and kill its components)."""
    from otel_rl_ops.stack.services import Stack, StackConfig, StackPorts

    environment = {"OTEL_RL_AGGREGATION_INTERVAL": "1s", **settings.pop("collector_environment", {})}
    config = StackConfig(ports=StackPorts.free(), state_dir=state_dir, collector_environment=environment, **settings)
    with Stack(config, binaries=binaries) as running:
        yield running


class RankProcess:
    """One otel_rl process (a rank) that records what the test tells it to, over the real OTLP exporter."""

    def __init__(
        self,
        *,
        endpoint: str,
        run_id: str,
        rank: int,
        world_size: int,
        stderr: Path | None = None,
        env: dict[str, str] | None = None,
        **settings: Any,
    ) -> None:
        """``settings`` go to ``TelemetryConfig`` (plus the worker's own ``clock_offset_s``; ``histogram`` defaults
        to ``"explicit"`` here, the form these tests read bucket by bucket); ``stderr`` is a file for the rank's log
        output; ``env`` replaces the process environment (default: this process's)."""
        config = {
            "run_id": run_id,
            "rank": rank,
            "world_size": world_size,
            "local_rank": rank,
            "endpoint": endpoint,
            "service_name": "otel-rl-test",
            "export_interval_s": 0.5,
            "export_timeout_s": 2.0,
            "histogram": "explicit",
            **settings,
        }
        self.rank = rank
        self.run_id = run_id
        self._connection, theirs = _FORKSERVER.Pipe()
        environment = dict(os.environ if env is None else env)
        stderr_path = None if stderr is None else str(stderr)
        self._process = _FORKSERVER.Process(
            target=rank_worker.serve, args=(config, environment, stderr_path, theirs), daemon=True
        )
        self._process.start()
        theirs.close()
        assert self._process.pid is not None
        self.pid: int = self._process.pid
        assert self._reply() == "ready"

    def alive(self) -> bool:
        return self._process.is_alive()

    def wait(self, timeout_s: float = 30) -> int | None:
        """The exit code once the process has exited, waiting at most ``timeout_s`` (None: still running)."""
        self._process.join(timeout_s)
        return self._process.exitcode

    def rss_kib(self) -> int:
        """The rank process's resident set size (``VmRSS`` of ``/proc/<pid>/status``), in KiB."""
        return rss_kib(self.pid)

    def stats(self) -> dict[str, float]:
        """The rank's own counters (export failures, samples exported/dropped) and its RSS, read in-process."""
        return dict(json.loads(self.send("stats")))

    def synthetic(
        self, *, seed: int, rollouts: int, tokens: int = 0, fn: str = "total", samples: int = 0, text_bytes: int = 0
    ) -> dict[str, Any]:
        """Record generated data of one step inside the rank (no JSON transfer of the values); returns the
        reference of what was recorded: reward count, sum and bucket counts, staleness count."""
        reply = self.send(
            "synthetic", seed=seed, rollouts=rollouts, tokens=tokens, fn=fn, samples=samples, text_bytes=text_bytes
        )
        return dict(json.loads(reply))

    def _reply(self) -> str:
        try:
            line: str = self._connection.recv()
        except EOFError:
            raise RuntimeError(f"rank {self.rank} exited with {self.wait()}") from None
        return line

    def send(self, command: str, **arguments: Any) -> str:
        self._connection.send({"command": command, **arguments})
        return self._reply()

    def rewards(
        self, values: Sequence[float], *, fn: str = "total", mask: Any = None, dataset: str | None = None
    ) -> None:
        self.send("rewards", values=list(values), fn=fn, mask=mask, dataset=dataset)

    def staleness(
        self,
        versions: Any,
        current: int,
        *,
        mask: Any = None,
        dataset: str | None = None,
        phase: str | None = None,
        dtype: str | None = None,
    ) -> None:
        """``record_staleness``; ``dtype`` (a torch dtype's name, e.g. ``"float64"``) types the versions' tensor
        (default: torch's inference from the JSON values)."""
        self.send("staleness", versions=versions, current=current, mask=mask, dataset=dataset, phase=phase, dtype=dtype)

    def staleness_drops(
        self,
        count: int | None,
        *,
        dataset: str | None = None,
        response_lengths: Sequence[float] | None = None,
        staleness: Sequence[float] | None = None,
    ) -> None:
        """``record_staleness_drops``, the lengths and lags as JSON lists (Python floats in the rank)."""
        self.send(
            "staleness_drops",
            count=count,
            dataset=dataset,
            response_lengths=response_lengths,
            staleness=staleness,
        )

    def rollouts(self, **fields: Any) -> None:
        """``record_rollouts`` with ``fields`` (its keyword arguments) as JSON lists, which the rank turns into
        tensors: ``mask`` bool, ``response_lengths`` and ``group_ids`` int64, the other fields float64;
        ``reward_breakdown`` a dict of such lists (float64)."""
        self.send("rollouts", fields=fields)

    def set_phase(self, phase: str) -> None:
        self.send("set_phase", phase=phase)

    def phase_enter(self, phase: str, *, links: Sequence[str] = ()) -> None:
        """Enter ``with telemetry.phase(phase, links=links)`` (left by :meth:`phase_leave`)."""
        self.send("phase_enter", phase=phase, links=list(links))

    def phase_leave(self) -> None:
        self.send("phase_leave")

    def trajectory_context(self) -> str:
        return str(json.loads(self.send("trajectory_context"))["context"])

    def tokens(self, **counts: int) -> None:
        """``record_tokens(generated=, trained=, samples=)``."""
        self.send("tokens", counts=counts)

    def async_state(self, **state: int) -> None:
        """``set_async_state(queue_depth=, in_flight=, buffer_used=, buffer_capacity=)``."""
        self.send("async_state", state=state)

    def metric(self, key: str, values: Sequence[float]) -> None:
        self.send("metric", key=key, values=list(values))

    def sample(self, **sample: Any) -> None:
        self.send("sample", sample=sample)

    def step(self, step: int) -> None:
        self.send("step", step=step)

    def flush(self) -> bool:
        return bool(json.loads(self.send("flush"))["flushed"])

    def shutdown(self) -> bool:
        finished = bool(json.loads(self.send("shutdown"))["finished"])
        self.wait()
        return finished

    def kill(self) -> None:
        self._process.kill()
        self.wait()


def start_ranks(count: int, **arguments: Any) -> list[RankProcess]:
    """``count`` rank processes ``0..count-1`` with ``world_size=count``, started side by side (each takes seconds
    to import torch and compile its kernels); ``arguments`` go to every :class:`RankProcess`."""
    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(RankProcess, rank=rank, world_size=count, **arguments) for rank in range(count)]
    errors = [error for future in futures if (error := future.exception()) is not None]
    if errors:
        for future in futures:
            if future.exception() is None:
                future.result().kill()
        raise errors[0]
    return [future.result() for future in futures]


def native_buckets(native: dict[str, Any], scale: int) -> tuple[int, dict[int, int], dict[int, int]]:
    """Zero count and ``{index: count}`` of the negative and positive sides of a native histogram as Prometheus's
    query API returns it (the ``histogram`` field's ``buckets``: ``[boundary_rule, lower, upper, count]``), in the
    form of ``tests.reference.exponential_sides``.

    Each bucket must be exactly one bucket ``(2**(i/2**scale), 2**((i+1)/2**scale)]`` (mirrored for negative
    values) at ``scale``; the zero bucket ``[-t, t]`` must have a threshold below 1e-100.
    """
    n = 1 << scale
    zero = 0
    sides: tuple[dict[int, int], dict[int, int]] = ({}, {})
    for rule, lower, upper, count in native.get("buckets", []):
        low, high, number = float(lower), float(upper), int(float(count))
        if int(rule) == 3:
            assert -low == high < 1e-100, f"zero bucket [{lower}, {upper}] has a threshold"
            zero += number
            continue
        positive = int(rule) == 0
        assert positive or int(rule) == 1, f"bucket rule {rule} of [{lower}, {upper}] is neither 0 nor 1"
        magnitude_low, magnitude_high = (low, high) if positive else (-high, -low)
        assert magnitude_low > 0, f"bucket [{lower}, {upper}] crosses zero"
        index = round(math.log2(magnitude_low) * n)
        one_bucket = math.isclose(magnitude_low, 2 ** (index / n), rel_tol=1e-12) and math.isclose(
            magnitude_high, 2 ** ((index + 1) / n), rel_tol=1e-12
        )
        assert one_bucket, f"bucket [{lower}, {upper}] is not one bucket at scale {scale}"
        side = sides[1 if positive else 0]
        if number:
            side[index] = side.get(index, 0) + number
    return zero, sides[0], sides[1]


def rss_kib(pid: int) -> int:
    """``VmRSS`` of process ``pid`` in KiB (0 when it has none, e.g. a zombie)."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def written(prometheus: Prometheus, run_id: str) -> frozenset[str]:
    """The names of the series the collector wrote for ``run_id`` (scope ``otel_rl``; not the recording rules')."""
    run = promql.match(contract.label(contract.RUN_ID), run_id)
    found = prometheus.series(f"{{{run},{promql.match('otel_scope_name', contract.SCOPE_NAME)}}}")
    return frozenset(item["__name__"] for item in found if ":" not in item["__name__"])


def eventually(check: Callable[[], Any], *, what: str, timeout_s: float = WAIT_S) -> Any:
    """Call ``check`` until it returns something truthy; raise naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; last result {last!r}")


def expected_buckets(values: Sequence[float], bounds: Sequence[float]) -> dict[str, float]:
    """What ``Prometheus.buckets`` must return for exactly ``values``."""
    return cumulative_buckets(bucket_counts(values, bounds), bounds)


def cumulative_buckets(counts: Sequence[int], bounds: Sequence[float]) -> dict[str, float]:
    """Prometheus ``le`` label -> cumulative count, as ``rl_*_bucket`` holds it."""
    out: dict[str, float] = {}
    running = 0
    for bound, count in zip([*bounds, float("inf")], counts, strict=True):
        running += count
        out["+Inf" if bound == float("inf") else _le(bound)] = running
    return out


def _le(bound: float) -> str:
    text = repr(float(bound))
    return text[:-2] if text.endswith(".0") else text


REWARD_BOUNDS = tuple(float(b) for b in DEFAULT_REWARD_BOUNDS)
STALENESS_BOUNDS = tuple(float(b) for b in DEFAULT_STALENESS_BOUNDS)
