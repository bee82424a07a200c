"""Read a finished run back from Prometheus and VictoriaLogs: what an operator would see, as numbers.

Window statistics subtract cumulative values at two instants (exact; ``increase()`` would extrapolate), so the
summary can be checked against what the ranks recorded. Histograms are read as Prometheus native histograms
(``rl_reward``, ``rl_staleness``: the ranks' default exponential histograms), else as the classic ``_bucket`` and
``_count`` series (``TelemetryConfig(histogram="explicit")``), and every quantile is clamped to the exact merged
min and max (the ``_min``/``_max`` gauges) of its window, as on the dashboards.
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


def _offset(expr: str, selector: str, seconds: float) -> str:
    """``expr`` with every ``selector`` in it read ``seconds`` earlier."""
    return expr.replace(selector, f"{selector} offset {round(seconds * 1000)}ms")


def _histogram(metric: str, selector: str, start: float | None, end: float) -> tuple[str, str]:
    """PromQL of what histogram ``metric`` recorded between ``start`` (None: the beginning) and ``end``, evaluated
    at ``end``: the native histogram, and the classic buckets by ``le``."""
    native = f"sum({metric}{selector})"
    classic = f"sum by (le) ({metric}_bucket{selector})"
    if start is None:
        return native, classic
    return (f"({native} - {_offset(native, selector, end - start)})",
            f"({classic} - {_offset(classic, selector, end - start)})")  # fmt: skip


def _count(metric: str, selector: str) -> str:
    """PromQL of the values recorded into ``metric`` so far: the native histogram's count, else the classic one."""
    return f"(histogram_count(sum({metric}{selector})) or sum({metric}_count{selector}))"


def clamp(value: float | None, low: float | None, high: float | None) -> float | None:
    """``value`` within ``[low, high]``; None when any is unknown (no values, so no quantile either).

    >>> clamp(0.989, 1.0, 1.0), clamp(2.5, 0.0, 4.0), clamp(None, 0.0, 1.0)
    (1.0, 2.5, None)
    """
    if value is None or low is None or high is None:
        return None
    return min(max(value, low), high)


def quantiles(
    sources: Sources,
    metric: str,
    selector: str,
    qs: tuple[float, ...],
    *,
    start: float | None,
    end: float,
    since: float,
    integers: bool = False,
) -> dict[str, float | None]:
    """The ``qs`` quantiles of ``metric`` recorded between ``start`` (None: the beginning) and ``end``, from the
    native histogram (else the classic buckets), each clamped to the exact min and max of the gauges over
    ``[start or since, end]``, rounded when the metric only takes ``integers`` (as the dashboards do). Keys
    ``p50``, ``p90``, ...."""
    native, classic = _histogram(metric, selector, start, end)
    window = f"[{round((end - (since if start is None else start)) * 1000)}ms]"
    prometheus = sources.prometheus
    low = prometheus.value(f"min(min_over_time({metric}_min{selector}{window}))", end)
    high = prometheus.value(f"max(max_over_time({metric}_max{selector}{window}))", end)
    return {
        f"p{round(q * 100)}": clamp(
            prometheus.value(
                f"{'round' if integers else ''}(histogram_quantile({q}, {native}) or histogram_quantile({q}, {classic}))",
                end,
            ),
            low,
            high,
        )
        for q in qs
    }


def wait_until_settled(sources: Sources, *, expected_count: int | None, timeout_s: float = 60) -> float:
    """Wait until the run's reward count stops changing (or reaches ``expected_count``); returns that time."""
    query = _count("rl_reward", sources.selector(rl_reward_fn="total"))
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
    query = _count("rl_reward", sources.selector(rl_reward_fn="total"))
    series = sources.prometheus.range(query, now - lookback_s, now, step=0.5)[0]
    values = [(float(t), float(v)) for t, v in series["values"]]
    final = values[-1][1]
    settled = next(t for t, v in values if v == final)
    return values[0][0], settled


def window_stats(sources: Sources, fn: str, start: float | None, end: float, *, since: float) -> dict[str, float | None]:
    """Count, mean, p50 and p90 of ``rl.reward{fn}`` recorded between ``start`` (None: the beginning, the run's
    first point at ``since``) and ``end``."""
    sel = sources.selector(rl_reward_fn=fn)
    prometheus = sources.prometheus

    def delta(metric: str) -> str:
        agg = f"sum({metric}{sel})"
        return agg if start is None else f"({agg} - {_offset(agg, sel, end - start)})"

    native, _ = _histogram("rl_reward", sel, start, end)
    count = prometheus.value(f"histogram_count({native}) or {delta('rl_reward_count')}", end)
    mean = prometheus.value(
        f"({delta('rl_reward_positive_total')} - {delta('rl_reward_negative_total')})"
        f" / (histogram_count({native}) or {delta('rl_reward_count')})",
        end,
    )
    return {"count": count, "mean": mean, **quantiles(sources, "rl_reward", sel, (0.5, 0.9), start=start, end=end, since=since)}


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


def health(sources: Sources, end: float, *, since: float) -> dict[str, Any]:
    """The run's health signals over its whole life: the importance ratio between trainer and generator (mean,
    p50, p99, effective sample size), the k1/k3 mismatch KL, entropy, prompt-group outcomes, advantage signs,
    reward per dataset, and the ranks and lifecycle gauges."""
    prometheus = sources.prometheus
    sel = sources.selector()

    def total(metric: str, **labels: str) -> float | None:
        return prometheus.value(f"sum({metric}{sources.selector(**labels)})", end)

    def mean(metric: str, **labels: str) -> float | None:
        selector = sources.selector(**labels)
        return prometheus.value(
            f"(sum({metric}_positive_total{selector}) - sum({metric}_negative_total{selector}))"
            f" / histogram_count(sum({metric}{selector}))",
            end,
        )

    ratio_count = prometheus.value(_count("rl_importance_ratio", sel), end)
    ratio_sum, ratio_squares = total("rl_importance_ratio_positive_total"), total("rl_importance_ratio_squares_total")
    lookback = f"[{round(end - since)}s]"
    return {
        "importance_ratio": {
            "tokens": ratio_count,
            "mean": mean("rl_importance_ratio"),
            **quantiles(sources, "rl_importance_ratio", sel, (0.5, 0.99), start=None, end=end, since=since),
            "ess_fraction": None
            if not (ratio_count and ratio_squares and ratio_sum)
            else ratio_sum**2 / (ratio_count * ratio_squares),
        },
        "mismatch_kl": {estimator: mean("rl_mismatch_kl", rl_kl_estimator=estimator) for estimator in ("k1", "k3")},
        "entropy_mean": mean("rl_entropy"),
        "groups": {
            **{outcome: total("rl_groups_total", rl_group_outcome=outcome) for outcome in ("none", "some", "all")},
            "zero_variance": total("rl_groups_zero_variance_total"),
        },
        "advantage_signs": {sign: total("rl_advantage_sign_total", rl_sign=sign) for sign in ("positive", "negative", "zero")},
        "reward_by_dataset": {dataset: mean("rl_reward", rl_reward_fn="total", rl_dataset=dataset) for dataset in ("carry", "no_carry")},
        "ranks": {
            "up": prometheus.value(f"max(max_over_time(rl_ranks_up{sel}{lookback}))", end),
            "expected": prometheus.value(f"max(last_over_time(rl_ranks_expected{sel}{lookback}))", end),
            "finished": prometheus.value(f"max(last_over_time(rl_run_finished{sel}{lookback}))", end),
        },
    }


def summarize(sources: Sources, *, expected_count: int | None) -> dict[str, Any]:
    """Everything the demo prints: reward early vs late, staleness p99 and max, and the extreme samples."""
    begin, end = reporting_span(sources, wait_until_settled(sources, expected_count=expected_count), 3600)
    quarter = max((end - begin) / 4, 1.0)
    since = begin - 60  # the extremes gauges of the run's first points, with a margin
    sel = sources.selector()
    prometheus = sources.prometheus
    return {
        "run_id": sources.run_id,
        "window_s": round(end - begin, 3),
        "reward": {
            "overall": window_stats(sources, "total", None, end, since=since),
            "early": window_stats(sources, "total", None, begin + quarter, since=since),
            "late": window_stats(sources, "total", end - quarter, end, since=since),
            "by_fn": {fn: window_stats(sources, fn, None, end, since=since) for fn in ("correctness", "format")},
        },
        "staleness": {
            "count": prometheus.value(_count("rl_staleness", sel), end),
            "sum": prometheus.value(
                f"histogram_sum(sum(rl_staleness{sel})) or sum(rl_staleness_sum{sel})", end
            ),
            **quantiles(sources, "rl_staleness", sel, (0.5, 0.99), start=None, end=end, since=since, integers=True),
            "min": prometheus.value(f"min(min_over_time(rl_staleness_min{sel}[{round(end - since)}s]))", end),
            "max": prometheus.value(f"max(max_over_time(rl_staleness_max{sel}[{round(end - since)}s]))", end),
        },
        "health": health(sources, end, since=since),
        "samples": {"top": samples(sources, "top", 3), "bottom": samples(sources, "bottom", 3)},
    }
