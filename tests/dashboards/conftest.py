"""Shared paths and helpers of the dashboard, alert-rule and compose tests."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "grafana" / "dashboards").glob("*.json"))
RUN_DASHBOARD = ROOT / "grafana" / "dashboards" / "rl-run.json"
"""One run (variable ``run``): the dashboard whose queries the live tests run for the demo's run."""
COMPARE_DASHBOARD = ROOT / "grafana" / "dashboards" / "rl-compare.json"
"""Several runs and seed groups by step (variables ``runs``, ``baseline``, ``group``)."""
RULES = (ROOT / "prometheus" / "rules" / "otel_rl.yml", ROOT / "prometheus" / "rules" / "otel_rl_audit.yml")
RULE_FILES = sorted((ROOT / "prometheus" / "rules").glob("*.yml"))
RULE_TESTS = sorted((ROOT / "prometheus" / "rules" / "tests").glob("*.yml"))


MALFORMED_ONLY = re.compile(r"\botelcol_otel_rl_points_rejected\b")
"""A query of the collector's door-check counter, which only a malformed sender raises: the demo sends none (so the
live dashboard tests skip it), and tests/reliability/test_isolation.py runs the panel's own query for its malformed
runs."""
LENS_ONLY = re.compile(r"\brl_reported\b")
"""A query of the values a trainer reduces itself and sends as gauges, which only NeMo Lens sends (the collector maps
them): the demo sends none, and tests/pipeline/test_lens.py runs the panels' own queries for a Lens-shaped run."""


def dashboard_targets(path: Path = RUN_DASHBOARD) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Every (dashboard file name, panel, target) of the dashboard ``path`` (the "RL run" one), rows flattened."""
    data = json.loads(path.read_text(encoding="utf-8"))
    panels = [
        p for item in data["panels"] for p in ([item, *item.get("panels", [])] if item["type"] == "row" else [item])
    ]
    return [(path.name, panel, target) for panel in panels for target in panel.get("targets", ())]


def rules() -> list[dict[str, Any]]:
    """Every rule of prometheus/rules/otel_rl.yml and otel_rl_audit.yml, with its group name under ``_group``."""
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
