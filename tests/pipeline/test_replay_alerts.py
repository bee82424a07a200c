"""Alerts after the fact: an offline run whose staleness runs away (the demo's runaway: the generator gets no new
weights, so every step's tokens are a version older), replayed three days after it ran: ``otel-rl status`` and the
report list RLStalenessHigh with when it fired, as Prometheus's rule engine decided it over the replayed range
(pipeline)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from otel_rl_ops.alerts.client import Alertmanager
from otel_rl_ops.query import Prometheus
from otel_rl_ops.report.summary import Sources, alerts, summary_rows
from otel_rl_ops.status import render, status

import otel_rl
from tests.pipeline.harness import eventually, private_stack
from tests.pipeline.test_replay import _replay

RUN = "replay-runaway"
RANKS = 2
STEP_S = 10
STEPS = 150
"""25 minutes of run: staleness p99 passes RLStalenessHigh's 8 versions at step 9, 90 s in, and stays above for the
rule's 10 minutes."""
START_S = float(int(time.time()) // 3600 * 3600 - 3 * 86400)
"""Three days before now: the run lies behind any head block."""


def _record(folder: Path) -> None:
    """Both ranks record one step every STEP_S seconds of their (injected) clock; the tokens of step s were generated
    with the policy of step 0 (the runaway), so their staleness is s; every step's points and spans are written."""
    now = [int(START_S * 1e9)]

    def clock() -> int:
        return now[0]

    ranks = [
        otel_rl.Telemetry(
            otel_rl.TelemetryConfig(
                run_id=RUN,
                rank=rank,
                world_size=RANKS,
                exporter="file",
                output_dir=str(folder),
                export_interval_s=3600,
                service_name="otel-rl-test",
            ),
            clock=clock,
        )
        for rank in range(RANKS)
    ]
    for step in range(STEPS):
        now[0] = int((START_S + step * STEP_S) * 1e9)
        for telemetry in ranks:
            telemetry.step(step)
            telemetry.record_rewards([0.5, 0.25])
            telemetry.record_staleness([0] * 8, step)
            assert telemetry.flush(30)
    for telemetry in ranks:
        assert telemetry.shutdown(30)


def test_a_replayed_runaway_lists_the_staleness_alert_with_when_it_fired(stack_binaries: Any, tmp_path: Path) -> None:
    """RLStalenessHigh (signal staleness_p99) is listed by status for the replayed run: pending from about when the
    p99 passed 8 versions (step 9), firing 10 minutes (its ``for``) later, until the run's end."""
    _record(tmp_path / "files")
    with private_stack(stack_binaries, tmp_path / "stack") as stack:
        summary = _replay(stack, tmp_path / "files")
        assert summary["problems"] == []
        assert [alert["name"] for alert in summary["metrics"]["alerts"] if alert["name"] == "RLStalenessHigh"]
        prometheus = Prometheus(stack.prometheus_url)
        end = START_S + STEPS * STEP_S + 600
        sources = Sources(stack.prometheus_url, stack.victorialogs_url, RUN)

        def found() -> dict[str, Any]:
            return status(sources, Alertmanager(stack.alertmanager_url), now=end)

        history = eventually(lambda: found()["alerts_over_run"], what="the replayed run's ALERTS", timeout_s=150)
        p99 = [alert for alert in history if alert["name"] == "RLStalenessHigh" and alert["signal"] == "staleness_p99"]
        assert len(p99) == 1, history
        crossed = START_S + 9 * STEP_S
        assert crossed <= p99[0]["pending_at"] <= crossed + 60 + 15
        assert p99[0]["fired_at"] is not None and p99[0]["fired_at"] - p99[0]["pending_at"] >= 600
        assert p99[0]["last_firing_at"] >= START_S + (STEPS - 1) * STEP_S
        assert "RLStalenessHigh (staleness_p99) pending" in render(found())
        raised = alerts(sources, START_S, START_S + STEPS * STEP_S + 600)
        rows = summary_rows({"alerts": raised})
        p99_rows = [value for key, value in rows if key.startswith("alert RLStalenessHigh") and "staleness_p99" in key]
        assert p99_rows and all(value.startswith("firing from step ") for value in p99_rows), rows
        assert prometheus.series(f'{{rl_run_id="{RUN}",__name__="rl:staleness_p99:rate1m"}}')
