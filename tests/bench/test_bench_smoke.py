"""The benchmark suite runs end to end in --quick mode and its results keep their shape (no timed assertions)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import main

pytestmark = pytest.mark.stack  # the collector-scale and capacity sections run private stacks


def _positive_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One quick run of every section, read back from its JSON file; the run leaves the process's logger levels as
    it found them (it once left ``otel_rl`` at ERROR, silencing later tests' warnings on the same xdist worker)."""
    out: Path = tmp_path_factory.mktemp("bench") / "results.json"
    levels = {name: logging.getLogger(name).level for name in ("otel_rl", "opentelemetry")}
    assert main(["--quick", "--out", str(out)]) == 0
    assert {name: logging.getLogger(name).level for name in levels} == levels
    results: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return results


def test_hot_path_reports_cold_and_warm_against_the_floor(results: dict[str, Any]) -> None:
    """Every hot-path workload has cold and warm medians and quartiles, as times and as ratios to the bandwidth floor
    (the x.sum() ratio beside them for reference); the acceptance targets are judged; the thread table has rows."""
    hot = results["hotpath"]
    current = hot["current"]
    assert {"rewards_1d", "step_2d", "rollouts_2d"} <= set(current["workloads"])
    for name in current["workloads"]:
        entry = current[name]
        assert entry["bytes"] > 0 and _positive_finite(entry["floor_ns"]["median"])
        for mode in ("cold", "warm"):
            found = entry[mode]
            assert found["p25_ns"] <= found["median_ns"] <= found["p75_ns"]
            assert _positive_finite(found["x_floor"]["median"]) and _positive_finite(found["x_sum_reference"]["median"])
    assert set(hot["targets_met"]) == set(hot["targets"]) == {"rewards_1d", "step_2d", "rollouts_2d"}
    assert _positive_finite(current["read_bandwidth_gb_s"]["median"])
    assert [row["values"] for row in hot["threads"]] == sorted(row["values"] for row in hot["threads"])
    assert all(_positive_finite(part["median_ns"]) for part in hot["breakdown"].values())


def test_ingest_reports_positive_times_and_ratios(results: dict[str, Any]) -> None:
    """Every ingest operation and baseline has a positive finite median, x-floor and ratio."""
    ingest = results["ingest"]
    expected = {
        "step_2d",
        "rewards_2d",
        "staleness_2d",
        "rewards_1d",
        "staleness_1d",
        "floor",
        "numpy_histogram",
        "torch_histc",
        "tensorboard_add_histogram",
        "prometheus_observe_loop",
        "otel_sdk_record_loop",
        "step_2d_explicit",
        "rewards_1d_explicit",
        "rollouts_2d",
        "rollouts_2d_breakdown",
        "read_bandwidth",
    }
    assert set(ingest["operations"]) == expected
    for operation in ingest["operations"].values():
        assert _positive_finite(operation["median_ns"]) and _positive_finite(operation["x_floor"])
    assert all(_positive_finite(value) for value in ingest["ratios"].values())
    assert set(ingest["targets_met"]) == {
        "step_vs_floor",
        "otel_sdk_speedup",
        "tensorboard_speedup",
        "rewards_1d_vs_floor",
        "tensorboard_speedup_1d",
        "rollouts_vs_floor",
    }
    assert ingest["operations"]["otel_sdk_record_loop"]["extrapolated_from_values"] > 0


def test_growth_rows_cover_each_size(results: dict[str, Any]) -> None:
    """Each size has a positive per-token cost and x-floor ratio."""
    rows = results["growth"]
    assert len(rows) >= 2 and [r["tokens"] for r in rows] == sorted(r["tokens"] for r in rows)
    for row in rows:
        assert all(_positive_finite(row[key]) for key in ("step_ns", "per_token_ns", "floor_ns", "x_floor"))


def test_training_thread_reports_every_mode(results: dict[str, Any]) -> None:
    """Healthy, closed-port and slow-sink modes each report median, p99 and RSS."""
    thread = results["training_thread"]
    assert set(thread["modes"]) == {"healthy", "closed_port", "slow_sink"}
    for mode in thread["modes"].values():
        assert mode["steps"] > 0 and _positive_finite(mode["median_ns"]) and _positive_finite(mode["p99_ns"])
        assert all(_positive_finite(kb) for block in mode["rss_kb_start_max_end"] for kb in block)
    assert all(_positive_finite(value) for value in thread["ratios"].values())


def test_phase_spans_report_both_arms(results: dict[str, Any]) -> None:
    """The traced and untraced arms each report median and p99; the ratio and per-step cost are numbers."""
    phases = results["phases"]
    assert set(phases["arms"]) == {"traced", "untraced"}
    assert all(
        _positive_finite(arm["median_ns"]) and _positive_finite(arm["p99_ns"]) for arm in phases["arms"].values()
    )
    assert _positive_finite(phases["traced_vs_untraced_median"]) and math.isfinite(phases["span_cost_per_step_us"])


def test_memory_is_sampled_with_a_finite_slope(results: dict[str, Any]) -> None:
    """RSS is sampled at regular steps and its least-squares slope is a finite number."""
    memory = results["memory"]
    assert len(memory["rss_kb"]) == memory["steps"] // memory["sample_every"]
    assert all(_positive_finite(kb) for _, kb in memory["rss_kb"])
    assert math.isfinite(memory["slope_kb_per_1000_steps"])
    assert memory["sample_records_exported"] > 0


def test_cuda_section_is_recorded(results: dict[str, Any]) -> None:
    """The CUDA check is either skipped (recorded as such) or reports one sync per call."""
    cuda = results["cuda"]
    if cuda["available"]:
        assert cuda["one_sync_per_call"] and set(cuda["syncs_per_call"].values()) == {1}
    else:
        assert cuda["skipped"] == "CUDA not available: skipped"
    assert results["machine"]["nproc"] > 0 and results["quick"] is True


def test_collector_scale_is_exact_and_reports_costs(results: dict[str, Any]) -> None:
    """The simulated ranks' merged total is exact in Prometheus, with positive lag, CPU and RSS figures."""
    (row,) = results["collector"]["rows"]
    assert row["exact"] and row["all_senders_ok"] and row["got_count"] == row["expected_count"]
    assert all(_positive_finite(row[key]) for key in ("lag_after_last_export_s", "collector_rss_mib"))


def test_capacity_counts_series_and_stores_every_sample(results: dict[str, Any]) -> None:
    """A run's series are merged (none per rank) and every sample record reaches VictoriaLogs, with its costs."""
    series, store = results["capacity"]["series_per_run"], results["capacity"]["log_store"]
    assert series["series"] > 50 and series["series_with_rank_label"] == 0 and series["metric_names"] > 10
    assert store["records_stored"] == store["records_expected"] > 0
    assert all(_positive_finite(store[key]) for key in ("records_per_cpu_s", "disk_bytes_per_record", "wall_s"))
