"""A migration shim for torchforge users: ``record_metric`` and ``record_episode_sample`` on top of otel-rl.

torchforge reduces each metric across ranks with a :class:`Reduce`. otel-rl never reduces in the trainer: every
value goes out as a mergeable distribution (``rl.metric`` histogram with sum parts, squares and window extremes,
see ``docs/contract.md``), so MEAN, SUM, MAX, MIN and STD are all derived after the collector merges the ranks.
``reduce`` is validated and recorded as the ``rl.metric.reduce`` hint of the key's first call only in the docs:
it does not change what is exported. Keys containing ``reward`` still go to ``rl.metric``; record rewards with
:meth:`otel_rl.Telemetry.record_rewards` to get the reward histogram and its dashboards.

>>> import otel_rl
>>> telemetry = otel_rl.setup(otel_rl.TelemetryConfig(run_id="doc", exporter="none"))
>>> record_metric("loss/policy", 0.25, Reduce.MEAN)
>>> record_episode_sample("rollouts", {"reward": 1.0, "response": "42"})
>>> otel_rl.reset()
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from otel_rl._global import get_telemetry
from otel_rl._samples import EpisodeSample

__all__ = ["Reduce", "record_episode_sample", "record_metric"]


class Reduce(enum.Enum):
    """torchforge's reductions; all are derivable from what otel-rl exports."""

    MEAN = "mean"
    SUM = "sum"
    MAX = "max"
    MIN = "min"
    STD = "std"


def record_metric(key: str, value: Any, reduce: Reduce = Reduce.MEAN) -> None:
    """Record ``value`` (a number or tensor of numbers) under ``key``; see :meth:`otel_rl.Telemetry.record_metric`.

    An unknown ``reduce`` is a programming error and raises ``ValueError`` at once.
    """
    if not isinstance(reduce, Reduce):
        raise ValueError(f'"reduce" must be a Reduce ({", ".join(r.name for r in Reduce)}), got {reduce!r}')
    get_telemetry().record_metric(key, value)


def record_episode_sample(key: str, sample: EpisodeSample | Mapping[str, Any]) -> None:
    """Offer an episode to the step's sample filter; ``key`` (torchforge's table name) goes to ``extra["table"]``."""
    if isinstance(sample, EpisodeSample):
        extra = {**sample.extra, "table": key}
        sample = EpisodeSample(**{**{f: getattr(sample, f) for f in sample.__dataclass_fields__}, "extra": extra})
    else:
        sample = {**sample, "extra": {**dict(sample.get("extra") or {}), "table": key}}
    get_telemetry().record_sample(sample)
