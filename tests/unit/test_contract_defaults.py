"""docs/contract.md says one thing about every default, and it is what otel_rl/_config.py does: its table of
defaults holds every TelemetryConfig setting once, each row equals the dataclass default and the value the setting
resolves to without arguments or environment, and every other "`setting` (default X)" in the text agrees."""

from __future__ import annotations

import ast
import dataclasses
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from otel_rl import DEFAULT_REWARD_BOUNDS, DEFAULT_STALENESS_BOUNDS, TelemetryConfig, _env

CONTRACT = (Path(__file__).parents[2] / "docs" / "contract.md").read_text()
SECTION = "## Configuration defaults"
SETTINGS = [item for item in dataclasses.fields(TelemetryConfig) if item.init]
NAMES = {item.name for item in SETTINGS}
GENERATED = {"run_id", "instance_id"}
"""Settings whose default is drawn per process, so the table describes it instead of giving a value."""

_MENTION = re.compile(r"`(?P<name>\w+)`\s*\((?:[^()`]*?[,;]\s*)?default:?\s+(?P<value>`[^`]+`|[^\s,;:)]+)")
_BARE = re.compile(r"`(?P<name>\w+)`\s*(?:\(\s*\d[^()]{0,40}|\d)")
_WORDS = {"on": True, "off": False}


def _table() -> tuple[dict[str, str], dict[str, list[str]]]:
    """Each row of the table of defaults: the setting's default cell and the environment variables it names."""
    start = CONTRACT.index(SECTION)
    end = CONTRACT.find("\n## ", start + len(SECTION))
    defaults: dict[str, str] = {}
    variables: dict[str, list[str]] = {}
    for line in CONTRACT[start:end].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        name = cells[0].strip("`")
        assert name not in defaults, f"{name} has two rows"
        defaults[name] = cells[1]
        variables[name] = re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[2])
    return defaults, variables


def _value(text: str, rank: int) -> Any:
    """A documented default as a Python value: a literal (strings formatted with ``rank``), a name the package
    exports, ``rank``, or ``on``/``off``."""
    text = text.strip("`")
    if text in _WORDS:
        return _WORDS[text]
    names = {
        "DEFAULT_REWARD_BOUNDS": DEFAULT_REWARD_BOUNDS,
        "DEFAULT_STALENESS_BOUNDS": DEFAULT_STALENESS_BOUNDS,
        "rank": rank,
    }
    if text in names:
        return names[text]
    value = ast.literal_eval(text)
    return value.format(rank=rank) if isinstance(value, str) else value


def _documented(cell: str, rank: int) -> Any:
    """The value of a default cell: its leading backticked value."""
    match = re.match(r"`([^`]+)`", cell)
    assert match, f"default cell {cell!r} must start with a value in backticks"
    return _value(match.group(1), rank)


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No variable otel-rl reads is set: the settings resolve to their defaults."""
    for name in (*_env.VARIABLES, *_env.RUN_ID_VARS, *_env.RANK_VARS, *_env.WORLD_SIZE_VARS, *_env.LOCAL_RANK_VARS):
        monkeypatch.delenv(name, raising=False)


def test_the_table_lists_every_setting_once() -> None:
    """Every TelemetryConfig setting has one row, and nothing else does; only per-process settings are described
    rather than given."""
    defaults, _ = _table()
    assert set(defaults) == NAMES
    described = {name for name, cell in defaults.items() if not cell.startswith("`")}
    assert described == GENERATED


@pytest.mark.usefixtures("clean_environment")
@pytest.mark.parametrize("rank", [0, 3])
def test_each_documented_default_is_what_the_code_resolves(rank: int) -> None:
    """Each row's value equals the dataclass default (where it has one) and what the setting resolves to with no
    argument and no environment, on rank 0 and on rank 3 of 4 (defaults made from the rank)."""
    defaults, _ = _table()
    given: dict[str, Any] = {"rank": rank, "world_size": 4, "run_id": "defaults"} if rank else {}
    resolved = TelemetryConfig(**given).resolved
    wrong = {}
    for item in SETTINGS:
        if item.name in GENERATED or item.name in given:
            continue
        documented = _documented(defaults[item.name], rank)
        actual = getattr(resolved, item.name)
        declared = item.default if item.default is not dataclasses.MISSING and item.default is not None else actual
        if not documented == actual == declared:
            wrong[item.name] = (documented, declared, actual)
    assert not wrong, "docs/contract.md (documented, dataclass default, resolved) disagree: " + repr(wrong)


@pytest.mark.usefixtures("clean_environment")
def test_generated_defaults_are_generated() -> None:
    """The described defaults hold: a run id of run- and 12 hex digits, a new UUID4 instance id per process."""
    first, second = TelemetryConfig().resolved, TelemetryConfig().resolved
    assert re.fullmatch(r"run-[0-9a-f]{12}", first.run_id) and first.run_id != second.run_id
    assert uuid.UUID(first.instance_id).version == 4 and first.instance_id != second.instance_id


def test_the_environment_variables_named_are_the_ones_read() -> None:
    """Every environment variable of the table is one otel-rl declares (otel_rl/_env.py)."""
    _, variables = _table()
    declared = {*_env.VARIABLES, *_env.RUN_ID_VARS, *_env.RANK_VARS, *_env.WORLD_SIZE_VARS, *_env.LOCAL_RANK_VARS}
    unknown = {name: names for name, names in variables.items() if not set(names) <= declared}
    assert not unknown


def test_every_default_mentioned_in_the_text_agrees_with_the_table() -> None:
    """Outside the table, a default is stated as "`setting` (default X)" and X is the table's; a bare number next
    to a setting ("`max_datasets` (16)") is not allowed, since nothing checks what it means."""
    defaults, _ = _table()
    start = CONTRACT.index(SECTION)
    end = CONTRACT.find("\n## ", start + len(SECTION))
    text = CONTRACT[:start] + CONTRACT[end:]
    mentions = [(m.group("name"), m.group("value")) for m in _MENTION.finditer(text) if m.group("name") in NAMES]
    assert len(mentions) >= 10  # the parser still finds the mentions (the text has more than ten)
    wrong = [
        (name, value)
        for name, value in mentions
        if _value(value, 0) != _documented(defaults[name], 0)  # the mentions are for a single process: rank 0
    ]
    assert not wrong, f"docs/contract.md states defaults that disagree with its table: {wrong}"
    bare = [m.group(0) for m in _BARE.finditer(text) if m.group("name") in NAMES and "default" not in m.group(0)]
    assert not bare, f"say (default X) for these: {bare}"


def test_the_parser_catches_a_disagreement() -> None:
    """The check can fail: the old text, "`max_metric_keys` (default 32)", is a mention that disagrees."""
    defaults, _ = _table()
    ((name, value),) = [
        (m.group("name"), m.group("value")) for m in _MENTION.finditer("`max_metric_keys` (default 32)")
    ]
    assert _value(value, 0) != _documented(defaults[name], 0)
    assert _BARE.search("capped at `max_datasets` (16) names")
    assert _BARE.search("Defaults: `max_metric_keys` 512 (a verl GRPO step")
