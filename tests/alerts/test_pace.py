"""The promtool tests at three step paces (prometheus/rules/tests/pace_*.yml) hold the runs of tests/alerts/pace.py."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.alerts import pace


@pytest.mark.parametrize("shape", pace.PACES, ids=lambda shape: shape.name)
def test_pace_tests_hold_the_model_runs(shape: pace.Pace) -> None:
    """Each committed pace file's input series are the model's runs at that pace (regenerate with ``python -m
    tests.alerts.pace write``, never by hand), at the stated intervals, with the honest run's silence checked at
    every evaluation and each scenario's alerts checked before and after its divergence."""
    committed: dict[str, Any] = yaml.safe_load((pace.TESTS_DIR / f"pace_{shape.name}.yml").read_text(encoding="utf-8"))
    assert committed["evaluation_interval"] == f"{shape.eval_s}s"
    assert committed["group_eval_order"] == list(pace.GROUP_ORDER)
    for group, names in zip(committed["tests"], pace.GROUPS, strict=True):
        assert group["interval"] == f"{shape.sample_s}s"
        expected = [item for items in pace._runs(shape, 1, names).values() for item in items]
        assert [(item["series"], item["values"]) for item in group["input_series"]] == expected
        checked = {case["alertname"] for case in group.get("alert_rule_test", ())}
        wanted = {alert for name in names if name in shape.runs for alert in pace.SCENARIOS[name]}
        floored = pace.HEALTH_FLOORED if shape.name == "demo" else set()
        assert wanted - floored <= checked
        if "honest" in names:
            times = {case["eval_time"] for case in group["promql_expr_test"]}
            assert times == {f"{t}s" for t in pace._eval_times(shape, 1, names)}


def test_encode_uses_promtool_notation() -> None:
    """Runs of one value become ``v+0xN``, a missing point ``_`` (a run of them ``_xN``)."""
    assert pace._encode([1.0, 1.0, 1.0, 2.5, None, None, 3.0]) == "1+0x2 2.5 _x1 3"
