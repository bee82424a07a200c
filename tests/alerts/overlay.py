"""The test overlay of the shipped rules: the only change the alert tests make to prometheus/rules/.

The live tests cannot wait out production ``for:`` durations (RLStalenessHigh's is 10 minutes), so they evaluate a
copy of the shipped rule files in which the ``for:`` of the alerts they wait for is shortened, and nothing else
changes: same expressions (their 5-minute windows included), same labels and annotations, same groups and order.
:func:`write_overlay` checks that itself. The audit compares 10-minute windows with 30 minutes before, which a test
cannot wait for either: its test scales the named durations of every expression too (``windows``). The per-run
thresholds file is the user's to write (``otel_rl_thresholds.yml``), so the tests write their own overrides in its
place.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import otel_rl_contract as contract
import yaml

RULES_DIR = Path(__file__).resolve().parents[2] / "prometheus" / "rules"
THRESHOLDS_FILE = "otel_rl_thresholds.yml"
_DURATION = re.compile(r"(?<![\w:.])(\d+[smhdw])\b")
"""A PromQL duration in an expression (``10m`` in ``offset 10m``, ``[10m]``; not ``rate10m`` in a rule's name)."""


def _without_for(data: Any) -> Any:
    stripped = copy.deepcopy(data)
    for group in stripped.get("groups") or ():
        for rule in group.get("rules") or ():
            rule.pop("for", None)
    return stripped


def _scaled(data: Any, windows: Mapping[str, str]) -> Any:
    """``data`` with every duration of its rule expressions named in ``windows`` replaced (``{"10m": "30s"}``)."""
    scaled = copy.deepcopy(data)
    for group in scaled.get("groups") or ():
        for rule in group.get("rules") or ():
            rule["expr"] = _DURATION.sub(lambda m: windows.get(m.group(1), m.group(1)), rule["expr"])
    return scaled


def write_overlay(
    folder: Path,
    *,
    shorten: Mapping[str, str],
    overrides: Iterable[tuple[str, str, float]] = (),
    windows: Mapping[str, str] | None = None,
) -> tuple[Path, ...]:
    """Copy every shipped rule file into ``folder``, the ``for:`` of each alert named in ``shorten`` set to its value
    (``{"RLStalenessHigh": "15s"}``), and ``otel_rl_thresholds.yml`` replaced by one override rule per
    ``(run id, threshold name, value)``; return the files, for ``StackConfig(rule_files=...)``.

    ``windows`` scales time itself for a run of minutes: every duration it names, in every expression, becomes its
    value (``{"10m": "30s", "30m": "90s"}``: the audit's windows and look-backs, for the reward-hack demo); nothing
    else changes."""
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
            shipped = _scaled(shipped, windows or {})
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
