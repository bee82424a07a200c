"""The steps both cluster tests drive: every rank records rewards and offers five samples per step."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tests.pipeline.harness import RankProcess

SAMPLES_PER_STEP = 5


def record_steps(
    ranks: Sequence[RankProcess],
    first: int,
    count: int,
    rewards: Callable[[RankProcess, int], list[float]],
    recorded: dict[str, list[float]],
) -> None:
    """Steps ``first`` .. ``first + count - 1`` on every rank: ``rewards(rank, step)`` recorded (and appended to the
    run's list in ``recorded``), five samples offered; then the next step begins, which emits the last step's
    samples, and every rank flushes."""
    for step in range(first, first + count):
        for rank in ranks:
            rank.step(step)
            values = rewards(rank, step)
            rank.rewards(values)
            recorded[rank.run_id].extend(values)
            for index in range(SAMPLES_PER_STEP):
                rank.sample(reward=float(index), episode_id=f"{rank.run_id}-{rank.rank}-{step}-{index}")
    for rank in ranks:
        rank.step(first + count)
        assert rank.flush()
