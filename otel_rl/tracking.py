"""A tracking backend for trainers that log ``dict[str, float]`` per step (verl's ``Tracking``, OpenRLHF, prime-rl,
W&B-style ``log(metrics, step)``): their dicts become otel-rl series without rewriting their logging calls.

Such dicts hold statistics the trainer already reduced on its rank (``critic/score/mean``). A reduced value cannot
be turned back into a distribution, so the bridge keeps each as a value of ``rl.metric`` under a canonical key when
it knows the key (the same key whichever trainer logged it, so one dashboard query serves all of them) and under
its own key otherwise. What it can keep exactly, it does: per-sample arrays (lists, numpy arrays, tensors) of
rewards become ``rl.reward`` distributions and of lengths ``rl.metric`` distributions; the policy version sets
``rl.policy.version``; the step declares the step.

Known keys (``stat`` is ``mean``, ``max``, ``min``, ``std``, ``median`` or ``clip_ratio``; AReaL's ``avg`` is
``mean``; a key without a stat is a mean), by the canonical ``rl.metric.key`` they are recorded under. W&B and
TensorBoard keys are the trainers' keys as they reach ``wandb.log`` and ``add_scalar``, their loggers' prefixes
included (OpenRLHF's ``train/``, slime's ``rollout/``); ``tests/integrations/test_tee.py`` names the commit of each
trainer they were read from. TRL's keys are those its logging integrations write (transformers' ``rewrite_logs``:
``train/<key>``, and ``eval/<key>`` for ``eval_<key>``), which :class:`otel_rl.trl.OtelRLCallback` writes too, so a
TRL quantity has one key whether it comes through the callback, a tee or this bridge.

- ``reward/<stat>``: ``critic/score/<stat>`` (verl), ``reward/<stat>``, ``reward``, ``train/reward`` (OpenRLHF,
  TRL) and ``train/rollout/reward_std`` (OpenRLHF), ``train/reward_std`` (TRL),
  ``train/agg/all/<agent>/reward/<stat>`` (prime-rl), ``reward/avg_raw_reward`` (SkyRL), ``rollout/raw_reward``
  (slime), ``ppo_actor/task_reward/<stat>`` (AReaL).
- ``reward_penalized/<stat>``: ``critic/rewards/<stat>`` (verl: the score with the KL penalty).
- ``advantage/<stat>``: ``critic/advantages/<stat>``.
- ``response_length/<stat>``: ``response_length/<stat>``, ``response_length`` and ``train/response_length``
  (OpenRLHF), ``train/agg/all/<agent>/num_output_tokens/<stat>`` (prime-rl), ``generate/<avg|min|max|std>_num_tokens``
  (SkyRL), ``rollout/response_len/<stat>`` (slime), ``train/completions/<mean|min|max>_length`` (TRL).
- ``prompt_length/<stat>``: ``prompt_length/<stat>``, ``ppo_actor/prompt_len/<stat>`` (AReaL).
- ``entropy/<stat>``: ``actor/entropy`` (verl), ``entropy_loss``/``train/entropy_loss`` (OpenRLHF and slime: the mean
  token entropy), ``entropy``/``train/entropy`` (TRL), ``policy/policy_entropy`` (SkyRL), ``entropy/all/<stat>``
  (prime-rl), ``ppo_actor/update/entropy/<stat>`` (AReaL).
- ``kl/<stat>``, KL to the reference policy: ``actor/kl_loss`` (verl), ``kl``/``train/kl`` (OpenRLHF, TRL),
  ``kl_loss``/``train/kl_loss`` (slime), ``policy/policy_kl``, ``loss/avg_kl`` and ``loss/avg_kl_max`` (SkyRL).
- ``ppo_kl/<stat>``, KL to the policy that sampled the batch: ``actor/ppo_kl`` (verl), ``ppo_kl``/``train/ppo_kl``
  (OpenRLHF, slime), ``ppo_actor/update/approx_kl/<stat>`` (AReaL).
- ``mismatch_kl/<stat>``, KL between the trainer's and the inference engine's log-probs: ``mismatch_kl/all/<stat>``
  (prime-rl), ``vllm_kl``/``train/vllm_kl`` (OpenRLHF).
- ``staleness/<stat>``: ``off_policy/<stat>`` (prime-rl), ``async/staleness_<stat>`` (SkyRL),
  ``ppo_actor/update/version_stats/sample_staleness_theta_<stat>`` (AReaL: per token, against the version being
  trained), any other ``...staleness.../<stat>``; ``staleness_in_queue/<stat>`` and ``staleness_in_flight/<stat>``:
  prime-rl's ``off_policy/in_queue/<stat>`` and ``off_policy/in_flight/<stat>``; ``staleness/dropped``: prime-rl's
  ``off_policy/dropped`` (queued samples dropped as too stale since the last step).
- ``zero_std_groups/<reward>``: slime's ``rollout/zero_std/count_<reward>`` (groups whose samples all scored
  ``<reward>``, so they teach nothing).

Where a trainer logs one quantity twice (OpenRLHF's ``train/rollout/reward_mean`` beside ``train/reward``, slime's
``rollout/response_lengths`` beside ``rollout/response_len/mean``, the ``effective`` subset of prime-rl's ``all``),
one of them is canonical and the other keeps its own key, so a canonical key holds one value per trainer step.

verl's timed sections (``timing_s/gen``, ``timing_s/update_actor``, ...) also become phase spans of the step
(``generate``, ``train``, ...: durations exact, laid end to end up to the log), and ``perf/total_num_tokens``
counts tokens trained on (``rl.tokens.trained``), so the performance row works for verl as for any otel-rl
trainer.

transformers' end-of-training summaries as its loggers name them (``train/train_runtime``,
``train/train_samples_per_second``, ``train/train_steps_per_second``, ``train/total_flos``, ``train/train_loss``),
which its W&B integration keeps out of the run's history, are not recorded: they are no step's value.

Keys naming a policy version (``current_param_version``, ``policy_version``, ``fully_async/count/...``, AReaL's
``version_stats/v_theta``) set
``rl.policy.version`` (an integral float counts; a fraction is rejected as ``nonintegral``). Distinct keys are
capped by ``max_metric_keys`` (512: a verl step with rollout correction and validation fits) like every
``record_metric`` key, and a key whose values are all rejected takes no slot. Every value keeps float64 precision;
an array of any shape under another key records each element; ``None`` inside a list is dropped and counted on its
own; a ``None`` value is no value and is skipped (TRL logs one for a window in which a reward function scored
nothing, W&B shows a gap); values that are not numbers (tables, images, strings) are rejected and counted, never
raised.

>>> import otel_rl
>>> telemetry = otel_rl.Telemetry(otel_rl.TelemetryConfig(run_id="doc", exporter="none"))
>>> MetricsDictLogger(telemetry).log({"critic/score/mean": 0.5, "actor/pg_loss": 0.1}, step=1)
>>> telemetry.shutdown()
True
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from otel_rl import _global
from otel_rl._guard import failed, guarded
from otel_rl._record.inputs import as_text
from otel_rl._state.self_telemetry import SelfTelemetry
from otel_rl._telemetry import Telemetry

__all__ = ["MetricsDictLogger"]

_METRIC = "otel_rl.tracking"
"""Where a metrics dict that cannot be read at all is counted (``otel_rl.values.rejected{otel_rl.metric}``)."""
_STAT = r"(?P<stat>mean|max|min|std|median|clip_ratio|avg)"
_STAT_ALIASES = {"avg": "mean"}
"""Statistics named otherwise by some trainers (AReaL's ``avg``), under the name the canonical key uses."""
_CANONICAL: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), canonical)
    for pattern, canonical in (
        (rf"^(critic/score|reward)/{_STAT}$", "reward/{stat}"),
        (r"^(train/)?reward$", "reward/mean"),
        (r"^(train/)?(rollout/)?reward_std$", "reward/std"),
        (rf"^train/agg/all/[^/]+/reward/{_STAT}$", "reward/{stat}"),
        (r"^reward/avg_raw_reward$", "reward/mean"),
        (r"^rollout/raw_reward$", "reward/mean"),
        (rf"^ppo_actor/task_reward/{_STAT}$", "reward/{stat}"),
        (rf"^critic/rewards/{_STAT}$", "reward_penalized/{stat}"),
        (rf"^critic/advantages/{_STAT}$", "advantage/{stat}"),
        (rf"^response_length/{_STAT}$", "response_length/{stat}"),
        (r"^(train/)?response_length$", "response_length/mean"),
        (rf"^train/agg/all/[^/]+/num_output_tokens/{_STAT}$", "response_length/{stat}"),
        (r"^generate/(?P<stat>avg|min|max|std)_num_tokens$", "response_length/{stat}"),
        (rf"^rollout/response_len/{_STAT}$", "response_length/{stat}"),
        (r"^(train/)?completions/(?P<stat>mean|min|max)_length$", "response_length/{stat}"),
        (rf"^(ppo_actor/)?prompt_len(gth)?/{_STAT}$", "prompt_length/{stat}"),
        (r"^(actor/entropy|(train/)?entropy(_loss)?|policy/policy_entropy)$", "entropy/mean"),
        (rf"^(entropy/all|ppo_actor/update/entropy)/{_STAT}$", "entropy/{stat}"),
        (r"^(actor/kl_loss|(train/)?kl|(train/)?kl_loss|policy/policy_kl|loss/avg_kl)$", "kl/mean"),
        (r"^loss/avg_kl_max$", "kl/max"),
        (r"^(actor/ppo_kl|(train/)?ppo_kl)$", "ppo_kl/mean"),
        (rf"^ppo_actor/update/approx_kl/{_STAT}$", "ppo_kl/{stat}"),
        (rf"^mismatch_kl/all/{_STAT}$", "mismatch_kl/{stat}"),
        (r"^(train/)?vllm_kl$", "mismatch_kl/mean"),
        (rf"^off_policy/{_STAT}$", "staleness/{stat}"),
        (rf"^off_policy/(?P<part>in_queue|in_flight)/{_STAT}$", "staleness_{part}/{stat}"),
        (r"^off_policy/dropped$", "staleness/dropped"),
        (r"^async/staleness_(?P<stat>mean|max|min)$", "staleness/{stat}"),
        (r"^ppo_actor/update/version_stats/sample_staleness_theta_(?P<stat>avg|max|min)$", "staleness/{stat}"),
        (rf"^.*staleness.*/{_STAT}$", "staleness/{stat}"),
        (r"^(rollout/)?zero_std/count_(?P<reward>.+)$", "zero_std_groups/{reward}"),
    )
)
_VERSION = re.compile(r"(^|/)(current_param_version|param_version|policy_version|v_theta)$")
_TIMING = "timing_s/"
_PHASES = {
    "gen": "generate",
    "reward": "score",
    "old_log_prob": "old_log_prob",
    "ref": "ref",
    "values": "values",
    "adv": "advantage",
    "update_critic": "train_critic",
    "update_actor": "train",
    "update_weights": "sync",
    "testing": "validate",
    "save_checkpoint": "checkpoint",
}
"""verl's timed sections (``timing_s/<section>``, ray_trainer.py ``marked_timer``) and the phase each is."""
_TOKENS = "perf/total_num_tokens"
"""verl's tokens of the step's batch (prompt and response, compute_throughout_metrics): tokens trained on."""
_SUMMARIES = frozenset(
    {
        "train/train_runtime",
        "train/train_samples_per_second",
        "train/train_steps_per_second",
        "train/total_flos",
        "train/train_loss",
    }
)
"""transformers' end-of-training summaries as its loggers name them: what its W&B integration (``WandbCallback.on_log``,
``single_value_scalars``) writes to the run's summary instead of its history. Not recorded on any path."""
_REWARD_ARRAY = re.compile(r"^(.*/)?(rewards?|scores?)(/(?P<fn>[^/]+))?$")
_LENGTH_ARRAY = re.compile(r"^(.*/)?(?P<name>(response|prompt)_length)$")


class MetricsDictLogger:
    """``log(data, step)`` like verl's tracking backends and W&B: each step's metrics dict into ``telemetry``
    (default: the one of ``otel_rl.setup()``, looked up per call, so it can be made before setup)."""

    def __init__(self, telemetry: Telemetry | None = None) -> None:
        self._telemetry = telemetry
        self._step: int | None = None

    @property
    def self_telemetry(self) -> SelfTelemetry | None:
        """Where what this logger drops is counted: its telemetry's."""
        telemetry = self._current()
        return None if telemetry is None else telemetry.self_telemetry

    @guarded(_METRIC, values="data")
    def log(self, data: Mapping[str, Any], step: int | None = None, backend: object = None) -> None:
        """Record one step's metrics; ``backend`` is accepted (and ignored) for verl's ``Tracking.log`` signature.
        Never raises: a value that cannot be recorded is counted by otel-rl's rejection counters, and the other
        values of the dict are recorded all the same."""
        telemetry = self._current()
        if telemetry is None:
            return
        if step is not None and step != self._step:
            self._step = step
            telemetry.step(step)
        items = list(data.items())
        for key, value in items:
            try:
                _record(telemetry, as_text(key), value)
            except Exception as error:  # noqa: BLE001 - one unreadable entry must not lose the others
                failed(telemetry.self_telemetry, _METRIC, error, value)
        telemetry.record_phases(_timed_phases(items))
        tokens = dict(items).get(_TOKENS)
        if tokens is not None:
            telemetry.record_tokens(trained=tokens)

    @guarded(_METRIC)
    def finish(self) -> None:
        """Export what was logged (verl calls ``finish`` on its backends at the end)."""
        telemetry = self._current()
        if telemetry is not None:
            telemetry.flush()

    def _current(self) -> Telemetry | None:
        return self._telemetry or _global.current()


def _record(telemetry: Telemetry, key: str, value: Any) -> None:
    """One entry of a metrics dict."""
    if value is None or key in _SUMMARIES:
        return
    if _is_array(value):
        reward = _REWARD_ARRAY.match(key)
        if reward:
            telemetry.record_rewards(value, fn=reward.group("fn") or "total")
            return
        length = _LENGTH_ARRAY.match(key)
        if length:
            telemetry.record_metric(length.group("name"), value)
            return
    elif _VERSION.search(key):
        telemetry.set_policy_version(value)
        return
    telemetry.record_metric(canonical_key(key), value)


def _timed_phases(items: list[tuple[Any, Any]]) -> dict[str, Any]:
    """verl's timed sections of a metrics dict, as ``{phase: seconds}`` in the order they were logged."""
    phases = {}
    for key, value in items:
        section = key.removeprefix(_TIMING) if isinstance(key, str) and key.startswith(_TIMING) else None
        if section in _PHASES:
            phases[_PHASES[section]] = value
    return phases


def canonical_key(key: str) -> str:
    """The ``rl.metric.key`` a logged key is recorded under (see the module's table).

    >>> canonical_key("critic/score/mean"), canonical_key("ppo_actor/task_reward/avg"), canonical_key("actor/pg_loss")
    ('reward/mean', 'reward/mean', 'actor/pg_loss')
    """
    for pattern, canonical in _CANONICAL:
        found = pattern.match(key)
        if found:
            groups = found.groupdict()
            if "stat" in groups:
                groups["stat"] = _STAT_ALIASES.get(groups["stat"], groups["stat"])
            return canonical.format(**groups)
    return key


def _is_array(value: Any) -> bool:
    """A per-sample array: a list or tuple, or an array/tensor with at least one dimension."""
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return True
    return getattr(value, "ndim", 0) >= 1
