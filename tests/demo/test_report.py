"""``otel-rl report`` of a real demo run in a real stack: a report a person reads.

One module fixture runs the 2-rank demo (with its nested phase ``allreduce`` inside ``train``) against
``shared_stack`` with Jaeger, then renders the report twice: with the ``otel-rl report`` command given no store
address at all (it reads them from the running stack's state directory), and in process for the checks on the
figure.
"""

from __future__ import annotations

import json
import math
import re
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

ROOT = Path(__file__).parents[2]
RUN_ID = "report-test"
STEPS, RANKS = 80, 2


@dataclass(frozen=True)
class Reported:
    stack: Any
    summary: dict[str, Any]
    """The demo's own summary.json."""
    summary_md: str
    report: Any
    """The report built in process (otel_rl_ops.report.render.Report)."""
    figure: Any
    cli_output: str
    html: str
    """The page the command wrote."""
    png: Path


@pytest.fixture(scope="module")
def reported(shared_stack: Any, tmp_path_factory: pytest.TempPathFactory) -> Reported:
    from otel_rl_ops.report.render import build_report, figure, render_png

    out = tmp_path_factory.mktemp("report")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "demo",
            *("--steps", str(STEPS), "--ranks", str(RANKS), "--step-seconds", "0.4"),
            *("--endpoint", shared_stack.otlp_grpc_endpoint),
            *("--prometheus-url", shared_stack.prometheus_url, "--victorialogs-url", shared_stack.victorialogs_url),
            *("--jaeger-url", shared_stack.jaeger_url, "--run-id", RUN_ID, "--out", str(out)),
        ],
        check=True,
        timeout=600,
        cwd=ROOT,
    )
    page = out / "cli.html"
    command = subprocess.run(
        [
            *(sys.executable, "-m", "otel_rl_ops.cli", "report", "--state-dir", str(shared_stack.state_dir)),
            *("--run-id", RUN_ID, "--out", str(page), "--scrape-interval", "1"),
        ],
        check=True,
        timeout=300,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    report = build_report(
        prometheus_url=shared_stack.prometheus_url,
        victorialogs_url=shared_stack.victorialogs_url,
        jaeger_url=shared_stack.jaeger_url,
        run_id=RUN_ID,
        scrape_interval_s=1.0,
        lookback_s=3600,
    )
    png = out / "report.png"
    render_png(report, png)
    return Reported(
        stack=shared_stack,
        summary=json.loads((out / RUN_ID / "summary.json").read_text()),
        summary_md=(out / RUN_ID / "summary.md").read_text(),
        report=report,
        figure=figure(report),
        cli_output=command.stdout,
        html=page.read_text(encoding="utf-8"),
        png=png,
    )


def _titles(fig: Any) -> list[str]:
    return [ax.get_title(loc="left") for ax in fig.axes if ax.get_title(loc="left")]


def _axes(fig: Any, title: str) -> Any:
    (ax,) = [ax for ax in fig.axes if ax.get_title(loc="left") == title]
    return ax


def test_report_reads_every_store_from_the_running_stack(reported: Reported) -> None:
    """Given no store address, ``otel-rl report`` reads Prometheus, VictoriaLogs and Jaeger of the stack whose state
    directory it is given: its slowest-steps table links the run's traces in that stack's Jaeger."""
    stack = reported.stack
    assert f"from the running stack in {stack.state_dir}" in reported.cli_output
    for url in (stack.prometheus_url, stack.victorialogs_url, stack.jaeger_url):
        assert url in reported.cli_output
    assert f'<a href="{stack.jaeger_url}/trace/' in reported.html


def test_report_without_store_or_running_stack_names_the_missing_flag(tmp_path: Path) -> None:
    """With neither a Prometheus address nor a running stack in the state directory, the report says which flag
    to give."""
    from otel_rl_ops.report.cli import stores

    with pytest.raises(ValueError, match=r"--prometheus-url not given and no running stack in"):
        stores(prometheus_url=None, victorialogs_url=None, jaeger_url=None, state_dir=tmp_path)


def test_panels_without_data_are_folded_into_one_line(reported: Reported) -> None:
    """Panels with no data for the run (the inference engine's: the demo runs none) are not drawn: one line names
    them all, every drawn panel has data, and the PNG is as tall as the figure of those panels."""
    report, fig = reported.report, reported.figure
    empty = [data.panel.title for data in report.empty]
    inference = [data.panel.title for data in report.panels if data.panel.title.startswith("Inference:")]
    assert inference and set(inference) <= set(empty)
    titles = _titles(fig)
    assert not set(empty) & set(titles)
    assert {data.panel.title for data in report.plots} <= set(titles)
    assert all(data.has_data() for data in report.plots)
    texts = " ".join(" ".join(text.get_text().split()) for ax in fig.axes for text in ax.texts)
    assert f"No data for this run in {len(empty)} panels (not drawn): " in texts
    assert all(title in texts for title in empty)
    width, height = struct.unpack(">II", reported.png.read_bytes()[16:24])
    assert (width, height) == (round(fig.get_figwidth() * fig.dpi), round(fig.get_figheight() * fig.dpi))
    assert "No data for this run in" in reported.html


def test_summary_comes_first_with_the_demo_summarys_numbers(reported: Reported) -> None:
    """The report opens with the run's summary, read by the demo's own readback code: the same whole-run reward,
    staleness p99 and max, tokens, phase seconds, slowest step's trace and extreme samples as the demo printed; its
    slowest-steps table starts with that step."""
    from otel_rl_ops.report.summary import summary_rows

    mine, demo = reported.report.summary, reported.summary
    assert mine["reward"]["overall"] == demo["reward"]["overall"]
    assert {k: mine["staleness"][k] for k in ("p99", "max")} == {k: demo["staleness"][k] for k in ("p99", "max")}
    assert mine["performance"]["tokens"]["trained"] == demo["performance"]["tokens"]["trained"]
    seconds = {phase: stats["seconds"] for phase, stats in mine["performance"]["split"].items()}
    assert seconds == {phase: stats["seconds"] for phase, stats in demo["performance"]["split"].items()}
    assert mine["performance"]["slowest_step"] == demo["performance"]["slowest_step"] is not None
    for selection in ("top", "bottom"):
        assert mine["samples"][selection][0]["rl.reward"] == demo["samples"][selection][0]["rl.reward"]
    labels = [what for what, _ in summary_rows(mine)]
    for wanted in ("reward, first quarter", "reward, last quarter", "staleness (versions behind)", "phase train"):
        assert wanted in labels
    for wanted in ("tokens trained per second", "MFU (of peak FLOP/s)", "slowest step", "best sample", "worst sample"):
        assert wanted in labels
    top = max(reported.figure.axes, key=lambda ax: ax.get_position().y1)
    assert top.get_title(loc="left") == "Summary"
    assert reported.html.index("<h2>Summary</h2>") < reported.html.index("<img")
    assert mine["performance"]["slowest_step"]["trace_id"] in reported.html
    slowest = reported.report.steps[0].steps[0]  # the slowest-steps table: the same slowest step
    assert (slowest.step, slowest.trace_id) == (
        mine["performance"]["slowest_step"]["step"],
        mine["performance"]["slowest_step"]["trace_id"],
    )


def test_axes_name_units_in_words(reported: Reported) -> None:
    """No axis shows a Grafana unit id ('short', 'none', 'percentunit', 's'): they are words; the phase timeline is
    drawn as one row per phase, coloured by the ranks in it."""
    labels = [ax.get_ylabel() for ax in reported.figure.axes]
    assert not {"short", "none", "percentunit", "s"} & set(labels)
    timeline = _axes(reported.figure, "Phase timeline")
    phases = {label.get_text() for label in timeline.get_yticklabels()}
    assert {"generate", "train"} <= phases
    assert "ranks in the phase" in labels  # its colour bar
    split = _axes(reported.figure, "Time split by phase")
    assert split.get_ylabel() == "share of the ranks' time (%)"
    assert split.yaxis.get_major_formatter()(0.25, 0) == "25%"


def test_each_panel_is_scaled_to_its_data_not_to_a_threshold(reported: Reported) -> None:
    """'Time in the open phases' is scaled to the time in the phases (well under a second a step), not to their
    600 s stuck thresholds, which the legend states as above the scale."""
    (data,) = [d for d in reported.report.plots if d.panel.title.startswith("Time in the open phases")]
    open_s = max(v for s in data.series if not s.reference for _, v in s.finite())
    threshold = min(v for s in data.series if s.reference for _, v in s.finite())
    assert open_s < threshold / 10
    ax = _axes(reported.figure, data.panel.title)
    high = ax.get_ylim()[1]
    assert open_s <= high < threshold
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert any("threshold" in text and "above this scale" in text for text in legend), legend


def test_nested_phases_are_shares_of_their_parent(reported: Reported) -> None:
    """allreduce runs inside train (a child span): the summary and the demo's table give it as a share of train's
    time, the top-level phases' shares add up to at most the ranks' time, and the time split draws it inside
    train's band, labelled with that share."""
    report = reported.report
    assert report.phase_parents == {
        "generate": None,
        "score": None,
        "train": None,
        "allreduce": "train",
        "sync": None,
        "wait_data": None,
    }
    for split in (report.summary["performance"]["split"], reported.summary["performance"]["split"]):
        assert split["allreduce"]["share"] == pytest.approx(split["allreduce"]["seconds"] / split["train"]["seconds"])
        # the ranks' time is read off Prometheus's sample times, up to an export interval shorter than the loop's
        assert 0.5 < sum(stats["share"] for stats in split.values() if stats["parent"] is None) <= 1.1
        assert list(split).index("allreduce") == list(split).index("train") + 1
    assert "↳ allreduce" in reported.summary_md and "of train |" in reported.summary_md
    ax = _axes(reported.figure, "Time split by phase")
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert any(text.startswith("allreduce (inside train: ") for text in legend), legend
    share = report.summary["performance"]["split"]["allreduce"]["share"]
    assert math.isfinite(share) and 0 < share < 1


def test_a_loop_without_phases_gets_its_report(shared_stack: Any) -> None:
    """The README's quick-start loop (steps, rewards, a sample; no ``phase()``): its slowest step's trace holds only
    the ranks' steps, and the report still renders, the timeline saying no phases were recorded (it raised in
    matplotlib's legend before: found on a newcomer's first run)."""
    import time
    import uuid

    import torch
    from otel_rl_ops.report.fetch import ReportError
    from otel_rl_ops.report.render import build_report, figure

    import otel_rl
    from tests.pipeline.harness import eventually

    run_id = f"no-phases-{uuid.uuid4().hex[:8]}"
    telemetry = otel_rl.Telemetry(
        otel_rl.TelemetryConfig(run_id=run_id, endpoint=shared_stack.otlp_grpc_endpoint, export_interval_s=0.5)
    )
    for step in range(3):
        telemetry.step(step)
        telemetry.record_rewards(torch.rand(8))
        telemetry.record_sample(otel_rl.EpisodeSample(reward=1.0, prompt="2+2=", response="4", episode_id=f"e{step}"))
        time.sleep(0.2)
    telemetry.shutdown()

    def timeline_titles() -> list[str]:
        try:
            report = build_report(
                prometheus_url=shared_stack.prometheus_url,
                victorialogs_url=shared_stack.victorialogs_url,
                jaeger_url=shared_stack.jaeger_url,
                run_id=run_id,
                scrape_interval_s=1.0,
                lookback_s=600,
            )
        except ReportError:  # the run's first points are not in Prometheus yet
            return []
        return [title for title in _titles(figure(report)) if re.match(r"Slowest step \d", title)]

    (title,) = eventually(timeline_titles, what="the report's timeline of the run's slowest step", timeout_s=60)
    assert "no phases recorded" in title, title
