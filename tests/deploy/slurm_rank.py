"""One rank of the SLURM test's job (``python slurm_rank.py OUT``, a copy run by the installed trainer library's
interpreter: it imports nothing of the checkout): ``otel_rl.setup()`` from the environment ``otel-rl agent exec``
gave it, the rewards :func:`rewards` names for its rank, and ``OUT/rank-N.json`` with the variables it ran with."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

import otel_rl

SEEN = (
    "SLURM_JOB_ID",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURMD_NODENAME",
    "OTEL_RL_RUN_ID",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)


def rewards(rank: int) -> list[float]:
    """The rewards rank ``rank`` records: multiples of 1/4, so sums compare exactly."""
    return [rank + 0.25 * i for i in range(5)]


def main(out: Path) -> None:
    telemetry = otel_rl.setup()
    rank = int(os.environ["SLURM_PROCID"])
    telemetry.step(1)
    telemetry.record_rewards(torch.tensor(rewards(rank), dtype=torch.float64))
    telemetry.shutdown()
    (out / f"rank-{rank}.json").write_text(json.dumps({name: os.environ.get(name) for name in SEEN}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
