"""The demo's runaway (``python -m demo --provoke-alert``) without a stack: after the steps, the ranks keep training
while the rollout generator gets no new weights, staleness grows a version a step, and every rank stops at the same
step once the main process says so (rank 0 broadcasts it, so the gradients' all-reduce never waits on a rank that
left). The ranks write what they recorded (the file exporter), which this test reads."""

from __future__ import annotations

import json
import socket
from pathlib import Path

STEPS, RANKS, STOP_AFTER = 4, 2, 6


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_runaway_grows_staleness_until_told_and_every_rank_stops_together(tmp_path: Path) -> None:
    """Two ranks, 4 steps, then the runaway until runaway_until answers true (its 6th call): both ranks trained the
    same steps beyond 4, and the newest staleness of each step grows by one a step there, while the policy version
    the generator samples from stays the last one published."""
    from demo.__main__ import run_job
    from demo.job import JobSettings

    asked: list[int] = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) >= STOP_AFTER

    settings = JobSettings(
        run_id="runaway-test",
        steps=STEPS,
        ranks=RANKS,
        exporter="none",
        endpoint=None,
        record_dir=str(tmp_path),
        master_port=_free_port(),
        step_seconds=0.2,
        runaway=True,
    )
    run_job(settings, runaway_until=stop)
    records = {rank: [json.loads(line) for line in (tmp_path / f"rank-{rank}.jsonl").open()] for rank in range(RANKS)}
    steps = {rank: [r["step"] for r in rows] for rank, rows in records.items()}
    assert steps[0] == steps[1] and len(steps[0]) > STEPS + 1 and steps[0] == list(range(len(steps[0])))
    for rows in records.values():
        newest_lag = [min(r["staleness"]) for r in rows[STEPS:]]
        assert newest_lag == list(range(newest_lag[0], newest_lag[0] + len(newest_lag))), newest_lag
