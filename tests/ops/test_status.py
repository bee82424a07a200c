"""``otel-rl status``'s screen from a status object: numbers at a readable precision, ``-`` for what a run lacks, a
finished run said to be read as it ended (the object itself is read from the real stack in
tests/pipeline/test_status.py)."""

from __future__ import annotations

import re
from typing import Any

from otel_rl_ops.status import render


def _found(**changes: Any) -> dict[str, Any]:
    sample = {"step": 12, "reward": 0.1234567890123456, "prompt": "2+2?", "response": "4", "episode_id": "e"}
    found: dict[str, Any] = {
        "run_id": "r",
        "at": 10_000.0,
        "last_report": 9_990.0,
        "window_s": 600,
        "step": {"value": 29.0, "unchanged_s": 4.123456789},
        "ranks": {"up": 1.0, "expected": 1.0, "finished": 1.0},
        "reward": {
            "mean": 0.6666666666666666,
            "before": None,
            "change": None,
            "p10": -0.3333333333333333,
            "p50": 0.7071067811865476,
            "p90": 1234.5678901234,
        },
        "ground_truth": None,
        "staleness_p99": 3.0,
        "staleness_p50": 1.0,
        "staleness_max": 4.0,
        "slowest_phase": {"name": "train", "mean_s": 0.012345678},
        "alerts": [],
        "alerts_over_run": [],
        "cost": {
            "gpu_hours": None,
            "so_far": None,
            "per_step": None,
            "per_million_tokens": None,
            "per_solved_group": None,
        },
        "samples": {"top": [sample], "bottom": [{**sample, "reward": -0.987654321987654}]},
    }
    found.update(changes)
    return found


def test_numbers_are_shown_to_three_significant_digits() -> None:
    """No 16-digit reward on the screen: rewards, quantiles and seconds to 3 significant digits, integers whole."""
    screen = render(_found())
    assert "reward        0.667; p10 -0.333, p50 0.707, p90 1234.6" in screen
    assert "staleness     p50 1, p99 3, max 4" in screen
    assert "step 12 reward 0.123: 2+2? -> 4" in screen and "step 12 reward -0.988: 2+2? -> 4" in screen
    assert "step          29 (unchanged for 4.12 s)" in screen and "train (0.0123 s mean)" in screen
    assert not re.search(r"\d\.\d{5,}", screen)


def test_what_a_run_lacks_is_a_dash_and_an_ended_run_says_so() -> None:
    """Missing values print as ``-``; a run whose last report is older than the window is read as it ended."""
    empty: dict[str, list[dict[str, Any]]] = {"top": [], "bottom": []}
    quantiles = {"p10": None, "p50": None, "p90": None}
    screen = render(
        _found(last_report=1_000.0, staleness_p99=None, samples=empty, reward={**_found()["reward"], **quantiles})
    )
    assert screen.splitlines()[0] == "run r (last report 150 min ago: as it ended)"
    assert "p10 -, p50 -, p90 -" in screen and "p99 -" in screen
    assert "  worst samples\n    -" in screen
    assert render(_found()).splitlines()[0] == "run r"
