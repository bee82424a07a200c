"""``python -m bench [--quick] [--out PATH] [--only SECTION ...] [--baseline CHECKOUT]``: run the benchmarks, print,
write JSON."""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from bench import report
from bench.machine import machine

SECTIONS = ("hotpath", "ingest", "growth", "training_thread", "phases", "memory", "cuda", "collector", "capacity")
DEFAULT_OUT = Path(__file__).resolve().parent / "results.json"


def run(
    *, quick: bool, only: tuple[str, ...] = SECTIONS, threads: int = 2, baseline: Path | None = None
) -> dict[str, Any]:
    """Every selected section's results; ``quick`` shrinks sizes and counts to a seconds-long smoke run;
    ``baseline``: another checkout whose ``otel_rl`` the hot path is measured against in the same run."""
    from bench.cuda_check import cuda_check
    from bench.ingest import growth, ingest
    from bench.memory import memory_growth
    from bench.training_thread import training_thread

    torch.set_num_threads(threads)
    started = time.perf_counter()
    results: dict[str, Any] = {"quick": quick, "machine": machine()}
    if "hotpath" in only:
        from bench.hotpath import breakdown, hotpath, thread_threshold

        results["hotpath"] = (
            hotpath(rounds=3, rollouts=32, tokens=512, baseline=baseline, threads=threads)
            if quick
            else hotpath(baseline=baseline, threads=threads)
        )
        results["hotpath"]["threads"] = (
            thread_threshold([1 << 15, 1 << 17], repeats=3)
            if quick
            else thread_threshold([1 << k for k in range(15, 21)])
        )
        results["hotpath"]["breakdown"] = breakdown(rollouts=32, tokens=512, repeats=3) if quick else breakdown()
    if "ingest" in only:
        results["ingest"] = ingest(rollouts=32, tokens=512, repeats=3, sample_size=500) if quick else ingest(repeats=15)
    if "growth" in only:
        results["growth"] = (
            growth([2_048, 16_384], tokens=512, repeats=3)
            if quick
            else growth([10_000, 100_000, 1_000_000, 10_000_000], repeats=7)
        )
    if "training_thread" in only:
        results["training_thread"] = (
            training_thread(steps=4, rounds=1, warmup=1, rollouts=16) if quick else training_thread(steps=500, rounds=2)
        )
    if "phases" in only:
        from bench.phases import phase_spans

        results["phases"] = phase_spans(steps=20) if quick else phase_spans()
    if "memory" in only:
        results["memory"] = (
            memory_growth(steps=200, every=50, warmup=20, rollouts=8, tokens=64)
            if quick
            else memory_growth(steps=10_000, every=500, warmup=500)
        )
    if "cuda" in only:
        results["cuda"] = cuda_check(repeats=3 if quick else 15)
    if "collector" in only:
        from bench.collector_scale import collector_scale

        results["collector"] = (
            collector_scale([10], ticks=3) if quick else collector_scale([100, 250, 500, 1000, 2000, 4000], ticks=8)
        )
    if "capacity" in only:
        from bench.capacity import capacity

        results["capacity"] = capacity(steps=2, per_step=20) if quick else capacity()
    results["elapsed_s"] = time.perf_counter() - started
    results["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    return results


@contextmanager
def _quiet(levels: dict[str, int]) -> Iterator[None]:
    """The failing-collector modes make the exporters log every failed export, as expected; raise those loggers'
    levels while the benchmarks run and put them back after (an in-process caller, the smoke test, keeps its own)."""
    loggers = {logging.getLogger(name): level for name, level in levels.items()}
    previous = {logger: logger.level for logger in loggers}
    for logger, level in loggers.items():
        logger.setLevel(level)
    try:
        yield
    finally:
        for logger, level in previous.items():
            logger.setLevel(level)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes and counts: a smoke run of seconds")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON results file (default {DEFAULT_OUT})")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="sections to run")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another checkout (git worktree add /tmp/base <commit>): the hot path before and after in one run",
    )
    args = parser.parse_args(argv)
    with _quiet({"opentelemetry": logging.CRITICAL, "otel_rl": logging.ERROR}):
        results = run(quick=args.quick, only=tuple(args.only), threads=args.threads, baseline=args.baseline)
    report.show(results)
    report.write(results, args.out)
    print(f"\nwrote {args.out} ({results['elapsed_s']:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
