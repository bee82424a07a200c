"""exporter="console": one line per distribution per step and rank, with the numbers the dashboards would show.

Each test drives a real :class:`Telemetry` with ``exporter="console"`` and reads what it printed to stdout. The
dashboards' rule is checked against the real thing: the same histograms go through the dashboards' PromQL
(``otel_rl_ops.promql``) in promtool, and the console must print the values Prometheus computes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import otel_rl_contract as contract
import pytest
from otel_rl_contract import Distribution

from otel_rl import EpisodeSample, Telemetry, TelemetryConfig, _env
from otel_rl._record.buckets import HistogramForm
from tests.conftest import RecordingMetricExporter

LINE = re.compile(r"^\[otel-rl\] step (?P<step>\d+) rank (?P<rank>\d+) (?P<what>\S+)(?P<rest>.*)$")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _env.VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _console(**settings: Any) -> Telemetry:
    return Telemetry(TelemetryConfig(run_id="console", exporter="console", **settings))


def _fields(out: str, step: int, rank: int, what: str) -> dict[str, str]:
    """The ``key=value`` fields of the one line about ``what`` at ``step`` and ``rank``."""
    found = [
        m["rest"]
        for m in map(LINE.match, out.splitlines())
        if m and (int(m["step"]), int(m["rank"]), m["what"]) == (step, rank, what)
    ]
    assert len(found) == 1, (what, step, rank, out)
    return dict(part.rsplit("=", 1) for part in found[0].split())


def _record(telemetry: Telemetry, metric: Distribution, values: Sequence[float]) -> None:
    """Record ``values`` into the distribution ``metric`` (staleness, response lengths or rewards)."""
    if metric == contract.STALENESS:
        telemetry.record_staleness([100 - int(v) for v in values], 100)
    elif metric == contract.RESPONSE_LENGTHS:
        telemetry.record_rollouts(response_lengths=list(values))
    else:
        telemetry.record_rewards(list(values))


def _one_step(metric: Distribution, values: Sequence[float], **settings: Any) -> None:
    """A console process records ``values`` into ``metric`` in step 0, then steps on and shuts down."""
    telemetry = _console(**settings)
    telemetry.step(0)
    _record(telemetry, metric, values)
    telemetry.step(1)
    telemetry.shutdown()


def test_staleness_of_86_ones_and_14_zeros_shows_p50_1(capsys: pytest.CaptureFixture[str]) -> None:
    """86 lags of 1 and 14 of 0: p50, p90 and p99 are 1 (not 0.419), min 0, max 1, n and mean exact."""
    _one_step(contract.STALENESS, [1] * 86 + [0] * 14)
    fields = _fields(capsys.readouterr().out, 0, 0, "rl.staleness")
    assert fields == {"n": "100", "mean": "0.86", "p50": "1", "p90": "1", "p99": "1", "min": "0", "max": "1"}


def test_staleness_of_31_zeros_and_a_one_shows_the_dashboards_integer_p99(capsys: pytest.CaptureFixture[str]) -> None:
    """31 lags of 0 and one of 1: p99 is the dashboards' rounded, clamped value, 1 (not 0.68); p50 is 0."""
    _one_step(contract.STALENESS, [0] * 31 + [1])
    fields = _fields(capsys.readouterr().out, 0, 0, "rl.staleness")
    assert (fields["p50"], fields["p90"], fields["p99"], fields["max"]) == ("0", "0", "1", "1")


@pytest.mark.parametrize("histogram", ["exponential", "explicit"])
def test_lengths_up_to_3_never_show_a_quantile_above_3(capsys: pytest.CaptureFixture[str], histogram: str) -> None:
    """Response lengths 1 to 3: every quantile is an integer within [1, 3] (not 3.02), in either histogram form."""
    _one_step(contract.RESPONSE_LENGTHS, [1, 2, 3, 3, 3, 2, 3, 3], histogram=histogram)
    fields = _fields(capsys.readouterr().out, 0, 0, "rl.response.length")
    assert (fields["min"], fields["max"], fields["n"], fields["mean"]) == ("1", "3", "8", "2.5")
    assert all(fields[p] in ("1", "2", "3") for p in ("p50", "p90", "p99")), fields
    assert fields["p99"] == "3"


def _two_steps_on_two_ranks(**settings: Any) -> None:
    ranks = [_console(rank=r, world_size=2, **settings) for r in range(2)]
    for step in range(2):
        for telemetry in ranks:
            telemetry.step(step)
            with telemetry.phase("generate"):
                telemetry.record_rewards([1.0] * 86 + [0.0] * 14)
                telemetry.record_staleness([5] * 86 + [6] * 14, 6)
            with telemetry.phase("generate"):
                telemetry.record_rollouts(response_lengths=[1, 2, 3, 3], advantages=[0.5, -0.5, 0.0, 1.0])
            with telemetry.phase("train"):
                telemetry.record_metric("loss", [0.5, 0.25])
                telemetry.record_tokens(trained=40)
            telemetry.record_sample(EpisodeSample(reward=1.0, prompt="2+2?", response="4"))
            telemetry.record_sample(EpisodeSample(reward=0.0, prompt="3+3?", response="7"))
    for telemetry in ranks:
        telemetry.shutdown()


def test_two_steps_on_two_ranks_print_one_line_per_distribution_per_step_and_rank(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two steps on two ranks: every line is one ``[otel-rl] step S rank R ...`` line, one per distribution (and
    per counts, state, phases and sample) per step and rank, 38 in all (the state line in step 0 only); no span
    JSON, no header without numbers, no merge canary or self-telemetry counters."""
    _two_steps_on_two_ranks()
    lines = capsys.readouterr().out.splitlines()
    matches = [LINE.match(line) for line in lines]
    assert all(matches), [line for line, m in zip(lines, matches, strict=True) if not m]
    kinds = Counter((int(m["step"]), int(m["rank"]), m["what"]) for m in matches if m)
    per_step = {
        "rl.reward{fn=total}": 1,
        "rl.staleness": 1,
        "rl.response.length": 1,
        "rl.advantage": 1,
        "rl.metric{key=loss}": 1,
        "counts": 1,
        "phases": 1,
        "sample": 2,
    }
    for step in range(2):
        for rank in range(2):
            state = {"state": 1} if step == 0 else {}  # the policy version changed in step 0 only
            assert {k[2]: n for k, n in kinds.items() if k[:2] == (step, rank)} == {**per_step, **state}
    assert len(lines) == 38
    assert not any("canary" in line or "otel_rl." in line for line in lines)


def test_phases_are_summarized_per_step_and_rank(capsys: pytest.CaptureFixture[str]) -> None:
    """Each step's phases are one line: per phase the span count, mean and p99 duration, and the step's time."""
    _two_steps_on_two_ranks()
    out = capsys.readouterr().out
    for step in range(2):
        for rank in range(2):
            line = next(
                m["rest"]
                for m in map(LINE.match, out.splitlines())
                if m and (int(m["step"]), int(m["rank"]), m["what"]) == (step, rank, "phases")
            )
            time = r"[\d.]+m?s"
            summary = rf" step_time={time}, generate n=2 mean={time} p99={time}, train n=1 mean={time} p99={time}"
            assert re.fullmatch(summary, line), line


def test_counts_show_what_moved_in_the_step(capsys: pytest.CaptureFixture[str]) -> None:
    """The counts line holds each rl.* counter's change in the step, not its running total."""
    _two_steps_on_two_ranks()
    out = capsys.readouterr().out
    for step in range(2):
        fields = _fields(out, step, 0, "counts")
        assert fields["rl.tokens.trained"] == "+40"
        assert fields["rl.advantage.sign{sign=positive}"] == "+2"


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_self_telemetry_is_printed_only_when_asked(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """console_self_telemetry=True (or OTEL_RL_CONSOLE_SELF_TELEMETRY=true) adds the merge canary and the self
    counters; the distributions' lines stay the same."""
    if how == "environment":
        monkeypatch.setenv(_env.OTEL_RL_CONSOLE_SELF_TELEMETRY, "true")
        _two_steps_on_two_ranks()
    else:
        _two_steps_on_two_ranks(console_self_telemetry=True)
    out = capsys.readouterr().out
    assert _fields(out, 0, 0, "otel_rl.merge.canary")["n"] == "2"
    assert _fields(out, 1, 1, "self")["otel_rl.values.recorded{metric=rl.reward}"] == "+100"
    assert _fields(out, 1, 1, "rl.staleness")["p50"] == "1"


def test_a_bad_self_telemetry_variable_names_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_RL_CONSOLE_SELF_TELEMETRY must be true or false: anything else raises naming it."""
    monkeypatch.setenv(_env.OTEL_RL_CONSOLE_SELF_TELEMETRY, "yes please")
    with pytest.raises(ValueError, match="OTEL_RL_CONSOLE_SELF_TELEMETRY must be true or false, got 'yes please'"):
        TelemetryConfig(exporter="console")


def test_nothing_is_printed_for_a_step_without_values(capsys: pytest.CaptureFixture[str]) -> None:
    """Steps in which nothing was recorded print nothing: no empty header per step."""
    telemetry = _console(trace_phases=False)
    for step in range(18):
        telemetry.step(step)
    telemetry.record_rewards([0.5])
    telemetry.shutdown()
    assert capsys.readouterr().out.splitlines() == [
        "[otel-rl] step 17 rank 0 rl.reward{fn=total} n=1 mean=0.5 p50=0.5 p90=0.5 p99=0.5 min=0.5 max=0.5"
    ]


def test_samples_are_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    """A kept sample is one line with its step, rank, selection, reward and texts cut to 80 characters."""
    telemetry = _console(trace_phases=False, top_k=1, bottom_k=0)
    telemetry.step(4)
    telemetry.record_sample(EpisodeSample(reward=0.75, prompt="line\nbreak", response="x" * 200, episode_id="e1"))
    telemetry.shutdown()
    (line,) = [line for line in capsys.readouterr().out.splitlines() if " sample " in line]
    assert (
        line == f"[otel-rl] step 4 rank 0 sample top reward=0.75 episode=e1 prompt='line\\nbreak' response='{'x' * 80}'"
    )


# -- the dashboards' rule, checked against Prometheus ----------------------------------------------------------

_RNG = np.random.default_rng(7)
CASES: dict[str, tuple[Distribution, list[Any]]] = {
    "lag_86_ones": (contract.STALENESS, [1] * 86 + [0] * 14),
    "lag_31_zeros": (contract.STALENESS, [0] * 31 + [1]),
    "lag_spread": (contract.STALENESS, _RNG.integers(0, 300, 500).tolist()),
    "lengths": (contract.RESPONSE_LENGTHS, [1, 2, 3, 3, 3, 2, 3, 3]),
    "lengths_long": (contract.RESPONSE_LENGTHS, _RNG.integers(10, 4000, 300).tolist()),
    "reward_binary": (contract.REWARDS, [1.0] * 86 + [0.0] * 14),
    "reward_signed": (contract.REWARDS, _RNG.normal(-0.3, 1.0, 400).round(6).tolist()),
    "reward_negative": (contract.REWARDS, (-_RNG.uniform(0.1, 7.0, 50)).tolist()),
}
INTEGERS = {contract.STALENESS, contract.RESPONSE_LENGTHS}


def _point(metric: Distribution, values: Sequence[float], histogram: HistogramForm) -> Any:
    """The histogram point a process exports after recording ``values`` into ``metric``."""
    exporter = RecordingMetricExporter()
    telemetry = Telemetry(
        TelemetryConfig(run_id="points", exporter="none", histogram=histogram, trace_phases=False),
        metric_exporter=exporter,
    )
    _record(telemetry, metric, values)
    telemetry.shutdown()
    attrs = {contract.REWARD_FN: contract.REWARD_FN_TOTAL} if metric == contract.REWARDS else None
    if histogram == "exponential":
        return exporter.exponential_point(metric.histogram.name, attrs)
    return exporter.histogram_point(metric.histogram.name, attrs)
