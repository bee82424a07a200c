"""``otel_rl.tee_wandb()`` and ``otel_rl.tee_tensorboard()``: what W&B and TensorBoard trainers log, replayed through
real ``wandb.log`` (offline and disabled runs) and a real ``SummaryWriter``, reaches otel-rl through the metrics-dict
bridge, every key recorded exactly (under its canonical key) or counted.

The replayed keys, their value types and the calls that log them are transcribed from each trainer's source at the
commit named beside it (read from the stored snapshots of their repositories):

- OpenRLHF ``OPENRLHF_COMMIT``: ``PPOTrainer.train_step``/``fit`` and ``PolicyModelActor.fit`` (the status dict),
  ``openrlhf/utils/logging_utils.py`` ``WandbLogger.log_train`` (``train/`` prefix, ``train/global_step`` as a value,
  the generated sample as a ``wandb.Table`` logged first) and ``TensorboardLogger.log_train``.
- prime-rl ``PRIME_RL_COMMIT``: ``orchestrator/orchestrator.py`` (``EpisodeMetrics.to_wandb`` over ``{agg, <env>}``
  x ``{all, effective}``, ``progress/``, ``time/``, ``off_policy/`` with ``in_flight``/``in_queue``/``dropped``),
  ``trainer/rl/train.py`` (``perf/``, ``optim/``, the tensor stats as ``filter_rl_trainer_tensor_stats_for_wandb``
  leaves them); ``monitors/wandb/monitor.py`` logs ``{**metrics, "step": step}`` without ``step=``.
- SkyRL ``SKYRL_COMMIT``: ``skyrl/train/trainer.py`` and ``fully_async_trainer.py`` (``generate/``, ``reward/``,
  ``loss/``, ``policy/``, ``async/staleness_*``, ``timing/``), ``utils/tracking.py`` (``wandb.log(data=, step=,
  commit=)``; TensorBoard ``add_scalar(key, value, step)``).
- slime ``SLIME_COMMIT``: ``observability/rollout_metrics.py`` (``rollout/response_len/``, ``rollout/zero_std/``,
  ``perf/``), ``train_metric_utils.py`` (``rollout/<field>``), ``backends/megatron_utils/model.py`` (``train/``),
  ``observability/logging_utils.log`` (``wandb.log(metrics)``; TensorBoard without the step key, at its value).
- AReaL ``AREAL_COMMIT``: ``areal/trainer/ppo/actor.py`` (``stats_tracker`` under ``ppo_actor``, ``update`` and
  ``version_stats``: ``avg``/``min``/``max``, per-token staleness), ``areal/utils/stats_logger.py`` ``commit``
  (``__count`` keys dropped, ``wandb.log(item, step=)``, ``add_scalar(key, val, step)``).
"""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import otel_rl_contract as contract
import pytest
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
from opentelemetry.sdk.metrics.export import ExponentialHistogramDataPoint, HistogramDataPoint

import otel_rl
from otel_rl._tee import STEP_KEYS
from otel_rl.tracking import canonical_key
from tests.conftest import EXPORT_WAIT_S, EncodingMetricExporter, attributes_of

METRIC = contract.series(contract.METRICS.histogram)
METRIC_MAX = contract.series(contract.METRICS.maximum)
POLICY_VERSION = contract.series(contract.POLICY_VERSION)
STEP = contract.series(contract.STEP)

wandb = pytest.importorskip("wandb")
SummaryWriter = pytest.importorskip("torch.utils.tensorboard").SummaryWriter

OPENRLHF_COMMIT = "3c3be6234e0cb353e76bb8019947db9dfe99fca7"
"""OpenRLHF/OpenRLHF main of 2026-08-13 (#1307)."""
PRIME_RL_COMMIT = "559b44772e471d1538537b8805cc77f3824a5e64"
"""PrimeIntellect-ai/prime-rl main of 2026-08-21 (#3337)."""
SKYRL_COMMIT = "a9564572eb8e91076be43c1bd5e4615e3de17265"
"""NovaSky-AI/SkyRL main of 2026-08-21 (#2001)."""
SLIME_COMMIT = "624b824a898ab0ec1fcb4d373004c7f3852bf515"
"""THUDM/slime main of 2026-08-21 (#2298)."""
AREAL_COMMIT = "4aef98d8d818af55b43621aaadba047ae10f4e77"
"""inclusionAI/AReaL main of 2026-05-21 (#1357)."""

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3
_VERSION_KEYS = ("v_theta",)
"""Keys of the replays that set the policy version instead of being a metric (AReaL's version being trained)."""


@dataclass
class Logged:
    """One trainer's logging over some steps: its ``wandb.log`` calls as ``(data, kwargs)`` and its TensorBoard
    ``add_scalar`` calls as ``(tag, value, global_step)`` (empty where the trainer has no TensorBoard logger)."""

    wandb_calls: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    scalars: list[tuple[str, Any, int]] = field(default_factory=list)


def _values(rng: np.random.Generator, keys: list[str], *, ints: tuple[str, ...] = ()) -> dict[str, Any]:
    """Plausible values for ``keys``: Python floats, Python ints for the keys ending in one of ``ints``."""
    return {key: int(rng.integers(0, 4096)) if key.endswith(ints) else float(rng.normal()) for key in keys}


# ---- OpenRLHF ---------------------------------------------------------------------------------------------------

_OPENRLHF_ACTOR = [
    # PolicyModelActor.training_step metrics (policy_loss, entropy_loss with actor.entropy_coef set, actor_lr,
    # actor_grad_norm), then experience.info (reward, return, kl and logprobs_diff with algo.kl.use_loss,
    # ppo_clip_ratio, ppo_kl, vllm_kl with rollout log-probs) and the episode fields, all reduced to floats.
    *("policy_loss", "entropy_loss", "actor_lr", "actor_grad_norm", "reward", "return", "kl", "logprobs_diff"),
    *("ppo_clip_ratio", "ppo_kl", "vllm_kl", "response_length", "truncated", "total_length"),
]
_OPENRLHF_TRAINER = [
    *("timing/make_experience", "timing/ppo_train", "timing/broadcast"),
    *("rollout/reward_mean", "rollout/reward_std", "rollout/response_length_mean", "rollout/truncated_rate"),
    *("rollout/num_samples", "timing/generation", "timing/step_total"),
]


def openrlhf(steps: int = STEPS) -> Logged:
    """``save_logs_and_checkpoints(global_step, status)`` per step through WandbLogger and TensorboardLogger."""
    rng, logged = np.random.default_rng(1), Logged()
    for global_step in range(1, steps + 1):
        status: dict[str, Any] = _values(rng, _OPENRLHF_ACTOR + _OPENRLHF_TRAINER)
        status["generated_samples"] = ["Question ... Answer: 42", float(rng.choice([0.0, 1.0]))]
        samples = status.pop("generated_samples")
        table = wandb.Table(columns=["global_step", "text", "reward"], data=[[global_step, *samples]])
        logged.wandb_calls.append(({"train/generated_samples": table}, {}))
        logs = {f"train/{k}": v for k, v in {**status, "global_step": global_step}.items()}
        logged.wandb_calls.append((logs, {}))
        logged.scalars += [(f"train/{k}", v, global_step) for k, v in status.items()]
    return logged


# ---- prime-rl ---------------------------------------------------------------------------------------------------

_PRIME_AGENT, _PRIME_ENV = "default", "gsm8k"
_PRIME_STATS = ("mean", "max", "min", "p10", "p90")  # Stat.to_dict
_PRIME_TRACE = ("reward", "num_total_tokens", "num_input_tokens", "num_output_tokens", "num_turns", "num_branches")
_PRIME_EPISODE = ("num_total_tokens", "num_input_tokens", "num_output_tokens", "num_turns", "num_branches")
_PRIME_TIMING = ("setup", "agent", "finalize", "scoring", "agent/model", "agent/harness", "total")


def _prime_episodes(prefix: str, subset: str) -> list[str]:
    """The keys of ``TrainMetrics.to_wandb(prefix=, subset=)`` for one agent with one reward function."""
    base, agent = f"{prefix}/{subset}", f"{prefix}/{subset}/{_PRIME_AGENT}"
    keys = [f"{base}/{name}/{stat}" for name in _PRIME_EPISODE for stat in _PRIME_STATS]
    if subset == "all":
        keys += [f"{base}/has_error/mean", f"{base}/cancelled/mean"]
    keys += [f"{agent}/{name}/{stat}" for name in _PRIME_TRACE for stat in _PRIME_STATS]
    keys += [f"{agent}/is_truncated/mean", f"{agent}/is_completed/mean"]
    keys += [f"{agent}/timing/{phase}/{stat}" for phase in _PRIME_TIMING for stat in _PRIME_STATS]
    keys += [f"{agent}/rewards/correct_answer/{stat}" for stat in _PRIME_STATS]
    if subset == "all":
        keys += [f"{agent}/has_error/mean", f"{agent}/cancelled/mean"]
        keys += [f"{agent}/solved_none", f"{agent}/solved_all", f"{agent}/solved_some"]
    keys += [f"{agent}/stop_condition/generation_truncated", f"{agent}/stop_condition/stop"]
    return [*keys, f"{agent}/is_trainable/mean", f"{agent}/is_admitted/mean"]


_PRIME_ORCHESTRATOR = [
    *_prime_episodes("train/agg", "all"),
    *_prime_episodes("train/agg", "effective"),
    *_prime_episodes(f"train/{_PRIME_ENV}", "all"),
    *_prime_episodes(f"train/{_PRIME_ENV}", "effective"),
    *("progress/tokens", "progress/input_tokens", "progress/output_tokens", "progress/rollouts", "progress/tasks"),
    *("progress/total_tokens", "progress/total_rollouts", "progress/total_tasks"),
    *("time/step", "time/pack", "time/save_ckpt", "time/wait_for_policy"),
    *("off_policy/mean", "off_policy/max", "off_policy/in_flight/mean", "off_policy/in_flight/max"),
    *("off_policy/in_queue/mean", "off_policy/in_queue/max", "off_policy/dropped", f"batch/{_PRIME_ENV}"),
]
_PRIME_COUNTS = ("tokens", "rollouts", "tasks")
"""The ``progress/`` values that are counts (ints)."""
_PRIME_TRAINER = [
    ["perf/throughput", "perf/throughput_per_gpu", "perf/mfu", "perf/peak_memory"],
    ["optim/lr", "optim/grad_norm"],
    # Tensors.compute_stats (mean, median, std, min, max) as filter_rl_trainer_tensor_stats_for_wandb leaves them
    [
        *(f"entropy/all/{s}" for s in ("mean", "std", "max")),
        *(f"loss/{s}" for s in ("mean", "median", "std", "min", "max")),
        *(f"mismatch_kl/all/{s}" for s in ("mean", "std", "max")),
        *(f"masked_mismatch_kl/{s}" for s in ("mean", "max")),
        *(f"unmasked_mismatch_kl/{s}" for s in ("mean", "max")),
        "kl_ent_ratio/mean",
    ],
    ["time/step", "time/wait_for_batch", "time/load_data", "time/broadcast_weights", "time/save_ckpt"],
]


def prime_rl(steps: int = STEPS) -> Logged:
    """The orchestrator's and the trainer's ``monitors.log(metrics, step=step)``: ``wandb.log({**metrics, "step":
    step})`` (``define_metric("*", step_metric="step")``). prime-rl has no TensorBoard logger."""
    rng, logged = np.random.default_rng(2), Logged()
    for step in range(1, steps + 1):
        logged.wandb_calls.append(({**_values(rng, _PRIME_ORCHESTRATOR, ints=_PRIME_COUNTS), "step": step}, {}))
        for keys in _PRIME_TRAINER:
            logged.wandb_calls.append(({**_values(rng, keys), "step": step}, {}))
    return logged


# ---- SkyRL ------------------------------------------------------------------------------------------------------

_SKYRL_KEYS = [
    *("generate/min_num_tokens", "generate/max_num_tokens", "generate/avg_num_tokens", "generate/std_num_tokens"),
    *("generate/avg_tokens_non_zero_rewards", "generate/avg_tokens_zero_rewards"),
    *("generate/batch_num_seq", "generate/batch_padded_seq_len"),
    *("reward/avg_pass_at_5", "reward/avg_raw_reward", "reward/mean_positive_reward"),
    *("loss/avg_final_rewards", "loss/avg_raw_advantages", "loss/avg_raw_advantages_abs"),
    *("loss/avg_kl", "loss/avg_kl_max", "loss/kl_loss_coef"),
    *("policy/final_loss", "policy/policy_loss", "policy/policy_entropy", "policy/response_length"),
    *("policy/policy_lr", "policy/loss_metrics/clip_ratio", "policy/policy_kl", "policy/grad_norm"),
    *("async/staleness_mean", "async/staleness_max", "async/staleness_min", "async/staleness_ratio"),
    *("async/staleness_violation_count", "trainer/epoch"),
    *("timing/generate", "timing/convert_to_training_input", "timing/policy_train", "timing/sync_weights"),
    "timing/step",
]
_SKYRL_INTS = (
    "min_num_tokens",
    "max_num_tokens",
    "batch_num_seq",
    "batch_padded_seq_len",
    "violation_count",
    "trainer/epoch",
)


def skyrl(steps: int = STEPS) -> Logged:
    """``Tracking.log(log_payload, step=global_step, commit=True)``: ``wandb.log(data=, step=, commit=)`` and
    ``add_scalar(key, value, step)``; the payload carries ``trainer/global_step`` too."""
    rng, logged = np.random.default_rng(3), Logged()
    for step in range(1, steps + 1):
        data = {**_values(rng, _SKYRL_KEYS, ints=_SKYRL_INTS), "trainer/global_step": step}
        logged.wandb_calls.append(({"data": data}, {"step": step, "commit": True}))
        logged.scalars += [(key, value, step) for key, value in data.items()]
    return logged


# ---- slime ------------------------------------------------------------------------------------------------------

_SLIME_ROLLOUT = [
    *(f"rollout/response_len/{s}" for s in ("mean", "median", "max", "min")),
    *("rollout/zero_std/count_0.0", "rollout/zero_std/count_1.0", "rollout/repetition_frac"),
    *("rollout/truncated_ratio", "perf/rollout_time", "perf/tokens_per_gpu_per_sec"),
    "perf/longest_sample_tokens_per_sec",
]
_SLIME_DATA = [
    *("rollout/rewards", "rollout/raw_reward", "rollout/truncated", "rollout/response_lengths"),
    *("rollout/total_lengths", "rollout/log_probs", "rollout/ref_log_probs", "rollout/advantages", "rollout/returns"),
]
_SLIME_TRAIN = [
    *("train/loss", "train/pg_loss", "train/entropy_loss", "train/pg_clipfrac", "train/ppo_kl", "train/kl_loss"),
    *("train/train_rollout_logprob_abs_diff", "train/grad_norm", "train/lr-pg_0", "train/global_batch_size"),
]


def slime(steps: int = STEPS) -> Logged:
    """Per rollout: the rollout manager's metrics and the actor's rollout fields (``step_key="rollout/step"``), then
    one training step (``step_key="train/step"``, the accumulated step id: one step per rollout by default).
    ``logging_utils.log``: ``wandb.log(metrics)``; TensorBoard: every key but the step key, at its value."""
    rng, logged = np.random.default_rng(4), Logged()
    for rollout_id in range(1, steps + 1):
        rollout = _values(rng, _SLIME_ROLLOUT, ints=("zero_std/count_0.0", "zero_std/count_1.0"))
        for metrics, step_key in (
            ({**rollout, "rollout/step": rollout_id}, "rollout/step"),
            ({**_values(rng, _SLIME_DATA), "rollout/step": rollout_id}, "rollout/step"),
            ({**_values(rng, _SLIME_TRAIN, ints=("global_batch_size",)), "train/step": rollout_id}, "train/step"),
        ):
            logged.wandb_calls.append((metrics, {}))
            logged.scalars += [(k, v, metrics[step_key]) for k, v in metrics.items() if k != step_key]
    return logged


# ---- AReaL ------------------------------------------------------------------------------------------------------

_AREAL_MIN_MAX = ("avg", "min", "max")
_AREAL_KEYS = [
    *(f"ppo_actor/{d}" for d in ("correct_n_seqs", "incorrect_n_seqs", "n_seqs", "n_tokens", "n_valid_tokens")),
    *(
        f"ppo_actor/{name}/{s}"
        for name in ("correct_seq_len", "incorrect_seq_len", "advantages", "kl_rewards", "final_reward")
        for s in _AREAL_MIN_MAX
    ),
    *(
        f"ppo_actor/{name}/{s}"
        for name in ("no_eos_ratios", "task_reward", "prompt_len", "seq_len")
        for s in _AREAL_MIN_MAX
    ),
    *("ppo_actor/mask_no_eos_with_zero", "ppo_actor/eps_clip", "ppo_actor/use_dual_clip"),
    *(f"ppo_actor/update/{d}" for d in ("n_tokens", "n_valid_tokens", "clipped_tokens", "dual_clipped_tokens")),
    *(
        f"ppo_actor/update/{name}/{s}"
        for name in ("importance_weight", "approx_kl", "new_logp", "old_logp", "entropy", "actor_loss")
        for s in _AREAL_MIN_MAX
    ),
    *(
        f"ppo_actor/update/{name}/{s}"
        for name in ("clip_ratio", "dual_clip_ratio", "clipped_new_logp", "clipped_old_logp")
        for s in _AREAL_MIN_MAX
    ),
    "ppo_actor/update/version_stats/n_valid_tokens",
    *(
        f"ppo_actor/update/version_stats/sample_staleness_{v}_{s}"
        for v in ("proximal", "theta")
        for s in _AREAL_MIN_MAX
    ),
    *("ppo_actor/update/version_stats/v_proximal", "ppo_actor/update/version_stats/n_valid_generated_tokens"),
    *("ppo_actor/update/update_successful", "ppo_actor/update/grad_norm", "ppo_actor/update/lr"),
]


def areal(steps: int = STEPS) -> Logged:
    """``StatsLogger.commit(epoch, step, global_step, stats)``: every exported value a float (``__count`` keys
    dropped), ``wandb.log(item, step=)`` and ``add_scalar(key, val, step)``; ``version_stats/v_theta`` is the
    version being trained."""
    rng, logged = np.random.default_rng(5), Logged()
    for step in range(1, steps + 1):
        item = {**_values(rng, _AREAL_KEYS), "ppo_actor/update/version_stats/v_theta": float(10 + step)}
        logged.wandb_calls.append((item, {"step": step}))
        logged.scalars += [(key, value, step) for key, value in item.items()]
    return logged


TRAINERS: dict[str, Callable[[], Logged]] = {
    "OpenRLHF": openrlhf,
    "prime-rl": prime_rl,
    "SkyRL": skyrl,
    "slime": slime,
    "AReaL": areal,
}
TENSORBOARD_TRAINERS = ("OpenRLHF", "SkyRL", "slime", "AReaL")


# ---- what otel-rl should hold -----------------------------------------------------------------------------------


@dataclass
class Expected:
    """What a replay must leave in otel-rl: each canonical key's values, the last step, the last policy version,
    and how many values are rejected (not numbers)."""

    values: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    step: int | None = None
    version: float | None = None
    rejected: int = 0

    def add(self, data: dict[str, Any], step: Any, *, step_keys: tuple[str, ...]) -> None:
        found = [data[key] for key in step_keys if key in data]
        step = step if step is not None else (found[0] if found else None)
        self.step = step if step is not None else self.step
        for key, value in data.items():
            if key in step_keys:
                continue
            if key.endswith(_VERSION_KEYS):
                self.version = value
            elif isinstance(value, int | float):
                self.values[canonical_key(key)].append(float(value))
            else:
                self.rejected += 1


def _expected_from_wandb(logged: Logged) -> Expected:
    expected = Expected()
    for data, kwargs in logged.wandb_calls:
        expected.add(data.get("data", data), kwargs.get("step"), step_keys=STEP_KEYS)
    return expected


def _expected_from_tensorboard(logged: Logged) -> Expected:
    expected = Expected()
    for tag, value, step in logged.scalars:
        expected.add({tag: value}, step, step_keys=())
    return expected


def _telemetry(exporter: EncodingMetricExporter) -> otel_rl.Telemetry:
    return otel_rl.Telemetry(
        otel_rl.TelemetryConfig(run_id="tee", exporter="none", export_interval_s=60),
        metric_exporter=exporter,
        log_exporter=InMemoryLogRecordExporter(),
    )


def _metric_points(exporter: EncodingMetricExporter) -> dict[str, dict[str, float]]:
    """key -> {"count", "sum", "max", "min"} of every exported ``rl.metric`` stream."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for labels, point in exporter.streams(contract.METRICS.histogram.name).items():
        assert isinstance(point, HistogramDataPoint | ExponentialHistogramDataPoint), labels
        out[dict(labels)[contract.METRIC_KEY]].update(count=point.count, sum=point.sum)
    for name, metric in (("max", contract.METRICS.maximum), ("min", contract.METRICS.minimum)):
        for labels, value in exporter.numbers(metric.name).items():
            out[dict(labels)[contract.METRIC_KEY]][name] = value
    return dict(out)


def _rejected(exporter: EncodingMetricExporter) -> int:
    return int(sum(exporter.numbers(contract.VALUES_REJECTED.name).values()))


def _assert_recorded(exporter: EncodingMetricExporter, expected: Expected) -> None:
    """Every canonical key holds exactly the expected values; step, version and rejections as expected."""
    points = _metric_points(exporter)
    assert contract.OVERFLOW not in points
    assert set(points) == set(expected.values)
    for key, values in expected.values.items():
        point = points[key]
        assert (point["count"], point["max"], point["min"]) == (len(values), max(values), min(values)), key
        assert math.isclose(point["sum"], math.fsum(values), rel_tol=1e-12, abs_tol=1e-12), key
    assert exporter.number(contract.STEP.name) == expected.step
    if expected.version is not None:
        assert exporter.number(contract.POLICY_VERSION.name) == expected.version
    assert _rejected(exporter) == expected.rejected


@pytest.fixture
def wandb_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """W&B writes under the test's tmp_path and prints nothing."""
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    return tmp_path


@contextmanager
def _wandb_run(mode: str, directory: Path) -> Iterator[Any]:
    run = wandb.init(mode=mode, project="otel-rl-tee", dir=str(directory))
    try:
        yield run
    finally:
        run.finish()


def _log_all(logged: Logged) -> None:
    for data, kwargs in logged.wandb_calls:
        if "data" in data:
            wandb.log(data=data["data"], **kwargs)
        else:
            wandb.log(data, **kwargs)


# ---- the replays ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["offline", "disabled"])
@pytest.mark.parametrize("trainer", list(TRAINERS))
def test_wandb_logs_of_each_trainer_reach_otel_rl(trainer: str, mode: str, wandb_dir: Path) -> None:
    """Each trainer's own ``wandb.log`` calls, through a real W&B run: every key under its canonical key with its
    exact values, the step from ``step=`` or the dict's step key, non-numbers (a ``wandb.Table``) counted."""
    exporter = EncodingMetricExporter()
    telemetry = _telemetry(exporter)
    logged = TRAINERS[trainer]()
    with otel_rl.tee_wandb(telemetry) as tee, _wandb_run(mode, wandb_dir):
        assert tee.active
        _log_all(logged)
    assert not tee.active
    assert telemetry.flush(EXPORT_WAIT_S)
    _assert_recorded(exporter, _expected_from_wandb(logged))
    telemetry.shutdown(EXPORT_WAIT_S)


@pytest.mark.parametrize("trainer", TENSORBOARD_TRAINERS)
def test_tensorboard_scalars_of_each_trainer_reach_otel_rl(trainer: str, tmp_path: Path) -> None:
    """Each trainer's own ``add_scalar`` calls on a real ``SummaryWriter``: every tag under its canonical key with
    its exact values at its ``global_step``, and the event file still holds every scalar."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    exporter = EncodingMetricExporter()
    telemetry = _telemetry(exporter)
    logged = TRAINERS[trainer]()
    writer = SummaryWriter(log_dir=str(tmp_path))
    with otel_rl.tee_tensorboard(telemetry):
        for tag, value, step in logged.scalars:
            writer.add_scalar(tag, value, step)
    writer.close()
    assert telemetry.flush(EXPORT_WAIT_S)
    _assert_recorded(exporter, _expected_from_tensorboard(logged))
    telemetry.shutdown(EXPORT_WAIT_S)
    events = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    events.Reload()
    assert set(events.Tags()["scalars"]) == {tag for tag, _, _ in logged.scalars}


def test_the_canonical_keys_cover_what_the_trainers_share() -> None:
    """Reward, KL, entropy, response length and staleness of the five trainers land under the shared keys: the
    table of otel_rl.tracking, checked on their real key sets."""
    keys = {
        name: {canonical_key(k) for data, _ in TRAINERS[name]().wandb_calls for k in data.get("data", data)}
        for name in TRAINERS
    }
    shared = {
        "OpenRLHF": {"reward/mean", "reward/std", "kl/mean", "ppo_kl/mean", "mismatch_kl/mean", "entropy/mean"},
        "prime-rl": {"reward/mean", "reward/max", "mismatch_kl/mean", "entropy/mean", "staleness/mean"},
        "SkyRL": {"reward/mean", "kl/mean", "kl/max", "entropy/mean", "response_length/std", "staleness/min"},
        "slime": {"reward/mean", "kl/mean", "ppo_kl/mean", "entropy/mean", "response_length/median"},
        "AReaL": {"reward/mean", "reward/min", "ppo_kl/max", "entropy/mean", "staleness/max", "prompt_length/mean"},
    }
    for name, wanted in shared.items():
        assert wanted <= keys[name], (name, wanted - keys[name])
    assert {"response_length/mean", "response_length/max"} <= keys["OpenRLHF"] | keys["prime-rl"] & keys["SkyRL"]
    assert {"staleness_in_queue/max", "staleness_in_flight/mean", "staleness/dropped"} <= keys["prime-rl"]
    assert {"zero_std_groups/0.0", "zero_std_groups/1.0"} <= keys["slime"]


# ---- the tee's own behaviour ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["offline", "disabled"])
def test_a_run_started_before_the_tee_is_teed_and_close_restores(mode: str, wandb_dir: Path) -> None:
    """``wandb.log`` bound before the tee (a disabled run binds its own ``log``) is teed; after ``close()`` W&B's
    methods are the originals again and nothing more reaches otel-rl."""
    from wandb.sdk.lib.noop_run import NoopRun
    from wandb.sdk.wandb_run import Run

    methods = ((Run, "_log"), (Run, "_define_metric"), (NoopRun, "log"), (NoopRun, "define_metric"))
    originals = [owner.__dict__[name] for owner, name in methods]
    exporter = EncodingMetricExporter()
    telemetry = _telemetry(exporter)
    with _wandb_run(mode, wandb_dir):
        tee = otel_rl.tee_wandb(telemetry)
        wandb.log({"reward": 0.25}, step=1)
        tee.close()
        tee.close()
        assert [owner.__dict__[name] for owner, name in methods] == originals
        wandb.log({"reward": 0.75}, step=2)
    assert telemetry.flush(EXPORT_WAIT_S)
    assert _metric_points(exporter)["reward/mean"]["count"] == 1
    assert exporter.number(contract.STEP.name) == 1
    telemetry.shutdown(EXPORT_WAIT_S)


def _declared_steps(spans: Any) -> list[Any]:
    """The steps the telemetry declared, in order: its ``rl.step`` spans."""
    return [
        attributes_of(span)[contract.SAMPLE_STEP]
        for span in spans.get_finished_spans()
        if span.name == contract.STEP_SPAN
    ]


def _spanned_telemetry(exporter: EncodingMetricExporter) -> tuple[otel_rl.Telemetry, Any]:
    """A telemetry whose spans (one ``rl.step`` per declared step) go to an in-memory exporter, returned with it."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    telemetry = otel_rl.Telemetry(
        otel_rl.TelemetryConfig(run_id="tee", exporter="none", export_interval_s=60),
        metric_exporter=exporter,
        log_exporter=InMemoryLogRecordExporter(),
        span_exporter=spans,
    )
    return telemetry, spans


@pytest.mark.parametrize(("mode", "steps"), [("offline", [2, 3, 7, 8]), ("disabled", [0, 1, 7, 8])])
def test_a_row_without_a_step_takes_the_runs_own_counter(mode: str, steps: list[int], wandb_dir: Path) -> None:
    """``wandb.log(metrics)`` with neither ``step=`` nor a step key is recorded at the step W&B files it under: the
    run's counter, which the two rows logged before the tee moved to 2 (a disabled run counts nothing in W&B, so
    the tee counts from its first row), one more per commit, a ``commit=False`` row with the commit after it,
    ``step=7`` moving it up (the next rows at 7, then 8)."""
    exporter = EncodingMetricExporter()
    telemetry, spans = _spanned_telemetry(exporter)
    with _wandb_run(mode, wandb_dir):
        wandb.log({"reward": 0.0})
        wandb.log({"reward": 0.0})
        with otel_rl.tee_wandb(telemetry):
            wandb.log({"reward": 1.0})
            wandb.log({"kl": 0.5}, commit=False)
            wandb.log({"reward": 2.0})
            wandb.log({"reward": 3.0}, step=7)
            wandb.log({"kl": 0.25})
            wandb.log({"reward": 4.0})
    assert telemetry.shutdown(EXPORT_WAIT_S)
    assert _declared_steps(spans) == steps
    points = _metric_points(exporter)
    assert (points["reward/mean"]["count"], points["reward/mean"]["sum"], points["kl/mean"]["count"]) == (4, 10.0, 2)
    assert exporter.number(contract.STEP.name) == steps[-1]


@pytest.mark.parametrize(("declared", "steps"), [(True, [10, 11]), (False, [0, 1, 10, 11])])
@pytest.mark.parametrize("mode", ["offline", "disabled"])
def test_a_run_whose_step_is_a_key_of_its_own_keeps_it(
    mode: str, declared: bool, steps: list[int], wandb_dir: Path
) -> None:
    """A run that declared its step metric (``define_metric("*", step_metric=...)``, as transformers' W&B integration
    does before TRL's ``profiling/`` rows), or, from then on, one that logged a step key (slime's ``rollout/step``):
    its rows without the key belong to the current step, not to W&B's counter (here 2, 3, ...). A run made before
    the tee is teed, ``wandb.define_metric`` included."""
    exporter = EncodingMetricExporter()
    telemetry, spans = _spanned_telemetry(exporter)
    with _wandb_run(mode, wandb_dir), otel_rl.tee_wandb(telemetry):
        if declared:
            wandb.define_metric("*", step_metric="rollout/step")
        wandb.log({"profiling/generate": 0.25})
        wandb.log({"profiling/generate": 0.5})
        for rollout in (10, 11):
            wandb.log({"rollout/raw_reward": 0.5, "rollout/step": rollout})
            wandb.log({"train/pg_loss": 0.1, "train/step": 3})
    assert telemetry.shutdown(EXPORT_WAIT_S)
    assert _declared_steps(spans) == steps
    points = _metric_points(exporter)
    assert (points["profiling/generate"]["count"], points["train/step"]["count"]) == (2, 2)


def test_a_second_tee_is_the_first_and_values_are_not_doubled(wandb_dir: Path) -> None:
    """Calling ``tee_wandb`` again returns the tee in place (each value recorded once); another telemetry is a
    configuration error until the first tee is closed."""
    exporter = EncodingMetricExporter()
    telemetry = _telemetry(exporter)
    with otel_rl.tee_wandb(telemetry) as first, _wandb_run("disabled", wandb_dir):
        assert otel_rl.tee_wandb(telemetry) is first
        other = otel_rl.Telemetry(otel_rl.TelemetryConfig(run_id="other", exporter="none"))
        with pytest.raises(ValueError, match=r'"telemetry" must be the one otel_rl.tee_wandb\(\) already tees'):
            otel_rl.tee_wandb(other)
        other.shutdown(EXPORT_WAIT_S)
        wandb.log({"kl": 0.5}, step=1)
    assert telemetry.flush(EXPORT_WAIT_S)
    assert _metric_points(exporter)["kl/mean"]["count"] == 1
    telemetry.shutdown(EXPORT_WAIT_S)


def test_concurrent_logging_threads_lose_nothing(wandb_dir: Path, tmp_path: Path) -> None:
    """Eight threads logging through W&B and TensorBoard at once: every value arrives, none twice."""
    exporter = EncodingMetricExporter()
    telemetry = _telemetry(exporter)
    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    calls = 200

    def work(index: int) -> None:
        for i in range(calls):
            if index % 2:
                wandb.log({"actor/pg_loss": float(i)})
            else:
                writer.add_scalar("actor/grad_norm", float(i))

    with otel_rl.tee_wandb(telemetry), otel_rl.tee_tensorboard(telemetry), _wandb_run("disabled", wandb_dir):
        threads = [threading.Thread(target=work, args=(index,)) for index in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    writer.close()
    assert telemetry.flush(EXPORT_WAIT_S)
    points = _metric_points(exporter)
    for key in ("actor/pg_loss", "actor/grad_norm"):
        assert points[key]["count"] == 4 * calls, key
        assert points[key]["sum"] == 4 * sum(range(calls)), key
    telemetry.shutdown(EXPORT_WAIT_S)


def test_what_cannot_be_recorded_is_counted_and_never_raised(wandb_dir: Path, tmp_path: Path) -> None:
    """A table, a string, an unreadable step key and a bad TensorBoard step reach W&B/TensorBoard as before and are
    counted by otel-rl; the numbers beside them are recorded; nothing raises into the caller."""
    exporter = EncodingMetricExporter()
    telemetry = _telemetry(exporter)
    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    with otel_rl.tee_wandb(telemetry), otel_rl.tee_tensorboard(telemetry), _wandb_run("offline", wandb_dir):
        wandb.log({"samples": wandb.Table(columns=["text"], data=[["a"]]), "note": "x", "reward": 1.0}, step=1)
        wandb.log({"step": -3, "reward": 0.5})
        writer.add_scalar("reward", 0.0, global_step=-1)
    writer.close()
    assert telemetry.flush(EXPORT_WAIT_S)
    assert _metric_points(exporter)["reward/mean"]["count"] == 3
    assert _rejected(exporter) == 4
    telemetry.shutdown(EXPORT_WAIT_S)


def test_scalars_and_histograms_of_a_summary_writer_are_teed(tmp_path: Path) -> None:
    """``add_scalars`` records each ``<main_tag>/<tag>``; ``add_histogram`` records every value exactly: a reward
    histogram as the reward distribution, any other as a metric; a writer made before the tee is teed too."""
    exporter = EncodingMetricExporter()
    telemetry = _telemetry(exporter)
    writer = SummaryWriter(log_dir=str(tmp_path))
    rewards = np.random.default_rng(6).choice([0.0, 1.0], 64)
    lengths = np.arange(1, 33, dtype=np.int64)
    with otel_rl.tee_tensorboard(telemetry):
        writer.add_scalars("staleness", {"mean": 0.5, "max": 2.0}, global_step=4)
        writer.add_histogram("rollout/rewards", rewards, global_step=4)
        writer.add_histogram("rollout/response_length", lengths, global_step=4)
    writer.add_scalar("after/close", 1.0, 5)
    writer.close()
    assert telemetry.flush(EXPORT_WAIT_S)
    points = _metric_points(exporter)
    assert set(points) == {"staleness/mean", "staleness/max", "response_length"}
    assert (points["staleness/max"]["max"], points["response_length"]["count"]) == (2.0, 32)
    assert points["response_length"]["sum"] == lengths.sum()
    reward = list(exporter.streams(contract.REWARDS.histogram.name).values())
    assert len(reward) == 1 and isinstance(reward[0], HistogramDataPoint | ExponentialHistogramDataPoint)
    assert (reward[0].count, reward[0].sum) == (rewards.size, rewards.sum())
    assert exporter.number(contract.STEP.name) == 4
    telemetry.shutdown(EXPORT_WAIT_S)


def test_the_tee_defaults_to_the_global_telemetry(wandb_dir: Path) -> None:
    """A tee made before ``otel_rl.setup()`` records into the telemetry that setup makes."""
    exporter = EncodingMetricExporter()
    with otel_rl.tee_wandb(), _wandb_run("disabled", wandb_dir):
        wandb.log({"reward": 0.5}, step=1)  # no telemetry yet: dropped, not raised
        otel_rl.setup(
            otel_rl.TelemetryConfig(run_id="tee-global", exporter="none", export_interval_s=60),
            metric_exporter=exporter,
            log_exporter=InMemoryLogRecordExporter(),
        )
        try:
            wandb.log({"reward": 1.0}, step=2)
            assert otel_rl.get_telemetry().flush(EXPORT_WAIT_S)
        finally:
            otel_rl.reset(5)
    assert _metric_points(exporter)["reward/mean"]["sum"] == 1.0


@pytest.mark.parametrize(
    ("tee", "module", "package"),
    [
        (otel_rl.tee_wandb, "wandb", "wandb"),
        (otel_rl.tee_tensorboard, "torch.utils.tensorboard.writer", "torch and tensorboard"),
    ],
)
def test_a_missing_package_is_a_clear_import_error(
    tee: Callable[[], otel_rl.Tee], module: str, package: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without its package the tee raises an ImportError naming it, and patches nothing."""
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImportError, match=f"the tee needs {package}"):
        tee()


def test_importing_otel_rl_imports_neither_wandb_nor_tensorboard() -> None:
    """wandb and TensorBoard are imported by the tee functions only, never by ``import otel_rl``."""
    probe = "import sys, otel_rl; print(sorted(m for m in ('wandb', 'torch.utils.tensorboard') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.strip() == "[]"


# ---- through the real collector into Prometheus -----------------------------------------------------------------


def test_teed_wandb_and_tensorboard_reach_prometheus(shared_stack: Any, wandb_dir: Path, tmp_path: Path) -> None:
    """prime-rl over an offline W&B run and AReaL over a SummaryWriter, teed into one telemetry exporting to the
    real collector: the canonical staleness split, reward and entropy series and the step arrive in Prometheus."""
    from otel_rl_ops.query import Prometheus

    from tests.pipeline.harness import eventually

    run_id = f"tee-{uuid.uuid4().hex[:8]}"
    # prime-rl alone logs 464 distinct keys (one environment, one agent), AReaL 82: past the default cap of 512.
    config = otel_rl.TelemetryConfig(
        run_id=run_id, endpoint=shared_stack.otlp_grpc_endpoint, export_interval_s=0.5, max_metric_keys=1024
    )
    telemetry = otel_rl.Telemetry(config)
    prime, areal_logged = prime_rl(), areal()
    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    with (
        otel_rl.tee_wandb(telemetry),
        otel_rl.tee_tensorboard(telemetry),
        _wandb_run("offline", wandb_dir),
    ):
        _log_all(prime)
        for tag, value, step in areal_logged.scalars:
            writer.add_scalar(tag, value, step)
    writer.close()
    assert telemetry.shutdown()

    expected = _expected_from_wandb(prime).values
    for key, values in _expected_from_tensorboard(areal_logged).values.items():
        expected[key] += values
    prometheus = Prometheus(shared_stack.prometheus_url)
    run = f'rl_run_id="{run_id}",rl_rank=""'

    def count(key: str) -> float | None:
        return prometheus.value(f'histogram_count(sum({METRIC.name}{{{run},rl_metric_key="{key}"}}))')

    eventually(lambda: count("staleness/max") == len(expected["staleness/max"]), what="the staleness maxima")
    for key in ("staleness/mean", "staleness_in_queue/mean", "staleness_in_flight/max", "staleness/dropped"):
        assert count(key) == len(expected[key]), key
    assert len(expected["staleness/mean"]) == 2 * STEPS  # prime-rl's off_policy/mean and AReaL's per-token theta
    for key in ("reward/mean", "entropy/mean", "mismatch_kl/mean", "ppo_kl/mean"):
        assert count(key) == len(expected[key]), key
    maximum = prometheus.value(f'max({METRIC_MAX.name}{{{run},rl_metric_key="staleness_in_queue/max"}})')
    assert maximum == max(expected["staleness_in_queue/max"])
    assert prometheus.value(f"max({STEP.name}{{{run}}})") == STEPS
    assert prometheus.value(f"max({POLICY_VERSION.name}{{{run}}})") == 10 + STEPS


def test_a_run_counting_steps_only_in_wandb_writes_rl_step(shared_stack: Any, wandb_dir: Path) -> None:
    """An offline W&B run that logs only ``wandb.log(metrics)`` (no ``step=``, no step key; one ``commit=False`` row),
    teed into the real collector: ``rl_step`` takes W&B's steps 0, 1, 2 in Prometheus, and RLTelemetryAbsent's
    expression (prometheus/rules/otel_rl.yml) holds nothing for the run while it logs, but holds the run when
    evaluated 6 minutes past its last point: the lifecycle alert reads this run's step."""
    import yaml
    from otel_rl_ops import promql
    from otel_rl_ops.query import Prometheus

    from tests.pipeline.harness import eventually

    run_id = f"tee-implicit-{uuid.uuid4().hex[:8]}"
    config = otel_rl.TelemetryConfig(run_id=run_id, endpoint=shared_stack.otlp_grpc_endpoint, export_interval_s=0.5)
    telemetry = otel_rl.Telemetry(config)
    prometheus = Prometheus(shared_stack.prometheus_url)
    rules = yaml.safe_load((ROOT / "prometheus" / "rules" / "otel_rl.yml").read_text(encoding="utf-8"))
    (absent,) = [r["expr"] for g in rules["groups"] for r in g["rules"] if r.get("alert") == "RLTelemetryAbsent"]
    step = promql.selector(STEP, **{contract.label(contract.RUN_ID): run_id})

    def at_step(number: int) -> bool:
        return prometheus.value(f"max({step})") == number

    def absent_runs(at: float | None = None) -> set[str]:
        return {row["metric"].get(contract.label(contract.RUN_ID), "") for row in prometheus.query(absent, at=at)}

    rows = [({"reward": 0.5}, {}), ({"kl": 0.1}, {"commit": False}), ({"reward": 1.0}, {}), ({"reward": 1.5}, {})]
    with otel_rl.tee_wandb(telemetry), _wandb_run("offline", wandb_dir):
        for (data, kwargs), number in zip(rows, (0, 1, 1, 2), strict=True):
            wandb.log(data, **kwargs)
            assert telemetry.flush(EXPORT_WAIT_S)
            eventually(partial(at_step, number), what=f"rl_step {number} of the run")
            assert run_id not in absent_runs()
        assert run_id in absent_runs(at=time.time() + 360)
    assert telemetry.shutdown(EXPORT_WAIT_S)
    key = contract.label(contract.METRIC_KEY)
    selector = promql.matchers(**{contract.label(contract.RUN_ID): run_id})
    counts = promql.count(contract.series(contract.METRICS.histogram), selector, by=key, window=None)
    eventually(
        lambda: prometheus.by_label(counts, key) == {"reward/mean": 3, "kl/mean": 1}, what="the run's rewards and KL"
    )
