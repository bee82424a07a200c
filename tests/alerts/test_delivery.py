"""Alerts delivered for real: rank processes -> the collector -> Prometheus (or Thanos receivers, querier and Ruler)
evaluating the shipped rules -> Alertmanager with the shipped configuration -> a webhook receiver (a real HTTP
server, otel_rl_ops.alerts.webhook). The only change to the shipped rules is the documented overlay (tests/alerts/
overlay.py): the ``for:`` of the alerts waited for is 15 s; their expressions, 5-minute windows included, are the
shipped ones, and so are Alertmanager's grouping, waits and inhibitions.

Every case runs at once, because the slowest one sets the module's time: a run SIGKILLed at the start pages once its
telemetry has been absent for 5 minutes (the rules' window). Meanwhile, in the same stack, a run whose staleness runs
away pages and resolves, a run with the same staleness and a higher per-run threshold stays silent, a run silenced
with ``otel-rl alerts --silence`` is held back; and in a stack of the cluster profile a fourth run's runaway pages
through Thanos Ruler. Four ranks per run (two for the silenced one).
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from otel_rl_contract import foreign, rules
from otel_rl_ops import promql
from otel_rl_ops.alerts.client import Alertmanager, RunAlert, run_alerts
from otel_rl_ops.alerts.webhook import Notification, WebhookReceiver
from otel_rl_ops.query import Prometheus
from otel_rl_ops.stack import versions
from otel_rl_ops.stack.env import otel_rl_home
from otel_rl_ops.stack.gotools import ensure_go_binary

from tests.alerts.overlay import write_overlay
from tests.pipeline.harness import RankProcess, eventually, private_stack, start_ranks

GRAFANA = "https://grafana.example/grafana"
RUNBOOKS = "https://docs.example/otel-rl/runbooks.md"
FOR = "15s"
"""The overlay's ``for:`` of the alerts waited for (the shipped ones: RLStalenessHigh 10m, the lifecycle ones 1m)."""
THRESHOLD = 8.0
"""The shipped default of ``staleness_p99``; the tolerant run's override is :data:`TOLERANT_THRESHOLD`."""
TOLERANT_THRESHOLD = 100.0
CALM_STEPS = 12
"""Steps with every token 1 version behind before the lag runs away."""
PEAK_LAG = 20
"""The lag the runaway climbs to (2 versions a step) and holds: above the p99 threshold, below staleness_max's 32."""
STEP_S = 1.0
TOKENS = 64
"""Tokens per rank and step."""


@dataclass
class Run:
    """One run of the module: its ranks, and when its lag first exceeded the threshold and when it recovered."""

    run_id: str
    ranks: list[RankProcess]
    crossed_at: float | None = None
    recover: threading.Event = field(default_factory=threading.Event)
    recovered_at: float | None = None
    recover_once: Callable[[], bool] | None = None
    """Asked every step while the lag runs away: a true answer sets ``recover``."""


@dataclass
class World:
    """Both stacks, their webhook receivers and the runs."""

    stack: Any
    webhook: WebhookReceiver
    cluster: Any
    cluster_webhook: WebhookReceiver
    runs: dict[str, Run]
    killed_run: str
    killed_at: float
    silence_output: str
    prometheus: Prometheus = dataclasses.field(init=False)
    alertmanager: Alertmanager = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.prometheus = Prometheus(self.stack.prometheus_url)
        self.alertmanager = Alertmanager(self.stack.alertmanager_url)


def _step_all(runs: list[Run], step: int) -> None:
    """One step on every rank of ``runs``: a lag of 1 while calm, then +2 a step up to PEAK_LAG until the run's
    ``recover`` is set, then 1 again; each token's version is the step minus that lag minus 0 or 1."""
    rng = np.random.default_rng(step)
    for run in runs:
        if not run.recover.is_set() and run.recover_once is not None and run.recover_once():
            run.recover.set()
        if run.recover.is_set():
            lag = 1
            if run.recovered_at is None:
                run.recovered_at = time.time()
        else:
            lag = 1 if step < CALM_STEPS else min(PEAK_LAG, 1 + 2 * (step - CALM_STEPS + 1))
        for rank in run.ranks:
            rank.step(step)
            versions = (step - lag - rng.integers(0, 2, TOKENS)).clip(0).tolist()
            rank.staleness(versions, step)
            rank.rewards(rng.random(8).tolist())
        if lag > THRESHOLD and run.crossed_at is None:
            run.crossed_at = time.time()


def _drive(runs: list[Run], stop: threading.Event) -> None:
    step = 0
    while not stop.is_set():
        started = time.monotonic()
        _step_all(runs, step)
        step += 1
        stop.wait(max(0.0, STEP_S - (time.monotonic() - started)))


def _ranks(stack: Any, run_id: str, count: int) -> list[RankProcess]:
    return start_ranks(
        count, endpoint=stack.otlp_grpc_endpoint, run_id=run_id, histogram="exponential", export_interval_s=0.5
    )


@pytest.fixture(scope="module")
def world(stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """Both stacks with every run going: the killed run's ranks are SIGKILLed after three steps; the silenced run is
    silenced (``otel-rl alerts --silence``) before its ranks start; the runaway, tolerant, silenced and cluster runs
    are stepped once a second by one thread until the module ends (then shut down cleanly)."""
    from otel_rl_ops.cli import main

    state = tmp_path_factory.mktemp("alerts")
    uid = uuid.uuid4().hex[:6]
    names = {
        "runaway": f'alerts "runaway" {uid}',  # a quote and spaces: the links and the threshold query escape them
        "tolerant": f"alerts-tolerant-{uid}",
        "silenced": f"alerts silenced & {uid}",
        "killed": f"alerts-killed-{uid}",
        "cluster": f"alerts-cluster-{uid}",
    }
    rule_files = write_overlay(
        state / "rules",
        shorten={"RLStalenessHigh": FOR, "RLTelemetryAbsent": FOR, "RLRunEndedUncleanly": FOR},
        overrides=[(names["tolerant"], "staleness_p99", TOLERANT_THRESHOLD)],
    )
    links = {"rule_files": rule_files, "grafana_url": GRAFANA, "runbook_url": RUNBOOKS}
    thanos = dataclasses.replace(stack_binaries, thanos=ensure_go_binary(versions.THANOS, home=otel_rl_home()))
    stop = threading.Event()
    with ExitStack() as cleanup:
        webhook = cleanup.enter_context(WebhookReceiver())
        cluster_webhook = cleanup.enter_context(WebhookReceiver())
        stack = cleanup.enter_context(
            private_stack(stack_binaries, state / "stack", alert_webhook_url=webhook.url, **links)
        )
        killed = _ranks(stack, names["killed"], 4)
        _step_all([Run(names["killed"], killed)], 0)
        for step in (1, 2):
            time.sleep(STEP_S)
            _step_all([Run(names["killed"], killed)], step)
        assert all(rank.flush() for rank in killed)
        for rank in killed:
            rank.kill()
        killed_at = time.time()
        silence_output = _cli(
            main,
            ["alerts", "--silence", names["silenced"], "--for", "2h", "--alertmanager-url", stack.alertmanager_url],
        )
        cluster = cleanup.enter_context(
            private_stack(thanos, state / "cluster", tsdb_cluster=True, alert_webhook_url=cluster_webhook.url, **links)
        )
        runs = {
            name: Run(
                names[name],
                _ranks(cluster if name == "cluster" else stack, names[name], 2 if name == "silenced" else 4),
            )
            for name in ("runaway", "tolerant", "silenced", "cluster")
        }
        for run in runs.values():
            for rank in run.ranks:
                cleanup.callback(rank.kill)
        cluster_run = runs["cluster"].run_id

        def cluster_paged() -> bool:
            def firing(n: Notification) -> bool:
                return n.body.get("groupLabels", {}).get("rl_run_id") == cluster_run and n.status == "firing"

            return cluster_webhook.wait_for(firing, timeout_s=0) is not None

        runs["cluster"].recover_once = cluster_paged
        driver = threading.Thread(target=_drive, args=(list(runs.values()), stop), daemon=True)
        driver.start()
        try:
            yield World(
                stack=stack,
                webhook=webhook,
                cluster=cluster,
                cluster_webhook=cluster_webhook,
                runs=runs,
                killed_run=names["killed"],
                killed_at=killed_at,
                silence_output=silence_output,
            )
        finally:
            stop.set()
            driver.join(30)
            for run in runs.values():
                for rank in run.ranks:
                    rank.shutdown()


def _cli(main: Any, argv: list[str]) -> str:
    """Run ``otel-rl`` in this process and return what it printed."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0, out.getvalue()
    return out.getvalue()


def _notified(webhook: WebhookReceiver, run_id: str, alert: str, status: str, *, timeout_s: float) -> Notification:
    """The first notification of ``run_id``'s group in which ``alert`` has ``status``."""
    found = webhook.wait_for(
        lambda n: (
            n.body.get("groupLabels", {}).get("rl_run_id") == run_id and bool(n.alerts_named(alert, status=status))
        ),
        timeout_s=timeout_s,
    )
    assert found is not None, f"no {status} {alert} of {run_id!r} within {timeout_s} s: {webhook.notifications()!r}"
    return found


def _first_above(prometheus: Prometheus, series: str, threshold: float, start: float, end: float) -> float | None:
    """The time of the first sample of a recorded series above ``threshold`` between ``start`` and ``end`` (its
    points are the rule evaluations, every 15 s)."""
    for item in prometheus.range(series, start, end, step=1.0):
        for at, value in item["values"]:
            if float(value) > threshold:
                return float(at)
    return None


def _check_staleness_notification(notification: Notification, run_id: str, *, threshold: float) -> float:
    """The webhook notification carries the run's labels, the measured value and the run's threshold, and links to
    the runbook and to the dashboard with the run preselected; returns the value."""
    (alert,) = notification.alerts_named("RLStalenessHigh", status="firing")
    labels, annotations = alert["labels"], alert["annotations"]
    assert labels["rl_run_id"] == run_id and labels["signal"] == "staleness_p99" and labels["severity"] == "warning"
    assert labels["job"] == "otel-rl-test" and labels["rl_role"] == "trainer"
    summary = re.fullmatch(rf"RL run {re.escape(run_id)}: staleness p99 is ([\d.]+) versions", annotations["summary"])
    assert summary is not None, annotations["summary"]
    value = float(summary.group(1))
    assert threshold < value <= PEAK_LAG + 1
    assert f"is {value:.1f} versions, above the run's threshold of {threshold:g} versions" in annotations["description"]
    assert annotations["runbook_url"] == f"{RUNBOOKS}#rlstalenesshigh"
    assert annotations["dashboard_url"] == f"{GRAFANA}/d/otel-rl-run/rl-run?var-run={urllib.parse.quote_plus(run_id)}"
    assert notification.body["receiver"] == "notify" and notification.body["groupLabels"] == {"rl_run_id": run_id}
    return value


def test_staleness_runaway_pages_then_resolves(world: World) -> None:
    """A 4-rank run whose staleness runs away: RLStalenessHigh is pending (``otel-rl alerts``), then reaches the webhook
    with the run's labels, the measured p99 and its threshold, the runbook and dashboard links; once the lag is back
    to 1 version a resolved notification follows. Prints the latencies (docs/dashboards.md, "Delivering alerts")."""
    run = world.runs["runaway"]
    seen: set[str] = set()

    def firing() -> bool:
        states = {
            a.state for a in run_alerts(world.prometheus, world.alertmanager, run.run_id) if a.name == "RLStalenessHigh"
        }
        seen.update(states)
        return "firing" in states

    eventually(firing, what="RLStalenessHigh firing", timeout_s=240)
    assert "pending" in seen, seen
    notification = _notified(world.webhook, run.run_id, "RLStalenessHigh", "firing", timeout_s=90)
    value = _check_staleness_notification(notification, run.run_id, threshold=THRESHOLD)
    from otel_rl_ops.cli import main

    listed = _cli(
        main,
        [
            "alerts",
            "--run",
            run.run_id,
            "--prometheus-url",
            world.stack.prometheus_url,
            "--alertmanager-url",
            world.stack.alertmanager_url,
        ],
    )
    row = next(line for line in listed.splitlines() if "RLStalenessHigh (staleness_p99)" in line)
    assert row.startswith(run.run_id) and " firing " in row and "staleness p99 is" in row, listed
    assert f"dashboard: {GRAFANA}/d/otel-rl-run/" in listed and f"runbook: {RUNBOOKS}#rlstalenesshigh" in listed
    assert run.crossed_at is not None
    recorded = _first_above(
        world.prometheus,
        promql.selector(rules.STALENESS_P99.at("1m"), rl_run_id=run.run_id),
        THRESHOLD,
        run.crossed_at - 30,
        notification.received_at,
    )
    assert recorded is not None and run.crossed_at - 1 <= recorded <= notification.received_at
    run.recover.set()
    resolved = _notified(world.webhook, run.run_id, "RLStalenessHigh", "resolved", timeout_s=300)
    assert run.recovered_at is not None
    print(
        f"\nRLStalenessHigh (for: {FOR}): value {value}; ranks crossed {THRESHOLD:g} -> rule recorded above it "
        f"{recorded - run.crossed_at:.1f} s -> webhook {notification.received_at - recorded:.1f} s "
        f"(crossing -> notification {notification.received_at - run.crossed_at:.1f} s); lag back to 1 -> resolved "
        f"{resolved.received_at - run.recovered_at:.1f} s"
    )


def _staleness_alerts(world: World, run_id: str) -> list[RunAlert]:
    return [a for a in run_alerts(world.prometheus, world.alertmanager, run_id) if a.name == "RLStalenessHigh"]


def test_higher_per_run_threshold_keeps_its_run_silent(world: World) -> None:
    """The tolerant run has the runaway's staleness and an override of staleness_p99 to 100: its threshold series
    reads 100, its p99 is above the default 8, and RLStalenessHigh is neither pending nor firing for it, nor in any
    notification, while the runaway run (threshold 8) paged."""
    run = world.runs["tolerant"]
    _notified(world.webhook, world.runs["runaway"].run_id, "RLStalenessHigh", "firing", timeout_s=300)
    threshold = promql.selector(rules.ALERT_THRESHOLD, rl_run_id=run.run_id, threshold="staleness_p99")
    assert world.prometheus.value(threshold) == TOLERANT_THRESHOLD
    p99 = world.prometheus.value(
        f"max_over_time({promql.selector(rules.STALENESS_P99.at('1m'), rl_run_id=run.run_id)}[5m])"
    )
    assert p99 is not None and THRESHOLD < p99 < TOLERANT_THRESHOLD
    ever = world.prometheus.query(
        f"max_over_time({promql.selector(foreign.ALERTS, rl_run_id=run.run_id, alertname='RLStalenessHigh')}[30m])"
    )
    assert ever == [] and _staleness_alerts(world, run.run_id) == []
    assert not any(n.body.get("commonLabels", {}).get("rl_run_id") == run.run_id for n in world.webhook.notifications())


def test_silence_from_the_cli_holds_the_notification_back(world: World) -> None:
    """The run silenced with ``otel-rl alerts --silence RUN --for 2h`` before it started: its RLStalenessHigh fires
    in Prometheus, Alertmanager holds it as silenced by that silence (2 hours, an exact match on its run id), and no
    notification of the run reaches the webhook by the time the runaway run's second one (resolved) did."""
    run = world.runs["silenced"]
    silenced = re.search(r"\(silence ([0-9a-f-]+),", world.silence_output)
    assert silenced is not None, world.silence_output
    silence_id = silenced.group(1)
    (silence,) = [s for s in world.alertmanager.silences() if s["id"] == silence_id]
    assert silence["matchers"] == [{"name": "rl_run_id", "value": run.run_id, "isRegex": False, "isEqual": True}]
    assert silence["status"]["state"] == "active"
    assert 2 * 3600 - 600 < _seconds(silence["endsAt"]) - _seconds(silence["startsAt"]) <= 2 * 3600 + 1
    held = eventually(
        lambda: [a for a in _staleness_alerts(world, run.run_id) if a.state == "silenced"],
        what="the silenced run's alert held by the silence",
        timeout_s=300,
    )
    assert held[0].held_by == (silence_id,)
    _notified(world.webhook, world.runs["runaway"].run_id, "RLStalenessHigh", "resolved", timeout_s=300)
    assert held[0].since is not None and time.time() - held[0].since > 60  # past group_wait (30 s)
    assert not any(run.run_id in str(n.body) for n in world.webhook.notifications())


def _seconds(text: str) -> float:
    from otel_rl_ops.alerts.client import _unix

    seconds = _unix(text)
    assert seconds is not None, text
    return seconds


def test_routes_by_severity_and_missing_ranks_inhibit_the_run_signals(world: World) -> None:
    """Alertmanager with the shipped configuration, fed directly (as a rule evaluator does): a critical alert goes
    to the receiver "page", a warning one to "notify"; a run with RLRanksMissing firing gets one notification with
    that alert only, its RLStalenessHigh and RLRewardCollapse inhibited, while the same signals of another run are
    delivered."""
    uid = uuid.uuid4().hex[:6]
    degraded, other, critical = f"degraded-{uid}", f"healthy-{uid}", f"critical-{uid}"
    common = {"job": "trainer", "rl_role": "trainer", "severity": "warning"}
    alerts = [
        {"labels": {"alertname": "RLRanksMissing", "rl_run_id": degraded, **common}},
        *(
            {"labels": {"alertname": name, "rl_run_id": run_id, "signal": "x", **common}}
            for name in ("RLStalenessHigh", "RLRewardCollapse")
            for run_id in (degraded, other)
        ),
        {"labels": {"alertname": "AnyCriticalAlert", "rl_run_id": critical, **common, "severity": "critical"}},
    ]
    world.alertmanager.post_alerts(alerts)
    page = _notified(world.webhook, critical, "AnyCriticalAlert", "firing", timeout_s=60)
    assert page.body["receiver"] == "page"
    notify = _notified(world.webhook, degraded, "RLRanksMissing", "firing", timeout_s=90)
    assert notify.body["receiver"] == "notify"
    assert [a["labels"]["alertname"] for a in notify.alerts] == ["RLRanksMissing"]
    delivered = _notified(world.webhook, other, "RLStalenessHigh", "firing", timeout_s=30)
    assert sorted(a["labels"]["alertname"] for a in delivered.alerts) == ["RLRewardCollapse", "RLStalenessHigh"]
    held = {a.name: a for a in run_alerts(world.prometheus, world.alertmanager, degraded)}
    assert held["RLStalenessHigh"].state == held["RLRewardCollapse"].state == "inhibited"
    assert held["RLStalenessHigh"].held_by == ("RLRanksMissing",)


def test_cluster_profile_pages_through_thanos_ruler(world: World) -> None:
    """In the cluster profile (two Thanos receivers, a querier, Thanos Ruler; no Prometheus) the same rule files
    evaluated by the ruler against the querier page for a runaway run: the notification reaches the webhook with the
    run's labels, value, threshold and links; the ruler's ALERTS series are read through the querier; once the lag
    is back to 1 (the driver sets it when the notification arrived) a resolved notification follows."""
    run = world.runs["cluster"]
    assert "thanos-rule" in world.cluster.component_names and "prometheus" not in world.cluster.component_names
    notification = _notified(world.cluster_webhook, run.run_id, "RLStalenessHigh", "firing", timeout_s=300)
    value = _check_staleness_notification(notification, run.run_id, threshold=THRESHOLD)
    querier = Prometheus(world.cluster.prometheus_url)
    firing = promql.selector(foreign.ALERTS, rl_run_id=run.run_id, alertname="RLStalenessHigh", alertstate="firing")
    ever = f"max_over_time({firing}[30m])"
    (series,) = querier.query(ever)
    assert series["metric"]["otel_rl_grafana_url"] == GRAFANA  # the ruler's external label on what it recorded
    resolved = _notified(world.cluster_webhook, run.run_id, "RLStalenessHigh", "resolved", timeout_s=300)
    assert run.crossed_at is not None and run.recovered_at is not None
    print(
        f"\ncluster: RLStalenessHigh through Thanos Ruler (for: {FOR}): value {value}; crossing -> notification "
        f"{notification.received_at - run.crossed_at:.1f} s; lag back to 1 -> resolved "
        f"{resolved.received_at - run.recovered_at:.1f} s"
    )


def test_killed_run_pages_once(world: World) -> None:
    """The 4-rank run SIGKILLed after three steps: 5 minutes later (the rules' window) RLRunEndedUncleanly reaches the
    webhook with the run's last step; RLTelemetryAbsent fires too (in Prometheus) but Alertmanager inhibits it, so
    no notification carries it."""
    run_id = world.killed_run
    notification = _notified(world.webhook, run_id, "RLRunEndedUncleanly", "firing", timeout_s=480)
    (alert,) = notification.alerts_named("RLRunEndedUncleanly")
    assert alert["labels"]["rl_run_id"] == run_id and "last at step 2:" in alert["annotations"]["description"]
    assert alert["annotations"]["runbook_url"] == f"{RUNBOOKS}#rlrunendeduncleanly"
    absent = promql.selector(foreign.ALERTS, rl_run_id=run_id, alertname="RLTelemetryAbsent", alertstate="firing")
    assert world.prometheus.query(absent), "RLTelemetryAbsent must fire for the killed run"
    held = eventually(
        lambda: [
            a
            for a in run_alerts(world.prometheus, world.alertmanager, run_id)
            if a.name == "RLTelemetryAbsent" and a.state == "inhibited"
        ],
        what="RLTelemetryAbsent inhibited",
        timeout_s=60,
    )
    assert held[0].held_by == ("RLRunEndedUncleanly",)
    assert not any(n.alerts_named("RLTelemetryAbsent") for n in world.webhook.notifications())
    print(
        "\nkilled run: SIGKILL -> RLRunEndedUncleanly at the webhook "
        f"{notification.received_at - world.killed_at:.1f} s "
        "(5 minutes of absence, then for: 15 s and Alertmanager's group_wait)"
    )
