"""Dashboards, alert rules, provisioning and docker-compose checked without a running stack."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import otel_rl_contract as contract
import pytest
import yaml
from otel_rl_contract import Distribution, foreign

from tests.dashboards.conftest import (
    DASHBOARDS,
    ROOT,
    RULE_FILES,
    RULE_TESTS,
    dashboard_targets,
    rule_generator,
    rules,
)

PROVISIONING = ROOT / "grafana" / "provisioning"


def test_committed_dashboards_are_what_the_code_generates(tmp_path: Path) -> None:
    """grafana/dashboards/*.json equal what ``python grafana/generate.py <folder>`` writes (edit the code, not the
    JSON)."""
    pytest.importorskip("grafana_foundation_sdk")
    subprocess.run([sys.executable, ROOT / "grafana" / "generate.py", tmp_path], check=True, capture_output=True)
    assert sorted(path.name for path in tmp_path.iterdir()) == [path.name for path in DASHBOARDS]
    for path in DASHBOARDS:
        assert path.read_text(encoding="utf-8") == (tmp_path / path.name).read_text(encoding="utf-8"), (
            f"{path.name} is stale: run .venv/bin/python grafana/generate.py"
        )


def test_committed_rules_are_what_the_code_generates(tmp_path: Path) -> None:
    """prometheus/rules/otel_rl_windows.yml equals what ``python prometheus/generate.py
    <folder>`` writes (edit the generator, not the YAML), and docs/runbooks.md holds its tables of windows."""
    subprocess.run([sys.executable, ROOT / "prometheus" / "generate.py", tmp_path], check=True, capture_output=True)
    generate = rule_generator()
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(generate.FILES)
    for name in generate.FILES:
        committed = (ROOT / "prometheus" / "rules" / name).read_text(encoding="utf-8")
        assert committed == (tmp_path / name).read_text(encoding="utf-8"), (
            f"{name} is stale: run .venv/bin/python prometheus/generate.py"
        )
    runbooks = (ROOT / "docs" / "runbooks.md").read_text(encoding="utf-8")
    assert generate.window_table() in runbooks and generate.limits_table() in runbooks, (
        "docs/runbooks.md's tables of windows differ from prometheus/generate.py --tables"
    )


def test_each_alert_judges_one_window_or_two_at_any_pace() -> None:
    """At every pace from 0.1 s to 30 minutes a step (those its largest window holds N steps of), each alert of
    prometheus/generate.py judges one or two of its windows, and one of them stays judged while the pace drifts by 9%
    either way (22% except around the 2m-5m step of the ladder): a run whose pace jitters does not flap between
    windows (each flap would restart ``for:``)."""
    generate = rule_generator()

    def judged(rule: Any, pace: float) -> set[str]:
        return {
            w
            for w in rule.windows()
            if rule.steps <= generate.seconds(w) / pace
            and (w == rule.floor or generate.seconds(w) / pace < generate.BAND * rule.steps)
        }

    for rule in (*generate.HEALTH_ALERTS, *generate.AUDIT_ALERTS):
        slowest = generate.seconds(rule.windows()[-1]) / rule.steps
        for k in range(2000):  # 0.1 s to 30 minutes, 0.5% apart
            pace = 0.1 * 1.005**k
            drift = 1.22 if pace * rule.steps * 3 < 120 or pace * rule.steps > 300 else 1.09
            if pace * drift > slowest:
                break
            assert 1 <= len(judged(rule, pace)) <= 2, (rule.name, pace, judged(rule, pace))
            assert judged(rule, pace / drift) & judged(rule, pace) & judged(rule, pace * drift), (rule.name, pace)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_json_is_valid_for_the_grafana_schema(path: Path) -> None:
    """The Foundation SDK's Dashboard model reads every field back unchanged (no unknown or misplaced keys)."""
    sdk = pytest.importorskip("grafana_foundation_sdk.models.dashboard")
    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    data = json.loads(path.read_text(encoding="utf-8"))
    model = sdk.Dashboard.from_json(data)
    assert json.loads(json.dumps(model, cls=JSONEncoder)) == data


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_layout_ids_and_queries_are_well_formed(path: Path) -> None:
    """Unique uid/panel ids, panels inside the 24-column grid without overlap, one refId per query, units set."""
    data = json.loads(path.read_text(encoding="utf-8"))
    assert re.fullmatch(r"[a-z0-9-]{1,40}", data["uid"])
    ids = [panel["id"] for panel in data["panels"]]
    assert len(ids) == len(set(ids)) and all(ids)
    cells: set[tuple[int, int]] = set()
    for panel in data["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        area = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not area & cells, f"panel {panel['title']!r} overlaps another"
        cells |= area
        if panel["type"] == "row":
            continue
        assert panel["title"] and panel.get("description"), panel
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            if target["datasource"]["type"] == "jaeger":
                assert target["queryType"] == "search" and target["service"] == "$service" and target["operation"], (
                    panel
                )
            else:
                assert target["expr"].strip(), panel["title"]
    assert {v["name"]: v["query"] for v in data["templating"]["list"]} == VARIABLES[path.name]


_STEP, _POSITIVE = contract.series(contract.STEP).name, contract.series(contract.REWARDS.sums[0]).name
VARIABLES = {
    "rl-run.json": {
        # A counter of every run with rewards, whatever its histogram kind (rl_reward_count is classic only).
        "run": f"label_values({_POSITIVE}, rl_run_id)",
        # The run's service name (label job) follows the run: Jaeger searches a service's traces.
        "service": f'label_values({_STEP}{{rl_run_id="$run",rl_rank=""}}, job)',
    },
    "rl-compare.json": {
        "runs": f'label_values({_STEP}{{rl_rank=""}}, rl_run_id)',
        "baseline": f'label_values({_STEP}{{rl_run_id=~"$runs",rl_rank=""}}, rl_run_id)',
        "group": f'label_values({_STEP}{{rl_rank="",rl_run_group!=""}}, rl_run_group)',
    },
}
"""Each dashboard's variables and their queries."""


def test_every_promql_selector_names_the_run_and_the_aggregated_side() -> None:
    """Every Prometheus selector in the dashboards carries rl_run_id="$run" and rl_rank="" (docs/pipeline.md)."""
    for _, panel, target in dashboard_targets():
        if target["datasource"]["type"] == "jaeger":
            assert target["tags"] == 'rl.run.id="$run"', panel["title"]
            continue
        if target["datasource"]["type"] != "prometheus":
            assert '"$run"' in target["expr"], panel["title"]
            continue
        selectors = re.findall(r"[a-z_]+\{([^}]*)\}", target["expr"])
        assert selectors, panel["title"]
        for selector in selectors:
            assert 'rl_run_id="$run"' in selector and 'rl_rank=""' in selector, (panel["title"], selector)


# Synthetic runs for every panel query: "native" (exponential histograms at the library's scale) and "classic"
# (histogram="explicit": le buckets at the bounds the library emits for each distribution); their counters and
# gauges are the same. Per 15 s step: 10 rewards of exactly 1 (5 from dataset "math", 5 from "code"), 10 tokens
# exactly 3 versions behind (math in flight, code in the queue), 8 GRPO groups of which 2 have zero variance (a
# fraction of 0.5 of the 4 groups with an outcome), one loss of -0.5, 4 advantages of -0.5, 10 responses of 128
# tokens, 100 tokens of entropy 0.5, of importance ratio 2 and of mismatch KL 0.25 (k1) and 0.125 (k3). Every
# histogram's values are equal, so each quantile is that value exactly once clamped to [min, max]; unclamped, the
# native estimates lie inside the bucket (0.989 for the p50 of rewards of 1) and the classic ones wherever linear
# interpolation puts them. The buckets are derived from the library's layouts (otel_rl._telemetry.layouts), never
# written here: a query that only works with bounds the library does not emit fails.
_SYNTHETIC_LABELS = 'job="trainer",rl_role="trainer",rl_world_size="2",rl_rank=""'
_SYNTHETIC: list[tuple[Distribution, str, float, int]] = [
    # distribution, attributes, the value recorded, how many times per step
    (contract.REWARDS, 'rl_reward_fn="total",rl_dataset="math"', 1.0, 5),
    (contract.REWARDS, 'rl_reward_fn="total",rl_dataset="code"', 1.0, 5),
    (contract.STALENESS, 'rl_dataset="math",rl_staleness_phase="in_flight"', 3.0, 5),
    (contract.STALENESS, 'rl_dataset="code",rl_staleness_phase="in_queue"', 3.0, 5),
    (contract.METRICS, 'rl_metric_key="loss.policy"', -0.5, 1),
    (contract.ADVANTAGES, "", -0.5, 4),
    (contract.RESPONSE_LENGTHS, "", 128.0, 10),
    (contract.ENTROPY, "", 0.5, 100),
    (contract.IMPORTANCE_RATIO, "", 2.0, 100),
    (contract.MISMATCH_KL, 'rl_kl_estimator="k1"', 0.25, 100),
    (contract.MISMATCH_KL, 'rl_kl_estimator="k3"', 0.125, 100),
    (contract.TRAJECTORY_VERSIONS, "", 2.0, 8),
    (contract.DROPPED_LENGTHS, "", 512.0, 2),
]
PHASE_BUCKETS = contract.PHASE_BOUNDS
"""The bounds of rl_phase_duration_seconds (the ranks' phase metrics; the collector's spanmetrics the same)."""


def _phase_spans(phase: str, seconds: float, spans: int) -> list[tuple[str, str, str]]:
    """The phase series of ``spans`` phase spans of ``seconds`` each per step."""
    labels = f'rl_phase_name="{phase}",span_name="{phase}"'
    buckets = [(f"{b:g}", spans if seconds <= b else 0) for b in PHASE_BUCKETS] + [("+Inf", spans)]
    durations = contract.series(contract.PHASE_DURATION)
    return [
        (durations.sum, labels, f"0+{seconds * spans:g}x40"),
        (durations.count, labels, f"0+{spans}x40"),
        (contract.series(contract.PHASE_CALLS).name, labels, f"0+{spans}x40"),
        *[(durations.bucket, f'{labels},le="{le}"', f"0+{n}x40") for le, n in buckets],
    ]


def _of(metric: contract.MetricName, labels: str, values: str) -> tuple[str, str, str]:
    """A synthetic series of one of the contract's metrics."""
    return contract.series(metric).name, labels, values


_SYNTHETIC_OTHER: list[tuple[str, str, str]] = [
    # series name, its labels besides the run's, values: the same on both runs
    _of(contract.GROUPS, 'rl_group_outcome="none"', "0+1x40"),
    _of(contract.GROUPS, 'rl_group_outcome="some"', "0+2x40"),
    _of(contract.GROUPS, 'rl_group_outcome="all"', "0+1x40"),
    _of(contract.GROUPS_ZERO_VARIANCE, "", "0+2x40"),
    _of(contract.ADVANTAGE_SIGNS, 'rl_sign="positive"', "0+3x40"),
    _of(contract.ADVANTAGE_SIGNS, 'rl_sign="negative"', "0+4x40"),
    _of(contract.ADVANTAGE_SIGNS, 'rl_sign="zero"', "0+1x40"),
    _of(contract.UNVERSIONED, 'rl_dataset="math"', "0+15x40"),
    _of(contract.STALENESS_DROPPED, 'rl_dataset="code"', "0+2x40"),
    _of(contract.RUN_START, "", "-60x40"),
    _of(contract.RUN_FINISHED, "", "0x40"),
    _of(contract.RANKS_UP, "", "2x40"),
    _of(contract.RANKS_EXPECTED, "", "2x40"),
    _of(contract.PHASES, 'rl_phase_name="generate"', "1x40"),
    _of(contract.PHASES, 'rl_phase_name="train"', "1x40"),
    _of(contract.STEP, "", "0+15x40"),
    _of(contract.POLICY_VERSION, "", "0+1x40"),
    _of(contract.VALUES_REJECTED, 'otel_rl_metric="rl.reward",otel_rl_reason="nonfinite"', "0+3x40"),
    _of(contract.SAMPLES_EXPORTED, "", "0+30x40"),
    _of(contract.SPANS_EXPORTED, "", "0+60x40"),
    _of(contract.SPANS_DROPPED, 'otel_rl_reason="queue_full"', "0+30x40"),
    _of(contract.SAMPLES_DROPPED, 'otel_rl_reason="queue_full"', "0+15x40"),
    _of(contract.EXPORT_FAILURES, 'otel_rl_signal="metrics"', "0+1x40"),
    _of(contract.EXPORT_UNENCODABLE, 'otel_rl_signal="logs"', "0+2x40"),
    (foreign.COLLECTOR_POINTS_REJECTED.name, 'metric="rl.reward",reason="count"', "0+2x40"),
    # Means a trainer reduced itself (NeMo Lens's gauges, as the collector maps them).
    _of(contract.REPORTED, 'rl_metric_key="reward/mean"', "0.25x40"),
    _of(contract.REPORTED, 'rl_metric_key="response_length/mean"', "128.5x40"),
    _of(contract.REPORTED, 'rl_metric_key="entropy/mean"', "0.75x40"),
    _of(
        contract.MERGE_CANARY,
        "",
        "{{schema:5 count:0 sum:0}}+{{schema:5 count:4 sum:4 offset:-99 buckets:["
        + " ".join("1" if i + 1 in (-99, -39, 73, 101) else "0" for i in range(-100, 101))
        + "]}}x40",
    ),
    # The audit: per step 10 rollouts paired with their total reward y (5 of 1.5, 5 of 0.5): lengths x of 120 and 136
    # (4 of the 136 with a reward of 1.5), correctness (4 of the 1.5s and 1 of the 0.5s), format = y - correctness.
    # Over a minute's 4 steps: length-reward correlation 3840 / sqrt(102400 * 400) = 0.6; correctness's covariance
    # term 240 of the total's 400 (share 0.6, correlation 0.6), format's 160 (share 0.4).
    *[
        _of(contract.JOINT, f'rl_joint_x="{x}",rl_joint_moment="{moment}"', f"0+{per_step:g}x40")
        for x, moments in (
            ("response_length", {"n": 10, "x.positive": 1280, "xx": 164480, "xy.positive": 1304}),
            ("reward.correctness", {"n": 10, "x.positive": 5, "xx": 5, "xy.positive": 6.5}),
            (
                "reward.format",
                {"n": 10, "x.positive": 5.5, "x.negative": 0.5, "xx": 4.5, "xy.positive": 6.25, "xy.negative": 0.25},
            ),
        )
        for moment, per_step in {
            "x.negative": 0,
            "y.positive": 10,
            "y.negative": 0,
            "yy": 12.5,
            "xy.negative": 0,
            **moments,
        }.items()
    ],
    _of(contract.GROUND_TRUTH, 'rl_reward_fn="total"', "1x40"),
    # Cost: 2 ranks of one GPU each (30 GPU-seconds per 15 s step) at 2 per GPU-hour.
    _of(contract.GPU_SECONDS, "", "0+30x40"),
    _of(contract.GPU_HOUR_PRICE, "", "2x40"),
    # Where the time goes: record_tokens, the FLOPs gauges, set_async_state; the recorded open-phase series.
    _of(contract.TOKENS_GENERATED, "", "0+150x40"),
    _of(contract.TOKENS_TRAINED, "", "0+75x40"),
    _of(contract.SAMPLES_TRAINED, "", "0+15x40"),
    _of(contract.FLOPS_PER_TOKEN, "", "6e9x40"),
    _of(contract.FLOPS_PEAK, "", "1e12x40"),
    _of(contract.QUEUE_DEPTH, "", "3x40"),
    _of(contract.IN_FLIGHT, "", "4x40"),
    _of(contract.BUFFER_USED, "", "10x40"),
    _of(contract.BUFFER_CAPACITY, "", "64x40"),
    (contract.rules.PHASE_OPEN.name, 'rl_phase_name="train"', "30x40"),
    (contract.rules.PHASE_STUCK_THRESHOLD.name, 'rl_phase_name="train"', "600x40"),
    # The inference overlay's scrape of a vLLM server and an SGLang server (their own names, an instance each).
    *[
        (engine.name, f'instance="{instance}"', values)
        for engine, instance, values in (
            (foreign.VLLM_REQUESTS_WAITING, "gpu:8000", "2x40"),
            (foreign.VLLM_REQUESTS_RUNNING, "gpu:8000", "6x40"),
            (foreign.VLLM_KV_CACHE_USAGE, "gpu:8000", "0.5x40"),
            (foreign.VLLM_GPU_CACHE_USAGE, "gpu:8000", "0.5x40"),
            (foreign.VLLM_GENERATION_TOKENS, "gpu:8000", "0+300x40"),
            (foreign.SGLANG_QUEUE_REQUESTS, "sg:30000", "5x40"),
            (foreign.SGLANG_RUNNING_REQUESTS, "sg:30000", "7x40"),
            (foreign.SGLANG_TOKEN_USAGE, "sg:30000", "0.25x40"),
            (foreign.SGLANG_GENERATION_TOKENS, "sg:30000", "0+150x40"),
        )
    ],
    *[
        (histogram.bucket, f'instance="{instance}",le="{le}"', values)
        for histogram, instance, bounds in (
            (foreign.VLLM_TIME_TO_FIRST_TOKEN, "gpu:8000", ("0.25", "0.5")),
            (foreign.SGLANG_TIME_TO_FIRST_TOKEN, "sg:30000", ("0.25", "0.5")),
            (foreign.VLLM_INTER_TOKEN_LATENCY, "gpu:8000", ("0.01", "0.025")),
            (foreign.SGLANG_TIME_PER_OUTPUT_TOKEN, "sg:30000", ("0.01", "0.025")),
        )
        for le, values in ((bounds[0], "0x40"), (bounds[1], "0+10x40"), ("+Inf", "0+10x40"))
    ],
    # Phase spans per 15 s (the collector's spanmetrics, classic buckets): 4 generate spans of 1.5 s, 2 train of 3 s,
    # 2 sync of 0.75 s, 2 wait_data of 1.5 s, over the run's 2 ranks.
    *[
        series
        for phase, seconds, spans in (("generate", 1.5, 4), ("train", 3.0, 2), ("sync", 0.75, 2), ("wait_data", 1.5, 2))
        for series in _phase_spans(phase, seconds, spans)
    ],
]


def _layout(metric: Distribution, histogram: Literal["exponential", "explicit"]) -> Any:
    """The bucket layout the library emits for ``metric`` in the histogram form ``histogram``."""
    from otel_rl import TelemetryConfig
    from otel_rl._pipeline import layouts

    return layouts(TelemetryConfig(histogram=histogram, exporter="none").resolved).of(metric)


def _native(metric: Distribution, value: float, count: int, *, extra: str = "") -> str:
    """promtool's notation of a native histogram holding ``count`` values equal to ``value``, at the scale the
    library uses for ``metric`` (Prometheus's bucket ``i`` is OpenTelemetry's ``i - 1``)."""
    from tests.reference import exponential_sides

    scale = _layout(metric, "exponential").scale
    zero, negative, positive = exponential_sides([value] * count, scale)
    buckets = [f"z_bucket:{zero}"] if zero else []
    buckets += [f"n_offset:{index + 1} n_buckets:[{n}]" for index, n in negative.items()]
    buckets += [f"offset:{index + 1} buckets:[{n}]" for index, n in positive.items()]
    return f"{{{{schema:{scale} count:{count} sum:{value * count:g}{extra} {' '.join(buckets)}}}}}"


def _classic(metric: Distribution, value: float, count: int) -> dict[str, float]:
    """``le`` -> cumulative count of ``count`` values equal to ``value`` at the bounds the library emits."""
    from tests.pipeline.harness import expected_buckets

    return expected_buckets([value] * count, _layout(metric, "explicit").bounds)


def _synthetic_series(run: str) -> list[dict[str, str]]:
    series = []
    for metric, attribute, value, count in _SYNTHETIC:
        labels = ",".join(part for part in (_SYNTHETIC_LABELS, f'rl_run_id="{run}"', attribute) if part)
        histogram = contract.series(metric.histogram)
        if run == "native":
            empty = f"{{{{schema:{_layout(metric, 'exponential').scale} count:0 sum:0}}}}"
            native = f"{empty}+{_native(metric, value, count)}x40"
            series.append({"series": f"{histogram.name}{{{labels}}}", "values": native})
        else:
            series += [
                {"series": f'{histogram.bucket}{{{labels},le="{le}"}}', "values": f"0+{n:g}x40"}
                for le, n in _classic(metric, value, count).items()
            ]
            series.append({"series": f"{histogram.count}{{{labels}}}", "values": f"0+{count}x40"})
            total = value * count
            series.append(
                {"series": f"{histogram.sum}{{{labels}}}", "values": f"0{'+' if total >= 0 else '-'}{abs(total):g}x40"}
            )
        if metric.positive is not None:
            sums = zip(metric.sums, (max(value, 0), max(-value, 0), value**2), strict=True)
            series += [
                {"series": f"{contract.series(part).name}{{{labels}}}", "values": f"0+{total * count:g}x40"}
                for part, total in sums
            ]
        series += [
            {"series": f"{contract.series(extreme).name}{{{labels}}}", "values": f"{value:g}x40"}
            for extreme in (metric.maximum, metric.minimum)
        ]
    for name, attribute, values in _SYNTHETIC_OTHER:
        labels = ",".join(part for part in (_SYNTHETIC_LABELS, f'rl_run_id="{run}"', attribute) if part)
        series.append({"series": f"{name}{{{labels}}}", "values": values})
    return series


_EXPECTED: dict[tuple[str, str], float | dict[str, float]] = {
    # (panel title, refId) -> value of the query on either run at 5 min with a 1 m $__rate_interval: one series
    # without labels, or {labels: value}
    ("Ranks reporting vs expected", "A"): {'{rl_role="trainer"}': 2},
    ("Ranks reporting vs expected", "B"): {'{rl_role="trainer"}': 2},
    ("Ranks per phase", "A"): {'{rl_phase_name="generate"}': 1, '{rl_phase_name="train"}': 1},
    ("Steps per minute", "A"): 60.0,
    ("Run state", "A"): 0.0,
    ("Run duration", "A"): 360.0,
    ("Time since the step changed", "A"): 0.0,
    ("Reward (total): mean and percentiles", "A"): 1.0,
    ("Reward (total): mean and percentiles", "B"): 1.0,
    ("Reward (total): mean and percentiles", "C"): 1.0,
    ("Reward (total): mean and percentiles", "D"): 1.0,
    ("Reward (total): mean and percentiles", "E"): {'{rl_metric_key="reward/mean"}': 0.25},
    ("Mean reward by reward function", "A"): {'{rl_reward_fn="total"}': 1},
    ("Zero-variance groups (fraction)", "A"): 0.5,
    ("Recorded metrics (mean by key)", "A"): {'{rl_metric_key="loss.policy"}': -0.5},
    ("Recorded metrics (mean by key)", "B"): {
        '{rl_metric_key="reward/mean"}': 0.25,
        '{rl_metric_key="response_length/mean"}': 128.5,
        '{rl_metric_key="entropy/mean"}': 0.75,
    },
    ("Advantage: mean and percentiles", "A"): -0.5,
    ("Advantage: mean and percentiles", "B"): -0.5,
    ("Advantage: mean and percentiles", "C"): -0.5,
    ("Advantage: mean and percentiles", "D"): -0.5,
    ("Response length: mean and percentiles", "A"): 128.0,
    ("Response length: mean and percentiles", "B"): 128.0,
    ("Response length: mean and percentiles", "C"): 128.0,
    ("Response length: mean and percentiles", "D"): 128.0,
    ("Response length: mean and percentiles", "E"): {'{rl_metric_key="response_length/mean"}': 128.5},
    ("Entropy per token: mean and percentiles", "A"): 0.5,
    ("Entropy per token: mean and percentiles", "B"): 0.5,
    ("Entropy per token: mean and percentiles", "C"): 0.5,
    ("Entropy per token: mean and percentiles", "D"): 0.5,
    ("Entropy per token: mean and percentiles", "E"): {'{rl_metric_key="entropy/mean"}': 0.75},
    ("Importance ratio π_train / π_inference (per token)", "A"): 2.0,
    ("Importance ratio π_train / π_inference (per token)", "B"): 2.0,
    ("Importance ratio π_train / π_inference (per token)", "C"): 2.0,
    ("Mismatch KL(π_inference ‖ π_train): mean per estimator", "A"): {
        '{rl_kl_estimator="k1"}': 0.25,
        '{rl_kl_estimator="k3"}': 0.125,
    },
    ("Effective sample size fraction", "A"): 1.0,
    ("Prompt groups: outcome and zero variance", "A"): {
        '{rl_group_outcome="none"}': 0.25,
        '{rl_group_outcome="some"}': 0.5,
        '{rl_group_outcome="all"}': 0.25,
    },
    ("Prompt groups: outcome and zero variance", "B"): 0.5,
    ("Advantage sign shares", "A"): {
        '{rl_sign="positive"}': 0.375,
        '{rl_sign="negative"}': 0.5,
        '{rl_sign="zero"}': 0.125,
    },
    ("Staleness (policy versions behind, per token)", "A"): 3.0,
    ("Staleness (policy versions behind, per token)", "B"): 3.0,
    ("Staleness (policy versions behind, per token)", "C"): 3.0,
    ("Policy version and step", "A"): 20.0,
    ("Policy version and step", "B"): 300.0,
    ("Mean reward by dataset", "A"): {'{rl_dataset="math"}': 1, '{rl_dataset="code"}': 1},
    ("Staleness by dataset: p50 and p99", "A"): {'{rl_dataset="math"}': 3, '{rl_dataset="code"}': 3},
    ("Staleness by dataset: p50 and p99", "B"): {'{rl_dataset="math"}': 3, '{rl_dataset="code"}': 3},
    ("Staleness by phase: p50 and p99", "A"): {
        '{rl_staleness_phase="in_flight"}': 3,
        '{rl_staleness_phase="in_queue"}': 3,
    },
    ("Staleness by phase: p50 and p99", "B"): {
        '{rl_staleness_phase="in_flight"}': 3,
        '{rl_staleness_phase="in_queue"}': 3,
    },
    ("Unversioned tokens (per second)", "A"): {'{rl_dataset="math"}': 1},
    ("Samples dropped as too stale", "A"): {'{rl_dataset="code"}': 8},
    ("Rejected values (bad input)", "A"): {'{otel_rl_metric="rl.reward",otel_rl_reason="nonfinite"}': 12},
    ("Rejected values (bad input)", "B"): {'{metric="rl.reward",reason="count"}': 8},
    ("Samples and spans exported and dropped (per second)", "A"): 2.0,
    ("Samples and spans exported and dropped (per second)", "B"): {'{otel_rl_reason="queue_full"}': 1},
    ("Samples and spans exported and dropped (per second)", "C"): 4.0,
    ("Samples and spans exported and dropped (per second)", "D"): {'{otel_rl_reason="queue_full"}': 2},
    ("Export failures", "A"): {'{otel_rl_signal="metrics"}': 4},
    ("Export failures", "B"): {'{otel_rl_signal="logs"}': 8},
    ("Time since last data", "A"): 0.0,
    ("Merge check", "A"): 0.0,
    # Performance: a share of the ranks' time is the rank-seconds per second over the 2 ranks; quantiles interpolate
    # inside the bucket holding every span (generate's 1.5 s in (1, 2.5]: p50 1.75, p99 2.485).
    ("Time split by phase", "A"): {
        '{rl_phase_name="generate"}': 0.2,
        '{rl_phase_name="train"}': 0.2,
        '{rl_phase_name="sync"}': 0.05,
        '{rl_phase_name="wait_data"}': 0.1,
    },
    ("Phase durations: p50 and p99", "A"): {
        '{rl_phase_name="generate"}': 1.75,
        '{rl_phase_name="train"}': 3.75,
        '{rl_phase_name="sync"}': 0.75,
        '{rl_phase_name="wait_data"}': 1.75,
    },
    ("Phase durations: p50 and p99", "B"): {
        '{rl_phase_name="generate"}': 2.485,
        '{rl_phase_name="train"}': 4.975,
        '{rl_phase_name="sync"}': 0.995,
        '{rl_phase_name="wait_data"}': 2.485,
    },
    ("Tokens per second: generated and trained", "A"): 10.0,
    ("Tokens per second: generated and trained", "B"): 5.0,
    ("Samples trained per second", "A"): 1.0,
    ("MFU", "A"): 0.03,
    ("Idle: waiting for data and for weights", "A"): {'{rl_phase_name="wait_data"}': 0.1},
    ("Weight-sync latency", "A"): 0.75,
    ("Weight-sync latency", "B"): 0.75,
    ("Weight-sync latency", "C"): 0.995,
    ("Async pipeline: queue, in flight, buffer", "A"): 3.0,
    ("Async pipeline: queue, in flight, buffer", "B"): 4.0,
    ("Async pipeline: queue, in flight, buffer", "C"): 10.0,
    ("Async pipeline: queue, in flight, buffer", "D"): 64.0,
    ("Policy versions per trajectory", "A"): 2.0,
    ("Policy versions per trajectory", "B"): 2.0,
    ("Policy versions per trajectory", "C"): 2.0,
    ("Phase timeline", "A"): {'{rl_phase_name="generate"}': 1, '{rl_phase_name="train"}': 1},
    ("Time in the open phases vs their stuck thresholds", "A"): {'{rl_phase_name="train"}': 30},
    ("Time in the open phases vs their stuck thresholds", "B"): {'{rl_phase_name="train"}': 600},
    # The audit (cost at 5 min: 600 GPU-seconds at 2 per hour; 300 steps, 1,500 tokens, 60 solved groups).
    ("Total reward and ground truth (mean)", "A"): 1.0,
    ("Total reward and ground truth (mean)", "B"): {'{rl_reward_fn="total"}': 1},
    ("Correlation with the total reward", "A"): {
        '{rl_joint_x="response_length"}': 0.6,
        '{rl_joint_x="reward.correctness"}': 0.6,
        '{rl_joint_x="reward.format"}': 160 / math.sqrt(320 * 400),
    },
    ("Reward variance share by function", "A"): {
        '{rl_joint_x="reward.correctness"}': 0.6,
        '{rl_joint_x="reward.format"}': 0.4,
    },
    ("Stale drops: length dropped and trained", "A"): 512.0,
    ("Stale drops: length dropped and trained", "B"): 128.0,
    ("Cost", "A"): 600 / 3600 * 2,
    ("Cost", "B"): 600 / 3600 * 2 / 300,
    ("Cost", "C"): 600 / 3600 * 2 / (1500 / 1e6),
    ("Cost", "D"): 600 / 3600 * 2 / 60,
    # Inference: one vLLM and one SGLang server, each series its own (vLLM's newer name first where it has two).
    ("Inference: waiting and running requests", "A"): {'{instance="gpu:8000"}': 2, '{instance="sg:30000"}': 5},
    ("Inference: waiting and running requests", "B"): {'{instance="gpu:8000"}': 6, '{instance="sg:30000"}': 7},
    ("Inference: KV-cache use", "A"): {'{instance="gpu:8000"}': 0.5, '{instance="sg:30000"}': 0.25},
    ("Inference: generated tokens per second", "A"): {'{instance="gpu:8000"}': 20, '{instance="sg:30000"}': 10},
    ("Inference: time to first token", "A"): {'{instance="gpu:8000"}': 0.375, '{instance="sg:30000"}': 0.375},
    ("Inference: time to first token", "B"): {'{instance="gpu:8000"}': 0.4975, '{instance="sg:30000"}': 0.4975},
    ("Inference: time per output token", "A"): {'{instance="gpu:8000"}': 0.0175, '{instance="sg:30000"}': 0.0175},
    ("Inference: time per output token", "B"): {'{instance="gpu:8000"}': 0.02485, '{instance="sg:30000"}': 0.02485},
}
_EXPECTED_HEATMAPS = {
    # (panel title, refId) -> (metric, value, count) of one 1 m window: 4 steps of what _SYNTHETIC records
    ("Reward (total) distribution", "A"): (contract.REWARDS, 1.0, 40),
    ("Staleness distribution", "A"): (contract.STALENESS, 3.0, 40),
}


def test_every_panel_query_gives_the_exact_value_on_a_native_and_a_classic_run(promtool: Path, tmp_path: Path) -> None:
    """Every Prometheus panel query runs in promtool and gives the exact value on a native-histogram run and on a
    classic one (quantiles clamped to the exact extremes, ratios from the counters, heatmaps per bucket)."""
    targets = {
        (panel["title"], target["refId"]): target["expr"]
        for _, panel, target in dashboard_targets()
        if target["datasource"]["type"] == "prometheus"
    }
    assert set(targets) == set(_EXPECTED) | set(_EXPECTED_HEATMAPS), "give every panel query an expectation"
    cases = []
    for run in ("native", "classic"):
        for key, expr in targets.items():
            query = expr.replace("$run", run).replace("$__rate_interval", "1m")
            if key in _EXPECTED_HEATMAPS:
                metric, value, count = _EXPECTED_HEATMAPS[key]
                native = _native(metric, value, count, extra=" counter_reset_hint:gauge")
                expected = (
                    [{"labels": "{}", "histogram": native}]
                    if run == "native"
                    else [{"labels": f'{{le="{le}"}}', "value": v} for le, v in _classic(metric, value, count).items()]
                )
            else:
                wanted = _EXPECTED[key]
                samples = wanted if isinstance(wanted, dict) else {"{}": wanted}
                expected = [{"labels": labels, "value": v} for labels, v in samples.items()]
            cases.append({"expr": query, "eval_time": "5m", "exp_samples": expected})
    series = _synthetic_series("native") + _synthetic_series("classic")
    # fuzzy_compare: equal within one ulp (a rate divides the increase by the extrapolated window: 0.9999999999999999)
    test = {
        "evaluation_interval": "15s",
        "fuzzy_compare": True,
        "tests": [{"interval": "15s", "input_series": series, "promql_expr_test": cases}],
    }
    path = tmp_path / "dashboard_queries.yml"
    path.write_text(yaml.safe_dump(test, width=100_000, allow_unicode=True), encoding="utf-8")
    result = subprocess.run(
        [promtool, "test", "rules", path.name], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr


def _provisioned_datasources() -> list[dict[str, Any]]:
    found = []
    for path in sorted((PROVISIONING / "datasources").glob("*.yml")):
        found.extend(yaml.safe_load(path.read_text(encoding="utf-8"))["datasources"])
    return found


def test_dashboards_use_only_provisioned_datasource_uids() -> None:
    """Every datasource uid (and type) a dashboard panel or query uses is provisioned under grafana/provisioning."""
    provisioned = {ds["uid"]: ds["type"] for ds in _provisioned_datasources()}
    assert provisioned == {
        "otel-rl-prometheus": "prometheus",
        "otel-rl-victorialogs": "victoriametrics-logs-datasource",
        "otel-rl-jaeger": "jaeger",
    }
    used = set()
    for path in DASHBOARDS:
        data = json.loads(path.read_text(encoding="utf-8"))
        used |= {
            (m.group(1), m.group(2))
            for m in re.finditer(
                r'"datasource": \{\s*"type": "([^"]+)",\s*"uid": "([^"]+)"', json.dumps(data, indent=2, sort_keys=True)
            )
        }
    assert used and all(provisioned.get(uid) == kind for kind, uid in used), used


def test_compose_prometheus_config_is_valid(promtool: Path) -> None:
    """promtool check config accepts prometheus/prometheus.compose.yml."""
    result = subprocess.run(
        [promtool, "check", "config", ROOT / "prometheus" / "prometheus.compose.yml"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_rule_files_pass_promtool_check(promtool: Path) -> None:
    """promtool check rules accepts every rule file the stack loads (prometheus/rules/*.yml)."""
    result = subprocess.run([promtool, "check", "rules", *RULE_FILES], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", RULE_TESTS, ids=lambda p: p.name)
def test_rule_unit_tests_pass(promtool: Path, path: Path) -> None:
    """promtool test rules: each alert fires when it should and stays silent when it should not."""
    result = subprocess.run(
        [promtool, "test", "rules", path.name], cwd=path.parent, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_that_fires_and_one_that_stays_silent() -> None:
    """Each alert name appears in some promtool test with expected alerts, and in one expecting none."""
    alerts = {rule["alert"] for rule in rules() if "alert" in rule}
    assert alerts == {
        "RLStalenessHigh",
        "RLTelemetryAbsent",
        "RLNonFiniteRewards",
        "RLRewardCollapse",
        "OtelRLHistogramPointsDropped",
        "RLTrainerStalled",
        "RLImportanceRatioHigh",
        "RLMismatchKLHigh",
        "RLEffectiveSampleSizeLow",
        "RLEntropyCollapse",
        "RLZeroVarianceGroupsHigh",
        "RLRanksMissing",
        "RLRunEndedUncleanly",
        "RLPhaseStuck",
        "OtelRLUnencodableTelemetry",
        "RLRewardGaming",
        "RLLengthRewardCorrelationRising",
        "RLRewardFunctionDominates",
        "RLEntropyFalling",
        "RLMismatchKLAccelerating",
        "RLStaleDropsBiasedByLength",
        "RLZeroVarianceShareRising",
    }
    fires: set[str] = set()
    silent: set[str] = set()
    for path in RULE_TESTS:
        for test in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            for case in test.get("alert_rule_test", ()):
                (fires if case.get("exp_alerts") else silent).add(case["alertname"])
    assert alerts <= fires and alerts <= silent, (alerts - fires, alerts - silent)


def test_every_alert_has_a_runbook_and_uses_thresholds_that_have_defaults() -> None:
    """Each alert rule has the annotations summary, description, runbook_url and dashboard_url and a severity; every
    rl_alert_threshold{threshold=...} an alert reads has a default in the rl_alert_threshold rule."""
    threshold = contract.rules.ALERT_THRESHOLD.name
    defaults = set(
        re.findall(r'"threshold", "(\w+)"', next(r["expr"] for r in rules() if r.get("record") == threshold))
    )
    for rule in rules():
        if "alert" not in rule:
            continue
        assert set(rule["annotations"]) == {"summary", "description", "runbook_url", "dashboard_url"}, rule["alert"]
        assert rule["labels"]["severity"] == ("notify" if "audit" in rule["labels"] else "warning"), rule["alert"]
        used = set(re.findall(rf'{threshold}\{{threshold="(\w+)"\}}', rule["expr"]))
        assert used <= defaults, (rule["alert"], used - defaults)


def test_every_rule_selector_reads_the_aggregated_side() -> None:
    """Every selector of a raw otel-rl series in the rules carries rl_rank="" (docs/pipeline.md)."""
    for rule in rules():
        for selector in re.findall(r"\b((?:otel_)?rl_[a-z_]+)\{([^}]*)\}", rule["expr"]):
            name, matchers = selector
            if name.startswith(contract.rules.ALERT_THRESHOLD.name):
                continue
            assert 'rl_rank=""' in matchers, (rule.get("record") or rule.get("alert"), name)


def test_report_shows_the_run_state_in_words() -> None:
    """The report's stat panels carry the dashboard's value mappings: the run state reads as Grafana shows it."""
    from otel_rl_ops.report.dashboard import default_dashboard_path, load_panels

    (state,) = [panel for panel in load_panels(default_dashboard_path()) if panel.title == "Run state"]
    assert state.value_texts == {0.0: "running", 1.0: "finished cleanly", 2.0: "stopped without a clean finish"}
