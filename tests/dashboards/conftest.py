"""Shared paths and helpers of the dashboard, alert-rule and compose tests."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import otel_rl_contract as contract
import yaml
from otel_rl_contract import foreign

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "grafana" / "dashboards").glob("*.json"))
RUN_DASHBOARD = ROOT / "grafana" / "dashboards" / "rl-run.json"
"""One run (variable ``run``): the dashboard whose queries the live tests run for the demo's run."""
COMPARE_DASHBOARD = ROOT / "grafana" / "dashboards" / "rl-compare.json"
"""Several runs and seed groups by step (variables ``runs``, ``baseline``, ``group``)."""
RULES = (ROOT / "prometheus" / "rules" / "otel_rl.yml", ROOT / "prometheus" / "rules" / "otel_rl_windows.yml")
"""The rule files about runs: the hand-written one and the one prometheus/generate.py writes."""
RULE_FILES = sorted((ROOT / "prometheus" / "rules").glob("*.yml"))
RULE_TESTS = sorted((ROOT / "prometheus" / "rules" / "tests").glob("*.yml"))


MALFORMED_ONLY = re.compile(rf"\b{re.escape(foreign.COLLECTOR_POINTS_REJECTED.name)}\b")
"""A query of the collector's door-check counter, which only a malformed sender raises: the demo sends none (so the
live dashboard tests skip it), and tests/reliability/test_isolation.py runs the panel's own query for its malformed
runs."""
LENS_ONLY = re.compile(rf"\b{re.escape(contract.series(contract.REPORTED).name)}\b")
"""A query of the values a trainer reduces itself and sends as gauges, which only NeMo Lens sends (the collector maps
them): the demo sends none, and tests/pipeline/test_lens.py runs the panels' own queries for a Lens-shaped run."""


def dashboard_targets(
    dashboards: Sequence[Path] = (RUN_DASHBOARD,),
) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Every (dashboard file name, panel, target) of ``dashboards`` (default: the RL run one, whose queries the live
    tests run for one run; the comparison's run in tests/dashboards/test_compare*.py), rows flattened."""
    found = []
    for path in dashboards:
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
