"""otel_rl_ops.alerts.client.run_alerts with the rule evaluator and Alertmanager as fakes of the real clients."""

from __future__ import annotations

from typing import Any

from otel_rl_ops.alerts.client import Alertmanager, run_alerts
from otel_rl_ops.query import Prometheus, QueryError

_PENDING: dict[str, Any] = {
    "labels": {"alertname": "RLRewardGaming", "rl_run_id": "run-a", "window": "15s", "severity": "notify"},
    "annotations": {"summary": "RL run run-a: total reward rose 4.1 std devs; format rose most", "runbook_url": "r"},
    "state": "pending",
    "activeAt": "2026-12-04T22:00:00.000Z",
    "value": "4.1e+00",
}
_FIRING: dict[str, Any] = {
    "labels": {"alertname": "RLStalenessHigh", "rl_run_id": "run-a", "window": "1m", "severity": "warning"},
    "annotations": {"summary": "rendered by the evaluator"},
    "state": "firing",
    "activeAt": "2026-12-04T21:50:00.000Z",
    "value": "1.4e+01",
}


class _Evaluator(Prometheus):
    """Prometheus answering its alerts API (or failing it, as an evaluator without one) and the ALERTS series."""

    def __init__(self, *, api: bool) -> None:
        super().__init__("http://evaluator.invalid")
        self.api = api

    def alerts(self) -> list[dict[str, Any]]:
        if not self.api:
            raise QueryError("Prometheus GET /api/v1/alerts failed: HTTP 404")
        return [_PENDING, _FIRING, {**_PENDING, "labels": {**_PENDING["labels"], "rl_run_id": "run-b"}}]

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        if promql.startswith("ALERTS_FOR_STATE"):
            return [{"metric": {"__name__": "ALERTS_FOR_STATE", **_PENDING["labels"]}, "value": [0, "1796421600"]}]
        pending = {"__name__": "ALERTS", "alertstate": "pending", **_PENDING["labels"]}
        return [{"metric": pending, "value": [0, "1"]}]


class _Manager(Alertmanager):
    """Alertmanager holding the firing alert, with the evaluator's external label."""

    def __init__(self) -> None:
        super().__init__("http://alertmanager.invalid")

    def alerts(self) -> list[dict[str, Any]]:
        labels = {**_FIRING["labels"], "otel_rl_runbook_url": "docs/runbooks.md"}
        return [
            {
                "labels": labels,
                "annotations": {"summary": "RL run run-a: staleness p99 is 14.0 versions"},
                "startsAt": "2026-12-04T21:50:00.000Z",
                "fingerprint": "f1",
                "status": {"state": "active", "silencedBy": [], "inhibitedBy": []},
            }
        ]


def test_pending_alerts_carry_the_summary_the_evaluator_rendered() -> None:
    """A pending alert (which Alertmanager never sees) takes its summary, annotations and start from the evaluator's
    alerts API; a firing one its state and annotations from Alertmanager; other runs' alerts are left out."""
    found = run_alerts(_Evaluator(api=True), _Manager(), "run-a")
    assert [(alert.name, alert.state) for alert in found] == [
        ("RLStalenessHigh", "firing"),
        ("RLRewardGaming", "pending"),
    ]
    firing, pending = found
    assert firing.summary == "RL run run-a: staleness p99 is 14.0 versions"
    assert pending.summary == _PENDING["annotations"]["summary"]
    assert pending.annotations["runbook_url"] == "r"
    assert pending.labels["window"] == "15s" and pending.since == 1796421600.0


def test_without_the_alerts_api_pending_alerts_come_from_the_alerts_series() -> None:
    """An evaluator without the alerts API still gives the pending alert (from ALERTS and ALERTS_FOR_STATE), without
    a summary."""
    found = run_alerts(_Evaluator(api=False), _Manager(), "run-a")
    pending = [alert for alert in found if alert.state == "pending"]
    assert [(alert.name, alert.summary, alert.since) for alert in pending] == [("RLRewardGaming", "", 1796421600.0)]
