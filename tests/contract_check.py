"""The contract check: every metric name the rules, the promtool tests, the dashboards and the collector
configurations spell is one the contract declares (``otel_rl_contract.KNOWN_SERIES`` for Prometheus names, the
metrics of ``otel_rl_contract.names`` and NeMo Lens's for OpenTelemetry names), and every ``record:`` is declared in
``otel_rl_contract.rules``. ``tests/unit/test_contract_check.py`` runs it on the repository and on copies with a
planted name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import otel_rl_contract as contract
import yaml

from tests.dashboards.conftest import dashboard_targets
from tests.promql_names import names

_QUERY_TEMPLATE = re.compile(r'printf "((?:[^"\\]|\\.)*)"[^|}]*\|\s*query')
"""A rule annotation's query: ``{{ with printf "rl_alert_threshold{...,rl_run_id=%q}" $labels.rl_run_id | query }}``."""
_LABEL_VALUES = re.compile(r"label_values\((?:(.*),\s*)?(\w+)\)", re.S)
"""Grafana's variable query ``label_values(<selector>, <label>)`` (the selector may be left out)."""
_PROSE_NAME = re.compile(r"(?<![\w.:$])((?:otel_)?rl[_:][A-Za-z0-9_:]*[A-Za-z0-9])")
"""A word of prose that looks like one of otel-rl's series or labels (``rl_groups_total``, ``rl:phase_open_seconds``,
``rl_dataset``); not ``$labels.rl_run_id``, a template's reference."""
_OTTL_NAME = re.compile(r'metric\.name\s*==\s*"([^"]+)"|set\(metric\.name,\s*"([^"]+)"\)')
_OTTL_PATTERN = re.compile(r'IsMatch\(metric\.name,\s*"((?:[^"\\]|\\.)*)"\)')


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it: the check reads some forty files, ten times faster than in Python."""


def _yaml(path: Path) -> Any:
    """A YAML file's document."""
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)  # noqa: S506 (a safe loader)


def rule_files(root: Path) -> list[Path]:
    """The rule files: ``prometheus/rules/*.yml`` and the promtool tests' fixtures (the operator's overrides)."""
    rules = root / "prometheus" / "rules"
    return sorted([*rules.glob("*.yml"), *(rules / "tests" / "fixtures").glob("*.yml")])


def promql(root: Path) -> Iterator[tuple[str, str]]:
    """Every PromQL expression of the rules, the promtool tests and the dashboards, as (where, expression)."""
    for path in rule_files(root):
        for group in (_yaml(path) or {}).get("groups") or []:
            for rule in group["rules"]:
                where = f"{path.relative_to(root)}: {rule.get('record') or rule.get('alert')}"
                yield where, rule["expr"]
                for text in (rule.get("annotations") or {}).values():
                    for found in _QUERY_TEMPLATE.finditer(text):
                        yield where, found.group(1).replace('\\"', '"').replace("%q", '""')
    for path in sorted((root / "prometheus" / "rules" / "tests").glob("*.yml")):
        for test in _yaml(path)["tests"]:
            where = str(path.relative_to(root))
            yield from ((where, item["series"]) for item in test.get("input_series") or [])
            for case in test.get("promql_expr_test") or []:
                yield where, case["expr"]
                yield from ((where, sample["labels"]) for sample in case.get("exp_samples") or [] if "labels" in sample)
    dashboards = _dashboards(root)
    for path in dashboards:
        dashboard = json.loads(path.read_text(encoding="utf-8"))
        for variable in dashboard.get("templating", {}).get("list", []):
            query = _LABEL_VALUES.fullmatch(variable.get("query", ""))
            if variable.get("datasource", {}).get("type") == "prometheus" and query and query.group(1):
                yield f"{path.relative_to(root)}: variable {variable['name']}", query.group(1)
    for name, panel, target in dashboard_targets(dashboards):
        if target.get("datasource", {}).get("type") == "prometheus" and "expr" in target:
            yield f"grafana/dashboards/{name}: {panel['title']} {target['refId']}", target["expr"]


def prose(root: Path) -> Iterator[tuple[str, str]]:
    """The texts people read beside the queries: each dashboard panel's description and each rule's annotations, as
    (where, text)."""
    for path in rule_files(root):
        for group in (_yaml(path) or {}).get("groups") or []:
            for rule in group["rules"]:
                for key, text in (rule.get("annotations") or {}).items():
                    yield f"{path.relative_to(root)}: {rule.get('alert') or rule.get('record')} {key}", text
    panels = {(name, panel["id"]): panel for name, panel, _ in dashboard_targets(_dashboards(root))}
    for (name, _), panel in sorted(panels.items()):
        yield f"grafana/dashboards/{name}: {panel['title']} description", panel.get("description", "")


def collector_names(root: Path) -> Iterator[tuple[str, str, bool]]:
    """Every OpenTelemetry metric name the collector configurations spell, as (where, name or pattern, is a
    pattern): OTTL's ``metric.name == "..."``, ``set(metric.name, "...")`` and ``IsMatch(metric.name, "...")``,
    and the names the spanmetrics connector makes (its namespace's ``.duration`` and ``.calls``)."""
    for path in sorted((root / "collector_config").glob("*.yaml")):
        config = _yaml(path) or {}
        if "dist" in config:  # builder.yaml: the distribution's manifest, not a configuration
            continue
        for keys, text in _strings(config, ()):
            where = f"{path.relative_to(root)}: {'.'.join(keys)}"
            for found in _OTTL_NAME.finditer(text):
                yield where, found.group(1) or found.group(2), False
            for found in _OTTL_PATTERN.finditer(text):
                yield where, found.group(1).replace("\\\\", "\\"), True
        for name, connector in (config.get("connectors") or {}).items():
            if name.split("/")[0] == "spanmetrics":
                namespace = connector["namespace"]
                where = f"{path.relative_to(root)}: connectors.{name}"
                yield from ((where, f"{namespace}.{part}", False) for part in ("duration", "calls"))


def _dashboards(root: Path) -> list[Path]:
    return sorted((root / "grafana" / "dashboards").glob("*.json"))


def _strings(node: Any, keys: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str]]:
    """Every string of a YAML document, with the keys leading to it."""
    if isinstance(node, str):
        yield keys, node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(value, (*keys, str(key)))
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item, keys)


def unknown_names(root: Path) -> dict[str, list[str]]:
    """Where → the names there that the contract does not know (a name pattern that matches no known name counts as
    unknown), and the recording rules that are not declared or no rule records."""
    found: dict[str, set[str]] = {}
    known = contract.KNOWN_SERIES
    for where, expr in promql(root):
        read = names(expr)
        missing = {name for name in read.exact if name not in known}
        missing |= {p for p in read.patterns if not any(re.fullmatch(p, name) for name in known)}
        if missing:
            found.setdefault(where, set()).update(missing)
    for where, text in prose(root):
        missing = {
            name for name in _PROSE_NAME.findall(text) if name not in known and name not in contract.KNOWN_LABELS
        }
        if missing:
            found.setdefault(where, set()).update(missing)
    metrics = {metric.name for metric in contract.ALL_METRICS} | set(contract.foreign.LENS_GAUGES)
    for where, name, pattern in collector_names(root):
        if (not any(re.search(name, metric) for metric in metrics)) if pattern else name not in metrics:
            found.setdefault(where, set()).add(name)
    recorded = {
        rule["record"]
        for path in rule_files(root)
        for group in (_yaml(path) or {}).get("groups") or []
        for rule in group["rules"]
        if "record" in rule
    }
    declared = {rule.name for rule in contract.rules.RECORDING_RULES}
    if recorded - declared:
        found["recorded but not declared in otel_rl_contract/rules.py"] = recorded - declared
    if declared - recorded:
        found["declared in otel_rl_contract/rules.py but recorded by no rule"] = declared - recorded
    return {where: sorted(missing) for where, missing in sorted(found.items())}


def check(root: Path) -> None:
    """Fails naming every name of :func:`unknown_names`, where it is spelled.

    Raises:
        AssertionError: listing each place and its unknown names.
    """
    unknown = unknown_names(root)
    if unknown:
        lines = "\n".join(f"  {where}: {', '.join(missing)}" for where, missing in unknown.items())
        raise AssertionError(
            f"names the contract (contract/otel_rl_contract) does not know; declare them or fix the spelling:\n{lines}"
        )
