"""``otel-rl replay`` without a stack: which files and lines it reads or names as problems, and the collector's merge
done again over the ranks' points (per rank stream cumulative → delta with the first point whole, the run's sum, max,
min; windows stamped at their end). The whole path through a real stack: tests/pipeline/test_replay.py."""

from __future__ import annotations

import json
from pathlib import Path

import otel_rl_contract as contract
import pytest
from otel_rl_contract.files import file_name
from otel_rl_ops.replay.merge import Exponential, Point, Sample, le, merge
from otel_rl_ops.replay.read import Problem, find, lines

_RESOURCE = (("rl.run.id", "r"), ("rl.role", "trainer"), ("rl.world_size", "2"), ("service.name", "svc"))


def _name(signal: str = "metrics", version: str = contract.__version__, index: int = 0) -> str:
    return file_name(version=version, rank=0, instance="p", signal=signal, index=index)  # type: ignore[arg-type]


def test_cut_foreign_and_other_version_lines_are_named_and_the_rest_read(tmp_path: Path) -> None:
    """A cut-short last line, a line that is not a MetricsData, another version's file and a file not named as otel-rl
    names its files are each a problem naming the file (and line); the good line is read."""
    good = json.dumps({"resourceMetrics": []})
    (tmp_path / _name()).write_text(f"{good}\n{json.dumps([1, 2])}\n{good[:-3]}", encoding="utf-8")
    (tmp_path / _name(version="9.9.9")).write_text(f"{good}\n", encoding="utf-8")
    stray = tmp_path / "notes.jsonl"
    stray.write_text("x\n", encoding="utf-8")
    problems: list[Problem] = []
    found = find([tmp_path, stray], problems)
    read = [(item.path.name, number) for item, number, _ in lines(found, problems)]
    assert read == [(_name(), 1)]
    assert [str(problem) for problem in problems] == [
        f"{tmp_path / _name(version='9.9.9')}: written by otel-rl 9.9.9, this is otel-rl-ops {contract.__version__}: "
        "replay it with otel-rl-ops 9.9.9",
        f"{stray}: not an otel-rl offline file (named otel-rl-<version>_rank<r>_..._<signal>_<n>.jsonl)",
        f"{tmp_path / _name()}:2: not an OTLP/JSON MetricsData: " + problems[2].message.split(": ", 1)[1],
        f"{tmp_path / _name()}:3: the line is cut short (the process stopped while writing it)",
    ]


def _point(rank: int, metric: contract.MetricName, seconds: float, value: object, *, start: int = 1) -> Point:
    resource = tuple(sorted((*_RESOURCE, ("rl.rank", str(rank)), ("service.instance.id", f"i{rank}-{start}"))))
    return Point(resource, ("otel_rl", "0.1.0"), metric, (), start, int(seconds * 1e9), value)  # type: ignore[arg-type]


def _values(samples: list[Sample], name: str) -> list[tuple[int, object]]:
    return [(sample.time_ms, sample.value) for sample in samples if dict(sample.labels)["__name__"] == name]


def test_counters_sum_the_ranks_and_a_restarted_rank_counts_whole() -> None:
    """Two ranks' cumulative counters: each window's total is the sum of every rank stream's last value; a rank that
    restarts (a new process, counting from zero) adds its whole count, and the run's total never goes down."""
    metric = contract.TOKENS_GENERATED
    points = [
        _point(0, metric, 0.2, 3.0),
        _point(1, metric, 0.4, 5.0),
        _point(0, metric, 1.2, 4.0),
        _point(1, metric, 2.3, 2.0, start=2),
        _point(0, metric, 2.4, 6.0),
    ]
    samples = list(merge(points, interval_s=1.0))
    assert _values(samples, "rl_tokens_generated_total") == [(1000, 8.0), (2000, 9.0), (3000, 13.0)]


def test_gauges_merge_by_the_contract_rule_over_the_ranks_in_the_window() -> None:
    """A max-merged gauge is the largest of the ranks' newest values in the window, a min-merged one the smallest,
    a sum-merged one their sum; an older point of a rank in the same window gives way to its newest."""
    points = [
        _point(0, contract.STEP, 0.1, 9.0),
        _point(0, contract.STEP, 0.2, 4.0),
        _point(1, contract.STEP, 0.3, 3.0),
        _point(0, contract.RUN_START, 0.3, 100.0),
        _point(1, contract.RUN_START, 0.3, 90.0),
        _point(0, contract.RANKS_UP, 0.3, 1.0),
        _point(1, contract.RANKS_UP, 0.3, 1.0),
    ]
    samples = list(merge(points, interval_s=1.0))
    assert _values(samples, "rl_step") == [(1000, 4.0)]
    assert _values(samples, "rl_run_start_time_seconds") == [(1000, 90.0)]
    assert _values(samples, "rl_ranks_up") == [(1000, 2.0)]


def test_exponential_histograms_add_by_absolute_index_and_the_carrier_gets_each_increase() -> None:
    """Buckets at different offsets and scales add by absolute index (the finer downscaled); ``rl_reward_exemplars``
    holds each window's merged increase, ``rl_reward`` the running total."""
    histogram = contract.REWARDS.histogram
    first = Exponential(5, 2, 1.0, 0, 0.0, {3: 2})
    finer = Exponential(6, 3, 2.0, 1, 0.0, {6: 1, 7: 1})
    points = [
        _point(0, histogram, 0.1, first),
        _point(1, histogram, 0.2, finer),
        _point(0, histogram, 1.1, Exponential(5, 4, 3.0, 0, 0.0, {3: 2, -1: 2})),
    ]
    samples = list(merge(points, interval_s=1.0))
    totals = _values(samples, "rl_reward")
    assert totals[0] == (1000, Exponential(5, 5, 3.0, 1, 0.0, {3: 4}))
    assert totals[1] == (2000, Exponential(5, 7, 5.0, 1, 0.0, {3: 4, -1: 2}))
    assert _values(samples, "rl_reward_exemplars")[1] == (2000, Exponential(5, 2, 2.0, 0, 0.0, {-1: 2}))


def test_labels_and_bounds_are_written_as_the_exporter_writes_them() -> None:
    """job is service.namespace/service.name, the run's resource attributes and the scope become labels; a bucket
    bound is written in plain decimals."""
    resource = tuple(sorted((*_RESOURCE, ("service.namespace", "ns"), ("rl.rank", "0"))))
    point = Point(resource, ("otel_rl", "0.1.0"), contract.STEP, (), 1, 100, 3.0)
    (sample,) = merge([point], interval_s=1.0)
    assert dict(sample.labels) == {
        "__name__": "rl_step",
        "job": "ns/svc",
        "otel_scope_name": "otel_rl",
        "otel_scope_version": "0.1.0",
        "rl_role": "trainer",
        "rl_run_id": "r",
        "rl_world_size": "2",
    }
    assert [le(bound) for bound in (1e-05, 1.0, 0.25, 1e21, float("inf"))] == [
        "0.00001",
        "1",
        "0.25",
        "1000000000000000000000",
        "+Inf",
    ]


def test_replay_without_a_running_stack_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``otel-rl replay`` with no stack in the state folder ends in one error line naming the folder."""
    from otel_rl_ops.cli import main

    assert main(["replay", str(tmp_path), "--state-dir", str(tmp_path / "none")]) == 1
    assert capsys.readouterr().err == (
        f"otel-rl: error: no running stack in {str(tmp_path / 'none')!r} (start one with otel-rl stack up, or give "
        "--state-dir)\n"
    )
