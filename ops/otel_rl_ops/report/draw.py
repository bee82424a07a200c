"""Draw one panel of the report into a matplotlib axes: time series (stacked as on the dashboard, nested phases
inside their parent, reference lines off the scale), heatmaps, stats, the phase timeline, the steps, samples and
summary tables. Units are written as words (:func:`unit_words`). Needs the ``report`` extra (matplotlib).
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

import otel_rl_contract as contract

from otel_rl_ops.report.dashboard import Panel
from otel_rl_ops.report.fetch import Bucket, PanelData, Series, Window
from otel_rl_ops.report.summary import nested_order

LITERAL: dict[str, Any] = {"parse_math": False, "usetex": False}
"""Text properties that draw a string as it is: samples of math tasks are full of ``$...$``, ``\\frac`` and
unbalanced ``$``, which matplotlib would otherwise parse as mathtext (or hand to LaTeX) and fail on. Given to every
text that comes from the data or the dashboard (samples, legends, titles, labels, the run id)."""
PNG_SAMPLE_ROWS = 12
"""How many samples the PNG's table shows (half top, half bottom)."""
STEP_ROWS = 10
"""How many of the slowest steps the PNG lists."""
_TEXT_CELL_CHARS = 48

UNIT_WORDS = {
    "s": "seconds",
    "ms": "milliseconds",
    "us": "microseconds",
    "µs": "microseconds",
    "ns": "nanoseconds",
    "m": "minutes",
    "h": "hours",
    "d": "days",
    "dtdurations": "duration",
    "short": "plain number",
    "none": "plain number",
    "percentunit": "%",
    "percent": "%",
    "bytes": "bytes",
    "decbytes": "bytes",
    "bps": "bits per second",
    "Bps": "bytes per second",
    "reqps": "requests per second",
    "ops": "operations per second",
    "hertz": "per second",
}
"""Grafana unit ids as a person reads them."""


def unit_words(unit: str) -> str:
    """A Grafana unit id as words (the id itself when unknown).

    >>> unit_words("s"), unit_words("short"), unit_words("percentunit")
    ('seconds', 'plain number', '%')
    """
    return UNIT_WORDS.get(unit, unit)


def axis_label(panel: Panel) -> str:
    """The y-axis label of a panel: the dashboard's label (with ``(%)`` for a share drawn as percent), else its unit
    in words.

    >>> axis_label(Panel(id=1, title="t", description="", type="timeseries", unit="percentunit",
    ...     axis_label="share of the ranks' time", targets=()))
    "share of the ranks' time (%)"
    """
    words = unit_words(panel.unit)
    if not panel.axis_label:
        return words
    if words == "%" and "%" not in panel.axis_label:
        return f"{panel.axis_label} (%)"
    return panel.axis_label


def literal(texts: Any) -> None:
    """Draw the matplotlib ``texts`` literally (:data:`LITERAL`)."""
    for text in texts:
        text.set(**LITERAL)


def as_datetime(t: float) -> datetime:
    """Unix seconds as an aware UTC datetime (what matplotlib's date axes take)."""
    return datetime.fromtimestamp(t, tz=timezone.utc)


def _time_axis(ax: Any, window: Window) -> None:
    import matplotlib.dates as mdates

    ax.set_xlim(as_datetime(window.start), as_datetime(window.end))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=timezone.utc))  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=3, maxticks=7, tz=timezone.utc))  # type: ignore[no-untyped-call]
    ax.set_xlabel("time (UTC)")


def _unit_axis(ax: Any, unit: str) -> None:
    from matplotlib.ticker import PercentFormatter

    if unit == "percentunit":
        ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))


def no_data(ax: Any, message: str) -> None:
    """Write ``message`` in the middle of ``ax``."""
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, fontsize=12, color="#555555")


def _values_by_time(series: list[Series]) -> tuple[list[float], dict[str, Any]]:
    """The series on one time grid (the union of their times; a missing or non-finite point is 0): times and each
    series' values by its key (its phase when it has one, else its legend)."""
    import numpy as np

    times = sorted({t for s in series for t, _ in s.finite()})
    column = {t: i for i, t in enumerate(times)}
    values: dict[str, Any] = {}
    for s in series:
        row = values.setdefault(_key(s), np.zeros(len(times)))
        for t, v in s.finite():
            row[column[t]] += v
    return times, values


def _key(series: Series) -> str:
    return series.labels.get("rl_phase_name") or series.legend


def _draw_stacked(ax: Any, series: list[Series], parents: dict[str, str | None]) -> None:
    """Stack the series as the dashboard does; with ``parents`` (phase durations, nested phases known), a nested
    phase is not stacked on top (its time is also its parent's) but drawn hatched inside its parent's band, labelled
    with its share of the parent's time."""
    import numpy as np

    times, values = _values_by_time(series)
    x = [as_datetime(t) for t in times]
    order = nested_order({key: float(v.sum()) for key, v in values.items()}, parents)
    base, lower = np.zeros(len(times)), dict[str, Any]()
    for number, (key, _) in enumerate(order):
        parent = parents.get(key)
        colour = f"C{number % 10}"
        if parent is not None and parent in lower:
            low, high = lower[parent], lower[parent] + np.minimum(values[key], values[parent])
            share = values[key].sum() / values[parent].sum() if values[parent].sum() > 0 else math.nan
            label = f"{key} (inside {parent}: {share:.0%} of it)"
            ax.fill_between(x, low, high, facecolor="none", edgecolor=colour, hatch="///", linewidth=1.2, label=label)
        else:
            low, high = base, base + values[key]
            base = high
            ax.fill_between(x, low, high, color=colour, alpha=0.45, linewidth=0)
            ax.plot(x, high, color=colour, linewidth=1.5, label=key)
        lower[key] = low


def draw_timeseries(ax: Any, data: PanelData, window: Window, parents: dict[str, str | None]) -> None:
    """A time series panel, scaled to the run's data: reference lines (thresholds) are drawn dashed over that scale
    and say their value when they lie above it. Stacked panels are stacked; nested phases (``parents``) are drawn
    inside their parent when the panel shows phase durations (spans), whose nested time is also the parent's."""
    drawn = [s for s in sorted(data.series, key=lambda s: s.legend) if s.finite()]
    lines = [s for s in drawn if not s.reference] or drawn
    references = [s for s in drawn if s not in lines]
    spans = any(contract.series(contract.PHASE_DURATION).name in query for query in data.queries)
    if data.panel.stacked and lines:
        _draw_stacked(ax, lines, parents if spans else {})
    else:
        for series in lines:
            points = series.finite()
            ax.plot([as_datetime(t) for t, _ in points], [v for _, v in points], label=series.legend, linewidth=1.8)
    _time_axis(ax, window)
    _unit_axis(ax, data.panel.unit)
    ax.set_ylabel(axis_label(data.panel), **LITERAL)
    ax.grid(True, alpha=0.3)
    if not drawn:
        no_data(ax, "nothing counted in this range (none happened)")
        return
    low, high = ax.get_ylim()
    lowest = min(v for s in lines for _, v in s.finite())
    if data.panel.minimum is not None and lowest >= data.panel.minimum:
        low = data.panel.minimum
    ax.set_ylim(low, high)  # fixed: the reference lines below do not rescale it
    for series in references:
        points = series.finite()
        peak = max(v for _, v in points)
        above = f" ({_format_value(peak, data.panel.unit)}: above this scale)" if peak > high else ""
        ax.plot(
            [as_datetime(t) for t, _ in points],
            [v for _, v in points],
            label=series.legend + above,
            linewidth=1.2,
            linestyle="--",
            color="#888888",
            scaley=False,
        )
    handles = ax.get_legend_handles_labels()[0]
    literal(ax.legend(loc="best", fontsize=8, framealpha=0.8, ncol=2 if len(handles) > 6 else 1).get_texts())


def draw_state_timeline(fig: Any, ax: Any, data: PanelData, window: Window) -> None:
    """A state timeline: one row per series (a phase), its colour the value over time (the ranks in the phase)."""
    import numpy as np

    series = [s for s in sorted(data.series, key=lambda s: s.legend) if s.finite()]
    if not series:
        no_data(ax, "no values in this range")
        return
    times = sorted({t for s in series for t, _ in s.finite()})
    column = {t: i for i, t in enumerate(times)}
    cells = np.full((len(series), len(times)), np.nan)
    for row, s in enumerate(series):
        for t, v in s.finite():
            cells[row, column[t]] = v if v > 0 else np.nan
    mesh = ax.pcolormesh(
        _column_edges(times, window), np.arange(len(series) + 1) - 0.5, cells, cmap="Blues", vmin=0, shading="flat"
    )
    ax.set_yticks(range(len(series)))
    ax.set_yticklabels([s.legend for s in series], **LITERAL)
    ax.invert_yaxis()
    _time_axis(ax, window)
    phases = all("rl_phase_name" in s.labels for s in series)
    label = "ranks in the phase" if phases else data.panel.axis_label or unit_words(data.panel.unit)
    fig.colorbar(mesh, ax=ax, pad=0.01).set_label(label)


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

    >>> histograms = [(0.0, ((0.5, 1.0, 2.0),)), (5.0, ((1.0, 2.0, 1.0), (3.0, 4.0, 0.0)))]
    >>> times, edges, counts = _native_rows(histograms, rows=3)
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
    return [as_datetime(t) for t in (*times, times[-1] + window.step_s)]


def _draw_native_heatmap(fig: Any, ax: Any, data: PanelData, window: Window) -> None:
    """A heatmap of native histograms: a numeric y axis (the value), buckets regrouped into rows."""
    import numpy as np
    from matplotlib.colors import LogNorm

    histograms = [h for s in data.series for h in s.counted()]
    if not histograms:
        no_data(ax, "no values in this range")
        return
    times, edges, counts = _native_rows(histograms)
    x = _column_edges(times, window)
    cells = np.where(counts > 0, counts, np.nan)
    norm = LogNorm(vmin=1, vmax=max(float(np.nanmax(cells)) if np.isfinite(cells).any() else 1.0, 2.0))
    mesh = ax.pcolormesh(x, edges, cells, cmap="viridis", norm=norm, shading="flat")
    ax.set_ylabel(data.panel.axis_label or "value", **LITERAL)
    _time_axis(ax, window)
    colorbar = fig.colorbar(mesh, ax=ax, pad=0.01)
    colorbar.set_label("values per interval (log scale)")


def draw_heatmap(fig: Any, ax: Any, data: PanelData, window: Window) -> None:
    """A heatmap: native histograms, else classic ``le`` buckets (cumulative), coloured on a log scale."""
    import numpy as np

    if any(s.histograms for s in data.series):
        _draw_native_heatmap(fig, ax, data, window)
        return
    by_le = sorted(((float(s.labels.get("le", "inf")), s) for s in data.series), key=lambda item: item[0])
    if not by_le:
        no_data(ax, "no buckets in this range")
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
        no_data(ax, "no values in this range")
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
    ax.set_yticklabels(labels, fontsize=8, **LITERAL)
    ax.set_ylabel(data.panel.axis_label or "bucket", **LITERAL)
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


def draw_stat(ax: Any, data: PanelData) -> None:
    """A stat: the last value (or its mapped text), in the panel's unit."""
    ax.set_axis_off()
    values = [v for s in data.series for _, v in s.finite()]
    if not values:
        no_data(ax, "no value")
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
        **LITERAL,
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
        **LITERAL,
    )


def _cell(value: Any, limit: int = _TEXT_CELL_CHARS) -> str:
    text = " ".join(str(value if value is not None else "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def draw_samples(ax: Any, rows: list[dict[str, Any]]) -> None:
    """The samples table: each distinct text once, the best rewards first, then the worst."""
    ax.set_axis_off()
    if not rows:
        no_data(ax, "no samples in this range")
        return
    unique: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:  # ranks often keep the same easy prompt and answer: show each text once
        unique.setdefault((row.get("rl.sample.selection"), row.get("prompt"), row.get("response")), row)
    rows = list(unique.values())
    tops = [r for r in rows if r.get("rl.sample.selection") == "top"][: PNG_SAMPLE_ROWS // 2]
    bottoms = [r for r in rows if r.get("rl.sample.selection") != "top"][: PNG_SAMPLE_ROWS // 2]
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
    literal(cell.get_text() for cell in table.get_celld().values())
    table.auto_set_font_size(False)
    table.set_fontsize(10)
    table.scale(1, 1.5)
    for (row, _), cell in table.get_celld().items():
        if row == 0:
            cell.set_text_props(weight="bold")
            cell.set_facecolor("#eeeeee")


def draw_steps(ax: Any, data: PanelData) -> None:
    """The slowest steps: step, duration, start, trace id."""
    ax.set_axis_off()
    if not data.steps:
        no_data(ax, "no traces (no Jaeger given, or none in this range)")
        return
    cells = [
        [_cell(s.step), f"{s.duration_s:.3f} s", as_datetime(s.start).strftime("%H:%M:%S"), s.trace_id]
        for s in data.steps[:STEP_ROWS]
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


def draw_timeline(ax: Any, data: PanelData) -> None:
    """The slowest step's trace: one row per rank (its rl.rank.step in grey), its phases as bars, a nested phase
    thinner inside its parent, each phase its colour."""
    spans = data.timeline
    ranks = sorted({s.attributes["rl.rank"] for s in spans if s.name == "rl.rank.step" and "rl.rank" in s.attributes})
    if not ranks:
        no_data(ax, "no trace of the slowest step")
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
    if handles:  # a loop without phase() calls has only its steps
        literal(ax.legend(handles=handles, loc="upper right", fontsize=9, ncol=min(len(handles), 6)).get_texts())
    step = data.steps[0]
    what = "each rank's phases" if handles else "no phases recorded (Telemetry.phase)"
    ax.set_title(
        f"Slowest step {step.step} ({step.duration_s:.3f} s): {what} (trace {step.trace_id})",
        fontsize=13,
        loc="left",
        weight="bold",
    )


def draw_summary(ax: Any, rows: list[tuple[str, str]]) -> None:
    """The summary table: what, then its value; one row each."""
    ax.set_axis_off()
    if not rows:
        no_data(ax, "no summary")
        return
    table = ax.table(
        cellText=[[what, value] for what, value in rows],
        colLabels=["what", "value"],
        loc="upper center",
        cellLoc="left",
        colLoc="left",
        colWidths=[0.24, 0.76],
        bbox=(0.0, 0.0, 1.0, 1.0),
    )
    literal(cell.get_text() for cell in table.get_celld().values())
    table.auto_set_font_size(False)
    table.set_fontsize(11)
    for (row, column), cell in table.get_celld().items():
        cell.PAD = 0.01  # of the cell's width: the text starts at the left of the wide value column
        if row == 0:
            cell.set_text_props(weight="bold")
            cell.set_facecolor("#eeeeee")
        elif column == 0:
            cell.set_facecolor("#f7f7f7")
