"""Render a run's dashboard to a PNG (matplotlib) and an HTML page (the PNG plus the samples table).

The page opens with the run's summary (:mod:`otel_rl_ops.report.summary`: the numbers the demo prints), then one line
naming the panels that have no data for the run (not drawn), then the panels with data. The panels and their queries
come from the Grafana dashboard JSON (:mod:`otel_rl_ops.report.dashboard`); this module lays out what they return
(:mod:`otel_rl_ops.report.draw` draws each). The "Slowest steps" panel (a Jaeger search) becomes a table of the
slowest steps with their trace ids and, below it, the slowest step's trace drawn as each rank's phase timeline (what
its trace view shows in Grafana or Jaeger). Needs the ``report`` extra (matplotlib).
"""

from __future__ import annotations

import base64
import html
import logging
import math
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_rl_ops.query import Jaeger, Prometheus, VictoriaLogs
from otel_rl_ops.report import draw, page
from otel_rl_ops.report.dashboard import Panel, default_dashboard_path, load_panels
from otel_rl_ops.report.draw import as_datetime
from otel_rl_ops.report.fetch import PanelData, Series, Window, fetch_panel, run_service, run_span
from otel_rl_ops.report.page import AXIS_IN, PLOT_IN, TABLE_ROW_IN, Drawer, Section, text, titled
from otel_rl_ops.report.summary import Sources, summary_between, summary_rows

_logger = logging.getLogger(__name__)

SAMPLE_COLUMNS = ("_time", "rl.step", "rl.sample.selection", "rl.reward", "prompt", "response", "target")
"""Columns of the samples table, in order (those the dashboard's LogsQL ``fields`` pipe keeps)."""
SPAN_LAG_S = 10.0
"""How long after a run's last metrics its last spans (and phase durations) may still arrive: the ranks' span
batches leave every 5 s."""


@dataclass(frozen=True, kw_only=True)
class Report:
    """Everything a rendered report shows."""

    run_id: str
    window: Window
    panels: list[PanelData]
    """Every panel of the dashboard with what its queries returned, in dashboard order."""
    dashboard: Path
    jaeger_url: str | None = None
    """Where the steps' traces are (links of the HTML page); None: the report has no traces."""
    summary: dict[str, Any] = field(default_factory=dict)
    """The run's summary (:func:`otel_rl_ops.report.summary.summary_between`); empty: none."""

    @property
    def plots(self) -> list[PanelData]:
        """The panels drawn as plots (everything but tables) that have data for the run."""
        return [p for p in self.panels if p.panel.type != "table" and p.has_data()]

    @property
    def empty(self) -> list[PanelData]:
        """The panels with no data for the run: folded into one line that names them."""
        return [p for p in self.panels if not p.has_data()]

    @property
    def phase_parents(self) -> dict[str, str | None]:
        """The phase each phase is nested in (None: top-level), as the steps' traces show; empty without them."""
        performance = self.summary.get("performance") or {}
        if not performance.get("nesting_known"):
            return {}
        return {phase: stats["parent"] for phase, stats in performance["split"].items()}

    @property
    def tables(self) -> list[PanelData]:
        """The samples tables (VictoriaLogs)."""
        return [p for p in self.panels if p.panel.type == "table" and not _is_steps(p)]

    @property
    def steps(self) -> list[PanelData]:
        """The steps tables (Jaeger searches of the run's steps)."""
        return [p for p in self.panels if _is_steps(p)]


def _is_steps(data: PanelData) -> bool:
    return any(target.language == "jaeger" for target in data.panel.targets)


def build_report(
    *,
    prometheus_url: str,
    victorialogs_url: str,
    run_id: str,
    jaeger_url: str | None = None,
    dashboard: Path | None = None,
    scrape_interval_s: float = 5.0,
    lookback_s: float = 86_400.0,
    now: float | None = None,
) -> Report:
    """Find the run's time span, then run every query of every panel of ``dashboard`` over it.

    ``scrape_interval_s`` is how often points reach Prometheus (the collector's aggregation interval, 5 s by
    default); it sizes ``$__rate_interval`` as Grafana does with the datasource's scrape interval. Without
    ``jaeger_url`` the steps table stays empty, and the summary names no slowest step and no phase nesting. The
    summary (:func:`otel_rl_ops.report.summary.summary_between`) covers the run from its first to its last point.

    Raises:
        ReportError: when the run has no data.
        QueryError: when a query fails.
        FileNotFoundError, ValueError: when the dashboard file is missing or not a dashboard.
    """
    path = dashboard or default_dashboard_path()
    panels = load_panels(path)
    at = time.time() if now is None else now
    prometheus, logs = Prometheus(prometheus_url), VictoriaLogs(victorialogs_url)
    first, last = run_span(prometheus, run_id, lookback_s=lookback_s, now=at)
    # A little margin on both sides: rate windows need points before the first step, and the last flush; after it
    # also the spans, which leave the ranks in batches (every 5 s, the last at shutdown) after their last metrics.
    window = Window.for_range(
        first - scrape_interval_s, last + scrape_interval_s + SPAN_LAG_S, scrape_interval_s=scrape_interval_s
    )
    jaeger = Jaeger(jaeger_url) if jaeger_url else None
    service = run_service(prometheus, run_id, at=last)
    data = [
        fetch_panel(
            panel, run_id=run_id, window=window, prometheus=prometheus, logs=logs, jaeger=jaeger, service=service
        )
        for panel in panels
    ]
    sources = Sources(prometheus_url, victorialogs_url, run_id, jaeger_url)
    summary = summary_between(sources, first, last, service=service, counted=min(window.end, at))
    return Report(run_id=run_id, window=window, panels=data, dashboard=path, jaeger_url=jaeger_url, summary=summary)


# Layout ---------------------------------------------------------------------------------------------------------


def sample_rows(report: Report) -> list[dict[str, Any]]:
    """The samples of the report's table panels, best reward first within each selection."""
    rows = [row for table in report.tables for row in table.rows]

    def key(row: dict[str, Any]) -> tuple[int, float]:
        try:
            reward = float(row.get("rl.reward", "nan"))
        except ValueError:
            reward = math.nan
        top = row.get("rl.sample.selection") == "top"
        return (0 if top else 1, -reward if top else reward)

    return sorted(rows, key=key)


def empty_line(report: Report) -> str:
    """The one line that names the panels with no data for the run (not drawn); "" when every panel has data."""
    empty = report.empty
    if not empty:
        return ""
    return f"No data for this run in {len(empty)} panels (not drawn): " + "; ".join(p.panel.title for p in empty)


def _plot(report: Report, data: PanelData) -> Drawer:
    def plot(fig: Any, ax: Any) -> None:
        if data.panel.type == "heatmap":
            draw.draw_heatmap(fig, ax, data, report.window)
        elif data.panel.type == "stat":
            draw.draw_stat(ax, data)
        elif data.panel.type == "state-timeline":
            draw.draw_state_timeline(fig, ax, data, report.window)
        else:
            draw.draw_timeseries(ax, data, report.window, report.phase_parents)

    return titled(data.panel.title, plot)


def _steps_sections(data: PanelData) -> list[Section]:
    """The slowest steps (a table), then the slowest step's trace as each rank's phase timeline."""
    shown = min(len(data.steps), draw.STEP_ROWS)

    def steps(fig: Any, ax: Any) -> None:
        draw.draw_steps(ax, data)

    def timeline(fig: Any, ax: Any) -> None:
        draw.draw_timeline(ax, data)  # titled by itself: the slowest step and its trace id

    ranks = len({s.attributes.get("rl.rank") for s in data.timeline if s.name == "rl.rank.step"})
    return [
        Section(
            TABLE_ROW_IN * (shown + 1),
            0.3,
            (titled(data.panel.title if "Jaeger" in data.panel.title else f"{data.panel.title} (Jaeger)", steps),),
        ),
        Section(0.5 * max(ranks, 1) + 0.6, AXIS_IN, (timeline,)),
    ]


def _sections(report: Report) -> list[Section]:
    """The page from top to bottom: summary, the line of panels without data, the plots two by two, the slowest
    steps and the slowest step's timeline, the samples."""
    sections: list[Section] = []
    rows = summary_rows(report.summary) if report.summary else []
    if rows:
        drawer = titled("Summary", lambda fig, ax: draw.draw_summary(ax, rows))
        sections.append(Section(TABLE_ROW_IN * (len(rows) + 1), 0.3, (drawer,)))
    line = empty_line(report)
    if line:
        words = textwrap.fill(line, width=170)
        sections.append(Section(0.22 * (words.count("\n") + 1), 0.25, (text(words),)))
    plots = report.plots
    for number in range(0, len(plots), 2):
        sections.append(Section(PLOT_IN, AXIS_IN, tuple(_plot(report, data) for data in plots[number : number + 2])))
    for data in report.steps:
        if data.steps:
            sections += _steps_sections(data)
    samples = sample_rows(report)
    if samples:
        title = f"{report.tables[0].panel.title} (VictoriaLogs; best and worst rewards)"
        drawer = titled(title, lambda fig, ax: draw.draw_samples(ax, samples))
        sections.append(Section(0.36 * (draw.PNG_SAMPLE_ROWS + 1), 0.3, (drawer,)))
    return sections


def figure(report: Report) -> Any:
    """The report as one matplotlib figure (:func:`_sections` from top to bottom, 17 inches wide)."""
    start = as_datetime(report.window.start).strftime("%Y-%m-%d %H:%M:%S")
    end = as_datetime(report.window.end).strftime("%H:%M:%S UTC")
    return page.figure(_sections(report), f"RL run {report.run_id}   ({start} to {end})")


def render_png(report: Report, path: Path | None = None) -> bytes:
    """Draw the report (:func:`figure`); return the PNG bytes, and write them to ``path`` when given."""
    return page.png(figure(report), path)


def _trace_link(report: Report, trace_id: str) -> str:
    """The trace id, linked to the trace's view in Jaeger when the report knows where Jaeger is."""
    if not report.jaeger_url:
        return trace_id
    return f'<a href="{html.escape(report.jaeger_url)}/trace/{trace_id}">{trace_id}</a>'


def render_html(report: Report, path: Path, *, png: bytes | None = None) -> None:
    """Write an HTML page: the summary, the line of panels without data, the PNG (embedded), the slowest steps
    linked to Jaeger, then every sample with its full prompt and response."""
    image = base64.b64encode(png if png is not None else render_png(report)).decode("ascii")
    rows = sample_rows(report)
    header = "".join(
        f"<th>{html.escape(c)}</th>" for c in ("time", "step", "selection", "reward", "prompt", "response", "target")
    )
    body = "\n".join(
        "<tr>" + "".join(f"<td>{html.escape(str(row.get(c, '')))}</td>" for c in SAMPLE_COLUMNS) + "</tr>"
        for row in rows
    )
    queries = "\n".join(
        f"<li><b>{html.escape(p.panel.title)}</b><pre>{html.escape(chr(10).join(p.queries))}</pre></li>"
        for p in report.panels
    )
    summary = "\n".join(
        f"<tr><th>{html.escape(what)}</th><td>{html.escape(value)}</td></tr>"
        for what, value in (summary_rows(report.summary) if report.summary else [])
    )
    steps = "\n".join(
        f"<tr><td>{step.step}</td><td>{step.duration_s:.3f} s</td><td>{_trace_link(report, step.trace_id)}</td></tr>"
        for data in report.steps
        for step in data.steps
    )
    body = f"""<h1>RL run {html.escape(report.run_id)}</h1>
<p>Rendered from the Grafana dashboard <code>{html.escape(str(report.dashboard.name))}</code> with the same queries;
range {as_datetime(report.window.start):%Y-%m-%d %H:%M:%S} to {as_datetime(report.window.end):%H:%M:%S} UTC,
step {report.window.step_s:g} s, rate interval {report.window.rate_interval_s:g} s.</p>
<h2>Summary</h2>
<table class="summary"><tbody>
{summary}
</tbody></table>
<p>{html.escape(empty_line(report))}</p>
<img alt="dashboard panels" src="data:image/png;base64,{image}">
<h2>Slowest steps ({sum(len(data.steps) for data in report.steps)}; traces in Jaeger)</h2>
<table><thead><tr><th>step</th><th>duration</th><th>trace</th></tr></thead><tbody>
{steps}
</tbody></table>
<h2>Samples ({len(rows)})</h2>
<table><thead><tr>{header}</tr></thead><tbody>
{body}
</tbody></table>
<h2>Queries</h2><ul>{queries}</ul>
"""
    path.write_text(page.html(f"RL run {html.escape(report.run_id)}", body), encoding="utf-8")


def write_report(report: Report, out: Path) -> None:
    """Write ``out``: a PNG when it ends in ``.png``, else an HTML page (``.html``/``.htm``).

    Raises:
        ValueError: when ``out`` has another suffix.
    """
    if page.output(out) == "png":
        render_png(report, out)
    else:
        render_html(report, out)
    _logger.info("wrote %s", out)


def panels_without_data(report: Report) -> list[Panel]:
    """The panels whose queries returned nothing (a healthy run can leave e.g. 'Rejected values' empty)."""
    return [p.panel for p in report.empty]


__all__ = [
    "Report",
    "Series",
    "build_report",
    "empty_line",
    "figure",
    "panels_without_data",
    "render_html",
    "render_png",
    "sample_rows",
    "write_report",
]
