"""A drop-in for torchforge's ``record_metric`` and ``record_episode_sample``, on top of otel-rl.

Called the way torchforge's own code calls them (``forge.observability.metrics``): ``record_metric(key, value,
reduction=Reduce.MEAN)``, ``record_metric(table, sample_dict, Reduce.SAMPLE)`` and ``record_episode_sample(table,
episode)`` with torchforge's ``Episode`` objects. What differs, on purpose (docs/contract.md lists it):

- torchforge reduces each key across ranks with its ``Reduce``. otel-rl never reduces in the trainer: every value
  goes out as a mergeable distribution (``rl.metric{rl.metric.key}``: count, sum parts, squares, held extremes),
  so MEAN, SUM, MAX, MIN and STD are all derived after the collector merges the ranks; ``reduction`` only picks
  between a value (all of them) and a sample (``Reduce.SAMPLE``).
- Samples: torchforge keeps the top-1 and bottom-1 of each table per rank and step; here each table keeps its own
  top/bottom-k too (``top_k``/``bottom_k``, default 2 and 2), emitted as ``rl.sample`` log records with
  ``rl.sample.table``. Ties keep the earliest sample. torchforge's sample dict carries ``score`` (the reward again,
  its ranking key: read as the reward when there is no ``reward``) and ``pad_id`` (into ``extra``); its other
  numbers are the reward breakdown.
- Before ``otel_rl.setup()`` every call is a no-op with one warning (torchforge skips and warns once too); nothing
  is configured implicitly. ``FORGE_DISABLE_METRICS=true`` turns every call into a silent no-op, read per call as
  torchforge does.
- Bad input never raises: every function runs under otel-rl's guard (``otel_rl._guard``); what is unusable is
  dropped and counted in ``otel_rl.values.rejected`` (a sample: ``otel_rl.samples.dropped``) like any other call.

>>> import otel_rl
>>> telemetry = otel_rl.setup(otel_rl.TelemetryConfig(run_id="doc", exporter="none"))
>>> record_metric("loss/policy", 0.25, Reduce.MEAN)
>>> record_episode_sample("rollout/sample", {"reward": 1.0, "response": "42"})
>>> otel_rl.reset()
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

import otel_rl_contract as contract

from otel_rl import _global
from otel_rl._guard import guarded_function
from otel_rl._record.inputs import BadInput, as_flag, as_real
from otel_rl._record.samples import EpisodeSample
from otel_rl._state.self_telemetry import SelfTelemetry
from otel_rl._telemetry import Telemetry

__all__ = ["Reduce", "record_episode_sample", "record_metric"]

_logger = logging.getLogger(__name__)
_DISABLE = "FORGE_DISABLE_METRICS"
_FIELDS = frozenset(field.name for field in fields(EpisodeSample))
_EXTRA_KEYS = frozenset({"pad_id"})
"""Numbers of torchforge's sample dict that are not rewards (``Episode.to_dict``: the tokenizer's pad id)."""
_REWARD_ALIAS = "score"
"""torchforge's ranking key in a sample dict, set to the reward (``SampleAccumulator`` sorts by it)."""
_warned: set[str] = set()


def _self_telemetry() -> SelfTelemetry | None:
    telemetry = _global.current()
    return None if telemetry is None else telemetry.self_telemetry


class Reduce(enum.Enum):
    """torchforge's reductions; MEAN..STD are all derivable from what otel-rl exports, SAMPLE marks a sample."""

    MEAN = "mean"
    SUM = "sum"
    MAX = "max"
    MIN = "min"
    STD = "std"
    SAMPLE = "sample"


@guarded_function(contract.METRICS.histogram.name, _self_telemetry, values="value")
def record_metric(key: str, value: Any, reduction: Reduce = Reduce.MEAN) -> None:
    """Record ``value`` under ``key`` (:meth:`otel_rl.Telemetry.record_metric`); with ``Reduce.SAMPLE``, ``value``
    is a sample dict of table ``key`` (torchforge's form: episode fields plus the reward breakdown's keys)."""
    telemetry = _telemetry()
    if telemetry is None:
        return
    if reduction is Reduce.SAMPLE:
        telemetry.record_sample(_sample(value), table=key)
        return
    if not isinstance(reduction, Reduce):
        _warn_once("reduction", f'"reduction" must be a Reduce, got {reduction!r}; the value is recorded all the same')
    telemetry.record_metric(key, value)


@guarded_function(contract.SAMPLE_EVENT, _self_telemetry, values="episode")
def record_episode_sample(table: str, episode: Any) -> None:
    """Offer an episode to the step's top/bottom-k of ``table``: an ``EpisodeSample``, a dict, or a torchforge
    ``Episode`` (read by attribute: episode_id, policy_version, request/prompt, response, target, reward,
    reward_breakdown, advantage, request_len, response_len, truncated)."""
    telemetry = _telemetry()
    if telemetry is not None:
        telemetry.record_sample(_sample(episode), table=table)


def _telemetry() -> Telemetry | None:
    """The process's Telemetry, or None (warned once) before setup; None too when metrics are disabled."""
    if os.environ.get(_DISABLE, "false").strip().lower() == "true":
        return None
    telemetry = _global.current()
    if telemetry is None:
        _warn_once("setup", f"skipping metrics until otel_rl.setup() is called (or set {_DISABLE}=true)")
    return telemetry


def _warn_once(topic: str, message: str) -> None:
    if topic not in _warned:
        _warned.add(topic)
        _logger.warning("otel-rl torchforge shim: %s", message)


def _sample(value: Any) -> Any:
    """An otel-rl sample from what torchforge code passes; anything unusable is returned as is, so that
    ``record_sample`` drops and counts it."""
    if isinstance(value, EpisodeSample):
        return value
    if isinstance(value, Mapping):
        return _from_mapping(value)
    if hasattr(value, "episode_id") or hasattr(value, "reward_breakdown"):
        return _from_episode(value)
    return value


def _from_mapping(values: Mapping[str, Any]) -> dict[str, Any]:
    """torchforge's sample dict: episode fields, plus the reward breakdown flattened into the dict (its ``reward``
    key, or ``score``, is the total). Other numbers join the breakdown; anything else goes to ``extra``. A
    ``reward_breakdown`` or ``extra`` that is not a mapping is left out and counted."""
    sample: dict[str, Any] = {}
    breakdown = _mapping(values, "reward_breakdown")
    extra = _mapping(values, "extra")
    for key, item in values.items():
        if key in ("reward_breakdown", "extra"):
            continue
        if key == "request" and "prompt" not in values:
            sample["prompt"] = item
        elif key in _FIELDS:
            sample[key] = item
        elif key == _REWARD_ALIAS:
            if "reward" not in values:
                sample["reward"] = item
        elif key not in _EXTRA_KEYS and _is_number(item):
            breakdown[str(key)] = item
        else:
            extra[str(key)] = item
    if "reward" not in sample and "reward" in breakdown:
        sample["reward"] = breakdown["reward"]
    breakdown.pop("reward", None)
    sample["reward_breakdown"] = breakdown
    sample["extra"] = extra
    return sample


def _from_episode(episode: Any) -> dict[str, Any]:
    """torchforge's ``Episode`` read by attribute (``request`` is its prompt text; ``truncated`` goes to extra, as a
    bool when it is one)."""
    values: dict[str, Any] = {}
    for name in (
        "episode_id",
        "policy_version",
        "request",
        "prompt",
        "response",
        "target",
        "reward",
        "reward_breakdown",
        "advantage",
        "request_len",
        "response_len",
        "truncated",
    ):
        try:
            item = getattr(episode, name, None)
        except Exception:  # noqa: BLE001 - a property that fails (no completion yet) is just absent
            item = None
        if item is not None:
            values[name] = item
    if "target" in values and not isinstance(values["target"], (str, bytes)):
        values["target"] = str(values["target"])
    if "truncated" in values:
        truncated = values.pop("truncated")
        try:
            values["extra"] = {"truncated": as_flag(truncated, argument="truncated")}
        except BadInput:
            values["extra"] = {"truncated": truncated}  # not one flag: its record keeps it as text
    return _from_mapping(values)


def _mapping(values: Mapping[str, Any], name: str) -> dict[str, Any]:
    """Field ``name`` of a sample dict as a new dict (empty when absent); one that is not a readable mapping is
    counted (``otel_rl.values.rejected{otel_rl.metric="rl.sample", otel_rl.reason="type"}``) and left out."""
    value = values.get(name)
    if value is None:
        return {}
    if isinstance(value, Mapping):
        try:
            return dict(value)
        except Exception:  # noqa: BLE001, S110 - a mapping that cannot be read is counted like a non-mapping
            pass
    self_telemetry = _self_telemetry()
    if self_telemetry is not None:
        self_telemetry.reject(contract.SAMPLE_EVENT, "type", 1, f'sample field "{name}" must be a mapping; left out')
    return {}


def _is_number(value: Any) -> bool:
    """Whether ``value`` is one real number (a Python or numpy number, a one-element tensor), not a bool."""
    try:
        as_real(value, argument="value")
    except BadInput:
        return False
    return True
