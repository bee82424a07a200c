"""``otel-rl status``: a run's answer to "how are you?" in one screen for a person, or one JSON object for a script or
an agent (prime-rl's monitor-run skill is the model: what a watcher needs to decide whether to act).

Everything is read from the stores with the dashboards' own queries (:mod:`otel_rl_ops.promql`): the step and how
long ago it changed, the ranks reporting, the total reward's mean and 10-minute trend, its p10, p50 and p90, the
ground truth's, staleness p50, p99 and max, the slowest phase, the alerts firing and pending (the audit's included)
with their runbooks, the cost so far, the run's best and worst samples, and every alert the run raised over its life
with when (for a replayed run, those the shipped rules raise over its past: ``otel-rl replay``). A value the run does
not record is ``null`` (JSON) or ``-`` (text); the screen shows numbers to 3 significant digits, the JSON as they
are.

Any run answers, of any length, live or finished. Prometheus's values are read at the run's last report (a live run's
latest flush, a finished run's last; :func:`otel_rl_ops.promql.last_report`), so a run that ended an hour ago answers
as it ended; only the step's age runs to now. The window statistics are the values recorded in the last
:data:`WINDOW_S` before that (exact increases of the cumulative counters and histograms, so a run shorter than the
window reads whole: a 30-step, 11-second first run has its quantiles). docs/dashboards.md, "``otel-rl status``",
documents every key of the JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import otel_rl_contract as contract

from otel_rl_ops import promql
from otel_rl_ops.alerts.client import Alertmanager, run_alerts
from otel_rl_ops.alerts.history import alert_history
from otel_rl_ops.query import Prometheus, QueryError, VictoriaLogs
from otel_rl_ops.report.summary import Sources, number, samples

WINDOW_S = 600
"""The window of every mean, trend and quantile, in seconds: a trend compares it with the window before."""
LOOKBACK = "15d"
"""How far back the run's last report is looked for: the stack's Prometheus retention (``prometheus_retention``)."""
_SAMPLES = 2
"""Top and bottom samples shown."""
_TEXT_CHARS = 80
_REWARD_QUANTILES = (0.1, 0.5, 0.9)
_STALENESS_QUANTILES = (0.5, 0.99)


def latest_run(prometheus: Prometheus, *, at: float | None = None) -> str:
    """The run that reported last before ``at`` (default: now), within :data:`LOOKBACK`, live or finished.

    Raises:
        ValueError: when Prometheus holds no run.
    """
    run_id = contract.label(contract.RUN_ID)
    found = prometheus.query(
        promql.last_report(promql.matchers(**{contract.label(contract.RANK): ""}), lookback=LOOKBACK, by=run_id), at
    )
    if not found:
        raise ValueError(f"no run in Prometheus at {prometheus.url} within {LOOKBACK}: give --run-id, or start one")
    return str(max(found, key=lambda item: float(item["value"][1]))["metric"][run_id])


def _trend(prometheus: Prometheus, query: str, now: float, window_s: int) -> dict[str, float | None]:
    """``query`` (over a window of ``window_s``) at ``now`` and one window earlier, and the change."""
    current, before = prometheus.value(query, now), prometheus.value(query, now - window_s)
    change = None if current is None or before is None else current - before
    return {"mean": current, "before": before, "change": change}


def _alerts(sources: Sources, alertmanager: Alertmanager) -> list[dict[str, Any]]:
    """The run's firing and pending alerts (:func:`otel_rl_ops.alerts.client.run_alerts`: silenced and inhibited ones
    too), firing first, each with its severity, summary and runbook (Alertmanager's annotations: none while
    pending)."""
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


def alerts_over_run(prometheus: Prometheus, run_id: str, at: float) -> list[dict[str, Any]]:
    """Every alert the run raised up to ``at``, when first pending, first and last firing (unix seconds;
    ``fired_at`` null: it never fired), from the rule engine's ``ALERTS`` series
    (:func:`otel_rl_ops.alerts.history.alert_history`)."""
    return [
        {
            "name": alert.name,
            "severity": alert.labels.get("severity"),
            "signal": alert.labels.get("signal"),
            "pending_at": alert.pending_at,
            "fired_at": alert.fired_at,
            "last_firing_at": alert.last_firing_at,
            "title": alert.title,
            "when": alert.when,
        }
        for alert in alert_history(prometheus, run_id, at=at)
    ]


def _render_history(history: list[dict[str, Any]]) -> list[str]:
    """The lines of the alerts-over-the-run section."""
    return [f"  alerts over the run  {len(history) or 'none'}"] + [
        f"    {alert['title']} {alert['when']}" for alert in history
    ]


def _sample(record: dict[str, Any]) -> dict[str, Any]:
    step, reward = record.get(contract.SAMPLE_STEP), record.get(contract.SAMPLE_REWARD)
    return {
        "step": None if step is None else int(step),
        "reward": None if reward is None else float(reward),
        "prompt": record.get("prompt"),
        "response": VictoriaLogs.message(record),
        "episode_id": record.get(contract.SAMPLE_EPISODE_ID),
    }


def _quantiles(
    prometheus: Prometheus,
    distribution: contract.Distribution,
    selector: str,
    qs: tuple[float, ...],
    *,
    at: float,
    window: str,
    integers: bool = False,
) -> dict[str, float | None]:
    """The ``qs`` quantiles (keys ``p10``, ``p99``, ...) of the values recorded into ``distribution`` in the
    ``window`` up to ``at`` (:func:`otel_rl_ops.promql.increase_quantile`: exact increases, so one point in the window
    suffices; rounded for ``integers``), and their maximum (``max``)."""
    found: dict[str, float | None] = {
        f"p{round(q * 100)}": prometheus.value(
            promql.increase_quantile(q, distribution, selector, window=window, integers=integers), at
        )
        for q in qs
    }
    found["max"] = prometheus.value(promql.extremes(distribution, selector, window=window)[1], at)
    return found


def status(
    sources: Sources, alertmanager: Alertmanager, *, now: float | None = None, window_s: int = WINDOW_S
) -> dict[str, Any]:
    """The run's status at ``now`` (default: the current time) as one JSON-ready dict, its Prometheus values read at
    its last report, its window statistics over ``window_s`` seconds up to then; its alerts as Prometheus and
    ``alertmanager`` hold them now."""
    at = time.time() if now is None else now
    prometheus = sources.prometheus
    rank, reward_fn = contract.label(contract.RANK), contract.label(contract.REWARD_FN)
    run = sources.selector(**{rank: ""})
    window = f"{window_s}s"
    last_report = prometheus.value(promql.last_report(run, lookback=LOOKBACK), at)
    read = at if last_report is None else min(at, last_report)

    def value(query: str) -> float | None:
        return prometheus.value(query, read)

    def gauge(aggregation: str, metric: contract.MetricName) -> float | None:
        return value(f"{aggregation}({contract.series(metric).name}{{{run}}})")

    truth = prometheus.query(
        f"max by ({reward_fn}) ({contract.series(contract.GROUND_TRUTH).name}{{{run}}}) == 1", read
    )
    ground_truth = truth[0]["metric"][reward_fn] if truth else None
    phases = prometheus.query(promql.phase_mean(run, window=window), read)
    slowest = max(phases, key=lambda item: float(item["value"][1]), default=None)
    total = sources.selector(**{rank: "", reward_fn: contract.REWARD_FN_TOTAL})
    reward = _quantiles(prometheus, contract.REWARDS, total, _REWARD_QUANTILES, at=read, window=window)
    staleness = _quantiles(
        prometheus, contract.STALENESS, run, _STALENESS_QUANTILES, at=read, window=window, integers=True
    )
    return {
        "run_id": sources.run_id,
        "at": at,
        "last_report": last_report,
        "window_s": window_s,
        "step": {
            "value": gauge("max", contract.STEP),
            "unchanged_s": prometheus.value(promql.seconds_since_step_changed(run), at),
        },
        "ranks": {
            "up": gauge("sum", contract.RANKS_UP),
            "expected": gauge("max", contract.RANKS_EXPECTED),
            "finished": gauge("min", contract.RUN_FINISHED),
        },
        "reward": {
            **_trend(
                prometheus,
                promql.mean(
                    contract.REWARDS, sources.selector(**{rank: "", reward_fn: contract.REWARD_FN_TOTAL}), window=window
                ),
                read,
                window_s,
            ),
            **{key: reward[key] for key in ("p10", "p50", "p90")},
        },
        "ground_truth": None
        if ground_truth is None
        else {
            "fn": ground_truth,
            **_trend(
                prometheus,
                promql.mean(contract.REWARDS, sources.selector(**{rank: "", reward_fn: ground_truth}), window=window),
                read,
                window_s,
            ),
        },
        "staleness_p99": staleness["p99"],
        "staleness_p50": staleness["p50"],
        "staleness_max": staleness["max"],
        "slowest_phase": None
        if slowest is None
        else {"name": slowest["metric"].get(contract.label(contract.PHASE)), "mean_s": float(slowest["value"][1])},
        "alerts": _alerts(sources, alertmanager),
        "cost": {
            "gpu_hours": value(promql.gpu_hours(run)),
            "so_far": value(promql.cost(run)),
            "per_step": value(promql.cost_per(run, "step")),
            "per_million_tokens": value(promql.cost_per(run, "million_tokens")),
            "per_solved_group": value(promql.cost_per(run, "solved_group")),
        },
        "samples": {
            "top": [_sample(r) for r in samples(sources, "top", _SAMPLES)],
            "bottom": [_sample(r) for r in samples(sources, "bottom", _SAMPLES)],
        },
        "alerts_over_run": alerts_over_run(prometheus, sources.run_id, at),
    }


def _signed(value: Any, window_s: int) -> str:
    window = f"{window_s // 60}m" if window_s % 60 == 0 else f"{window_s}s"
    return "" if value is None else f" ({'+' if value >= 0 else ''}{number(value)} in {window})"


def _short(text: Any) -> str:
    line = " ".join(str(text or "").split())
    return line if len(line) <= _TEXT_CHARS else line[: _TEXT_CHARS - 1] + "…"


def render(found: dict[str, Any]) -> str:
    """``found`` (from :func:`status`) as the lines of one screen."""
    step, ranks, cost, reward = found["step"], found["ranks"], found["cost"], found["reward"]
    truth = found["ground_truth"]
    phase = found["slowest_phase"]
    window_s = found["window_s"]
    ago = None if found["last_report"] is None else found["at"] - found["last_report"]
    lines = [
        f"run {found['run_id']}"
        + ("" if ago is None or ago < window_s else f" (last report {number(ago / 60)} min ago: as it ended)"),
        f"  step          {number(step['value'])} (unchanged for {number(step['unchanged_s'])} s)",
        f"  ranks         {number(ranks['up'])} of {number(ranks['expected'])} reporting"
        + (", finished cleanly" if ranks["finished"] == 1 else ""),
        f"  reward        {number(reward['mean'])}{_signed(reward['change'], window_s)}; "
        f"p10 {number(reward['p10'])}, p50 {number(reward['p50'])}, p90 {number(reward['p90'])}",
        "  ground truth  "
        + (
            "- (no ground-truth function recorded)"
            if truth is None
            else f"{truth['fn']} {number(truth['mean'])}{_signed(truth['change'], window_s)}"
        ),
        f"  staleness     p50 {number(found['staleness_p50'])}, p99 {number(found['staleness_p99'])}, "
        f"max {number(found['staleness_max'])}",
        "  slowest phase " + ("-" if phase is None else f"{phase['name']} ({number(phase['mean_s'])} s mean)"),
        f"  cost          {number(cost['so_far'])} ({number(cost['gpu_hours'])} GPU-hours; "
        f"per step {number(cost['per_step'])}, per M tokens {number(cost['per_million_tokens'])}, "
        f"per solved group {number(cost['per_solved_group'])})",
        f"  alerts        {len(found['alerts']) or 'none'}",
    ]
    for alert in found["alerts"]:
        kind = "audit" if alert["audit"] else alert["severity"]
        lines.append(f"    {alert['state']:<8} {alert['name']} [{kind}] {alert['summary'] or ''}")
        lines.append(f"             {alert['runbook_url'] or ''}")
    for end, label in (("top", "best samples"), ("bottom", "worst samples")):
        lines.append(f"  {label}")
        for sample in found["samples"][end] or [{}]:
            if not sample:
                lines.append("    -")
                continue
            text = f"{_short(sample['prompt'])} -> {_short(sample['response'])}"
            lines.append(f"    step {number(sample['step'])} reward {number(sample['reward'])}: {text}")
    lines += _render_history(found["alerts_over_run"])
    return "\n".join(lines)


def _status(args: argparse.Namespace) -> int:
    from otel_rl_ops.report.cli import stores
    from otel_rl_ops.stack.config import StackConfig
    from otel_rl_ops.stack.services import Stack

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
        description="Step and its age, ranks, reward and ground-truth trends, reward p10/p50/p90, staleness "
        "p50/p99/max, the slowest phase, firing and pending alerts with their runbooks, cost so far and the best and "
        "worst samples of one run (default: the run that reported last), live or finished, read at its last report. "
        "The stores default to the running local stack's (otel-rl stack up).",
    )
    stack = "default: the running stack's (see --state-dir)"
    parser.add_argument("--run-id", default=None, help="rl.run.id of the run (default: the run that reported last)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the screen")
    parser.add_argument("--prometheus-url", default=None, help=f"e.g. http://127.0.0.1:9090 ({stack})")
    parser.add_argument("--victorialogs-url", default=None, help=f"e.g. http://127.0.0.1:9428 ({stack})")
    parser.add_argument("--alertmanager-url", default=None, help=f"e.g. http://127.0.0.1:9093 ({stack})")
    parser.add_argument("--state-dir", type=Path, default=None, help="the running stack (default: $OTEL_RL_HOME/stack)")
    parser.set_defaults(handler=_status)
