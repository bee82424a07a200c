"""The "RL compare" dashboard: several runs, and seed groups, on one step axis.

Prometheus indexes every series by time, and runs started at different times share no time axis (Grafana has no
per-query absolute time range). So each panel asks one query that answers, for every run, a learning signal and the
run's step at the same instants (:func:`otel_rl_ops.promql.at_step`), and Grafana's transformations turn the time
series into rows of (run, step, value) before plotting the value against the step:

* "Runs by step": an XY chart per signal, one line per run ("Labels to fields", then "Partition by values" by run;
  the XY chart's automatic series mapping takes ``step`` as x in every frame);
* "Seed group $group", repeated for each selected group: a trend panel per signal with the group's mean and its
  min-max band over its runs at each step ("Group by" run and step, then by step: mean, min, max);
* "Δ against the baseline": a trend panel per signal with each run minus the baseline run at matching steps
  ("Grouping to matrix" of step by run, then "Add field from calculation" on all number fields minus ``$baseline``);
* "Samples": the same prompt's kept samples side by side across runs (LogsQL, "Grouping to matrix" of prompt by run).

Grafana plots each point at the step the run had reached, the value over the last ``$__rate_interval``; ``otel-rl
report --run-id A --run-id B`` evaluates the same queries over exact step windows (docs/dashboards.md, "Comparing
runs"). Panel ids are permanent: a signal's panels are ``id``, ``100 + id`` (its group panel) and ``200 + id`` (its
delta panel); the next new signal takes id 17.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import otel_rl_contract as contract
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import table, trend, xychart
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import xychart as xychart_model
from otel_rl_ops import promql
from rows.panels import PROMETHEUS, VICTORIALOGS, LogsQuery, Panel, prom

RUN = promql.RUN_LABEL
GROUP = promql.GROUP_LABEL
RUNS = f"{promql.match(RUN, '$runs', '=~')},{promql.matchers(rl_rank='')}"
"""The selected runs' aggregated series."""
GROUP_RUNS = f"{promql.matchers(**{GROUP: '$group', 'rl_rank': ''})}"
"""The aggregated series of the runs of one group (a repeated row holds one value of ``$group``)."""
WINDOW = "$__rate_interval"
STEP = "step"
VALUE = "value"
REWARD = contract.REWARDS
TOTAL = promql.matchers(**{contract.label(contract.REWARD_FN): contract.REWARD_FN_TOTAL})
FN = contract.label(contract.REWARD_FN)
PHASE = contract.label(contract.PHASE)


@dataclass(frozen=True)
class Signal:
    """One learning signal compared across runs: its panels' title, description, unit and y axis, and its query."""

    id: int
    title: str
    description: str
    unit: str
    axis: str
    query: Callable[[str], str]
    """The signal over ``$__rate_interval`` for the runs a selector selects, by ``rl_run_id`` (and ``dimension``)."""
    dimension: str = ""
    """A label besides the run, one line per value (reward functions, phases); such a signal has no group or delta
    panels (a band or a delta per run and value would not read)."""


def _by(*labels: str) -> str:
    return ", ".join((RUN, *labels))


def _ground_truth(selector: str) -> str:
    """The mean of each run's ground-truth reward function (``ground_truth_reward``), by run."""
    means = promql.mean(REWARD, selector, by=_by(FN), window=WINDOW)
    truth = f"max by ({_by(FN)}) ({contract.series(contract.GROUND_TRUTH).name}{{{selector}}}) == 1"
    return f"max by ({RUN}) ({means} * on ({_by(FN)}) group_left () ({truth}))"


def _percentile(q: float) -> Signal:
    return Signal(
        {0.1: 3, 0.5: 4, 0.9: 5}[q],
        f"Reward (total): p{q * 100:g}",
        f"The p{q * 100:g} of the total rewards recorded over the interval, from the exact increases of the "
        "histogram's buckets (native, else classic), clamped to the exact min and max of the same interval.",
        "none",
        "reward",
        lambda s: promql.increase_quantile(q, REWARD, f"{s},{TOTAL}", by=RUN, window=WINDOW),
    )


SIGNALS: tuple[Signal, ...] = (
    Signal(
        2,
        "Reward (total): mean",
        "Mean of the total rewards recorded over the interval, from the exact positive/negative counters over the "
        "count.",
        "none",
        "mean reward",
        lambda s: promql.mean(REWARD, f"{s},{TOTAL}", by=RUN, window=WINDOW),
    ),
    _percentile(0.1),
    _percentile(0.5),
    _percentile(0.9),
    Signal(
        6,
        "Mean reward by reward function",
        "Per rl.reward.fn, from the exact counters; 'total' is the reward the policy is trained on.",
        "none",
        "mean reward",
        lambda s: promql.mean(REWARD, s, by=_by(FN), window=WINDOW),
        FN,
    ),
    Signal(
        7,
        "Ground-truth reward (mean)",
        "Mean of each run's ground-truth reward function (TelemetryConfig.ground_truth_reward, default correctness): "
        "what the runs learn, whatever their total rewards pay.",
        "none",
        "mean reward",
        _ground_truth,
    ),
    Signal(
        8,
        "Staleness: mean",
        "Mean policy lag per token (versions behind) over the interval: the exact increase of the histogram's sum over "
        "its count's.",
        "none",
        "versions behind",
        lambda s: promql.histogram_mean(contract.series(contract.STALENESS.histogram), s, by=RUN, window=WINDOW),
    ),
    Signal(
        9,
        "Staleness: p99",
        "p99 of the policy lag per token over the interval, from the exact increases of the buckets, rounded (lags are "
        "integers) and clamped to the exact min and max.",
        "none",
        "versions behind",
        lambda s: promql.increase_quantile(0.99, contract.STALENESS, s, by=RUN, window=WINDOW, integers=True),
    ),
    Signal(
        10,
        "Response length: mean",
        "Mean tokens per response (record_rollouts) over the interval, from the exact counters.",
        "none",
        "tokens",
        lambda s: promql.mean(contract.RESPONSE_LENGTHS, s, by=RUN, window=WINDOW),
    ),
    Signal(
        11,
        "Entropy per token: mean",
        "Mean policy entropy per unmasked token (nats) over the interval, from the exact counters.",
        "none",
        "nats",
        lambda s: promql.mean(contract.ENTROPY, s, by=RUN, window=WINDOW),
    ),
    Signal(
        12,
        "Mismatch KL (k3): mean per token",
        "Mean per token of the k3 estimate of KL(π_inference ‖ π_train) over the interval, from the exact counters.",
        "none",
        "nats per token",
        lambda s: promql.mean(
            contract.MISMATCH_KL,
            f"{s},{promql.matchers(**{contract.label(contract.KL_ESTIMATOR): 'k3'})}",
            by=RUN,
            window=WINDOW,
        ),
    ),
    Signal(
        13,
        "Time split by phase",
        "Share of each run's ranks' time spent in each phase over the interval: the exact increase of the phase "
        "durations' sum over the seconds between the interval's points times the run's ranks.",
        "percentunit",
        "share of the ranks' time",
        lambda s: promql.increase_phase_share(s, window=WINDOW),
        PHASE,
    ),
    Signal(
        14,
        "Tokens generated per second",
        "Tokens generated by the rollouts (record_tokens) over the interval, per second between its points.",
        "short",
        "tokens / s",
        lambda s: promql.increase_rate(contract.series(contract.TOKENS_GENERATED), s, window=WINDOW),
    ),
    Signal(
        15,
        "Tokens trained per second",
        "Tokens trained on (record_tokens) over the interval, per second between its points.",
        "short",
        "tokens / s",
        lambda s: promql.increase_rate(contract.series(contract.TOKENS_TRAINED), s, window=WINDOW),
    ),
    Signal(
        16,
        "Cost so far",
        "GPU-hours held by the run's ranks times its price per GPU-hour (gpu_hour_price), at the step reached: what "
        "each run paid to get there. Nothing for a run that states no price.",
        "none",
        "cost",
        lambda s: promql.cost(s, by=RUN),
    ),
)
"""The signals compared, in dashboard order: reward distribution, per-function rewards, the ground truth, staleness,
lengths, entropy, the mismatch KL, the phase time split, tokens per second and cost."""

SAMPLES_QUERY = (
    "{rl.run.id in (${runs:doublequote})} rl.sample.selection:in(top,bottom) "
    "prompt:in({rl.run.id in (${runs:doublequote})} rl.sample.selection:in(top,bottom) "
    "| stats by (prompt) count_uniq(rl.run.id) as runs | filter runs:>1 | fields prompt) "
    "| sort by (_time desc) limit 1 partition by (prompt, rl.run.id) "
    "| copy _msg as response "
    '| format "step <rl.step>, reward <rl.reward>: <response>" as sample '
    "| fields _time, prompt, rl.run.id, rl.step, rl.reward, response, sample "
    "| sort by (prompt, rl.run.id) | limit 400"
)
"""LogsQL of the samples side by side: the prompts that two or more of the selected runs kept a sample of, and each
run's latest kept sample of each (its step, reward and response). ``${runs:doublequote}`` is Grafana's list of the
selected runs, each in double quotes."""


def _transformation(name: str, **options: Any) -> model.DataTransformerConfig:
    return model.DataTransformerConfig(id_val=name, options=options)


TO_ROWS = _transformation("labelsToFields", mode="columns", valueLabel=promql.FIELD_LABEL)
"""The query's two halves (``field="step"`` and ``field="value"``) as the columns ``step`` and ``value`` of one row
per run and instant."""


def _query(signal: Signal, selector: str) -> Any:
    return prom("A", promql.at_step(signal.query(selector), selector), "")


def _legend() -> common_builders.VizLegendOptions:
    return (
        common_builders.VizLegendOptions()
        .show_legend(True)
        .display_mode(common.LegendDisplayMode.LIST)
        .placement(common.LegendPlacement.BOTTOM)
    )


def _runs_panel(signal: Signal) -> Panel:
    """The signal of every selected run against its step: an XY chart, one line per run (and value of the
    dimension)."""
    by_x = xychart.XychartXYSeriesConfigX().matcher(xychart.MatcherConfig().id("byName").options(STEP))
    by_y = xychart.XychartXYSeriesConfigY().matcher(xychart.MatcherConfig().id("byName").options(VALUE))
    partition = [RUN, signal.dimension] if signal.dimension else [RUN]
    return (
        xychart.Panel()
        .id(signal.id)
        .title(signal.title)
        .description(f"{signal.description} One line per run, at the step it had reached.")
        .datasource(PROMETHEUS)
        .unit(signal.unit)
        .axis_label(signal.axis)
        .mapping(xychart_model.SeriesMapping.AUTO)
        .series([xychart.XYSeriesConfig().x(by_x).y(by_y)])
        .show(xychart_model.XYShowMode.LINES)
        .line_width(2)
        .legend(_legend())
        .with_target(_query(signal, RUNS))
        .with_transformation(TO_ROWS)
        .with_transformation(
            _transformation("partitionByValues", fields=partition, keepFields=False, naming={"asLabels": True})
        )
    )


def _last_per_run_and_step() -> model.DataTransformerConfig:
    """One row per run and step: the last value the run had at that step."""
    return _transformation(
        "groupBy",
        fields={
            RUN: {"operation": "groupby", "aggregations": []},
            STEP: {"operation": "groupby", "aggregations": []},
            VALUE: {"operation": "aggregate", "aggregations": ["lastNotNull"]},
        },
    )


def _by_step() -> model.DataTransformerConfig:
    return _transformation("sortBy", fields={}, sort=[{"field": STEP, "desc": False}])


def _trend(signal: Signal, panel_id: int, title: str, description: str) -> trend.Panel:
    return (
        trend.Panel()
        .id(panel_id)
        .title(title)
        .description(description)
        .datasource(PROMETHEUS)
        .unit(signal.unit)
        .axis_label(signal.axis)
        .x_field(STEP)
        .line_width(2)
        .show_points(common.VisibilityMode.NEVER)
        .legend(_legend())
    )


def _group_panel(signal: Signal) -> Panel:
    """The signal of one group's runs: their mean at each step, and the band between their min and max."""
    last = f"{VALUE} (lastNotNull)"
    stats = {f"{last} (mean)": "mean", f"{last} (min)": "min", f"{last} (max)": "max"}
    return (
        _trend(
            signal,
            100 + signal.id,
            f"{signal.title}: $group",
            f"{signal.description} The mean over the group's runs at each step, and the band between their min and "
            "max (each run's last value at the step).",
        )
        .with_target(_query(signal, GROUP_RUNS))
        .with_transformation(TO_ROWS)
        .with_transformation(_last_per_run_and_step())
        .with_transformation(
            _transformation(
                "groupBy",
                fields={
                    STEP: {"operation": "groupby", "aggregations": []},
                    last: {"operation": "aggregate", "aggregations": ["mean", "min", "max"]},
                },
            )
        )
        .with_transformation(_transformation("organize", renameByName=stats, excludeByName={}, indexByName={}))
        .with_transformation(_by_step())
        .override_by_name(
            "max",
            [
                model.DynamicConfigValue(id_val="custom.fillBelowTo", value="min"),
                model.DynamicConfigValue(id_val="custom.fillOpacity", value=25),
                model.DynamicConfigValue(id_val="custom.lineWidth", value=0),
            ],
        )
        .override_by_name("min", [model.DynamicConfigValue(id_val="custom.lineWidth", value=0)])
    )


def _delta_panel(signal: Signal) -> Panel:
    """Each selected run minus the baseline run at matching steps."""
    delta = r" - \$\{baseline\}"
    return (
        _trend(
            signal,
            200 + signal.id,
            f"{signal.title}: minus $baseline",
            f"{signal.description} Each run's value minus the baseline run's at the same step (each run's last value "
            "at the step).",
        )
        .with_target(_query(signal, RUNS))
        .with_transformation(TO_ROWS)
        .with_transformation(_last_per_run_and_step())
        .with_transformation(
            _transformation(
                "groupingToMatrix",
                columnField=RUN,
                rowField=STEP,
                valueField=f"{VALUE} (lastNotNull)",
                emptyValue="null",
            )
        )
        .with_transformation(
            _transformation("organize", renameByName={f"{STEP}\\{RUN}": STEP}, excludeByName={}, indexByName={})
        )
        .with_transformation(
            _transformation(
                "calculateField",
                mode="binary",
                binary={
                    "left": {"matcher": {"id": "byType", "options": "number"}},
                    "operator": "-",
                    "right": {"matcher": {"id": "byName", "options": "${baseline}"}},
                },
                replaceFields=False,
            )
        )
        .with_transformation(_transformation("filterFieldsByName", include={"pattern": f"^({STEP}|.+{delta})$"}))
        .with_transformation(_transformation("renameByRegex", regex=f"^(.+){delta}$", renamePattern="$1"))
        .with_transformation(
            _transformation(
                "convertFieldType", fields={}, conversions=[{"targetField": STEP, "destinationType": "number"}]
            )
        )
        .with_transformation(_by_step())
    )


def _samples_panel() -> Panel:
    return (
        table.Panel()
        .id(301)
        .title("Samples: the same prompt across runs")
        .description(
            "The prompts that two or more of the selected runs kept a sample of (top and bottom by reward per step), "
            "one row each, and each run's latest kept sample of it: its step, reward and response."
        )
        .datasource(VICTORIALOGS)
        .with_target(LogsQuery("A", SAMPLES_QUERY))
        .with_transformation(
            _transformation("extractFields", source="labels", format="json", replace=False, keepTime=False)
        )
        .with_transformation(
            _transformation(
                "groupingToMatrix", columnField="rl.run.id", rowField="prompt", valueField="sample", emptyValue="empty"
            )
        )
        .cell_height(common.TableCellHeight.AUTO)
    )


def _variable(name: str, label: str, description: str, query: str, *, multi: bool) -> dash.QueryVariable:
    return (
        dash.QueryVariable(name)
        .label(label)
        .description(description)
        .datasource(PROMETHEUS)
        .query(query)
        .multi(multi)
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
    )


STEP_SERIES = contract.series(contract.STEP).name
VARIABLES = (
    _variable(
        "runs",
        "Runs",
        "rl.run.id of the runs compared (label rl_run_id)",
        f'label_values({STEP_SERIES}{{rl_rank=""}}, {RUN})',
        multi=True,
    ),
    _variable(
        "baseline",
        "Baseline",
        "The run the others are compared with (one of the runs)",
        f"label_values({STEP_SERIES}{{{RUNS}}}, {RUN})",
        multi=False,
    ),
    _variable(
        "group",
        "Seed groups",
        "rl.run.group of the groups drawn as their mean with a min-max band (TelemetryConfig.group)",
        f'label_values({STEP_SERIES}{{rl_rank="",{GROUP}!=""}}, {GROUP})',
        multi=True,
    ),
)


def rl_compare() -> model.Dashboard:
    """The "RL compare" dashboard: the selected runs by step, each selected seed group as a band, every run against
    the baseline, and the same prompt's samples across runs."""
    builder = (
        dash.Dashboard("RL compare")
        .uid("otel-rl-compare")
        .description(
            "Several RL runs (rl.run.id) and seed groups (rl.run.group) on one step axis: learning signals by step, "
            "groups as mean and min-max band, deltas against a baseline run, the same prompt across runs (otel-rl)."
        )
        .tags(["otel-rl", "rl"])
        .editable()
        .time("now-24h", "now")
        .timezone("browser")
    )
    for variable in VARIABLES:
        builder = builder.with_variable(variable)
    banded = [signal for signal in SIGNALS if not signal.dimension]
    rows: list[tuple[dash.Row, list[Panel]]] = [
        (dash.Row("Runs by step").id(1), [_runs_panel(signal) for signal in SIGNALS]),
        (dash.Row("Seed group $group").id(100).repeat("group"), [_group_panel(signal) for signal in banded]),
        (dash.Row("Against the baseline: $baseline").id(200), [_delta_panel(signal) for signal in banded]),
        (dash.Row("Samples").id(300), [_samples_panel()]),
    ]
    for row, panels in rows:
        builder = builder.with_row(row)
        for panel in panels:
            builder = builder.with_panel(panel.span(24).height(12) if len(panels) == 1 else panel.span(8).height(8))
    return builder.build()
