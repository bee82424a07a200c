"""Stuck-stage detection, live (issue 22): four rank processes through the real collector and Prometheus; one rank
hangs inside its train phase while the others go on stepping, and RLPhaseStuck fires naming train, and only train.

Prometheus evaluates a copy of the shipped rules whose only change is RLPhaseStuck's ``for:`` (0 s instead of 1 m:
tests/alerts/overlay.py), with the run's floor lowered to 15 s (a per-run override, as a user writes them), so that
the test waits seconds, not minutes; the threshold itself is the shipped rule's (5 x the phase's p99 over the last
hour, at least the floor). A floor of 5 s once fired for generate during the healthy steps of a suite run on the
loaded 2-core machine."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import otel_rl_contract as contract
import pytest
import requests

from tests.alerts.overlay import write_overlay
from tests.pipeline.harness import RankProcess, eventually, private_stack, start_ranks

RANKS = 4
FLOOR_S = 15.0
HUNG_RANK = 2


@pytest.fixture(scope="module")
def run_id() -> str:
    return f"stuck-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def stack(stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory, run_id: str) -> Iterator[Any]:
    rules = write_overlay(
        tmp_path_factory.mktemp("stuck-rules"),
        shorten={"RLPhaseStuck": "0s"},
        overrides=[(run_id, "phase_stuck_floor_seconds", FLOOR_S)],
    )
    with private_stack(stack_binaries, tmp_path_factory.mktemp("stuck-stack"), rule_files=rules) as running:
        yield running


def _step(ranks: list[RankProcess], step: int) -> None:
    for rank in ranks:
        rank.step(step)
    for rank in ranks:
        rank.phase_enter("generate")
    time.sleep(0.05)
    for rank in ranks:
        rank.phase_leave()
        rank.phase_enter("train")
    time.sleep(0.1)
    for rank in ranks:
        rank.phase_leave()


def _recorded(stack: Any, selector: str, evaluations: int) -> bool:
    """Whether the rule evaluator recorded ``selector`` (a recorded series of the run) ``evaluations`` times or
    more."""
    answer = requests.get(
        f"{stack.prometheus_url}/api/v1/query", params={"query": f"{selector}[5m]"}, timeout=10
    ).json()
    return any(len(series["values"]) >= evaluations for series in answer["data"]["result"])


def _stuck_alerts(stack: Any, run_id: str) -> list[dict[str, Any]]:
    alerts = requests.get(f"{stack.prometheus_url}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
    return [a for a in alerts if a["labels"]["alertname"] == "RLPhaseStuck" and a["labels"]["rl_run_id"] == run_id]


def test_a_rank_hung_in_a_phase_fires_the_alert_naming_it(stack: Any, run_id: str, tmp_path: Path) -> None:
    """Steps of generate then train (p99 well under a second) until the rules recorded the p99: no alert. Then rank 2
    enters train and hangs there,
    still exporting, while ranks 0, 1 and 3 keep stepping: RLPhaseStuck fires for the run with rl_phase_name train,
    its value the time since rank 2 entered it, and never for generate. (A rerun first waits out the alert of the run
    it shares with the failed attempt: an open phase is gone 30 s after its ranks stop reporting it.)"""
    eventually(lambda: _stuck_alerts(stack, run_id) == [], what="no RLPhaseStuck left by an earlier attempt")
    ranks = start_ranks(RANKS, endpoint=stack.otlp_grpc_endpoint, run_id=run_id, histogram="exponential")
    try:
        step, deadline = 0, time.time() + 90
        while time.time() < deadline and not _recorded(
            stack, f'{contract.rules.PHASE_DURATION_P99_1H.name}{{rl_run_id="{run_id}"}}', 2
        ):
            _step(ranks, step)  # a run that keeps stepping until the rules recorded its phases' p99 twice
            step += 1
            assert _stuck_alerts(stack, run_id) == []
        hung = ranks[HUNG_RANK]
        others = [rank for rank in ranks if rank is not hung]
        hung.step(step)
        hung.phase_enter("train")  # and never leaves it
        entered = time.time()
        deadline = time.time() + 90
        firing: list[dict[str, Any]] = []
        while time.time() < deadline and not firing:
            _step(others, step)
            step += 1
            firing = [a for a in _stuck_alerts(stack, run_id) if a["state"] == "firing"]
        assert firing, f"RLPhaseStuck did not fire within 90 s of the hang: {_stuck_alerts(stack, run_id)}"
        fired_after = time.time() - entered
        assert {a["labels"]["rl_phase_name"] for a in _stuck_alerts(stack, run_id)} == {"train"}
        (alert,) = firing
        assert FLOOR_S < float(alert["value"]) <= fired_after + 1
        assert "stuck in phase train" in alert["annotations"]["summary"]
        print(f"RLPhaseStuck fired {fired_after:.1f} s after the rank hung in train (floor {FLOOR_S} s)")
    finally:
        for rank in ranks:
            rank.kill()
