"""The otel-rl Grafana dashboards as code: ``python grafana/generate.py`` writes ``grafana/dashboards/*.json``.

Built with the Grafana Foundation SDK (``grafana-foundation-sdk`` on PyPI, the ``dashboards`` extra), which also
validates the JSON (``Dashboard.from_json``). The committed JSON files are what Grafana provisions and what
``otel-rl report`` renders; ``tests/dashboards/test_static.py`` checks that they equal this script's output,
so edit this file and rerun it, never the JSON by hand.

Every PromQL selector carries ``rl_rank=""``: aggregated series (one per run) never have a rank, the optional
per-rank gauges always do (docs/pipeline.md, "Per-rank gauges"). Metric names are those of docs/contract.md.

Histograms are read as Prometheus native histograms (``rl_reward``, ``rl_staleness``, ``rl_metric`` and the
``record_rollouts`` distributions ``rl_advantage``, ``rl_response_length``, ``rl_entropy``, ``rl_importance_ratio``,
``rl_mismatch_kl``: the ranks' exponential histograms, the default), each query falling back to the classic
``_bucket``/``_count`` series of ``TelemetryConfig(histogram="explicit")`` in the same expression
(``<native> or <classic>``). Every quantile is clamped to the exact merged min and max of its window by
:func:`clamp_to_extremes`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import runtime as cogruntime
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import heatmap as heatmap_model
from grafana_foundation_sdk.models import prometheus as prometheus_model

from otel_rl.query import clamp_to_extremes

PROMETHEUS_UID = "otel-rl-prometheus"
"""Fixed uid of the Prometheus datasource (``grafana/provisioning/datasources/otel-rl.yml``)."""
VICTORIALOGS_UID = "otel-rl-victorialogs"
"""Fixed uid of the VictoriaLogs datasource."""
VICTORIALOGS_TYPE = "victoriametrics-logs-datasource"
"""Plugin id of the VictoriaLogs Grafana datasource."""
DASHBOARDS_DIR = Path(__file__).resolve().parent / "dashboards"

PROMETHEUS = model.DataSourceRef(type_val="prometheus", uid=PROMETHEUS_UID)
VICTORIALOGS = model.DataSourceRef(type_val=VICTORIALOGS_TYPE, uid=VICTORIALOGS_UID)

RUN = 'rl_run_id="$run",rl_rank=""'
"""Label matchers of one run's aggregated series."""
TOTAL = f'{RUN},rl_reward_fn="total"'
ZERO_VARIANCE_KEY = "grpo.zero_variance_groups"

PANEL_IDS = (
    "Reward",
    "Reward (total): mean and percentiles",
    "Reward (total) distribution",
    "Mean reward by reward function",
    "Zero-variance groups (fraction)",
    "Other recorded metrics (mean by key)",
    "Staleness and progress",
    "Staleness (policy versions behind, per token)",
    "Staleness distribution",
    "Policy version and step",
    "Samples",
    "Samples: top and bottom episodes",
    "Telemetry health",
    "Rejected values (bad input)",
    "Samples exported and dropped (per second)",
    "Export failures",
    "Time since last data",
    "Run",
    "Ranks reporting vs expected",
    "Ranks per phase",
    "Steps per minute",
    "Run state",
    "Run duration",
    "Time since the step changed",
    "Rollout health",
    "Advantage: mean and percentiles",
    "Response length: mean and percentiles",
    "Entropy per token: mean and percentiles",
    "Importance ratio π_train / π_inference (per token)",
    "Mismatch KL(π_inference ‖ π_train): mean per estimator",
    "Effective sample size fraction",
    "Prompt groups: outcome and zero variance",
    "Advantage sign shares",
    "Data & staleness",
    "Mean reward by dataset",
    "Staleness by dataset: p50 and p99",
    "Staleness by phase: p50 and p99",
    "Unversioned tokens (per second)",
    "Samples dropped as too stale",
)
"""Panel (and row) titles in the order their ids were given: a panel's id is its position here + 1, wherever it
sits on the dashboard, so links to a panel (``viewPanel=``) survive layout changes. Append new titles; never
reorder, reuse or remove one."""


WINDOW = "[$__rate_interval]"
"""The range of every windowed query: Grafana's ``$__rate_interval`` (at least 4 collector flushes)."""


def _group(by: str, *extra: str) -> str:
    """``by (...)`` of an aggregation (empty when nothing is grouped)."""
    labels = ", ".join(label for label in (by, *extra) if label)
    return f" by ({labels})" if labels else ""


def _count_rate(metric: str, selector: str, by: str = "") -> str:
    """Values recorded per second into histogram ``metric``: the native histogram's count, else the classic
    ``_count`` (``TelemetryConfig(histogram="explicit")``)."""
    group = _group(by)
    return (
        f"(sum{group} (histogram_count(rate({metric}{{{selector}}}{WINDOW})))"
        f" or sum{group} (rate({metric}_count{{{selector}}}{WINDOW})))"
    )


def _mean(metric: str, selector: str, by: str = "") -> str:
    """Mean over the window from the positive/negative counters and the count (exact for negative values)."""
    group = _group(by)
    return (
        f"(sum{group} (rate({metric}_positive_total{{{selector}}}{WINDOW}))"
        f" - sum{group} (rate({metric}_negative_total{{{selector}}}{WINDOW})))"
        f" / {_count_rate(metric, selector, by)}"
    )


def _traffic_light(*, orange: float, red: float) -> dash.ThresholdsConfig:
    """Green below ``orange``, orange from it, red from ``red``: the stat panels' thresholds."""
    return (
        dash.ThresholdsConfig()
        .mode(model.ThresholdsMode.ABSOLUTE)
        .steps([
            model.Threshold(value=None, color="green"),
            model.Threshold(value=orange, color="orange"),
            model.Threshold(value=red, color="red"),
        ])
    )


def _quantile(q: float, metric: str, selector: str, by: str = "", *, integers: bool = False) -> str:
    """The ``q`` quantile of ``metric`` over the window: from the native histogram, else from the classic
    ``_bucket`` series, clamped to the exact merged min and max over the same window (``_min``/``_max`` gauges).

    ``integers``: the metric only takes integer values (staleness, lengths), so the estimate is rounded: a quantile
    interpolated inside a bucket is otherwise a value nothing had (staleness p50 0.987). Exact while a bucket is
    narrower than 1/2 (values up to 22 at scale 5), within one bucket above."""
    estimate = (
        f"(histogram_quantile({q}, sum{_group(by)} (rate({metric}{{{selector}}}{WINDOW})))"
        f" or histogram_quantile({q}, sum{_group(by, 'le')} (rate({metric}_bucket{{{selector}}}{WINDOW}))))"
    )
    if integers:
        estimate = f"round{estimate}"
    low = f"min{_group(by)} (min_over_time({metric}_min{{{selector}}}{WINDOW}))"
    high = f"max{_group(by)} (max_over_time({metric}_max{{{selector}}}{WINDOW}))"
    return clamp_to_extremes(estimate, low, high, on=by)


def _share(counter: str, label: str, selector: str) -> str:
    """Each ``label`` value's share of counter ``counter`` over the window: its increase over the total increase
    (``on () group_left ()``: one total for every value). NaN, a gap, where nothing was counted."""
    return (
        f"sum by ({label}) (increase({counter}{{{selector}}}{WINDOW}))"
        f" / on () group_left () sum(increase({counter}{{{selector}}}{WINDOW}))"
    )


def _fraction(part: str, whole: str, selector: str) -> str:
    """Counter ``part``'s increase over counter ``whole``'s over the window (``part`` counts a subset of ``whole``)."""
    return f"sum(increase({part}{{{selector}}}{WINDOW})) / sum(increase({whole}{{{selector}}}{WINDOW}))"


def _effective_sample_size(metric: str, selector: str) -> str:
    """Effective sample size fraction of the importance ratios ``r`` recorded over the window,
    ``(Σr)^2 / (n Σr^2)``: 1 when every ratio is equal, ``1/n`` when one token carries all the weight. Kish's
    formula from the exact counters (Σr from ``_positive_total``, the ratios being positive; Σr² from
    ``_squares_total``) and the histogram's count. The window's rates scale all three alike, so it is the ratio of
    the window's sums."""
    sum_rate = f"sum(rate({metric}_positive_total{{{selector}}}{WINDOW}))"
    squares_rate = f"sum(rate({metric}_squares_total{{{selector}}}{WINDOW}))"
    return f"{sum_rate} ^ 2 / ({_count_rate(metric, selector)} * {squares_rate})"


def _seconds_since_step_changed(selector: str) -> str:
    """Seconds since ``rl_step`` last changed, to 15 s: now minus the last 15-second mark at which it differed from
    15 s before (within 6 hours), else minus its first point in those 6 hours (a run still on its first step). The
    same measure as the rule ``rl:step_unchanged_seconds`` (RLTrainerStalled)."""
    step = f"rl_step{{{selector}}}"
    changed = f"max_over_time(timestamp({step} != {step} offset 15s)[6h:15s])"
    first = f"min_over_time(timestamp({step})[6h:15s])"
    return f"time() - max({changed} or {first})"


def _distribution(metric: str, selector: str) -> str:
    """A heatmap query: values recorded per bucket and interval.

    The native histogram (Grafana's Prometheus datasource turns it into a ``heatmap-cells`` frame, bucket bounds
    included), else the classic ``_bucket`` series (``format: heatmap`` de-accumulates them). ``unless on ()``
    keeps the two from mixing in one answer. ``0 * ...exemplars_bucket`` adds no series (its label sets are the
    classic ones, which ``or`` already holds), but it names the collector's exemplar carrier in the query, so
    Grafana's exemplar request returns its exemplars: the latest kept samples of every flush (see
    docs/pipeline.md). An exemplar links to its sample in VictoriaLogs by ``rl.episode.id`` and ``trace_id``.
    """
    native = f"sum(increase({metric}{{{selector}}}{WINDOW}))"
    classic = f"sum by (le) (increase({metric}_bucket{{{selector}}}{WINDOW}))"
    exemplars = f"0 * sum by (le) (increase({metric}_exemplars_bucket{{{selector}}}{WINDOW}))"
    return f"{native} or (({classic} or {exemplars}) unless on () {native})"


def _prom(ref: str, expr: str, legend: str) -> prometheus.Dataquery:
    return (
        prometheus.Dataquery()
        .ref_id(ref)
        .expr(expr)
        .legend_format(legend)
        .range()
        .editor_mode(prometheus_model.QueryEditorMode.CODE)
        .datasource(PROMETHEUS)
    )


class LogsQuery(cogbuilder.Builder[cogvariants.Dataquery]):
    """A VictoriaLogs datasource query (the SDK has no type for this plugin): LogsQL, raw rows (``instant``)."""

    def __init__(self, ref: str, expr: str) -> None:
        self._data: dict[str, Any] = {
            "refId": ref,
            "datasource": VICTORIALOGS.to_json(),
            "editorMode": "code",
            "queryType": "instant",
            "expr": expr,
        }

    def build(self) -> cogvariants.Dataquery:
        return cogruntime.UnknownDataquery(dict(self._data))


def _series(title: str, description: str, unit: str, axis: str, *queries: prometheus.Dataquery) -> timeseries.Panel:
    """A time-series panel; ``axis`` labels the y axis (also used by ``otel-rl report``)."""
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(PROMETHEUS)
        .unit(unit)
        .axis_label(axis)
        .line_width(2)
        .fill_opacity(8)
        .show_points(common.VisibilityMode.NEVER)
        .legend(
            common_builders.VizLegendOptions()
            .show_legend(True)
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
        )
    )
    for query in queries:
        panel = panel.with_target(query)
    return panel


def _stat(title: str, description: str, unit: str, query: prometheus.Dataquery) -> stat.Panel:
    """A single-value panel (an instant query: the value at the end of the time range)."""
    return stat.Panel().title(title).description(description).datasource(PROMETHEUS).unit(unit).with_target(query)


def _run_state(selector: str) -> str:
    """0 running, 1 finished cleanly (the last ``rl_run_finished`` within an hour is 1), 2 stopped without a clean
    finish (that last value is 0 and no ``rl_step`` arrived for 5 minutes)."""
    finished = f"max(last_over_time(rl_run_finished{{{selector}}}[1h]))"
    present = f"max(present_over_time(rl_step{{{selector}}}[5m]))"
    return f"({finished} == 1) or ({finished} + 2 unless {present}) or {finished}"


SAMPLES_QUERY = (
    '{rl.run.id="$run"} rl.sample.selection:in(top,bottom) '
    "| sort by (_time desc) | limit 400 "
    "| sort by (_time desc) limit 1 partition by (rl.sample.id) "
    "| copy _msg as response "
    "| fields _time, rl.step, rl.sample.selection, rl.reward, prompt, response, target "
    "| sort by (_time desc) | limit 200"
)
"""LogsQL of the samples table: the run's kept top/bottom episodes, newest first, with their texts, each once. The
collector sends the response as the message (``VL-Msg-Field: response``), so it is read back from ``_msg``. A
resent record (delivery is at least once) has the same ``rl.sample.id``: of the newest 400 records, one per id."""


def _heatmap(title: str, description: str, axis: str, expr: str) -> heatmap.Panel:
    """A heatmap of a histogram's values per bucket and interval (buckets as recorded, not recalculated)."""
    return (
        heatmap.Panel()
        .title(title)
        .description(description)
        .datasource(PROMETHEUS)
        .with_target(_prom("A", expr, "{{le}}").format(prometheus_model.PromQueryFormat.HEATMAP).exemplar(True))
        .calculate(False)
        .color(heatmap.HeatmapColorOptions().mode(heatmap_model.HeatmapColorMode.SCHEME).scheme("Oranges").steps(64))
        .y_axis(heatmap.YAxisConfig().axis_label(axis))
        .cell_values(heatmap.CellValues().unit("short"))
    )


def rl_run() -> model.Dashboard:
    """The "RL run" dashboard: one run (variable ``run``), reward, staleness, samples and telemetry health."""
    run_variable = (
        dash.QueryVariable("run")
        .label("Run")
        .description("rl.run.id of the run (label rl_run_id)")
        .datasource(PROMETHEUS)
        .query("label_values(rl_reward_positive_total, rl_run_id)")
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
    )
    reward = _series(
        "Reward (total): mean and percentiles",
        "Mean from the exact positive/negative counters ÷ count; p50/p90/p99 estimated from the histogram "
        "(native, else classic buckets) and clamped to the exact min and max of the same interval.",
        "none",
        "reward",
        _prom("A", _mean("rl_reward", TOTAL), "mean"),
        _prom("B", _quantile(0.5, "rl_reward", TOTAL), "p50"),
        _prom("C", _quantile(0.9, "rl_reward", TOTAL), "p90"),
        _prom("D", _quantile(0.99, "rl_reward", TOTAL), "p99"),
    )
    distribution = _heatmap(
        "Reward (total) distribution",
        "Rewards recorded per bucket and interval (native histogram buckets; classic buckets for "
        "histogram=\"explicit\"). Exemplars link to the kept samples.",
        "reward",
        _distribution("rl_reward", TOTAL),
    )
    by_fn = _series(
        "Mean reward by reward function",
        "Per rl.reward.fn, from the exact counters; 'total' is the reward the policy is trained on.",
        "none",
        "mean reward",
        _prom("A", _mean("rl_reward", RUN, by="rl_reward_fn"), "{{rl_reward_fn}}"),
    )
    zero_variance = _series(
        "Zero-variance groups (fraction)",
        f"Mean of rl.metric '{ZERO_VARIANCE_KEY}' (1 per GRPO group whose rewards are all equal): "
        "the share of groups that give no learning signal.",
        "percentunit",
        "fraction of groups",
        _prom("A", _mean("rl_metric", f'{RUN},rl_metric_key="{ZERO_VARIANCE_KEY}"'), "zero-variance fraction"),
    ).min(0).max(1)
    other_metrics = _series(
        "Other recorded metrics (mean by key)",
        "Mean over the interval of every other rl.metric key (e.g. loss.policy).",
        "none",
        "mean value",
        _prom("A", _mean("rl_metric", f'{RUN},rl_metric_key!="{ZERO_VARIANCE_KEY}"', by="rl_metric_key"), "{{rl_metric_key}}"),
    )
    staleness = _series(
        "Staleness (policy versions behind, per token)",
        "p50/p99 from the staleness histogram, clamped to the exact min and max of the same interval; max is exact "
        "(max of the ranks' per-export maxima).",
        "none",
        "versions behind",
        _prom("A", _quantile(0.5, "rl_staleness", RUN, integers=True), "p50"),
        _prom("B", _quantile(0.99, "rl_staleness", RUN, integers=True), "p99"),
        _prom("C", f"max(max_over_time(rl_staleness_max{{{RUN}}}{WINDOW}))", "max"),
    )
    staleness_distribution = _heatmap(
        "Staleness distribution",
        "Tokens per staleness bucket and interval (policy versions behind; zero bucket at 0).",
        "versions behind",
        _distribution("rl_staleness", RUN),
    )
    progress = _series(
        "Policy version and step",
        "The trainer's current policy version and last declared step (max over ranks).",
        "none",
        "version / step",
        _prom("A", f"max(rl_policy_version{{{RUN}}})", "policy version"),
        _prom("B", f"max(rl_step{{{RUN}}})", "step"),
    )
    samples = (
        table.Panel()
        .title("Samples: top and bottom episodes")
        .description("Kept samples from VictoriaLogs (top-k and bottom-k by reward per step), newest first.")
        .datasource(VICTORIALOGS)
        .with_target(LogsQuery("A", SAMPLES_QUERY))
        .with_transformation(model.DataTransformerConfig(id_val="extractFields", options={"source": "labels", "format": "json", "replace": False, "keepTime": False}))
        .with_transformation(
            model.DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {"Line": True, "id": True, "labels": True},
                    "indexByName": {"Time": 0, "rl.step": 1, "rl.sample.selection": 2, "rl.reward": 3, "prompt": 4, "response": 5, "target": 6},
                    "renameByName": {"rl.step": "step", "rl.sample.selection": "selection", "rl.reward": "reward"},
                },
            )
        )
        .cell_height(common.TableCellHeight.AUTO)
        .filterable(True)
    )
    rejected = _series(
        "Rejected values (bad input)",
        "Values dropped at record time, by metric and reason (nonfinite, negative, shape, ...), per interval.",
        "short",
        "values per interval",
        _prom(
            "A",
            f"sum by (otel_rl_metric, otel_rl_reason) (increase(otel_rl_values_rejected_total{{{RUN}}}[$__rate_interval]))",
            "{{otel_rl_metric}} {{otel_rl_reason}}",
        ),
    )
    sample_flow = _series(
        "Samples exported and dropped (per second)",
        "Sample log records handed to the exporter, and those dropped (queue_full, invalid, shutdown).",
        "short",
        "samples / s",
        _prom("A", f"sum(rate(otel_rl_samples_exported_total{{{RUN}}}[$__rate_interval]))", "exported"),
        _prom(
            "B",
            f"sum by (otel_rl_reason) (rate(otel_rl_samples_dropped_total{{{RUN}}}[$__rate_interval]))",
            "dropped {{otel_rl_reason}}",
        ),
    )
    failures = _series(
        "Export failures",
        "Failed OTLP exports from the ranks, by signal, per interval (a failed metrics export folds into the next).",
        "short",
        "failures per interval",
        _prom(
            "A",
            f"sum by (otel_rl_signal) (increase(otel_rl_export_failures_total{{{RUN}}}[$__rate_interval]))",
            "{{otel_rl_signal}}",
        ),
    )
    freshness = (
        stat.Panel()
        .title("Time since last data")
        .description("Seconds since the run's last aggregated point reached Prometheus (rl_step).")
        .datasource(PROMETHEUS)
        .unit("s")
        .with_target(_prom("A", f"time() - max(timestamp(rl_step{{{RUN}}}))", "seconds since last data").instant())
        .thresholds(_traffic_light(orange=60, red=300))
    )
    # Run: is it up, are all ranks in, what are they doing, is the step moving.
    ranks = _series(
        "Ranks reporting vs expected",
        "Ranks that reported in the collector's last flush (rl_ranks_up: each rank reports 1, the collector sums) "
        "against the world size (rl_ranks_expected), per role. Fewer for minutes: a rank died or hangs "
        "(RLRanksMissing).",
        "short",
        "ranks",
        _prom("A", f"sum by (rl_role) (rl_ranks_up{{{RUN}}})", "{{rl_role}} reporting"),
        _prom("B", f"max by (rl_role) (rl_ranks_expected{{{RUN}}})", "{{rl_role}} expected"),
    ).min(0)
    phases = _series(
        "Ranks per phase",
        "Ranks in each phase (rl_phase: each rank reports 1 for the phase it declared with set_phase), stacked: "
        "where the run spends its time (generate, score, train, sync, ...).",
        "short",
        "ranks",
        _prom("A", f"sum by (rl_phase_name) (rl_phase{{{RUN}}})", "{{rl_phase_name}}"),
    ).min(0).stacking(common_builders.StackingConfig().mode(common.StackingMode.NORMAL)).fill_opacity(40)
    step_rate = _series(
        "Steps per minute",
        "Training steps per minute, the slope of rl_step (least squares over 5 minutes); 0 while the trainer is "
        "stalled (RLTrainerStalled).",
        "none",
        "steps / min",
        _prom("A", f"60 * max(deriv(rl_step{{{RUN}}}[5m]))", "steps per minute"),
    ).min(0)
    run_state = (
        _stat(
            "Run state",
            "running while the ranks report (rl_run_finished 0); finished once the reporting ranks shut down "
            "cleanly (1); stopped when nothing arrived for 5 minutes and the last word was not a clean shutdown "
            "(RLRunEndedUncleanly).",
            "none",
            _prom("A", _run_state(RUN), "run state").instant(),
        )
        .mappings([
            model.ValueMap(options={
                "0": model.ValueMappingResult(text="running", color="blue", index=0),
                "1": model.ValueMappingResult(text="finished cleanly", color="green", index=1),
                "2": model.ValueMappingResult(text="stopped without a clean finish", color="red", index=2),
            })
        ])
    )
    duration = _stat(
        "Run duration",
        "From the start of the run's first process (rl_run_start_time_seconds, min over ranks) to its last data "
        "(rl_step).",
        "s",
        _prom(
            "A",
            f"max(timestamp(rl_step{{{RUN}}})) - min(rl_run_start_time_seconds{{{RUN}}})",
            "since the first process started",
        ).instant(),
    )
    unchanged = _stat(
        "Time since the step changed",
        "Seconds since rl_step last changed (to 15 s; capped at 6 hours). Grows while the trainer is stalled "
        "or the run has stopped.",
        "s",
        _prom("A", _seconds_since_step_changed(RUN), "seconds since the step changed").instant(),
    ).thresholds(_traffic_light(orange=600, red=1800))

    # Rollout health: what record_rollouts measured.
    advantage = _series(
        "Advantage: mean and percentiles",
        "Per rollout (rl_advantage). Mean from the exact counters; p10/p50/p90 from the histogram, clamped to the "
        "exact min and max of the interval. A mean far from 0 or a collapsing spread: check the baseline and the "
        "advantage normalization.",
        "none",
        "advantage",
        _prom("A", _mean("rl_advantage", RUN), "mean"),
        _prom("B", _quantile(0.1, "rl_advantage", RUN), "p10"),
        _prom("C", _quantile(0.5, "rl_advantage", RUN), "p50"),
        _prom("D", _quantile(0.9, "rl_advantage", RUN), "p90"),
    )
    length = _series(
        "Response length: mean and percentiles",
        "Tokens per response (rl_response_length). Mean from the exact counters; p50/p90/p99 clamped to the "
        "exact min and max. A p99 at the generation limit: responses are truncated.",
        "none",
        "tokens",
        _prom("A", _mean("rl_response_length", RUN), "mean"),
        _prom("B", _quantile(0.5, "rl_response_length", RUN, integers=True), "p50"),
        _prom("C", _quantile(0.9, "rl_response_length", RUN, integers=True), "p90"),
        _prom("D", _quantile(0.99, "rl_response_length", RUN, integers=True), "p99"),
    ).min(0)
    entropy = _series(
        "Entropy per token: mean and percentiles",
        "Policy entropy per unmasked token (rl_entropy, nats). Mean from the exact counters; p10/p50/p90 clamped "
        "to the exact min and max. A mean falling towards 0: entropy collapse, exploration is gone "
        "(RLEntropyCollapse).",
        "none",
        "nats",
        _prom("A", _mean("rl_entropy", RUN), "mean"),
        _prom("B", _quantile(0.1, "rl_entropy", RUN), "p10"),
        _prom("C", _quantile(0.5, "rl_entropy", RUN), "p50"),
        _prom("D", _quantile(0.9, "rl_entropy", RUN), "p90"),
    ).min(0)
    ratio = _series(
        "Importance ratio π_train / π_inference (per token)",
        "rl_importance_ratio = exp(trainer log-prob − inference log-prob) per token: p1/p50/p99 clamped to the "
        "exact min and max. 1 when the inference engine and the trainer agree; tails far from 1 mean a "
        "trainer/inference mismatch (RLImportanceRatioHigh).",
        "none",
        "ratio",
        _prom("A", _quantile(0.01, "rl_importance_ratio", RUN), "p1"),
        _prom("B", _quantile(0.5, "rl_importance_ratio", RUN), "p50"),
        _prom("C", _quantile(0.99, "rl_importance_ratio", RUN), "p99"),
    )
    mismatch = _series(
        "Mismatch KL(π_inference ‖ π_train): mean per estimator",
        "Mean per token of rl_mismatch_kl by rl_kl_estimator (k1 = −log r, unbiased, can be negative per token; "
        "k3 = (r − 1) − log r, never negative), from the exact counters (RLMismatchKLHigh watches k3).",
        "none",
        "nats per token",
        _prom("A", _mean("rl_mismatch_kl", RUN, by="rl_kl_estimator"), "{{rl_kl_estimator}}"),
    )
    ess = _series(
        "Effective sample size fraction",
        "(Σr)² / (n·Σr²) of the interval's importance ratios r, from the exact counters: 1 when all tokens weigh "
        "the same, towards 0 when a few tokens carry the importance weights (RLEffectiveSampleSizeLow).",
        "percentunit",
        "fraction of tokens",
        _prom("A", _effective_sample_size("rl_importance_ratio", RUN), "ESS / n"),
    ).min(0).max(1)
    groups = _series(
        "Prompt groups: outcome and zero variance",
        "Share of the interval's prompt groups whose rollouts were solved by none, some or all of them "
        "(rl_groups_total), and of groups whose rewards are all equal (rl_groups_zero_variance_total: no GRPO "
        "signal, RLZeroVarianceGroupsHigh). Exact ratios of counter increases.",
        "percentunit",
        "fraction of groups",
        _prom("A", _share("rl_groups_total", "rl_group_outcome", RUN), "{{rl_group_outcome}} solved"),
        _prom("B", _fraction("rl_groups_zero_variance_total", "rl_groups_total", RUN), "zero variance"),
    ).min(0).max(1)
    signs = _series(
        "Advantage sign shares",
        "Share of the interval's rollouts with a positive, negative or zero advantage (rl_advantage_sign_total). "
        "Mostly zero: groups without signal; lopsided: a biased baseline.",
        "percentunit",
        "fraction of rollouts",
        _prom("A", _share("rl_advantage_sign_total", "rl_sign", RUN), "{{rl_sign}}"),
    ).min(0).max(1).stacking(common_builders.StackingConfig().mode(common.StackingMode.NORMAL)).fill_opacity(40)

    # Data & staleness: per data source (rl_dataset) and per staleness phase.
    with_dataset = f'{RUN},rl_dataset!=""'
    with_phase = f'{RUN},rl_staleness_phase!=""'
    reward_by_dataset = _series(
        "Mean reward by dataset",
        "Mean total reward per rl_dataset (record_rewards(..., dataset=)), from the exact counters. Rewards "
        "recorded without a dataset are left out.",
        "none",
        "mean reward",
        _prom("A", _mean("rl_reward", f'{TOTAL},rl_dataset!=""', by="rl_dataset"), "{{rl_dataset}}"),
    )
    staleness_by_dataset = _series(
        "Staleness by dataset: p50 and p99",
        "Per rl_dataset (record_staleness(..., dataset=)): percentiles of per-token staleness, clamped to the "
        "dataset's exact min and max.",
        "none",
        "versions behind",
        _prom("A", _quantile(0.5, "rl_staleness", with_dataset, by="rl_dataset", integers=True), "{{rl_dataset}} p50"),
        _prom("B", _quantile(0.99, "rl_staleness", with_dataset, by="rl_dataset", integers=True), "{{rl_dataset}} p99"),
    ).min(0)
    staleness_by_phase = _series(
        "Staleness by phase: p50 and p99",
        "Per rl_staleness_phase (record_staleness(..., phase=)): in_flight (generated while the trainer moved on) "
        "and in_queue (waited in the buffer), clamped to each phase's exact min and max.",
        "none",
        "versions behind",
        _prom("A", _quantile(0.5, "rl_staleness", with_phase, by="rl_staleness_phase", integers=True), "{{rl_staleness_phase}} p50"),
        _prom("B", _quantile(0.99, "rl_staleness", with_phase, by="rl_staleness_phase", integers=True), "{{rl_staleness_phase}} p99"),
    ).min(0)
    unversioned = _series(
        "Unversioned tokens (per second)",
        "Tokens recorded without a policy version (negative or NaN version): counted in "
        "rl_staleness_unversioned_total, never as staleness 0. By rl_dataset when given.",
        "short",
        "tokens / s",
        _prom(
            "A", f"sum by (rl_dataset) (rate(rl_staleness_unversioned_total{{{RUN}}}{WINDOW}))", "unversioned {{rl_dataset}}"
        ),
    ).min(0)
    drops = _series(
        "Samples dropped as too stale",
        "Samples the trainer dropped for staleness (record_staleness_drops), per interval and rl_dataset.",
        "short",
        "samples per interval",
        _prom("A", f"sum by (rl_dataset) (increase(rl_staleness_dropped_total{{{RUN}}}{WINDOW}))", "dropped {{rl_dataset}}"),
    ).min(0)

    builder = (
        dash.Dashboard("RL run")
        .uid("otel-rl-run")
        .description("One RL run (rl.run.id): reward and staleness distributions, samples, telemetry health (otel-rl).")
        .tags(["otel-rl", "rl"])
        .editable()
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .with_variable(run_variable)
        .with_row(dash.Row("Run"))
        .with_panel(ranks.span(8).height(7))
        .with_panel(phases.span(8).height(7))
        .with_panel(step_rate.span(8).height(7))
        .with_panel(run_state.span(8).height(4))
        .with_panel(duration.span(8).height(4))
        .with_panel(unchanged.span(8).height(4))
        .with_row(dash.Row("Reward"))
        .with_panel(reward.span(12).height(9))
        .with_panel(distribution.span(12).height(9))
        .with_panel(by_fn.span(8).height(8))
        .with_panel(zero_variance.span(8).height(8))
        .with_panel(other_metrics.span(8).height(8))
        .with_row(dash.Row("Rollout health"))
        .with_panel(advantage.span(8).height(8))
        .with_panel(length.span(8).height(8))
        .with_panel(entropy.span(8).height(8))
        .with_panel(ratio.span(8).height(8))
        .with_panel(mismatch.span(8).height(8))
        .with_panel(ess.span(8).height(8))
        .with_panel(groups.span(12).height(8))
        .with_panel(signs.span(12).height(8))
        .with_row(dash.Row("Staleness and progress"))
        .with_panel(staleness.span(8).height(8))
        .with_panel(staleness_distribution.span(8).height(8))
        .with_panel(progress.span(8).height(8))
        .with_row(dash.Row("Data & staleness"))
        .with_panel(reward_by_dataset.span(8).height(8))
        .with_panel(staleness_by_dataset.span(8).height(8))
        .with_panel(staleness_by_phase.span(8).height(8))
        .with_panel(unversioned.span(12).height(7))
        .with_panel(drops.span(12).height(7))
        .with_row(dash.Row("Samples"))
        .with_panel(samples.span(24).height(12))
        .with_row(dash.Row("Telemetry health"))
        .with_panel(rejected.span(8).height(8))
        .with_panel(sample_flow.span(8).height(8))
        .with_panel(failures.span(5).height(8))
        .with_panel(freshness.span(3).height(8))
    )
    built = builder.build()
    for panel in built.panels or ():
        panel.id_val = PANEL_IDS.index(panel.title or "") + 1  # stable ids: links refer to panels by them
    return built


DASHBOARDS = {"rl-run.json": rl_run}
"""File name under ``grafana/dashboards/`` -> function building that dashboard."""


def render(build: Any) -> str:
    """Return the dashboard as the JSON text that is committed (sorted keys, 2-space indent, final newline)."""
    data = json.loads(json.dumps(build(), cls=JSONEncoder))
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write every dashboard into ``grafana/dashboards/`` (or the folder given as the only argument)."""
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else DASHBOARDS_DIR
    out.mkdir(parents=True, exist_ok=True)
    for name, build in DASHBOARDS.items():
        (out / name).write_text(render(build), encoding="utf-8")
        print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
