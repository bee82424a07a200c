"""Run a dashboard's queries for one run against Prometheus (PromQL), VictoriaLogs (LogsQL) and Jaeger (its steps'
traces)."""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from typing import Any

import otel_rl_contract as contract

from otel_rl_ops import promql
from otel_rl_ops.query import Jaeger, Prometheus, Span, VictoriaLogs
from otel_rl_ops.report.dashboard import Panel, Target, legend_for, substitute
from otel_rl_ops.report.summary import STEP_TRACES


class ReportError(RuntimeError):
    """The run has no data in the searched range."""


@dataclass(frozen=True, kw_only=True)
class Window:
    """The time range a report covers, and the Grafana intervals derived from it."""

    start: float
    """Unix seconds."""
    end: float
    """Unix seconds."""
    step_s: float
    """Resolution of range queries (Grafana's ``$__interval``)."""
    rate_interval_s: float
    """Grafana's ``$__rate_interval``: ``max(step + scrape interval, 4 * scrape interval)``."""

    @classmethod
    def for_range(cls, start: float, end: float, *, scrape_interval_s: float, points: int = 240) -> Window:
        """Return the window ``[start, end]`` with about ``points`` steps, as Grafana would size its intervals.

        Raises:
            ValueError: when ``end <= start`` or ``scrape_interval_s <= 0``.
        """
        if not end > start:
            raise ValueError(f'"end" must be after "start", got start={start!r} end={end!r}')
        if not scrape_interval_s > 0:
            raise ValueError(f'"scrape_interval_s" must be > 0, got {scrape_interval_s!r}')
        step = max((end - start) / points, 1.0)
        rate = max(step + scrape_interval_s, 4 * scrape_interval_s)
        return cls(start=start, end=end, step_s=step, rate_interval_s=rate)


Bucket = tuple[float, float, float]
"""One bucket of a native histogram: lower bound, upper bound, count."""


@dataclass
class Series:
    """One line of a panel: its legend and its (unix seconds, value) points, or, for a query that returns
    Prometheus native histograms (a heatmap), its (unix seconds, buckets) histograms."""

    legend: str
    labels: dict[str, str]
    points: list[tuple[float, float]] = field(default_factory=list)
    histograms: list[tuple[float, tuple[Bucket, ...]]] = field(default_factory=list)
    """Native histogram samples: each bucket as (lower, upper, count), in Prometheus's order."""
    reference: bool = False
    """A reference line (a threshold: :attr:`Target.reference`), not the run's data."""

    def finite(self) -> list[tuple[float, float]]:
        """The points whose value is a finite number (NaN from 0/0 in an idle interval are left out)."""
        return [(t, v) for t, v in self.points if math.isfinite(v)]

    def counted(self) -> list[tuple[float, tuple[Bucket, ...]]]:
        """The histograms with at least one value in a bucket."""
        return [(t, buckets) for t, buckets in self.histograms if any(n > 0 for _, _, n in buckets)]


def _buckets(histogram: dict[str, Any]) -> tuple[Bucket, ...]:
    """The buckets of a native histogram as Prometheus's JSON writes them: ``[rule, "lower", "upper", "count"]``.

    >>> _buckets({"count": "3", "sum": "2.5", "buckets": [[0, "0.5", "1", "2"], [3, "-0.001", "0.001", "1"]]})
    ((0.5, 1.0, 2.0), (-0.001, 0.001, 1.0))
    """
    return tuple((float(low), float(high), float(count)) for _, low, high, count in histogram.get("buckets") or ())


@dataclass(frozen=True)
class StepTrace:
    """One step of the run as Jaeger holds it: its trace and its root span ``rl.step``."""

    trace_id: str
    step: int | None
    start: float
    """Unix seconds."""
    duration_s: float


@dataclass
class PanelData:
    """What a panel's queries returned."""

    panel: Panel
    series: list[Series] = field(default_factory=list)
    """PromQL results (time series, or one point per series for instant queries)."""
    rows: list[dict[str, Any]] = field(default_factory=list)
    """LogsQL results (one dict per log record)."""
    queries: list[str] = field(default_factory=list)
    """The queries as run (variables substituted)."""
    steps: list[StepTrace] = field(default_factory=list)
    """A Jaeger search's steps, slowest first."""
    timeline: list[Span] = field(default_factory=list)
    """Every span of the slowest step's trace: each rank's phases (the per-rank timeline of that step)."""

    def has_data(self) -> bool:
        """Whether any query returned a finite value, a histogram with values, a log record or a step."""
        return bool(self.rows) or bool(self.steps) or any(s.finite() or s.counted() for s in self.series)


def _duration(seconds: float) -> str:
    return f"{max(round(seconds * 1000), 1)}ms"


def run_span(prometheus: Prometheus, run_id: str, *, lookback_s: float, now: float) -> tuple[float, float]:
    """Return the first and last time the run's ``rl_step`` reached Prometheus within ``lookback_s`` of ``now``.

    Raises:
        ReportError: when the run has no ``rl_step`` sample in that range.
        QueryError: when the query fails.
    """
    selector = f"{_step(run_id)}[{_duration(lookback_s)}]"
    times = [float(t) for series in prometheus.query(selector, now) for t, _ in series.get("values", ())]
    if not times:
        raise ReportError(f"run {run_id!r} has no rl_step sample in Prometheus in the last {lookback_s:.0f} s")
    return min(times), max(times)


def run_service(prometheus: Prometheus, run_id: str, *, at: float) -> str:
    """The run's ``service.name`` (its series' ``job``), which Jaeger searches its traces by; "" when unknown."""
    found = prometheus.query(f"group by (job) (last_over_time({_step(run_id)}[1d]))", at)
    return str(found[0]["metric"].get("job", "")) if found else ""


def _step(run_id: str) -> str:
    """The selector of the run's aggregated ``rl_step``."""
    labels = {contract.label(contract.RUN_ID): run_id, contract.label(contract.RANK): ""}
    return promql.selector(contract.series(contract.STEP), **labels)


_LOGFMT = re.compile(r'([\w.]+)=("(?:[^"\\]|\\.)*"|\S+)')
"""One ``key=value`` of a Jaeger search's logfmt tags; the value a string literal or a bare word."""


def logfmt_tags(text: str) -> dict[str, str]:
    r"""The tags of a Jaeger search (logfmt, values quoted by :func:`otel_rl_ops.promql.quote`).

    >>> logfmt_tags('rl.run.id="a \\"b\\"" rl.step=3')
    {'rl.run.id': 'a "b"', 'rl.step': '3'}
    """
    return {key: ast.literal_eval(value) if value.startswith('"') else value for key, value in _LOGFMT.findall(text)}


def _fetch_steps(data: PanelData, target: Target, query: str, *, jaeger: Jaeger, service: str, window: Window) -> None:
    """A Jaeger search of the run's steps: each step's root span, slowest first, and the slowest one's trace. The
    search asks for every step's trace (:data:`~otel_rl_ops.report.summary.STEP_TRACES`), not only the dashboard's
    ``limit`` most recent ones: the slowest steps of the run, the same slowest step as the summary's."""
    traces = jaeger.traces(
        service,
        operation=target.operation,
        tags=logfmt_tags(query),
        start=window.start - 60,  # the first step's span begins before the run's first metrics reach Prometheus
        end=window.end + 60,
        limit=max(target.limit, STEP_TRACES),
    )
    for found in traces:
        for span in found.get("spans") or ():
            if span.get("operationName") == target.operation and not span.get("references"):
                tags = {tag["key"]: tag["value"] for tag in span.get("tags") or ()}
                step = tags.get("rl.step")
                data.steps.append(
                    StepTrace(
                        trace_id=str(found["traceID"]),
                        step=None if step is None else int(step),
                        start=float(span["startTime"]) / 1e6,
                        duration_s=float(span["duration"]) / 1e6,
                    )
                )
    data.steps.sort(key=lambda step: -step.duration_s)
    if data.steps:
        data.timeline = jaeger.trace(data.steps[0].trace_id)


def fetch_panel(
    panel: Panel,
    *,
    run_id: str,
    window: Window,
    prometheus: Prometheus,
    logs: VictoriaLogs,
    jaeger: Jaeger | None = None,
    service: str = "",
) -> PanelData:
    """Run every query of ``panel`` over ``window``: range queries for time series, instant ones at the end, a
    Jaeger search of the run's ``service`` (none without ``jaeger``).

    Raises:
        QueryError: when a query fails.
    """
    data = PanelData(panel=panel)
    for target in panel.targets:
        query = substitute(
            target.expr,
            run_id=run_id,
            rate_interval=_duration(window.rate_interval_s),
            interval=_duration(window.step_s),
        )
        data.queries.append(query)
        if target.language == "jaeger":
            if jaeger is not None and service:
                _fetch_steps(data, target, query, jaeger=jaeger, service=service, window=window)
        elif target.language == "logsql":
            data.rows.extend(logs.query(query, start=window.start, end=window.end + 60))
        elif target.instant:
            for item in prometheus.query(query, window.end):
                labels = dict(item["metric"])
                series = Series(legend_for(target.legend, labels), labels, reference=target.reference)
                if "histogram" in item:
                    t, histogram = item["histogram"]
                    series.histograms.append((float(t), _buckets(histogram)))
                else:
                    t, v = item["value"]
                    series.points.append((float(t), float(v)))
                data.series.append(series)
        else:
            for item in prometheus.range(query, window.start, window.end, step=window.step_s):
                labels = dict(item["metric"])
                points = [(float(t), float(v)) for t, v in item.get("values", ())]
                histograms = [(float(t), _buckets(h)) for t, h in item.get("histograms", ())]
                data.series.append(
                    Series(legend_for(target.legend, labels), labels, points, histograms, reference=target.reference)
                )
    return data
