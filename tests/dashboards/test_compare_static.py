"""The "RL compare" dashboard checked without a running stack: what its queries select, that a signal's group and
delta panels ask what its runs panel asks, and every query's exact value on synthetic runs in promtool."""

from __future__ import annotations

import json
import math
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import otel_rl_contract as contract
import pytest
import yaml

from otel_rl._export.console import classic_quantile, native_quantile, shown_quantile
from tests.dashboards.conftest import COMPARE_DASHBOARD, dashboard_targets
from tests.dashboards.test_static import _layout
from tests.pipeline.harness import expected_buckets
from tests.reference import bucket_counts, exponential_index, exponential_sides

RUNS = 'rl_run_id=~"$runs"'
GROUP = 'rl_run_group="$group"'


def _panels() -> list[dict[str, Any]]:
    return [p for p in json.loads(COMPARE_DASHBOARD.read_text(encoding="utf-8"))["panels"] if p["type"] != "row"]


def _runs_panels() -> dict[str, str]:
    """Each signal's runs panel (an XY chart): title -> its one query."""
    return {p["title"]: p["targets"][0]["expr"] for p in _panels() if p["type"] == "xychart"}


def test_every_selector_names_the_compared_runs_and_the_aggregated_side() -> None:
    """Every Prometheus selector of the compare dashboard selects the chosen runs (``rl_run_id=~"$runs"``) or one
    seed group (``rl_run_group="$group"``), and the aggregated series (``rl_rank=""``); the samples query names the
    runs in Grafana's double-quoted list format."""
    for _, panel, target in dashboard_targets((COMPARE_DASHBOARD,)):
        if target["datasource"]["type"] != "prometheus":
            assert target["expr"].count("{rl.run.id in (${runs:doublequote})}") == 2, panel["title"]
            continue
        selectors = re.findall(r"[a-z_]+\{([^}]*)\}", target["expr"])
        assert selectors, panel["title"]
        for selector in selectors:
            assert (RUNS in selector) != (GROUP in selector) and 'rl_rank=""' in selector, (panel["title"], selector)


def test_group_and_delta_panels_ask_what_the_runs_panel_asks() -> None:
    """A signal's group panel is its runs panel's query over one group's runs, its delta panel the same query over
    the same runs: the transformations differ, the numbers do not. Signals split by another label (per reward
    function, per phase) have neither."""
    by_id = {p["id"]: p for p in _panels()}
    runs = {p["id"]: p for p in by_id.values() if p["type"] == "xychart"}
    for panel_id, panel in runs.items():
        query = panel["targets"][0]["expr"]
        split = len(panel["transformations"][1]["options"]["fields"]) > 1
        group, delta = by_id.get(100 + panel_id), by_id.get(200 + panel_id)
        if split:
            assert group is None and delta is None, panel["title"]
            continue
        assert group is not None and delta is not None, panel["title"]
        assert group["targets"][0]["expr"] == query.replace(RUNS, GROUP), panel["title"]
        assert delta["targets"][0]["expr"] == query, panel["title"]


# Synthetic runs, one point per 15 s, each step one point: "a" and "b" (native histograms, group "g") and "c"
# (classic, no group), started at different times. Per step each run records 10 total rewards, 10 correctness rewards
# (its ground truth), 10 tokens at one lag, 10 responses, 100 tokens of entropy and of mismatch KL (k3), tokens
# generated and trained, 4 generate spans of one duration over its ranks, GPU-seconds at a price; each run its own
# values, so a query that mixes runs fails. Runs "a" and "c" change their total rewards at point _SWITCH, from 10 equal
# values (2 and -2) to the mix _MIX, whose p10, p50 and p90 fall on bucket bounds of both forms (so the estimates are
# exact for the classic run): a query that reads more than its window sees other quantiles.
_MIX = {0.25: 1, 0.5: 4, 1.0: 4, 2.0: 1}
_SWITCH = 20
_RUNS: dict[str, dict[str, Any]] = {
    "a": {"start": 0, "form": "native", "group": "g", "total": 2.0, "truth": 0.5, "lag": 3.0, "length": 128.0,
          "entropy": 0.5, "kl": 0.125, "generated": 150, "trained": 75, "span_s": 1.5, "ranks": 2, "gpu_s": 30,
          "price": 2.0, "switch": True},
    "b": {"start": 6, "form": "native", "group": "g", "total": 0.5, "truth": 0.25, "lag": 5.0, "length": 256.0,
          "entropy": 0.25, "kl": 0.0625, "generated": 300, "trained": 150, "span_s": 3.0, "ranks": 2, "gpu_s": 60,
          "price": 3.0, "switch": False},
    "c": {"start": 3, "form": "classic", "group": "", "total": -2.0, "truth": 0.0, "lag": 2.0, "length": 64.0,
          "entropy": 1.0, "kl": 0.5, "generated": 60, "trained": 30, "span_s": 0.75, "ranks": 1, "gpu_s": 15,
          "price": 1.0, "switch": True},
}  # fmt: skip
_POINTS = 40
_INTERVAL_S = 15
_REWARD = contract.series(contract.REWARDS.histogram).name


def _recorded(run: dict[str, Any], point: int) -> dict[tuple[str, str], list[float]]:
    """What the run recorded between point ``point - 1`` and ``point``, by (histogram series, extra labels)."""
    if point <= run["start"]:
        return {}
    total = (
        [v for v, n in _MIX.items() for _ in range(n)] if run["switch"] and point >= _SWITCH else [run["total"]] * 10
    )
    return {
        (_REWARD, ',rl_reward_fn="total"'): total,
        (_REWARD, ',rl_reward_fn="correctness"'): [run["truth"]] * 10,
        (contract.series(contract.STALENESS.histogram).name, ""): [run["lag"]] * 10,
        (contract.series(contract.RESPONSE_LENGTHS.histogram).name, ""): [run["length"]] * 10,
        (contract.series(contract.ENTROPY.histogram).name, ""): [run["entropy"]] * 100,
        (contract.series(contract.MISMATCH_KL.histogram).name, ',rl_kl_estimator="k3"'): [run["kl"]] * 100,
    }


def _distribution(metric: str) -> contract.Distribution:
    """The distribution whose histogram's series is ``metric``."""
    (distribution,) = [d for d in contract.DISTRIBUTIONS if contract.series(d.histogram).name == metric]
    return distribution


def _native_point(metric: str, values: Counter[float]) -> str:
    """promtool's notation of a native histogram holding ``values`` (value -> count), at the scale the library uses
    for ``metric`` (Prometheus's bucket ``i`` is OpenTelemetry's ``i - 1``)."""
    scale = _layout(_distribution(metric), "exponential").scale
    sides: tuple[Counter[int], Counter[int]] = (Counter(), Counter())
    zero = 0
    for value, count in values.items():
        if value == 0:
            zero += count
        else:
            sides[value > 0][exponential_index(abs(value), scale)] += count
    parts = [f"z_bucket:{zero}"] if zero else []
    for prefix, side in (("n_", sides[0]), ("", sides[1])):
        if side:
            low, high = min(side), max(side)
            counts = " ".join(str(side[index]) for index in range(low, high + 1))
            parts.append(f"{prefix}offset:{low + 1} {prefix}buckets:[{counts}]")
    total = sum(value * count for value, count in values.items())
    return f"{{{{schema:{scale} count:{values.total()} sum:{total:g} {' '.join(parts)}}}}}"


def _series(name: str, run: dict[str, Any]) -> list[dict[str, str]]:
    """Every series of run ``name``, point by point (``_`` before it began)."""
    labels = f'job="trainer",rl_role="trainer",rl_rank="",rl_run_id="{name}"'
    if run["group"]:
        labels += f',rl_run_group="{run["group"]}"'
    points: dict[str, list[str]] = {}

    def put(series: str, point: int, value: str) -> None:
        points.setdefault(series, ["_"] * _POINTS)[point] = value

    kept: dict[tuple[str, str], Counter[float]] = {}
    for point in range(run["start"], _POINTS):
        recorded = _recorded(run, point)
        for key in _recorded(run, _POINTS - 1):
            kept.setdefault(key, Counter()).update(recorded.get(key, []))
        for (metric, extra), values in kept.items():
            distribution = _distribution(metric)
            at = f"{labels}{extra}"
            if run["form"] == "native":
                put(f"{metric}{{{at}}}", point, _native_point(metric, values))
            else:
                bounds = _layout(_distribution(metric), "explicit").bounds
                for le, n in expected_buckets(list(values.elements()), bounds).items():
                    put(f'{metric}_bucket{{{at},le="{le}"}}', point, f"{n:g}")
                put(f"{metric}_count{{{at}}}", point, str(values.total()))
                put(f"{metric}_sum{{{at}}}", point, f"{sum(v * n for v, n in values.items()):g}")
            for part, sign in ((distribution.positive, 1), (distribution.negative, -1)):
                if part is not None:
                    parts = sum(max(sign * v, 0) * n for v, n in values.items())
                    put(f"{contract.series(part).name}{{{at}}}", point, f"{parts:g}")
            if recorded.get((metric, extra)):
                put(
                    f"{contract.series(distribution.maximum).name}{{{at}}}",
                    point,
                    f"{max(recorded[(metric, extra)]):g}",
                )
                put(
                    f"{contract.series(distribution.minimum).name}{{{at}}}",
                    point,
                    f"{min(recorded[(metric, extra)]):g}",
                )
        steps = point - run["start"]
        for gauge, extra, value in (
            (contract.STEP, "", steps),
            (contract.RUN_START, "", run["start"] * _INTERVAL_S),
            (contract.RANKS_EXPECTED, "", run["ranks"]),
            (contract.TOKENS_GENERATED, "", run["generated"] * steps),
            (contract.TOKENS_TRAINED, "", run["trained"] * steps),
            (contract.GPU_SECONDS, "", run["gpu_s"] * steps),
            (contract.GPU_HOUR_PRICE, "", run["price"]),
            (contract.GROUND_TRUTH, ',rl_reward_fn="correctness"', 1),
        ):
            put(f"{contract.series(gauge).name}{{{labels}{extra}}}", point, f"{value:g}")
        phase = f'{labels},rl_phase_name="generate",span_name="generate"'
        put(f"{contract.series(contract.PHASE_DURATION).sum}{{{phase}}}", point, f"{4 * run['span_s'] * steps:g}")
    return [{"series": series, "values": " ".join(values)} for series, values in points.items()]


def _window(run: dict[str, Any], at_s: int, key: tuple[str, str]) -> list[float]:
    """The values the run recorded into ``key`` in the minute up to ``at_s`` (after the point a minute before)."""
    last = at_s // _INTERVAL_S
    return [v for point in range(last - 3, last + 1) for v in _recorded(run, point).get(key, [])]


def _quantile(run: dict[str, Any], metric: str, values: list[float], q: float, *, integer: bool = False) -> float:
    """The ``q`` quantile of ``values`` as the panel shows it: Prometheus's estimate from the run's buckets
    (``otel_rl._export.console``'s reference of ``histogram_quantile``, checked against PromQL in
    tests/dashboards/test_console_quantiles.py), rounded for integers, clamped to the values' min and max."""
    if run["form"] == "native":
        scale = _layout(_distribution(metric), "exponential").scale
        zero, negative, positive = exponential_sides(values, scale)
        estimate = native_quantile(q, scale=scale, zero_count=zero, positive=positive, negative=negative)
    else:
        bounds = _layout(_distribution(metric), "explicit").bounds
        estimate = classic_quantile(q, bounds, bucket_counts(values, bounds))
    return shown_quantile(estimate, minimum=min(values), maximum=max(values), integer=integer)


def _expected(run: dict[str, Any], at_s: int) -> dict[str, dict[str, float]]:
    """Each runs panel's value for ``run`` at ``at_s`` seconds over a 1-minute window: by title, the series' extra
    labels -> value."""
    points = at_s // _INTERVAL_S - run["start"]
    seconds = min(60, points * _INTERVAL_S)
    steps = seconds / _INTERVAL_S
    total = _window(run, at_s, (_REWARD, ',rl_reward_fn="total"'))
    lag = contract.series(contract.STALENESS.histogram).name
    lags = _window(run, at_s, (lag, ""))
    return {
        "Reward (total): mean": {"": sum(total) / len(total)},
        "Reward (total): p10": {"": _quantile(run, _REWARD, total, 0.1)},
        "Reward (total): p50": {"": _quantile(run, _REWARD, total, 0.5)},
        "Reward (total): p90": {"": _quantile(run, _REWARD, total, 0.9)},
        "Mean reward by reward function": {
            'rl_reward_fn="total"': sum(total) / len(total),
            'rl_reward_fn="correctness"': run["truth"],
        },
        "Ground-truth reward (mean)": {"": run["truth"]},
        "Staleness: mean": {"": run["lag"]},
        "Staleness: p99": {"": _quantile(run, lag, lags, 0.99, integer=True)},
        "Response length: mean": {"": run["length"]},
        "Entropy per token: mean": {"": run["entropy"]},
        "Mismatch KL (k3): mean per token": {"": run["kl"]},
        "Time split by phase": {'rl_phase_name="generate"': 4 * run["span_s"] * steps / (seconds * run["ranks"])},
        "Tokens generated per second": {"": run["generated"] * steps / seconds},
        "Tokens trained per second": {"": run["trained"] * steps / seconds},
        "Cost so far": {"": run["gpu_s"] * points / 3600 * run["price"]},
    }


_NEAREST = 1e-9
"""Quantile estimates are compared rounded to this, as PromQL's ``round`` does it: Prometheus interpolates inside a
native bucket with Go's ``math.Exp2``, the reference with Python's power, a few ulps apart."""


def _rounded(value: float) -> float:
    inverse = 1.0 / _NEAREST
    return math.floor(value * inverse + 0.5) / inverse


def _cases(query: str, title: str, variable: tuple[str, str], at_s: int, runs: list[str]) -> dict[str, Any]:
    """promtool's check of ``query`` at ``at_s``: for each of ``runs``, its step and the panel's value."""
    estimate = re.search(r": p\d+$", title) is not None
    samples = []
    for name in runs:
        run = _RUNS[name]
        for extra, value in _expected(run, at_s)[title].items():
            labels = ",".join(part for part in (f'rl_run_id="{name}"', extra) if part)
            shown = _rounded(value) if estimate else value
            samples.append({"labels": f'{{{labels},field="value"}}', "value": shown})
            samples.append({"labels": f'{{{labels},field="step"}}', "value": at_s // _INTERVAL_S - run["start"]})
    expr = query.replace(f"${variable[0]}", variable[1]).replace("$__rate_interval", "1m")
    return {"expr": f"round({expr}, {_NEAREST})" if estimate else expr, "eval_time": f"{at_s}s", "exp_samples": samples}


@pytest.mark.parametrize("at_s", [450, 120], ids=["all-runs-a-minute-old", "run-b-younger-than-the-window"])
def test_every_comparison_query_gives_each_runs_exact_value_beside_its_step(
    promtool: Path, tmp_path: Path, at_s: int
) -> None:
    """Each signal's query, as its runs panel and its group panel ask it, gives every run its own exact value over a
    one-minute window beside the step it reached (runs started at different times, native and classic histograms);
    a run younger than the window counts from its start (rates over the seconds since it began)."""
    cases = []
    panels = _runs_panels()
    assert len(panels) == 15
    started = [name for name, run in _RUNS.items() if at_s // _INTERVAL_S > run["start"]]
    for title, query in panels.items():
        cases.append(_cases(query, title, ("runs", "a|b|c"), at_s, started))
        if title not in ("Mean reward by reward function", "Time split by phase"):
            grouped = [name for name in started if _RUNS[name]["group"] == "g"]
            cases.append(_cases(query.replace(RUNS, GROUP), title, ("group", "g"), at_s, grouped))
    series = [s for name, run in _RUNS.items() for s in _series(name, run)]
    test = {
        "evaluation_interval": "15s",
        "fuzzy_compare": True,
        "tests": [{"interval": "15s", "input_series": series, "promql_expr_test": cases}],
    }
    path = tmp_path / "compare_queries.yml"
    path.write_text(yaml.safe_dump(test, width=100_000, allow_unicode=True), encoding="utf-8")
    result = subprocess.run(
        [promtool, "test", "rules", path.name], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr
