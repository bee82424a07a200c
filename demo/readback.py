"""Read a finished run back from Prometheus and VictoriaLogs: what an operator would see, as numbers.

Window statistics subtract cumulative values at two instants (exact; ``increase()`` would extrapolate), so the
summary can be checked against what the ranks recorded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from otel_rl.query import Prometheus, VictoriaLogs

_TIMEOUT_S = 10


@dataclass(frozen=True)
class Sources:
    prometheus_url: str
    victorialogs_url: str
    run_id: str

    @property
    def prometheus(self) -> Prometheus:
        """The client of ``prometheus_url``."""
        return Prometheus(self.prometheus_url, timeout_s=_TIMEOUT_S)

    @property
    def logs(self) -> VictoriaLogs:
        """The client of ``victorialogs_url``."""
        return VictoriaLogs(self.victorialogs_url, timeout_s=_TIMEOUT_S)

    def selector(self, **labels: str) -> str:
        pairs = {"rl_run_id": self.run_id, **labels}
        return "{" + ",".join(f'{k}="{v}"' for k, v in pairs.items()) + "}"


def wait_until_settled(sources: Sources, *, expected_count: int | None, timeout_s: float = 60) -> float:
    """Wait until the run's reward count stops changing (or reaches ``expected_count``); returns that time."""
    query = f"sum(rl_reward_count{sources.selector(rl_reward_fn='total')})"
    deadline = time.time() + timeout_s
    previous, stable = None, 0
    while time.time() < deadline:
        now = time.time()
        value = sources.prometheus.value(query, now)
        if value is not None and expected_count is not None and value >= expected_count:
            return now
        stable = stable + 1 if value is not None and value == previous else 0
        if expected_count is None and stable >= 3:
            return now
        previous = value
        time.sleep(1)
    raise TimeoutError(f"run {sources.run_id!r}: reward count still {previous} after {timeout_s}s")


def reporting_span(sources: Sources, now: float, lookback_s: float) -> tuple[float, float]:
    """When the run's reward count first appeared in Prometheus, and when it reached its final value."""
    query = f"sum(rl_reward_count{sources.selector(rl_reward_fn='total')})"
    series = sources.prometheus.range(query, now - lookback_s, now, step=0.5)[0]
    values = [(float(t), float(v)) for t, v in series["values"]]
    final = values[-1][1]
    settled = next(t for t, v in values if v == final)
    return values[0][0], settled


def window_stats(sources: Sources, fn: str, start: float | None, end: float) -> dict[str, float | None]:
    """Mean, p50 and p90 of ``rl.reward{fn}`` recorded between ``start`` (None: the beginning) and ``end``."""
    sel = sources.selector(rl_reward_fn=fn)
    prometheus = sources.prometheus

    def delta(metric: str, by_le: bool = False) -> str:
        agg = f"sum by (le) ({metric}{sel})" if by_le else f"sum({metric}{sel})"
        if start is None:
            return agg
        return f"({agg} - {agg.replace(sel, sel + f' offset {round((end - start) * 1000)}ms')})"

    mean = prometheus.value(
        f"({delta('rl_reward_positive_total')} - {delta('rl_reward_negative_total')}) / {delta('rl_reward_count')}",
        end,
    )
    p50 = prometheus.value(f"histogram_quantile(0.5, {delta('rl_reward_bucket', True)})", end)
    p90 = prometheus.value(f"histogram_quantile(0.9, {delta('rl_reward_bucket', True)})", end)
    count = prometheus.value(delta("rl_reward_count"), end)
    return {"count": count, "mean": mean, "p50": p50, "p90": p90}


def samples(sources: Sources, selection: str, limit: int) -> list[dict[str, Any]]:
    """The run's highest (``top``) or lowest (``bottom``) reward samples across all ranks, latest steps first,
    one per distinct prompt and response."""
    order = "desc" if selection == "top" else "asc"
    query = (
        f'rl.run.id:="{sources.run_id}" rl.sample.selection:="{selection}" '
        f"| sort by (rl.reward {order}, rl.step desc) | limit {limit * 20}"
    )
    distinct: dict[tuple[str, str], dict[str, Any]] = {}
    for record in sources.logs.query(query):
        distinct.setdefault((record.get("prompt", ""), record.get("_msg", "")), record)
    return list(distinct.values())[:limit]


def summarize(sources: Sources, *, expected_count: int | None) -> dict[str, Any]:
    """Everything the demo prints: reward early vs late, staleness p99 and max, and the extreme samples."""
    begin, end = reporting_span(sources, wait_until_settled(sources, expected_count=expected_count), 3600)
    quarter = max((end - begin) / 4, 1.0)
    sel = sources.selector()
    prometheus = sources.prometheus
    return {
        "run_id": sources.run_id,
        "window_s": round(end - begin, 3),
        "reward": {
            "overall": window_stats(sources, "total", None, end),
            "early": window_stats(sources, "total", None, begin + quarter),
            "late": window_stats(sources, "total", end - quarter, end),
            "by_fn": {fn: window_stats(sources, fn, None, end) for fn in ("correctness", "format")},
        },
        "staleness": {
            "count": prometheus.value(f"sum(rl_staleness_count{sel})", end),
            "sum": prometheus.value(f"sum(rl_staleness_sum{sel})", end),
            "p50": prometheus.value(f"histogram_quantile(0.5, sum by (le) (rl_staleness_bucket{sel}))", end),
            "p99": prometheus.value(f"histogram_quantile(0.99, sum by (le) (rl_staleness_bucket{sel}))", end),
            "max": prometheus.value(f"max(max_over_time(rl_staleness_max{sel}[{int(end - begin) + 60}s]))", end),
        },
        "samples": {"top": samples(sources, "top", 3), "bottom": samples(sources, "bottom", 3)},
    }
