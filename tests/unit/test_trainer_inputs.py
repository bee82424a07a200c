"""The trainer-input fixture agrees with itself: key counts equal its constants, and each group of keys carries the
Python types its upstream citation names (verl's numpy scalars, TRL's floats and Nones, torchforge's ints/floats)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
import torch

from tests.fixtures import trainer_inputs as ti

_VERL_INT64 = {"num_preempted/min", "num_preempted/max", "slowest/num_preempted"}
_VERL_INT = {"slowest/prompt_length", "slowest/response_length"}


def _verl_type(key: str) -> type:
    """The type the fixture's citations give each verl key."""
    if key in ("actor/entropy", "perf/time_per_step", "perf/throughput", "global_seqlen/mean"):
        return float
    if key in ("perf/mfu/actor_infer", "perf/total_num_tokens", "training/rollout_probs_diff_valid"):
        return int
    if key.startswith(("global_seqlen/", "training/global_step", "training/epoch")):
        return int
    if key.startswith(("actor/", "perf/")):
        return np.float64
    if key.startswith("rollout_corr/"):
        return float if key.startswith("rollout_corr/rollout_is_") else np.float64
    if key.startswith(("num_turns/min", "num_turns/max", "val-aux/num_turns/min", "val-aux/num_turns/max")):
        return np.int32
    if key.startswith(("num_turns/", "val-")):
        return np.float64
    if key.startswith("timing_s/agent_loop/"):
        name = key.removeprefix("timing_s/agent_loop/")
        return np.int64 if name in _VERL_INT64 else int if name in _VERL_INT else np.float64
    return float


@pytest.mark.parametrize("rollout_correction", [False, True])
def test_verl_step_counts_and_types(rollout_correction: bool) -> None:
    """A GRPO step has the documented number of keys, each of the type its citation names, none a tensor."""
    metrics = ti.verl_grpo_step(7, rollout_correction=rollout_correction)
    expected = ti.VERL_GRPO_STEP_KEYS_ROLLOUT_CORRECTION if rollout_correction else ti.VERL_GRPO_STEP_KEYS
    assert len(metrics) == expected
    assert {key: type(value) for key, value in metrics.items()} == {key: _verl_type(key) for key in metrics}
    assert not any(isinstance(value, torch.Tensor) for value in metrics.values())


def test_verl_rollout_correction_adds_its_groups() -> None:
    """Rollout correction adds the debug, importance-sampling and off-policy keys, keeping every plain key and
    the actor's np.float64 off-policy values in the trainer's positions (before ``actor/kl_coef``)."""
    plain = ti.verl_grpo_step(7, rollout_correction=False)
    corrected = ti.verl_grpo_step(7, rollout_correction=True)
    added = [key for key in corrected if key not in plain]
    assert set(plain) <= set(corrected)
    assert len([key for key in added if key.startswith("training/rollout_")]) == 5
    assert len([key for key in added if key.startswith("rollout_corr/rollout_is_")]) == 14
    assert len([key for key in added if key.startswith("rollout_corr/") and "rollout_is_" not in key]) == 13
    keys = list(corrected)
    assert keys.index("rollout_corr/chi2_seq") < keys.index("actor/pg_loss") < keys.index("actor/kl_coef")


def test_verl_validation_and_checkpoint_steps() -> None:
    """A test step merges the validation dict and ``timing_s/testing``; a save step adds ``timing_s/save_checkpoint``
    (both timed outside ``step``)."""
    step = ti.verl_grpo_step(10, rollout_correction=False, validation=True, checkpoint=True)
    validation = ti.verl_validation(10)
    assert len(validation) == ti.VERL_VALIDATION_KEYS
    assert len(step) == ti.VERL_GRPO_STEP_KEYS + ti.VERL_VALIDATION_KEYS + 2
    assert {"timing_s/testing", "timing_s/save_checkpoint"} <= set(step)
    assert all(step[key] == value for key, value in validation.items())


def test_verl_validation_keys() -> None:
    """Core keys are the core variable's mean/best at the full n; the others follow verl's bootstrap sizes; ``pred``
    adds ``maj@k``; n=1 leaves ``mean@1`` only."""
    validation = ti.verl_validation(3)
    core = sorted(key for key in validation if key.startswith("val-core/"))
    assert core == sorted(
        f"val-core/{source}/acc/{name}"
        for source in ti.VERL_VAL_DATA_SOURCES
        for name in ("mean@16", "best@16/mean", "best@16/std")
    )
    stats = {key.split("/reward/")[1] for key in validation if "/openai/gsm8k/reward/" in key}
    sizes = {int(name.split("@")[1].split("/")[0]) for name in stats}
    assert sizes == {2, 4, 8, 16} and len(stats) == 18
    uneven = {key.rsplit("/", 2)[-2] for key in ti.verl_validation(3, n=30) if "/gsm8k/reward/best@" in key}
    assert uneven == {"best@2", "best@4", "best@8", "best@16", "best@30"}
    voted = ti.verl_validation(3, extra_infos=("score", "acc", "pred"))
    assert not any("/pred/" in key for key in voted)
    assert "val-core/openai/gsm8k/acc/maj@16/mean" in voted
    assert len(ti.verl_validation(3, n=1)) == 2 * 2 + 3


def test_trl_log_keys_and_types() -> None:
    """TRL's logs are Python floats (num_tokens too) in the trainer's order; vLLM and beta add their keys; a reward
    function that returned None for a whole window logs None."""
    logs = ti.trl_log(20)
    assert len(logs) == ti.TRL_LOG_KEYS
    assert list(logs)[:3] == ["loss", "grad_norm", "learning_rate"] and list(logs)[-1] == "epoch"
    assert all(type(value) is float for value in logs.values())
    extended = ti.trl_log(20, use_vllm=True, beta=0.04)
    assert set(extended) - set(logs) == {
        "kl",
        *(f"sampling/sampling_logp_difference/{stat}" for stat in ("mean", "max")),
        *(f"sampling/importance_sampling_ratio/{stat}" for stat in ("min", "mean", "max")),
    }
    unscored = ti.trl_log(20, unscored=("accuracy_reward",))
    assert unscored["rewards/accuracy_reward/mean"] is None and unscored["rewards/accuracy_reward/std"] is None
    end = ti.trl_train_end()
    assert len(end) == ti.TRL_TRAIN_END_KEYS and all(type(value) is float for value in end.values())
    assert "train_tokens_per_second" not in end and end["total_flos"] == 0.0


def test_trl_reward_outputs_and_completion_logs() -> None:
    """Reward functions return one float or None per completion; the completions table holds NaN for None."""
    outputs = ti.trl_reward_outputs(8)
    assert set(outputs) == set(ti.TRL_REWARD_FUNCS)
    assert all(len(values) == 8 for values in outputs.values())
    assert None in outputs["accuracy_reward"]
    assert all(value is None or type(value) is float for values in outputs.values() for value in values)
    logged = ti.trl_completion_logs(8)["rewards"]["accuracy_reward"]
    assert [math.isnan(value) for value in logged] == [value is None for value in outputs["accuracy_reward"]]


def test_torchforge_metric_calls() -> None:
    """torchforge's calls: the documented count, Reduce member names, plain ints and floats, and one sample dict
    of the Episode.to_dict form per kept episode."""
    calls = ti.torchforge_metric_calls()
    assert len(calls) == ti.TORCHFORGE_METRIC_CALLS
    assert {reduction for _, _, reduction in calls} == {"MEAN", "SUM", "MAX", "MIN", "STD", "SAMPLE"}
    samples = [value for _, value, reduction in calls if reduction == "SAMPLE"]
    assert len(samples) == 8 and all(type(sample) is dict for sample in samples)
    assert all(type(value) in (int, float) for _, value, reduction in calls if reduction != "SAMPLE")
    assert list(samples[0]) == [
        "episode_id",
        "policy_version",
        "prompt",
        "response",
        "target",
        "reward",
        "advantage",
        "request_len",
        "response_len",
        "pad_id",
        *ti.TORCHFORGE_REWARD_FUNCS,
        "score",
    ]
    assert all(sample["score"] == sample["reward"] for sample in samples)


def test_torchforge_episode_fields() -> None:
    """The Episode stand-in has torchforge's fields with their types, and policy_version reads the completion."""
    episode = ti.torchforge_episode(2, policy_version=5)
    assert [f.name for f in dataclasses.fields(episode)] == [
        "episode_id",
        "pad_id",
        "request_len",
        "response_len",
        "target",
        "request",
        "response",
        "completion",
        "generator_logprobs",
        "ref_logprobs",
        "reward",
        "reward_breakdown",
        "advantage",
        "loss_mask",
    ]
    typed: dict[str, Any] = {
        "episode_id": str,
        "pad_id": int,
        "request_len": int,
        "response_len": int,
        "target": str,
        "request": str,
        "response": str,
        "completion": ti.TorchforgeCompletion,
        "generator_logprobs": torch.Tensor,
        "ref_logprobs": type(None),
        "reward": float,
        "reward_breakdown": dict,
        "advantage": float,
        "loss_mask": torch.Tensor,
    }
    assert {name: type(getattr(episode, name)) for name in typed} == typed
    assert episode.policy_version == 5 and not hasattr(episode, "truncated")
    assert episode.reward == sum((episode.reward_breakdown or {}).values()) / 2
