"""``otel-rl status``: a run's answer to "how are you?" in one screen for a person, or one JSON object for a script or
an agent (prime-rl's monitor-run skill is the model: what a watcher needs to decide whether to act).

Everything is read live from the stores with the dashboards' own queries (:mod:`otel_rl.ops.promql`): the step and
how long ago it changed, the ranks reporting, the total reward and the ground truth with their 10-minute trends,
staleness p99, the slowest phase, the alerts firing and pending (the audit's included) with their runbooks, the cost so
far, and the last top and bottom samples. A value the run does not record is ``null`` (JSON) or ``-`` (text).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from otel_rl.ops import promql
from otel_rl.ops.alerts.client import Alertmanager, run_alerts
from otel_rl.ops.query import Prometheus, QueryError
from otel_rl.ops.report.summary import Sources, samples

WINDOW_S = 600
WINDOW = f"{WINDOW_S // 60}m"
"""The window of every mean and trend: a trend compares it with the window before."""
_SAMPLES = 2
"""Top and bottom samples shown."""
_TEXT_CHARS = 80


def latest_run(prometheus: Prometheus) -> str:
    """The run whose step reached Prometheus last.

    Raises:
        ValueError: when Prometheus holds no run.
    """
    runs = prometheus.by_label('max by (rl_run_id) (timestamp(rl_step{rl_rank=""}))', "rl_run_id")
    if not runs:
        raise ValueError(f"no run in Prometheus at {prometheus.url}: give --run-id, or start one")
    return max(runs, key=lambda run: runs[run])


def _trend(prometheus: Prometheus, query: str, now: float) -> dict[str, float | None]:
    """``query`` (over :data:`WINDOW`) now and one window earlier, and the change."""
    current, before = prometheus.value(query, now), prometheus.value(query, now - WINDOW_S)
    change = None if current is None or before is None else current - before
    return {"mean": current, "before": before, "change": change}


def _alerts(sources: Sources, alertmanager: Alertmanager) -> list[dict[str, Any]]:
    """The run's firing and pending alerts (:func:`otel_rl.ops.alerts.client.run_alerts`: silenced and inhibited ones
    too), firing first, each with its severity, summary and runbook (Alertmanager's annotations, the rule
    evaluator's while pending)."""
    return [
        {
            "name": alert.name,
            "state": alert.state,
            "severity": alert.labels.get("severity"),
            "audit": "audit" in alert.labels,
            "since": alert.since,
            "summary": alert.summary or None,
            "runbook_url": alert.annotations.get("runbook_url"),
        }
        for alert in run_alerts(sources.prometheus, alertmanager, sources.run_id)
    ]


def _sample(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "step": record.get("rl.step"),
        "reward": record.get("rl.reward"),
        "prompt": record.get("prompt"),
        "response": record.get("_msg"),
        "episode_id": record.get("rl.episode.id"),
    }


def status(sources: Sources, alertmanager: Alertmanager, *, now: float | None = None) -> dict[str, Any]:
    """The run's status at ``now`` (default: the current time) as one JSON-ready dict; its alerts as Prometheus and
    ``alertmanager`` hold them now."""
    at = time.time() if now is None else now
    prometheus = sources.prometheus
    run = sources.selector(rl_rank="")

    def value(query: str) -> float | None:
        return prometheus.value(query, at)

    truth = prometheus.by_label(f"max by (rl_reward_fn) (rl_reward_ground_truth{{{run}}}) == 1", "rl_reward_fn")
    ground_truth = next(iter(truth), None)
    phases = prometheus.query(promql.phase_mean(run, window=WINDOW), at)
    slowest = max(phases, key=lambda item: float(item["value"][1]), default=None)
    return {
        "run_id": sources.run_id,
        "at": at,
        "step": {
            "value": value(f"max(rl_step{{{run}}})"),
            "unchanged_s": value(promql.seconds_since_step_changed(run)),
        },
        "ranks": {
            "up": value(f"sum(rl_ranks_up{{{run}}})"),
            "expected": value(f"max(rl_ranks_expected{{{run}}})"),
            "finished": value(f"min(rl_run_finished{{{run}}})"),
        },
        "reward": _trend(
            prometheus, promql.mean("rl_reward", sources.selector(rl_rank="", rl_reward_fn="total"), window=WINDOW), at
        ),
        "ground_truth": None
        if ground_truth is None
        else {
            "fn": ground_truth,
            **_trend(
                prometheus,
                promql.mean("rl_reward", sources.selector(rl_rank="", rl_reward_fn=ground_truth), window=WINDOW),
                at,
            ),
        },
        "staleness_p99": value(promql.quantile(0.99, "rl_staleness", run, window=WINDOW, integers=True)),
        "slowest_phase": None
        if slowest is None
        else {"name": slowest["metric"].get("rl_phase_name"), "mean_s": float(slowest["value"][1])},
        "alerts": _alerts(sources, alertmanager),
        "cost": {
            "gpu_hours": value(promql.gpu_hours(run)),
            "so_far": value(promql.cost(run)),
            "per_step": value(promql.cost_per(run, "step")),
            "per_million_tokens": value(promql.cost_per(run, "million_tokens")),
            "per_solved_group": value(promql.cost_per(run, "solved_group")),
        },
        "samples": {
            selection: [_sample(r) for r in samples(sources, selection, _SAMPLES)] for selection in ("top", "bottom")
        },
    }


def _num(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _signed(value: Any) -> str:
    return "" if value is None else f" ({value:+.3g} in {WINDOW})"


def _short(text: Any) -> str:
    line = " ".join(str(text or "").split())
    return line if len(line) <= _TEXT_CHARS else line[: _TEXT_CHARS - 1] + "…"


def render(found: dict[str, Any]) -> str:
    """``found`` (from :func:`status`) as the lines of one screen."""
    step, ranks, cost = found["step"], found["ranks"], found["cost"]
    truth = found["ground_truth"]
    phase = found["slowest_phase"]
    lines = [
        f"run {found['run_id']}",
        f"  step          {_num(step['value'], 12)} (unchanged for {_num(step['unchanged_s'])} s)",
        f"  ranks         {_num(ranks['up'])} of {_num(ranks['expected'])} reporting"
        + (", finished cleanly" if ranks["finished"] == 1 else ""),
        f"  reward        {_num(found['reward']['mean'])}{_signed(found['reward']['change'])}",
        "  ground truth  "
        + (
            "- (no ground-truth function recorded)"
            if truth is None
            else f"{truth['fn']} {_num(truth['mean'])}{_signed(truth['change'])}"
        ),
        f"  staleness p99 {_num(found['staleness_p99'])}",
        "  slowest phase " + ("-" if phase is None else f"{phase['name']} ({_num(phase['mean_s'])} s mean)"),
        f"  cost          {_num(cost['so_far'])} ({_num(cost['gpu_hours'])} GPU-hours; "
        f"per step {_num(cost['per_step'])}, per M tokens {_num(cost['per_million_tokens'])}, "
        f"per solved group {_num(cost['per_solved_group'])})",
        f"  alerts        {len(found['alerts']) or 'none'}",
    ]
    for alert in found["alerts"]:
        kind = "audit" if alert["audit"] else alert["severity"]
        lines.append(f"    {alert['state']:<8} {alert['name']} [{kind}] {alert['summary'] or ''}")
        lines.append(f"             {alert['runbook_url'] or ''}")
    for selection in ("top", "bottom"):
        lines.append(f"  {selection} samples")
        for sample in found["samples"][selection] or [{}]:
            if not sample:
                lines.append("    -")
                continue
            text = f"{_short(sample['prompt'])} -> {_short(sample['response'])}"
            lines.append(f"    step {sample['step']} reward {sample['reward']}: {text}")
    return "\n".join(lines)


def _status(args: argparse.Namespace) -> int:
    from otel_rl.ops.report.cli import stores
    from otel_rl.ops.stack.config import StackConfig
    from otel_rl.ops.stack.services import Stack

    found, _ = stores(
        prometheus_url=args.prometheus_url,
        victorialogs_url=args.victorialogs_url,
        jaeger_url=None,
        state_dir=args.state_dir,
    )
    prometheus_url, logs_url = found.prometheus_url.rstrip("/"), found.victorialogs_url.rstrip("/")
    config = StackConfig(**({} if args.state_dir is None else {"state_dir": args.state_dir}))
    alertmanager_url = (
        args.alertmanager_url or Stack.attach(config.resolved_state_dir(), config=config).alertmanager_url
    )
    try:
        run_id = args.run_id or latest_run(Prometheus(prometheus_url))
        result = status(Sources(prometheus_url, logs_url, run_id), Alertmanager(alertmanager_url.rstrip("/")))
    except QueryError as error:
        raise ValueError(str(error)) from error
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


def add_status_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``otel-rl status``."""
    parser = subparsers.add_parser(
        "status",
        help="a run's status in one screen, or one JSON object (--json)",
        description="Step and its age, ranks, reward and ground-truth trends, staleness p99, the slowest phase, firing "
        "and pending alerts with their runbooks, cost so far and the last top and bottom samples of one run (default: "
        "the run that reported last). The stores default to the running local stack's (otel-rl stack up).",
    )
    stack = "default: the running stack's (see --state-dir)"
    parser.add_argument("--run-id", default=None, help="rl.run.id of the run (default: the run that reported last)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the screen")
    parser.add_argument("--prometheus-url", default=None, help=f"e.g. http://127.0.0.1:9090 ({stack})")
    parser.add_argument("--victorialogs-url", default=None, help=f"e.g. http://127.0.0.1:9428 ({stack})")
    parser.add_argument("--alertmanager-url", default=None, help=f"e.g. http://127.0.0.1:9093 ({stack})")
    parser.add_argument("--state-dir", type=Path, default=None, help="the running stack (default: $OTEL_RL_HOME/stack)")
    parser.set_defaults(handler=_status)
