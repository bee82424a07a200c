"""Every dashboard query, rule and the report against the real stack, fed by a real multi-rank demo run.

The demo runs no inference server: the "Inference engines" row's queries are checked against recorded vLLM and SGLang
expositions in tests/inference/test_scrape.py instead.

One module fixture runs the 4-rank demo against ``shared_stack`` and, beside it, a faulty rank of the same run
that records NaN rewards and negative staleness (so the bad-input panels and RLNonFiniteRewards see real
rejections), a health rank of the same run that records rollouts, datasets, staleness phases, drops and phases
(tests/dashboards/health_rank.py), a 2-rank run of its own with classic histograms (``histogram="explicit"``), the
fallback every histogram query carries, and a run whose only rank (of 2) stops stepping and is then killed (a stalled
trainer with a rank missing that ends without a clean shutdown). Grafana variables are substituted with concrete
values: ``$run`` with the run id, ``$__rate_interval`` with 10 s and ``$__interval`` with 2 s (the test collector
flushes every second).
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import otel_rl_contract as contract
import pytest
import requests
from otel_rl_ops import promql
from otel_rl_ops.alerts.client import duration_seconds
from otel_rl_ops.query import Prometheus, VictoriaLogs
from otel_rl_ops.report.dashboard import substitute

from tests.dashboards.conftest import LENS_ONLY, MALFORMED_ONLY, ROOT, dashboard_targets, rule_generator, rules
from tests.promql_names import names

METRIC = contract.series(contract.METRICS.histogram)
PHASE_CALLS = contract.series(contract.PHASE_CALLS)
PHASE_DURATION_SECONDS = contract.series(contract.PHASE_DURATION)
REWARD = contract.series(contract.REWARDS.histogram)
STALENESS = contract.series(contract.STALENESS.histogram)
STEP = contract.series(contract.STEP)

RUN_ID = "dashboards-live"
CLASSIC_RUN_ID = "dashboards-live-classic"
"""The run with classic histograms (tests/dashboards/classic_rank.py)."""
CRASHED_RUN_ID = "dashboards-live-crashed"
"""The run whose one rank of 2 stops stepping, still exporting, and is killed (tests/dashboards/health_rank.py)."""
STEPS, RANKS = 60, 4
RATE_INTERVAL, INTERVAL, STEP_S = "10s", "2s", 2


@dataclass(frozen=True)
class LiveRun:
    prometheus_url: str
    victorialogs_url: str
    jaeger_url: str
    first: float
    """Time of the run's first rl_step point in Prometheus (unix seconds)."""
    last: float
    """Time of its last one."""
    classic_span: tuple[float, float]
    """First and last rl_step point of the classic-histogram run."""
    crashed_span: tuple[float, float]
    """First and last rl_step point of the run that was killed (the last one while it hung, before the kill)."""
    phases_last: float
    """When the demo run's last phase spans were counted: spans leave the ranks in batches (the last at shutdown) and
    pass the collector's spanmetrics, seconds after the run's last metrics."""

    @property
    def prometheus(self) -> Prometheus:
        """The client of ``prometheus_url``."""
        return Prometheus(self.prometheus_url)


def _recorded_names() -> set[str]:
    """Every recording rule but the step counts of the windows (rl:window_steps:increase<w>), recorded only once a
    run is as old as the window: these runs last seconds (the pace tests prometheus/rules/tests/pace_*.yml pin
    them)."""
    return {
        rule["record"] for rule in rules() if "record" in rule and not rule["record"].startswith("rl:window_steps:")
    }


@pytest.fixture(scope="module")
def live_run(shared_stack: Any, tmp_path_factory: pytest.TempPathFactory) -> LiveRun:
    out = tmp_path_factory.mktemp("dashboards-demo")
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "demo",
            "--steps",
            str(STEPS),
            "--ranks",
            str(RANKS),
            "--step-seconds",
            "0.1",
            "--endpoint",
            shared_stack.otlp_grpc_endpoint,
            "--prometheus-url",
            shared_stack.prometheus_url,
            "--victorialogs-url",
            shared_stack.victorialogs_url,
            "--run-id",
            RUN_ID,
            "--out",
            str(out),
        ],
        cwd=ROOT,
    )
    classic = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.dashboards.classic_rank",
            "--endpoint",
            shared_stack.otlp_grpc_endpoint,
            "--run-id",
            CLASSIC_RUN_ID,
            "--seconds",
            "8",
        ],
        cwd=ROOT,
    )
    health = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.dashboards.health_rank",
            "--endpoint",
            shared_stack.otlp_grpc_endpoint,
            "--run-id",
            RUN_ID,
            "--rank",
            "2",
            "--world-size",
            str(RANKS),
            "--seconds",
            "12",
        ],
        cwd=ROOT,
    )
    crashed = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.dashboards.health_rank",
            "--endpoint",
            shared_stack.otlp_grpc_endpoint,
            "--run-id",
            CRASHED_RUN_ID,
            "--world-size",
            "2",
            "--seconds",
            "4",
            "--hang",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    prometheus = Prometheus(shared_stack.prometheus_url)
    try:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.dashboards.faulty_rank",
                "--endpoint",
                shared_stack.otlp_grpc_endpoint,
                "--run-id",
                RUN_ID,
                "--seconds",
                "6",
            ],
            cwd=ROOT,
            check=True,
            timeout=120,
        )
        assert classic.wait(timeout=120) == 0
        assert health.wait(timeout=120) == 0
        assert demo.wait(timeout=600) == 0
        assert crashed.stdout is not None and crashed.stdout.readline().strip() == "hanging"
        # Kill the hung rank once the rules have seen it hang (its stall measure and thresholds recorded twice).
        deadline = time.time() + 120
        while time.time() < deadline and not all(
            len(item["values"]) >= 2
            for name in (contract.rules.STEP_UNCHANGED.name, contract.rules.ALERT_THRESHOLD.name)
            for item in prometheus.query(f'{name}{{rl_run_id="{CRASHED_RUN_ID}"}}[10m]') or [{"values": ()}]
        ):
            time.sleep(2)
        crashed.kill()
        crashed.wait(timeout=30)
    finally:
        for process in (demo, classic, health, crashed):
            if process.poll() is None:
                process.kill()
    # Recording rules run every 15 s: wait until each has recorded both runs twice (their windows still hold the
    # data for a minute after a run), so that alerts comparing a recorded series with its past can be checked.
    deadline = time.time() + 120
    while time.time() < deadline:
        recorded = "|".join(re.escape(rule.name) for rule in contract.rules.RECORDING_RULES)
        match = f'{{__name__=~"{recorded}",rl_run_id=~"{RUN_ID}|{CLASSIC_RUN_ID}"}}[10m]'
        counts: dict[tuple[str, str], int] = {}
        for item in prometheus.query(match):
            key = (item["metric"]["__name__"], item["metric"]["rl_run_id"])
            counts[key] = max(counts.get(key, 0), len(item["values"]))
        if all(counts.get((name, run), 0) >= 2 for name in _recorded_names() for run in (RUN_ID, CLASSIC_RUN_ID)):
            break
        time.sleep(2)
    first, last = _span(prometheus, RUN_ID)
    return LiveRun(
        shared_stack.prometheus_url,
        shared_stack.victorialogs_url,
        shared_stack.jaeger_url,
        first,
        last,
        _span(prometheus, CLASSIC_RUN_ID),
        _span(prometheus, CRASHED_RUN_ID),
        _phases_settled(prometheus),
    )


def _phases_settled(prometheus: Prometheus) -> float:
    """The first time the demo run's phase span count held still for 3 s."""
    query = f'sum({PHASE_CALLS.name}{{rl_run_id="{RUN_ID}",rl_rank=""}})'
    deadline, previous, stable = time.time() + 60, None, 0
    while time.time() < deadline and stable < 3:
        value = prometheus.value(query)
        stable = stable + 1 if value is not None and value == previous else 0
        previous = value
        time.sleep(1)
    return time.time()


def _span(prometheus: Prometheus, run_id: str) -> tuple[float, float]:
    samples = prometheus.query(f'{STEP.name}{{rl_run_id="{run_id}",rl_rank=""}}[1h]')
    times = [float(t) for series in samples for t, _ in series["values"]]
    return min(times), max(times)


def _substitute(expr: str, run_id: str = RUN_ID) -> str:
    return substitute(expr, run_id=run_id, rate_interval=RATE_INTERVAL, interval=INTERVAL)


INFERENCE = re.compile(r"\b(vllm|sglang):")
"""A query of the inference engines' own series (tests/inference/test_scrape.py: the demo runs no engine)."""
PROMQL = [
    (name, panel["title"], target)
    for name, panel, target in dashboard_targets()
    if target["datasource"]["type"] == "prometheus"
    and not INFERENCE.search(target["expr"])
    and not MALFORMED_ONLY.search(target["expr"])
    and not LENS_ONLY.search(target["expr"])
]
LOGSQL = [
    (name, panel["title"], target)
    for name, panel, target in dashboard_targets()
    if target["datasource"]["type"] == "victoriametrics-logs-datasource"
]
JAEGER = [
    (name, panel["title"], target)
    for name, panel, target in dashboard_targets()
    if target["datasource"]["type"] == "jaeger"
]


@pytest.mark.parametrize(("dashboard", "title", "target"), PROMQL, ids=[f"{t}/{q['refId']}" for _, t, q in PROMQL])
def test_dashboard_promql_returns_data(live_run: LiveRun, dashboard: str, title: str, target: dict[str, Any]) -> None:
    """The panel query, run as Grafana runs it (range or instant), returns at least one finite value for the run
    (a heatmap: native histograms with values, the ranks' default)."""
    query = _substitute(target["expr"])
    if target.get("instant"):
        result = live_run.prometheus.query(query, live_run.last)
        values = [float(item["value"][1]) for item in result]
    else:
        result = live_run.prometheus.range(query, live_run.first, max(live_run.last, live_run.phases_last), step=STEP_S)
        values = [float(v) for item in result for _, v in item.get("values", ())]
        values += [float(h["count"]) for item in result for _, h in item.get("histograms", ()) if float(h["count"]) > 0]
    assert any(v == v and abs(v) != float("inf") for v in values), f"{dashboard} / {title}: no data for {query}"
    if target.get("format") == "heatmap":
        assert result and all("histograms" in item for item in result), f"{dashboard} / {title}: not native"


HISTOGRAM = re.compile(
    r"\brl_(reward|staleness|metric|advantage|response_length|entropy|importance_ratio|mismatch_kl)\{"
)
"""A selector of a histogram (native; the classic ``_bucket``/``_count`` series carry a suffix)."""
HISTOGRAM_PROMQL = [(name, title, target) for name, title, target in PROMQL if HISTOGRAM.search(target["expr"])]


@pytest.mark.parametrize(
    ("dashboard", "title", "target"), HISTOGRAM_PROMQL, ids=[f"{t}/{q['refId']}" for _, t, q in HISTOGRAM_PROMQL]
)
def test_histogram_query_falls_back_to_classic_buckets(
    live_run: LiveRun, dashboard: str, title: str, target: dict[str, Any]
) -> None:
    """Each query reading a histogram also returns data for a run with classic histograms (histogram="explicit")."""
    query = _substitute(target["expr"], CLASSIC_RUN_ID)
    result = live_run.prometheus.range(query, *live_run.classic_span, step=STEP_S)
    values = [float(v) for item in result for _, v in item.get("values", ())]
    assert any(v == v and abs(v) != float("inf") for v in values), f"{dashboard} / {title}: no data for {query}"
    assert all("histograms" not in item for item in result), "the classic run has no native histograms"


@pytest.mark.parametrize(("dashboard", "title", "target"), LOGSQL, ids=[f"{t}/{q['refId']}" for _, t, q in LOGSQL])
def test_dashboard_logsql_returns_readable_samples(
    live_run: LiveRun, dashboard: str, title: str, target: dict[str, Any]
) -> None:
    """The samples query returns the run's top/bottom samples with their prompt, response and target texts."""
    rows = VictoriaLogs(live_run.victorialogs_url).query(_substitute(target["expr"]))
    assert rows, f"{dashboard} / {title}: no samples"
    for row in rows:
        assert row["rl.sample.selection"] in ("top", "bottom")
        assert row["prompt"].endswith("=") and row["target"].isdigit(), row
        float(row["rl.reward"])
        int(row["rl.step"])
    # VictoriaLogs leaves out empty fields: an untrained policy may answer nothing, but most answers are text.
    assert sum(bool(row.get("response")) for row in rows) > len(rows) / 2


@pytest.mark.parametrize(("dashboard", "title", "target"), JAEGER, ids=[f"{t}/{q['refId']}" for _, t, q in JAEGER])
def test_dashboard_jaeger_search_finds_the_runs_steps(
    live_run: LiveRun, dashboard: str, title: str, target: dict[str, Any]
) -> None:
    """The steps search (as the report runs it: the run's service from its series' job) returns the demo run's steps,
    slowest first, and the slowest step's trace holds every rank's generate phase."""
    from otel_rl_ops.query import Jaeger
    from otel_rl_ops.report.dashboard import default_dashboard_path, load_panels
    from otel_rl_ops.report.fetch import Window, fetch_panel, run_service

    (panel,) = [p for p in load_panels(default_dashboard_path()) if p.title == title]
    assert [t.language for t in panel.targets] == ["jaeger"]
    service = run_service(live_run.prometheus, RUN_ID, at=live_run.last)
    assert service == "otel-rl-demo"
    window = Window.for_range(live_run.first - 5, live_run.last + 5, scrape_interval_s=1.0)
    data = fetch_panel(
        panel,
        run_id=RUN_ID,
        window=window,
        prometheus=live_run.prometheus,
        logs=VictoriaLogs(live_run.victorialogs_url),
        jaeger=Jaeger(live_run.jaeger_url),
        service=service,
    )
    assert data.steps and all(step.step is not None and step.duration_s > 0 for step in data.steps)
    assert [step.duration_s for step in data.steps] == sorted((step.duration_s for step in data.steps), reverse=True)
    ranks = {span.attributes["rl.rank"] for span in data.timeline if span.name == "generate"}
    assert ranks == set(range(RANKS)), ranks


def test_prometheus_loaded_every_rule_and_evaluates_it_without_error(live_run: LiveRun) -> None:
    """The stack's Prometheus loaded prometheus/rules/otel_rl.yml and every rule's last evaluation succeeded."""
    groups = requests.get(f"{live_run.prometheus_url}/api/v1/rules", timeout=30).json()["data"]["groups"]
    loaded = {(g["name"], r["name"]): r for g in groups for r in g["rules"]}
    expected = {(rule["_group"], rule.get("record") or rule.get("alert")) for rule in rules()}
    assert expected <= set(loaded)
    for key in expected:
        assert loaded[key]["health"] == "ok" and not loaded[key].get("lastError"), (key, loaded[key])


@pytest.mark.parametrize("run_id", [RUN_ID, CLASSIC_RUN_ID])
@pytest.mark.parametrize("name", sorted(_recorded_names()))
def test_recording_rule_recorded_the_run(live_run: LiveRun, name: str, run_id: str) -> None:
    """Each recording rule produced a finite value for the demo run and for the classic-histogram run
    (rl_alert_threshold: all the defaults)."""
    result = live_run.prometheus.query(f'last_over_time({name}{{rl_run_id="{run_id}"}}[10m])')
    values = [float(item["value"][1]) for item in result]
    assert any(v == v for v in values), f"{name}: nothing recorded for {run_id}"
    if name == contract.rules.ALERT_THRESHOLD.name:
        assert {item["metric"]["threshold"]: float(item["value"][1]) for item in result} == {
            "staleness_p99": 8,
            "staleness_max": 32,
            "reward_drop_stddevs": 1,
            "zero_variance_rise": 0.3,
            "histogram_values_missing": 0,
            "step_stall_seconds": 1800,
            "importance_ratio_p99": 2,
            "importance_ratio_p1": 0.5,
            "mismatch_kl_k3": 0.01,
            "ess_fraction": 0.5,
            "entropy_min": 0.05,
            "zero_variance_fraction": 0.8,
            "merge_canary_misplaced": 1e-6,
            "phase_stuck_p99_multiple": 5,
            "phase_stuck_floor_seconds": 600,
            "reward_gaming_rise_stddevs": 0.5,
            "ground_truth_rise_stddevs": 0.1,
            "length_reward_correlation": 0.5,
            "length_reward_correlation_rise": 0.1,
            "reward_variance_share": 0.8,
            "entropy_fall_ratio": 0.5,
            "mismatch_kl_growth": 2,
            "stale_drop_length_ratio": 1.5,
            "stale_drop_fraction": 0.05,
            "zero_variance_share_rise": 0.2,
            "step_seconds": 0,
        }


@pytest.mark.parametrize("run_id", [RUN_ID, CLASSIC_RUN_ID])
def test_histogram_self_check_counts_every_value(live_run: LiveRun, run_id: str) -> None:
    """Once a run's last points are in, its histograms in Prometheus count every value the ranks recorded into
    them: the self-check reads 0 for rewards, staleness, metrics, the record_rollouts histograms and the stale drops'
    (and the counter saw values)."""
    selector = f'{{rl_run_id="{run_id}"}}[10m]'
    missing = live_run.prometheus.query(f"last_over_time({contract.rules.VALUES_MISSING_10M.name}{selector})")
    recorded = live_run.prometheus.query(f"max_over_time({contract.rules.VALUES_RECORDED_10M.name}{selector})")
    histograms = (
        "rl.reward",
        "rl.staleness",
        "rl.metric",
        "rl.advantage",
        "rl.response.length",
        "rl.entropy",
        "rl.importance_ratio",
        "rl.mismatch.kl",
        "rl.trajectory.versions",
        "rl.dropped.response.length",
        "rl.dropped.staleness",
    )
    assert {item["metric"]["otel_rl_metric"]: float(item["value"][1]) for item in missing} == dict.fromkeys(
        histograms, 0
    )
    assert all(float(item["value"][1]) > 0 for item in recorded) and len(recorded) == len(histograms)


def _provoked(expr: str, shift_ms: int) -> str:
    """The alert expression with every threshold made to pass (labels kept: -1e9 after ``>``, +1e9 after ``<``)
    and its look back ("an hour ago", "30 minutes ago") moved into the run: the longest offset to ``shift_ms``, the
    others in proportion."""
    expr = _GATE.sub("", expr)
    expr = re.sub(
        rf'(<[^=]*?){contract.rules.ALERT_THRESHOLD.name}\{{threshold="(\w+)"\}}',
        rf'\1({contract.rules.ALERT_THRESHOLD.name}{{threshold="\2"}} * 0 + 1e9)',
        expr,
    )
    expr = re.sub(
        rf'(>[^=]*?){contract.rules.ALERT_THRESHOLD.name}\{{threshold="(\w+)"\}}',
        rf'\1({contract.rules.ALERT_THRESHOLD.name}{{threshold="\2"}} * 0 - 1e9)',
        expr,
    )
    expr = re.sub(
        rf"(>[^=]*?){contract.rules.PHASE_STUCK_THRESHOLD.name}",
        rf"\1({contract.rules.PHASE_STUCK_THRESHOLD.name} - 1e9)",
        expr,
    )
    offsets = {match: duration_seconds(match) for match in re.findall(r"offset (\d+[smh])", expr)}
    longest = max(offsets.values(), default=1)
    return re.sub(r"offset (\d+[smh])", lambda m: f"offset {round(shift_ms * offsets[m.group(1)] / longest)}ms", expr)


def _floor(rule: dict[str, Any]) -> str | None:
    """The smallest window of a windowed alert (prometheus/generate.py), None for another."""
    generate = rule_generator()
    tables = (*generate.HEALTH_ALERTS, *generate.AUDIT_ALERTS)
    found = {(a.name, a.signal): a.floor for a in tables}
    return found.get((rule["alert"], rule["labels"].get("signal")))


_GATE = re.compile(r"\nand on \([^)]*\) \(rl:window_steps:increase\w+[^)]*\)")
"""The clause of a windowed alert that waits until its window (and the one it compares with) held N steps."""


def _recorded_span(prometheus: Prometheus, expr: str, *, together: bool = False) -> tuple[float, float]:
    """The first time every recorded series used in ``expr`` holds a finite value for the run, and the last time any
    does: series begin at different times (rl:reward_ground_truth with the first export, each reward function's mean
        with its first reward); ``together``: the last time every one does (a window of seconds ends soon after the run,
    the ground truth minutes later)."""
    firsts, lasts = [], []
    for name in {n for n in names(expr).exact if ":" in n}:
        for item in prometheus.query(f'{name}{{rl_run_id="{RUN_ID}"}}[1h]'):
            times = [float(t) for t, v in item["values"] if v not in ("NaN", "+Inf", "-Inf")]
            if times:
                firsts.append(min(times))
                lasts.append(max(times))
    return max(firsts), min(lasts) if together else max(lasts)


ALERTS = [rule for rule in rules() if "alert" in rule and rule["labels"].get("window") in (None, _floor(rule))]
"""Every alert rule, one window each (its smallest: the rules of its other windows differ only in durations)."""


ENDED = {"RLTelemetryAbsent", "RLRunEndedUncleanly"}
"""Alerts about a run that stopped: evaluated 400 s after the crashed run's last point (and the demo run's)."""
HUNG = {"RLTrainerStalled", "RLRanksMissing", "RLPhaseStuck"}
"""Alerts about a run that still reports: evaluated at the crashed run's last point, while it hung (1 rank of 2, in
its train phase)."""
BUG_COUNTERS = {"OtelRLUnencodableTelemetry"}
"""Alerts on a counter every run has at 0 and only an otel-rl bug raises: their literal ``> 0`` is made to pass."""


@pytest.mark.parametrize("rule", ALERTS, ids=[f"{r['alert']}-{r['labels'].get('signal', '')}" for r in ALERTS])
def test_alert_expression_matches_the_run(live_run: LiveRun, rule: dict[str, Any]) -> None:
    """On real series every alert expression selects the run it is about: its joins and label sets match real data.

    Thresholds are made to pass; "an hour ago" becomes the first recorded point of the run (the run is short) and
    "now" its last; a windowed alert (one rule per window) is checked at its smallest window, without the clause that
    waits for its window to hold N steps, over the span its statistics were recorded, its comparisons reaching halfway
    back; RLNonFiniteRewards fires for real (the faulty rank's NaNs). The
    lifecycle alerts select the crashed run, for real: RLTrainerStalled and RLRanksMissing while it hung,
    RLTelemetryAbsent and RLRunEndedUncleanly 400 s after its last point, and these two never select the demo run,
    which finished cleanly.
    """
    at, shift_ms, run_id = time.time(), 0, RUN_ID
    if rule["alert"] in ENDED:
        at, run_id = live_run.crashed_span[1] + 400, CRASHED_RUN_ID
        clean = live_run.prometheus.query(_provoked(rule["expr"], 0), live_run.last + 400)
        assert RUN_ID not in {item["metric"].get("rl_run_id") for item in clean}, (rule["alert"], clean)
    elif rule["alert"] in HUNG:
        at, run_id = live_run.crashed_span[1], CRASHED_RUN_ID
    elif "window" in rule["labels"]:
        # A window of seconds holds this short run only while it runs: evaluate the expression (its comparisons
        # reaching halfway back) over the span the run's statistics were recorded.
        earliest, latest = _recorded_span(live_run.prometheus, _GATE.sub("", rule["expr"]), together=True)
        shift_ms = round((latest - earliest) * 500) if "offset " in rule["expr"] else 0
        result = live_run.prometheus.range(
            _provoked(rule["expr"], shift_ms), earliest + shift_ms / 1000, latest, step=STEP_S
        )
        assert RUN_ID in {item["metric"].get("rl_run_id") for item in result}, (rule["alert"], result)
        return
    elif "offset " in rule["expr"] and any(":" in name for name in names(rule["expr"]).exact):
        earliest, at = _recorded_span(live_run.prometheus, rule["expr"])
        shift_ms = round((at - earliest) * 1000)
        assert shift_ms > 0
    expr = rule["expr"].replace(") > 0", ") >= 0") if rule["alert"] in BUG_COUNTERS else rule["expr"]
    result = live_run.prometheus.query(_provoked(expr, shift_ms), at)
    assert run_id in {item["metric"].get("rl_run_id") for item in result}, (rule["alert"], result)


def _panel_query(title: str, ref_id: str = "A", run_id: str = RUN_ID) -> str:
    """The dashboard's query ``ref_id`` of the panel ``title``, with the variables substituted."""
    return next(
        _substitute(t["expr"], run_id)
        for _, p, t in dashboard_targets()
        if p["title"] == title and t["refId"] == ref_id
    )


def _range_values(live_run: LiveRun, query: str) -> dict[str, list[float]]:
    """The finite values of ``query`` over the demo run, per series (labels as text)."""
    result = live_run.prometheus.range(query, live_run.first, live_run.last, step=STEP_S)
    values = {str(item["metric"]): [float(v) for _, v in item["values"]] for item in result}
    return {key: [v for v in series if v == v and abs(v) != float("inf")] for key, series in values.items()}


def test_health_panels_hold_their_invariants_on_the_real_run(live_run: LiveRun) -> None:
    """On the real run (the demo's ranks and health_rank.py record rollouts and phases) the health panels keep their
    invariants: whole ranks per phase, at most the ranks that report; group outcome and advantage sign shares that
    add up to 1; an ESS fraction in (0, 1]; a k3 mismatch KL never negative. The run state reads finished for the
    demo run, and running, then stopped without a clean finish, for the crashed one."""
    phases = live_run.prometheus.range(_panel_query("Ranks per phase"), live_run.first, live_run.last, step=STEP_S)
    assert {"generate", "train"} <= {item["metric"]["rl_phase_name"] for item in phases}
    in_phases = [
        v for series in _range_values(live_run, f"sum({_panel_query('Ranks per phase')})").values() for v in series
    ]
    assert in_phases and all(v == int(v) and 0 <= v <= RANKS + 2 for v in in_phases), sorted(set(in_phases))
    for title in ("Prompt groups: outcome and zero variance", "Advantage sign shares"):
        shares = [v for series in _range_values(live_run, f"sum({_panel_query(title)})").values() for v in series]
        assert shares and all(abs(v - 1) < 1e-9 for v in shares), (title, sorted(set(shares)))
    ess = [
        v for series in _range_values(live_run, _panel_query("Effective sample size fraction")).values() for v in series
    ]
    assert ess and all(0 < v <= 1 for v in ess), sorted(set(ess))
    kl = live_run.prometheus.range(
        _panel_query("Mismatch KL(π_inference ‖ π_train): mean per estimator"),
        live_run.first,
        live_run.last,
        step=STEP_S,
    )
    k3 = [float(v) for item in kl if item["metric"]["rl_kl_estimator"] == "k3" for _, v in item["values"] if v != "NaN"]
    assert k3 and all(v >= 0 for v in k3), sorted(set(k3))
    assert live_run.prometheus.value(_panel_query("Run state"), live_run.last + 30) == 1  # finished cleanly
    crashed = _panel_query("Run state", run_id=CRASHED_RUN_ID)
    assert live_run.prometheus.value(crashed, live_run.crashed_span[1]) == 0  # running (hung, still reporting)
    assert live_run.prometheus.value(crashed, live_run.crashed_span[1] + 400) == 2  # stopped without a clean finish


ROUNDING = 1e-12
"""Relative slack of a bound for floating-point rounding: the counters are float sums, differenced and divided. A
ratio of extrapolated rate()s left its bounds by far more (an ESS fraction of 1.16: rules/tests/health.yml)."""
RATIO_PANELS: dict[tuple[str, str], str] = {
    # (panel title, refId) -> the bound it promises: "ess" (0, 1], "fraction" [0, 1], "shares" each in [0, 1] and
    # adding up to 1, "mean" within the exact extremes of the values of its window, "phase_mean" within the buckets
    # the phase's durations fell in.
    ("Effective sample size fraction", "A"): "ess",
    ("Zero-variance groups (fraction)", "A"): "fraction",
    ("Prompt groups: outcome and zero variance", "A"): "shares",
    ("Prompt groups: outcome and zero variance", "B"): "fraction",
    ("Advantage sign shares", "A"): "shares",
    ("Reward (total): mean and percentiles", "A"): "mean",
    ("Mean reward by reward function", "A"): "mean",
    ("Mean reward by dataset", "A"): "mean",
    ("Recorded metrics (mean by key)", "A"): "mean",
    ("Advantage: mean and percentiles", "A"): "mean",
    ("Response length: mean and percentiles", "A"): "mean",
    ("Entropy per token: mean and percentiles", "A"): "mean",
    ("Mismatch KL(π_inference ‖ π_train): mean per estimator", "A"): "mean",
    ("Weight-sync latency", "A"): "phase_mean",
    ("Total reward and ground truth (mean)", "A"): "mean",
    ("Total reward and ground truth (mean)", "B"): "mean",
    ("Correlation with the total reward", "A"): "correlation",
    ("Reward variance share by function", "A"): "sums_to_one",
    ("Stale drops: length dropped and trained", "A"): "mean",
    ("Stale drops: length dropped and trained", "B"): "mean",
}
NOT_RATIOS_OF_COUNTERS = {
    # (panel title, refId): one counter's rate over gauges (no two counters to keep in step)
    ("Time split by phase", "A"),
    ("Idle: waiting for data and for weights", "A"),
    ("MFU", "A"),
    # the run's cost: GPU-seconds times a price, over steps, tokens or groups (unbounded by nature)
    ("Cost", "A"),
    ("Cost", "B"),
    ("Cost", "C"),
    ("Cost", "D"),
}
RATIO_RULES: dict[str, tuple[str, str]] = {
    # recording rule -> (its bound, as RATIO_PANELS, its window); the windowed ones at every window they have
    "rl:metric_mean:rate10m": ("mean", "10m"),
    **{
        name.format(w=w): (kind, w)
        for name, kind, floor in (
            ("rl:importance_ratio_ess:rate{w}", "ess", "5m"),
            ("rl:groups_zero_variance_fraction:rate{w}", "fraction", "15s"),
            ("rl:reward_mean:rate{w}", "mean", "15s"),
            ("rl:mismatch_kl_mean:rate{w}", "mean", "15s"),
            ("rl:entropy_mean:rate{w}", "mean", "15s"),
            ("rl:reward_stddev:rate{w}", "stddev", "15s"),
            ("rl:response_length_mean:rate{w}", "mean", "15s"),
            ("rl:stale_drop_fraction:rate{w}", "fraction", "15s"),
        )
        for w in rule_generator().PRESETS[rule_generator().PRESETS.index(floor) :]
    },
}


def _by_series(result: list[dict[str, Any]]) -> dict[frozenset[tuple[str, str]], dict[float, float]]:
    """A range query's finite values: labels (without the name) -> time -> value."""
    return {
        frozenset((k, v) for k, v in item["metric"].items() if k != "__name__"): {
            float(t): float(v) for t, v in item["values"] if v not in ("NaN", "+Inf", "-Inf")
        }
        for item in result
    }


def _slack(bound: float) -> float:
    return ROUNDING * max(1.0, abs(bound))


def _extremes_of_mean(expr: str, window: str) -> tuple[str, str]:
    """The exact extremes, over ``window``, of the values a mean query of ``promql.mean`` (or a mean rule) averages:
    the same metric, selector and grouping."""
    found = re.search(r"sum(?: by \(([^)]*)\))? \(\(?(\w+)_positive_total\{([^}]*)\}", expr) or re.search(
        r"sum(?: by \(([^)]*)\))? \(\(?histogram_sum\((\w+)\{([^}]*)\}", expr
    )
    assert found, expr
    by, metric, selector = found.groups()
    (distribution,) = (d for d in contract.DISTRIBUTIONS if contract.series(d.histogram).name == metric)
    return promql.extremes(distribution, selector, by=by or "", window=window)


def _phase_mean_bounds(live_run: LiveRun, expr: str) -> tuple[float, float]:
    """The bounds of the buckets every duration of the phase the mean ``expr`` reads fell in, over the whole run."""
    (selector,) = set(re.findall(rf"{PHASE_DURATION_SECONDS.sum}\{{([^}}]*)\}}", expr))
    buckets = live_run.prometheus.by_label(f"sum by (le) ({PHASE_DURATION_SECONDS.bucket}{{{selector}}})", "le")
    bounds = sorted((float(le), count) for le, count in buckets.items())
    total = bounds[-1][1]
    assert total > 0, buckets
    first = next(i for i, (_, count) in enumerate(bounds) if count > 0)
    last = next(le for le, count in bounds if count == total)
    return (bounds[first - 1][0] if first else 0.0), last


def _assert_within_bounds(
    live_run: LiveRun, name: str, kind: str, expr: str, window: str, start: float, end: float, runs: tuple[str, ...]
) -> None:
    """Evaluate ``expr`` at every step from ``start`` to ``end`` and assert that each value of the ``runs`` (a
    panel's query reads one run: its series carry no run id) keeps the bound ``kind``."""
    values = {
        labels: series
        for labels, series in _by_series(live_run.prometheus.range(expr, start, end, step=STEP_S)).items()
        if dict(labels).get("rl_run_id", runs[0]) in runs
    }
    assert any(values.values()), f"{name}: no values for {runs}"
    bad: list[tuple[float, object]]
    every = [(labels, t, v) for labels, series in values.items() for t, v in series.items()]
    if kind == "ess":
        bad = [(t, v) for _, t, v in every if not 0 < v <= 1 + ROUNDING]
    elif kind in ("fraction", "shares"):
        bad = [(t, v) for _, t, v in every if not -ROUNDING <= v <= 1 + ROUNDING]
    elif kind == "stddev":
        bad = [(t, v) for _, t, v in every if not v >= 0]
    elif kind == "correlation":
        bad = [(t, v) for _, t, v in every if not -1 <= v <= 1]
    elif kind == "sums_to_one":
        bad = []
    elif kind == "phase_mean":
        low, high = _phase_mean_bounds(live_run, expr)
        bad = [(t, v) for _, t, v in every if not low - _slack(low) <= v <= high + _slack(high)]
    else:
        assert kind == "mean", kind
        low_query, high_query = _extremes_of_mean(expr, window)
        lows = _by_series(live_run.prometheus.range(low_query, start, end, step=STEP_S))
        highs = _by_series(live_run.prometheus.range(high_query, start, end, step=STEP_S))
        bad = []
        for labels, t, v in every:
            low, high = lows.get(labels, {}).get(t, math.inf), highs.get(labels, {}).get(t, -math.inf)
            if not low - _slack(low) <= v <= high + _slack(high):
                bad.append((t, (low, v, high)))
    assert not bad, (name, sorted(bad, key=str)[:10])
    if kind in ("shares", "sums_to_one"):
        totals: dict[tuple[str, float], float] = {}
        for labels, t, v in every:
            run = dict(labels).get("rl_run_id", runs[0])
            totals[(run, t)] = totals.get((run, t), 0.0) + v
        assert all(abs(total - 1) <= ROUNDING for total in totals.values()), (name, sorted(set(totals.values())))


def test_every_ratio_panel_keeps_its_bounds_at_every_step_of_the_run(live_run: LiveRun) -> None:
    """Each panel query dividing counters (ESS fraction, fractions, shares, means), evaluated as Grafana does at every
    step over the whole run, stays within the bounds it promises: ESS in (0, 1], fractions in [0, 1], shares in [0, 1]
    adding up to 1, each mean within the exact extremes of its window's values (a phase mean within its buckets)."""
    divides = {
        (panel["title"], target["refId"])
        for _, panel, target in dashboard_targets()
        if target["datasource"]["type"] == "prometheus" and " / " in target["expr"]
    }
    assert divides == set(RATIO_PANELS) | NOT_RATIOS_OF_COUNTERS, "give every ratio panel its bounds"
    end = max(live_run.last, live_run.phases_last) + 10
    for (title, ref_id), kind in RATIO_PANELS.items():
        expr = _panel_query(title, ref_id)
        _assert_within_bounds(live_run, title, kind, expr, RATE_INTERVAL, live_run.first, end, (RUN_ID,))
        if HISTOGRAM.search(expr):
            classic = _panel_query(title, ref_id, CLASSIC_RUN_ID)
            start, stop = live_run.classic_span
            _assert_within_bounds(live_run, title, kind, classic, RATE_INTERVAL, start, stop + 10, (CLASSIC_RUN_ID,))


def test_every_ratio_rule_keeps_its_bounds_at_every_step_of_the_run(live_run: LiveRun) -> None:
    """Each recording rule dividing counters, its expression evaluated at every step over the demo run and the
    classic-histogram run, stays within its bounds (as the panels': ESS in (0, 1], the zero-variance fraction in
    [0, 1], each mean within the exact extremes of its window's values, a standard deviation never negative)."""
    divides = {
        rule["record"] for rule in rules() if "record" in rule and "_total{" in rule["expr"] and "/" in rule["expr"]
    }
    assert divides == set(RATIO_RULES), "give every ratio rule its bounds"
    start = min(live_run.first, live_run.classic_span[0])
    end = max(live_run.last, live_run.classic_span[1]) + 30
    for rule in rules():
        if rule.get("record") in RATIO_RULES:
            kind, window = RATIO_RULES[rule["record"]]
            _assert_within_bounds(
                live_run, rule["record"], kind, rule["expr"], window, start, end, (RUN_ID, CLASSIC_RUN_ID)
            )


def test_every_metric_name_in_dashboards_and_rules_exists_for_the_run(live_run: LiveRun) -> None:
    """Golden names: each raw series a dashboard or rule selects exists in Prometheus for the demo run (native
    histograms) or, for the classic fallbacks (``_bucket``, ``_count``, exemplar carriers), for the classic run."""
    selected = {
        n
        for _, _, target in dashboard_targets()
        if target["datasource"]["type"] == "prometheus"
        for n in names(target["expr"]).exact
    }
    selected |= {n for rule in rules() for n in names(rule["expr"]).exact}
    raw = {
        n
        for n in selected
        if ":" not in n
        and not n.startswith(contract.rules.ALERT_THRESHOLD.name)
        and not MALFORMED_ONLY.match(n)
        and not LENS_ONLY.match(n)
    }
    native = {item["__name__"] for item in live_run.prometheus.series(f'{{rl_run_id="{RUN_ID}"}}')}
    classic = {item["__name__"] for item in live_run.prometheus.series(f'{{rl_run_id="{CLASSIC_RUN_ID}"}}')}
    assert {REWARD.name, STALENESS.name, METRIC.name} <= native and not {REWARD.name, STALENESS.name} & classic
    assert raw and raw <= native | classic, raw - native - classic


def test_report_renders_every_panel_with_data(live_run: LiveRun, tmp_path: Path) -> None:
    """otel-rl report draws every panel of the dashboard from its own queries, each with data, plus the samples."""
    pytest.importorskip("matplotlib")
    from otel_rl_ops.report.dashboard import default_dashboard_path, load_panels
    from otel_rl_ops.report.render import build_report, panels_without_data, render_html, render_png

    report = build_report(
        prometheus_url=live_run.prometheus_url,
        victorialogs_url=live_run.victorialogs_url,
        jaeger_url=live_run.jaeger_url,
        run_id=RUN_ID,
        scrape_interval_s=1.0,
        now=live_run.last + 5,
    )
    assert [p.panel.title for p in report.panels] == [p.title for p in load_panels(default_dashboard_path())]
    inference = [p.panel.title for p in report.panels if p.panel.title.startswith("Inference:")]  # no engine here
    assert [p.title for p in panels_without_data(report)] == inference
    assert report.steps and report.steps[0].steps and report.steps[0].timeline
    png = render_png(report, tmp_path / "report.png")
    assert png.startswith(b"\x89PNG") and len(png) > 50_000
    render_html(report, tmp_path / "report.html", png=png)
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "data:image/png;base64," in page and "<td>top</td>" in page and "<td>bottom</td>" in page
    assert f'<a href="{live_run.jaeger_url}/trace/{report.steps[0].steps[0].trace_id}">' in page


def test_report_command_writes_a_png(live_run: LiveRun, tmp_path: Path) -> None:
    """``otel-rl report ... --out x.png`` (the registered CLI subcommand) exits 0 and writes the picture."""
    pytest.importorskip("matplotlib")
    from otel_rl_ops.cli import main

    out = tmp_path / "cli.png"
    assert (
        main(
            [
                "report",
                "--prometheus-url",
                live_run.prometheus_url,
                "--victorialogs-url",
                live_run.victorialogs_url,
                "--run-id",
                RUN_ID,
                "--out",
                str(out),
                "--scrape-interval",
                "1",
            ]
        )
        == 0
    )
    assert out.read_bytes().startswith(b"\x89PNG")
