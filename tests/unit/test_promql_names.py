"""The PromQL name extractor of the contract check (tests/promql_names.py): what it reads as a metric name and what
it never does, on hostile expressions; and, with promtool, that it reads what Prometheus's own parser reads in every
expression the check covers."""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.contract_check import promql
from tests.promql_names import names

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize(
    ("expr", "exact", "patterns"),
    [
        ('a{job="x"} + on (rl_run_id, job) group_left (rl_role) b', {"a", "b"}, set()),
        ("sum without (le, rl_rank) (c) / ignoring (x) group_right d", {"c", "d"}, set()),
        ('label_replace(a, "rl_fake", "$1", "rl_src", "(rl_.*)")', {"a"}, set()),
        ("max_over_time(timestamp(a != a offset 15s)[6h:15s]) - time()", {"a"}, set()),
        ("rate(a[$__rate_interval]) @ start() > bool 1e-6 * 0x1F", {"a"}, set()),
        ('a offset -5m unless b{x=~"$run"} and Inf < NaN', {"a", "b"}, set()),
        (
            '{__name__="rl_step",rl_run_id="r"} or {"otelcol_x.filtered", job="c"}',
            {"rl_step", "otelcol_x.filtered"},
            set(),
        ),
        ('{__name__=~"otelcol_y[._]z(_total)?"} or {__name__!="rl_gone"}', set(), {"otelcol_y[._]z(_total)?"}),
        ('{"__name__"="rl:q:rate1m"} # a comment naming rl_commented\n', {"rl:q:rate1m"}, set()),
        (
            "vllm:num_requests_waiting or sglang:num_queue_reqs",
            {"vllm:num_requests_waiting", "sglang:num_queue_reqs"},
            set(),
        ),
        ('count_values("rl_value", a) + topk by (job) (3, b) + quantile(0.5, c)', {"a", "b", "c"}, set()),
        ("`raw rl_string` and sum(rl_x{le='0.5'})", {"rl_x"}, set()),
    ],
)
def test_names_and_only_names(expr: str, exact: set[str], patterns: set[str]) -> None:
    """Selectors' names and ``__name__`` matchers are read; label names, strings, durations, keywords, functions,
    Grafana variables and comments are not."""
    read = names(expr)
    assert (set(read.exact), set(read.patterns)) == (exact, patterns)


@pytest.mark.parametrize(
    ("expr", "error"),
    [
        ("histogram_quantle(0.5, a)", "'histogram_quantle' is not a function"),
        ("sum(rate(a[5m])", "unclosed '\\('"),
        ('a{x="1"}]', "unbalanced '\\]'"),
        ("a ! b", "no token at 2"),
    ],
)
def test_what_is_not_promql_is_an_error(expr: str, error: str) -> None:
    """A misspelled function is refused, never read as a metric name; so are unbalanced brackets and stray text."""
    with pytest.raises(ValueError, match=error):
        names(expr)


_SELECTOR = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)?\{((?:[^{}"]|"(?:[^"\\]|\\.)*")*)\}')
_NAME_MATCHER = re.compile(r'(?:__name__|"__name__")(=~|=)"((?:[^"\\]|\\.)*)"')


def _promtool_names(promtool: Path, expr: str) -> tuple[set[str], set[str]]:
    """The names promtool's parser finds: it adds the matcher ``zzcheck="1"`` to every vector selector it parsed,
    and the names are those of the selectors carrying it."""
    done = subprocess.run(
        [str(promtool), "--experimental", "promql", "label-matchers", "set", expr, "zzcheck", "1"],
        capture_output=True,
        text=True,
        check=True,
    )
    exact: set[str] = set()
    patterns: set[str] = set()
    for selector in _SELECTOR.finditer(done.stdout):
        if 'zzcheck="1"' in selector.group(2):
            exact.update([selector.group(1)] if selector.group(1) else [])
            exact.update(re.findall(r'(?:^|[{,])\s*"((?:[^"\\]|\\.)*)"\s*(?=[,}]|$)', selector.group(2)))
            for op, value in _NAME_MATCHER.findall(selector.group(2)):
                (exact if op == "=" else patterns).add(value.replace("\\\\", "\\"))
    return exact, patterns


def test_the_extractor_reads_what_promtool_parses(promtool: Path) -> None:
    """On every expression the contract check reads (rules, annotations' queries, promtool tests, dashboards, with
    Grafana's ``$__rate_interval`` as a duration), the names equal those of the selectors promtool's parser finds."""
    expressions = [expr for _, expr in promql(ROOT)]

    def disagreement(expr: str) -> tuple[str, object, object] | None:
        read = names(expr)
        parsed = _promtool_names(promtool, expr.replace("$__rate_interval", "5m"))
        return None if parsed == (set(read.exact), set(read.patterns)) else (expr, parsed, read)

    with ThreadPoolExecutor(4) as pool:
        disagreements = [found for found in pool.map(disagreement, expressions) if found]
    assert len(expressions) > 600 and disagreements == []
