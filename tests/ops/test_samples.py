"""``otel-rl samples`` without a store: the columns, the values read from VictoriaLogs' text, --step, and the
errors that name the option and value (the export itself runs against the real stack in
tests/pipeline/test_samples_export.py)."""

from __future__ import annotations

import math
from pathlib import Path

import otel_rl_contract as contract
import pytest
from otel_rl_ops.cli import main
from otel_rl_ops.query import VictoriaLogs
from otel_rl_ops.samples import Column, Steps, columns, parse_steps, reward_column, value


def test_columns_follow_trl_then_add_what_it_lacks() -> None:
    """TRL's columns first (step, prompt, completion, one per reward function, advantage), the rest after; a
    reward function named like another column is prefixed, and every name stays unique."""
    fields = [
        f"{contract.SAMPLE_REWARD_PREFIX}{fn}" for fn in ("format", "correctness", "step", "reward.x", "extra.flag")
    ]
    fields += [f"{contract.SAMPLE_EXTRA_PREFIX}flag", "prompt", "_msg"]
    names = [c.name for c in columns(fields, {f"{contract.SAMPLE_EXTRA_PREFIX}flag": "bool"})]
    assert names[:6] == ["run_id", "step", "prompt", "completion", "target", "reward"]
    assert names[6:11] == ["correctness", "reward.extra.flag", "format", "reward.reward.x", "reward.step"]
    assert names[11] == "advantage" and "extra.flag" in names and names[-1] == "time"
    assert len(names) == len(set(names))
    assert {"staleness", "policy_version", "group_id", "trace_id", "span_id"} <= set(names)


@pytest.mark.parametrize("fn", ["step", "reward", "extra", "time", "reward.x", "extra.y", "x.y", "ünï"])
def test_reward_columns_never_take_another_columns_name(fn: str) -> None:
    """Whatever a reward function is named, its column is no fixed column's and no extra's."""
    fixed = {c.name for c in columns([], {})}
    name = reward_column(fn)
    assert name not in fixed and not name.startswith("extra.")
    assert name == fn or name == f"reward.{fn}"


def test_values_are_read_from_the_stores_text() -> None:
    """Integers, doubles (NaN and infinities as VictoriaLogs writes them), flags, texts; absent fields and
    VictoriaLogs' placeholder message are None."""
    record = {"rl.step": "12", "rl.reward": "-Inf", "rl.advantage": "NaN", "rl.sample.truncated": "true", "p": "x"}
    assert value(Column("step", "rl.step", "int"), record) == 12
    assert value(Column("reward", "rl.reward", "float"), record) == -math.inf
    assert math.isnan(float(value(Column("advantage", "rl.advantage", "float"), record) or 0))
    assert value(Column("truncated", "rl.sample.truncated", "bool"), record) is True
    assert value(Column("prompt", "p", "string"), record) == "x"
    assert value(Column("staleness", "rl.staleness", "int"), record) is None
    assert value(Column("completion", "_msg", "string"), {"_msg": VictoriaLogs.NO_MESSAGE}) is None


@pytest.mark.parametrize(
    ("text", "steps"),
    [("3:9", Steps(3, 9)), ("3:", Steps(3, None)), (":9", Steps(None, 9)), ("4", Steps(4, 4)), (":", Steps())],
)
def test_step_ranges(text: str, steps: Steps) -> None:
    """--step takes A:B (both included), an open end, or one step."""
    assert parse_steps(text) == steps


@pytest.mark.parametrize(
    ("text", "message"),
    [("a:b", r"--step must be .* got 'a:b'"), ("9:3", r"--step '9:3': the first step 9 is after the last 3")],
)
def test_bad_step_ranges_name_the_option(text: str, message: str) -> None:
    """A --step that is not a range of integers, or runs backwards, is refused with the option and value."""
    with pytest.raises(ValueError, match=message):
        parse_steps(text)


def test_bad_options_end_in_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Parquet to standard output, a missing folder and a bad --step stop before any query, in one line each."""
    common = ["samples", "--run-id", "r", "--victorialogs-url", "http://127.0.0.1:1"]
    cases = [
        (["--format", "parquet"], "--format parquet writes a file"),
        (["--out", str(tmp_path / "absent" / "x.jsonl")], "--out '"),
        (["--step", "x"], "--step must be"),
    ]
    for extra, message in cases:
        assert main([*common, *extra]) == 1
        error = capsys.readouterr().err
        assert error.startswith("otel-rl: error: ") and message in error and error.count("\n") == 1
    assert list(tmp_path.iterdir()) == []
