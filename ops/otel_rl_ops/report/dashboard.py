"""Read the panels and queries of a Grafana dashboard JSON (``grafana/dashboards/rl-run.json``).

The report renders exactly the queries Grafana runs: they are read from the dashboard file, never restated here.
Grafana's variables are substituted by :func:`substitute`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from otel_rl_ops.package_data import data_root
from otel_rl_ops.promql import quote

DEFAULT_DASHBOARD = Path("grafana") / "dashboards" / "rl-run.json"
"""The main dashboard, relative to the data root (:func:`otel_rl_ops.stack.layout.data_root`)."""

QueryLanguage = Literal["promql", "logsql", "jaeger"]

_LOGS_DATASOURCE_TYPE = "victoriametrics-logs-datasource"
_JAEGER_DATASOURCE_TYPE = "jaeger"


@dataclass(frozen=True, kw_only=True)
class Target:
    """One query of a panel."""

    ref_id: str
    """The query's ``refId`` (``A``, ``B``, ...)."""
    expr: str
    """The query text with Grafana variables (``$run``, ``$__rate_interval``, ...) still in it."""
    language: QueryLanguage
    """``promql`` (Prometheus datasource), ``logsql`` (VictoriaLogs datasource) or ``jaeger`` (a Jaeger search: its
    ``expr`` is the logfmt tags, e.g. ``rl.run.id="$run"``)."""
    legend: str = ""
    """Grafana's legend format, e.g. ``"{{rl_reward_fn}}"``."""
    instant: bool = False
    """Whether Grafana runs it as an instant query (one value) rather than over the time range."""
    service: str = ""
    """A Jaeger search's service (``$service``, the run's ``service.name``)."""
    operation: str = ""
    """A Jaeger search's span name (``rl.step``: the steps)."""
    limit: int = 0
    """A Jaeger search's number of traces."""

    @property
    def reference(self) -> bool:
        """Whether the query draws a reference line (a threshold an alert compares with), not the run's data: a
        panel is scaled to its data, not to its thresholds."""
        return "threshold" in self.legend.lower() or "threshold" in self.expr.lower()


@dataclass(frozen=True, kw_only=True)
class Panel:
    """One visualization of the dashboard (rows are not panels here)."""

    id: int
    title: str
    description: str
    type: str
    """Grafana panel type: ``timeseries``, ``heatmap``, ``stat``, ``table``."""
    unit: str
    """Grafana unit id (``none``, ``percentunit``, ``s``, ``short``)."""
    axis_label: str
    """The y-axis label (timeseries ``axisLabel``, heatmap ``yAxis.axisLabel``); may be empty."""
    targets: tuple[Target, ...]
    stacked: bool = False
    """Whether Grafana stacks the panel's series (``custom.stacking.mode: normal``)."""
    minimum: float | None = None
    """The y axis's lowest value (``min``), when the dashboard sets one."""
    value_texts: dict[float, str] = field(default_factory=dict)
    """The panel's value mappings (Grafana ``type: value``): the text a stat shows for a value, e.g. 1 -> "finished
    cleanly"."""


def _value_texts(defaults: dict[str, Any]) -> dict[float, str]:
    """The value mappings of a panel's field defaults.

    >>> _value_texts({"mappings": [{"type": "value", "options": {"1": {"text": "finished cleanly"}}}]})
    {1.0: 'finished cleanly'}
    """
    texts: dict[float, str] = {}
    for mapping in defaults.get("mappings") or []:
        if mapping.get("type") == "value":
            for value, option in (mapping.get("options") or {}).items():
                try:
                    texts[float(value)] = str(option.get("text", value))
                except (TypeError, ValueError, AttributeError):
                    continue
    return texts


def default_dashboard_path() -> Path:
    """Return the main dashboard file of the checkout this package runs from."""
    return data_root() / DEFAULT_DASHBOARD


def load_panels(path: Path) -> list[Panel]:
    """Return the dashboard's panels in dashboard order (rows, and panels nested in collapsed rows, flattened).

    Raises:
        FileNotFoundError: when ``path`` does not exist.
        ValueError: when the file is not a dashboard (no ``panels`` list).
    """
    data: Any = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("panels"), list):
        raise ValueError(f"dashboard {str(path)!r} must be a JSON object with a 'panels' list")
    flat: list[dict[str, Any]] = []
    for item in data["panels"]:
        if item.get("type") == "row":
            flat.extend(item.get("panels") or ())
        else:
            flat.append(item)
    return [_panel(item) for item in flat]


def _panel(item: dict[str, Any]) -> Panel:
    defaults = (item.get("fieldConfig") or {}).get("defaults") or {}
    axis = ((defaults.get("custom") or {}).get("axisLabel")) or ((item.get("options") or {}).get("yAxis") or {}).get(
        "axisLabel", ""
    )
    targets = []
    for target in item.get("targets") or ():
        datasource = target.get("datasource") or item.get("datasource") or {}
        kind = datasource.get("type")
        language: QueryLanguage = (
            "logsql" if kind == _LOGS_DATASOURCE_TYPE else "jaeger" if kind == _JAEGER_DATASOURCE_TYPE else "promql"
        )
        targets.append(
            Target(
                ref_id=str(target.get("refId", "")),
                expr=str(target.get("tags" if language == "jaeger" else "expr", "")),
                language=language,
                legend=str(target.get("legendFormat") or ""),
                instant=bool(target.get("instant")) and not target.get("range"),
                service=str(target.get("service", "")),
                operation=str(target.get("operation", "")),
                limit=int(target.get("limit") or 0),
            )
        )
    return Panel(
        id=int(item.get("id") or 0),
        title=str(item.get("title", "")),
        description=str(item.get("description", "")),
        type=str(item.get("type", "")),
        unit=str(defaults.get("unit") or "none"),
        axis_label=str(axis or ""),
        targets=tuple(targets),
        stacked=((defaults.get("custom") or {}).get("stacking") or {}).get("mode") == "normal",
        minimum=float(defaults["min"]) if isinstance(defaults.get("min"), (int, float)) else None,
        value_texts=_value_texts(defaults),
    )


_VARIABLE = re.compile(r'(?P<run>"\$(?:run|\{run\})")|\$\{(?P<braced>\w+)\}|\$(?P<plain>\w+)')
"""A Grafana variable: the run's inside its string literal (``"$run"``), or any other (``$__interval``)."""


def substitute(expr: str, *, run_id: str, rate_interval: str, interval: str, service: str = "") -> str:
    """Replace the Grafana variables the dashboards use with concrete values.

    ``"$run"`` (the variable inside its string literal, the only way the dashboards use it) becomes the run id as
    a string literal of the query language (:func:`otel_rl_ops.promql.quote`: the same rules for PromQL and LogsQL),
    so a run id with quotes, backslashes, braces or ``$`` selects that run and no other; ``$service`` (a Jaeger
    search's service) becomes ``service`` as it is. One pass over ``expr``: text that a substitution inserts is never
    read as a variable.

    >>> query = 'rate(x{rl_run_id="$run"}[$__rate_interval])'
    >>> print(substitute(query, run_id='r"1', rate_interval="20s", interval="5s"))
    rate(x{rl_run_id="r\\"1"}[20s])

    Raises:
        ValueError: when a variable other than ``$run``, ``$service``, ``$__rate_interval``, ``$__interval`` remains,
            or ``$run`` stands outside a string literal.
    """
    values = {"__rate_interval": rate_interval, "__interval": interval, "service": service}
    names = {m["braced"] or m["plain"] for m in _VARIABLE.finditer(expr)} - {None}
    if "run" in names:
        raise ValueError(f'query {expr!r} uses $run outside a string literal: write "$run"')
    if names - set(values):
        raise ValueError(f"query {expr!r} uses variables the report does not know: {sorted(names - set(values))!r}")

    def value(found: re.Match[str]) -> str:
        return quote(run_id) if found["run"] else values[found["braced"] or found["plain"]]

    return _VARIABLE.sub(value, expr)


def legend_for(legend: str, labels: dict[str, str]) -> str:
    """Expand a Grafana legend format (``"{{le}}"``) with a series' labels.

    >>> legend_for("dropped {{otel_rl_reason}}", {"otel_rl_reason": "queue_full"})
    'dropped queue_full'
    """
    if not legend:
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), legend)
