"""Rollout health signals, staleness by dataset and phase, and the run lifecycle, end to end (issue #11).

Four rank processes (exponential histograms, ``max_datasets=2``) record two or three steps of generated data: rollouts
with ragged masks, a rollout without any unmasked token per step, NaN log-probabilities on some tokens, ragged prompt
groups, a group of only NaN rewards and one rank that records no groups; rewards and staleness in three datasets (the
third over the cap), staleness phases, unversioned tokens, staleness drops and phases. The test keeps every value it
sends in a float64 reference and computes the derived per-token values (importance ratio, KL k1 and k3) the way the
ranks do; Prometheus must hold exactly the merge over ranks: counts, sums, extremes, every bucket and every counter.
"""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import otel_rl_contract as contract
import pytest
import torch
from otel_rl_ops.query import Prometheus

from tests.pipeline.harness import EVERY_RUN, RankProcess, eventually, native_buckets, start_ranks, written
from tests.reference import exponential_sides

RANKS = 4
STEPS = (3, 3, 2, 2)
"""Steps recorded by each rank."""
SCALE = 5
TOKENS = 12
SOLVED = 1.0
"""``solved_reward`` (the default)."""
NO_GROUPS_RANK = 3
"""The rank that records rollouts without prompt groups."""
NAN_RANKS = (1, 2)
"""Ranks with NaN log-probabilities on some unmasked tokens."""
GENERATE_RANK = 3
"""The one rank left in phase ``generate``; the others end in ``train``."""
OVERFLOW_RANK = 2
"""The rank that records a third dataset, over ``max_datasets=2``."""
DATASETS = ("math", "code")
THIRD_DATASET = "chat"
OVERFLOW = "_overflow"
STALENESS_CALLS = (("math", "in_flight"), ("code", "in_queue"), (None, None), ("math", None), (None, "in_queue"))
"""(dataset, phase) of the staleness calls of every step."""
WAIT_S = 30.0
_REWARD = contract.series(contract.REWARDS.histogram).name
_STALENESS = contract.series(contract.STALENESS.histogram).name
_DROPPED = contract.series(contract.STALENESS_DROPPED).name
_STEP = contract.series(contract.STEP).name


@dataclass(frozen=True)
class Stream:
    """One distribution of ``record_rollouts`` and the matchers of its stream."""

    distribution: contract.Distribution
    matchers: str = ""

    def selector(self, run_id: str) -> str:
        """The stream's label matchers in ``run_id``."""
        return ",".join(part for part in (f'rl_run_id="{run_id}"', self.matchers) if part)


SERIES = {
    "advantage": Stream(contract.ADVANTAGES),
    "response_length": Stream(contract.RESPONSE_LENGTHS),
    "entropy": Stream(contract.ENTROPY),
    "importance_ratio": Stream(contract.IMPORTANCE_RATIO),
    "kl_k1": Stream(contract.MISMATCH_KL, 'rl_kl_estimator="k1"'),
    "kl_k3": Stream(contract.MISMATCH_KL, 'rl_kl_estimator="k3"'),
}


@dataclass
class Reference:
    """Everything the ranks recorded, in float64 (staleness in ints), summed over ranks."""

    values: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in SERIES})
    groups: Counter[str] = field(default_factory=Counter)
    """Prompt groups by outcome (``none``, ``some``, ``all``) and ``zero`` (zero variance)."""
    signs: Counter[str] = field(default_factory=Counter)
    nonfinite_tokens: int = 0
    nan_rewards: int = 0
    """Unmasked tokens whose importance ratio is NaN."""
    nan_groups: int = 0
    """Groups whose rewards are all NaN (they count in no outcome)."""
    empty_rollouts: int = 0
    rewards: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    """By ``rl_dataset`` label."""
    staleness: dict[tuple[str, str], list[int]] = field(default_factory=lambda: defaultdict(list))
    """By (``rl_dataset``, ``rl_staleness_phase``) label, ``""`` where the label is absent."""
    unversioned: Counter[str] = field(default_factory=Counter)
    """By ``rl_dataset`` label (``""``: none)."""
    dropped: Counter[str] = field(default_factory=Counter)
    overflow_calls: int = 0
    """Calls that named a dataset over the cap: each counts once as ``name_overflow``."""
    policy_version: int = 0


@dataclass
class HealthRun:
    run_id: str
    ranks: list[RankProcess]
    reference: Reference
    started: tuple[float, float]
    """Unix time before the first rank started and after the last one was ready."""


def _label(dataset: str | None, known: set[str]) -> str:
    """The ``rl_dataset`` label a rank gives ``dataset`` (``""``: none), given the names it already knows."""
    if dataset is None:
        return ""
    if dataset in known or len(known) < 2:
        known.add(dataset)
        return dataset
    return OVERFLOW


def _groups(rng: np.random.Generator, rows: int, step: int) -> np.ndarray:
    """Ragged prompt groups (1 to 4 rollouts each), their rollouts shuffled."""
    sizes: list[int] = []
    while sum(sizes) < rows:
        sizes.append(int(rng.integers(1, 5)))
    ids = np.repeat(np.arange(len(sizes)) + 100 * step, sizes)[:rows]
    return rng.permutation(ids)


def record_rollouts(rank: RankProcess, rng: np.random.Generator, step: int, ref: Reference) -> None:
    """One step of generated rollouts on ``rank``, folded into ``ref`` the way the rank must record them."""
    rows = int(rng.integers(6, 11))
    lengths = rng.integers(1, TOKENS + 1, rows)
    lengths[rng.integers(rows)] = 0  # a rollout without any unmasked token
    mask = np.arange(TOKENS)[None, :] < lengths[:, None]
    advantages = rng.normal(0.0, 1.0, rows).round(3)
    advantages[rng.random(rows) < 0.25] = 0.0
    advantages[lengths == 0] = np.nan  # left out with its rollout: neither recorded nor rejected
    entropy = rng.uniform(0.0, 4.0, (rows, TOKENS))
    entropy[rng.random((rows, TOKENS)) < 0.1] = 0.0
    entropy[~mask] = np.nan  # masked tokens are never read
    inference = -rng.exponential(1.0, (rows, TOKENS))
    logprobs = inference + rng.normal(0.0, 0.1, (rows, TOKENS))
    same = rng.random((rows, TOKENS)) < 0.1
    logprobs[same] = inference[same]  # ratio exactly 1, KL exactly 0
    logprobs[~mask] = np.nan
    if rank.rank in NAN_RANKS:
        tokens = np.argwhere(mask)
        for i, (row, token) in enumerate(tokens[rng.choice(len(tokens), 3, replace=False)]):
            (logprobs if i % 2 else inference)[row, token] = np.nan
    fields: dict[str, Any] = {
        "mask": mask.tolist(),
        "advantages": advantages.tolist(),
        "response_lengths": lengths.tolist(),
        "entropy": entropy.tolist(),
        "logprobs": logprobs.tolist(),
        "inference_logprobs": inference.tolist(),
    }
    kept = lengths > 0
    ref.empty_rollouts += int((~kept).sum())
    ref.values["advantage"] += advantages[kept].tolist()
    ref.values["response_length"] += lengths[kept].astype(np.float64).tolist()
    ref.values["entropy"] += entropy[mask].tolist()
    for advantage in advantages[kept].tolist():
        ref.signs["positive" if advantage > 0 else "negative" if advantage < 0 else "zero"] += 1
    # The per-token values the way the rank computes them: float64 difference, torch's exp, on the whole tensor.
    d = torch.from_numpy(logprobs) - torch.from_numpy(inference)
    ratio = torch.exp(d)
    selected = torch.from_numpy(mask)
    finite = selected & torch.isfinite(ratio)
    ref.nonfinite_tokens += int((selected & ~torch.isfinite(ratio)).sum())
    ref.values["importance_ratio"] += ratio[finite].tolist()
    ref.values["kl_k1"] += (-d)[finite].tolist()
    ref.values["kl_k3"] += (ratio - 1 - d)[finite].tolist()
    if rank.rank != NO_GROUPS_RANK:
        group_ids = _groups(rng, rows, step)
        rewards = rng.choice([0.0, 0.5, 1.0, 1.5], rows)
        if step == 0:
            rewards[group_ids == group_ids[0]] = np.nan  # a group of only NaN rewards
            rewards[np.flatnonzero(group_ids == group_ids[-1])[0]] = np.nan  # and one NaN in another group
        fields |= {"rewards": rewards.tolist(), "group_ids": group_ids.tolist()}
        members: dict[int, list[float]] = defaultdict(list)
        for group, reward, length in zip(group_ids.tolist(), rewards.tolist(), lengths.tolist(), strict=True):
            if math.isfinite(reward) and length > 0:
                members[group].append(reward)
        ref.nan_rewards += int((np.isnan(rewards) & (lengths > 0)).sum())
        ref.nan_groups += sum(bool(np.isnan(rewards[group_ids == group]).all()) for group in set(group_ids.tolist()))
        for rewards_of_group in members.values():
            solved = sum(reward >= SOLVED for reward in rewards_of_group)
            ref.groups["none" if solved == 0 else "all" if solved == len(rewards_of_group) else "some"] += 1
            ref.groups["zero"] += len(set(rewards_of_group)) == 1
    rank.rollouts(**fields)


def record_sources(
    rank: RankProcess, rng: np.random.Generator, step: int, last: bool, known: set[str], ref: Reference
) -> None:
    """Rewards and staleness by dataset and phase, unversioned tokens and staleness drops of one step."""
    third = rank.rank == OVERFLOW_RANK and last
    for name in [*DATASETS, *([THIRD_DATASET] if third else [])]:
        rewards = rng.normal(0.3, 1.0, int(rng.integers(5, 20))).round(3)
        rank.rewards(rewards.tolist(), dataset=name)
        ref.rewards[_label(name, known)] += rewards.tolist()
    current = 1000 + 10 * step
    ref.policy_version = max(ref.policy_version, current)
    calls: list[tuple[str | None, str | None]] = [*STALENESS_CALLS, *([(THIRD_DATASET, "in_flight")] if third else [])]
    for index, (dataset, phase) in enumerate(calls):
        versions = (current - rng.integers(0, 40, (4, 8))).astype(np.float64)
        versions[rng.random((4, 8)) < 0.15] = -1  # no version
        floats = index == 4 and step == 0
        if floats:
            versions[rng.random((4, 8)) < 0.15] = np.nan  # no version either, in a float tensor
        mask = np.arange(8)[None, :] < rng.integers(0, 9, 4)[:, None]
        sent = versions.tolist() if floats else versions.astype(np.int64).tolist()
        dtype = "float64" if floats else None
        rank.staleness(sent, current, mask=mask.tolist(), dataset=dataset, phase=phase, dtype=dtype)
        label = _label(dataset, known)
        versioned = mask & (versions >= 0)  # NaN >= 0 is False
        ref.staleness[(label, phase or "")] += (current - versions[versioned]).astype(np.int64).tolist()
        ref.unversioned[label] += int((mask & ~(versions >= 0)).sum())
    drops: list[tuple[str | None, int]] = [("math", rank.rank + 1), (None, 2), *([(THIRD_DATASET, 5)] if third else [])]
    for dataset, count in drops:
        rank.staleness_drops(count, dataset=dataset)
        ref.dropped[_label(dataset, known)] += count
    ref.overflow_calls += 3 if third else 0


@pytest.fixture(scope="module")
def health_run(shared_stack: Any) -> Iterator[HealthRun]:
    """Four ranks record their steps and flush; waits until Prometheus holds every distribution's full count."""
    run_id = f"health-{uuid.uuid4().hex[:8]}"
    before = time.time()
    ranks = start_ranks(
        RANKS, endpoint=shared_stack.otlp_grpc_endpoint, run_id=run_id, histogram="exponential", max_datasets=2
    )
    ready = time.time()
    ref = Reference()
    try:
        for rank in ranks:
            rng = np.random.default_rng(1100 + rank.rank)
            known: set[str] = set()
            for step in range(STEPS[rank.rank]):
                rank.step(step)
                rank.set_phase("generate")
                record_rollouts(rank, rng, step, ref)
                record_sources(rank, rng, step, step == STEPS[rank.rank] - 1, known, ref)
                if rank.rank != GENERATE_RANK:
                    rank.set_phase("train")
            assert rank.flush()
        prometheus = Prometheus(shared_stack.prometheus_url)
        for name, stream in SERIES.items():
            histogram = contract.series(stream.distribution.histogram).name
            count = f"histogram_count({histogram}{{{stream.selector(run_id)}}})"
            n = len(ref.values[name])

            def merged(count: str = count, n: int = n) -> bool:
                return prometheus.value(count) == n

            eventually(merged, what=f"the merged {name} histogram", timeout_s=WAIT_S)
        # Each rank's last record call: once every rank's last drops are in, so is everything each rank recorded
        # (cumulative snapshots), and the tests may compare any series.
        eventually(
            lambda: _by_dataset(prometheus, f'{_DROPPED}{{rl_run_id="{run_id}"}}') == dict(ref.dropped),
            what="every rank's last staleness drops",
            timeout_s=WAIT_S,
        )
        yield HealthRun(run_id, ranks, ref, (before, ready))
    finally:
        for rank in ranks:
            if rank.alive():
                rank.kill()


def _histogram(prometheus: Prometheus, selector: str) -> dict[str, Any]:
    """The one native histogram ``selector`` selects now."""
    result = prometheus.query(selector)
    assert len(result) == 1, result
    assert "histogram" in result[0], result[0]
    return dict(result[0]["histogram"][1])


def _assert_distribution(
    prometheus: Prometheus, distribution: contract.Distribution, matchers: str, values: list[float]
) -> None:
    """Count, sum, every bucket (scale 5), exact max and min, the monotone sum parts and squares of one stream (the
    series of ``distribution`` that ``matchers`` select)."""

    def selector(metric: contract.MetricName) -> str:
        return f"{contract.series(metric).name}{{{matchers}}}"

    native = _histogram(prometheus, selector(distribution.histogram))
    assert int(float(native["count"])) == len(values)
    assert float(native["sum"]) == pytest.approx(math.fsum(values), rel=1e-9, abs=1e-12)
    assert native_buckets(native, SCALE) == exponential_sides(values, SCALE)
    assert prometheus.value(f"max_over_time({selector(distribution.maximum)}[5m])") == max(values)
    assert prometheus.value(f"min_over_time({selector(distribution.minimum)}[5m])") == min(values)
    positive, negative, squares = (prometheus.value(selector(part)) for part in distribution.sums)
    assert positive == pytest.approx(math.fsum(v for v in values if v > 0), rel=1e-9, abs=1e-12)
    assert negative == pytest.approx(-math.fsum(v for v in values if v < 0), rel=1e-9, abs=1e-12)
    assert squares == pytest.approx(math.fsum(v * v for v in values), rel=1e-9)


@pytest.mark.parametrize("name", SERIES)
def test_rollout_distributions_are_exact(shared_stack: Any, health_run: HealthRun, name: str) -> None:
    """Each record_rollouts distribution merged over ranks has the reference's count, sum, buckets, max and min."""
    stream = SERIES[name]
    prometheus = Prometheus(shared_stack.prometheus_url)
    values = health_run.reference.values[name]
    _assert_distribution(prometheus, stream.distribution, stream.selector(health_run.run_id), values)


def test_self_check_counts_equal_the_histograms(shared_stack: Any, health_run: HealthRun) -> None:
    """otel_rl_values_recorded_total of each rollout metric equals what went into its histogram(s)."""
    prometheus = Prometheus(shared_stack.prometheus_url)
    run = f'{{rl_run_id="{health_run.run_id}"}}'
    recorded = prometheus.by_label(f"{contract.series(contract.VALUES_RECORDED).name}{run}", "otel_rl_metric")
    want: Counter[str] = Counter()
    for name, stream in SERIES.items():
        want[stream.distribution.histogram.name] += len(health_run.reference.values[name])
    want["rl.reward"] = sum(len(v) for v in health_run.reference.rewards.values())
    want["rl.staleness"] = sum(len(v) for v in health_run.reference.staleness.values())
    assert recorded == dict(want)


def test_group_and_sign_counters_equal_the_python_reference(shared_stack: Any, health_run: HealthRun) -> None:
    """rl_groups_total by outcome, rl_groups_zero_variance_total and rl_advantage_sign_total by sign are the plain
    Python counts summed over ranks (NaN rewards and rollouts without tokens left out of their groups)."""
    prometheus = Prometheus(shared_stack.prometheus_url)
    run = f'{{rl_run_id="{health_run.run_id}"}}'
    ref = health_run.reference
    groups = prometheus.by_label(f"{contract.series(contract.GROUPS).name}{run}", "rl_group_outcome")
    assert groups == {outcome: ref.groups[outcome] for outcome in ("none", "some", "all")}
    assert prometheus.value(f"{contract.series(contract.GROUPS_ZERO_VARIANCE).name}{run}") == ref.groups["zero"]
    signs = prometheus.by_label(f"{contract.series(contract.ADVANTAGE_SIGNS).name}{run}", "rl_sign")
    assert signs == {sign: ref.signs[sign] for sign in ("positive", "negative", "zero")}


def test_rejected_values_are_exactly_the_bad_ones(shared_stack: Any, health_run: HealthRun) -> None:
    """Only what is bad counts as rejected: NaN ratios on unmasked tokens (once for the ratio, once per KL estimator),
    each call naming a dataset over the cap, and each NaN reward of a rollout with tokens (for its group, and as
    unpaired with its length); masked NaN, rollouts without tokens and unversioned tokens never."""
    prometheus = Prometheus(shared_stack.prometheus_url)
    result = prometheus.query(f'{contract.series(contract.VALUES_REJECTED).name}{{rl_run_id="{health_run.run_id}"}}')
    rejected = {(s["metric"]["otel_rl_metric"], s["metric"]["otel_rl_reason"]): float(s["value"][1]) for s in result}
    ref = health_run.reference
    assert rejected == {
        ("rl.importance_ratio", "nonfinite"): ref.nonfinite_tokens,
        ("rl.mismatch.kl", "nonfinite"): 2 * ref.nonfinite_tokens,
        ("rl.dataset", "name_overflow"): ref.overflow_calls,
        ("rl.groups", "nonfinite"): ref.nan_rewards,
        ("rl.joint", "unpaired"): ref.nan_rewards,  # a NaN reward pairs with no length
    }


def test_rewards_by_dataset_with_overflow(shared_stack: Any, health_run: HealthRun) -> None:
    """Rewards per rl_dataset are exact; the third dataset of a rank with max_datasets=2 lands in _overflow."""
    prometheus = Prometheus(shared_stack.prometheus_url)
    run_id = health_run.run_id
    rewards = health_run.reference.rewards
    counts = prometheus.by_label(f'histogram_count({_REWARD}{{rl_run_id="{run_id}"}})', "rl_dataset")
    assert counts == {label: len(values) for label, values in rewards.items()}
    assert set(counts) == {*DATASETS, OVERFLOW}
    for label, values in rewards.items():
        matchers = f'rl_run_id="{run_id}",rl_reward_fn="total",rl_dataset="{label}"'
        _assert_distribution(prometheus, contract.REWARDS, matchers, values)


def test_staleness_by_dataset_and_phase(shared_stack: Any, health_run: HealthRun) -> None:
    """rl_staleness per (rl_dataset, rl_staleness_phase) is exact (count, sum, buckets, max, min), unversioned
    tokens and dropped samples per rl_dataset are exact counts, and the policy version is the latest."""
    prometheus = Prometheus(shared_stack.prometheus_url)
    run_id = health_run.run_id
    ref = health_run.reference
    labels = [
        (s["metric"].get("rl_dataset", ""), s["metric"].get("rl_staleness_phase", ""))
        for s in prometheus.query(f'histogram_count({_STALENESS}{{rl_run_id="{run_id}"}})')
    ]
    assert sorted(labels) == sorted(ref.staleness)
    for (dataset, phase), values in ref.staleness.items():
        matchers = f'rl_run_id="{run_id}",rl_dataset="{dataset}",rl_staleness_phase="{phase}"'
        native = _histogram(prometheus, f"{_STALENESS}{{{matchers}}}")
        assert (int(float(native["count"])), float(native["sum"])) == (len(values), sum(values))
        assert native_buckets(native, SCALE) == exponential_sides(values, SCALE)
        low, high = (contract.series(m).name for m in (contract.STALENESS.minimum, contract.STALENESS.maximum))
        assert prometheus.value(f"max_over_time({high}{{{matchers}}}[5m])") == max(values)
        assert prometheus.value(f"min_over_time({low}{{{matchers}}}[5m])") == min(values)
    run = f'{{rl_run_id="{run_id}"}}'
    assert _by_dataset(prometheus, f"{contract.series(contract.UNVERSIONED).name}{run}") == dict(ref.unversioned)
    assert _by_dataset(prometheus, f"{_DROPPED}{run}") == dict(ref.dropped)
    assert prometheus.value(f"{contract.series(contract.POLICY_VERSION).name}{run}") == ref.policy_version
    assert prometheus.value(f"{_STEP}{run}") == max(STEPS) - 1


def _by_dataset(prometheus: Prometheus, promql: str) -> dict[str, float]:
    return {s["metric"].get("rl_dataset", ""): float(s["value"][1]) for s in prometheus.query(promql)}


def test_the_data_exercises_the_edge_cases(health_run: HealthRun) -> None:
    """The generated data has what the issue asks for: rollouts without tokens, NaN ratios, every group outcome,
    zero-variance and all-NaN groups, every advantage sign, exact zeros, an overflowing dataset, unversioned tokens."""
    ref = health_run.reference
    assert ref.empty_rollouts >= sum(STEPS)
    assert ref.nonfinite_tokens > 0 and ref.nan_groups > 0 and ref.overflow_calls == 3
    assert min(ref.groups[k] for k in ("none", "some", "all", "zero")) > 0
    assert min(ref.signs[k] for k in ("positive", "negative", "zero")) > 0
    assert all(0.0 in ref.values[name] for name in ("advantage", "entropy", "kl_k3"))
    assert ref.unversioned[""] > 0 and ref.unversioned["math"] > 0 and ref.dropped[OVERFLOW] == 5


def test_golden_health_names(shared_stack: Any, health_run: HealthRun) -> None:
    """The run's series (exponential form, every health signal) are exactly those the contract derives for what it
    recorded (tests/unit/test_series.py pins the names)."""
    rollouts = (contract.ADVANTAGES, contract.RESPONSE_LENGTHS, contract.ENTROPY, contract.IMPORTANCE_RATIO)
    distributions = (contract.REWARDS, contract.STALENESS, *rollouts, contract.MISMATCH_KL)
    counters = (contract.GROUPS, contract.GROUPS_ZERO_VARIANCE, contract.ADVANTAGE_SIGNS, contract.JOINT)
    recorded = (*counters, contract.UNVERSIONED, contract.STALENESS_DROPPED, contract.VALUES_RECORDED)
    lifecycle = (contract.POLICY_VERSION, contract.STEP, contract.PHASES, contract.PHASE_STARTED)
    phases = (contract.PHASE_DURATION, contract.PHASE_CALLS, contract.MERGE_CANARY, contract.VALUES_REJECTED)
    metrics = (*(m for d in distributions for m in d.metrics), *recorded, *lifecycle, *phases, *EVERY_RUN)
    expected = contract.prometheus_names(metrics, "exponential", exemplars=contract.EXEMPLAR_CARRIERS)
    assert written(Prometheus(shared_stack.prometheus_url), health_run.run_id) == expected


def test_lifecycle(shared_stack: Any, health_run: HealthRun) -> None:
    """While running: ranks up == live ranks, expected == world size, phases count ranks, start time is the first
    rank's, finished is 0. After one rank shuts down: 3 up, its phase empties. After all shut down cleanly: the
    last rl_run_finished is 1. (Shuts the ranks down: runs last.)"""
    prometheus = Prometheus(shared_stack.prometheus_url)
    run = f'{{rl_run_id="{health_run.run_id}"}}'

    def phases() -> dict[str, float]:
        return prometheus.by_label(f"{contract.series(contract.PHASES).name}{run}", "rl_phase_name")

    up, expected, finished = (
        f"{contract.series(m).name}{run}" for m in (contract.RANKS_UP, contract.RANKS_EXPECTED, contract.RUN_FINISHED)
    )
    eventually(lambda: prometheus.value(up) == RANKS, what="4 ranks up", timeout_s=WAIT_S)
    assert prometheus.value(f"max_over_time({up}[5m])") == RANKS
    assert prometheus.value(expected) == RANKS
    eventually(
        lambda: phases() == {"train": RANKS - 1, "generate": 1},
        what="3 ranks in train, 1 in generate",
        timeout_s=WAIT_S,
    )
    start = prometheus.value(f"{contract.series(contract.RUN_START).name}{run}")
    before, ready = health_run.started
    assert start is not None and before <= start <= ready and abs(time.time() - start) < 60
    assert prometheus.value(f"max_over_time({finished}[5m])") == 0

    generate = health_run.ranks[GENERATE_RANK]
    assert generate.shutdown()
    eventually(
        lambda: (prometheus.value(up), phases()) == (RANKS - 1, {"train": RANKS - 1, "generate": 0}),
        what="3 ranks up, none in generate",
        timeout_s=WAIT_S,
    )
    assert prometheus.value(finished) == 0
    for rank in health_run.ranks:
        if rank is not generate:
            assert rank.shutdown()
    eventually(lambda: prometheus.value(finished) == 1, what="rl_run_finished 1", timeout_s=WAIT_S)
    assert prometheus.value(expected) == RANKS
