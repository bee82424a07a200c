"""The comparison's step windows, substitutions, bands and differences, and the report command's checks of a
comparison's options, without a stack (tests/dashboards/test_compare.py runs them through the real one)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from otel_rl_ops.cli import main
from otel_rl_ops.report.compare import (
    ComparedPanel,
    Comparison,
    Curve,
    Run,
    StepWindow,
    band,
    differences,
    reached,
    step_windows,
    substitute_runs,
)
from otel_rl_ops.report.dashboard import Panel


def test_a_step_reached_between_two_flushes_takes_the_later_flush() -> None:
    """Each step is reached at the first flush showing it or a later step: steps 1 and 2, declared between two
    flushes, are reached at the flush that shows 2."""
    assert reached([(10.0, 0), (11.0, 0), (12.0, 2), (13.0, 2), (14.0, 3)]) == {0: 10.0, 1: 12.0, 2: 12.0, 3: 14.0}


def test_windows_cut_the_run_at_the_flushes_that_first_show_their_steps() -> None:
    """Windows of ``every`` steps run from the flush that first showed their first step to the one that first showed
    the step after them; the first from before the run; a window no flush split from the next is left out (its steps'
    values are in the window before); the last window is the last one the run completed."""
    points = [(10.0, 0), (11.0, 1), (12.0, 1), (13.0, 4), (14.0, 5), (15.0, 6)]
    assert step_windows(points, 1) == [
        StepWindow(0, 0, None, 11.0),
        StepWindow(1, 1, 11.0, 13.0),
        StepWindow(4, 4, 13.0, 14.0),
        StepWindow(5, 5, 14.0, 15.0),
    ]
    assert step_windows(points, 3) == [StepWindow(0, 2, None, 13.0), StepWindow(3, 5, 13.0, 15.0)]
    assert step_windows(points, 7) == []
    assert StepWindow(0, 2, None, 13.0).duration(first_flush=10.0) == "3001ms"
    with pytest.raises(ValueError, match='"every" must be an integer >= 1, got 0'):
        step_windows(points, 0)


@pytest.mark.parametrize(
    "run_id", ['a"b', "back\\slash", "dots.and(parens)|pipe", "$runs", "${runs:doublequote}", "new\nline", "ü+*?"]
)
def test_a_run_id_selects_that_run_and_no_other(run_id: str) -> None:
    """``"$runs"`` becomes a regular expression (in a string literal) that matches exactly the run id, whatever it
    holds: quotes, backslashes, regex metacharacters, a dashboard variable's own text, a newline; the samples' list
    holds it as a string literal; both in one pass."""
    query = 'x{rl_run_id=~"$runs"}[$__rate_interval] {rl.run.id in (${runs:doublequote})}'
    text = substitute_runs(query, [run_id], window="1500ms")
    found = re.fullmatch(r'x\{rl_run_id=~(".*")\}\[1500ms\] \{rl\.run\.id in \((".*")\)\}', text, re.DOTALL)
    assert found is not None, text
    regex, listed = (ast.literal_eval(group) for group in found.groups())
    assert listed == run_id
    assert re.fullmatch(regex, run_id, re.DOTALL) is not None
    assert re.fullmatch(regex, run_id + "x", re.DOTALL) is None and re.fullmatch(regex, "x" + run_id, re.DOTALL) is None


def test_a_query_with_a_variable_the_comparison_does_not_know_is_refused() -> None:
    """A dashboard query with another variable (``$run``), or a window it was given none for, is an error naming it."""
    with pytest.raises(ValueError, match=r"does not fill in: \['\$run'\]"):
        substitute_runs('x{rl_run_id="$run"}', ["a"])
    with pytest.raises(ValueError, match=r"does not fill in: \['\$__rate_interval'\]"):
        substitute_runs('rate(x{rl_run_id=~"$runs"}[$__rate_interval])', ["a"])


def _panel(curves: list[Curve]) -> ComparedPanel:
    panel = Panel(
        id=2, title="Reward (total): mean", description="", type="xychart", unit="none", axis_label="", targets=()
    )
    return ComparedPanel(panel, "q", curves)


def _comparison(panel: ComparedPanel) -> Comparison:
    def run(run_id: str, group: str = "", last: int = 3) -> Run:
        return Run(run_id, group, tuple((float(step), float(step)) for step in range(last + 1)))

    seeds = [run("s1", "g"), run("s2", "g", last=2)]
    runs = [run("baseline"), run("other")]
    return Comparison(
        runs=runs,
        groups={"g": seeds},
        baseline="baseline",
        every=1,
        windows={r.run_id: step_windows(r.points, 1) for r in [*runs, *seeds]},
        panels=[panel],
        samples=[],
        dashboard=Path("rl-compare.json"),
    )


def test_a_group_is_its_runs_mean_and_range_and_differences_are_against_the_baseline() -> None:
    """A group's band is, at each step, the mean, min and max of its runs that have a value there; the table rows
    hold, at the steps every run completed, the baseline's value and each run's and group's value minus it."""
    panel = _panel(
        [
            Curve("baseline", (), {0: 1.0, 1: 2.0, 2: 3.0}),
            Curve("other", (), {0: 1.5, 1: 1.0, 2: 4.0}),
            Curve("s1", (), {0: 0.0, 1: 4.0, 2: 2.0}),
            Curve("s2", (), {0: 1.0, 1: 2.0}),
        ]
    )
    comparison = _comparison(panel)
    found = band("g", comparison.groups["g"], panel, ())
    assert (found.mean, found.low, found.high, found.runs) == (
        {0: 0.5, 1: 3.0, 2: 2.0},
        {0: 0.0, 1: 2.0, 2: 2.0},
        {0: 1.0, 1: 4.0, 2: 2.0},
        {0: 2, 1: 2, 2: 1},
    )
    assert comparison.matching_steps() == [0, 1]  # s2 completed steps 0 and 1 only
    rows = differences(comparison, panel)
    assert [(r.first, r.baseline, r.values) for r in rows] == [
        (0, 1.0, {"other": (1.5, 0.5), "group g": (0.5, -0.5)}),
        (1, 2.0, {"other": (1.0, -1.0), "group g": (3.0, 1.0)}),
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--run-id", "a", "--baseline", "a"], '"--baseline" and "--step-window" compare runs'),
        (["--run-id", "a", "--run-id", "b", "--baseline", "c"], r'"--baseline" must be one of the --run-id values'),
        (["--run-id", "a", "--run-id", "a"], r'"--run-id" must name each run once'),
        (["--run-id", "a", "--run-id", "b", "--step-window", "0"], r'"--step-window" must be an integer >= 1, got 0'),
    ],
)
def test_bad_comparison_options_are_one_error_line(
    options: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A baseline outside the runs, a run given twice, a step window below 1, or comparison options without a
    comparison end in one ``otel-rl: error:`` line naming the option, before any store is asked."""
    stores = ["--prometheus-url", "http://127.0.0.1:1", "--victorialogs-url", "http://127.0.0.1:1"]
    stores += ["--jaeger-url", "http://127.0.0.1:1"]
    assert main(["report", *stores, *options, "--out", str(tmp_path / "x.png")]) == 1
    error = capsys.readouterr().err
    assert error.startswith("otel-rl: error: ") and re.search(message, error), error
