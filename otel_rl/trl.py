"""Hugging Face TRL: a ``TrainerCallback`` that sends a ``GRPOTrainer``'s rewards, completions and logs to otel-rl.

Add it to the trainer; it records through ``otel_rl.get_telemetry()`` unless given a ``telemetry``::

    import otel_rl
    from otel_rl.trl import OtelRLCallback

    otel_rl.setup()  # or OtelRLCallback(telemetry=otel_rl.Telemetry(...))
    trainer = GRPOTrainer(model=..., reward_funcs=[...], args=GRPOConfig(...), train_dataset=...,
                          callbacks=[OtelRLCallback()])
    trainer.train()

``trainer.add_callback(OtelRLCallback(trainer=trainer))`` does the same after construction. This module needs
``transformers`` (the ``trl`` extra); ``import otel_rl`` never imports it.

What is exact and what is a logged mean:

- **Exact, per rollout.** After every generation, the callback reads the rollouts that GRPOTrainer keeps for its
  completions table (``trainer._logs``: prompt, completion, each reward function's value, advantage, columns added
  with ``log_extra``; kept whether or not ``log_completions`` is set). Each reward function's values go to
  ``rl.reward{rl.reward.fn=<its name>}`` (a ``None`` reward, NaN in TRL, is left out, as TRL's means leave it out);
  ``rl.reward{rl.reward.fn="total"}`` gets TRL's total, ``sum(weight * reward)`` over the functions that scored
  the rollout with ``reward_weights`` (a rollout no function scored has no total). Every rollout is offered as an
  :class:`~otel_rl.EpisodeSample` (the sample filter keeps the step's top/bottom-k). A generation is detected after
  every micro-step, so none is missed or counted twice, whatever ``logging_steps``, ``gradient_accumulation_steps``,
  ``steps_per_generation`` and ``num_iterations`` are; TRL's own table shows only the last one before each log.
- **Logged means.** Everything else reaches the callback only as the numbers ``Trainer.log`` passes to ``on_log``
  (loss, kl, entropy, clip ratios, completion lengths, ``frac_reward_zero_std``, grad norm, learning rate, ...):
  each goes through the metrics-dict bridge (:class:`otel_rl.tracking.MetricsDictLogger`) under the key
  transformers' logging integrations give it (``rewrite_logs``: ``train/loss``, ``eval/loss`` for ``eval_loss``),
  so the bridge's canonical keys apply (``kl`` is ``kl/mean``, ``entropy`` is ``entropy/mean``,
  ``completions/mean_length`` is ``response_length/mean``) and one TRL quantity has one key whether it comes
  through this callback or through ``tee_wandb``/``tee_tensorboard`` of TRL's own W&B or TensorBoard logging. Each
  is one value per log of ``rl.metric{rl.metric.key}``, a mean over ``logging_steps`` steps and over processes, so
  its count counts logs, not rollouts. TRL's reward means (``reward``, ``reward_std``, ``rewards/<fn>/mean``,
  ``rewards/<fn>/std``) are not forwarded while the exact rewards are recorded, and are forwarded when they are not.
  The end-of-training summaries (``train_runtime``, ``train_samples_per_second``, ``train_steps_per_second``,
  ``total_flos``, ``train_loss``: what the W&B integration keeps out of the history) are not recorded; a ``None``
  (no reward function scored any completion of the window) is no value and is skipped. Every number keeps float64
  precision (``num_tokens`` is exact). ``max_metric_keys`` (default 512) caps the keys.

Steps: each optimizer step is declared with ``telemetry.step(n)`` as it begins, ``n`` being the number the trainer
gives it when it ends (``state.global_step`` in ``on_log`` and in TRL's completions table), so a step's rollouts,
samples and logged scalars share one number; its samples are emitted when the next step begins or at shutdown.

Multi-process runs: TRL gathers the rollouts and the logged means onto every process, so only the world's process
zero records them (otherwise each would be counted once per process); every process declares its steps.

The exact values come from GRPOTrainer's private attributes (``_logs``, ``_metrics``, ``reward_func_names``,
``reward_weights``), checked against TRL 1.16. A trainer without them gets one warning and the logged means only.
The callback never raises into the trainer: every hook runs under otel-rl's guard (``otel_rl._guard``), so a
failure in its own code skips that event, is logged once and counted (``otel_rl.values.rejected`` under
``otel_rl.trl``, and in ``errors``).
"""

from __future__ import annotations

import inspect
import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import otel_rl_contract as contract
from numpy.typing import NDArray
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.integrations import integration_utils

from otel_rl._global import get_telemetry
from otel_rl._guard import guarded
from otel_rl._record.inputs import BadInput, as_value
from otel_rl._record.samples import EpisodeSample
from otel_rl._state.self_telemetry import SelfTelemetry
from otel_rl._telemetry import Telemetry
from otel_rl.tracking import MetricsDictLogger

__all__ = ["OtelRLCallback"]

_logger = logging.getLogger(__name__)

_logger_keys: Callable[[Mapping[str, Any]], dict[str, Any]] = integration_utils.rewrite_logs
"""A log with the keys transformers' logging integrations (W&B, TensorBoard, trackio, ...) give it: ``train/<key>``,
``eval/<key>`` for ``eval_<key>``, ``test/<key>`` for ``test_<key>`` (transformers' own ``rewrite_logs``)."""

_METRIC = "otel_rl.trl"
"""Where a failure of the callback's own code is counted (``otel_rl.values.rejected{otel_rl.metric}``)."""

_REWARD_MEAN_KEYS = frozenset({"reward", "reward_std"})
"""GRPOTrainer's logged total-reward statistics, derivable from the exact rewards."""

_REQUIRED_ATTRIBUTES = ("_logs", "_metrics", "reward_func_names", "reward_weights")
"""What a trainer must have for the exact per-rollout path (GRPOTrainer's, TRL 1.16)."""

_MAX_FRAMES = 16
"""How far up the call stack ``on_train_begin`` looks for the trainer that is calling it."""


class OtelRLCallback(TrainerCallback):
    """Records a GRPOTrainer's per-rollout rewards and samples, its logged scalars and its steps in otel-rl.

    ``telemetry``: where to record; by default the process-wide one of ``otel_rl.setup()`` (``RuntimeError``
    before it, raised here, at construction). ``trainer``: the trainer to read per-rollout values from; without
    it, the trainer that calls ``on_train_begin`` with this callback in its callback list is used.
    """

    def __init__(self, telemetry: Telemetry | None = None, *, trainer: Trainer | None = None) -> None:
        self.telemetry = telemetry if telemetry is not None else get_telemetry()
        self._bridge = MetricsDictLogger(self.telemetry)
        self.missed_generations = 0
        """Generations whose rollouts were replaced before the callback saw them (TRL keeps only the last one)."""
        self._trainer: Trainer | None = None
        self._step = 0
        self._rollouts = 0
        self._seen: list[Any] | None = None
        self._seen_count = 0
        self._warned: set[str] = set()
        if trainer is not None:
            self.attach(trainer)

    @property
    def self_telemetry(self) -> SelfTelemetry:
        """Where the callback's failures are counted: its telemetry's."""
        return self.telemetry.self_telemetry

    @property
    def errors(self) -> int:
        """Failures of this callback's own code (each skipped the rest of its event); the first one is logged."""
        return self.self_telemetry.rejected(_METRIC)

    @property
    def exact(self) -> bool:
        """Whether per-rollout rewards and samples are being read from a trainer (else only logged means)."""
        return self._trainer is not None

    def attach(self, trainer: Trainer) -> None:
        """Read the rollouts of each generation ``trainer`` (a GRPOTrainer) makes from now on.

        Raises ``TypeError`` when ``trainer`` lacks what GRPOTrainer keeps of its rollouts.
        """
        missing = [name for name in _REQUIRED_ATTRIBUTES if not hasattr(trainer, name)]
        if missing:
            raise TypeError(
                f'"trainer" must keep GRPOTrainer\'s per-rollout logs (attributes {missing!r} are missing), '
                f"got {type(trainer).__name__!r}"
            )
        self._trainer = trainer
        generations = self._generations(trainer)
        self._seen, self._seen_count = generations, 0 if generations is None else len(generations)

    # -- transformers events (never raise into the trainer) ---------------------------------------------------

    @guarded(_METRIC)
    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Find the trainer to read rollouts from, unless one was given."""
        if self._trainer is None:
            trainer = self._calling_trainer()
            if trainer is None:
                self._warn_once("no-trainer", "no calling trainer found: recording logged means only")
            else:
                self.attach(trainer)
        self._step = state.global_step

    @guarded(_METRIC)
    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Declare the optimizer step that begins, by the number it will have when it ends."""
        self._step = state.global_step + 1
        self.telemetry.step(self._step)

    @guarded(_METRIC)
    def on_substep_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Record the rollouts of a generation made in this micro-step (gradient accumulation)."""
        self._after_micro_step(state)

    @guarded(_METRIC)
    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        """Record the rollouts of a generation made in the step's last micro-step (before the trainer logs)."""
        self._after_micro_step(state)

    @guarded(_METRIC)
    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        """Record each logged number as ``rl.metric{rl.metric.key}`` (see the module docstring)."""
        if state.is_world_process_zero and logs:
            self._record_logs(logs)

    # -- the parts ------------------------------------------------------------------------------------------

    def _after_micro_step(self, state: TrainerState) -> None:
        if state.is_world_process_zero and self._trainer is not None:
            self._collect(self._trainer)

    def _collect(self, trainer: Trainer) -> None:
        """Record the newest generation's rollouts if the trainer made one since the last look.

        GRPOTrainer appends one value to ``_metrics["train"]["reward"]`` per training generation and empties the
        dict after each log (the next generation starts a new list), so the list's identity and length say how many
        generations are new; ``_logs`` then holds the newest one's rollouts (its deques hold one generation batch).
        """
        generations = self._generations(trainer)
        if generations is None:
            new = 0
        elif generations is self._seen:
            new = len(generations) - self._seen_count
        else:
            new = len(generations)
        self._seen, self._seen_count = generations, 0 if generations is None else len(generations)
        if new <= 0:
            return
        if new > 1:
            self.missed_generations += new - 1
            self._warn_once("missed", f"{new - 1} generation(s) were replaced before they could be recorded")
        self._record_rollouts(trainer)

    @staticmethod
    def _generations(trainer: Trainer) -> list[Any] | None:
        """The trainer's list of this log period's training generations (one logged mean reward each), if any."""
        metrics: Mapping[str, Any] = getattr(trainer, "_metrics", {}).get("train", {})
        generations = metrics.get("reward")
        return generations if isinstance(generations, list) else None

    def _record_rollouts(self, trainer: Trainer) -> None:
        """Rewards per function and in total, and one sample per rollout, from the trainer's newest generation."""
        logs: Mapping[str, Any] = getattr(trainer, "_logs")
        names = [str(name) for name in getattr(trainer, "reward_func_names")]
        weights = [float(weight) for weight in getattr(trainer, "reward_weights").tolist()]
        reward_columns: Mapping[str, Sequence[float]] = logs["rewards"]
        columns = [logs["prompt"], logs["completion"], logs["advantages"]]
        columns += [reward_columns.get(name, ()) for name in names]
        rows = min(len(column) for column in columns)
        if rows == 0:
            return
        prompts, completions, advantages = (_last(column, rows) for column in columns[:3])
        rewards = {name: [_reward(value) for value in _last(reward_columns.get(name, ()), rows)] for name in names}
        extras = {str(key): _last(column, rows) for key, column in logs.get("extra", {}).items() if len(column) >= rows}

        totals: list[float] = []
        for row in range(rows):
            terms = [
                w * rewards[name][row]
                for name, w in zip(names, weights, strict=False)
                if not math.isnan(rewards[name][row])
            ]
            totals.append(math.fsum(terms) if terms else math.nan)
        for name in names:
            self.telemetry.record_rewards(_finite(rewards[name]), fn=name)
        self.telemetry.record_rewards(_finite(totals), fn=contract.REWARD_FN_TOTAL)

        for row in range(rows):
            self.telemetry.record_sample(
                EpisodeSample(
                    reward=totals[row],
                    episode_id=f"{self._step}-{self._rollouts}",
                    policy_version=self._step - 1,
                    prompt=_text(prompts[row]),
                    response=_text(completions[row]),
                    reward_breakdown={n: rewards[n][row] for n in names if not math.isnan(rewards[n][row])},
                    advantage=advantages[row],
                    extra={key: column[row] for key, column in extras.items() if column[row] is not None},
                )
            )
            self._rollouts += 1

    def _record_logs(self, logs: Mapping[str, Any]) -> None:
        """The logged numbers through the bridge, under their loggers' keys, less TRL's reward means while rewards
        are exact (the step is the one ``on_step_begin`` declared)."""
        kept = {
            key: value
            for key, value in logs.items()
            if not (self.exact and (key in _REWARD_MEAN_KEYS or (key.startswith("rewards/") and key.count("/") >= 2)))
        }
        self._bridge.log(_logger_keys(kept))

    def _calling_trainer(self) -> Trainer | None:
        """The ``Trainer`` up the call stack whose callback handler holds this callback, if any.

        A callback added with ``callbacks=[...]`` is never told its trainer; ``Trainer.train`` is on the stack when
        ``on_train_begin`` runs, and only a trainer that holds this very callback is taken.
        """
        frame = inspect.currentframe()
        try:
            for _ in range(_MAX_FRAMES):
                if frame is None:
                    return None
                candidate = frame.f_locals.get("self")
                if isinstance(candidate, Trainer) and any(
                    callback is self for callback in candidate.callback_handler.callbacks
                ):
                    return candidate
                frame = frame.f_back
            return None
        finally:
            del frame

    def _warn_once(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            _logger.warning("otel_rl.trl: %s", message)


def _last(column: Iterable[Any], count: int) -> list[Any]:
    """The last ``count`` entries of ``column`` (a deque or a list): the rows of the newest generation."""
    values = list(column)
    return values[len(values) - count :]


def _reward(value: Any) -> float:
    """A reward function's value as a float; ``None`` (the function does not apply, NaN in TRL) as NaN."""
    try:
        return as_value(value, argument="reward")
    except BadInput:
        return math.nan


def _finite(values: Sequence[float]) -> NDArray[np.float64]:
    """The values that are not NaN: a reward TRL turned from ``None`` into NaN was not given, it is not bad input."""
    array = np.asarray(values, dtype=np.float64)
    return array[~np.isnan(array)]


def _text(value: Any) -> str:
    """A prompt or completion as text: a string as it is, a conversation as ``role: content`` lines.

    >>> _text([{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": [{"type": "text", "text": "4"}]}])
    'user: 2+2?\\nassistant: 4'
    """
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(message, Mapping) for message in value):
        return "\n".join(f"{message.get('role', '?')}: {_content(message.get('content'))}" for message in value)
    return json.dumps(value, default=str)


def _content(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a list of parts (images are left out)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [part.get("text") for part in content if isinstance(part, Mapping)]
        return "".join(text for text in texts if isinstance(text, str))
    return "" if content is None else json.dumps(content, default=str)
