"""Shared paths and helpers of the dashboard, alert-rule and compose tests."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "grafana" / "dashboards").glob("*.json"))
RULES = (ROOT / "prometheus" / "rules" / "otel_rl.yml", ROOT / "prometheus" / "rules" / "otel_rl_windows.yml")
"""The rule files about runs: the hand-written one and the one prometheus/generate.py writes."""
RULE_FILES = sorted((ROOT / "prometheus" / "rules").glob("*.yml"))
RULE_TESTS = sorted((ROOT / "prometheus" / "rules" / "tests").glob("*.yml"))


MALFORMED_ONLY = re.compile(r"\botelcol_otel_rl_points_rejected\b")
"""A query of the collector's door-check counter, which only a malformed sender raises: the demo sends none (so the
live dashboard tests skip it), and tests/reliability/test_isolation.py runs the panel's own query for its malformed
runs."""
LENS_ONLY = re.compile(r"\brl_reported\b")
"""A query of the values a trainer reduces itself and sends as gauges, which only NeMo Lens sends (the collector maps
them): the demo sends none, and tests/pipeline/test_lens.py runs the panels' own queries for a Lens-shaped run."""


def dashboard_targets() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Every (dashboard file name, panel, target) of every dashboard, rows flattened."""
    found = []
    for path in DASHBOARDS:
        data = json.loads(path.read_text(encoding="utf-8"))
        panels = [
            p for item in data["panels"] for p in ([item, *item.get("panels", [])] if item["type"] == "row" else [item])
        ]
        for panel in panels:
            for target in panel.get("targets", ()):
                found.append((path.name, panel, target))
    return found


def rule_generator() -> Any:
    """prometheus/generate.py as a module (its window ladder and tables)."""
    import importlib.util
    import sys

    name = "otel_rl_rules_generate"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "prometheus" / "generate.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def rules() -> list[dict[str, Any]]:
    """Every rule of :data:`RULES`, with its group name under ``_group``."""
    return [
        {**rule, "_group": group["name"]}
        for path in RULES
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
        for rule in group["rules"]
    ]


def metric_names(expr: str) -> set[str]:
    """Metric names selected in a PromQL expression: identifiers right before a ``{`` label matcher, and recorded
    series (their names hold a ``:``) with or without matchers."""
    selected = set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", expr)) - {"by", "without", "on", "ignoring"}
    return selected | set(re.findall(r"(?<![\w:])([a-zA-Z_]\w*:[\w:]*)", expr))
