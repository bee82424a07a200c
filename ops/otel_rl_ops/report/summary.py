"""A run's summary read back from the stores: the numbers a person wants first (used by ``otel-rl report`` and
``python -m demo``).

Reward early and late (mean, p50, p90), staleness, rollout health, where the time went (phase shares, nested phases as
shares of their parent), tokens per second and MFU, the slowest step's trace, and the top and bottom samples.

Window statistics subtract cumulative values at two instants (exact; ``increase()`` would extrapolate), so the
summary can be checked against what the ranks recorded. Histograms are read as Prometheus native histograms
(``rl_reward``, ``rl_staleness``: the ranks' default exponential histograms), else as the classic ``_bucket`` and
``_count`` series (``TelemetryConfig(histogram="explicit")``), and every quantile is clamped to the exact merged
min and max (the ``_min``/``_max`` gauges) of its window, as on the dashboards: the queries come from the
dashboards' own builders (:mod:`otel_rl_ops.promql`), read over cumulative values instead of a rate window.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Literal

import otel_rl_contract as contract
from otel_rl_contract import Distribution, foreign, rules

from otel_rl_ops import promql
from otel_rl_ops.query import Jaeger, Prometheus, QueryError, VictoriaLogs

_TIMEOUT_S = 10
_REWARD = contract.series(contract.REWARDS.histogram)
_REWARD_FN = contract.label(contract.REWARD_FN)
_TOTAL = {_REWARD_FN: contract.REWARD_FN_TOTAL}
"""The matcher of the total reward (the one the policy is trained on)."""
STEP_TRACES = 100_000
"""How many of a run's step traces a Jaeger search asks for: all of them, so that the slowest step is the run's."""


@dataclass(frozen=True)
class Sources:
    """Where one run's data is: the stores' base URLs and the run id."""

    prometheus_url: str
    victorialogs_url: str
    run_id: str
    jaeger_url: str | None = None
    """Jaeger's query API: the slowest step's trace (None: the summary names no trace)."""

    @property
    def prometheus(self) -> Prometheus:
        """The client of ``prometheus_url``."""
        return Prometheus(self.prometheus_url, timeout_s=_TIMEOUT_S)

    @property
    def logs(self) -> VictoriaLogs:
        """The client of ``victorialogs_url``."""
        return VictoriaLogs(self.victorialogs_url, timeout_s=_TIMEOUT_S)

    def selector(self, **labels: str) -> str:
        """Label matchers of the run's series with ``labels`` (values quoted)."""
        return promql.matchers(**{contract.label(contract.RUN_ID): self.run_id}, **labels)


def _offset(expr: str, selector: str, seconds: float) -> str:
    """``expr`` with every series of ``selector`` in it read ``seconds`` earlier."""
    return expr.replace(f"{{{selector}}}", f"{{{selector}}} offset {_duration(seconds)}")


def _since(expr: str, selector: str, start: float | None, end: float) -> str:
    """What the cumulative ``expr`` grew by from ``start`` to ``end`` (evaluated at ``end``): ``expr`` minus itself
    ``end - start`` earlier, exact (``increase()`` would extrapolate); ``expr`` itself when ``start`` is None (the
    beginning)."""
    return expr if start is None else f"({expr} - {_offset(expr, selector, end - start)})"


def _duration(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


def quantiles(
    sources: Sources,
    values: Distribution,
    selector: str,
    qs: tuple[float, ...],
    *,
    start: float | None,
    end: float,
    since: float,
    integers: bool = False,
) -> dict[str, float | None]:
    """The ``qs`` quantiles of ``values`` recorded between ``start`` (None: the beginning) and ``end``, from the
    native histogram (else the classic buckets), each clamped to the exact min and max of the gauges over
    ``[start or since, end]``, rounded when the metric only takes ``integers`` (as the dashboards do). Keys
    ``p50``, ``p90``, ...."""
    histogram = contract.series(values.histogram)
    native, classic = (_since(h, selector, start, end) for h in promql.buckets(histogram, selector, window=None))
    bounds = promql.extremes(values, selector, window=_duration(end - (since if start is None else start)))
    return {
        f"p{round(q * 100)}": sources.prometheus.value(
            promql.clamp_to_extremes(promql.quantile_estimate(q, native, classic, integers=integers), *bounds), end
        )
        for q in qs
    }


def wait_until_settled(sources: Sources, *, expected_count: int | None, timeout_s: float = 60) -> float:
    """Wait until the run's reward count stops changing (or reaches ``expected_count``); returns that time."""
    query = promql.count(_REWARD, sources.selector(**_TOTAL), window=None)
    return _settled(sources, query, expected_count, timeout_s, what="reward count")


def _settled(sources: Sources, query: str, expected: float | None, timeout_s: float, *, what: str) -> float:
    """Poll ``query`` every second until it reaches ``expected`` (or, when that is None, gives one value three
    times in a row); returns that time."""
    deadline = time.time() + timeout_s
    previous, stable = None, 0
    while time.time() < deadline:
        now = time.time()
        value = sources.prometheus.value(query, now)
        if value is not None and expected is not None and value >= expected:
            return now
        stable = stable + 1 if value is not None and value == previous else 0
        if expected is None and stable >= 3:
            return now
        previous = value
        time.sleep(1)
    raise TimeoutError(f"run {sources.run_id!r}: {what} still {previous} after {timeout_s}s")


def reporting_span(sources: Sources, now: float, lookback_s: float) -> tuple[float, float]:
    """When the run's reward count first appeared in Prometheus, and when it reached its final value."""
    query = promql.count(_REWARD, sources.selector(**_TOTAL), window=None)
    series = sources.prometheus.range(query, now - lookback_s, now, step=0.5)[0]
    values = [(float(t), float(v)) for t, v in series["values"]]
    final = values[-1][1]
    settled = next(t for t, v in values if v == final)
    return values[0][0], settled


def window_stats(
    sources: Sources, fn: str, start: float | None, end: float, *, since: float
) -> dict[str, float | None]:
    """Count, mean, p50 and p90 of ``rl.reward{fn}`` recorded between ``start`` (None: the beginning, the run's
    first point at ``since``) and ``end``."""
    sel = sources.selector(**{_REWARD_FN: fn})
    count = _since(promql.count(_REWARD, sel, window=None), sel, start, end)
    total = _since(promql.signed_sum(contract.REWARDS, sel, window=None), sel, start, end)
    prometheus = sources.prometheus
    return {
        "count": prometheus.value(count, end),
        "mean": prometheus.value(f"{total} / {count}", end),
        **quantiles(sources, contract.REWARDS, sel, (0.5, 0.9), start=start, end=end, since=since),
    }


def samples(sources: Sources, end: Literal["top", "bottom"], limit: int) -> list[dict[str, Any]]:
    """The run's kept samples with the highest (``top``) or lowest (``bottom``) rewards across all ranks, whatever
    the selection each was kept by (with one sample a step, every one is its step's top), latest steps first among
    equal rewards, one per distinct prompt and response; NaN rewards left out."""
    order = "desc" if end == "top" else "asc"
    query = (
        f"{promql.logsql_exact(contract.RUN_ID, sources.run_id)} {promql.logsql_number(contract.SAMPLE_REWARD)} "
        f"| sort by ({promql.quote(contract.SAMPLE_REWARD)} {order}, {promql.quote(contract.SAMPLE_STEP)} desc) "
        f"| limit {limit * 20}"
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

    def total(counter: contract.MetricName, attribute: str = "", value: str = "") -> float | None:
        labels = {contract.label(attribute): value} if attribute else {}
        return prometheus.value(promql.increase(contract.series(counter), sources.selector(**labels), window=None), end)

    def mean(values: Distribution, **labels: str) -> float | None:
        return prometheus.value(promql.mean(values, sources.selector(**labels), window=None), end)

    def last(gauge: contract.MetricName, over: str) -> float | None:
        return prometheus.value(f"max({over}({contract.series(gauge).name}{{{sel}}}[{round(end - since)}s]))", end)

    ratios = contract.IMPORTANCE_RATIO
    kl_estimator, dataset_label = contract.label(contract.KL_ESTIMATOR), contract.label(contract.DATASET)
    return {
        "importance_ratio": {
            "tokens": prometheus.value(promql.count(contract.series(ratios.histogram), sel, window=None), end),
            "mean": mean(ratios),
            **quantiles(sources, ratios, sel, (0.5, 0.99), start=None, end=end, since=since),
            "ess_fraction": prometheus.value(promql.effective_sample_size(ratios, sel, window=None), end),
        },
        "mismatch_kl": {k: mean(contract.MISMATCH_KL, **{kl_estimator: k}) for k in ("k1", "k3")},
        "entropy_mean": mean(contract.ENTROPY),
        "groups": {
            **{outcome: total(contract.GROUPS, contract.GROUP_OUTCOME, outcome) for outcome in ("none", "some", "all")},
            "zero_variance": total(contract.GROUPS_ZERO_VARIANCE),
        },
        "advantage_signs": {
            sign: total(contract.ADVANTAGE_SIGNS, contract.SIGN, sign) for sign in ("positive", "negative", "zero")
        },
        "reward_by_dataset": {
            dataset: mean(contract.REWARDS, **_TOTAL, **{dataset_label: dataset}) for dataset in ("carry", "no_carry")
        },
        "ranks": {
            "up": last(contract.RANKS_UP, "max_over_time"),
            "expected": last(contract.RANKS_EXPECTED, "last_over_time"),
            "finished": last(contract.RUN_FINISHED, "last_over_time"),
        },
    }


def wait_for_spans(sources: Sources, *, expected_spans: int | None, timeout_s: float = 60) -> float:
    """Wait until the run's phase spans are all counted (``rl_phase_calls_total`` reaches ``expected_spans``, or
    stops changing when that is None); returns that time. Spans leave a rank in batches (every 5 s, the last at its
    shutdown) and pass the collector's spanmetrics, so they arrive seconds after the rank's last metrics."""
    query = promql.increase(contract.series(contract.PHASE_CALLS), sources.selector(), window=None)
    return _settled(sources, query, expected_spans, timeout_s, what="phase spans counted")


def step_traces(sources: Sources, begin: float, end: float, *, service: str) -> list[dict[str, Any]]:
    """Every step's trace of the run in Jaeger (Jaeger's JSON: ``traceID``, ``spans`` with ``tags`` and
    ``references``); none without ``sources.jaeger_url`` or ``service``."""
    if sources.jaeger_url is None or not service:
        return []
    return Jaeger(sources.jaeger_url, timeout_s=_TIMEOUT_S).traces(
        service,
        operation=contract.STEP_SPAN,
        tags={contract.RUN_ID: sources.run_id},
        start=begin - 60,
        end=end + 60,
        limit=STEP_TRACES,
    )


def _tags(span: dict[str, Any]) -> dict[str, Any]:
    return {tag["key"]: tag["value"] for tag in span.get("tags") or ()}


def slowest_step(traces: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The slowest step among ``traces`` (:func:`step_traces`): step, seconds and trace id of the longest root span
    ``rl.step``."""
    steps = [
        {"step": int(tags[contract.SAMPLE_STEP]), "seconds": span["duration"] / 1e6, "trace_id": found["traceID"]}
        for found in traces
        for span in found["spans"]
        if span["operationName"] == contract.STEP_SPAN and not span.get("references")
        for tags in [_tags(span)]
    ]
    return max(steps, key=lambda step: step["seconds"]) if steps else None


def phase_parents(traces: list[dict[str, Any]]) -> dict[str, str | None]:
    """Which phase each phase runs inside, from the steps' traces: a phase span whose parent span is a phase span is
    nested in that phase (``with telemetry.phase("train"): with telemetry.phase("allreduce"): ...``); None: a
    top-level phase. A phase seen under several parents gets the most frequent one.

    >>> span = lambda i, name, parent=None: {"spanID": i, "tags": [{"key": "rl.phase.name", "value": name}],
    ...     "references": [{"refType": "CHILD_OF", "spanID": parent or "rank"}]}
    >>> phase_parents([{"spans": [span("1", "train"), span("2", "allreduce", "1"), span("3", "score")]}])
    {'train': None, 'allreduce': 'train', 'score': None}
    """
    seen: dict[str, dict[str | None, int]] = {}
    for found in traces:
        names = {span["spanID"]: _tags(span).get(contract.PHASE) for span in found.get("spans") or ()}
        for span in found.get("spans") or ():
            name = names[span["spanID"]]
            if name is None:
                continue
            parents = [ref["spanID"] for ref in span.get("references") or () if ref.get("refType") == "CHILD_OF"]
            parent = names.get(parents[0]) if parents else None
            counts = seen.setdefault(str(name), {})
            key = None if parent is None or parent == name else str(parent)
            counts[key] = counts.get(key, 0) + 1
    parents_of = {name: max(counts, key=lambda parent: counts[parent]) for name, counts in seen.items()}
    return {name: parent if _top(parent, parents_of, name) else None for name, parent in parents_of.items()}


def _top(parent: str | None, parents_of: dict[str, str | None], name: str) -> bool:
    """Whether following ``parent`` upwards ends at a top-level phase (not in a cycle back to ``name``)."""
    steps = 0
    while parent is not None and steps <= len(parents_of):
        if parent == name:
            return False
        parent, steps = parents_of.get(parent), steps + 1
    return parent is None


def nested_order(seconds: dict[str, float], parents: dict[str, str | None]) -> list[tuple[str, int]]:
    """The phases in tree order with their depth: top-level phases by time spent (most first), each followed by the
    phases nested in it. A phase whose parent has no time of its own counts as top-level.

    >>> nested_order({"train": 5.0, "allreduce": 1.0, "generate": 9.0}, {"allreduce": "train"})
    [('generate', 0), ('train', 0), ('allreduce', 1)]
    """
    children: dict[str | None, list[str]] = {}
    for phase in sorted(seconds, key=lambda phase: (-seconds[phase], phase)):
        parent = parents.get(phase)
        children.setdefault(parent if parent in seconds else None, []).append(phase)
    order: list[tuple[str, int]] = []

    def walk(parent: str | None, depth: int) -> None:
        for phase in children.get(parent, ()):
            order.append((phase, depth))
            walk(phase, depth + 1)

    walk(None, 0)
    return order


def performance(sources: Sources, begin: float, end: float, *, service: str, counted: float) -> dict[str, Any]:
    """Where the run's time went between ``begin`` and ``end``, from the collector's phase durations
    (``rl_phase_duration_seconds``, every rank's phase spans merged) read at ``counted`` (once all of them arrived:
    :func:`wait_for_spans`).

    Per phase (in :func:`nested_order`): its spans, seconds, ``parent`` (the phase it is nested in, from the steps'
    traces: :func:`phase_parents`; None for a top-level phase, and for every phase without Jaeger), ``share`` (of its
    parent's time when nested, else of the ranks' time: the top-level shares add up to at most 1), mean and p99; the
    slowest phase (longest mean span); tokens, tokens per second and MFU over the run; and, from Jaeger, the slowest
    step (its root span ``rl.step``) and its trace id."""
    prometheus = sources.prometheus
    sel = sources.selector()

    phase, durations = contract.label(contract.PHASE), contract.series(contract.PHASE_DURATION)

    def by_phase(expr: str) -> dict[str, float]:
        return {item["metric"][phase]: float(item["value"][1]) for item in prometheus.query(expr, counted)}

    seconds = by_phase(f"sum by ({phase}) ({durations.sum}{{{sel}}})")
    spans = by_phase(f"sum by ({phase}) ({durations.count}{{{sel}}})")
    p99 = by_phase(f"histogram_quantile(0.99, sum by ({phase}, le) ({durations.bucket}{{{sel}}}))")
    ranks = prometheus.value(f"max({contract.series(contract.RANKS_EXPECTED).name}{{{sel}}})", end) or 1.0
    wall = max(end - begin, 1e-9)
    traces = step_traces(sources, begin, end, service=service)
    parents = phase_parents(traces)
    split: dict[str, dict[str, Any]] = {}
    for phase, _ in nested_order(seconds, parents):
        total, parent = seconds[phase], parents.get(phase) if parents.get(phase) in seconds else None
        split[phase] = {
            "spans": spans.get(phase),
            "seconds": total,
            "parent": parent,
            "share": total / (seconds[parent] or 1e-9) if parent else total / (ranks * wall),
            "mean": total / spans[phase] if spans.get(phase) else None,
            "p99": p99.get(phase),
        }
    slowest = max(split, key=lambda phase: split[phase]["mean"] or 0.0) if split else None
    # Read at `counted` too: a rank counts a step's tokens after its rewards, so they may arrive a flush after `end`.
    trained = prometheus.value(promql.increase(contract.series(contract.TOKENS_TRAINED), sel, window=None), counted)
    # The largest over the run: ranks that shut down before `counted` are missing from the last flushes' sums.
    run = f"{max(1, math.ceil(counted - begin))}s"
    peak = f"max(max_over_time({contract.series(contract.FLOPS_PEAK).name}{{{sel}}}[{run}]))"
    per_token = f"max(max_over_time({contract.series(contract.FLOPS_PER_TOKEN).name}{{{sel}}}[{run}]))"
    flops = prometheus.value(f"{per_token} / {peak}", counted)
    tokens_per_s = None if trained is None else trained / wall
    return {
        "split": split,
        "nesting_known": bool(traces),
        "slowest_phase": slowest,
        "tokens": {
            "generated": prometheus.value(
                promql.increase(contract.series(contract.TOKENS_GENERATED), sel, window=None), counted
            ),
            "trained": trained,
            "trained_per_s": tokens_per_s,
            "mfu": None if tokens_per_s is None or flops is None else tokens_per_s * flops,
        },
        "slowest_step": slowest_step(traces),
    }


def summary_between(sources: Sources, begin: float, end: float, *, service: str, counted: float) -> dict[str, Any]:
    """The run's summary between ``begin`` (its first point) and ``end`` (its last): reward over the whole run,
    early (the first quarter) and late (the last quarter), and per reward function; staleness p50, p99, min and max;
    rollout health; where the time went (phase sums read at ``counted``: :func:`performance`); the top and bottom
    samples; the alerts raised for it up to now (:func:`alerts`)."""
    quarter = max((end - begin) / 4, 1.0)
    since = begin - 60  # the extremes gauges of the run's first points, with a margin
    sel = sources.selector()
    prometheus = sources.prometheus
    staleness = contract.series(contract.STALENESS.histogram)
    minimum, maximum = promql.extremes(contract.STALENESS, sel, window=_duration(end - since))
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
            "count": prometheus.value(promql.count(staleness, sel, window=None), end),
            "sum": prometheus.value(promql.histogram_sum(staleness, sel, window=None), end),
            **quantiles(sources, contract.STALENESS, sel, (0.5, 0.99), start=None, end=end, since=since, integers=True),
            "min": prometheus.value(minimum, end),
            "max": prometheus.value(maximum, end),
        },
        "health": health(sources, end, since=since),
        "performance": performance(sources, begin, end, service=service, counted=counted),
        "cost": cost(sources, end),
        "samples": {"top": samples(sources, "top", 3), "bottom": samples(sources, "bottom", 3)},
        "alerts": alerts(sources, begin, time.time()),
    }


_EVALUATION_S = 15
"""The rules' evaluation interval in the stack (prometheus/prometheus.yml): the margin before ``begin``."""


def alerts(sources: Sources, begin: float, until: float) -> list[dict[str, Any]]:
    """Every alert the rules raised for the run from ``begin`` to ``until`` (a run's windows still hold its last
    steps for a while after it ends), from the samples of the ``ALERTS`` series (one per evaluation): its name, its
    labels (signal, the reward function ...; ``window``: the window of its last evaluation, one alert whichever
    window judged it), the farthest it got (``firing``, else ``pending``), the run's step when it went pending and
    when it fired, and the value its rule measured at the last evaluation it was active (its summary annotation too
    where it still is). Firing ones first, then by when they began; ``value`` None
    where Prometheus no longer has the rule."""
    prometheus = sources.prometheus
    span = f"{math.ceil(until - begin) + _EVALUATION_S}s"
    history = prometheus.query(
        f"{promql.selector(foreign.ALERTS, **{contract.label(contract.RUN_ID): sources.run_id})}[{span}]", until
    )
    found: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for item in history:
        times = [float(t) for t, _ in item["values"]]
        if not times:
            continue
        labels = {k: v for k, v in item["metric"].items() if k not in ("__name__", "alertstate", "alertname")}
        entry = found.setdefault(
            _identity(item["metric"]),
            {"name": item["metric"].get("alertname", ""), "state": "pending", "fired_s": None, "last_s": -math.inf},
        )
        entry["since_s"] = min(entry.get("since_s", math.inf), *times)
        if max(times) > entry["last_s"]:
            entry["labels"], entry["last_s"] = labels, max(times)
        if item["metric"].get("alertstate") == "firing":
            entry["state"] = "firing"
            entry["fired_s"] = min(times) if entry["fired_s"] is None else min(entry["fired_s"], *times)
    active = {_identity(alert["labels"]): alert for alert in _active(prometheus)}
    alert_rules = _alert_rules(prometheus)
    run = sources.selector(**{contract.label(contract.RANK): ""})
    for key, entry in found.items():
        for moment in ("since", "fired"):
            at = entry[f"{moment}_s"]
            entry[f"{moment}_step"] = (
                None if at is None else prometheus.value(f"max({contract.series(contract.STEP).name}{{{run}}})", at)
            )
        now = active.get(key)
        entry["summary"] = (now or {}).get("annotations", {}).get("summary")
        entry["value"] = float(now["value"]) if now else _value_then(prometheus, alert_rules, entry)
    return sorted(found.values(), key=lambda entry: (entry["state"] != "firing", entry["since_s"]))


def _identity(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """An alert's identity: its labels, without the series name and the state of ``ALERTS`` and the window it was
    judged over (one alert moves between its windows' rules as the run's pace changes, and when the run ends)."""
    return tuple(sorted((k, v) for k, v in labels.items() if k not in ("__name__", "alertstate", rules.WINDOW_LABEL)))


def _active(prometheus: Prometheus) -> list[dict[str, Any]]:
    try:
        return prometheus.alerts()
    except QueryError:
        return []


def _alert_rules(prometheus: Prometheus) -> list[dict[str, Any]]:
    try:
        return prometheus.alert_rules()
    except QueryError:
        return []


def _value_then(prometheus: Prometheus, rules: list[dict[str, Any]], entry: dict[str, Any]) -> float | None:
    """What the alert's rule measured at the last evaluation the alert was active: the query of its rule (the one of
    that name whose labels it carries: one rule per window) at that time, the series with the alert's labels."""
    for rule in rules:
        if rule["name"] != entry["name"] or any(entry["labels"].get(k) != v for k, v in rule["labels"].items()):
            continue
        for item in prometheus.query(rule["query"], entry["last_s"]):
            if all(entry["labels"].get(k) == v for k, v in item["metric"].items()):
                return float(item["value"][1])
    return None


def cost(sources: Sources, at: float) -> dict[str, float | None]:
    """What the run cost up to ``at``: its GPU-hours, and at its stated price per GPU-hour the total and the cost per
    step, per million trained tokens and per solved prompt group (None without a price)."""
    sel = sources.selector(**{contract.label(contract.RANK): ""})
    value = sources.prometheus.value
    return {
        "gpu_hours": value(promql.gpu_hours(sel), at),
        "total": value(promql.cost(sel), at),
        "per_step": value(promql.cost_per(sel, "step"), at),
        "per_million_tokens": value(promql.cost_per(sel, "million_tokens"), at),
        "per_solved_group": value(promql.cost_per(sel, "solved_group"), at),
    }


def summarize(
    sources: Sources, *, expected_count: int | None, expected_spans: int | None, service: str
) -> dict[str, Any]:
    """The summary of a run that just finished (:func:`summary_between`), once its rewards and phase spans all
    arrived (``expected_count`` rewards and ``expected_spans`` phase spans, or counts that stopped changing)."""
    begin, end = reporting_span(sources, wait_until_settled(sources, expected_count=expected_count), 3600)
    counted = wait_for_spans(sources, expected_spans=expected_spans)
    return summary_between(sources, begin, end, service=service, counted=counted)


def number(value: Any, digits: int = 3) -> str:
    """A number for people: integers as integers, others with ``digits`` significant digits (one decimal from
    ``10**digits`` up), None as ``-``.

    >>> number(0.3333333333333333), number(12.0), number(1234.5678), number(None), number(2.5e-7)
    ('0.333', '12', '1234.6', '-', '2.5e-07')
    """
    if value is None:
        return "-"
    value = float(value)
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return f"{value:.1f}" if abs(value) >= 10**digits else f"{value:.{digits}g}"


_RANKS_TIME = "the ranks' time"


def _percent(value: Any) -> str:
    return "-" if value is None else f"{float(value) * 100:.3g}%"


def _sample(sample: dict[str, Any], limit: int = 60) -> str:
    text = f"{sample.get('prompt', '')} → {VictoriaLogs.message(sample) or ''}"
    text = " ".join(text.split())
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return f"reward {number(sample.get('rl.reward'))} at step {sample.get('rl.step', '-')}: {text}"


def summary_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The summary as (what, value) rows for a table a person reads first: reward early and late, staleness, phase
    shares (nested phases indented, as shares of their parent), tokens per second, MFU, the slowest step's trace,
    the cost, the alerts raised, the top and bottom samples.

    >>> rows = summary_rows({"reward": {}, "staleness": {"p99": 3.0, "max": 4.0}, "performance": {"split": {
    ...     "train": {"parent": None, "share": 0.5, "mean": 0.1, "p99": 0.2},
    ...     "allreduce": {"parent": "train", "share": 0.25, "mean": 0.01, "p99": 0.02}}, "nesting_known": True}})
    >>> for row in rows[1:3]: print(row)
    ('phase train', "50% of the ranks' time (mean 0.1 s, p99 0.2 s)")
    ('  phase allreduce (in train)', '25% of train (mean 0.01 s, p99 0.02 s)')
    """
    rows: list[tuple[str, str]] = []
    reward = summary.get("reward") or {}
    for name, label in (("early", "first quarter"), ("late", "last quarter"), ("overall", "whole run")):
        stats = reward.get(name)
        if stats:
            rows.append(
                (
                    f"reward, {label}",
                    f"mean {number(stats['mean'])}, p50 {number(stats['p50'])}, p90 {number(stats['p90'])} "
                    f"({number(stats['count'])} rollouts)",
                )
            )
    staleness = summary.get("staleness") or {}
    rows.append(
        ("staleness (versions behind)", f"p99 {number(staleness.get('p99'))}, max {number(staleness.get('max'))}")
    )
    performance = summary.get("performance") or {}
    split = performance.get("split") or {}
    depth: dict[str, int] = {}
    for phase, stats in split.items():
        parent = stats["parent"]
        depth[phase] = depth.get(parent, -1) + 1 if parent else 0
        label = "  " * depth[phase] + f"phase {phase}" + (f" (in {parent})" if parent else "")
        timing = f"(mean {number(stats['mean'])} s, p99 {number(stats['p99'])} s)"
        rows.append((label, f"{_percent(stats['share'])} of {parent or _RANKS_TIME} {timing}"))
    if split and not performance.get("nesting_known"):
        rows.append(("phase nesting", "unknown without Jaeger: a nested phase's share also counts in its parent's"))
    tokens = performance.get("tokens")
    if tokens:
        rows.append(("tokens trained per second", number(tokens["trained_per_s"])))
        rows.append(("MFU (of peak FLOP/s)", _percent(tokens["mfu"])))
    if "slowest_step" in performance:
        step = performance["slowest_step"]
        rows.append(
            (
                "slowest step",
                f"step {step['step']}: {step['seconds']:.3f} s, trace {step['trace_id']}" if step else "- (no Jaeger)",
            )
        )
    spent = summary.get("cost") or {}
    if spent.get("total") is not None:
        rows.append(
            (
                "cost",
                f"{number(spent['total'])} ({number(spent['gpu_hours'])} GPU-hours): "
                f"per step {number(spent['per_step'])}, per M tokens {number(spent['per_million_tokens'])}, "
                f"per solved group {number(spent['per_solved_group'])}",
            )
        )
    for alert in summary.get("alerts") or []:
        where = ", ".join(f"{k} {v}" for k, v in alert["labels"].items() if k in ("signal", "rl_reward_fn"))
        rows.append(
            (
                f"alert {alert['name']}" + (f" ({where})" if where else ""),
                f"{alert['state']} from step {number(alert['since_step'])}, value {number(alert['value'])}"
                + (f": {alert['summary']}" if alert["summary"] else ""),
            )
        )
    samples_ = summary.get("samples") or {}
    for selection, label in (("top", "best sample"), ("bottom", "worst sample")):
        found = samples_.get(selection) or []
        rows.append((label, _sample(found[0]) if found else "-"))
    return rows
