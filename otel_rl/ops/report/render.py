"""Render a run's dashboard to a PNG (matplotlib) and an HTML page (the PNG plus the samples table).

The panels and their queries come from the Grafana dashboard JSON (:mod:`otel_rl.ops.report.dashboard`); this module
only draws what they return. The "Slowest steps" panel (a Jaeger search) becomes a table of the slowest steps with
their trace ids and, below it, the slowest step's trace drawn as each rank's phase timeline (what its trace view shows
in Grafana or Jaeger). Needs the ``report`` extra (matplotlib).
"""

from __future__ import annotations

import base64
import html
import io
import logging
import math
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from otel_rl.ops.query import Jaeger, Prometheus, VictoriaLogs
from otel_rl.ops.report.dashboard import Panel, default_dashboard_path, load_panels
from otel_rl.ops.report.fetch import Bucket, PanelData, Series, Window, fetch_panel, run_service, run_span

_logger = logging.getLogger(__name__)

SAMPLE_COLUMNS = ("_time", "rl.step", "rl.sample.selection", "rl.reward", "prompt", "response", "target")
"""Columns of the samples table, in order (those the dashboard's LogsQL ``fields`` pipe keeps)."""
_PNG_SAMPLE_ROWS = 12
SPAN_LAG_S = 10.0
"""How long after a run's last metrics its last spans (and phase durations) may still arrive: the ranks' span
batches leave every 5 s."""
_STEP_ROWS = 10
"""How many of the slowest steps the PNG lists."""
_TEXT_CELL_CHARS = 48
_LITERAL: dict[str, Any] = {"parse_math": False, "usetex": False}
"""Text properties that draw a string as it is: samples of math tasks are full of ``$...$``, ``\\frac`` and
unbalanced ``$``, which matplotlib would otherwise parse as mathtext (or hand to LaTeX) and fail on. Given to every
text that comes from the data or the dashboard (samples, legends, titles, labels, the run id)."""


def _literal(texts: Any) -> None:
    """Draw the matplotlib ``texts`` literally (:data:`_LITERAL`)."""
    for text in texts:
        text.set(**_LITERAL)


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

    @property
    def plots(self) -> list[PanelData]:
        """The panels drawn as plots (everything but tables)."""
        return [p for p in self.panels if p.panel.type != "table"]

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
    ``jaeger_url`` the steps table stays empty.

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
    service = run_service(prometheus, run_id, at=last) if jaeger else ""
    data = [
        fetch_panel(
            panel, run_id=run_id, window=window, prometheus=prometheus, logs=logs, jaeger=jaeger, service=service
        )
        for panel in panels
    ]
    return Report(run_id=run_id, window=window, panels=data, dashboard=path, jaeger_url=jaeger_url)


# Drawing --------------------------------------------------------------------------------------------------------


def _time_axis(ax: Any, window: Window) -> None:
    import matplotlib.dates as mdates

    ax.set_xlim(_as_datetime(window.start), _as_datetime(window.end))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=timezone.utc))  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=3, maxticks=7, tz=timezone.utc))  # type: ignore[no-untyped-call]
    ax.set_xlabel("time (UTC)")


def _as_datetime(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=timezone.utc)


def _unit_axis(ax: Any, unit: str) -> None:
    from matplotlib.ticker import PercentFormatter

    if unit == "percentunit":
        ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))


def _no_data(ax: Any, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, fontsize=12, color="#555555")


def _draw_timeseries(ax: Any, data: PanelData, window: Window) -> None:
    drawn = 0
    for series in sorted(data.series, key=lambda s: s.legend):
        points = series.points
        if not any(math.isfinite(v) for _, v in points):
            continue
        ax.plot([_as_datetime(t) for t, _ in points], [v for _, v in points], label=series.legend, linewidth=1.8)
        drawn += 1
    _time_axis(ax, window)
    _unit_axis(ax, data.panel.unit)
    ax.set_ylabel(data.panel.axis_label or data.panel.unit, **_LITERAL)
    ax.grid(True, alpha=0.3)
    if drawn:
        _literal(ax.legend(loc="best", fontsize=9, framealpha=0.8).get_texts())
    else:
        _no_data(ax, "nothing counted in this range (none happened)")


def _bucket_label(low: float, high: float) -> str:
    def fmt(v: float) -> str:
        return "inf" if math.isinf(v) else f"{v:g}"

    return f"({fmt(low)}, {fmt(high)}]"


_NATIVE_ROWS = 40
"""Rows of a native-histogram heatmap: its buckets (32 per power of two at scale 5) are drawn regrouped."""


def _native_rows(
    histograms: list[tuple[float, tuple[Bucket, ...]]], rows: int = _NATIVE_ROWS
) -> tuple[list[float], list[float], Any]:
    """Regroup native histograms for drawing: times, ``rows + 1`` row edges spanning the non-empty buckets, and
    counts per row (``rows`` x ``len(times)``). Each bucket's count goes to the row holding the bucket's middle.

    >>> times, edges, counts = _native_rows([(0.0, ((0.5, 1.0, 2.0),)), (5.0, ((1.0, 2.0, 1.0), (3.0, 4.0, 0.0)))], rows=3)
    >>> times, edges, counts.tolist()
    ([0.0, 5.0], [0.5, 1.0, 1.5, 2.0], [[2.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    """
    import numpy as np

    times = sorted({t for t, _ in histograms})
    filled = [(low, high) for _, buckets in histograms for low, high, n in buckets if n > 0]
    low = min(lo for lo, _ in filled)
    high = max(hi for _, hi in filled)
    edges = np.linspace(low, high, rows + 1) if high > low else np.array([low - 0.5, low + 0.5])
    counts = np.zeros((len(edges) - 1, len(times)))
    column = {t: i for i, t in enumerate(times)}
    for t, buckets in histograms:
        for lo, hi, n in buckets:
            if n > 0:
                row = int(np.clip(np.searchsorted(edges, (lo + hi) / 2, side="right") - 1, 0, len(edges) - 2))
                counts[row, column[t]] += n
    return times, [float(e) for e in edges], counts


def _column_edges(times: list[float], window: Window) -> list[datetime]:
    """The edges of a heatmap's columns: each column from its time to the next one's, the last one a step wide
    (so a run with one point in the range still gets its column)."""
    return [_as_datetime(t) for t in (*times, times[-1] + window.step_s)]


def _draw_native_heatmap(fig: Any, ax: Any, data: PanelData, window: Window) -> None:
    """A heatmap of native histograms: a numeric y axis (the value), buckets regrouped into rows."""
    import numpy as np
    from matplotlib.colors import LogNorm

    histograms = [h for s in data.series for h in s.counted()]
    if not histograms:
        _no_data(ax, "no values in this range")
        return
    times, edges, counts = _native_rows(histograms)
    x = _column_edges(times, window)
    cells = np.where(counts > 0, counts, np.nan)
    norm = LogNorm(vmin=1, vmax=max(float(np.nanmax(cells)) if np.isfinite(cells).any() else 1.0, 2.0))
    mesh = ax.pcolormesh(x, edges, cells, cmap="viridis", norm=norm, shading="flat")
    ax.set_ylabel(data.panel.axis_label or "value", **_LITERAL)
    _time_axis(ax, window)
    colorbar = fig.colorbar(mesh, ax=ax, pad=0.01)
    colorbar.set_label("values per interval (log scale)")


def _draw_heatmap(fig: Any, ax: Any, data: PanelData, window: Window) -> None:
    import numpy as np

    if any(s.histograms for s in data.series):
        _draw_native_heatmap(fig, ax, data, window)
        return
    by_le = sorted(((float(s.labels.get("le", "inf")), s) for s in data.series), key=lambda item: item[0])
    if not by_le:
        _no_data(ax, "no buckets in this range")
        return
    times = sorted({t for _, s in by_le for t, _ in s.points})
    index = {t: i for i, t in enumerate(times)}
    cumulative = np.full((len(by_le), len(times)), np.nan)
    for row, (_, series) in enumerate(by_le):
        for t, v in series.points:
            cumulative[row, index[t]] = v
    counts = np.diff(np.nan_to_num(cumulative), axis=0, prepend=0.0)  # le buckets are cumulative: per-bucket counts
    counts = np.clip(counts, 0, None)
    used = np.flatnonzero(counts.sum(axis=1) > 0)
    if used.size == 0:
        _no_data(ax, "no values in this range")
        return
    lo, hi = int(used.min()), int(used.max())
    counts = counts[lo : hi + 1]
    bounds = [le for le, _ in by_le]
    labels = [_bucket_label(bounds[i - 1] if i > 0 else -math.inf, bounds[i]) for i in range(lo, hi + 1)]
    x = _column_edges(times, window)
    from matplotlib.colors import LogNorm

    cells = np.where(counts > 0, counts, np.nan)
    # Log colours: one dominant bucket must not hide the tails, where reward hacking and failures show up.
    norm = LogNorm(vmin=1, vmax=max(float(np.nanmax(cells)) if np.isfinite(cells).any() else 1.0, 2.0))
    mesh = ax.pcolormesh(x, np.arange(len(labels) + 1) - 0.5, cells, cmap="viridis", norm=norm, shading="flat")
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=8, **_LITERAL)
    ax.set_ylabel(data.panel.axis_label or "bucket", **_LITERAL)
    _time_axis(ax, window)
    colorbar = fig.colorbar(mesh, ax=ax, pad=0.01)
    colorbar.set_label("values per interval (log scale)")


def _format_value(value: float, unit: str) -> str:
    if not math.isfinite(value):
        return "n/a"
    if unit == "s":
        return f"{value:.0f} s" if value < 120 else f"{value / 60:.1f} min"
    if unit == "percentunit":
        return f"{value:.1%}"
    return f"{value:g}"


def _draw_stat(ax: Any, data: PanelData) -> None:
    ax.set_axis_off()
    values = [v for s in data.series for _, v in s.finite()]
    if not values:
        _no_data(ax, "no value")
        return
    text = data.panel.value_texts.get(values[-1]) or _format_value(values[-1], data.panel.unit)
    ax.text(
        0.5,
        0.55,
        text,
        ha="center",
        va="center",
        fontsize=26 if len(text) < 12 else 18,
        weight="bold",
        transform=ax.transAxes,
        **_LITERAL,
    )
    legend = data.series[0].legend if data.series else ""
    ax.text(
        0.5,
        0.2,
        f"{legend}\n(at the end of the report range)",
        ha="center",
        va="center",
        fontsize=10,
        color="#444444",
        transform=ax.transAxes,
        **_LITERAL,
    )


def _cell(value: Any, limit: int = _TEXT_CELL_CHARS) -> str:
    text = " ".join(str(value if value is not None else "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


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


def _draw_samples(ax: Any, report: Report) -> None:
    ax.set_axis_off()
    rows = sample_rows(report)
    if not rows:
        _no_data(ax, "no samples in this range")
        return
    unique: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:  # ranks often keep the same easy prompt and answer: show each text once
        unique.setdefault((row.get("rl.sample.selection"), row.get("prompt"), row.get("response")), row)
    rows = list(unique.values())
    tops = [r for r in rows if r.get("rl.sample.selection") == "top"][: _PNG_SAMPLE_ROWS // 2]
    bottoms = [r for r in rows if r.get("rl.sample.selection") != "top"][: _PNG_SAMPLE_ROWS // 2]
    shown = tops + bottoms
    header = ["step", "selection", "reward", "prompt", "response", "target"]
    cells = [
        [
            _cell(r.get("rl.step")),
            _cell(r.get("rl.sample.selection")),
            _cell(r.get("rl.reward")),
            _cell(r.get("prompt")),
            _cell(r.get("response")),
            _cell(r.get("target")),
        ]
        for r in shown
    ]
    table = ax.table(
        cellText=cells,
        colLabels=header,
        loc="upper center",
        cellLoc="left",
        colLoc="left",
        colWidths=[0.06, 0.08, 0.07, 0.33, 0.33, 0.13],
    )
    _literal(cell.get_text() for cell in table.get_celld().values())
    table.auto_set_font_size(False)
    table.set_fontsize(10)
    table.scale(1, 1.5)
    for (row, _), cell in table.get_celld().items():
        if row == 0:
            cell.set_text_props(weight="bold")
            cell.set_facecolor("#eeeeee")


def _draw_steps(ax: Any, data: PanelData) -> None:
    """The slowest steps: step, duration, start, trace id."""
    ax.set_axis_off()
    if not data.steps:
        _no_data(ax, "no traces (no Jaeger given, or none in this range)")
        return
    cells = [
        [_cell(s.step), f"{s.duration_s:.3f} s", _as_datetime(s.start).strftime("%H:%M:%S"), s.trace_id]
        for s in data.steps[:_STEP_ROWS]
    ]
    table = ax.table(
        cellText=cells,
        colLabels=["step", "duration", "start (UTC)", "trace id"],
        loc="upper center",
        cellLoc="left",
        colLoc="left",
        colWidths=[0.1, 0.15, 0.15, 0.6],
    )
    table.auto_set_font_size(False)
    table.set_fontsize(10)
    table.scale(1, 1.4)


def _draw_timeline(ax: Any, data: PanelData) -> None:
    """The slowest step's trace: one row per rank (its rl.rank.step in grey), its phases as bars, a nested phase
    thinner inside its parent, each phase its colour."""
    spans = data.timeline
    ranks = sorted({s.attributes["rl.rank"] for s in spans if s.name == "rl.rank.step" and "rl.rank" in s.attributes})
    if not ranks:
        _no_data(ax, "no trace of the slowest step")
        return
    start = min(s.start_ns for s in spans)
    by_id = {s.span_id: s for s in spans}
    names = sorted({s.attributes["rl.phase.name"] for s in spans if "rl.phase.name" in s.attributes})
    colours = {name: f"C{i % 10}" for i, name in enumerate(names)}

    def depth(span: Any) -> int:
        parent = by_id.get(span.parent_id)
        return 0 if parent is None or "rl.phase.name" not in parent.attributes else 1 + depth(parent)

    for row, rank in enumerate(ranks):
        for span in spans:
            left, width = (span.start_ns - start) / 1e9, (span.end_ns - span.start_ns) / 1e9
            if span.name == "rl.rank.step" and span.attributes.get("rl.rank") == rank:
                ax.barh(row, width, left=left, height=0.9, color="#dddddd")
            elif span.attributes.get("rl.rank") == rank and "rl.phase.name" in span.attributes:
                level = depth(span)
                ax.barh(
                    row, width, left=left, height=0.7 / (1 + level), color=colours[span.attributes["rl.phase.name"]]
                )
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([f"rank {rank}" for rank in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the step began")
    from matplotlib.patches import Patch

    handles = [Patch(color=colour, label=name) for name, colour in colours.items()]
    _literal(ax.legend(handles=handles, loc="upper right", fontsize=9, ncol=min(len(handles), 6)).get_texts())
    step = data.steps[0]
    ax.set_title(
        f"Slowest step {step.step} ({step.duration_s:.3f} s): each rank's phases (trace {step.trace_id})",
        fontsize=13,
        loc="left",
        weight="bold",
    )


def render_png(report: Report, path: Path | None = None) -> bytes:
    """Draw every plot panel (two per row, in dashboard order) and a samples table; return the PNG bytes.

    Writes them to ``path`` when given.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = report.plots
    columns = 2
    plot_rows = math.ceil(len(plots) / columns)
    step_rows = 2 * len(report.steps)
    table_rows = 1 if report.tables else 0
    heights = [1.0] * plot_rows + [1.0] * step_rows + [1.5] * table_rows
    fig = plt.figure(figsize=(17, 4.2 * (plot_rows + step_rows) + 6.0 * table_rows), dpi=100)
    grid = fig.add_gridspec(
        plot_rows + step_rows + table_rows, columns, height_ratios=heights, hspace=0.55, wspace=0.18
    )
    for number, data in enumerate(plots):
        ax = fig.add_subplot(grid[number // columns, number % columns])
        ax.set_title(data.panel.title, fontsize=13, loc="left", weight="bold", **_LITERAL)
        if data.panel.type == "heatmap":
            _draw_heatmap(fig, ax, data, report.window)
        elif data.panel.type == "stat":
            _draw_stat(ax, data)
        else:
            _draw_timeseries(ax, data, report.window)
    for number, data in enumerate(report.steps):
        ax = fig.add_subplot(grid[plot_rows + 2 * number, :])
        ax.set_title(f"{data.panel.title} (Jaeger)", fontsize=13, loc="left", weight="bold", **_LITERAL)
        _draw_steps(ax, data)
        _draw_timeline(fig.add_subplot(grid[plot_rows + 2 * number + 1, :]), data)
    if table_rows:
        ax = fig.add_subplot(grid[plot_rows + step_rows, :])
        ax.set_title(
            f"{report.tables[0].panel.title} (VictoriaLogs; best and worst rewards)",
            fontsize=13,
            loc="left",
            weight="bold",
            **_LITERAL,
        )
        _draw_samples(ax, report)
    start = _as_datetime(report.window.start).strftime("%Y-%m-%d %H:%M:%S")
    end = _as_datetime(report.window.end).strftime("%H:%M:%S UTC")
    height = fig.get_figheight()
    fig.suptitle(
        f"RL run {report.run_id}   ({start} to {end})", fontsize=17, weight="bold", y=1 - 0.3 / height, **_LITERAL
    )
    fig.subplots_adjust(left=0.06, right=0.97, top=1 - 1.0 / height, bottom=0.5 / height)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    png = buffer.getvalue()
    if path is not None:
        path.write_bytes(png)
    return png


def _trace_link(report: Report, trace_id: str) -> str:
    """The trace id, linked to the trace's view in Jaeger when the report knows where Jaeger is."""
    if not report.jaeger_url:
        return trace_id
    return f'<a href="{html.escape(report.jaeger_url)}/trace/{trace_id}">{trace_id}</a>'


def render_html(report: Report, path: Path, *, png: bytes | None = None) -> None:
    """Write an HTML page: the PNG (embedded), then every sample with its full prompt and response."""
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
    steps = "\n".join(
        f"<tr><td>{step.step}</td><td>{step.duration_s:.3f} s</td><td>{_trace_link(report, step.trace_id)}</td></tr>"
        for data in report.steps
        for step in data.steps
    )
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>RL run {html.escape(report.run_id)}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; font-size: 14px; }}
th, td {{ border: 1px solid #ccc; padding: 4px 8px; vertical-align: top; text-align: left; }}
td {{ white-space: pre-wrap; font-family: monospace; max-width: 40em; }}
th {{ background: #eee; }}
img {{ max-width: 100%; }}
pre {{ white-space: pre-wrap; font-size: 12px; }}
</style></head><body>
<h1>RL run {html.escape(report.run_id)}</h1>
<p>Rendered from the Grafana dashboard <code>{html.escape(str(report.dashboard.name))}</code> with the same queries;
range {_as_datetime(report.window.start):%Y-%m-%d %H:%M:%S} to {_as_datetime(report.window.end):%H:%M:%S} UTC,
step {report.window.step_s:g} s, rate interval {report.window.rate_interval_s:g} s.</p>
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
</body></html>
"""
    path.write_text(page, encoding="utf-8")


def write_report(report: Report, out: Path) -> None:
    """Write ``out``: a PNG when it ends in ``.png``, else an HTML page (``.html``/``.htm``).

    Raises:
        ValueError: when ``out`` has another suffix.
    """
    suffix = out.suffix.lower()
    if suffix not in (".png", ".html", ".htm"):
        raise ValueError(f'"out" must end in .png, .html or .htm, got {str(out)!r}')
    out.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".png":
        render_png(report, out)
    else:
        render_html(report, out)
    _logger.info("wrote %s", out)


def panels_without_data(report: Report) -> list[Panel]:
    """The panels whose queries returned nothing (a healthy run can leave e.g. 'Rejected values' empty)."""
    return [p.panel for p in report.panels if not p.has_data()]


__all__ = [
    "Report",
    "Series",
    "build_report",
    "panels_without_data",
    "render_html",
    "render_png",
    "sample_rows",
    "write_report",
]
