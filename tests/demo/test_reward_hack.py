"""The audit on a run that games its reward, beside an honest run of the same length, through the real stack.

Two demo jobs run at once into one stack: ``reward_hack`` (from 30% of the steps on, the format reward pays every
response token, ``demo.task``) and an honest one. The audit's windows are scaled down twenty-fold with the documented
overlay (``tests/alerts/overlay.py``: 10 minutes become 30 s, 30 minutes 90 s, and each audit alert's ``for:`` 30 s),
so that a run of minutes is audited as a run of hours would be. The test records every audit alert's first pending
and firing time on each run, maps them to the training step then, and reports both timelines with how many steps
before or after the step where correctness peaked each alert fired.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from otel_rl_contract import foreign
from otel_rl_ops.query import Prometheus

from demo.__main__ import _free_port, run_job
from demo.job import JobSettings
from tests.alerts.overlay import write_overlay
from tests.dashboards.conftest import rules
from tests.pipeline.harness import private_stack

pytestmark = pytest.mark.stack

STEPS, RANKS = 400, 2
SCALE = {"10m": "30s", "30m": "90s", "5m": "15s"}
"""The audit's windows and look-backs, twenty times shorter."""
AUDIT = tuple(rule["alert"] for rule in rules() if rule["_group"] == "otel_rl_audit" and "alert" in rule)
"""Every alert of prometheus/rules/otel_rl_audit.yml."""
SETTLE_S = 60
"""How long the test keeps watching the alerts after the jobs end (their windows still hold the runs' last minute)."""
SMOOTHING = 20
"""Steps over which correctness is averaged to find its peak."""


def _watch(prometheus: Prometheus, runs: tuple[str, ...], seen: dict[tuple[str, str, str], float]) -> None:
    """Note the first time each (run, audit alert, state) appears in ``ALERTS``."""
    now = time.time()
    query = f'{foreign.ALERTS.name}{{alertname=~"{"|".join(AUDIT)}",rl_run_id=~"{"|".join(runs)}"}}'
    for item in prometheus.query(query):
        labels = item["metric"]
        seen.setdefault((labels["rl_run_id"], labels["alertname"], labels["alertstate"]), now)


def _records(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(folder.glob("rank-*.jsonl")) for line in path.open()]


def _correctness_by_step(records: list[dict[str, Any]]) -> dict[int, float]:
    totals: dict[int, list[float]] = {}
    for record in records:
        totals.setdefault(record["step"], []).extend(record["rewards"]["correctness"])
    return {step: sum(values) / len(values) for step, values in sorted(totals.items())}


def _step_at(records: list[dict[str, Any]], when: float) -> int:
    """The last step a rank had finished at ``when`` (-1 before the first)."""
    ended = [record["step"] for record in records if record["ended_ns"] / 1e9 <= when]
    return max(ended, default=-1)


@pytest.fixture(scope="module")
def audited(stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Both runs through a stack evaluating the scaled audit; yields, per run, its records and the first time of
    each audit alert's states."""
    rules = write_overlay(tmp_path_factory.mktemp("audit-rules"), shorten=dict.fromkeys(AUDIT, "30s"), windows=SCALE)
    with private_stack(stack_binaries, tmp_path_factory.mktemp("audit-stack"), rule_files=rules) as stack:
        prometheus = Prometheus(stack.prometheus_url)
        jobs = {}
        for name, hacked in (("hacked", True), ("honest", False)):
            folder = tmp_path_factory.mktemp(f"records-{name}")
            jobs[name] = JobSettings(
                run_id=f"audit-{name}-{time.time_ns() % 10**8}",
                steps=STEPS,
                ranks=RANKS,
                exporter="otlp",
                endpoint=stack.otlp_grpc_endpoint,
                record_dir=str(folder),
                master_port=_free_port(),
                step_seconds=0.25,
                export_interval_s=1.0,
                reward_hack=hacked,
            )
        threads = [threading.Thread(target=run_job, args=(settings,)) for settings in jobs.values()]
        for thread in threads:
            thread.start()
        seen: dict[tuple[str, str, str], float] = {}
        runs = tuple(settings.run_id for settings in jobs.values())
        while any(thread.is_alive() for thread in threads):
            _watch(prometheus, runs, seen)
            time.sleep(3)
        ended = time.time()
        while time.time() < ended + SETTLE_S:
            _watch(prometheus, runs, seen)
            time.sleep(3)
        yield {
            name: {
                "run_id": settings.run_id,
                "records": _records(Path(settings.record_dir)),
                "alerts": {(alert, state): at for (run, alert, state), at in seen.items() if run == settings.run_id},
            }
            for name, settings in jobs.items()
        }


def _timeline(run: dict[str, Any]) -> dict[str, Any]:
    """The run's correctness peak and each audit alert's first pending and firing step, relative to the peak."""
    records = run["records"]
    correctness = _correctness_by_step(records)
    steps = sorted(correctness)
    smoothed = {
        step: sum(correctness[s] for s in steps[max(0, i - SMOOTHING + 1) : i + 1]) / min(i + 1, SMOOTHING)
        for i, step in enumerate(steps)
    }
    peak = max(smoothed, key=lambda step: smoothed[step])
    alerts = {}
    for (alert, state), at in sorted(run["alerts"].items(), key=lambda item: item[1]):
        step = _step_at(records, at)
        alerts[f"{alert} {state}"] = {"step": step, "after_peak": step - peak if step >= 0 else None}
    return {"correctness_peak_step": peak, "correctness_peak": round(smoothed[peak], 3), "alerts": alerts}


def test_the_audit_names_the_gamed_reward_and_stays_silent_on_the_honest_run(audited: dict[str, Any]) -> None:
    """On the gamed run correctness falls while the total rises, and the reward-gaming alerts (RLRewardGaming,
    RLLengthRewardCorrelationRising) go pending or fire; on the honest run neither does. Both timelines are printed
    (pytest -s) with each alert's step relative to the correctness peak."""
    hacked, honest = audited["hacked"], audited["honest"]
    report = {name: _timeline(run) for name, run in audited.items()}
    print(json.dumps(report, indent=2))
    late = _correctness_by_step(hacked["records"])
    last = [late[step] for step in sorted(late)[-SMOOTHING:]]
    assert sum(last) / len(last) < report["hacked"]["correctness_peak"], "the hack did not make correctness fall"
    gaming = {"RLRewardGaming", "RLLengthRewardCorrelationRising"}
    # Pending: the condition held. Whether it then holds for the whole scaled for: (30 s) depends on how fast the
    # ranks step, which the suite's load changes (measured: quiet, both fired; loaded, RLRewardGaming stayed pending).
    assert gaming <= {alert for alert, _ in hacked["alerts"]}, report
    assert not {alert for alert, _ in honest["alerts"]} & gaming, report
