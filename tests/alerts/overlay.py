"""The test overlay of the shipped rules: the only change the alert tests make to prometheus/rules/.

The live tests cannot wait out production ``for:`` durations (RLStalenessHigh's is 10 minutes), so they evaluate a
copy of the shipped rule files in which the ``for:`` of the alerts they wait for is shortened (every window's rule of
that alert), and nothing else changes: same expressions (their windows included), same labels and annotations, same
groups and order. :func:`write_overlay` checks that itself. The audit needs no overlay: its windows hold steps, so at
a test's pace they last seconds (tests/demo/test_reward_hack.py runs the shipped rules). The per-run thresholds file
is the user's to write (``otel_rl_thresholds.yml``), so the tests write their own overrides in its place.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import otel_rl_contract as contract
import yaml

RULES_DIR = Path(__file__).resolve().parents[2] / "prometheus" / "rules"
THRESHOLDS_FILE = "otel_rl_thresholds.yml"


def _without_for(data: Any) -> Any:
    stripped = copy.deepcopy(data)
    for group in stripped.get("groups") or ():
        for rule in group.get("rules") or ():
            rule.pop("for", None)
    return stripped


def write_overlay(
    folder: Path,
    *,
    shorten: Mapping[str, str],
    overrides: Iterable[tuple[str, str, float]] = (),
) -> tuple[Path, ...]:
    """Copy every shipped rule file into ``folder``, the ``for:`` of each alert named in ``shorten`` set to its value
    (``{"RLStalenessHigh": "15s"}``), and ``otel_rl_thresholds.yml`` replaced by one override rule per
    ``(run id, threshold name, value)``; return the files, for ``StackConfig(rule_files=...)``."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    shortened: set[str] = set()
    for source in sorted(RULES_DIR.glob("*.yml")):
        shipped = yaml.safe_load(source.read_text(encoding="utf-8"))
        if source.name == THRESHOLDS_FILE:
            rules = [
                {
                    "record": contract.rules.ALERT_THRESHOLD_OVERRIDE.name,
                    "expr": f"vector({value!r})",
                    "labels": {"rl_run_id": run_id, "threshold": name},
                }
                for run_id, name, value in overrides
            ]
            data: Any = {"groups": [{"name": "otel_rl_threshold_overrides", "rules": rules}] if rules else []}
        else:
            data = copy.deepcopy(shipped)
            for group in data.get("groups") or ():
                for rule in group.get("rules") or ():
                    if rule.get("alert") in shorten:
                        rule["for"] = shorten[rule["alert"]]
                        shortened.add(rule["alert"])
            assert _without_for(data) == _without_for(shipped), f"the overlay of {source.name} changed more than for:"
        target = folder / source.name
        target.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
        written.append(target)
    assert shortened == set(shorten), f"no shipped alert named {sorted(set(shorten) - shortened)}"
    return tuple(written)
