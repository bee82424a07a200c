"""The report's page: sections from top to bottom, each a titled band of one or two drawings, on one matplotlib figure
17 inches wide; the PNG bytes of a figure. Shared by the run report (:mod:`otel_rl_ops.report.render`) and the
comparison (:mod:`otel_rl_ops.report.compare_render`). Needs the ``report`` extra (matplotlib)."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from otel_rl_ops.report.draw import LITERAL

WIDTH_IN, LEFT_IN, RIGHT_IN, GAP_IN = 17.0, 0.9, 0.35, 1.4
"""The page's width and its margins, and the gap between two panels of a row (their y-axis labels), in inches."""
TOP_IN, TITLE_IN, BOTTOM_IN = 0.9, 0.45, 0.2
"""Room above the first section (the page title), above each section (its title), below the last one."""
PLOT_IN, AXIS_IN, TABLE_ROW_IN = 2.9, 0.75, 0.3
"""Height of a plot; room below it for its x axis; height of a table row."""

Drawer = Callable[[Any, Any], None]
"""Draws into one axes: takes the figure and the axes."""


@dataclass(frozen=True)
class Section:
    """One band of the page: its height and the room below it (inches), and one drawer per column (1 or 2)."""

    height_in: float
    below_in: float
    drawers: tuple[Drawer, ...]


def titled(title: str, drawer: Drawer) -> Drawer:
    """``drawer`` under the bold ``title`` (drawn literally)."""

    def draw_titled(fig: Any, ax: Any) -> None:
        ax.set_title(title, fontsize=13, loc="left", weight="bold", **LITERAL)
        drawer(fig, ax)

    return draw_titled


def text(words: str) -> Drawer:
    """A drawer of ``words`` in grey, from the top left."""

    def write(fig: Any, ax: Any) -> None:
        ax.set_axis_off()
        ax.text(0, 1, words, ha="left", va="top", fontsize=11, color="#444444", transform=ax.transAxes, **LITERAL)

    return write


def figure(sections: list[Section], title: str) -> Any:
    """One matplotlib figure of ``sections`` from top to bottom under the page's ``title``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    height = TOP_IN + sum(TITLE_IN + s.height_in + s.below_in for s in sections) + BOTTOM_IN
    fig = plt.figure(figsize=(WIDTH_IN, height), dpi=100)
    top = height - TOP_IN
    usable = WIDTH_IN - LEFT_IN - RIGHT_IN
    for section in sections:
        top -= TITLE_IN
        bottom = top - section.height_in
        columns = len(section.drawers)
        width = usable if columns == 1 else (usable - GAP_IN) / 2
        for column, drawer in enumerate(section.drawers):
            left = LEFT_IN + column * (width + GAP_IN)
            ax = fig.add_axes((left / WIDTH_IN, bottom / height, width / WIDTH_IN, section.height_in / height))
            drawer(fig, ax)
        top = bottom - section.below_in
    fig.suptitle(title, fontsize=17, weight="bold", y=1 - 0.3 / height, **LITERAL)
    return fig


def png(fig: Any, path: Path | None = None) -> bytes:
    """The PNG bytes of ``fig`` (closed after), also written to ``path`` when given."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    data = buffer.getvalue()
    if path is not None:
        path.write_bytes(data)
    return data


def output(out: Path) -> Literal["png", "html"]:
    """What ``out`` asks for, its folder made: a PNG when it ends in ``.png``, an HTML page for ``.html``/``.htm``.

    Raises:
        ValueError: when ``out`` has another suffix.
    """
    suffix = out.suffix.lower()
    if suffix not in (".png", ".html", ".htm"):
        raise ValueError(f'"out" must end in .png, .html or .htm, got {str(out)!r}')
    out.parent.mkdir(parents=True, exist_ok=True)
    return "png" if suffix == ".png" else "html"


_STYLE = """body { font-family: sans-serif; margin: 1.5em; }
table { border-collapse: collapse; font-size: 14px; }
th, td { border: 1px solid #ccc; padding: 4px 8px; vertical-align: top; text-align: left; }
td { white-space: pre-wrap; font-family: monospace; max-width: 40em; }
th { background: #eee; }
img { max-width: 100%; }
pre { white-space: pre-wrap; font-size: 12px; }
"""


def html(title: str, body: str) -> str:
    """A report's HTML page: ``title`` (HTML, escaped by the caller) and ``body`` (HTML) in the reports' style."""
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>\n'
        f"<style>\n{_STYLE}</style></head><body>\n{body}</body></html>\n"
    )
