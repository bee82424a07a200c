"""The contract check's PromQL name extractor (tests/promql_names.py) against Prometheus's own parser (promtool), on
every expression the check reads."""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.contract_check import promql
from tests.promql_names import names

ROOT = Path(__file__).parents[2]

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
