"""Comparing runs through the real stack: two runs and a two-seed group, started one after the other, each of two rank
processes through the real collector into Prometheus, VictoriaLogs and Jaeger; then ``otel-rl report`` compares them
by step, and every value it read from the "RL compare" dashboard's queries is checked against what the ranks
recorded at that step.

The ranks keep a step's values apart from the next one's as a trainer with steps longer than the export and
aggregation intervals does: each step is declared and seen in Prometheus before its values are recorded, and its
values are seen there before the next step is declared, so the flush that first shows step s + 1 holds exactly the
values of steps up to s (docs/dashboards.md, "Comparing runs"). Run B records classic histograms, the others native
ones; each run its own values, so a query that mixes runs or steps fails.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import otel_rl_contract as contract
import pytest
from otel_rl_ops import promql
from otel_rl_ops.query import Jaeger, Prometheus, VictoriaLogs
from otel_rl_ops.report.compare import Comparison, build_comparison, compared_panels, differences, samples_query
from otel_rl_ops.report.compare_render import render_html, render_png, side_by_side, table_rows

from otel_rl import TelemetryConfig
from otel_rl._export.console import classic_quantile, native_quantile, shown_quantile
from otel_rl._pipeline import layouts
from otel_rl._record.buckets import DEFAULT_SCALE, ExplicitLayout
from tests.dashboards.conftest import COMPARE_DASHBOARD
from tests.pipeline.harness import RankProcess, eventually, start_ranks
from tests.reference import bucket_counts, exponential_sides

pytestmark = pytest.mark.stack

RANKS = 2
STEPS = 4
ROLLOUTS = 12
TOKENS = 6
SUFFIX = uuid.uuid4().hex[:6]
GROUP = f"seeds-{SUFFIX}"


@dataclass
class RunPlan:
    """One run of the comparison: what it is and what its ranks recorded, by step."""

    run_id: str
    seed: int
    histogram: str
    price: float
    group: str | None = None
    recorded: dict[int, dict[str, list[float]]] = field(default_factory=dict)
    """Step -> what the run's ranks recorded in it: ``total``, ``correctness``, ``lag``, ``length``, ``entropy``,
    ``kl`` (k3 per token), ``generated``, ``trained``."""


PLANS = [
    RunPlan(f"cmp-a-{SUFFIX}", 1, "exponential", 2.0),
    RunPlan(f"cmp-b-{SUFFIX}", 2, "explicit", 3.0),
    RunPlan(f"cmp-g1-{SUFFIX}", 3, "exponential", 1.5, GROUP),
    RunPlan(f"cmp-g2-{SUFFIX}", 4, "exponential", 1.5, GROUP),
]


SPREAD = np.array([-1.0, -0.75, -0.5, -0.375, -0.25, -0.125, 0.125, 0.25, 0.375, 0.5, 0.75, 1.0])
"""The shape of a rank's total rewards in a step: two ranks' smallest and largest apart from the rest, so that the
p10 and p90 estimates lie strictly inside the step's range (the extremes that clamp them cannot matter)."""


def _values(rng: np.random.Generator, step: int, rank: int, plan: RunPlan) -> dict[str, Any]:
    """One rank's step: total rewards that rise with the step (binary fractions: exact sums), integer lags,
    lengths, entropy and log-probabilities in eighths."""
    total = 0.25 * step + 0.125 * plan.seed + SPREAD * (1 + 0.5 * rank) + rank / 64
    correctness = (rng.random(ROLLOUTS) < 0.2 + 0.15 * step).astype(float)
    lags = rng.integers(0, 3 + step + plan.seed, (ROLLOUTS, TOKENS))
    lengths = rng.integers(10, 200, ROLLOUTS) + 10 * step
    entropy = np.round(rng.random((ROLLOUTS, TOKENS)) * 16) / 8
    logprobs = -np.round(rng.random((ROLLOUTS, TOKENS)) * 16) / 8
    inference = logprobs - np.round(rng.random((ROLLOUTS, TOKENS)) * 4) / 8 * (1 + step % 2)
    return {
        "total": total,
        "correctness": correctness,
        "lags": lags,
        "lengths": lengths,
        "entropy": entropy,
        "logprobs": logprobs,
        "inference": inference,
        "generated": int(lengths.sum()),
        "trained": int(lengths.sum() // 2),
        "rank": rank,
    }


def _record(rank: RankProcess, plan: RunPlan, step: int, values: dict[str, Any]) -> None:
    """What one rank records in a step, inside its generate phase; rank 0 keeps two samples: one of a prompt every
    run sees at this step, one of a prompt of this run alone."""
    rank.phase_enter("generate")
    rank.rewards(values["total"].tolist())
    rank.rewards(values["correctness"].tolist(), fn="correctness")
    current = 100 + step
    rank.staleness((current - values["lags"]).tolist(), current)
    rank.rollouts(
        mask=np.ones((ROLLOUTS, TOKENS), dtype=bool).tolist(),
        response_lengths=values["lengths"].tolist(),
        entropy=values["entropy"].tolist(),
        logprobs=values["logprobs"].tolist(),
        inference_logprobs=values["inference"].tolist(),
    )
    rank.tokens(generated=values["generated"], trained=values["trained"])
    if values["rank"] == 0:
        rank.sample(prompt=f"shared prompt {step}", response=f"{plan.run_id} answers {step}", reward=1.0)
        rank.sample(prompt=f"{plan.run_id} alone {step}", response="only here", reward=0.0)
    rank.phase_leave()


def _merge(found: dict[str, list[float]], values: dict[str, Any]) -> None:
    d = values["logprobs"] - values["inference"]
    for name, array in (
        ("total", values["total"]),
        ("correctness", values["correctness"]),
        ("lag", values["lags"].ravel()),
        ("length", values["lengths"]),
        ("entropy", values["entropy"].ravel()),
        ("kl", (np.exp(d) - 1 - d).ravel()),
        ("generated", [values["generated"]]),
        ("trained", [values["trained"]]),
    ):
        found.setdefault(name, []).extend(float(v) for v in np.asarray(array).ravel())


def _count(prometheus: Prometheus, run_id: str) -> float:
    selector = promql.matchers(rl_run_id=run_id, rl_rank="", rl_reward_fn="total")
    return prometheus.value(promql.count(contract.series(contract.REWARDS.histogram), selector, window=None)) or 0.0


def _step_seen(prometheus: Prometheus, run_id: str) -> float | None:
    return prometheus.value(f"max({promql.selector(contract.series(contract.STEP), rl_run_id=run_id, rl_rank='')})")


def _shared_prompts_kept(logs: VictoriaLogs, run_id: str) -> int:
    """How many samples of the shared prompts VictoriaLogs holds for ``run_id`` (resent records counted once)."""
    found = logs.query(
        f'{promql.logsql_stream(contract.RUN_ID, run_id)} prompt:"shared prompt" '
        f"| stats count_uniq({promql.quote(contract.SAMPLE_ID)}) as samples"
    )
    return int(found[0]["samples"]) if found else 0


def _run(stack: Any, plan: RunPlan) -> None:
    """Start the run's ranks, drive its steps (each declared and seen, then recorded and seen), stop them."""
    prometheus = Prometheus(stack.prometheus_url)
    rng = np.random.default_rng(plan.seed)
    extra = {"group": plan.group} if plan.group else {}
    ranks = start_ranks(
        RANKS,
        endpoint=stack.otlp_grpc_endpoint,
        run_id=plan.run_id,
        histogram=plan.histogram,
        gpus_per_rank=1.0,
        gpu_hour_price=plan.price,
        **extra,
    )
    recorded = 0
    try:
        for step in range(STEPS + 1):
            for rank in ranks:
                rank.step(step)
                assert rank.flush()
            eventually(lambda: _step_seen(prometheus, plan.run_id) == step, what=f"{plan.run_id} at step {step}")
            if step == STEPS:
                break
            found: dict[str, list[float]] = {}
            for rank in ranks:
                values = _values(rng, step, rank.rank, plan)
                _record(rank, plan, step, values)
                _merge(found, values)
                assert rank.flush()
            plan.recorded[step] = found
            recorded += len(found["total"])
            eventually(lambda: _count(prometheus, plan.run_id) == recorded, what=f"{plan.run_id} step {step} values")
    finally:
        for rank in ranks:
            rank.shutdown()


@pytest.fixture(scope="module")
def compared(shared_stack: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Comparison, Path]:
    """The four runs, one after the other; then the comparison of A (the baseline) and B with the group, and its
    rendering."""
    for plan in PLANS:
        _run(shared_stack, plan)
    logs = VictoriaLogs(shared_stack.victorialogs_url)
    eventually(
        lambda: all(_shared_prompts_kept(logs, plan.run_id) == STEPS for plan in PLANS),
        what="every run's samples of the shared prompts",
    )
    comparison = build_comparison(
        prometheus_url=shared_stack.prometheus_url,
        victorialogs_url=shared_stack.victorialogs_url,
        run_ids=[PLANS[0].run_id, PLANS[1].run_id],
        groups=[GROUP],
        baseline=PLANS[0].run_id,
        every=1,
        dashboard=COMPARE_DASHBOARD,
        lookback_s=3600,
        now=time.time(),
    )
    return comparison, tmp_path_factory.mktemp("compare")


def _quantile(plan: RunPlan, values: list[float], q: float, *, lag: bool = False) -> float:
    """Prometheus's estimate of the ``q`` quantile of ``values`` from the run's buckets (the console's reference of
    ``histogram_quantile``), as the panel shows it; asserted strictly inside the values' range, so that the
    extremes that clamp it (held a while after each value) cannot change it."""
    metric = contract.STALENESS if lag else contract.REWARDS
    if plan.histogram == "exponential":
        zero, negative, positive = exponential_sides(values, DEFAULT_SCALE)
        estimate = native_quantile(q, scale=DEFAULT_SCALE, zero_count=zero, positive=positive, negative=negative)
    else:
        layout = layouts(TelemetryConfig(histogram="explicit", exporter="none").resolved).of(metric)
        assert isinstance(layout, ExplicitLayout)
        bounds = layout.bounds
        estimate = classic_quantile(q, bounds, bucket_counts(values, bounds))
    shown = shown_quantile(estimate, minimum=min(values), maximum=max(values), integer=lag)
    if not lag:
        assert min(values) < estimate < max(values), (q, estimate, min(values), max(values))
    return shown


def _generate_seconds(jaeger: Jaeger, run_id: str, step: int, start: float, end: float) -> float | None:
    """The seconds of the run's ``generate`` spans of ``step``, summed over its ranks (their nanosecond times); None
    until every rank's span is in Jaeger."""
    found = jaeger.traces(
        "otel-rl-test", operation="generate", tags={"rl.run.id": run_id}, start=start - 120, end=end + 60, limit=100
    )
    spans = [
        span
        for trace_id in sorted({trace["traceID"] for trace in found})
        for span in jaeger.trace(trace_id)
        if span.name == "generate" and span.attributes.get("rl.step") == step
    ]
    return math.fsum(span.duration_s for span in spans) if len(spans) == RANKS else None


def _expected(
    plan: RunPlan, step: int, prometheus: Prometheus, jaeger: Jaeger, window: Any, first_flush: float
) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every runs panel's value for ``plan`` over the window of ``step``, from what its ranks recorded (the phase
    time from its spans in Jaeger, the seconds between the window's flushes from Prometheus, the cost from the
    GPU-seconds the ranks counted)."""
    got = plan.recorded[step]
    start = window.start
    if start is None:
        start = prometheus.value(
            f"min({promql.selector(contract.series(contract.RUN_START), rl_run_id=plan.run_id, rl_rank='')})",
            window.end,
        )
    seconds = window.end - start
    generate = eventually(
        lambda: _generate_seconds(jaeger, plan.run_id, step, first_flush, window.end),
        what=f"the generate spans of {plan.run_id} step {step} in Jaeger",
    )
    gpu = prometheus.value(
        f"sum({promql.selector(contract.series(contract.GPU_SECONDS), rl_run_id=plan.run_id, rl_rank='')})", window.end
    )
    assert gpu is not None

    def mean(name: str) -> float:
        return math.fsum(got[name]) / len(got[name])

    return {
        "Reward (total): mean": {(): mean("total")},
        "Reward (total): p10": {(): _quantile(plan, got["total"], 0.1)},
        "Reward (total): p50": {(): _quantile(plan, got["total"], 0.5)},
        "Reward (total): p90": {(): _quantile(plan, got["total"], 0.9)},
        "Mean reward by reward function": {
            (("rl_reward_fn", "correctness"),): mean("correctness"),
            (("rl_reward_fn", "total"),): mean("total"),
        },
        "Ground-truth reward (mean)": {(): mean("correctness")},
        "Staleness: mean": {(): mean("lag")},
        "Staleness: p99": {(): _quantile(plan, got["lag"], 0.99, lag=True)},
        "Response length: mean": {(): mean("length")},
        "Entropy per token: mean": {(): mean("entropy")},
        "Mismatch KL (k3): mean per token": {(): mean("kl")},
        "Time split by phase": {(("rl_phase_name", "generate"),): generate / (seconds * RANKS)},
        "Tokens generated per second": {(): math.fsum(got["generated"]) / seconds},
        "Tokens trained per second": {(): math.fsum(got["trained"]) / seconds},
        "Cost so far": {(): gpu / 3600 * plan.price},
    }


def test_every_comparison_value_is_what_the_ranks_recorded_at_that_step(
    compared: tuple[Comparison, Path], shared_stack: Any
) -> None:
    """Each runs panel's query over each step window of each run (two lines and the group's two seeds, native and
    classic histograms) gives what that run's ranks recorded in that step: means, rates, shares and cost exactly (to
    float rounding), quantiles as Prometheus estimates them from the step's buckets."""
    comparison, _ = compared
    prometheus, jaeger = Prometheus(shared_stack.prometheus_url), Jaeger(shared_stack.jaeger_url)
    runs = {run.run_id: run for run in comparison.all_runs}
    assert sorted(runs) == sorted(plan.run_id for plan in PLANS)
    assert [len(panel.curves) > 0 for panel in comparison.panels] == [True] * 15
    checked = 0
    for plan in PLANS:
        windows = comparison.windows[plan.run_id]
        assert [(w.first, w.last) for w in windows] == [(s, s) for s in range(STEPS)]
        for window in windows:
            expected = _expected(plan, window.first, prometheus, jaeger, window, runs[plan.run_id].first_flush)
            for panel in comparison.panels:
                for labels, value in expected[panel.panel.title].items():
                    curve = panel.curve(plan.run_id, labels)
                    assert curve is not None, (panel.panel.title, plan.run_id, labels)
                    got = curve.values.get(window.first)
                    assert got == pytest.approx(value, rel=1e-9, abs=1e-12), (
                        panel.panel.title,
                        plan.run_id,
                        window,
                        labels,
                    )
                    checked += 1
    assert checked == len(PLANS) * STEPS * 16


def test_the_group_is_its_seeds_mean_and_range_and_the_table_holds_the_differences(
    compared: tuple[Comparison, Path],
) -> None:
    """The group's band is the mean, min and max of its two seeds' values at each step; the table of differences
    holds, at the steps every run reached, the baseline's value and each run's and the group's minus it."""
    comparison, _ = compared
    seeds = [plan.run_id for plan in PLANS if plan.group]
    (a, b) = (PLANS[0].run_id, PLANS[1].run_id)
    assert comparison.matching_steps() == list(range(STEPS))
    rows = table_rows(comparison)
    assert len(rows) == (len(comparison.panels) + 1) * STEPS  # the functions' panel has two lines: total, correctness
    for panel in comparison.panels:
        (band,) = [found for found in comparison.bands(panel) if found.labels == panel.splits[0]]
        for step in range(STEPS):
            values = [panel.curve(seed, panel.splits[0]).values[step] for seed in seeds]  # type: ignore[union-attr]
            assert band.mean[step] == pytest.approx(sum(values) / 2, rel=1e-12)
            assert (band.low[step], band.high[step], band.runs[step]) == (min(values), max(values), 2)
        curve_a, curve_b = panel.curve(a, panel.splits[0]), panel.curve(b, panel.splits[0])
        assert curve_a is not None and curve_b is not None
        for row in differences(comparison, panel):
            if row.labels != panel.splits[0]:
                continue
            step = row.first
            assert (row.baseline, row.values[b][0]) == (curve_a.values[step], curve_b.values[step])
            assert row.values[b][1] == pytest.approx(curve_b.values[step] - curve_a.values[step], rel=1e-12, abs=1e-15)
            assert row.values[f"group {GROUP}"][1] == pytest.approx(band.mean[step] - curve_a.values[step], abs=1e-12)


def test_the_same_prompt_lines_up_across_runs(compared: tuple[Comparison, Path]) -> None:
    """The samples side by side hold the prompts every run kept a sample of, each run's own response beside it, and
    no prompt that one run alone saw."""
    comparison, _ = compared
    runs, prompts = side_by_side(comparison)
    assert sorted(runs) == sorted(plan.run_id for plan in PLANS)
    assert sorted(found["prompt"] for found in prompts) == [f"shared prompt {step}" for step in range(STEPS)]
    for found in prompts:
        step = int(found["prompt"].rsplit(" ", 1)[1])
        for plan in PLANS:
            row = found[plan.run_id]
            assert (row["response"], int(row["rl.step"])) == (f"{plan.run_id} answers {step}", step)


def test_the_dashboards_queries_answer_grafana_for_every_run(
    compared: tuple[Comparison, Path], shared_stack: Any
) -> None:
    """As Grafana asks them (all selected runs in one range query over the time range, ``$__rate_interval``), each
    runs panel's query answers every run with both halves, its step and its value; the samples query, with the runs
    as Grafana's double-quoted list, answers the shared prompts only."""
    comparison, _ = compared
    prometheus = Prometheus(shared_stack.prometheus_url)
    ids = [plan.run_id for plan in PLANS]
    regex = "|".join(promql.exact_regex(run_id) for run_id in ids)
    start = min(run.first_flush for run in comparison.all_runs)
    end = max(run.points[-1][0] for run in comparison.all_runs)
    for panel, query in compared_panels(COMPARE_DASHBOARD):
        expr = query.replace('"$runs"', promql.quote(regex)).replace("$__rate_interval", "4s")
        found = {
            (item["metric"]["rl_run_id"], item["metric"]["field"])
            for item in prometheus.range(expr, start, end, step=1.0)
        }
        assert found == {(run_id, half) for run_id in ids for half in ("step", "value")}, panel.title
    logsql = samples_query(COMPARE_DASHBOARD).replace("${runs:doublequote}", ",".join(f'"{i}"' for i in ids))
    rows = VictoriaLogs(shared_stack.victorialogs_url).query(logsql, start=start - 60, end=end + 60)
    assert {row["prompt"] for row in rows} == {f"shared prompt {step}" for step in range(STEPS)}


def test_the_comparison_renders_to_a_png_and_a_page(compared: tuple[Comparison, Path]) -> None:
    """The comparison draws to a PNG (a plot per signal, the table, the samples) and an HTML page holding the PNG,
    the whole table of differences and every shared prompt's responses."""
    pytest.importorskip("matplotlib")
    comparison, folder = compared
    png = render_png(comparison, folder / "compare.png")
    assert png.startswith(b"\x89PNG") and len(png) > 100_000
    render_html(comparison, folder / "compare.html", png=png)
    page = (folder / "compare.html").read_text(encoding="utf-8")
    assert "data:image/png;base64," in page and f"{PLANS[1].run_id} answers 3" in page
    assert page.count("<tr><td>") >= len(table_rows(comparison))
