"""Row "Run": is it up, are all ranks in, what are they doing, is the step moving."""

from __future__ import annotations

import otel_rl_contract as contract
from grafana_foundation_sdk.models import dashboard as model
from otel_rl_ops import promql

from rows.panels import PHASE, ROLE, RUN, Row, legend, prom, series, stacked, stat_panel, traffic_light

RANKS_UP = contract.series(contract.RANKS_UP).name
RANKS_EXPECTED = contract.series(contract.RANKS_EXPECTED).name
STEP = contract.series(contract.STEP).name


def row() -> Row:
    """The run row."""
    ranks = series(
        19,
        "Ranks reporting vs expected",
        "Ranks that reported in the collector's last flush (rl_ranks_up: each rank reports 1, the collector sums) "
        "against the world size (rl_ranks_expected), per role. Fewer for minutes: a rank died or hangs "
        "(RLRanksMissing).",
        "short",
        "ranks",
        prom("A", f"sum by ({ROLE}) ({RANKS_UP}{{{RUN}}})", f"{legend(ROLE)} reporting"),
        prom("B", f"max by ({ROLE}) ({RANKS_EXPECTED}{{{RUN}}})", f"{legend(ROLE)} expected"),
    ).min(0)
    phases = stacked(
        series(
            20,
            "Ranks per phase",
            "Ranks in each phase (rl_phase: each rank reports 1 for the phase it declared with set_phase), stacked: "
            "where the run spends its time (generate, score, train, sync, ...).",
            "short",
            "ranks",
            prom("A", f"sum by ({PHASE}) ({contract.series(contract.PHASES).name}{{{RUN}}})", legend(PHASE)),
        ).min(0)
    )
    step_rate = series(
        21,
        "Steps per minute",
        "Training steps per minute, the slope of rl_step (least squares over 5 minutes); 0 while the trainer is "
        "stalled (RLTrainerStalled).",
        "none",
        "steps / min",
        prom("A", f"60 * max(deriv({STEP}{{{RUN}}}[5m]))", "steps per minute"),
    ).min(0)
    state = stat_panel(
        22,
        "Run state",
        "running while the ranks report (rl_run_finished 0); finished once the reporting ranks shut down "
        "cleanly (1); stopped when nothing arrived for 5 minutes and the last word was not a clean shutdown "
        "(RLRunEndedUncleanly).",
        "none",
        prom("A", promql.run_state(RUN), "run state"),
    ).mappings(
        [
            model.ValueMap(
                options={
                    "0": model.ValueMappingResult(text="running", color="blue", index=0),
                    "1": model.ValueMappingResult(text="finished cleanly", color="green", index=1),
                    "2": model.ValueMappingResult(text="stopped without a clean finish", color="red", index=2),
                }
            )
        ]
    )
    duration = stat_panel(
        23,
        "Run duration",
        "From the start of the run's first process (rl_run_start_time_seconds, min over ranks) to its last data "
        "(rl_step).",
        "s",
        prom(
            "A",
            f"max(timestamp({STEP}{{{RUN}}})) - min({contract.series(contract.RUN_START).name}{{{RUN}}})",
            "since the first process started",
        ),
    )
    unchanged = stat_panel(
        24,
        "Time since the step changed",
        "Seconds since rl_step last changed (to 15 s; capped at 6 hours). Grows while the trainer is stalled "
        "or the run has stopped.",
        "s",
        prom("A", promql.seconds_since_step_changed(RUN), "seconds since the step changed"),
    ).thresholds(traffic_light(orange=600, red=1800))
    return Row(
        "Run",
        18,
        (
            ranks.span(8).height(7),
            phases.span(8).height(7),
            step_rate.span(8).height(7),
            state.span(8).height(4),
            duration.span(8).height(4),
            unchanged.span(8).height(4),
        ),
    )
