"""The metric names a PromQL expression reads, for the contract check (PromQL has no Python parser here).

A lexer and a bracket stack, enough for every expression of the rules, the promtool tests and the dashboards: a
metric name is an identifier that is not a function, an aggregation, a keyword or a number, outside label matchers
(``{...}``), label lists (``by``, ``without``, ``on``, ``ignoring``, ``group_left``, ``group_right``) and ranges
(``[5m]``, ``[6h:15s]``); or a ``__name__="..."`` matcher, or a quoted name inside braces (Prometheus 3's
``{"a.b"}``). A ``__name__=~"..."`` matcher is a pattern. Strings, durations and Grafana variables (``$run``,
``$__rate_interval``) are never names. A call of a function PromQL does not have is an error, so a typo cannot pass
as a metric name.

    >>> read = names('sum by (rl_run_id) (rate(rl_reward_bucket{rl_rank="",le="1"}[$__rate_interval])) > 0')
    >>> sorted(read.exact), sorted(read.patterns)
    (['rl_reward_bucket'], [])
    >>> sorted(names('{__name__=~"otelcol_x(_total)?"} or on (job) rl:a:rate1m offset 5m').exact)
    ['rl:a:rate1m']
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FUNCTIONS = frozenset(
    """abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil changes clamp clamp_max
    clamp_min cos cosh count_over_time day_of_month day_of_week day_of_year days_in_month deg delta deriv
    double_exponential_smoothing exp first_over_time floor histogram_avg histogram_count histogram_fraction
    histogram_quantile histogram_stddev histogram_stdvar histogram_sum holt_winters hour idelta increase info irate
    label_join label_replace last_over_time ln log10 log2 mad_over_time max_over_time min_over_time minute month pi
    predict_linear present_over_time quantile_over_time rad rate resets round scalar sgn sin sinh sort
    sort_by_label sort_by_label_desc sort_desc sqrt stddev_over_time stdvar_over_time sum_over_time tan tanh time
    timestamp ts_of_first_over_time ts_of_last_over_time ts_of_max_over_time ts_of_min_over_time vector year
    start end""".split()  # noqa: SIM905 (a word list reads better as text)
)
"""PromQL's functions (Prometheus 3, experimental ones included), and ``start``/``end`` of the ``@`` modifier."""
AGGREGATIONS = frozenset(
    "avg bottomk count count_values group limit_ratio limitk max min quantile stddev stdvar sum topk".split()  # noqa: SIM905
)
KEYWORDS = frozenset("and or unless offset bool atan2 inf nan".split())  # noqa: SIM905
LABEL_LISTS = frozenset(["by", "without", "on", "ignoring", "group_left", "group_right"])
"""The keywords followed by a parenthesised list of label names (``group_left``/``group_right``: optionally)."""

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|\#[^\n]*)
    |(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    |(?P<variable>\$\{[^}]*\}|\$\w+|\[\[\w+\]\])
    |(?P<number>(?:0[xX][0-9a-fA-F]+|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)(?:(?:ms|s|m|h|d|w|y)(?:\d+(?:ms|s|m|h|d|w|y))*)?)
    |(?P<identifier>[a-zA-Z_:][a-zA-Z0-9_:]*)
    |(?P<operator>=~|!~|!=|==|<=|>=|[-+*/%^<>=,@{}()\[\]])
    """,
    re.VERBOSE,
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}


@dataclass(frozen=True)
class Names:
    """What an expression reads."""

    exact: frozenset[str]
    """Metric names of its vector selectors and ``__name__="..."`` matchers."""
    patterns: frozenset[str]
    """The regular expressions of its ``__name__=~"..."`` matchers (Prometheus anchors them at both ends)."""


def tokens(expr: str) -> list[tuple[str, str]]:
    """``expr`` as (kind, text) tokens, white space and comments left out.

    Raises:
        ValueError: naming the position and text where no token starts.
    """
    found: list[tuple[str, str]] = []
    position = 0
    while position < len(expr):
        match = _TOKEN.match(expr, position)
        if match is None:
            raise ValueError(f"PromQL: no token at {position} in {expr!r}: {expr[position : position + 20]!r}")
        kind = match.lastgroup
        assert kind is not None
        if kind != "space":
            found.append((kind, match.group()))
        position = match.end()
    return found


def _value(literal: str) -> str:
    """A PromQL string literal's value (raw strings as they are; the escapes names and patterns use)."""
    if literal.startswith("`"):
        return literal[1:-1]
    return re.sub(r"\\(.)", lambda escape: _ESCAPES.get(escape.group(1), escape.group()), literal[1:-1])


def names(expr: str) -> Names:
    """The metric names and name patterns ``expr`` reads.

    Raises:
        ValueError: on a call of a function PromQL does not have, an unbalanced bracket, or text that is not PromQL.
    """
    found = tokens(expr)
    exact: set[str] = set()
    patterns: set[str] = set()
    stack: list[str] = []  # "{" matchers, "[" a range, "labels" a label list, "(" anything else
    for index, (kind, text) in enumerate(found):
        following = found[index + 1][1] if index + 1 < len(found) else ""
        inside = stack[-1] if stack else ""
        if text in ("(", "{", "["):
            previous = found[index - 1][1] if index else ""
            stack.append("labels" if text == "(" and previous in LABEL_LISTS else text)
        elif text in (")", "}", "]"):
            if not stack or {"(": ")", "labels": ")", "{": "}", "[": "]"}[stack.pop()] != text:
                raise ValueError(f"PromQL: unbalanced {text!r} in {expr!r}")
        elif inside == "{":
            _matcher(found, index, exact, patterns)
        elif inside in ("[", "labels") or kind != "identifier" or text in LABEL_LISTS or text.lower() in KEYWORDS:
            continue
        elif following == "(" or following in ("by", "without"):
            if text not in FUNCTIONS and text not in AGGREGATIONS:
                raise ValueError(f"PromQL: {text!r} is not a function in {expr!r}")
        else:
            exact.add(text)
    if stack:
        raise ValueError(f"PromQL: unclosed {stack[-1]!r} in {expr!r}")
    return Names(frozenset(exact), frozenset(patterns))


def _matcher(found: list[tuple[str, str]], index: int, exact: set[str], patterns: set[str]) -> None:
    """Reads the name a token inside ``{...}`` gives: a quoted name alone, or the value of a ``__name__`` matcher."""
    kind, text = found[index]
    before = found[index - 1][1]
    after = found[index + 1][1] if index + 1 < len(found) else ""
    if kind == "string" and before in ("{", ",") and after in (",", "}"):
        exact.add(_value(text))
    elif kind == "string" and before in ("=", "=~") and found[index - 2][1] in ("__name__", '"__name__"'):
        (exact if before == "=" else patterns).add(_value(text))
