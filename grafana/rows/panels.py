"""The panel kinds, datasources and selectors every row of the otel-rl dashboards uses.

Built with the Grafana Foundation SDK (``grafana-foundation-sdk``). Every PromQL selector carries ``rl_rank=""``:
aggregated series (one per run) never have a rank, the optional per-rank gauges always do (docs/pipeline.md,
"Per-rank gauges"). Queries come from :mod:`otel_rl_ops.promql`; this module only wraps them in panels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import otel_rl_contract as contract
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import runtime as cogruntime
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import heatmap as heatmap_model
from grafana_foundation_sdk.models import prometheus as prometheus_model
from otel_rl_ops.promql import match

PROMETHEUS_UID = "otel-rl-prometheus"
"""Fixed uid of the Prometheus datasource (``grafana/provisioning/datasources/otel-rl.yml``)."""
VICTORIALOGS_UID = "otel-rl-victorialogs"
"""Fixed uid of the VictoriaLogs datasource."""
VICTORIALOGS_TYPE = "victoriametrics-logs-datasource"
"""Plugin id of the VictoriaLogs Grafana datasource."""
JAEGER_UID = "otel-rl-jaeger"
"""Fixed uid of the Jaeger datasource (the run's traces: one per step)."""

PROMETHEUS = model.DataSourceRef(type_val="prometheus", uid=PROMETHEUS_UID)
VICTORIALOGS = model.DataSourceRef(type_val=VICTORIALOGS_TYPE, uid=VICTORIALOGS_UID)
JAEGER = model.DataSourceRef(type_val="jaeger", uid=JAEGER_UID)

RUN_VARIABLE = "$run"
"""The dashboard variable holding the run's ``rl.run.id``."""
SERVICE_VARIABLE = "$service"
"""The dashboard variable holding the run's ``service.name`` (its series' ``job``): Jaeger searches by service."""
RUN = f"{match(contract.label(contract.RUN_ID), RUN_VARIABLE)},{match(contract.label(contract.RANK), '')}"
"""Label matchers of one run's aggregated series."""
TOTAL = f"{RUN},{match(contract.label(contract.REWARD_FN), contract.REWARD_FN_TOTAL)}"
"""The run's total reward (the one the policy is trained on)."""
WINDOW = "$__rate_interval"
"""The range of every windowed query: Grafana's ``$__rate_interval`` (at least 4 collector flushes)."""

ROLE = contract.label(contract.ROLE)
REWARD_FN = contract.label(contract.REWARD_FN)
METRIC_KEY = contract.label(contract.METRIC_KEY)
DATASET = contract.label(contract.DATASET)
STALENESS_PHASE = contract.label(contract.STALENESS_PHASE)
KL_ESTIMATOR = contract.label(contract.KL_ESTIMATOR)
GROUP_OUTCOME = contract.label(contract.GROUP_OUTCOME)
SIGN = contract.label(contract.SIGN)
JOINT_X = contract.label(contract.JOINT_X)
PHASE = contract.label(contract.PHASE)
SELF_METRIC = contract.label(contract.SELF_METRIC)
SELF_REASON = contract.label(contract.SELF_REASON)
SELF_SIGNAL = contract.label(contract.SELF_SIGNAL)
"""The labels the rows group by and show (``rl_reward_fn``, ...): the contract's attributes as Prometheus labels."""

Panel = cogbuilder.Builder[model.Panel]


def legend(label: str) -> str:
    """Grafana's legend format of ``label``'s value, ``{{label}}``.

    >>> legend(REWARD_FN)
    '{{rl_reward_fn}}'
    """
    return f"{{{{{label}}}}}"


@dataclass(frozen=True)
class Row:
    """One row of a dashboard: its title, its panel id, and its panels left to right (ids, widths and heights set).

    Panel ids are given explicitly and never change, so links to a panel (``viewPanel=``) survive layout and title
    changes: a new panel takes an id no panel of the dashboard has had, a removed panel's id is not reused."""

    title: str
    id: int
    panels: tuple[Panel, ...]


def prom(ref: str, expr: str, legend: str) -> prometheus.Dataquery:
    """A Prometheus range query (PromQL ``expr``), its legend format ``legend``."""
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


class JaegerSearch(cogbuilder.Builder[cogvariants.Dataquery]):
    """A Jaeger datasource search (the SDK has no type for it): traces of ``service`` holding a span named
    ``operation`` with the logfmt ``tags``, at most ``limit``; Grafana shows them as a table of trace ids (links to
    each trace's view), names, start times and durations."""

    def __init__(self, ref: str, *, service: str, operation: str, tags: str, limit: int) -> None:
        self._data: dict[str, Any] = {
            "refId": ref,
            "datasource": JAEGER.to_json(),
            "queryType": "search",
            "service": service,
            "operation": operation,
            "tags": tags,
            "limit": limit,
        }

    def build(self) -> cogvariants.Dataquery:
        return cogruntime.UnknownDataquery(dict(self._data))


def series(
    panel_id: int, title: str, description: str, unit: str, axis: str, *queries: prometheus.Dataquery
) -> timeseries.Panel:
    """A time-series panel; ``axis`` labels the y axis (also used by ``otel-rl report``)."""
    panel = (
        timeseries.Panel()
        .id(panel_id)
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


def stacked(panel: timeseries.Panel) -> timeseries.Panel:
    """``panel`` with its series stacked and filled (parts of a whole)."""
    return panel.stacking(common_builders.StackingConfig().mode(common.StackingMode.NORMAL)).fill_opacity(40)


def stat_panel(panel_id: int, title: str, description: str, unit: str, query: prometheus.Dataquery) -> stat.Panel:
    """A single-value panel (an instant query: the value at the end of the time range)."""
    return (
        stat.Panel()
        .id(panel_id)
        .title(title)
        .description(description)
        .datasource(PROMETHEUS)
        .unit(unit)
        .with_target(query.instant())
    )


def traffic_light(*, orange: float, red: float) -> dash.ThresholdsConfig:
    """Green below ``orange``, orange from it, red from ``red``: the stat panels' thresholds."""
    return (
        dash.ThresholdsConfig()
        .mode(model.ThresholdsMode.ABSOLUTE)
        .steps(
            [
                model.Threshold(value=None, color="green"),
                model.Threshold(value=orange, color="orange"),
                model.Threshold(value=red, color="red"),
            ]
        )
    )


def heatmap_panel(panel_id: int, title: str, description: str, axis: str, expr: str) -> heatmap.Panel:
    """A heatmap of a histogram's values per bucket and interval (buckets as recorded, not recalculated)."""
    return (
        heatmap.Panel()
        .id(panel_id)
        .title(title)
        .description(description)
        .datasource(PROMETHEUS)
        .with_target(prom("A", expr, "{{le}}").format(prometheus_model.PromQueryFormat.HEATMAP).exemplar(True))
        .calculate(False)
        .color(heatmap.HeatmapColorOptions().mode(heatmap_model.HeatmapColorMode.SCHEME).scheme("Oranges").steps(64))
        .y_axis(heatmap.YAxisConfig().axis_label(axis))
        .cell_values(heatmap.CellValues().unit("short"))
    )
