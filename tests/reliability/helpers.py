"""Helpers of the reliability tests: export success probes, collector self-metrics, RSS slopes."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import requests

from tests.pipeline.harness import RankProcess

CONFIG_DIR = Path(__file__).parents[2] / "collector_config"


def flush_ok(rank: RankProcess, *, timeout_s: float = 60.0) -> None:
    """Flush until one flush cycle ran without a metrics export failure (i.e. the collector took the data)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = rank.stats()["export_failures_metrics"]
        rank.flush()
        if rank.stats()["export_failures_metrics"] == before:
            return
        time.sleep(0.3)
    raise AssertionError(f"rank {rank.rank} could not export within {timeout_s}s")


def collector_metrics(stack: Any) -> dict[str, float]:
    """The collector's own metrics (Prometheus text format), summed over labels, by metric name."""
    text = requests.get(f"http://{stack.config.host}:{stack.config.ports.collector_metrics}/metrics", timeout=10).text
    totals: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$", line)
        if match:
            totals[match.group(1)] = totals.get(match.group(1), 0.0) + float(match.group(3))
    return totals


def slope_per_minute(times: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of ``values`` over ``times`` (seconds), per minute."""
    n = len(times)
    if n < 2:
        return 0.0
    mean_t, mean_v = sum(times) / n, sum(values) / n
    var = sum((t - mean_t) ** 2 for t in times)
    if var == 0:
        return 0.0
    return 60.0 * sum((t - mean_t) * (v - mean_v) for t, v in zip(times, values, strict=True)) / var
