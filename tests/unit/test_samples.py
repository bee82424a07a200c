"""Sample selection (top/bottom-k heaps, reservoir) and record building (truncation, attributes)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from otel_rl import EpisodeSample, TopBottomFilter
from otel_rl._record.samples import sample_from_mapping, to_record


@given(rewards=st.lists(st.floats(-1e6, 1e6), max_size=60), k=st.integers(0, 5))
def test_top_and_bottom_k_are_the_extremes(rewards: list[float], k: int) -> None:
    """The filter returns exactly the k highest as top and, of the rest, the k lowest as bottom."""
    f = TopBottomFilter(top_k=k, bottom_k=k)
    for index, reward in enumerate(rewards):
        f.add(EpisodeSample(reward=reward, episode_id=index))
    kept = f.drain()
    top = [s.reward for sel, s in kept if sel == "top"]
    order = sorted(range(len(rewards)), key=lambda i: (rewards[i], i))
    assert sorted(top, reverse=True) == sorted((rewards[i] for i in order[-k:] if k), reverse=True)[: len(top)]
    assert len(top) == min(k, len(rewards))
    chosen_top = {s.episode_id for sel, s in kept if sel == "top"}
    rest = sorted((rewards[i], i) for i in range(len(rewards)) if i not in chosen_top)
    bottom = sorted(s.reward for sel, s in kept if sel == "bottom")
    assert bottom == [r for r, _ in rest[:k]][: len(bottom)]
    assert f.drain() == []


def test_reservoir_is_uniform() -> None:
    """Each of 10 episodes is drawn into a reservoir of 1 about equally often."""
    hits = [0] * 10
    for seed in range(3000):
        f = TopBottomFilter(top_k=0, bottom_k=0, random_k=1, seed=seed)
        for index in range(10):
            f.add(EpisodeSample(reward=0.0, episode_id=index))
        ((selection, sample),) = f.drain()
        assert selection == "random"
        assert isinstance(sample.episode_id, int)
        hits[sample.episode_id] += 1
    assert min(hits) > 220 and max(hits) < 380


def test_nan_rewards_are_not_top_or_bottom() -> None:
    """A NaN reward cannot rank; it is still eligible for the reservoir."""
    f = TopBottomFilter(top_k=1, bottom_k=1, random_k=1, seed=1)
    f.add(EpisodeSample(reward=float("nan"), episode_id="nan"))
    assert [sel for sel, _ in f.drain()] == ["random"]


def test_texts_are_cut_to_the_byte_budget_on_character_boundaries() -> None:
    """Multi-byte characters are never split; the record says it was truncated."""
    record = to_record(EpisodeSample(reward=0.0, prompt="€" * 10), step=1, selection="top", table="t", budget_bytes=7)
    assert record.body["prompt"] == "€€" and record.truncated


def test_non_utf8_bytes_and_lone_surrogates_are_replaced() -> None:
    """Invalid UTF-8 bytes and lone surrogates become replacement characters, never an exception."""
    sample = EpisodeSample(reward=0.0, prompt=b"ok\xff", response="a\ud800b")
    record = to_record(sample, step=None, selection="top", table="t", budget_bytes=99)
    assert record.body == {"prompt": "ok\ufffd", "response": "a?b"}


def test_multi_megabyte_text_is_cut() -> None:
    """A 5 MB response is cut to the budget."""
    sample = EpisodeSample(reward=0.0, response="x" * 5_000_000)
    record = to_record(sample, step=1, selection="top", table="t", budget_bytes=1024)
    assert len(record.body["response"]) == 1024 and record.attributes["rl.sample.truncated"] is True


def test_attributes_follow_the_contract() -> None:
    """Scalar fields become rl.* attributes; the breakdown becomes rl.reward.<fn>; extras are prefixed."""
    sample = EpisodeSample(
        reward=1.5,
        episode_id=7,
        group_id=2,
        policy_version=3,
        advantage=0.5,
        staleness=2,
        request_len=10,
        response_len=20,
        reward_breakdown={"correctness": 1.0, "format": 0.5},
        extra={"task": "add", "nested": {"a": [1, 2]}},
    )
    record = to_record(sample, step=4, selection="bottom", table="rollout/sample", budget_bytes=100)
    assert record.attributes == {
        "rl.sample.selection": "bottom",
        "rl.sample.table": "rollout/sample",
        "rl.reward": 1.5,
        "rl.step": 4,
        "rl.episode.id": "7",
        "rl.group.id": "2",
        "rl.policy.version": 3,
        "rl.advantage": 0.5,
        "rl.staleness": 2,
        "rl.request.length": 10,
        "rl.response.length": 20,
        "rl.reward.correctness": 1.0,
        "rl.reward.format": 0.5,
        "rl.sample.extra.task": "add",
        "rl.sample.truncated": False,
    }
    assert record.body == {"extra": '{"nested": {"a": [1, 2]}}'}


@pytest.mark.parametrize("correct", [True, np.bool_(True), torch.tensor(True), np.array([True])])
def test_a_bool_reward_is_one(correct: Any) -> None:
    """A correctness reward written as ``pred == target`` (a bool, numpy bool or bool tensor) is the reward 1."""
    sample = EpisodeSample(reward=correct, reward_breakdown={"correctness": correct, "format": False})
    record = to_record(sample, step=0, selection="top", table="rollout/sample", budget_bytes=100)
    assert record.attributes is not None
    assert (record.attributes["rl.reward"], record.attributes["rl.reward.correctness"]) == (1.0, 1.0)
    assert record.attributes["rl.reward.format"] == 0.0


def test_deeply_nested_and_non_json_extras_do_not_raise() -> None:
    """Recursion-deep or unserializable extras are represented, not raised."""
    deep: list[Any] = []
    cursor = deep
    for _ in range(100_000):
        cursor.append([])
        cursor = cursor[0]
    record = to_record(
        EpisodeSample(reward=0.0, extra={"deep": deep, "obj": object()}),
        step=1,
        selection="top",
        table="t",
        budget_bytes=200,
    )
    assert "extra" in record.body


def test_mapping_samples_report_unknown_keys() -> None:
    """Dicts map onto EpisodeSample; unknown keys are listed for counting."""
    sample, unknown = sample_from_mapping({"reward": 1.0, "response": "r", "score": 3, "why": 1})
    assert sample.response == "r" and unknown == ["score", "why"]


def test_filter_handles_many_samples_with_bounded_state() -> None:
    """100k samples keep only k + k entries (heap-bounded)."""
    f = TopBottomFilter(top_k=2, bottom_k=2)
    rng = random.Random(0)
    for _ in range(100_000):
        f.add(EpisodeSample(reward=rng.random()))
    assert len(f._top) == 2 and len(f._bottom) == 2


@given(
    episodes=st.lists(
        st.tuples(st.sampled_from(["p0", "p1", "p2", "p3", None]), st.sampled_from([0.0, 0.5, 1.0, 2.0])), max_size=40
    ),
    k=st.integers(1, 4),
)
def test_distinct_prompts_prefer_the_best_episode_of_each_prompt(
    episodes: list[tuple[str | None, float]], k: int
) -> None:
    """With distinct_prompts, the top are the best episode of each of the k best prompts (an episode without a
    prompt is its own), then, if there are fewer prompts than k, the next best episodes whatever their prompt; the
    bottom likewise from below. A reference over all episodes gives the same rewards and prompts."""
    f = TopBottomFilter(top_k=k, bottom_k=0, distinct_prompts=True)
    for index, (prompt, reward) in enumerate(episodes):
        f.add(EpisodeSample(reward=reward, prompt=prompt, episode_id=index))
    top = [s for selection, s in f.drain() if selection == "top"]
    best: dict[object, tuple[float, int]] = {}
    for index, (prompt, reward) in enumerate(episodes):
        key = prompt if prompt is not None else ("none", index)
        if key not in best or (reward, -index) > (best[key][0], -best[key][1]):
            best[key] = (reward, index)
    first = sorted(best.values(), key=lambda item: (-item[0], item[1]))[:k]
    rest = sorted(
        ((r, i) for i, (_, r) in enumerate(episodes) if (r, i) not in first), key=lambda item: (-item[0], item[1])
    )
    expected = [*first, *rest][: min(k, len(episodes))]
    assert [s.episode_id for s in top] == [index for _, index in expected]
