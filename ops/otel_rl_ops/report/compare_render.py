"""Render a comparison of runs (:mod:`otel_rl_ops.report.compare`) to a PNG and an HTML page.

The page: which runs and groups, and what a point is; one plot per signal of the comparison dashboard's "Runs by
step" row (a panel split by another label, e.g. by reward function, one plot per value), the step on the x axis,
each run a line, each seed group its mean (dashed) and a band from its min to its max; the table of differences
against the baseline at matching steps; the same prompt's samples side by side across runs. The HTML page embeds the
PNG and holds the whole table, every sample's full texts and the queries as the dashboard holds them. Needs the
``report`` extra (matplotlib).
"""

from __future__ import annotations

import base64
import html
import logging
import math
from pathlib import Path
from typing import Any

from otel_rl_ops.report import page
from otel_rl_ops.report.compare import ComparedPanel, Comparison, differences
from otel_rl_ops.report.draw import LITERAL, axis_label, literal, no_data
from otel_rl_ops.report.page import AXIS_IN, PLOT_IN, Drawer, Section, text, titled

_logger = logging.getLogger(__name__)

SIDE_BY_SIDE_PROMPTS = 6
"""How many prompts the PNG lines up across runs (the HTML page: all of them)."""
_CELL_CHARS = 60
_ROW_IN = 0.24
"""Height of a table row, inches."""

Labels = tuple[tuple[str, str], ...]


def _title(panel: ComparedPanel, labels: Labels) -> str:
    return panel.panel.title + (": " + ", ".join(value for _, value in labels) if labels else "")


def number(value: float | None, unit: str = "none") -> str:
    """A value as the table shows it: 4 significant digits, shares as percent, none as "-".

    >>> number(0.123456), number(0.5, "percentunit"), number(None)
    ('0.1235', '50.0%', '-')
    """
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.1%}" if unit == "percentunit" else f"{value:.4g}"


def cell(value: tuple[float | None, float | None], unit: str) -> str:
    """A run's value at a step and its difference to the baseline: ``0.41 (+0.03)``.

    >>> cell((0.41, 0.03), "none"), cell((0.4, None), "none")
    ('0.41 (+0.03)', '0.4')
    """
    shown, delta = value
    if delta is None or shown is None:
        return number(shown, unit)
    sign = "+" if delta >= 0 else "-"
    return f"{number(shown, unit)} ({sign}{number(abs(delta), unit)})"


def _plot(comparison: Comparison, panel: ComparedPanel, labels: Labels) -> Drawer:
    def plot(fig: Any, ax: Any) -> None:
        from matplotlib.ticker import MaxNLocator

        drawn = False
        for number_, run in enumerate(comparison.runs):
            curve = panel.curve(run.run_id, labels)
            if curve and curve.values:
                steps = sorted(curve.values)
                baseline = run.run_id == comparison.baseline
                ax.plot(
                    steps,
                    [curve.values[s] for s in steps],
                    color=f"C{number_ % 10}",
                    linewidth=2.6 if baseline else 1.6,
                    marker="o" if len(steps) < 20 else None,
                    markersize=3,
                    label=run.run_id + (" (baseline)" if baseline else ""),
                )
                drawn = True
        for offset, band in enumerate(b for b in comparison.bands(panel) if b.labels == labels):
            if band.mean:
                colour = f"C{(len(comparison.runs) + offset) % 10}"
                steps = sorted(band.mean)
                ax.fill_between(
                    steps, [band.low[s] for s in steps], [band.high[s] for s in steps], color=colour, alpha=0.2
                )
                members = len(comparison.groups[band.group])
                label = f"group {band.group}: mean of {members} runs, min-max band"
                ax.plot(steps, [band.mean[s] for s in steps], color=colour, linewidth=2, linestyle="--", label=label)
                drawn = True
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(f"step (each point: steps s to s + {comparison.every - 1})" if comparison.every > 1 else "step")
        ax.set_ylabel(axis_label(panel.panel), **LITERAL)
        ax.grid(True, alpha=0.3)
        if panel.panel.unit == "percentunit":
            from matplotlib.ticker import PercentFormatter

            ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
        if not drawn:
            no_data(ax, "no value for these runs")
            return
        literal(ax.legend(loc="best", fontsize=8, framealpha=0.8).get_texts())

    return titled(_title(panel, labels), plot)


def _columns(comparison: Comparison) -> list[str]:
    """The table's value columns: the baseline, the other runs, the groups."""
    others = [run.run_id for run in comparison.runs if run.run_id != comparison.baseline]
    return [*others, *(f"group {g}" for g in comparison.groups)]


def table_rows(comparison: Comparison) -> list[list[str]]:
    """The table of differences as text: what, steps, the baseline's value, then each other run's and group's value
    with its difference to the baseline."""
    rows = []
    for panel in comparison.panels:
        for row in differences(comparison, panel):
            steps = f"{row.first}" if row.first == row.last else f"{row.first} to {row.last}"
            values = [cell(row.values[column], panel.panel.unit) for column in _columns(comparison)]
            rows.append([_title(panel, row.labels), steps, number(row.baseline, panel.panel.unit), *values])
    return rows


def _header(comparison: Comparison) -> list[str]:
    baseline = f"{comparison.baseline} (baseline)" if comparison.baseline else "baseline (none)"
    return ["signal", "steps", baseline, *_columns(comparison)]


def _draw_table(ax: Any, header: list[str], rows: list[list[str]], widths: list[float]) -> None:
    ax.set_axis_off()
    if not rows:
        no_data(ax, "no step that every run reached")
        return
    table = ax.table(
        cellText=rows, colLabels=header, cellLoc="left", colLoc="left", colWidths=widths, bbox=(0.0, 0.0, 1.0, 1.0)
    )
    literal(c.get_text() for c in table.get_celld().values())
    table.auto_set_font_size(False)
    table.set_fontsize(9)
    for (row, _), found in table.get_celld().items():
        if row == 0:
            found.set_text_props(weight="bold")
            found.set_facecolor("#eeeeee")


def side_by_side(comparison: Comparison) -> tuple[list[str], list[dict[str, Any]]]:
    """The samples by prompt: the runs that kept one (the comparison's order), and per prompt each run's latest kept
    sample of it (its row from VictoriaLogs), the prompts kept by the most runs first."""
    order = [run.run_id for run in comparison.all_runs]
    by_prompt: dict[str, dict[str, Any]] = {}
    for row in comparison.samples:
        by_prompt.setdefault(str(row.get("prompt", "")), {})[str(row.get("rl.run.id", ""))] = row
    runs = [run_id for run_id in order if any(run_id in found for found in by_prompt.values())]
    prompts = sorted(by_prompt.items(), key=lambda item: (-len(item[1]), item[0]))
    return runs, [{"prompt": prompt, **found} for prompt, found in prompts]


def _sample(row: dict[str, Any] | None, limit: int) -> str:
    if row is None:
        return ""
    words = " ".join(str(row.get("response", "")).split())
    words = words if len(words) <= limit else words[: limit - 1] + "…"
    return f"step {row.get('rl.step', '?')}, reward {row.get('rl.reward', '?')}: {words}"


def _sections(comparison: Comparison) -> list[Section]:
    sections = [Section(0.6, 0.2, (text(_explanation(comparison)),))]
    plots = [_plot(comparison, panel, labels) for panel in comparison.panels for labels in panel.splits or [()]]
    for number_ in range(0, len(plots), 2):
        sections.append(Section(PLOT_IN, AXIS_IN, tuple(plots[number_ : number_ + 2])))
    header, rows = _header(comparison), table_rows(comparison)
    widths = [0.38, 0.07, *[0.55 / (len(header) - 2)] * (len(header) - 2)]
    drawer = titled(
        "Differences against the baseline at matching steps", lambda fig, ax: _draw_table(ax, header, rows, widths)
    )
    sections.append(Section(_ROW_IN * (max(len(rows), 1) + 1), 0.3, (drawer,)))
    runs, prompts = side_by_side(comparison)
    shown = prompts[:SIDE_BY_SIDE_PROMPTS]
    cells = [
        [_cell(found["prompt"], 40), *(_sample(found.get(run_id), _CELL_CHARS) for run_id in runs)] for found in shown
    ]
    widths = [0.2, *[0.8 / max(len(runs), 1)] * len(runs)]
    sample_drawer = titled(
        "The same prompt across runs (VictoriaLogs: each run's latest kept sample of it)",
        lambda fig, ax: _draw_table(ax, ["prompt", *runs], cells, widths),
    )
    sections.append(Section(_ROW_IN * (max(len(cells), 1) + 1), 0.3, (sample_drawer,)))
    return sections


def _cell(value: Any, limit: int) -> str:
    words = " ".join(str(value).split())
    return words if len(words) <= limit else words[: limit - 1] + "…"


def _explanation(comparison: Comparison) -> str:
    groups = "; ".join(f"group {g}: {', '.join(r.run_id for r in runs)}" for g, runs in comparison.groups.items())
    lines = [
        f"Runs: {', '.join(run.run_id for run in comparison.runs)}" + (f"; {groups}" if groups else ""),
        f"Each point is a window of {comparison.every} step(s), from the collector flush that first showed its first "
        "step to the one that first showed the step after it (docs/dashboards.md, 'Comparing runs').",
    ]
    return "\n".join(lines)


def figure(comparison: Comparison) -> Any:
    """The comparison as one matplotlib figure."""
    names = [run.run_id for run in comparison.runs] + [f"group {g}" for g in comparison.groups]
    return page.figure(_sections(comparison), "RL runs compared by step: " + ", ".join(names))


def render_png(comparison: Comparison, path: Path | None = None) -> bytes:
    """Draw the comparison (:func:`figure`); return the PNG bytes, and write them to ``path`` when given."""
    return page.png(figure(comparison), path)


def render_html(comparison: Comparison, path: Path, *, png: bytes | None = None) -> None:
    """Write an HTML page: the PNG (embedded), the whole table of differences, every sample side by side with its
    full response, and the queries as the dashboard holds them."""
    image = base64.b64encode(png if png is not None else render_png(comparison)).decode("ascii")
    header = "".join(f"<th>{html.escape(h)}</th>" for h in _header(comparison))
    body = "\n".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in table_rows(comparison)
    )
    runs, prompts = side_by_side(comparison)
    sample_header = "".join(f"<th>{html.escape(h)}</th>" for h in ["prompt", *runs])
    samples = "\n".join(
        "<tr>"
        + f"<td>{html.escape(found['prompt'])}</td>"
        + "".join(f"<td>{html.escape(_sample(found.get(run_id), 10**9))}</td>" for run_id in runs)
        + "</tr>"
        for found in prompts
    )
    queries = "\n".join(
        f"<li><b>{html.escape(p.panel.title)}</b><pre>{html.escape(p.query)}</pre></li>" for p in comparison.panels
    )
    names = ", ".join(html.escape(run.run_id) for run in comparison.runs)
    body = f"""<h1>RL runs compared by step</h1>
<p>{html.escape(_explanation(comparison))}</p>
<p>Rendered from the Grafana dashboard <code>{html.escape(comparison.dashboard.name)}</code>: its queries, evaluated
over each run's step windows.</p>
<img alt="runs compared by step" src="data:image/png;base64,{image}">
<h2>Differences against the baseline at matching steps</h2>
<table><thead><tr>{header}</tr></thead><tbody>
{body}
</tbody></table>
<h2>The same prompt across runs ({len(prompts)} prompts)</h2>
<table><thead><tr>{sample_header}</tr></thead><tbody>
{samples}
</tbody></table>
<h2>Queries</h2><ul>{queries}</ul>
"""
    path.write_text(page.html(f"RL runs compared: {names}", body), encoding="utf-8")


def write_comparison(comparison: Comparison, out: Path) -> None:
    """Write ``out``: a PNG when it ends in ``.png``, else an HTML page (``.html``/``.htm``).

    Raises:
        ValueError: when ``out`` has another suffix.
    """
    if page.output(out) == "png":
        render_png(comparison, out)
    else:
        render_html(comparison, out)
    _logger.info("wrote %s", out)
