"""Episode samples: what one is, which ones a step keeps, and how a kept one becomes a log record.

The default filter keeps the top-k and bottom-k episodes of a step by reward (two bounded heaps, O(log k) per
sample) plus, optionally, a uniform reservoir of n. Any object with ``add`` and ``drain`` can replace it.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Protocol

import numpy as np
import otel_rl_contract as contract
import torch

from otel_rl._record.inputs import INT64_MAX, INT64_MIN, BadInput, Reason, as_integer, as_text, as_value, describe

Selection = Literal["top", "bottom", "random"]
_TEXT_FIELDS = ("prompt", "response", "target")
_MAX_ATTRIBUTE_NAME = 128


@dataclass(frozen=True, kw_only=True)
class EpisodeSample:
    """One episode (rollout) worth reading: texts, reward and its breakdown, and where it came from.

    Texts may be ``str`` or ``bytes`` (decoded as UTF-8, invalid bytes replaced); each is cut to the configured
    byte budget on export. ``extra`` holds anything else: scalars become attributes ``rl.sample.extra.<key>``,
    other values are JSON-encoded into the body.
    """

    reward: float
    """The episode's total reward (``rl.reward``); a bool counts as 1 or 0. It ranks the step's top and bottom
    samples; a NaN reward can only be drawn at random."""
    episode_id: str | int | None = None
    """The trainer's id of the episode (``rl.episode.id``, as text): what a reader searches the log store for."""
    group_id: str | int | None = None
    """The prompt group the episode belongs to (``rl.group.id``, as text): the rollouts of one prompt in a GRPO
    group share it (prime-rl's group id, verl's ``uid``), so a reader lines them up."""
    policy_version: int | None = None
    """The policy version that generated the episode (``rl.policy.version``)."""
    prompt: str | bytes | None = None
    """The prompt text; the top and bottom prefer distinct prompts (``distinct_prompts``)."""
    response: str | bytes | None = None
    """The generated response text."""
    target: str | bytes | None = None
    """The reference answer, when the task has one."""
    reward_breakdown: Mapping[str, float] = field(default_factory=dict)
    """Each reward function's value by its name (``rl.reward.<fn>``), e.g. ``{"correctness": 1.0, "format": 0.5}``."""
    advantage: float | None = None
    """The episode's advantage (``rl.advantage``)."""
    staleness: int | None = None
    """Policy lag of the episode in versions (``rl.staleness``): the trainer's version minus the generator's."""
    request_len: int | None = None
    """The prompt's length in tokens (``rl.request.length``)."""
    response_len: int | None = None
    """The response's length in tokens (``rl.response.length``)."""
    dataset: str | None = None
    """The data source (as given to ``record_rewards(dataset=...)``): the sample's exemplars go to that dataset's
    streams, and its record carries ``rl.dataset``."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Anything else: scalars become attributes ``rl.sample.extra.<key>``, other values are JSON-encoded into the
    body."""


SAMPLE_KEYS = frozenset(f.name for f in fields(EpisodeSample))


class SampleFilter(Protocol):
    """Chooses which of a step's samples are exported. ``drain`` returns them and starts the next step."""

    def add(self, sample: EpisodeSample) -> None:
        """Offer one of the step's samples."""

    def drain(self) -> list[tuple[Selection, EpisodeSample]]:
        """The step's chosen samples with how each was chosen; the filter starts the next step empty."""


class TopBottomFilter:
    """Keeps the ``top_k`` highest and ``bottom_k`` lowest rewards of a step, plus ``random_k`` uniformly.

    An episode is reported once: as ``top`` if it is among the highest, else ``bottom``, else ``random``. Episodes
    with a NaN reward can only be drawn at random. With ``distinct_prompts`` the top (and the bottom) prefer
    episodes of different prompts (by prompt text): the best episode of each of the best prompts, then, when a step
    has fewer prompts than ``k``, the next best episodes whatever their prompt. A GRPO group's rollouts share a
    prompt, often with equal rewards, so without it a table tends to show one prompt twice. Memory stays bounded:
    ``k`` entries per selection (and twice that with ``distinct_prompts``), whatever the number of episodes.

    >>> f = TopBottomFilter(top_k=1, bottom_k=1)
    >>> for r in (0.5, -2.0, 3.0, 1.0):
    ...     f.add(EpisodeSample(reward=r))
    >>> [(selection, s.reward) for selection, s in f.drain()]
    [('top', 3.0), ('bottom', -2.0)]
    >>> f = TopBottomFilter(top_k=2, bottom_k=0, distinct_prompts=True)
    >>> for r, prompt in ((1.0, "a"), (1.0, "a"), (0.5, "b")):
    ...     f.add(EpisodeSample(reward=r, prompt=prompt))
    >>> [(s.reward, s.prompt) for _, s in f.drain()]
    [(1.0, 'a'), (0.5, 'b')]
    """

    def __init__(
        self,
        *,
        top_k: int = 2,
        bottom_k: int = 2,
        random_k: int = 0,
        seed: int | None = None,
        distinct_prompts: bool = False,
    ) -> None:
        for name, value in (("top_k", top_k), ("bottom_k", bottom_k), ("random_k", random_k)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f'"{name}" must be an integer >= 0, got {value!r}')
        self._top_k, self._bottom_k, self._random_k = top_k, bottom_k, random_k
        self._distinct = distinct_prompts
        self._random = random.Random(seed)  # noqa: S311 - a reproducible sample selection, not a secret
        self._order = itertools.count()
        self._reset()

    def _reset(self) -> None:
        self._top: list[_Entry] = []
        self._bottom: list[_Entry] = []
        self._top_prompts: list[_Entry] = []
        self._bottom_prompts: list[_Entry] = []
        self._reservoir: list[tuple[int, EpisodeSample]] = []
        self._seen = 0

    def add(self, sample: EpisodeSample) -> None:
        """Offer one sample: kept while it is among the highest or lowest rewards, or drawn for the reservoir."""
        order = next(self._order)
        reward = float(sample.reward)
        if not math.isnan(reward):
            _push_bounded(self._top, (reward, -order, sample), self._top_k)
            _push_bounded(self._bottom, (-reward, -order, sample), self._bottom_k)
            if self._distinct:
                key = _prompt_key(sample, order)
                _keep_best_prompts(self._top_prompts, (reward, -order, sample), key, self._top_k)
                _keep_best_prompts(self._bottom_prompts, (-reward, -order, sample), key, self._bottom_k)
        self._seen += 1
        if len(self._reservoir) < self._random_k:
            self._reservoir.append((order, sample))
        elif self._random_k:
            slot = self._random.randrange(self._seen)
            if slot < self._random_k:
                self._reservoir[slot] = (order, sample)

    def drain(self) -> list[tuple[Selection, EpisodeSample]]:
        """The step's top, bottom and random samples, each episode once, and a fresh start for the next step."""
        kept: list[tuple[Selection, EpisodeSample]] = []
        taken: set[int] = set()
        for selection, prompts, heap, k in (
            ("top", self._top_prompts, self._top, self._top_k),
            ("bottom", self._bottom_prompts, self._bottom, self._bottom_k),
        ):
            chosen = 0
            for _, negative_order, sample in [*sorted(prompts, reverse=True), *sorted(heap, reverse=True)]:
                if chosen < k and -negative_order not in taken:
                    taken.add(-negative_order)
                    kept.append((selection, sample))  # type: ignore[arg-type]
                    chosen += 1
        for order, sample in sorted(self._reservoir, key=lambda item: item[0]):
            if order not in taken:
                kept.append(("random", sample))
        self._reset()
        return kept


_Entry = tuple[float, int, EpisodeSample]
"""A candidate: its score (the reward, negated for the bottom), minus its arrival order (earlier wins ties), and it."""


def _push_bounded(heap: list[_Entry], item: _Entry, k: int) -> None:
    if k == 0:
        return
    if len(heap) < k:
        heapq.heappush(heap, item)
    elif item[:2] > heap[0][:2]:
        heapq.heapreplace(heap, item)


def _prompt_key(sample: EpisodeSample, order: int) -> object:
    """What makes two episodes the same prompt: its text; an episode without a prompt is its own."""
    prompt = sample.prompt
    return prompt if isinstance(prompt, (str, bytes)) else ("no prompt", order)


def _keep_best_prompts(best: list[_Entry], item: _Entry, key: object, k: int) -> None:
    """Keep in ``best`` the best entry of each of the ``k`` prompts whose best entry is highest so far. A prompt
    that falls out can come back with a better entry later; one that never made it stays below the k-th."""
    if k == 0:
        return
    for index, entry in enumerate(best):
        if _prompt_key(entry[2], -entry[1]) == key:
            if item[:2] > entry[:2]:
                best[index] = item
            return
    if len(best) < k:
        best.append(item)
        return
    lowest = min(range(len(best)), key=lambda index: best[index][:2])
    if item[:2] > best[lowest][:2]:
        best[lowest] = item


def sample_from_mapping(values: Mapping[str, Any]) -> tuple[EpisodeSample, list[str]]:
    """An :class:`EpisodeSample` from a torchforge-style dict, and the unknown keys that were left out. Raises
    :class:`~otel_rl._record.inputs.BadInput` (``missing``) without a reward."""
    unknown = sorted(as_text(key) for key in values if key not in SAMPLE_KEYS)
    known = {key: value for key, value in values.items() if key in SAMPLE_KEYS}
    if "reward" not in known:
        raise BadInput("missing", 'a sample must have a "reward"')
    return EpisodeSample(**known), unknown


MAX_SAMPLE_ATTRIBUTES = 128
"""Attributes a sample record may carry: OpenTelemetry's default attribute count limit, past which the SDK would
evict the oldest attributes. The record's own attributes (id, step, selection, table, reward, ...) always fit; the
reward breakdown, then the scalar extras, take what is left, and whatever does not fit goes into the body's
``extra`` JSON instead (nothing is lost)."""


@dataclass(frozen=True)
class SampleRecord:
    """A kept sample ready for a log record, and for its exemplars.

    ``attributes`` and ``body`` are made only of OTLP's types (strings, bools, doubles, integers within signed 64
    bits); ``rejected`` counts the fields left out for their type or value, by reason."""

    attributes: dict[str, str | bool | int | float]
    body: dict[str, str]
    truncated: bool
    reward: float
    breakdown: dict[str, float]
    """Each reward function's value (the function's own name) that is a number."""
    staleness: int | None
    episode_id: str | None
    dataset: str | None
    rejected: dict[Reason, int]


Redactor = Callable[[str, str], str]
"""``redact(field, text) -> text``: rewrites a prompt, response or target before it leaves the process."""


def to_record(
    sample: EpisodeSample,
    *,
    step: int | None,
    selection: Selection,
    table: str,
    budget_bytes: int,
    redact: Redactor | None = None,
    sample_id: str = "",
) -> SampleRecord:
    """Turn a sample into log-record attributes and body, every field checked: a field of the wrong type or value
    is left out and counted in ``rejected``, the rest kept. Texts go through ``redact``, then are cut to
    ``budget_bytes`` UTF-8 bytes. An exception from ``redact`` propagates: the caller drops the whole sample
    rather than export an unredacted text. Raises :class:`~otel_rl._record.inputs.BadInput` when the reward is not a
    number.

    >>> r = to_record(EpisodeSample(reward=1.0, response="héllo"), step=3, selection="top", table="t", budget_bytes=2)
    >>> r.body, r.attributes["rl.sample.truncated"], r.attributes["rl.step"]
    ({'response': 'h'}, True, 3)
    """
    fields = _Fields()
    reward = as_value(sample.reward, argument="reward")
    identity: dict[str, str | bool | int | float] = {
        contract.SAMPLE_SELECTION: selection,
        contract.SAMPLE_TABLE: table,
        contract.SAMPLE_REWARD: reward,
    }
    if sample_id:
        identity[contract.SAMPLE_ID] = sample_id
    if step is not None:
        identity[contract.SAMPLE_STEP] = step
    episode_id = None if sample.episode_id is None else as_text(sample.episode_id)
    dataset = None if sample.dataset is None else as_text(sample.dataset)
    staleness = fields.integer("staleness", sample.staleness, minimum=0)
    numbers: dict[str, str | int | float | None] = {
        contract.SAMPLE_EPISODE_ID: episode_id,
        contract.SAMPLE_GROUP_ID: None if sample.group_id is None else as_text(sample.group_id),
        contract.SAMPLE_POLICY_VERSION: fields.integer("policy_version", sample.policy_version, minimum=0),
        contract.SAMPLE_ADVANTAGE: fields.real("advantage", sample.advantage),
        contract.SAMPLE_STALENESS: staleness,
        contract.SAMPLE_REQUEST_LENGTH: fields.integer("request_len", sample.request_len, minimum=0),
        contract.SAMPLE_RESPONSE_LENGTH: fields.integer("response_len", sample.response_len, minimum=0),
        contract.DATASET: dataset,
    }
    identity.update({key: value for key, value in numbers.items() if value is not None})
    breakdown = {
        as_text(name): value
        for name, item in fields.mapping("reward_breakdown", sample.reward_breakdown)
        if (value := fields.real("reward_breakdown", item)) is not None
    }
    body: dict[str, str] = {}
    truncated = False
    for name in _TEXT_FIELDS:
        text = getattr(sample, name)
        if text is not None:
            text = as_text(text)
            if redact is not None:
                text = as_text(redact(name, text))
            body[name], cut = _truncate(text, budget_bytes)
            truncated = truncated or cut
    room = MAX_SAMPLE_ATTRIBUTES - len(identity) - 1  # and rl.sample.truncated
    extras: dict[str, str | bool | int | float] = {}
    structured: dict[str, Any] = {}
    for name, value in breakdown.items():
        if len(extras) < room:
            extras[contract.SAMPLE_REWARD_PREFIX + _attribute_name(name)] = value
        else:
            structured.setdefault("reward_breakdown", {})[name] = value
    for key, value in fields.mapping("extra", sample.extra):
        scalar = _scalar(value, budget_bytes)
        if scalar is not None and len(extras) < room:
            extras[contract.SAMPLE_EXTRA_PREFIX + _attribute_name(key)] = scalar
        else:
            structured[as_text(key)] = value
    if structured:
        body["extra"], cut = _truncate(_to_json(structured), budget_bytes)
        truncated = truncated or cut
    attrs = {**extras, **identity, contract.SAMPLE_TRUNCATED: truncated}  # the record's own last: evicted last
    return SampleRecord(attrs, body, truncated, reward, breakdown, staleness, episode_id, dataset, fields.rejected)


class _Fields:
    """Checks a sample's fields one by one, counting those left out."""

    def __init__(self) -> None:
        self.rejected: dict[Reason, int] = {}

    def _reject(self, error: BadInput) -> None:
        self.rejected[error.reason] = self.rejected.get(error.reason, 0) + 1

    def integer(self, name: str, value: Any, *, minimum: int) -> int | None:
        if value is None:
            return None
        try:
            return as_integer(value, argument=name, minimum=minimum)
        except BadInput as error:
            self._reject(error)
            return None

    def real(self, name: str, value: Any) -> float | None:
        if value is None:
            return None
        try:
            return as_value(value, argument=name)
        except BadInput as error:
            self._reject(error)
            return None

    def mapping(self, name: str, value: Any) -> list[tuple[Any, Any]]:
        """The items of a mapping field (a field that is not a mapping is left out whole)."""
        if isinstance(value, Mapping):
            try:
                return list(value.items())
            except Exception:  # noqa: BLE001, S110 - a mapping whose items fail is not usable: rejected below
                pass
        self._reject(BadInput("type", f'"{name}" must be a mapping'))
        return []


def _scalar(value: Any, budget_bytes: int) -> str | bool | int | float | None:
    """An extra's value as an attribute value (None: it goes into the body): strings within the byte budget, bools,
    numbers (an int beyond signed 64 bits as a double), and numpy scalars and one-element tensors of those."""
    if isinstance(value, (str, bool)):
        return value if not isinstance(value, str) or len(value) <= budget_bytes else None
    if isinstance(value, int):
        return value if INT64_MIN <= value <= INT64_MAX else float(value)
    if isinstance(value, float):
        return value
    if isinstance(value, (np.generic, torch.Tensor, np.ndarray)) and getattr(value, "size", 1) in (1, None):
        try:
            item = value.item()
        except Exception:  # noqa: BLE001 - not one number: into the body
            return None
        return _scalar(item, budget_bytes) if isinstance(item, (str, bool, int, float)) else None
    return None


def _attribute_name(name: object) -> str:
    text = as_text(name)
    cleaned = "".join(c if c.isalnum() or c in "_-." else "_" for c in text)
    return cleaned[:_MAX_ATTRIBUTE_NAME] or "_"


def _truncate(text: str, budget_bytes: int) -> tuple[str, bool]:
    """Cut ``text`` to at most ``budget_bytes`` UTF-8 bytes on a character boundary (lone surrogates replaced)."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= budget_bytes:
        return data.decode("utf-8"), False
    return data[:budget_bytes].decode("utf-8", errors="ignore"), True


def _to_json(value: Any) -> str:
    try:
        return json.dumps(value, default=describe, ensure_ascii=False)
    except (ValueError, RecursionError, TypeError):
        return f"<{type(value).__name__} that is not JSON-serializable>"
