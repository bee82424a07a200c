"""A real TRL GRPOTrainer on CPU with OtelRLCallback, into the real stack: each reward function's values and TRL's
weighted total reach Prometheus exactly, every rollout reaches VictoriaLogs as a sample (issue: TRL integration)."""

from __future__ import annotations

import math
import statistics
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, cast

import otel_rl_contract as contract
import pytest
import torch
from datasets import Dataset
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
from otel_rl_ops import promql
from otel_rl_ops.query import Prometheus, VictoriaLogs
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)
from transformers.integrations import integration_utils
from trl import GRPOConfig, GRPOTrainer

import otel_rl
from otel_rl import Telemetry, TelemetryConfig
from otel_rl.tracking import MetricsDictLogger, canonical_key
from otel_rl.trl import OtelRLCallback
from tests.conftest import EXPORT_WAIT_S, RecordingMetricExporter
from tests.pipeline.harness import eventually

METRIC = contract.series(contract.METRICS.histogram)
REWARD = contract.series(contract.REWARDS.histogram)
REWARD_POSITIVE, REWARD_NEGATIVE, REWARD_SQUARES = map(contract.series, contract.REWARDS.sums)
STEP = contract.series(contract.STEP)

STEPS = 2
GENERATIONS_PER_STEP = 2  # gradient_accumulation_steps=2, steps_per_generation=1: TRL's own table shows only one
ROWS_PER_GENERATION = 8  # per_device_train_batch_size: 2 prompts x num_generations=4
NUM_GENERATIONS = 4
WEIGHTS = (1.0, 0.5)
SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>"]
WORDS = [*SPECIAL, *(f"w{i}" for i in range(40)), "add", "skip"]


@dataclass
class Rollout:
    """One completion as the reward functions saw it: the ground truth."""

    step: int
    prompt: str
    completion: str
    rewards: dict[str, float | None] = field(default_factory=dict)

    @property
    def total(self) -> float:
        """TRL's total: the weighted sum over the functions that scored it."""
        terms = [w * r for w, r in zip(WEIGHTS, self.rewards.values(), strict=True) if r is not None]
        return math.fsum(terms)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer made here (no hub download): one token per space-separated word."""
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="<unk>"
    )


def tiny_model() -> LlamaForCausalLM:
    """A randomly initialised two-layer Llama of width 32 over the tiny vocabulary."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(WORDS),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    return LlamaForCausalLM(config)


@dataclass
class TrlRun:
    """A finished training run: its run id, the ground truth, and the callback (its counters)."""

    run_id: str
    rollouts: list[Rollout]
    callback: OtelRLCallback


def train(
    stack: Any,
    output_dir: Path,
    *,
    steps: int,
    accumulation: int,
    iterations: int,
    model: LlamaForCausalLM | None = None,
    config: Mapping[str, Any] = MappingProxyType({}),
    callbacks: Sequence[TrainerCallback] = (),
) -> TrlRun:
    """Train GRPO for ``steps`` optimizer steps of ``accumulation`` micro-steps, generating every micro-step
    (``steps_per_generation=1``) and reusing each generation ``iterations`` times; everything recorded over OTLP.
    ``model`` (default :func:`tiny_model`), ``config`` (GRPOConfig fields over this test's) and ``callbacks`` (beside
    the OtelRLCallback) vary the run."""
    run_id = f"trl-{uuid.uuid4().hex[:8]}"
    rollouts: list[Rollout] = []
    batch: list[Rollout] = []

    def length(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float | None]:
        step = kwargs["trainer_state"].global_step + 1
        values = [len(c.split()) / 4 for c in completions]
        batch[:] = [Rollout(step, p, c, {"length": v}) for p, c, v in zip(prompts, completions, values, strict=True)]
        rollouts.extend(batch)
        return list(values)

    def keyword(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float | None]:
        assert [r.completion for r in batch] == list(completions)  # called right after length, on the same batch
        values = [
            None if p.startswith("skip") else (1.0 if any(w.startswith("w1") for w in c.split()) else -6.0)
            for p, c in zip(prompts, completions, strict=True)
        ]
        for rollout, value in zip(batch, values, strict=True):
            rollout.rewards["keyword"] = value
        return values

    dataset = Dataset.from_dict({"prompt": [f"{'add' if i % 2 else 'skip'} w{i} w{i + 1}" for i in range(16)]})
    telemetry = Telemetry(
        TelemetryConfig(
            run_id=run_id,
            endpoint=stack.otlp_grpc_endpoint,
            service_name="otel-rl-test",
            export_interval_s=0.5,
            export_timeout_s=2.0,
            top_k=accumulation * ROWS_PER_GENERATION,
            bottom_k=0,
        )
    )
    callback = OtelRLCallback(telemetry=telemetry)
    fields: dict[str, Any] = {
        "output_dir": str(output_dir),
        "max_steps": steps,
        "per_device_train_batch_size": ROWS_PER_GENERATION,
        "num_generations": NUM_GENERATIONS,
        "gradient_accumulation_steps": accumulation,
        "steps_per_generation": 1,
        "num_iterations": iterations,
        "max_completion_length": 8,
        "reward_weights": list(WEIGHTS),
        "report_to": [],
        "logging_steps": 1,
        "log_completions": True,
        "use_cpu": True,
        "save_strategy": "no",
        "disable_tqdm": True,
        "seed": 0,
    }
    trainer = GRPOTrainer(
        model=model or tiny_model(),
        processing_class=tiny_tokenizer(),
        reward_funcs=[length, keyword],
        args=GRPOConfig(**{**fields, **config}),
        train_dataset=dataset,
        callbacks=[callback, *callbacks],
    )
    trainer.train()
    assert telemetry.shutdown(10.0)
    return TrlRun(run_id, rollouts, callback)


def reward_values(rollouts: list[Rollout], fn: str) -> list[float]:
    """What ``rl.reward{fn}`` must hold: a function's non-None rewards, or every rollout's weighted total."""
    if fn == "total":
        return [r.total for r in rollouts]
    return [v for r in rollouts if (v := r.rewards[fn]) is not None]


def reward_count(prometheus: Prometheus, run_id: str, fn: str) -> float | None:
    """The count of the native histogram ``rl_reward`` of ``fn`` in run ``run_id`` (None before any arrived)."""
    return prometheus.value(f'histogram_count(sum({REWARD.name}{{rl_run_id="{run_id}",rl_reward_fn="{fn}"}}))')


@pytest.fixture(scope="module")
def trl_run(shared_stack: Any, tmp_path_factory: pytest.TempPathFactory) -> TrlRun:
    """Two optimizer steps of two micro-steps, each generating: four generations, two per step."""
    output_dir = tmp_path_factory.mktemp("grpo")
    return train(shared_stack, output_dir, steps=STEPS, accumulation=GENERATIONS_PER_STEP, iterations=1)


def test_the_callback_read_every_generation(trl_run: TrlRun) -> None:
    """The callback found its trainer from callbacks=[...], saw all four generations, and never failed."""
    assert trl_run.callback.exact
    assert (trl_run.callback.errors, trl_run.callback.missed_generations) == (0, 0)
    assert len(trl_run.rollouts) == STEPS * GENERATIONS_PER_STEP * ROWS_PER_GENERATION
    assert any(r.rewards["keyword"] is None for r in trl_run.rollouts)  # None rewards are exercised
    assert any(r.total < 0 for r in trl_run.rollouts) and any(r.total > 0 for r in trl_run.rollouts)


@pytest.mark.parametrize("fn", ["length", "keyword", "total"])
def test_rewards_are_exact_per_function_and_in_total(shared_stack: Any, trl_run: TrlRun, fn: str) -> None:
    """Count and sum of rl.reward{fn} equal what the reward functions returned (None left out; total weighted)."""
    values = reward_values(trl_run.rollouts, fn)
    prometheus = Prometheus(shared_stack.prometheus_url)
    eventually(lambda: reward_count(prometheus, trl_run.run_id, fn) == len(values), what=f"the {fn} reward count")
    selector = f'{{rl_run_id="{trl_run.run_id}",rl_reward_fn="{fn}"}}'
    positive = prometheus.value(f"sum({REWARD_POSITIVE.name}{selector})")
    negative = prometheus.value(f"sum({REWARD_NEGATIVE.name}{selector})")
    assert positive is not None and negative is not None
    assert positive - negative == pytest.approx(math.fsum(values), abs=1e-9)
    assert prometheus.value(f"histogram_sum(sum({REWARD.name}{selector}))") == pytest.approx(
        math.fsum(values), abs=1e-9
    )


def test_every_rollout_is_a_sample_with_its_texts_rewards_and_advantage(shared_stack: Any, trl_run: TrlRun) -> None:
    """Each completion arrives in VictoriaLogs with its step, prompt, rewards and TRL's group advantage."""
    expected_advantage: dict[int, float] = {}
    for start in range(0, len(trl_run.rollouts), NUM_GENERATIONS):
        group = trl_run.rollouts[start : start + NUM_GENERATIONS]
        mean, std = statistics.fmean(r.total for r in group), statistics.stdev(r.total for r in group)
        for offset, rollout in enumerate(group):
            expected_advantage[start + offset] = (rollout.total - mean) / (std + 1e-4)
    logs = VictoriaLogs(shared_stack.victorialogs_url)
    query = f'{{rl.run.id="{trl_run.run_id}"}}'
    records = eventually(
        lambda: (found := logs.query(query)) and len(found) >= len(trl_run.rollouts) and found,
        what="a sample record per rollout",
    )

    def key(step: Any, prompt: Any, completion: Any, length: Any, keyword: Any, total: Any) -> tuple[Any, ...]:
        return (int(step), prompt, completion, float(length), None if keyword is None else float(keyword), float(total))

    expected = sorted(
        (key(r.step, r.prompt, r.completion, r.rewards["length"], r.rewards["keyword"], r.total), expected_advantage[i])
        for i, r in enumerate(trl_run.rollouts)
    )
    got = sorted(
        (
            key(
                record["rl.step"],
                record["prompt"],
                record.get("_msg", ""),
                record["rl.reward.length"],
                record.get("rl.reward.keyword"),
                record["rl.reward"],
            ),
            float(record["rl.advantage"]),
        )
        for record in records
    )
    assert [row for row, _ in got] == [row for row, _ in expected]
    for (_, advantage), (_, reference) in zip(got, expected, strict=True):
        assert advantage == pytest.approx(reference, rel=1e-4, abs=1e-4)
    assert len({record["rl.episode.id"] for record in records}) == len(records)


def test_logged_scalars_are_metrics_and_reward_means_are_not(shared_stack: Any, trl_run: TrlRun) -> None:
    """TRL's logged scalars become rl.metric (one value per log) under their loggers' keys, canonical where the bridge
    knows them; its reward means (recorded exactly instead) and end-of-training summaries do not."""
    prometheus = Prometheus(shared_stack.prometheus_url)
    selector = f'{{rl_run_id="{trl_run.run_id}"}}'
    counts = eventually(
        lambda: prometheus.by_label(
            f"sum by (rl_metric_key) (histogram_count({METRIC.name}{selector}))", "rl_metric_key"
        ),
        what="the logged scalars",
    )
    for key in ("train/loss", "entropy/mean", "train/grad_norm", "response_length/mean", "train/frac_reward_zero_std"):
        assert counts[key] == STEPS, key
    assert counts["train/epoch"] == STEPS + 1  # the end-of-training log has it too
    assert not {k for k in counts if k in {"reward/mean", "reward/std", "train/train_runtime", "train/train_loss"}}
    assert not {k for k in counts if k.startswith("train/rewards/")}
    assert prometheus.value(f"{STEP.name}{selector}") == STEPS


def test_a_reused_generation_is_counted_once(shared_stack: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    """num_iterations=2: each generation trains two steps and TRL logs its table twice; it is recorded once."""
    run = train(shared_stack, tmp_path_factory.mktemp("grpo-reuse"), steps=4, accumulation=1, iterations=2)
    assert len(run.rollouts) == 2 * ROWS_PER_GENERATION
    assert (run.callback.exact, run.callback.errors, run.callback.missed_generations) == (True, 0, 0)
    prometheus = Prometheus(shared_stack.prometheus_url)
    for fn in ("length", "keyword", "total"):
        expected = len(reward_values(run.rollouts, fn))
        eventually(lambda: reward_count(prometheus, run.run_id, fn) == expected, what=f"the {fn} reward count")


# One run, every path: the same key for the same quantity --------------------------------------------------------

rewrite_logs: Callable[[Mapping[str, Any]], dict[str, Any]] = integration_utils.rewrite_logs
"""transformers' renaming of a log for its logging integrations (``train/<key>``, ``eval/<key>``)."""

PATHS = ("callback", "wandb", "tensorboard", "bridge")
"""OtelRLCallback; tee_wandb of TRL's own W&B logging; tee_tensorboard of its TensorBoard logging; the metrics-dict
bridge called as verl's ``Tracking`` calls its ``otel_rl`` backend."""
REWARD_MEANS = tuple(
    f"train/{key}"
    for key in (
        "reward",
        "reward_std",
        *(f"rewards/{fn}/{stat}" for fn in ("length", "keyword") for stat in ("mean", "std")),
    )
)
"""TRL's logged reward means, as its loggers name them: what the callback records exactly (rl.reward) instead."""

Series = dict[str, tuple[float | None, ...]]
"""Each ``rl.metric`` key of a run: its count, sum, greatest and least value."""


class BridgeCallback(TrainerCallback):
    """``MetricsDictLogger.log(data, step)``, as verl's ``Tracking`` calls its ``otel_rl`` backend, with each log as
    transformers hands it to its loggers (its ``rewrite_logs``) and the trainer's step."""

    def __init__(self, bridge: MetricsDictLogger) -> None:
        self.bridge = bridge

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        if logs:
            self.bridge.log(rewrite_logs(logs), step=state.global_step)


@pytest.fixture(scope="module")
def paths(shared_stack: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One TRL run (``beta`` > 0, so TRL logs ``kl``; W&B offline, TensorBoard on) logged through every path of
    :data:`PATHS` at once, each into a telemetry of its own: the run id of each path."""
    wandb = pytest.importorskip("wandb")
    directory = tmp_path_factory.mktemp("paths")
    tiny_model().save_pretrained(directory / "model")  # the reference model of beta > 0 is loaded from its path
    model = LlamaForCausalLM.from_pretrained(directory / "model")
    run_ids = {path: f"trl-{path}-{uuid.uuid4().hex[:8]}" for path in PATHS[1:]}
    telemetries = {
        path: Telemetry(TelemetryConfig(run_id=run_id, endpoint=shared_stack.otlp_grpc_endpoint, export_interval_s=0.5))
        for path, run_id in run_ids.items()
    }
    config = {"beta": 0.04, "report_to": ["wandb", "tensorboard"], "log_completions": False}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WANDB_SILENT", "true")
        env.setenv("TENSORBOARD_LOGGING_DIR", str(directory / "tensorboard"))
        # transformers' W&B integration logs to the run in place (its own would be an online one).
        with (
            otel_rl.tee_wandb(telemetries["wandb"]),
            otel_rl.tee_tensorboard(telemetries["tensorboard"]),
            wandb.init(mode="offline", project="otel-rl-trl", dir=str(directory)),
        ):
            run = train(
                shared_stack,
                directory / "grpo",
                steps=STEPS,
                accumulation=GENERATIONS_PER_STEP,
                iterations=1,
                model=model,
                config=config,
                callbacks=[BridgeCallback(MetricsDictLogger(telemetries["bridge"]))],
            )
    for telemetry in telemetries.values():
        assert telemetry.shutdown(10.0)
    return {"callback": run.run_id, **run_ids}


def metric_series(prometheus: Prometheus, run_id: str) -> Series:
    """Count, exact sum and extremes of every ``rl.metric`` key of run ``run_id`` in Prometheus."""
    key = contract.label(contract.METRIC_KEY)
    selector = promql.matchers(**{contract.label(contract.RUN_ID): run_id})
    histogram = contract.series(contract.METRICS.histogram)
    maximum, minimum = (contract.series(m).name for m in (contract.METRICS.maximum, contract.METRICS.minimum))
    parts = [
        prometheus.by_label(promql.count(histogram, selector, by=key, window=None), key),
        prometheus.by_label(promql.signed_sum(contract.METRICS, selector, by=key, window=None), key),
        prometheus.by_label(f"max by ({key}) (max_over_time({maximum}{{{selector}}}[1h]))", key),
        prometheus.by_label(f"min by ({key}) (min_over_time({minimum}{{{selector}}}[1h]))", key),
    ]
    return {name: tuple(part.get(name) for part in parts) for name in parts[0]}


def test_one_quantity_has_one_key_on_every_path(shared_stack: Any, paths: dict[str, str]) -> None:
    """One TRL run's logs through OtelRLCallback, tee_wandb, tee_tensorboard and the metrics-dict bridge reach
    Prometheus as the same rl.metric keys with the same values (count, sum, extremes) and the same steps: TRL's
    ``kl`` is ``kl/mean``, ``entropy`` ``entropy/mean``, ``completions/mean_length`` ``response_length/mean`` and
    ``loss`` ``train/loss`` whichever way it came. The callback alone leaves out the reward means, which it records
    exactly as rl.reward; W&B alone gets TRL's ``profiling/`` rows (``trl/extras/profiling.py`` logs them straight to
    W&B, before the first step's log too), whose W&B row counter never becomes the step."""
    prometheus = Prometheus(shared_stack.prometheus_url)
    step = contract.series(contract.STEP).name

    def run(run_id: str) -> str:
        return promql.matchers(**{contract.label(contract.RUN_ID): run_id})

    def complete(run_id: str) -> Series | None:
        series = metric_series(prometheus, run_id)
        last = prometheus.value(f"max({step}{{{run(run_id)}}})")
        epochs = series.get("train/epoch", (None,))[0]
        return series if last == STEPS and epochs == STEPS + 1 else None

    series = {path: eventually(partial(complete, run_id), what=f"the {path} path") for path, run_id in paths.items()}
    for path, run_id in paths.items():
        assert prometheus.value(f"max(max_over_time({step}{{{run(run_id)}}}[1h]))") == STEPS, path
    profiling = {key for key in series["wandb"] if key.startswith("profiling/")}
    assert profiling
    wandb = {key: value for key, value in series["wandb"].items() if key not in profiling}
    assert wandb == series["tensorboard"] == series["bridge"]
    assert {"kl/mean", "entropy/mean", "response_length/mean", "response_length/max", "train/loss"} <= set(
        series["callback"]
    )
    reward_means = {canonical_key(key) for key in REWARD_MEANS}
    assert reward_means == set(wandb) - set(series["callback"])
    assert series["callback"] == {key: value for key, value in wandb.items() if key not in reward_means}
    histogram = contract.series(contract.REWARDS.histogram)
    counts = {path: prometheus.value(promql.count(histogram, run(r), window=None)) for path, r in paths.items()}
    assert counts["callback"] and not any(counts[path] for path in PATHS[1:])


# Without a stack: the callback's own errors and its fallback ----------------------------------------------------


def local_telemetry(exporter: RecordingMetricExporter) -> Telemetry:
    """A Telemetry that exports into ``exporter`` only when flushed."""
    config = TelemetryConfig(run_id="trl-local", rank=0, world_size=1, export_interval_s=60)
    return Telemetry(config, metric_exporter=exporter, log_exporter=InMemoryLogRecordExporter())


def test_attach_rejects_a_trainer_without_grpo_rollout_logs(metric_exporter: RecordingMetricExporter) -> None:
    """attach() names the missing attributes and the trainer's type."""
    callback = OtelRLCallback(telemetry=local_telemetry(metric_exporter))
    with pytest.raises(
        TypeError,
        match=r"\"trainer\" must keep GRPOTrainer's per-rollout logs \(attributes "
        r"\['_logs', '_metrics', 'reward_func_names', 'reward_weights'\] are missing\), got 'object'",
    ):
        callback.attach(cast(Any, object()))
    callback.telemetry.shutdown()


def test_without_a_trainer_the_logged_reward_means_become_metrics(metric_exporter: RecordingMetricExporter) -> None:
    """No trainer found: reward means are forwarded as rl.metric like the other logged scalars, under their
    loggers' keys (canonical where known); summaries are not."""
    telemetry = local_telemetry(metric_exporter)
    callback = OtelRLCallback(telemetry=telemetry)
    args, state = TrainingArguments(output_dir="unused", use_cpu=True, report_to=[]), TrainerState()
    callback.on_train_begin(args, state, TrainerControl())
    logs: dict[str, Any] = {
        "loss": 0.5,
        "reward": 1.5,
        "rewards/length/mean": 2.0,
        "epoch": 1.0,
        "train_runtime": 3.0,
        "note": "x",
    }
    callback.on_log(args, state, TrainerControl(), logs=logs)
    assert telemetry.flush(EXPORT_WAIT_S)
    keys = {dict(a)["rl.metric.key"] for name, a in metric_exporter.latest() if name == "rl.metric"}
    expected = {"train/loss", "reward/mean", "train/rewards/length/mean", "train/epoch"}
    assert (callback.exact, callback.errors, keys) == (False, 0, expected)
    telemetry.shutdown()


def test_a_failure_in_the_callback_is_counted_not_raised(metric_exporter: RecordingMetricExporter) -> None:
    """A trainer whose rollout logs are unreadable: the event is skipped and counted, the trainer goes on."""

    class BrokenTrainer:
        _logs = None
        _metrics: ClassVar = {"train": {"reward": [1.0]}}
        reward_func_names: ClassVar = ["length"]
        reward_weights = torch.ones(1)

    trainer: Any = BrokenTrainer()
    callback = OtelRLCallback(telemetry=local_telemetry(metric_exporter), trainer=trainer)
    args, state = TrainingArguments(output_dir="unused", use_cpu=True, report_to=[]), TrainerState()
    for _ in range(2):
        trainer._metrics["train"]["reward"].append(1.0)  # a new generation, as GRPOTrainer appends
        callback.on_step_end(args, state, TrainerControl())
    assert callback.errors == 2
    callback.telemetry.shutdown()
