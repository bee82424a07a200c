"""Compare runs by step: the "RL compare" dashboard's own queries evaluated over exact step windows, seed groups as
their mean and min-max band, every run against a baseline, and the same prompt's samples across runs.

**The value at step s.** Prometheus indexes a run's series by time: one point per collector flush, every series of
the run stamped with the same flush time, its cumulative histograms and counters beside ``rl_step``, the highest step
any rank declared. A run reaches step ``s`` at the first flush whose ``rl_step`` is at least ``s``. The value over
the steps ``s`` to ``s + k - 1`` (a *step window*) is the panel's query evaluated at the flush that reached
``s + k``, over a window reaching back exactly to the flush that reached ``s`` (the window of the run's first steps
reaches back before its first point, so it counts from zero): increases subtract the point at the window's start,
rates divide by the seconds between the two flushes, extremes are those of the flushes after the start
(:mod:`otel_rl_ops.promql`, "Comparing runs by step"). Counts, sums, means, shares and rates are exact over the
values the ranks exported between the two flushes; quantiles are estimates within a bucket of those values, clamped
to their extremes.

Those values are exactly the values of steps ``s`` to ``s + k - 1`` when every rank's values of a step reached the
collector before the flush that first showed the next step, and none of the next step's did: a rank exports every
``export_interval_s`` (2 s) and the collector flushes every aggregation interval (5 s), so a trainer whose steps last
longer than that and records its values mid-step (after generating, before training) gets exact windows. What a
step window cannot be: steps shorter than a flush interval fold into one window (a step no flush showed has no
boundary of its own, and its window no value); a rank lagging behind the others (asynchronous rollouts, a
straggler) has its values counted in the window they were exported in; the extremes that clamp a quantile are held
for ``extremes_hold_s`` (10 s) after a value, so they may reach into the next window.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import otel_rl_contract as contract

from otel_rl_ops import promql
from otel_rl_ops.query import Prometheus, VictoriaLogs
from otel_rl_ops.report.dashboard import Panel, load_panels
from otel_rl_ops.report.fetch import ReportError

DEFAULT_COMPARE_DASHBOARD = Path("grafana") / "dashboards" / "rl-compare.json"
"""The comparison dashboard, relative to the data root."""
POINTS = 40
"""About how many step windows the longest run is cut into when the window's steps are not given."""
TABLE_STEPS = 4
"""How many matching steps the table of differences shows: evenly spaced, the last one every run reached."""
WORKERS = 4
"""Queries in flight at once."""

_RUNS = '"$runs"'
_RUNS_LIST = "${runs:doublequote}"

_STEP = contract.series(contract.STEP)
_RANK = contract.label(contract.RANK)


@dataclass(frozen=True)
class StepWindow:
    """Steps ``first`` to ``last`` of a run, and the flushes that bound them."""

    first: int
    last: int
    start: float | None
    """Unix seconds of the flush that first showed step ``first``; None: before the run's first flush."""
    end: float
    """Unix seconds of the flush that first showed step ``last + 1``."""

    def duration(self, first_flush: float) -> str:
        """The window as a PromQL duration in milliseconds, reaching back from ``end`` to ``start`` (or to just before
        the run's first flush)."""
        start = first_flush - 0.001 if self.start is None else self.start
        return f"{round((self.end - start) * 1000)}ms"


def reached(points: Sequence[tuple[float, float]]) -> dict[int, float]:
    """When a run first reached each step: from its ``rl_step`` points (time, step) in time order, the time of the
    first point whose step is at least ``s``, for every ``s`` from 0 to the last step.

    >>> reached([(10.0, 0), (15.0, 2), (20.0, 2), (25.0, 3)])
    {0: 10.0, 1: 15.0, 2: 15.0, 3: 25.0}
    """
    found: dict[int, float] = {}
    for t, value in points:
        for step in range(len(found), int(value) + 1):
            found[step] = t
    return found


def step_windows(points: Sequence[tuple[float, float]], every: int) -> list[StepWindow]:
    """The run's windows of ``every`` steps, ``[0, every)``, ``[every, 2 every)``, ..., each up to the flush that
    first showed its next step: the first from before the run's first flush, a window that no flush split from the
    next left out (its steps passed between two flushes: their values are in the window before), the last one the
    run completed.

    >>> step_windows([(10.0, 0), (15.0, 2), (20.0, 2), (25.0, 4), (30.0, 5)], 2)
    [StepWindow(first=0, last=1, start=None, end=15.0), StepWindow(first=2, last=3, start=15.0, end=25.0)]
    """
    if every < 1:
        raise ValueError(f'"every" must be an integer >= 1, got {every!r}')
    times = reached(points)
    windows = []
    for first in range(0, max(times, default=-1) + 1 - every, every):
        start = None if first == 0 else times[first]
        end = times[first + every]
        if start is None or end > start:
            windows.append(StepWindow(first, first + every - 1, start, end))
    return windows


@dataclass(frozen=True)
class Run:
    """One compared run: its id, its group (``""``: none) and its ``rl_step`` points."""

    run_id: str
    group: str
    points: tuple[tuple[float, float], ...]

    @property
    def first_flush(self) -> float:
        return self.points[0][0]

    @property
    def last_step(self) -> int:
        return int(max(value for _, value in self.points))


@dataclass
class Curve:
    """One line of a compared panel: a run's values by step window (``labels``: the series' labels besides the run,
    e.g. its reward function)."""

    run_id: str
    labels: tuple[tuple[str, str], ...]
    values: dict[int, float] = field(default_factory=dict)
    """The first step of each window -> the value over the window."""


@dataclass(frozen=True)
class Band:
    """A seed group's mean and range over its runs at each window (its first step -> value), and how many runs had a
    value there."""

    group: str
    labels: tuple[tuple[str, str], ...]
    mean: dict[int, float]
    low: dict[int, float]
    high: dict[int, float]
    runs: dict[int, int]


@dataclass
class ComparedPanel:
    """A panel of the comparison dashboard's "Runs by step" row and what its query gave for every run."""

    panel: Panel
    query: str
    """The query as the dashboard holds it (``$runs`` and ``$__rate_interval`` in it)."""
    curves: list[Curve] = field(default_factory=list)

    def curve(self, run_id: str, labels: tuple[tuple[str, str], ...] = ()) -> Curve | None:
        return next((c for c in self.curves if c.run_id == run_id and c.labels == labels), None)

    @property
    def splits(self) -> list[tuple[tuple[str, str], ...]]:
        """The label sets of the panel's lines besides the run (one ``()`` unless it is split, e.g. by function)."""
        return sorted({c.labels for c in self.curves})


@dataclass(frozen=True)
class Comparison:
    """Everything a comparison report shows."""

    runs: list[Run]
    """The runs drawn as lines (``--run-id``), in the order given."""
    groups: dict[str, list[Run]]
    """Each seed group drawn as a band (``--group``) and its runs."""
    baseline: str | None
    every: int
    """Steps per window."""
    windows: dict[str, list[StepWindow]]
    panels: list[ComparedPanel]
    samples: list[dict[str, Any]]
    """The samples panel's rows: the prompts two or more runs kept a sample of, each run's latest sample of each."""
    dashboard: Path

    @property
    def all_runs(self) -> list[Run]:
        """Every run the comparison read: the lines, then the groups' runs."""
        found = {run.run_id: run for run in self.runs}
        for members in self.groups.values():
            found.update({run.run_id: run for run in members if run.run_id not in found})
        return list(found.values())

    def bands(self, panel: ComparedPanel) -> list[Band]:
        """Each group's band on ``panel``, one per label set."""
        return [
            band(group, members, panel, labels) for group, members in self.groups.items() for labels in panel.splits
        ]

    def matching_steps(self) -> list[int]:
        """The first steps of the windows every run of the comparison completed, :data:`TABLE_STEPS` of them evenly
        spaced (the last one among them)."""
        common = sorted(set.intersection(*({w.first for w in self.windows[r.run_id]} for r in self.all_runs)))
        if len(common) <= TABLE_STEPS:
            return common
        return sorted({common[round(i * (len(common) - 1) / (TABLE_STEPS - 1))] for i in range(TABLE_STEPS)})


def band(group: str, members: list[Run], panel: ComparedPanel, labels: tuple[tuple[str, str], ...]) -> Band:
    """The group's mean, min and max on ``panel`` at every window where one of its runs has a value."""
    by_step: dict[int, list[float]] = {}
    for run in members:
        curve = panel.curve(run.run_id, labels)
        for step, value in (curve.values if curve else {}).items():
            by_step.setdefault(step, []).append(value)
    return Band(
        group,
        labels,
        mean={s: math.fsum(v) / len(v) for s, v in by_step.items()},
        low={s: min(v) for s, v in by_step.items()},
        high={s: max(v) for s, v in by_step.items()},
        runs={s: len(v) for s, v in by_step.items()},
    )


@dataclass(frozen=True)
class Difference:
    """One row of the table of differences: a panel's line (``labels``) at the window of steps ``first`` to
    ``last``, the baseline's value there, and each other run's and each group's mean (``"group <name>"``) with its
    difference to the baseline (None where either has no value)."""

    labels: tuple[tuple[str, str], ...]
    first: int
    last: int
    baseline: float | None
    values: dict[str, tuple[float | None, float | None]]


def differences(comparison: Comparison, panel: ComparedPanel) -> list[Difference]:
    """The panel's rows of the table of differences, at the matching steps (:meth:`Comparison.matching_steps`)."""
    rows = []
    bands = {(b.group, b.labels): b for b in comparison.bands(panel)}
    for labels in panel.splits:
        base = panel.curve(comparison.baseline, labels) if comparison.baseline else None
        for step in comparison.matching_steps():
            baseline = base.values.get(step) if base else None
            values: dict[str, tuple[float | None, float | None]] = {}
            for run in comparison.runs:
                if run.run_id != comparison.baseline:
                    curve = panel.curve(run.run_id, labels)
                    values[run.run_id] = _with_delta(curve.values.get(step) if curve else None, baseline)
            for group in comparison.groups:
                found = bands.get((group, labels))
                values[f"group {group}"] = _with_delta(found.mean.get(step) if found else None, baseline)
            rows.append(Difference(labels, step, step + comparison.every - 1, baseline, values))
    return rows


def _with_delta(value: float | None, baseline: float | None) -> tuple[float | None, float | None]:
    delta = None if value is None or baseline is None else value - baseline
    return value, delta


# Fetching ---------------------------------------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    return f"{max(round(seconds * 1000), 1)}ms"


def step_points(
    prometheus: Prometheus, run_id: str, *, lookback_s: float, now: float
) -> tuple[tuple[float, float], ...]:
    """The run's ``rl_step`` points (time, step) within ``lookback_s`` of ``now``, in time order.

    Raises:
        ReportError: when the run has none.
    """
    selector = f"{promql.selector(_STEP, **{promql.RUN_LABEL: run_id, _RANK: ''})}[{_duration(lookback_s)}]"
    points = sorted((float(t), float(v)) for series in prometheus.query(selector, now) for t, v in series["values"])
    if not points:
        raise ReportError(f"run {run_id!r} has no rl_step sample in Prometheus in the last {lookback_s:.0f} s")
    return tuple(points)


def run_group(prometheus: Prometheus, run_id: str, *, lookback_s: float, now: float) -> str:
    """The run's group (``rl_run_group``), "" when it gives none."""
    selector = promql.selector(_STEP, **{promql.RUN_LABEL: run_id, _RANK: ""})
    query = f"group by ({promql.GROUP_LABEL}) (last_over_time({selector}[{_duration(lookback_s)}]))"
    found = prometheus.query(query, now)
    return str(found[0]["metric"].get(promql.GROUP_LABEL, "")) if found else ""


def group_runs(prometheus: Prometheus, group: str, *, lookback_s: float, now: float) -> list[str]:
    """The runs of ``group`` that reported within ``lookback_s`` of ``now``, sorted.

    Raises:
        ReportError: when the group has none.
    """
    selector = promql.selector(_STEP, **{promql.GROUP_LABEL: group, _RANK: ""})
    query = f"group by ({promql.RUN_LABEL}) (last_over_time({selector}[{_duration(lookback_s)}]))"
    runs = sorted(str(item["metric"][promql.RUN_LABEL]) for item in prometheus.query(query, now))
    if not runs:
        raise ReportError(f"group {group!r} has no run with an rl_step sample in the last {lookback_s:.0f} s")
    return runs


_VARIABLES = re.compile(
    r'(?P<runs>"\$runs")|(?P<list>\$\{runs:doublequote\})|(?P<window>\$__rate_interval)|(?P<other>\$\{?\w+)'
)
"""The variables of the comparison dashboard's queries the report fills in, and any other."""


def substitute_runs(expr: str, run_ids: Sequence[str], *, window: str = "") -> str:
    """The dashboard's ``expr`` for ``run_ids``, in one pass (a run id holding ``$`` is never read as a variable):
    ``"$runs"`` (a regex matcher's value) becomes a regular expression matching exactly those runs,
    ``${runs:doublequote}`` their list as LogsQL string literals, ``$__rate_interval`` the ``window``.

    >>> print(substitute_runs('x{rl_run_id=~"$runs"}[$__rate_interval]', ["a.b"], window="5000ms"))
    x{rl_run_id=~"a\\\\.b"}[5000ms]

    Raises:
        ValueError: when ``expr`` uses another variable, or ``$__rate_interval`` without a ``window``.
    """
    others = sorted({m["other"] for m in _VARIABLES.finditer(expr) if m["other"]})
    if others or (not window and "$__rate_interval" in expr):
        raise ValueError(
            f"query {expr!r} uses variables the comparison does not fill in: {others or ['$__rate_interval']!r}"
        )
    regex = promql.quote("|".join(promql.exact_regex(run_id) for run_id in run_ids))
    listed = ",".join(promql.quote(run_id) for run_id in run_ids)

    def value(found: re.Match[str]) -> str:
        return regex if found["runs"] else listed if found["list"] else window

    return _VARIABLES.sub(value, expr)


def _evaluate(
    prometheus: Prometheus, query: str, run: Run, window: StepWindow
) -> list[tuple[tuple[tuple[str, str], ...], float]]:
    """The value half of one comparison query for ``run`` over ``window``: (labels besides run and field, value)."""
    expr = substitute_runs(query, [run.run_id], window=window.duration(run.first_flush))
    found = []
    for item in prometheus.query(expr, window.end):
        labels = dict(item["metric"])
        if labels.pop(promql.FIELD_LABEL, None) != "value":
            continue
        labels.pop(promql.RUN_LABEL, None)
        value = float(item["value"][1])
        if math.isfinite(value):
            found.append((tuple(sorted(labels.items())), value))
    return found


def compared_panels(path: Path) -> list[tuple[Panel, str]]:
    """The comparison dashboard's runs panels (XY charts) with their query, in dashboard order; the group and delta
    panels ask the same queries (tests/dashboards/test_compare_static.py), which the report reads once per run."""
    panels = [panel for panel in load_panels(path) if panel.type == "xychart"]
    if not panels:
        raise ValueError(f"dashboard {str(path)!r} has no XY chart panel: is it the comparison dashboard?")
    return [(panel, panel.targets[0].expr) for panel in panels]


def samples_query(path: Path) -> str:
    """The comparison dashboard's LogsQL of the same prompt across runs."""
    for panel in load_panels(path):
        for target in panel.targets:
            if target.language == "logsql":
                return target.expr
    raise ValueError(f"dashboard {str(path)!r} has no samples panel")


def every_for(runs: Sequence[Run], points: int = POINTS) -> int:
    """Steps per window so that the longest run makes about ``points`` windows.

    >>> every_for([Run("a", "", ((0.0, 0), (5.0, 99)))])
    3
    """
    return max(1, math.ceil(max(run.last_step for run in runs) / points))


def build_comparison(
    *,
    prometheus_url: str,
    victorialogs_url: str,
    run_ids: Sequence[str],
    groups: Sequence[str] = (),
    baseline: str | None = None,
    every: int | None = None,
    dashboard: Path,
    lookback_s: float = 86_400.0,
    now: float,
    progress: Callable[[str], None] = lambda _: None,
) -> Comparison:
    """Read each run's step points, cut them into step windows of ``every`` steps (default :func:`every_for`), run
    every runs panel's query of ``dashboard`` over each window of each run, and the samples query over them all.

    Raises:
        ValueError: when ``baseline`` is not one of ``run_ids``, a run is given twice, or nothing is compared.
        ReportError: when a run or group has no data.
        QueryError: when a query fails.
    """
    if baseline is not None and baseline not in run_ids:
        raise ValueError(f'"--baseline" must be one of the --run-id values {list(run_ids)!r}, got {baseline!r}')
    if len(set(run_ids)) != len(run_ids):
        raise ValueError(f'"--run-id" must name each run once, got {list(run_ids)!r}')
    if len(run_ids) < 2 and not groups:
        raise ValueError(f'a comparison needs two "--run-id" or a "--group", got {list(run_ids)!r}')
    prometheus = Prometheus(prometheus_url)

    def load(run_id: str) -> Run:
        points = step_points(prometheus, run_id, lookback_s=lookback_s, now=now)
        return Run(run_id, run_group(prometheus, run_id, lookback_s=lookback_s, now=now), points)

    runs = [load(run_id) for run_id in run_ids]
    loaded = {run.run_id: run for run in runs}
    members: dict[str, list[Run]] = {}
    for group in groups:
        members[group] = []
        for run_id in group_runs(prometheus, group, lookback_s=lookback_s, now=now):
            loaded.setdefault(run_id, load(run_id))
            members[group].append(loaded[run_id])
    every = every or every_for(list(loaded.values()))
    windows = {run_id: step_windows(run.points, every) for run_id, run in loaded.items()}
    panels = [ComparedPanel(panel, query) for panel, query in compared_panels(dashboard)]
    jobs = [(panel, run, window) for panel in panels for run in loaded.values() for window in windows[run.run_id]]
    progress(f"{len(jobs)} queries: {len(panels)} panels, {len(loaded)} runs, windows of {every} steps")
    with ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(lambda job: _evaluate(prometheus, job[0].query, job[1], job[2]), jobs))
    for (panel, run, window), found in zip(jobs, results, strict=True):
        for labels, value in found:
            curve = panel.curve(run.run_id, labels)
            if curve is None:
                curve = Curve(run.run_id, labels)
                panel.curves.append(curve)
            curve.values[window.first] = value
    start = min(run.first_flush for run in loaded.values()) - 60
    samples = VictoriaLogs(victorialogs_url).query(
        substitute_runs(samples_query(dashboard), list(loaded)), start=start, end=now
    )
    return Comparison(
        runs=runs,
        groups=members,
        baseline=baseline,
        every=every,
        windows=windows,
        panels=panels,
        samples=samples,
        dashboard=dashboard,
    )
