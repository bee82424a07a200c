"""The PromQL name extractor of the contract check (tests/promql_names.py): what it reads as a metric name and what
it never does, on hostile expressions (tests/stack/test_promql_reader.py checks it against promtool's parser)."""

from __future__ import annotations

import pytest

from tests.promql_names import names


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
