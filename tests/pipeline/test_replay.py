"""``otel-rl replay``: a 4-rank run recorded live through the real stack and, at the same time, into offline files
(``exporter="otlp+file"``); the files replayed into a fresh stack hold the same run (pipeline, 4 ranks).

Equality, precisely (the live series are restamped by the collector at each flush, the replayed ones at the end of each
replay window, so sample times differ and are not compared):

* the series set: every series of the run (``otel_scope_name="otel_rl"``; the rules' series are the alerts test's),
  with all labels;
* counters and histograms at the run's end (their last samples): every count, every native histogram's count, zero
  bucket and every bucket, exactly; every sum to within 1e-12 of it: the collector adds a run's increments flush by
  flush, the replay window by window, and floating-point addition depends on the order (the rewards here are multiples
  of 1/8, whose sums are exact in any order; the phase durations and the merge canary's fixed values are not);
* gauges by their extreme over the run in the direction the collector merges them (the largest of ``max``- and
  ``sum``-merged ones, the smallest of ``min``-merged ones): a flush's gauge merges whichever ranks that flush held,
  a matter of timing live (``rl_ranks_up`` was 2 in one live flush and never less than 3 replayed, a run's start the
  later rank's in a flush without the first), so their last values and other extremes are not compared;
* the exemplar carriers (``*_exemplars``: each flush's increase) summed over the run (``sum_over_time``);
* every sample record in VictoriaLogs (all its fields) and every span in Jaeger (ids, parent, name, times, attributes,
  resource, links).

The same inputs recorded by 4 more ranks whose clocks run three days behind, into files only, replay to the same
series and values, but what those processes measure themselves (phase durations, start times): a run older than
Prometheus's head block. Replaying again adds nothing; a cut-short line is named and the rest
of its run replayed. In the TSDB cluster profile the blocks go through the bucket and its store gateway to the same
values.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import otel_rl_contract as contract
import pytest
from otel_rl_contract import __version__
from otel_rl_ops.query import Jaeger, Prometheus, VictoriaLogs
from otel_rl_ops.replay.cli import replay_into
from otel_rl_ops.stack import versions
from otel_rl_ops.stack.env import otel_rl_home
from otel_rl_ops.stack.gotools import ensure_go_binary

from tests.pipeline.harness import eventually, private_stack, start_ranks

RUN, OLD_RUN, CUT_RUN = "replay-live", "replay-old", "replay-cut"
RANKS, STEPS = 4, 4
DAYS_BEHIND = 3
OLD_OFFSET_S = -DAYS_BEHIND * 86400.0
WINDOW_S = 1.0
"""The private stacks' aggregation interval (harness.private_stack), which the replay's window matches."""


def _drive(ranks: list[Any]) -> tuple[int, int]:
    """Every rank records STEPS steps of rewards, staleness, a sample each and a phase span; returns the number of
    rewards and of samples recorded over all ranks."""
    rewards = samples = 0
    for step in range(STEPS):
        for rank in ranks:
            rank.step(step)
            rank.phase_enter("generate")
            values = [((rank.rank * 7 + step * 3 + i) % 17 - 8) / 8 for i in range(6)]
            rank.rewards(values)
            rank.rewards(values[:3], fn="correctness")
            rank.staleness([step + 10 - i for i in range(5)], step + 12)
            rank.sample(
                reward=values[0],
                prompt=f"p{rank.rank}-{step}",
                response=f"r{rank.rank}-{step}",
                episode_id=f"e{rank.rank}-{step}",
            )
            rank.phase_leave()
            rewards += len(values)
            samples += 1
        time.sleep(WINDOW_S)
    return rewards, samples


def _selector(run: str) -> str:
    return f'{{rl_run_id="{run}",otel_scope_name="otel_rl"}}'


_NOT_COMPARED = frozenset({"rl_run_id", "receive_node", "tenant_id"})
"""Labels that differ by design: the run id (the old run's is another), and the Thanos external labels that say which
receiver, or the bucket, holds a series."""
_GAUGE_MERGE = {contract.series(metric).name: metric.merge for metric in contract.ALL_METRICS if metric.kind == "gauge"}
"""How the collector merges each gauge's ranks: its extreme over the run is compared in that direction."""


def _add(total: dict[str, Any] | None, histogram: dict[str, Any]) -> dict[str, Any]:
    """Two native histograms of the query API added (count, sum, each bucket's count)."""
    buckets = {tuple(bucket[:3]): float(bucket[3]) for bucket in (total or {}).get("buckets", [])}
    for bucket in histogram.get("buckets", []):
        buckets[tuple(bucket[:3])] = buckets.get(tuple(bucket[:3]), 0.0) + float(bucket[3])
    return {
        "count": float((total or {}).get("count", 0)) + float(histogram["count"]),
        "sum": float((total or {}).get("sum", 0)) + float(histogram["sum"]),
        "buckets": sorted((*key, count) for key, count in buckets.items()),
    }


def metrics_of(prometheus: Prometheus, run: str, at: float) -> dict[str, Any]:
    """The run's series as the module docstring compares them, read as raw samples (``series[3h]`` at ``at``)."""
    ended: dict[tuple[tuple[str, str], ...], Any] = {}
    gauges: dict[tuple[tuple[str, str], ...], Any] = {}
    exemplar_totals: dict[tuple[tuple[str, str], ...], Any] = {}
    for item in prometheus.query(f"{_selector(run)}[3h]", at):
        labels = tuple(sorted((k, v) for k, v in item["metric"].items() if k not in _NOT_COMPARED))
        name = item["metric"]["__name__"]
        if ":" in name or name.startswith("ALERTS"):
            continue  # the rules' series, evaluated at other times live: tests/pipeline/test_replay_alerts.py
        if "histograms" in item:
            histograms = [histogram for _, histogram in item["histograms"]]
            if name.endswith("_exemplars"):
                total = None
                for histogram in histograms:
                    total = _add(total, histogram)
                exemplar_totals[labels] = total
            else:
                ended[labels] = histograms[-1]
            continue
        values = [float(value) for _, value in item["values"]]
        if name.endswith(("_total", "_bucket", "_count", "_sum")):
            ended[labels] = values[-1]
        else:
            gauges[labels] = min(values) if _GAUGE_MERGE[name] == "min" else max(values)
    return {
        "series": sorted([*ended, *gauges, *exemplar_totals]),
        "ended": ended,
        "gauges": gauges,
        "exemplar_totals": exemplar_totals,
    }


_MEASURED = frozenset(
    {
        f"{contract.series(contract.PHASE_DURATION).name}_bucket",
        f"{contract.series(contract.PHASE_DURATION).name}_sum",
        contract.series(contract.RUN_START).name,
        contract.series(contract.PHASE_STARTED).name,
    }
)
"""What each process measures itself (how long its phases took, when it started): the old run's ranks are other
processes than the live run's."""


def differences(replayed: dict[str, Any], live: dict[str, Any], *, measured: bool = True) -> list[str]:
    """Where two :func:`metrics_of` differ, one line per series (``measured=False``: but :data:`_MEASURED`)."""
    found = [f"only live: {labels}" for labels in set(live["series"]) - set(replayed["series"])]
    found += [f"only replayed: {labels}" for labels in set(replayed["series"]) - set(live["series"])]
    for part in ("ended", "gauges", "exemplar_totals"):
        for labels, value in live[part].items():
            other = replayed[part].get(labels, value)
            if not measured and dict(labels)["__name__"] in _MEASURED:
                continue
            if not _same(other, value):
                found.append(f"{part} {dict(labels)}: live {value}, replayed {other}")
    return sorted(found)


def _same(replayed: Any, live: Any) -> bool:
    """Counts and buckets exactly, sums to 1e-12 (see the module docstring)."""
    if isinstance(live, dict):
        return (
            isinstance(replayed, dict)
            and (replayed["count"], replayed.get("buckets")) == (live["count"], live.get("buckets"))
            and math.isclose(float(replayed["sum"]), float(live["sum"]), rel_tol=1e-12)
        )
    return bool(replayed == live or math.isclose(float(replayed), float(live), rel_tol=1e-12))


def samples_of(logs: VictoriaLogs, run: str) -> list[dict[str, Any]]:
    rows = logs.query(f'"rl.run.id":="{run}"')
    return sorted(
        ({k: v for k, v in row.items() if k != "_stream_id"} for row in rows), key=lambda row: row["rl.sample.id"]
    )


def spans_of(jaeger: Jaeger, run: str, start: float, end: float) -> list[Any]:
    traces = jaeger.traces(
        "otel-rl-test", operation="rl.step", tags={"rl.run.id": run}, start=start, end=end, limit=100
    )
    spans = [span for trace in traces for span in jaeger.trace(trace["traceID"])]
    return sorted(spans, key=lambda span: (span.trace_id, span.span_id))


@dataclass
class Recorded:
    """The live run as the live stack holds it, and the offline files of both runs."""

    files: Path
    old_files: Path
    metrics: dict[str, Any]
    samples: list[dict[str, Any]]
    spans: list[Any]
    rewards: int
    start: float
    end: float


@pytest.fixture(scope="module")
def recorded(stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    folder = tmp_path_factory.mktemp("replay")
    files, old_files = folder / "files", folder / "old-files"
    with private_stack(stack_binaries, folder / "live") as stack:
        start = time.time()
        common = {"histogram": "exponential", "service_name": "otel-rl-test"}
        live = start_ranks(
            RANKS, endpoint=stack.otlp_grpc_endpoint, run_id=RUN, exporter="otlp+file", output_dir=str(files), **common
        )
        old = start_ranks(
            RANKS,
            endpoint=stack.otlp_grpc_endpoint,
            run_id=OLD_RUN,
            exporter="file",
            output_dir=str(old_files),
            clock_offset_s=OLD_OFFSET_S,
            **common,
        )
        rewards, samples = _drive(live + old)
        for rank in live + old:
            assert rank.shutdown()
        end = time.time()
        prometheus = Prometheus(stack.prometheus_url)
        total = f'sum(histogram_count(rl_reward{{rl_run_id="{RUN}",rl_reward_fn="total"}}))'
        eventually(lambda: prometheus.value(total) == rewards // 2, what="every live reward in Prometheus")
        eventually(lambda: prometheus.value(f"min(rl_run_finished{_selector(RUN)})") == 1, what="the live run finished")
        logs, jaeger = VictoriaLogs(stack.victorialogs_url), Jaeger(stack.jaeger_url)
        eventually(lambda: len(samples_of(logs, RUN)) == samples // 2, what="every live sample in VictoriaLogs")
        eventually(
            lambda: len(spans_of(jaeger, RUN, start - 60, end + 60)) == STEPS * (1 + 2 * RANKS), what="the live spans"
        )
        time.sleep(3 * WINDOW_S)
        yield Recorded(
            files,
            old_files,
            metrics_of(prometheus, RUN, time.time()),
            samples_of(logs, RUN),
            spans_of(jaeger, RUN, start - 60, end + 60),
            rewards // 2,
            start,
            end,
        )


def _replay(stack: Any, *paths: Path) -> dict[str, Any]:
    return replay_into(stack, paths, interval_s=WINDOW_S)


def test_replayed_runs_equal_the_live_run_and_replaying_again_adds_nothing(
    stack_binaries: Any, recorded: Recorded, tmp_path: Path
) -> None:
    """The live run's files, replayed into a fresh stack, give its every series, sample record and span; the same run
    recorded three days in the past gives the same series; a second replay sends and writes nothing."""
    with private_stack(stack_binaries, tmp_path / "fresh") as fresh:
        summary = _replay(fresh, recorded.files, recorded.old_files)
        assert summary["problems"] == [] and summary["runs_already_in_prometheus"] == []
        prometheus = Prometheus(fresh.prometheus_url)
        logs, jaeger = VictoriaLogs(fresh.victorialogs_url), Jaeger(fresh.jaeger_url)
        total = f'sum(histogram_count(rl_reward{{rl_run_id="{RUN}",rl_reward_fn="total"}}))'
        eventually(
            lambda: prometheus.value(total, recorded.end + 30) == recorded.rewards,
            what="Prometheus to load the blocks",
            timeout_s=150,
        )
        found = differences(metrics_of(prometheus, RUN, time.time()), recorded.metrics)
        assert found == [], "\n".join(found)
        old_end = recorded.end + OLD_OFFSET_S + 60
        found = differences(metrics_of(prometheus, OLD_RUN, old_end), recorded.metrics, measured=False)
        assert found == [], "\n".join(found)
        eventually(lambda: samples_of(logs, RUN) == recorded.samples, what="the replayed samples")
        eventually(
            lambda: spans_of(jaeger, RUN, recorded.start - 60, recorded.end + 60) == recorded.spans,
            what="the replayed spans",
        )
        again = _replay(fresh, recorded.files, recorded.old_files)
        assert again["runs_already_in_prometheus"] == sorted([RUN, OLD_RUN])
        assert again["samples"]["sent"] == again["spans"]["sent"] == 0
        time.sleep(2 * WINDOW_S)
        assert differences(metrics_of(prometheus, RUN, time.time()), recorded.metrics) == []
        assert samples_of(logs, RUN) == recorded.samples


def test_a_cut_short_line_is_named_and_the_rest_replayed(
    stack_binaries: Any, recorded: Recorded, tmp_path: Path
) -> None:
    """A metrics file whose last line was cut (a killed rank) is named with the line, a file of another version is
    named, and the rest of the run is replayed."""
    copy = tmp_path / "cut"
    shutil.copytree(recorded.old_files, copy)
    metrics = sorted(copy.glob("*_rank0_*_metrics_*.jsonl"))[-1]
    text = metrics.read_bytes()
    metrics.write_bytes(text[: len(text) - 40])
    cut_line = text.count(b"\n")
    other = copy / metrics.name.replace(f"otel-rl-{__version__}_", "otel-rl-9.9.9_")
    other.write_text(json.dumps({}) + "\n")
    with private_stack(stack_binaries, tmp_path / "fresh") as fresh:
        summary = _replay(fresh, copy)
        assert summary["problems"] == [
            f"{other}: written by otel-rl 9.9.9, this is otel-rl-ops {__version__}: replay it with otel-rl-ops 9.9.9",
            f"{metrics}:{cut_line}: the line is cut short (the process stopped while writing it)",
        ]
        prometheus = Prometheus(fresh.prometheus_url)
        total = f'sum(histogram_count(rl_reward{{rl_run_id="{OLD_RUN}",rl_reward_fn="total"}}))'
        eventually(
            lambda: prometheus.value(total, recorded.end + OLD_OFFSET_S + 60) == recorded.rewards,
            what="the rest of the run in Prometheus",
            timeout_s=150,
        )


def test_the_cluster_profile_takes_the_replayed_run_through_its_bucket(
    stack_binaries: Any, recorded: Recorded, tmp_path: Path
) -> None:
    """In the TSDB cluster profile the blocks are uploaded to the bucket (with the receivers' tenant as external
    label) and served by the store gateway through the querier: the same series, samples and spans as live."""
    binaries = dataclasses.replace(stack_binaries, thanos=ensure_go_binary(versions.THANOS, home=otel_rl_home()))
    with private_stack(binaries, tmp_path / "cluster", tsdb_cluster=True) as cluster:
        summary = _replay(cluster, recorded.files)
        assert summary["problems"] == [] and summary["metrics"]["blocks"]
        prometheus = Prometheus(cluster.prometheus_url)
        total = f'sum(histogram_count(rl_reward{{rl_run_id="{RUN}",rl_reward_fn="total"}}))'
        eventually(
            lambda: prometheus.value(total, recorded.end + 30) == recorded.rewards,
            what="the store gateway to serve the uploaded blocks",
            timeout_s=150,
        )
        found = differences(metrics_of(prometheus, RUN, time.time()), recorded.metrics)
        assert found == [], "\n".join(found)
        eventually(lambda: samples_of(VictoriaLogs(cluster.victorialogs_url), RUN) == recorded.samples, what="samples")
        jaeger = Jaeger(cluster.jaeger_url)
        eventually(
            lambda: spans_of(jaeger, RUN, recorded.start - 60, recorded.end + 60) == recorded.spans, what="spans"
        )
