"""otel_rl_ops.promql's quoting, the report's variable substitution and the demo's run folders, without a stack
(tests/queries/test_hostile_run_ids.py runs the same run ids against the real Prometheus and VictoriaLogs)."""

from __future__ import annotations

import json
import re

import otel_rl_contract as contract
import pytest
from otel_rl_ops import promql
from otel_rl_ops.report.dashboard import substitute

GROUPS = contract.series(contract.GROUPS)
STEP = contract.series(contract.STEP)

HOSTILE = [
    'q"uote',
    "back\\slash",
    "trail\\",
    "br{ace}s",
    "dollar$run$__interval",
    "new\nline",
    "tab\there",
    "bell\x07",
    "ünï©ødé-实验 🚀",
    'victim",rl_run_id=~".*',
    "",
    "\u2028",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_quote_writes_a_go_string_literal_of_the_value(value: str) -> None:
    """quote() is a double-quoted literal with nothing but the closing quote unescaped, that decodes (by Go's
    rules, which JSON's string escapes are a subset of here) to the value itself."""
    literal = promql.quote(value)
    assert literal.startswith('"') and literal.endswith('"')
    body = literal[1:-1]
    assert "\n" not in body and "\r" not in body
    assert not any(char == '"' and (len(body[:i]) - len(body[:i].rstrip("\\"))) % 2 == 0 for i, char in enumerate(body))
    # \x escapes are Go's, not JSON's; for code points < 0x80 they are \u00xx.
    assert json.loads(literal.replace("\\x", "\\u00")) == value


def test_quote_refuses_a_lone_surrogate() -> None:
    """A lone surrogate is not text: neither PromQL nor LogsQL can carry it, so quote() says so."""
    with pytest.raises(ValueError, match=r"a label value must be text without lone surrogates, got 'a\\ud800'"):
        promql.quote("a\ud800")


def test_builders_quote_every_value_they_are_given() -> None:
    """Selectors, matchers and LogsQL filters hold the values only as quoted literals."""
    run = 'victim",rl_run_id=~".*'
    assert promql.selector(STEP, rl_run_id=run) == f'{STEP.name}{{rl_run_id="victim\\",rl_run_id=~\\".*"}}'
    assert promql.match("rl_dataset", "", "!=") == 'rl_dataset!=""'
    assert promql.logsql_exact("rl.run.id", run) == 'rl.run.id:="victim\\",rl_run_id=~\\".*"'
    assert promql.logsql_stream("rl.run.id", "$run") == '{rl.run.id="$run"}'


@pytest.mark.parametrize("run_id", HOSTILE)
def test_substitute_puts_the_run_id_in_as_a_literal(run_id: str) -> None:
    """The report's substitution writes the run id as quote() does, whatever it holds ($ included), and reads no
    variable in what it inserted."""
    expr = 'rate(x{rl_run_id="$run"}[$__rate_interval]) {rl.run.id="${run}"} [$__interval] [${__interval}]'
    expected = f"rate(x{{rl_run_id={promql.quote(run_id)}}}[20s]) {{rl.run.id={promql.quote(run_id)}}} [5s] [5s]"
    assert substitute(expr, run_id=run_id, rate_interval="20s", interval="5s") == expected


def test_substitute_refuses_unknown_variables_and_a_bare_run_variable() -> None:
    """Variables the report cannot fill, and $run outside a string literal (it cannot be quoted there), are
    errors naming the query."""
    with pytest.raises(ValueError, match=r"uses variables the report does not know: \['job'\]"):
        substitute('up{job=~"$job"}', run_id="r", rate_interval="20s", interval="5s")
    with pytest.raises(ValueError, match=r'uses \$run outside a string literal: write "\$run"'):
        substitute("label_values($run)", run_id="r", rate_interval="20s", interval="5s")


@pytest.mark.parametrize(
    "query",
    [
        promql.mean(contract.REWARDS, "S", by="rl_reward_fn", window="1m"),
        promql.effective_sample_size(contract.IMPORTANCE_RATIO, "S", window="1m"),
        promql.share(GROUPS, "rl_group_outcome", "S", window="1m"),
        promql.fraction(contract.series(contract.GROUPS_ZERO_VARIANCE), GROUPS, "S", window="1m"),
        promql.phase_mean("S", window="1m"),
    ],
)
def test_ratios_of_counters_divide_exact_increases_of_one_window(query: str) -> None:
    """A ratio of counters never divides rate()s or increase()s (each extrapolates its series on its own, so the
    parts of one ratio would be scaled differently): every counter it reads is differenced with itself one window
    earlier, and its denominator (the count, the total) is kept only above 0."""
    assert "rate(" not in query and "increase(" not in query, query
    counters = re.findall(r"(\w+)\{S\}(?! offset)", query)
    assert counters and all(f"{name}{{S}} offset 1m" in query for name in counters), query
    assert re.search(r" / (on \(\) group_left \(\) )?\(+.*\) > 0\)", query), query


def test_signed_builders_refuse_a_distribution_of_counts() -> None:
    """Means and the effective sample size read a signed distribution's exact sums; staleness (a distribution of
    counts) has none, and the builder says which distribution it was given."""
    with pytest.raises(ValueError, match=r"'rl\.staleness' has no signed sums"):
        promql.mean(contract.STALENESS, "S", window="1m")


def test_only_exemplar_carriers_name_an_exemplar_series() -> None:
    """A heatmap of an exemplar carrier names its exemplar series (Grafana asks it for exemplars); a heatmap of any
    other distribution names none, which would select a series the collector never writes."""
    reward = promql.distribution(contract.REWARDS, "S", window="1m")
    assert contract.exemplar_series(contract.REWARDS.histogram).bucket in reward
    assert "exemplars" not in promql.distribution(contract.ADVANTAGES, "S", window="1m")
