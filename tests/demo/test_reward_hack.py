"""The audit on a run that games its reward, beside an honest run, through the real stack and the shipped rules.

Two demo jobs run at once, as ``python -m demo --reward-hack`` and ``python -m demo`` run them (4 ranks, 0.25 s
steps; 400 steps with the hack, 200 without: the defaults): ``reward_hack`` (from 30% of the steps on, the format
reward pays every response token, ``demo.task``) and an honest one. The rules are the shipped ones, no overlay: their
windows hold steps, so at the demo's pace the audit judges 15-second windows (about 60 steps). While the jobs run,
the test reads ``ALERTS`` and ``otel-rl status`` of the gamed run every few seconds; right after, the demo's summary
of each run. It reports both timelines with each audit alert's step relative to the step where correctness peaked.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from otel_rl_contract import foreign
from otel_rl_ops.alerts.client import Alertmanager
from otel_rl_ops.query import Prometheus
from otel_rl_ops.report.summary import Sources, summarize
from otel_rl_ops.status import status

from demo.__main__ import _HACK_STEPS, _STEPS, _free_port, run_job
from demo.job import SERVICE_NAME, JobSettings
from tests.dashboards.conftest import rules

pytestmark = pytest.mark.stack

STEPS = {"hacked": _HACK_STEPS, "honest": _STEPS}
"""Each run's steps: the demo's defaults with and without ``--reward-hack``."""
RANKS = 4
AUDIT = tuple(sorted({rule["alert"] for rule in rules() if "alert" in rule and "audit" in rule["labels"]}))
"""Every alert of the audit (label ``audit``, severity notify)."""
POLL_S = 3
"""How often the test reads ALERTS and the gamed run's status while the jobs run."""
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
def audited(shared_stack: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Both runs through the stack with its shipped rules; yields, per run, its records, the first time of each audit
    alert's states, the alerts of every status read of the gamed run, and the demo's summary read right after."""
    prometheus = Prometheus(shared_stack.prometheus_url)
    alertmanager = Alertmanager(shared_stack.alertmanager_url)
    jobs = {}
    for name, hacked in (("hacked", True), ("honest", False)):
        jobs[name] = JobSettings(
            run_id=f"audit-{name}-{time.time_ns() % 10**8}",
            steps=STEPS[name],
            ranks=RANKS,
            exporter="otlp",
            endpoint=shared_stack.otlp_grpc_endpoint,
            record_dir=str(tmp_path_factory.mktemp(f"records-{name}")),
            master_port=_free_port(),
            step_seconds=0.25,
            export_interval_s=1.0,
            reward_hack=hacked,
        )
    sources = {
        name: Sources(shared_stack.prometheus_url, shared_stack.victorialogs_url, settings.run_id)
        for name, settings in jobs.items()
    }
    threads = [threading.Thread(target=run_job, args=(settings,)) for settings in jobs.values()]
    for thread in threads:
        thread.start()
    seen: dict[tuple[str, str, str], float] = {}
    statuses: list[dict[str, Any]] = []
    runs = tuple(settings.run_id for settings in jobs.values())
    while any(thread.is_alive() for thread in threads):
        _watch(prometheus, runs, seen)
        statuses.append(status(sources["hacked"], alertmanager))
        time.sleep(POLL_S)
    for thread in threads:
        thread.join()
    summaries = {
        name: summarize(
            source,
            expected_count=STEPS[name] * RANKS * jobs[name].prompts_per_rank * jobs[name].group_size,
            expected_spans=None,
            service=SERVICE_NAME,
        )
        for name, source in sources.items()
    }
    _watch(prometheus, runs, seen)
    return {
        name: {
            "run_id": settings.run_id,
            "records": _records(Path(settings.record_dir)),
            "alerts": {(alert, state): at for (run, alert, state), at in seen.items() if run == settings.run_id},
            "summary": summaries[name],
            "statuses": statuses if name == "hacked" else [],
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
    ended = max(record["ended_ns"] for record in records) / 1e9
    started = min(record["stepped_ns"][0] for record in records) / 1e9
    return {
        "correctness_peak_step": peak,
        "correctness_peak": round(smoothed[peak], 3),
        "seconds_per_step": round((ended - started) / len(steps), 3),
        "alerts": alerts,
        "summary_alerts": [
            {k: alert[k] for k in ("name", "labels", "state", "since_step", "fired_step", "value")}
            for alert in run["summary"]["alerts"]
        ],
    }


def test_the_audit_names_the_gamed_reward_and_stays_silent_on_the_honest_run(audited: dict[str, Any]) -> None:
    """With the shipped rules: on the gamed run correctness falls while the total rises, RLRewardGaming goes pending
    or fires, ``otel-rl status`` names it with its measured value and the function that rose (format), and the demo's
    summary read right after lists it; on the honest run RLRewardGaming never goes even pending and no audit alert
    fires (its policy turns nearly deterministic in its last steps, which some of the audit's trends see pending:
    docs/runbooks.md, "The audit"). Both timelines are printed (pytest -s) with each alert's step relative to the
    correctness peak."""
    hacked, honest = audited["hacked"], audited["honest"]
    report = {name: _timeline(run) for name, run in audited.items()}
    print(json.dumps(report, indent=2))
    late = _correctness_by_step(hacked["records"])
    last = [late[step] for step in sorted(late)[-SMOOTHING:]]
    assert sum(last) / len(last) < report["hacked"]["correctness_peak"], "the hack did not make correctness fall"
    assert "RLRewardGaming" in {alert for alert, _ in hacked["alerts"]}, report
    named = [
        alert
        for found in hacked["statuses"]
        for alert in found["alerts"]
        if alert["name"] == "RLRewardGaming" and "format rose most" in (alert["summary"] or "")
    ]
    assert named, [found["alerts"] for found in hacked["statuses"]]
    assert "RLRewardGaming" in {alert["name"] for alert in hacked["summary"]["alerts"]}, report
    assert "RLRewardGaming" not in {alert for alert, _ in honest["alerts"]}, report
    assert not {alert for alert, state in honest["alerts"] if state == "firing"}, report
    summarized = {alert["name"]: alert["state"] for alert in honest["summary"]["alerts"]}
    assert "RLRewardGaming" not in summarized and "firing" not in summarized.values(), report


def test_status_prints_the_summary_of_every_alert_it_lists(audited: dict[str, Any]) -> None:
    """Every alert ``otel-rl status`` listed for the gamed run while it ran, pending ones included, had its summary
    (the rule evaluator's rendering while pending, Alertmanager's once firing)."""
    listed = [alert for found in audited["hacked"]["statuses"] for alert in found["alerts"]]
    assert any(alert["state"] == "pending" for alert in listed), listed
    assert all(alert["summary"] for alert in listed), [alert for alert in listed if not alert["summary"]]
