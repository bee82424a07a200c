"""Prompt-group outcomes of record_rollouts are exact or counted: against a plain-Python reference, over Python lists
(None, strings, bools, huge ints, floats), numpy arrays of every integer dtype and torch tensors, every rollout
offered either takes part in its group's outcome or is counted under its reason (docs/contract.md)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any

import numpy as np
import otel_rl_contract as contract
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_rl import Telemetry, TelemetryConfig
from otel_rl._record.buckets import Layouts
from otel_rl._record.rollouts import Rollouts, RolloutStatistics, RolloutSummarizer
from tests.conftest import EXPORT_WAIT_S, RecordingMetricExporter

LAYOUTS = Layouts.resolve("exponential", scale=5)
SOLVED = 1.0
INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
FLOAT_DTYPES = [np.float32, np.float64]


# -- the reference ---------------------------------------------------------------------------------------------------


def id_of(value: Any) -> tuple[str | None, int | None]:
    """The reason a group id is unusable, or its exact integer, by the documented rules."""
    if value is None:
        return "missing", None
    if isinstance(value, (bool, np.bool_)):
        return "dtype", None
    if isinstance(value, str):
        return "type", None
    if isinstance(value, (float, np.floating)):
        number = float(value)
        if math.isnan(number):
            return "missing", None
        if math.isinf(number):
            return "nonfinite", None
        if not number.is_integer():
            return "nonintegral", None
        value = int(number)
    value = int(value)
    if not -(2**63) <= value < 2**63:
        return "range", None
    return None, value


def reward_of(value: Any) -> tuple[str | None, float | None]:
    """The reason a reward is unusable, or its float64 value (a bool is 0 or 1)."""
    if value is None:
        return "missing", None
    if isinstance(value, str):
        return "type", None
    try:
        number = float(value)
    except OverflowError:
        return "range", None
    if not math.isfinite(number):
        return "nonfinite", None
    return None, number


def reference(
    ids: list[Any], rewards: list[Any], offered: list[bool], advantages: list[float] | None
) -> tuple[dict[str, int], dict[str, int], int]:
    """Outcome, zero-variance and sign counts, rollouts left out by reason, and rollouts that took part."""
    counts = {"none": 0, "some": 0, "all": 0, "zero": 0}
    rejected: Counter[str] = Counter()
    grouped = 0
    rows = [i for i in range(len(ids)) if offered[i]]
    id_reasons = {i: id_of(ids[i]) for i in rows}
    reward_reasons = {i: reward_of(rewards[i]) for i in rows}
    unplaced = any(id_reasons[i][0] for i in rows)
    groups: dict[int, list[int]] = defaultdict(list)
    for i in rows:
        reason, group = id_reasons[i]
        if reason:
            rejected[reason] += 1
        elif reward_reasons[i][0]:
            rejected[str(reward_reasons[i][0])] += 1
        else:
            assert group is not None
            groups[group].append(i)
    for group, members in groups.items():
        everyone = [i for i in rows if id_reasons[i][1] == group]
        if unplaced or len(everyone) != len(members):
            rejected["incomplete_group"] += len(members)
            continue
        values: list[float] = []
        for i in members:
            reward = reward_reasons[i][1]
            assert reward is not None, reward_reasons[i]
            values.append(reward)
        wins = sum(value >= SOLVED for value in values)
        counts["none" if wins == 0 else "all" if wins == len(values) else "some"] += 1
        counts["zero"] += len(set(values)) == 1
        grouped += len(members)
    if advantages is not None:
        finite = [advantages[i] for i in rows if math.isfinite(advantages[i])]
        counts["positive"] = sum(a > 0 for a in finite)
        counts["negative"] = sum(a < 0 for a in finite)
        counts["zero_sign"] = sum(a == 0 for a in finite)
    return counts, dict(rejected), grouped


def observed(result: RolloutStatistics) -> tuple[dict[str, int], dict[str, int], int]:
    """The same three from a summarizer's result."""
    counts: dict[str, int] = {}
    for metric, attrs, count in result.counts:
        labels = dict(attrs)
        if metric is contract.ADVANTAGE_SIGNS:
            key = {"zero": "zero_sign"}.get(labels[contract.SIGN], labels[contract.SIGN])
        else:
            key = labels.get(contract.GROUP_OUTCOME, "zero")
        counts[key] = count
    rejected: dict[str, int] = {
        reason: n for metric, reason, n in result.rejected_parts if metric == contract.GROUPS.name
    }
    assert not result.rejected, result.rejected
    return counts, rejected, result.grouped


# -- what callers pass -----------------------------------------------------------------------------------------------

small_ids = st.integers(-3, 6)
wide_ids = st.sampled_from([2**53, 2**53 + 1, 2**62 + 1, 2**63 - 1, -(2**63), 2**63, 2**64 - 1, 2**64, 10**30])
list_ids = st.one_of(
    small_ids,
    small_ids,
    wide_ids,
    st.none(),
    st.just("g1"),
    st.booleans(),
    st.sampled_from([2.0, 0.5, math.nan, math.inf, 1e300, float(2**53)]),
    st.sampled_from([np.int64(3), np.uint64(2**63 + 5), np.uint64(2**63 - 1), np.float32(2.0)]),
)
list_rewards = st.one_of(
    st.sampled_from([0.0, 0.5, 1.0, 2.0, -1.0]),
    st.sampled_from([0.0, 1.0]),
    st.booleans(),
    st.integers(-2, 3),
    st.sampled_from([None, math.nan, math.inf, "1.0", 10**400, np.float32(1.0), np.bool_(True)]),
)


def dtype_ids(dtype: Any) -> st.SearchStrategy[int]:
    """Ids of an integer dtype: a few small ones (to form groups) and the dtype's extremes and neighbours of 2**53."""
    info = np.iinfo(dtype)
    edges = [
        v for v in (2**53, 2**53 + 1, 2**63 - 1, 2**63, 2**63 + 1, info.max, info.min) if info.min <= v <= info.max
    ]
    return st.one_of(st.integers(max(-3, int(info.min)), 6), st.sampled_from(edges))


@st.composite
def calls(draw: st.DrawFn) -> tuple[Any, Any, list[Any], list[Any], list[bool], Any, list[float] | None]:
    """One call's ``group_ids`` and ``rewards`` as passed, the same as Python values for the reference, which
    rollouts the mask offers, the mask as passed, and the advantages."""
    n = draw(st.integers(0, 24))
    kind = draw(st.sampled_from(["list", "numpy", "torch", "float"]))
    dtype: Any
    if kind == "list":
        ids: list[Any] = draw(st.lists(list_ids, min_size=n, max_size=n))
        passed_ids: Any = ids
    elif kind == "float":
        dtype = draw(st.sampled_from(FLOAT_DTYPES))
        pool = st.sampled_from([0.0, 1.0, 2.0, -3.0, 0.5, math.nan, math.inf, 2.0**63, 2.0**62, 2.0**53])
        array = np.array(draw(st.lists(pool, min_size=n, max_size=n)), dtype=dtype)
        ids = [float(v) for v in array.tolist()]
        passed_ids = array if draw(st.booleans()) else torch.from_numpy(array)
    else:
        dtype = draw(st.sampled_from(INT_DTYPES))
        ids = draw(st.lists(dtype_ids(dtype), min_size=n, max_size=n))
        array = np.array(ids, dtype=dtype)
        passed_ids = array if kind == "numpy" else torch.from_numpy(array)
    reward_kind = draw(st.sampled_from(["list", "float32", "float64", "bool"]))
    if reward_kind == "list":
        rewards: list[Any] = draw(st.lists(list_rewards, min_size=n, max_size=n))
        passed_rewards: Any = rewards
    elif reward_kind == "bool":
        flags = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=np.bool_)
        rewards = [float(v) for v in flags.tolist()]
        passed_rewards = torch.from_numpy(flags) if draw(st.booleans()) else flags
    else:
        pool = st.sampled_from([0.0, 0.5, 1.0, 2.0, -1.0, math.nan, math.inf])
        values = np.array(draw(st.lists(pool, min_size=n, max_size=n)), dtype=reward_kind)
        rewards = [float(v) for v in values.tolist()]
        passed_rewards = torch.from_numpy(values)
    mask_kind = draw(st.sampled_from(["none", "rows", "tokens"]))
    if mask_kind == "none":
        offered, mask = [True] * n, None
    elif mask_kind == "rows":
        offered = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        mask = torch.tensor(offered, dtype=torch.bool)
    else:
        tokens = np.array(draw(st.lists(st.booleans(), min_size=3 * n, max_size=3 * n)), dtype=np.int64).reshape(n, 3)
        offered = [bool(row.any()) for row in tokens]
        mask = torch.from_numpy(tokens)
    advantages = None
    if draw(st.booleans()):
        advantages = draw(st.lists(st.sampled_from([-1.5, 0.0, 0.25, math.nan]), min_size=n, max_size=n))
    return passed_ids, passed_rewards, ids, rewards, offered, mask, advantages


@settings(max_examples=400, deadline=None)
@given(call=calls())
def test_group_outcomes_match_a_python_reference(call: tuple[Any, ...]) -> None:
    """Outcomes none / some / all, zero variance and advantage signs equal the reference; every offered rollout
    either took part or is counted: under its id's reason, its reward's, or incomplete_group for the rest of a
    group (of the call, when an id is unusable) that cannot have an exact outcome."""
    passed_ids, passed_rewards, ids, rewards, offered, mask, advantages = call
    summarizer = RolloutSummarizer(LAYOUTS, solved_reward=SOLVED)
    result = summarizer.summarize(
        Rollouts(
            mask=mask,
            group_ids=passed_ids,
            rewards=passed_rewards,
            advantages=None if advantages is None else torch.tensor(advantages),
        )
    )
    counts, rejected, grouped = observed(result)
    expected_counts, expected_rejected, expected_grouped = reference(ids, rewards, offered, advantages)
    assert (counts, rejected, grouped) == (expected_counts, expected_rejected, expected_grouped)
    assert grouped + sum(rejected.values()) == sum(offered)


def _outcomes(ids: Any, rewards: Any) -> tuple[dict[str, int], dict[str, int], int]:
    return observed(
        RolloutSummarizer(LAYOUTS, solved_reward=SOLVED).summarize(Rollouts(group_ids=ids, rewards=rewards))
    )


def test_a_missing_reward_leaves_its_group_out_instead_of_turning_it_all_solved() -> None:
    """rewards=[1.0, None, 1.0, 1.0] in one group: the group is not "all solved"; the None is missing and the three
    others are incomplete_group, while another, complete group still counts."""
    counts, rejected, grouped = _outcomes([7, 7, 7, 7, 8, 8], [1.0, None, 1.0, 1.0, 0.0, 1.0])
    assert counts == {"none": 0, "some": 1, "all": 0, "zero": 0}
    assert (rejected, grouped) == ({"missing": 1, "incomplete_group": 3}, 2)


@pytest.mark.parametrize("bad", [None, "g", 2**64, 0.5, True])
def test_an_unusable_id_leaves_every_group_of_the_call_out(bad: Any) -> None:
    """A rollout whose id is None, a string, an int beyond 64 bits, a fraction or a bool could belong to any group:
    no group of the call is counted, the rollout under its reason, the others under incomplete_group."""
    counts, rejected, grouped = _outcomes([1, 1, bad, 2], [1.0, 1.0, 0.0, 0.0])
    assert counts == {"none": 0, "some": 0, "all": 0, "zero": 0}
    reason = id_of(bad)[0]
    assert (rejected, grouped) == ({reason: 1, "incomplete_group": 3}, 0)


@pytest.mark.parametrize("container", ["numpy", "torch"])
def test_uint64_ids_above_2_53_stay_distinct(container: str) -> None:
    """2**53 and 2**53 + 1 (equal as float64) are two groups, also in uint64; 2**63 and above are range."""
    array = np.array([2**53, 2**53 + 1, 2**63 - 1, 2**63 - 1, 2**63, 2**64 - 1], dtype=np.uint64)
    ids = array if container == "numpy" else torch.from_numpy(array)
    counts, rejected, grouped = _outcomes(ids[:4], [1.0, 0.0, 1.0, 0.0])
    assert (counts, rejected, grouped) == ({"none": 1, "some": 1, "all": 1, "zero": 2}, {}, 4)
    assert _outcomes(ids, [1.0] * 6)[1] == {"range": 2, "incomplete_group": 4}


def test_int64_ids_are_exact_over_their_whole_range() -> None:
    """The extremes of int64 and neighbours of 2**53 are distinct groups, in a list (beside a None) and a tensor."""
    ids = [-(2**63), -(2**63) + 1, 2**53, 2**53 + 1, 2**63 - 2, 2**63 - 1]
    rewards = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    for passed in (ids, torch.tensor(ids), np.array(ids)):
        assert _outcomes(passed, rewards)[0] == {"none": 3, "some": 0, "all": 3, "zero": 6}
    counts, rejected, _ = _outcomes([*ids, None], [*rewards, 1.0])
    assert (counts["all"], rejected) == (0, {"missing": 1, "incomplete_group": 6})


def test_bool_group_ids_are_rejected_whole() -> None:
    """A bool tensor or array is not a group id: the field is rejected as dtype (one count per rollout)."""
    for ids in (torch.tensor([True, False]), np.array([True, False])):
        result = RolloutSummarizer(LAYOUTS, solved_reward=SOLVED).summarize(Rollouts(group_ids=ids, rewards=[1.0, 0.0]))
        assert [(metric, error.reason) for metric, error, _ in result.rejected] == [(contract.GROUPS.name, "dtype")]


def test_rejections_reach_the_exported_counter(metric_exporter: RecordingMetricExporter) -> None:
    """Through Telemetry, the rollouts left out are counted in otel_rl.values.rejected{otel_rl.metric="rl.groups"}
    by reason, and only exact groups reach rl.groups."""
    telemetry = Telemetry(TelemetryConfig(run_id="groups", export_interval_s=60), metric_exporter=metric_exporter)
    pred, target = torch.tensor([1, 2, 3, 4, 5, 6]), torch.tensor([1, 0, 3, 4, 5, 0])
    telemetry.record_rollouts(group_ids=[0, 0, 1, 1, 2, 2], rewards=pred == target)
    telemetry.record_rollouts(group_ids=[3, 3, 4, 4], rewards=[1.0, None, 0.0, math.nan])
    assert telemetry.flush(EXPORT_WAIT_S)
    latest = metric_exporter.latest()
    outcomes = {
        dict(attrs)[contract.GROUP_OUTCOME]: getattr(point, "value")
        for (name, attrs), point in latest.items()
        if name == contract.GROUPS.name
    }
    assert outcomes == {"none": 0, "some": 2, "all": 1}
    rejected = {
        dict(attrs)[contract.SELF_REASON]: getattr(point, "value")
        for (name, attrs), point in latest.items()
        if name == contract.VALUES_REJECTED.name and dict(attrs)[contract.SELF_METRIC] == contract.GROUPS.name
    }
    assert rejected == {"missing": 1, "nonfinite": 1, "incomplete_group": 2}
    telemetry.shutdown()
