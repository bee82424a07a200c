"""The short soak (~30 s): 2 ranks x 60 steps of 512 rollouts with one collector pause, one log-store outage and
one rank restart; `make soak` runs the full one (tests/reliability/soak.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.reliability.soak import run_soak


def test_short_soak_with_faults_loses_nothing_promised(stack_binaries: Any, tmp_path: Path) -> None:
    """Counts, buckets and sums exact in Prometheus; every exported sample in VictoriaLogs (duplicates allowed:
    delivery is at least once); no sample dropped by a rank."""
    report = run_soak(stack_binaries, tmp_path, ranks=2, steps=60, step_s=0.3, fault_every=15)
    assert report.failures == []
    assert report.reward_count_prometheus == report.reward_count_recorded == 2 * 60 * 512
    assert report.staleness_count_prometheus == report.staleness_count_recorded
    assert report.buckets_exact
    assert report.samples_missing == 0 and report.samples_exported_by_ranks == 2 * 60 * 4
    assert report.samples_dropped_by_ranks == 0
    assert report.rank_export_failures_metrics >= 1  # the collector pause was felt
