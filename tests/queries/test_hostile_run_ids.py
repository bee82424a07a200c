"""Run ids that break naive query strings, against the real stack: PromQL, LogsQL, the report and the demo's
read-back select the run they are asked for and no other.

Seven single-rank runs reach ``shared_stack`` (the real collector, Prometheus and VictoriaLogs): a plain victim and
six ids holding quotes, backslashes (one at the end), braces, ``$`` and Grafana variable names, a newline and a tab,
unicode, and two crafted to pull the victim's data into a query pasted together by hand. Each run records its own
number of rewards, all equal to its own value, so any other run's data in an answer shows in the count or the mean.
Their samples are LaTeX-heavy (``$\\frac{1}{2}$``, ``\\boxed{42}``, unbalanced ``$``), as math tasks produce, and the
report draws them into a PNG.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import otel_rl_contract as contract
import pytest
from otel_rl_ops import promql
from otel_rl_ops.query import Prometheus, VictoriaLogs

from demo.readback import Sources, samples, window_stats
from tests.pipeline.harness import RankProcess, eventually

REWARD = contract.series(contract.REWARDS.histogram)
REWARD_POSITIVE, REWARD_NEGATIVE, REWARD_SQUARES = map(contract.series, contract.REWARDS.sums)

VICTIM = "hostile-victim"
PROMQL_INJECTION = f'{VICTIM}",rl_run_id=~".*'
"""Pasted into ``{rl_run_id="..."}`` by hand, this selects every run, the victim's included."""
LOGSQL_INJECTION = f'{VICTIM}" OR rl.run.id:="{VICTIM}'
"""Pasted into ``rl.run.id:="..."`` by hand, this selects the victim's records."""
RUN_IDS = (
    VICTIM,
    'q"uote\\back\\slash\\',
    "br{ace}s $run ${run} $__interval",
    "new\nline\ttab",
    "ünï©ødé 实验 🚀",
    PROMQL_INJECTION,
    LOGSQL_INJECTION,
)
STEPS = 6


@dataclass(frozen=True)
class Run:
    run_id: str
    reward: float
    """Every reward of the run has this value."""
    per_step: int
    """Rewards recorded per step."""
    episodes: frozenset[str]
    """The episode ids of its samples (one top and one bottom per step)."""

    @property
    def count(self) -> int:
        return self.per_step * STEPS

    @property
    def marker(self) -> str:
        """How every prompt of the run begins."""
        return f"[run {self.reward:g}]"


def _record(index: int, run_id: str, endpoint: str) -> Run:
    """One rank of run ``run_id`` records its rewards and two LaTeX-heavy samples a step, then shuts down."""
    episodes = frozenset(f"hostile-{index}-{step}-{k}" for step in range(STEPS) for k in (0, 1))
    run = Run(run_id, float(index + 1), index + 2, episodes)
    rank = RankProcess(
        endpoint=endpoint, run_id=run_id, rank=0, world_size=1, histogram="exponential", top_k=1, bottom_k=1
    )
    try:
        for step in range(STEPS):
            rank.step(step)
            rank.rewards([run.reward] * run.per_step)
            for k in (0, 1):
                rank.sample(
                    reward=run.reward - k,
                    episode_id=f"hostile-{index}-{step}-{k}",
                    prompt=f"{run.marker} Compute $\\frac{{1}}{{2}} + \\frac{{1}}{{3}}$ and put it in \\boxed{{}}",
                    response="$\\boxed{42}$ costs $5, so $\\sqrt{x} { \\left( $$ }",
                    target="$\\frac{5}{6}$",
                )
            time.sleep(0.4)
        rank.step(STEPS)
        assert rank.flush()
        assert rank.shutdown()
    finally:
        if rank.alive():
            rank.kill()
    return run


@pytest.fixture(scope="module")
def hostile_runs(shared_stack: Any) -> dict[str, Run]:
    with ThreadPoolExecutor(len(RUN_IDS)) as pool:
        runs = list(pool.map(_record, range(len(RUN_IDS)), RUN_IDS, [shared_stack.otlp_grpc_endpoint] * len(RUN_IDS)))
    by_id = {run.run_id: run for run in runs}
    # Wait with queries that hold no run id: label values come back decoded, so they are compared as they are.
    prometheus, logs = Prometheus(shared_stack.prometheus_url), VictoriaLogs(shared_stack.victorialogs_url)
    eventually(
        lambda: all(
            prometheus.by_label(f"sum by (rl_run_id) (histogram_count({REWARD.name}))", "rl_run_id").get(run.run_id)
            == run.count
            for run in runs
        ),
        what="every run's rewards in Prometheus",
    )
    eventually(
        lambda: all(
            {r["rl.episode.id"] for r in logs.query('rl.episode.id:"hostile-"*') if r.get("rl.run.id") == run.run_id}
            == run.episodes
            for run in runs
        ),
        what="every run's samples in VictoriaLogs",
    )
    return by_id


def test_a_naive_query_string_would_pull_the_victims_data(shared_stack: Any, hostile_runs: dict[str, Run]) -> None:
    """The crafted ids are real attacks: pasted into a query by hand, they select the victim's series and records
    (so the tests below would see the victim's data if anything pasted them)."""
    prometheus = Prometheus(shared_stack.prometheus_url)
    naive = prometheus.query(f'{REWARD_POSITIVE.name}{{rl_run_id="{PROMQL_INJECTION}"}}')
    assert VICTIM in {item["metric"]["rl_run_id"] for item in naive}
    records = VictoriaLogs(shared_stack.victorialogs_url).query(f'rl.run.id:="{LOGSQL_INJECTION}"')
    assert records and {record["rl.run.id"] for record in records} == {VICTIM}


@pytest.mark.parametrize("run_id", RUN_IDS, ids=repr)
def test_promql_selects_exactly_the_run(shared_stack: Any, hostile_runs: dict[str, Run], run_id: str) -> None:
    """A selector built by otel_rl_ops.promql returns the run's own series only; its count and mean are the run's."""
    run, prometheus = hostile_runs[run_id], Prometheus(shared_stack.prometheus_url)
    series = prometheus.query(promql.selector(REWARD_POSITIVE, rl_run_id=run_id))
    assert series and {item["metric"]["rl_run_id"] for item in series} == {run_id}
    selector = promql.matchers(rl_run_id=run_id, rl_reward_fn="total")
    assert prometheus.value(promql.count(REWARD, selector, window=None)) == run.count
    assert prometheus.value(promql.mean(contract.REWARDS, selector, window=None)) == pytest.approx(
        run.reward, rel=1e-12
    )


@pytest.mark.parametrize("run_id", RUN_IDS, ids=repr)
def test_logsql_selects_exactly_the_run(shared_stack: Any, hostile_runs: dict[str, Run], run_id: str) -> None:
    """The exact filter and the stream filter built by otel_rl_ops.promql return the run's own samples, all of them."""
    run, logs = hostile_runs[run_id], VictoriaLogs(shared_stack.victorialogs_url)
    for query in (promql.logsql_exact("rl.run.id", run_id), promql.logsql_stream("rl.run.id", run_id)):
        records = logs.query(query)
        assert {record["rl.run.id"] for record in records} == {run_id}, query
        assert {record["rl.episode.id"] for record in records} == run.episodes, query


@pytest.mark.parametrize("run_id", RUN_IDS, ids=repr)
def test_demo_readback_reads_the_run(shared_stack: Any, hostile_runs: dict[str, Run], run_id: str) -> None:
    """The demo's summary queries count the run's rewards and find its samples, nobody else's."""
    run = hostile_runs[run_id]
    sources = Sources(shared_stack.prometheus_url, shared_stack.victorialogs_url, run_id)
    now = time.time()
    stats = window_stats(sources, "total", None, now, since=now - 600)
    assert stats["count"] == run.count and stats["mean"] == pytest.approx(run.reward, rel=1e-12)
    assert stats["p50"] == run.reward  # clamped to the exact extremes, which are the run's value
    for selection in ("top", "bottom"):
        found = samples(sources, selection, 3)
        assert found and all(record["prompt"].startswith(run.marker) for record in found), (selection, found)


@pytest.mark.parametrize("run_id", RUN_IDS, ids=repr)
def test_report_shows_the_run_with_its_samples_drawn_literally(
    shared_stack: Any, hostile_runs: dict[str, Run], run_id: str, tmp_path: Path
) -> None:
    """``otel-rl report`` of the run: every dashboard query runs with the run id substituted (``$`` in it
    included), the reward percentiles are the run's value only, the samples table holds the run's samples only, and
    their LaTeX-heavy texts are drawn into the PNG as text (matplotlib would parse ``$...$`` as mathtext and fail
    on ``\\boxed``); the HTML page carries them verbatim."""
    pytest.importorskip("matplotlib")
    from otel_rl_ops.report.render import build_report, write_report

    run = hostile_runs[run_id]
    report = build_report(
        prometheus_url=shared_stack.prometheus_url,
        victorialogs_url=shared_stack.victorialogs_url,
        run_id=run_id,
        scrape_interval_s=1.0,
        lookback_s=3600,
    )
    (reward,) = [p for p in report.panels if p.panel.title == "Reward (total): mean and percentiles"]
    # The percentiles are clamped to the exact min and max of their window: the run's value, had no other run's
    # rewards (each of another value) come in. (The mean's window rates extrapolate at the run's edges.)
    percentiles = [v for series in reward.series if series.legend != "mean" for _, v in series.finite()]
    assert percentiles and set(percentiles) == {run.reward}
    (table,) = report.tables
    assert table.rows and all(row["prompt"].startswith(run.marker) for row in table.rows)
    png, page = tmp_path / "report.png", tmp_path / "report.html"
    write_report(report, png)
    write_report(report, page)
    assert png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 50_000
    assert "\\boxed{42}" in page.read_text(encoding="utf-8")
