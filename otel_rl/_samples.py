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

from otel_rl import _names

Selection = Literal["top", "bottom", "random"]
_TEXT_FIELDS = ("prompt", "response", "target")
_SCALAR_TYPES = (str, bool, int, float)
_MAX_ATTRIBUTE_NAME = 128


@dataclass(frozen=True, kw_only=True)
class EpisodeSample:
    """One episode (rollout) worth reading: texts, reward and its breakdown, and where it came from.

    Texts may be ``str`` or ``bytes`` (decoded as UTF-8, invalid bytes replaced); each is cut to the configured
    byte budget on export. ``extra`` holds anything else: scalars become attributes ``rl.sample.extra.<key>``,
    other values are JSON-encoded into the body.
    """

    reward: float
    episode_id: str | int | None = None
    policy_version: int | None = None
    prompt: str | bytes | None = None
    response: str | bytes | None = None
    target: str | bytes | None = None
    reward_breakdown: Mapping[str, float] = field(default_factory=dict)
    advantage: float | None = None
    staleness: int | None = None
    request_len: int | None = None
    response_len: int | None = None
    dataset: str | None = None
    """The data source (as given to ``record_rewards(dataset=...)``): the sample's exemplars go to that dataset's
    streams, and its record carries ``rl.dataset``."""
    extra: Mapping[str, Any] = field(default_factory=dict)


SAMPLE_KEYS = frozenset(f.name for f in fields(EpisodeSample))


class SampleFilter(Protocol):
    """Chooses which of a step's samples are exported. ``drain`` returns them and starts the next step."""

    def add(self, sample: EpisodeSample) -> None: ...

    def drain(self) -> list[tuple[Selection, EpisodeSample]]: ...


class TopBottomFilter:
    """Keeps the ``top_k`` highest and ``bottom_k`` lowest rewards of a step, plus ``random_k`` uniformly.

    An episode is reported once: as ``top`` if it is among the highest, else ``bottom``, else ``random``.
    Episodes with a NaN reward can only be drawn at random.

    >>> f = TopBottomFilter(top_k=1, bottom_k=1)
    >>> for r in (0.5, -2.0, 3.0, 1.0):
    ...     f.add(EpisodeSample(reward=r))
    >>> [(selection, s.reward) for selection, s in f.drain()]
    [('top', 3.0), ('bottom', -2.0)]
    """

    def __init__(self, *, top_k: int = 2, bottom_k: int = 2, random_k: int = 0, seed: int | None = None) -> None:
        for name, value in (("top_k", top_k), ("bottom_k", bottom_k), ("random_k", random_k)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f'"{name}" must be an integer >= 0, got {value!r}')
        self._top_k, self._bottom_k, self._random_k = top_k, bottom_k, random_k
        self._random = random.Random(seed)
        self._order = itertools.count()
        self._reset()

    def _reset(self) -> None:
        self._top: list[tuple[float, int, EpisodeSample]] = []
        self._bottom: list[tuple[float, int, EpisodeSample]] = []
        self._reservoir: list[tuple[int, EpisodeSample]] = []
        self._seen = 0

    def add(self, sample: EpisodeSample) -> None:
        order = next(self._order)
        reward = float(sample.reward)
        if not math.isnan(reward):
            _push_bounded(self._top, (reward, -order, sample), self._top_k)
            _push_bounded(self._bottom, (-reward, -order, sample), self._bottom_k)
        self._seen += 1
        if len(self._reservoir) < self._random_k:
            self._reservoir.append((order, sample))
        elif self._random_k:
            slot = self._random.randrange(self._seen)
            if slot < self._random_k:
                self._reservoir[slot] = (order, sample)

    def drain(self) -> list[tuple[Selection, EpisodeSample]]:
        kept: list[tuple[Selection, EpisodeSample]] = []
        taken: set[int] = set()
        for selection, heap in (("top", self._top), ("bottom", self._bottom)):
            for _, negative_order, sample in sorted(heap, reverse=True):
                if -negative_order not in taken:
                    taken.add(-negative_order)
                    kept.append((selection, sample))  # type: ignore[arg-type]
        for order, sample in sorted(self._reservoir, key=lambda item: item[0]):
            if order not in taken:
                kept.append(("random", sample))
        self._reset()
        return kept


def _push_bounded(heap: list[tuple[float, int, EpisodeSample]], item: tuple[float, int, EpisodeSample], k: int) -> None:
    if k == 0:
        return
    if len(heap) < k:
        heapq.heappush(heap, item)
    elif item[:2] > heap[0][:2]:
        heapq.heapreplace(heap, item)


def sample_from_mapping(values: Mapping[str, Any]) -> tuple[EpisodeSample, list[str]]:
    """An :class:`EpisodeSample` from a torchforge-style dict, and the unknown keys that were left out."""
    unknown = sorted(str(key) for key in values if key not in SAMPLE_KEYS)
    known = {key: value for key, value in values.items() if key in SAMPLE_KEYS}
    if "reward" not in known:
        raise ValueError('a sample must have a "reward"')
    return EpisodeSample(**known), unknown


@dataclass(frozen=True)
class SampleRecord:
    """A kept sample ready for a log record: its attributes, its body, and whether a text was cut."""

    attributes: dict[str, Any]
    body: dict[str, str]
    truncated: bool


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
) -> SampleRecord:
    """Turn a sample into log-record attributes and body: texts go through ``redact``, then are cut to
    ``budget_bytes`` UTF-8 bytes. An exception from ``redact`` propagates: the caller drops the whole sample
    rather than export an unredacted text.

    >>> r = to_record(EpisodeSample(reward=1.0, response="héllo"), step=3, selection="top", table="t", budget_bytes=2)
    >>> r.body, r.attributes["rl.sample.truncated"], r.attributes["rl.step"]
    ({'response': 'h'}, True, 3)
    """
    attrs: dict[str, Any] = {
        _names.SAMPLE_SELECTION: selection,
        _names.SAMPLE_TABLE: table,
        _names.SAMPLE_REWARD: float(sample.reward),
    }
    scalars = {
        _names.SAMPLE_STEP: step,
        _names.SAMPLE_EPISODE_ID: None if sample.episode_id is None else str(sample.episode_id),
        _names.SAMPLE_POLICY_VERSION: sample.policy_version,
        _names.SAMPLE_ADVANTAGE: sample.advantage,
        _names.SAMPLE_STALENESS: sample.staleness,
        _names.SAMPLE_REQUEST_LENGTH: sample.request_len,
        _names.SAMPLE_RESPONSE_LENGTH: sample.response_len,
        _names.DATASET: sample.dataset,
    }
    attrs.update({key: _scalar(value) for key, value in scalars.items() if value is not None})
    for name, value in sample.reward_breakdown.items():
        attrs[_names.SAMPLE_REWARD_PREFIX + _attribute_name(name)] = float(value)
    body: dict[str, str] = {}
    truncated = False
    for name in _TEXT_FIELDS:
        text = getattr(sample, name)
        if text is not None:
            if redact is not None:
                text = redact(name, _decode(text))
            body[name], cut = _truncate(text, budget_bytes)
            truncated = truncated or cut
    structured: dict[str, Any] = {}
    for key, value in sample.extra.items():
        if isinstance(value, _SCALAR_TYPES) and not (isinstance(value, str) and len(value) > budget_bytes):
            attrs[_names.SAMPLE_EXTRA_PREFIX + _attribute_name(key)] = value
        else:
            structured[str(key)] = value
    if structured:
        body["extra"], cut = _truncate(_to_json(structured), budget_bytes)
        truncated = truncated or cut
    attrs[_names.SAMPLE_TRUNCATED] = truncated
    return SampleRecord(attrs, body, truncated)


def _scalar(value: Any) -> str | bool | int | float:
    if isinstance(value, _SCALAR_TYPES):
        return value
    if hasattr(value, "item"):
        item = value.item()
        if isinstance(item, _SCALAR_TYPES):
            return item
    return str(value)


def _attribute_name(name: object) -> str:
    text = str(name)
    cleaned = "".join(c if c.isalnum() or c in "_-." else "_" for c in text)
    return cleaned[:_MAX_ATTRIBUTE_NAME] or "_"


def _decode(text: str | bytes) -> str:
    if isinstance(text, bytes):
        return text.decode("utf-8", errors="replace")
    return text if isinstance(text, str) else str(text)


def _truncate(text: str | bytes, budget_bytes: int) -> tuple[str, bool]:
    """Cut ``text`` to at most ``budget_bytes`` UTF-8 bytes on a character boundary."""
    data = _decode(text).encode("utf-8", errors="replace")
    if len(data) <= budget_bytes:
        return data.decode("utf-8"), False
    return data[:budget_bytes].decode("utf-8", errors="ignore"), True


def _to_json(value: Any) -> str:
    try:
        return json.dumps(value, default=repr, ensure_ascii=False)
    except (ValueError, RecursionError, TypeError):
        return f"<{type(value).__name__} that is not JSON-serializable>"
