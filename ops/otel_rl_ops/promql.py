"""The queries otel-rl builds, in one place: PromQL over the contract's series, and the LogsQL filters of samples.

The dashboards (``grafana/``), the demo's read-back, ``otel-rl report`` and the tests build their queries from these
helpers, so a histogram is read the same way everywhere: the native histogram first, the classic ``_bucket`` and
``_count`` series of ``TelemetryConfig(histogram="explicit")`` as the fallback in the same expression
(``<native> or <classic>``), means from the exact positive/negative counters, every quantile clamped to the exact
merged extremes of its window. See docs/dashboards.md.

Label values are never pasted into a query: :func:`quote` writes them as string literals, so a run id holding a
quote, a backslash, a brace or a newline selects that run and no other.

Counters and histograms are read over a ``window``: a PromQL duration (``"$__rate_interval"``, ``"10m"``), as a
rate or an increase over that range; or ``None``, their cumulative values (everything since the series began), for
exact read-backs that subtract two instants. Ratios of counters (means, shares, fractions, the effective sample size)
divide exact increases (:func:`exact_increase`: each series' value now minus its value a window ago), never
``rate()``s or ``increase()``s: those extrapolate each series on its own, so the parts of one ratio are scaled
differently and the ratio leaves its bounds (an ESS fraction above 1, shares not adding up to 1).

A ``selector`` is the label matchers without braces, e.g. ``rl_run_id="r1",rl_rank=""`` (see :func:`matchers`);
``by`` names the labels an aggregation keeps (``""``: none). Series and labels are the contract's
(:mod:`otel_rl_contract`): a builder takes a metric's :class:`~otel_rl_contract.Series` (``contract.series(metric)``,
a recording rule's or a foreign one) or a whole :class:`~otel_rl_contract.Distribution`, never a typed name.
"""

from __future__ import annotations

from typing import Literal

import otel_rl_contract as contract
from otel_rl_contract import Distribution, Series

MatchOp = Literal["=", "!=", "=~", "!~"]

_METRIC_KEY = contract.label(contract.METRIC_KEY)
_JOINT_X = contract.label(contract.JOINT_X)
_PHASE = contract.label(contract.PHASE)

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(value: str) -> str:
    """``value`` as a double-quoted string literal of PromQL and of LogsQL.

    Both languages decode such a literal as Go does (PromQL: "the same escaping rules as Go"; LogsQL: "decoded
    according to the Go spec", ``strconv.Unquote`` in VictoriaLogs' lexer), so one rule serves both: backslash and
    double quote escaped, newline, carriage return and tab as ``\\n``, ``\\r``, ``\\t``, every other non-printable
    character as ``\\x``, ``\\u`` or ``\\U`` with its code point, printable text (unicode included) as it is.
    Grafana variables stay variables: ``quote("$run")`` is ``"$run"``.

    >>> print(quote('a"b\\\\c\\nd'), quote("ü$run"), quote("\\x00"))
    "a\\"b\\\\c\\nd" "ü$run" "\\x00"

    Raises:
        ValueError: when ``value`` holds a lone surrogate (not text: neither language can carry it).
    """
    out = ['"']
    for char in value:
        code = ord(char)
        if 0xD800 <= code <= 0xDFFF:
            raise ValueError(f"a label value must be text without lone surrogates, got {value!r}")
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif char.isprintable() or char == " ":
            out.append(char)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def match(label: str, value: str, op: MatchOp = "=") -> str:
    """One label matcher, the value quoted.

    >>> match("rl_dataset", "", "!=")
    'rl_dataset!=""'
    """
    return f"{label}{op}{quote(value)}"


def matchers(**labels: str) -> str:
    """Equality matchers of ``labels``, in order, the values quoted: a ``selector``.

    >>> matchers(rl_run_id='say "hi"', rl_rank="")
    'rl_run_id="say \\\\"hi\\\\"",rl_rank=""'
    """
    return ",".join(match(label, value) for label, value in labels.items())


def selector(series: Series | None = None, /, **labels: str) -> str:
    """A series selector, ``name{...}`` (``{...}`` without a series).

    >>> selector(contract.series(contract.STEP), rl_run_id="r1")
    'rl_step{rl_run_id="r1"}'
    """
    return f"{'' if series is None else series.name}{{{matchers(**labels)}}}"


def _group(by: str, *extra: str) -> str:
    """``by (...)`` of an aggregation (empty when nothing is grouped)."""
    labels = ", ".join(label for label in (by, *extra) if label)
    return f" by ({labels})" if labels else ""


def _sum(by: str, inner: str) -> str:
    """``sum(inner)``, or ``sum by (by) (inner)``."""
    return f"sum by ({by}) ({inner})" if by else f"sum({inner})"


def _over(function: str, series: str, window: str | None) -> str:
    """``function(series[window])``, or ``series`` itself (its cumulative value) when ``window`` is None."""
    return series if window is None else f"{function}({series}[{window}])"


def rate(counter: Series, selector: str, *, by: str = "", window: str) -> str:
    """Per-second rate of ``counter`` over ``window``, summed by ``by``.

    >>> rate(contract.series(contract.SAMPLES_EXPORTED), 'rl_run_id="r1"', window="1m")
    'sum(rate(otel_rl_samples_exported_total{rl_run_id="r1"}[1m]))'
    """
    return _sum(by, _over("rate", f"{counter.name}{{{selector}}}", window))


def increase(counter: Series, selector: str, *, by: str = "", window: str | None) -> str:
    """Increase of ``counter`` over ``window`` (its cumulative value when None), summed by ``by``.

    >>> increase(contract.series(contract.GROUPS), 'rl_run_id="r1"', by="rl_group_outcome", window=None)
    'sum by (rl_group_outcome) (rl_groups_total{rl_run_id="r1"})'
    """
    return _sum(by, _over("increase", f"{counter.name}{{{selector}}}", window))


def _since(series: str, window: str | None, function: str = "") -> str:
    """Each series' exact increase over ``window`` (its cumulative value when None), ``function`` (e.g.
    ``histogram_count``) applied to the series first: its value now minus its value ``window`` ago, both the last
    points at or before those instants; its whole value where it has no point a window ago (it began inside the
    window, from 0: the collector counts a rank's first point whole) or where it went down (a reset: what it counted
    since). No extrapolation, so the counters of one ratio cover the same flushes, hence the same recorded values.

    >>> print(_since("c{S}", "5m"))
    (c{S} - c{S} offset 5m >= 0 or c{S})
    """
    now = f"{function}({series})" if function else series
    if window is None:
        return now
    before = f"{function}({series} offset {window})" if function else f"{series} offset {window}"
    return f"({now} - {before} >= 0 or {now})"


def _nonzero(denominator: str, window: str | None) -> str:
    """``denominator`` where it is above 0 over a ``window``, so that a window without values gives no ratio (a gap)
    rather than NaN; unchanged for cumulative read-backs (None)."""
    return denominator if window is None else f"({denominator} > 0)"


def exact_increase(counter: Series, selector: str, *, by: str = "", window: str | None) -> str:
    """Exact increase of ``counter`` over ``window`` (its cumulative value when None), summed by ``by``: the sum of
    its series' :func:`_since`. The parts of a ratio of counters.

    >>> print(exact_increase(contract.series(contract.GROUPS), "S", by="rl_group_outcome", window="1m"))
    sum by (rl_group_outcome) ((rl_groups_total{S} - rl_groups_total{S} offset 1m >= 0 or rl_groups_total{S}))
    """
    return _sum(by, _since(f"{counter.name}{{{selector}}}", window))


def count(histogram: Series, selector: str, *, by: str = "", window: str | None) -> str:
    """Values recorded into ``histogram`` over ``window`` (an exact increase; cumulative when None), from the
    native histogram's count, else the classic ``_count``."""
    group = _group(by)
    native = _since(f"{histogram.name}{{{selector}}}", window, "histogram_count")
    classic = _since(f"{histogram.count}{{{selector}}}", window)
    return f"(sum{group} ({native}) or sum{group} ({classic}))"


def signed_sum(distribution: Distribution, selector: str, *, by: str = "", window: str | None) -> str:
    """Sum of the values of ``distribution`` over ``window`` (an exact increase; cumulative when None) from its exact
    positive and negative counters: a histogram's own sum decreases with negative values, which ``rate()`` reads as
    a counter reset."""
    group = _group(by)
    positive, negative = (
        _since(f"{contract.series(part).name}{{{selector}}}", window) for part in distribution.sums[:2]
    )
    return f"(sum{group} ({positive}) - sum{group} ({negative}))"


def mean(distribution: Distribution, selector: str, *, by: str = "", window: str | None) -> str:
    """Mean of the values recorded into ``distribution`` over ``window`` (since the beginning when None): the exact
    signed sum over the count of the same window, so exact for negative values too, and within the extremes of the
    values recorded. No value for a window without values.

    >>> print(mean(contract.REWARDS, "S", window=None))
    (sum (rl_reward_positive_total{S}) - sum (rl_reward_negative_total{S})) / (sum (histogram_count(rl_reward{S})) or sum (rl_reward_count{S}))
    """
    values = _nonzero(count(contract.series(distribution.histogram), selector, by=by, window=window), window)
    return f"{signed_sum(distribution, selector, by=by, window=window)} / {values}"


def buckets(histogram: Series, selector: str, *, by: str = "", window: str | None) -> tuple[str, str]:
    """The native histogram and the classic buckets (by ``le``) of ``histogram``, summed by ``by``: rates over
    ``window``, or the cumulative histograms when None. The inputs of :func:`quantile_estimate`."""
    native = f"sum{_group(by)} ({_over('rate', f'{histogram.name}{{{selector}}}', window)})"
    classic = f"sum{_group(by, 'le')} ({_over('rate', f'{histogram.bucket}{{{selector}}}', window)})"
    return native, classic


def quantile_estimate(q: float, native: str, classic: str, *, integers: bool = False) -> str:
    """The ``q`` quantile of the native histogram ``native``, else of the classic buckets ``classic``.

    ``integers``: the metric only takes integer values (staleness, lengths), so the estimate is rounded: a quantile
    interpolated inside a bucket is otherwise a value nothing had (staleness p50 0.987). Exact while a bucket is
    narrower than 1/2 (values up to 22 at scale 5), within one bucket above."""
    estimate = f"(histogram_quantile({q}, {native}) or histogram_quantile({q}, {classic}))"
    return f"round{estimate}" if integers else estimate


def extremes(distribution: Distribution, selector: str, *, by: str = "", window: str) -> tuple[str, str]:
    """The exact merged minimum and maximum of ``distribution`` over ``window``, from its min and max gauges."""
    minimum, maximum = contract.series(distribution.minimum), contract.series(distribution.maximum)
    low = f"min{_group(by)} (min_over_time({minimum.name}{{{selector}}}[{window}]))"
    high = f"max{_group(by)} (max_over_time({maximum.name}{{{selector}}}[{window}]))"
    return low, high


def clamp_to_extremes(estimate: str, low: str, high: str, *, on: str = "") -> str:
    """``estimate`` clamped elementwise to ``[low, high]``, matching series on the labels ``on``.

    Three branches joined by ``or``: the estimate where ``low <= estimate <= high``, ``high`` where the estimate is
    above it, ``low`` where it is below. A histogram quantile interpolates inside a bucket, so it can lie outside
    the values actually recorded (a bucket of scale 5 spans 2.2 %, a classic one may span 8 versions); the exact
    merged extremes bound it. A NaN estimate (nothing recorded in the window) matches no branch and drops out
    rather than becoming a bound; so does an estimate without bounds (the ranks export the extremes gauges
    whenever they recorded values, so a window with an estimate has them).

    >>> clamp_to_extremes("q", "lo", "hi", on="job")
    '((q <= on (job) hi) >= on (job) lo) or on (job) (hi < on (job) q) or on (job) (lo > on (job) q)'
    """
    on_labels = f"on ({on})"
    return (
        f"(({estimate} <= {on_labels} {high}) >= {on_labels} {low})"
        f" or {on_labels} ({high} < {on_labels} {estimate})"
        f" or {on_labels} ({low} > {on_labels} {estimate})"
    )


def quantile(
    q: float, distribution: Distribution, selector: str, *, by: str = "", window: str, integers: bool = False
) -> str:
    """The ``q`` quantile of ``distribution`` over ``window`` (:func:`quantile_estimate` of the window's rates),
    clamped to the exact merged min and max of the same window."""
    histogram = contract.series(distribution.histogram)
    estimate = quantile_estimate(q, *buckets(histogram, selector, by=by, window=window), integers=integers)
    return clamp_to_extremes(estimate, *extremes(distribution, selector, by=by, window=window), on=by)


def last_report(selector: str, *, lookback: str, by: str = "") -> str:
    """When the run of ``selector`` last reported (each of the runs, with ``by="rl_run_id"``), in unix seconds: the
    newest point of its ``rl_ranks_up`` (every flush of every rank has one) within ``lookback``. Now if it still
    reports; else found at 1-minute steps, each of which sees the newest point of the 5 minutes before it
    (Prometheus's lookback delta), so the run's last one.

    >>> print(last_report("S", lookback="15d", by="rl_run_id"))
    max by (rl_run_id) (timestamp(rl_ranks_up{S})) or max by (rl_run_id) (max_over_time(timestamp(rl_ranks_up{S})[15d:1m]))
    """
    import otel_rl_contract as contract

    points = f"timestamp({contract.series(contract.RANKS_UP).name}{{{selector}}})"
    group = _group(by)
    return f"max{group} ({points}) or max{group} (max_over_time({points}[{lookback}:1m]))"


def reported(selector: str, key: str = "") -> str:
    """The values a trainer reduced itself and sent as gauges (``rl_reported``: NeMo Lens's batch means), as they are,
    under the canonical ``key`` (every key when empty): a mean stays a mean, never a distribution.

    >>> print(reported('rl_run_id="r"', "reward/mean"))
    max by (rl_metric_key) (rl_reported{rl_run_id="r",rl_metric_key="reward/mean"})
    """
    matched = f"{selector},{match(_METRIC_KEY, key)}" if key else selector
    return f"max by ({_METRIC_KEY}) ({contract.series(contract.REPORTED).name}{{{matched}}})"


def share(counter: Series, label: str, selector: str, *, window: str | None) -> str:
    """Each ``label`` value's share of ``counter`` over ``window``: its exact increase over the total's
    (``on () group_left ()``: one total for every value), so the shares are in [0, 1] and add up to 1. No value, a
    gap, where nothing was counted."""
    total = _nonzero(exact_increase(counter, selector, window=window), window)
    return f"{exact_increase(counter, selector, by=label, window=window)} / on () group_left () {total}"


def fraction(part: Series, whole: Series, selector: str, *, window: str | None) -> str:
    """Counter ``part``'s exact increase over counter ``whole``'s over ``window`` (``part`` counts a subset of
    ``whole``, so the fraction is in [0, 1]). No value where ``whole`` counted nothing.

    >>> zero_variance, groups = contract.series(contract.GROUPS_ZERO_VARIANCE), contract.series(contract.GROUPS)
    >>> print(fraction(zero_variance, groups, "S", window=None))
    sum(rl_groups_zero_variance_total{S}) / sum(rl_groups_total{S})
    """
    whole_increase = _nonzero(exact_increase(whole, selector, window=window), window)
    return f"{exact_increase(part, selector, window=window)} / {whole_increase}"


def effective_sample_size(ratios: Distribution, selector: str, *, window: str | None) -> str:
    """Effective sample size fraction of the importance ratios ``r`` recorded over ``window``,
    ``(Σr)^2 / (n Σr^2)``: 1 when every ratio is equal, ``1/n`` when one token carries all the weight. Kish's
    formula from the exact counters (Σr from the positive sum, the ratios being positive; Σr² from the squares) and
    the histogram's count, all three exact increases over the same flushes, so it is in (0, 1] (Cauchy-Schwarz). No
    value for a window without ratios."""
    positive, _, squared = (contract.series(part).name for part in ratios.sums)
    sums = f"sum({_since(f'{positive}{{{selector}}}', window)})"
    squares = f"sum({_since(f'{squared}{{{selector}}}', window)})"
    values = _nonzero(count(contract.series(ratios.histogram), selector, window=window), window)
    return f"{sums} ^ 2 / ({values} * {squares})"


def histogram_sum(histogram: Series, selector: str, *, by: str = "", window: str | None) -> str:
    """Sum of the values of a histogram of values >= 0 (lengths, versions: its sum is monotone) over ``window`` (an
    exact increase; cumulative when None): the native histogram's sum, else the classic ``_sum``."""
    group = _group(by)
    native = _since(f"{histogram.name}{{{selector}}}", window, "histogram_sum")
    classic = _since(f"{histogram.sum}{{{selector}}}", window)
    return f"(sum{group} ({native}) or sum{group} ({classic}))"


def histogram_mean(histogram: Series, selector: str, *, by: str = "", window: str | None) -> str:
    """Mean of a histogram of values >= 0 over ``window``: :func:`histogram_sum` over the count of the same window.
    No value for a window without values."""
    values = _nonzero(count(histogram, selector, by=by, window=window), window)
    return f"{histogram_sum(histogram, selector, by=by, window=window)} / {values}"


def _joint(selector: str, moment: str, window: str | None) -> str:
    """The exact increase of one ``rl_joint_total`` sum per ``rl_joint_x``; a signed one (``x``, ``y``, ``xy``) as its
    positive part minus its negative part."""
    if moment in ("x", "y", "xy"):
        return f"({_joint(selector, f'{moment}.positive', window)} - {_joint(selector, f'{moment}.negative', window)})"
    moments = f"{selector},{match(contract.label(contract.JOINT_MOMENT), moment)}"
    return exact_increase(contract.series(contract.JOINT), moments, by=_JOINT_X, window=window)


def _comoments(selector: str, window: str | None) -> tuple[str, str, str]:
    """``n Σxy - Σx Σy``, ``n Σx² - (Σx)²`` and ``n Σy² - (Σy)²`` per ``rl_joint_x``: n² times the covariance and
    the two variances of the window's paired rollouts."""
    n, x, y = (_joint(selector, m, window) for m in ("n", "x", "y"))
    covariance = f"({n} * {_joint(selector, 'xy', window)} - {x} * {y})"
    variance_x = f"({n} * {_joint(selector, 'xx', window)} - {x} ^ 2)"
    variance_y = f"({n} * {_joint(selector, 'yy', window)} - {y} ^ 2)"
    return covariance, variance_x, variance_y


def correlation(selector: str, *, window: str | None) -> str:
    """Pearson correlation of each ``rl_joint_x`` (``response_length``, ``reward.<fn>``) with the total reward over
    the rollouts of ``window`` that have both (``record_rollouts``), from the exact ``rl_joint_total`` sums: in
    [-1, 1]; no value where either is constant."""
    covariance, variance_x, variance_y = _comoments(selector, window)
    return f"clamp({covariance} / (sqrt({variance_x} * {variance_y}) > 0), -1, 1)"


def variance_share(selector: str, *, window: str | None) -> str:
    """Each reward function's share of the total reward's variance over ``window``, ``Cov(f, total) / Var(total)``
    per ``rl_joint_x`` ``reward.<fn>``: the shares of functions that add up to the total sum to 1. No value where the
    total is constant."""
    covariance, _, variance_y = _comoments(f"{selector},{match(_JOINT_X, 'reward[.].+', '=~')}", window)
    return f"{covariance} / ({variance_y} > 0)"


def gpu_hours(selector: str, *, by: str = "") -> str:
    """GPU-hours the run's ranks have held so far (``rl_gpu_seconds_total``: each rank's GPUs times its lifetime)."""
    return f"{_sum(by, f'{contract.series(contract.GPU_SECONDS).name}{{{selector}}}')} / 3600"


def cost(selector: str, *, by: str = "") -> str:
    """The run's cost so far: its GPU-hours times the price per GPU-hour it states (``gpu_hour_price``), per ``by``
    (e.g. each run of a comparison). No value for a run that states no price."""
    price = f"{contract.series(contract.GPU_HOUR_PRICE).name}{{{selector}}}"
    return f"{gpu_hours(selector, by=by)} * " + (f"max by ({by}) ({price})" if by else f"max({price})")


def cost_per(selector: str, unit: Literal["step", "million_tokens", "solved_group"]) -> str:
    """The run's cost so far per step completed (declaring step k with ``step()`` completes steps 0 to k - 1), per
    million trained tokens, or per prompt group solved by some or all of its rollouts (``record_rollouts``). No value
    before the first of them."""
    solved = match(contract.label(contract.GROUP_OUTCOME), "some|all", "=~")
    amount = {
        "step": f"max({contract.series(contract.STEP).name}{{{selector}}})",
        "million_tokens": f"(sum({contract.series(contract.TOKENS_TRAINED).name}{{{selector}}}) / 1e6)",
        "solved_group": f"sum({contract.series(contract.GROUPS).name}{{{selector},{solved}}})",
    }[unit]
    return f"{cost(selector)} / ({amount} > 0)"


def distribution(values: Distribution, selector: str, *, window: str) -> str:
    """A heatmap query: values recorded per bucket over ``window``.

    The native histogram (Grafana's Prometheus datasource turns it into a ``heatmap-cells`` frame, bucket bounds
    included), else the classic ``_bucket`` series (``format: heatmap`` de-accumulates them). ``unless on ()``
    keeps the two from mixing in one answer. For an exemplar carrier (``contract.EXEMPLAR_CARRIERS``),
    ``0 * ...exemplars_bucket`` adds no series (its label sets are the classic ones, which ``or`` already holds),
    but it names the collector's exemplar carrier in the query, so Grafana's exemplar request returns its exemplars:
    the latest kept samples of every flush (see docs/pipeline.md). An exemplar links to its sample in VictoriaLogs by
    ``rl.episode.id`` and ``trace_id``.
    """
    histogram = contract.series(values.histogram)
    native = _sum("", _over("increase", f"{histogram.name}{{{selector}}}", window))
    classic = _sum("le", _over("increase", f"{histogram.bucket}{{{selector}}}", window))
    if values in contract.EXEMPLAR_CARRIERS:
        carrier = contract.exemplar_series(values.histogram).bucket
        classic = f"({classic} or 0 * {_sum('le', _over('increase', f'{carrier}{{{selector}}}', window))})"
    return f"{native} or ({classic} unless on () {native})"


def seconds_since_step_changed(selector: str) -> str:
    """Seconds since ``rl_step`` last changed, to 15 s: now minus the last 15-second mark at which it differed from
    15 s before (within 6 hours), else minus its first point in those 6 hours (a run still on its first step). The
    same measure as the rule ``rl:step_unchanged_seconds`` (RLTrainerStalled)."""
    step = f"{contract.series(contract.STEP).name}{{{selector}}}"
    changed = f"max_over_time(timestamp({step} != {step} offset 15s)[6h:15s])"
    first = f"min_over_time(timestamp({step})[6h:15s])"
    return f"time() - max({changed} or {first})"


def run_state(selector: str) -> str:
    """0 running, 1 finished cleanly (the last ``rl_run_finished`` within an hour is 1), 2 stopped without a clean
    finish (that last value is 0 and no ``rl_step`` arrived for 5 minutes)."""
    finished = f"max(last_over_time({contract.series(contract.RUN_FINISHED).name}{{{selector}}}[1h]))"
    present = f"max(present_over_time({contract.series(contract.STEP).name}{{{selector}}}[5m]))"
    return f"({finished} == 1) or ({finished} + 2 unless {present}) or {finished}"


# Where the time goes: phase durations (the ranks' own, merged), throughput, MFU ------------------------------------

_PHASE_DURATION = contract.series(contract.PHASE_DURATION)
"""The run's phase durations (classic buckets from 1 ms to 1 h; labels ``rl_phase_name`` and ``span_name``): each
rank's own, merged (docs/contract.md); other senders' phase spans through the collector's ``spanmetrics``."""

IDLE_PHASES = "wait_.*"
"""The phases that are idle time: ``wait_data`` (waiting for rollouts), ``wait_weights`` (for new weights), ...."""


def phase_share(selector: str, *, by: str = _PHASE, phases: str = "", window: str) -> str:
    """The share of the ranks' time spent in each phase over ``window``: rank-seconds of phase spans per second (the
    rate of the durations' sum) over the run's number of ranks. A nested phase's time is also its parent's, so the
    shares of nested phases add up to more than the time; those of the top-level phases to at most 1. ``phases``: a
    regular expression of the phases to show (all when empty).

    >>> print(phase_share('rl_run_id="r"', window="1m"))
    sum by (rl_phase_name) (rate(rl_phase_duration_seconds_sum{rl_run_id="r"}[1m])) / on () group_left () max(rl_ranks_expected{rl_run_id="r"})
    """
    spans = f"{selector},{match(_PHASE, phases, '=~')}" if phases else selector
    seconds = _sum(by, f"rate({_PHASE_DURATION.sum}{{{spans}}}[{window}])")
    return f"{seconds} / on () group_left () max({contract.series(contract.RANKS_EXPECTED).name}{{{selector}}})"


def idle_fraction(selector: str, *, window: str) -> str:
    """The share of the ranks' time spent waiting (the phases ``wait_*``, :data:`IDLE_PHASES`) over ``window``,
    per wait phase: buffer starvation (``wait_data``), the refit bubble (``wait_weights``)."""
    return phase_share(selector, phases=IDLE_PHASES, window=window)


def phase_quantile(q: float, selector: str, *, by: str = _PHASE, window: str) -> str:
    """The ``q`` quantile of the phase durations over ``window``, per ``by`` (interpolated in the classic buckets of
    ``rl.phase.duration``)."""
    rates = f"rate({_PHASE_DURATION.bucket}{{{selector}}}[{window}])"
    return f"histogram_quantile({q}, {_sum(f'{by}, le' if by else 'le', rates)})"


def phase_mean(selector: str, *, by: str = _PHASE, window: str) -> str:
    """The mean phase duration over ``window``, per ``by``: exact (the exact increases of the durations' sum and of
    their count, over the same flushes). No value for a window without spans."""
    sums = _sum(by, _since(f"{_PHASE_DURATION.sum}{{{selector}}}", window))
    counts = _sum(by, _since(f"{_PHASE_DURATION.count}{{{selector}}}", window))
    return f"{sums} / {_nonzero(counts, window)}"


def mfu(selector: str, *, window: str) -> str:
    """Model FLOPs utilization over ``window``: trained tokens per second times the FLOPs per token the run states,
    over the peak FLOP/s of its training ranks (``rl_flops_peak_per_second``, summed over them at the collector). No
    value unless the run sets ``flops_per_token`` and ``peak_flops``.

    >>> print(mfu('rl_run_id="r"', window="1m"))
    sum(rate(rl_tokens_trained_total{rl_run_id="r"}[1m])) * max(rl_flops_per_token{rl_run_id="r"}) / sum(rl_flops_peak_per_second{rl_run_id="r"})
    """
    peak = contract.series(contract.FLOPS_PEAK).name
    return (
        f"{rate(contract.series(contract.TOKENS_TRAINED), selector, window=window)}"
        f" * max({contract.series(contract.FLOPS_PER_TOKEN).name}{{{selector}}}) / sum({peak}{{{selector}}})"
    )


def either(metrics: tuple[Series, ...], selector: str, *, by: str = "instance") -> str:
    """The first of ``metrics`` each server has (``or``), summed by ``by``: one query over engines that name the same
    signal differently (vLLM, SGLang) or renamed it across versions.

    >>> waiting = (contract.foreign.VLLM_REQUESTS_WAITING, contract.foreign.SGLANG_QUEUE_REQUESTS)
    >>> print(either(waiting, 'rl_run_id="r"'))
    sum by (instance) (vllm:num_requests_waiting{rl_run_id="r"}) or sum by (instance) (sglang:num_queue_reqs{rl_run_id="r"})
    """
    return " or ".join(_sum(by, f"{metric.name}{{{selector}}}") for metric in metrics)


def either_rate(counters: tuple[Series, ...], selector: str, *, by: str = "instance", window: str) -> str:
    """Per-second rate over ``window`` of the first of ``counters`` each server has, summed by ``by``."""
    return " or ".join(rate(counter, selector, by=by, window=window) for counter in counters)


def either_quantile(
    q: float, histograms: tuple[Series, ...], selector: str, *, by: str = "instance", window: str
) -> str:
    """The ``q`` quantile over ``window`` of the first of the classic ``histograms`` each server has, per ``by``."""
    group = f"{by}, le" if by else "le"
    return " or ".join(
        f"histogram_quantile({q}, {_sum(group, f'rate({histogram.bucket}{{{selector}}}[{window}])')})"
        for histogram in histograms
    )


def merge_canary_misplaced(selector: str) -> str:
    """The fraction of the merge canary's counts (``otel_rl_merge_canary``, see ``otel_rl._state.canary``) outside the
    buckets the ranks record into: 0 when the collector merged the run's exponential histograms exactly, above 0
    when it moved counts to other buckets or downscaled. Each bucket is read a twentieth of a bucket wider on both
    sides (its neighbours are empty in an exact merge), so the boundaries' rounding cannot matter; a count moved
    into a neighbour still leaves at least 95% of itself outside. The rule ``otel_rl:merge_canary_misplaced:ratio``
    (``OtelRLInexactMerge``) is this expression.
    """
    width = 1 << contract.MERGE_CANARY_SCALE
    series = f"{contract.series(contract.MERGE_CANARY).name}{{{selector}}}"
    indices = sorted(index for pair in contract.MERGE_CANARY_BUCKETS for index in pair)
    parts = [
        f"histogram_fraction({2 ** ((i - 0.05) / width)!r}, {2 ** ((i + 1.05) / width)!r}, {series})" for i in indices
    ]
    return "1 - (" + " + ".join(parts) + ")"


# Comparing runs by step ---------------------------------------------------------------------------------------
# The comparison reads each run over windows whose two ends are points of the run (collector flushes): the report
# evaluates a query at the flush that first showed step s + k with a window reaching back exactly to the flush that
# first showed step s (docs/dashboards.md, "Comparing runs"). Every builder below is therefore exact over a window
# that starts at a point: increases subtract the point at the window's start (never rate()'s extrapolation), rates
# divide by the seconds between the two points, and a run that began inside the window counts from zero.

RUN_LABEL = contract.label(contract.RUN_ID)
"""The label every comparison query groups by: ``rl_run_id``."""
GROUP_LABEL = contract.label(contract.RUN_GROUP)
"""The label of a run's group: ``rl_run_group``."""
FIELD_LABEL = "field"
"""The label :func:`at_step` sets on its two halves: ``step`` and ``value``."""


def _since_histogram(series: str, window: str | None) -> str:
    """Each native histogram series' exact increase over ``window`` (:func:`_since` for histograms, whose comparison
    operators would drop them): the series now minus the series a window ago where its count did not go down, else
    the whole series.

    >>> print(_since_histogram("h{S}", "5m"))
    (h{S} - h{S} offset 5m and histogram_count(h{S}) - histogram_count(h{S} offset 5m) >= 0 or h{S})
    """
    if window is None:
        return series
    before = f"{series} offset {window}"
    return f"({series} - {before} and histogram_count({series}) - histogram_count({before}) >= 0 or {series})"


def increase_buckets(histogram: Series, selector: str, *, by: str = "", window: str | None) -> tuple[str, str]:
    """The native histogram and the classic buckets (by ``le``) of the values recorded into ``histogram`` over
    ``window``, summed by ``by``: exact increases, so one point in the window suffices (a run shorter than the window
    reads whole) and nothing is extrapolated (:func:`buckets` reads rates instead, which need two points and skip
    what the first one counted). The inputs of :func:`quantile_estimate`.

    >>> print(increase_buckets(contract.series(contract.REWARDS.histogram), "S", window="10m")[0])
    sum ((rl_reward{S} - rl_reward{S} offset 10m and histogram_count(rl_reward{S}) - histogram_count(rl_reward{S} offset 10m) >= 0 or rl_reward{S}))
    """
    native = f"sum{_group(by)} ({_since_histogram(f'{histogram.name}{{{selector}}}', window)})"
    classic = f"sum{_group(by, 'le')} ({_since(f'{histogram.bucket}{{{selector}}}', window)})"
    return native, classic


def increase_quantile(
    q: float, distribution: Distribution, selector: str, *, by: str = "", window: str, integers: bool = False
) -> str:
    """The ``q`` quantile of the values recorded into ``distribution`` over ``window`` (:func:`increase_buckets`),
    clamped to the exact merged min and max of the same window: :func:`quantile` over a window that begins at a
    point, or holds one."""
    histogram = contract.series(distribution.histogram)
    estimate = quantile_estimate(q, *increase_buckets(histogram, selector, by=by, window=window), integers=integers)
    return clamp_to_extremes(estimate, *extremes(distribution, selector, by=by, window=window), on=by)


def elapsed(selector: str, *, window: str) -> str:
    """Seconds between each run's points at the two ends of ``window``: the time of its last ``rl_step`` point now
    minus that of its last point a window ago (from the run's start, ``rl_run_start_time_seconds``, when it had none
    then). By run (``rl_run_id``).

    >>> print(elapsed('rl_run_id="r"', window="1m"))
    (max by (rl_run_id) (timestamp(rl_step{rl_run_id="r"})) - (max by (rl_run_id) (timestamp(rl_step{rl_run_id="r"} offset 1m)) or min by (rl_run_id) (rl_run_start_time_seconds{rl_run_id="r"})))
    """
    step = f"{contract.series(contract.STEP).name}{{{selector}}}"
    start = f"{contract.series(contract.RUN_START).name}{{{selector}}}"
    now = f"max by ({RUN_LABEL}) (timestamp({step}))"
    before = f"max by ({RUN_LABEL}) (timestamp({step} offset {window}))"
    return f"({now} - ({before} or min by ({RUN_LABEL}) ({start})))"


def increase_rate(counter: Series, selector: str, *, by: str = RUN_LABEL, window: str) -> str:
    """Per-second rate of ``counter`` over ``window``, by ``by`` (which holds ``rl_run_id``): its exact increase over
    the seconds between the window's two points (:func:`elapsed`)."""
    seconds = f"({elapsed(selector, window=window)} > 0)"
    return f"{exact_increase(counter, selector, by=by, window=window)} / on ({RUN_LABEL}) group_left () {seconds}"


def increase_phase_share(selector: str, *, window: str) -> str:
    """The share of each run's ranks' time spent in each phase over ``window`` (:func:`phase_share` over a window
    that begins at a point): the exact increase of the phase durations' sum over the window's seconds times the
    run's ranks. By run and ``rl_phase_name``."""
    sums = Series(
        _PHASE_DURATION.sum, "counter", "the phase durations' sum"
    )  # a classic histogram's _sum: never decreases (durations >= 0)
    seconds = exact_increase(sums, selector, by=f"{RUN_LABEL}, {_PHASE}", window=window)
    ranks = f"max by ({RUN_LABEL}) ({contract.series(contract.RANKS_EXPECTED).name}{{{selector}}})"
    return f"{seconds} / on ({RUN_LABEL}) group_left () ({elapsed(selector, window=window)} * {ranks} > 0)"


def at_step(value: str, selector: str) -> str:
    """``value`` (a query by ``rl_run_id`` and maybe more labels) and each run's step at the same instant, in one
    answer: ``value``'s series labelled ``field="value"`` and, with the same labels, ``field="step"`` holding the
    run's ``rl_step`` (max over ranks). The comparison dashboard turns the label into two columns per row (Grafana's
    "Labels to fields" transformation) and plots the value against the step.

    >>> print(at_step("V", 'rl_run_id=~"$runs"'))
    label_replace(max by (rl_run_id) (rl_step{rl_run_id=~"$runs"}) + on (rl_run_id) group_right () (0 * (V)), "field", "step", "", "") or label_replace(V, "field", "value", "", "")
    """
    step = f"max by ({RUN_LABEL}) ({contract.series(contract.STEP).name}{{{selector}}})"
    steps = f"{step} + on ({RUN_LABEL}) group_right () (0 * ({value}))"
    return (
        f'label_replace({steps}, "{FIELD_LABEL}", "step", "", "") or '
        f'label_replace({value}, "{FIELD_LABEL}", "value", "", "")'
    )


def exact_regex(value: str) -> str:
    """A regular expression (RE2, as Prometheus's ``=~`` reads it) that matches ``value`` and nothing else: its
    metacharacters escaped. What a Grafana multi-value variable in ``=~"$runs"`` stands for when it holds one run.

    >>> print(exact_regex("seed.1 (lr=3e-6)"))
    seed\\.1 \\(lr=3e-6\\)
    """
    return "".join(f"\\{char}" if char in _REGEX_META else char for char in value)


_REGEX_META = frozenset("\\.+*?()|[]{}^$")


# LogsQL ---------------------------------------------------------------------------------------------------------


def logsql_stream(field: str, value: str) -> str:
    """The LogsQL stream filter selecting the streams whose ``field`` is ``value`` (the fast filter for a stream
    field such as ``rl.run.id``).

    >>> logsql_stream("rl.run.id", 'a"b')
    '{rl.run.id="a\\\\"b"}'
    """
    return f"{{{field}={quote(value)}}}"


def logsql_exact(field: str, value: str) -> str:
    """The LogsQL exact filter: records whose ``field`` is ``value``, exactly.

    >>> logsql_exact("rl.sample.selection", "top")
    'rl.sample.selection:="top"'
    """
    return f"{field}:={quote(value)}"


LOGS_EVENT = "event_name"
"""The field in which VictoriaLogs keeps an OpenTelemetry log record's event name (``rl.sample`` for samples)."""


def logsql_range(field: str, low: int | None, high: int | None) -> str:
    """The LogsQL filter of records whose numeric ``field`` lies in ``[low, high]`` (an end left out: unbounded).

    >>> logsql_range("rl.step", 10, None)
    '"rl.step":range[10, inf]'
    """
    return f"{quote(field)}:range[{'-inf' if low is None else low}, {'inf' if high is None else high}]"


def logsql_number(field: str) -> str:
    """The LogsQL filter of records whose ``field`` is a number, infinities included and NaN left out (VictoriaLogs
    stores a double as text: ``NaN``, ``+Inf``, ``-Inf``, or its shortest decimal digits).

    >>> logsql_number("rl.reward")
    '"rl.reward":range[-inf, inf]'
    """
    return logsql_range(field, None, None)


def logsql_missing(field: str) -> str:
    """The LogsQL filter of records without ``field`` (VictoriaLogs keeps no empty field).

    >>> logsql_missing("rl.step")
    '"rl.step":""'
    """
    return f'{quote(field)}:""'
