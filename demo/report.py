"""The demo's printed summary: plain text tables of what Prometheus and VictoriaLogs hold for the run."""

from __future__ import annotations

from typing import Any


def _number(value: Any) -> str:
    """A count as an integer (Prometheus answers floats), anything else with three decimals."""
    if value is None:
        return "-"
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def format_summary(summary: dict[str, Any]) -> str:
    """Markdown: reward early vs late, per reward function, staleness, health, where the time went (the time split,
    the slowest phase, tokens and MFU, the slowest step's trace), the cost, the alerts raised for the run, and the top
    and bottom samples."""
    reward = summary["reward"]
    lines = [
        f"# otel-rl demo run {summary['run_id']}",
        "",
        "## Reward (from Prometheus, ranks merged by the collector)",
        "",
        "Percentiles from the histograms (native, else classic buckets), clamped to the exact min and max.",
        "",
        "| window | rollouts | mean | p50 | p90 |",
        "|---|---|---|---|---|",
    ]
    for name in ("early", "late", "overall"):
        stats = reward[name]
        lines.append(
            f"| {name} | {_number(stats['count'])} | {_number(stats['mean'])} | {_number(stats['p50'])} "
            f"| {_number(stats['p90'])} |"
        )
    lines += ["", "| reward fn | mean |", "|---|---|"]
    lines += [f"| {fn} | {_number(stats['mean'])} |" for fn, stats in reward["by_fn"].items()]
    staleness = summary["staleness"]
    lines += [
        "",
        "## Staleness (policy lag, per token, in versions)",
        "",
        f"tokens {_number(staleness['count'])}, min {_number(staleness['min'])}, p50 {_number(staleness['p50'])}, "
        f"p99 {_number(staleness['p99'])}, max {_number(staleness['max'])}",
        "",
        *_health(summary["health"]),
        "",
        *_performance(summary["performance"]),
        "",
        *_cost(summary.get("cost") or {}),
        *_alerts(summary.get("alerts") or []),
        "## Samples (from VictoriaLogs)",
        "",
        "| selection | reward | step | prompt | response | target |",
        "|---|---|---|---|---|---|",
    ]
    for selection in ("top", "bottom"):
        for sample in summary["samples"][selection]:
            lines.append(
                f"| {selection} | {sample.get('rl.reward')} | {sample.get('rl.step')} | {sample.get('prompt', '')} "
                f"| {sample.get('_msg', '')} | {sample.get('target', '')} |"
            )
    return "\n".join(lines) + "\n"


_SHOWN_LABELS = ("window", "signal", "rl_reward_fn", "rl_joint_x", "rl_phase_name")
"""The labels that tell an alert's instances apart (the rest are the run's)."""


def _alerts(alerts: list[dict[str, Any]]) -> list[str]:
    """The alerts section: every alert raised for the run, how far it got, from which step, what it measured."""
    lines = ["## Alerts raised for the run (Prometheus's ALERTS, the audit's included)", ""]
    if not alerts:
        return [*lines, "none", ""]
    lines += [
        "| alert | labels | got to | pending from step | firing from step | value | summary |",
        "|---|---|---|---|---|---|---|",
    ]
    for alert in alerts:
        labels = ", ".join(f"{key}={alert['labels'][key]}" for key in _SHOWN_LABELS if key in alert["labels"])
        lines.append(
            f"| {alert['name']} | {labels} | {alert['state']} | {_number(alert['since_step'])} "
            f"| {_number(alert['fired_step'])} | {_number(alert['value'])} | {alert['summary'] or '-'} |"
        )
    return [*lines, ""]


def _cost(cost: dict[str, Any]) -> list[str]:
    """The cost section: GPU-hours and, at the run's stated price, the total and per step, token and solved group."""
    if cost.get("gpu_hours") is None:
        return []
    return [
        "## Cost (GPU-hours x the stated price per GPU-hour)",
        "",
        f"{_number(cost['gpu_hours'])} GPU-hours, {_number(cost['total'])} in all: {_number(cost['per_step'])} per "
        f"step, {_number(cost['per_million_tokens'])} per million trained tokens, {_number(cost['per_solved_group'])} "
        "per solved prompt group",
        "",
    ]


_RANKS_TIME = "the ranks' time"


def _performance(performance: dict[str, Any]) -> list[str]:
    tokens, step = performance["tokens"], performance["slowest_step"]
    lines = [
        "## Where the time went (phase spans, every rank, merged by the collector)",
        "",
        "A nested phase (a child span of another phase) is indented under its parent, its share of the parent's time.",
        "",
        "| phase | spans | seconds | share | mean s | p99 s |",
        "|---|---|---|---|---|---|",
    ]
    depth: dict[str, int] = {}
    for phase, stats in performance["split"].items():
        parent = stats["parent"]
        depth[phase] = depth.get(parent, -1) + 1 if parent else 0
        share = f"{stats['share']:.1%} of {parent or _RANKS_TIME}"
        lines.append(
            f"| {'&nbsp;&nbsp;' * depth[phase]}{'↳ ' if parent else ''}{phase} | {_number(stats['spans'])} "
            f"| {_number(stats['seconds'])} | {share} | {_number(stats['mean'])} | {_number(stats['p99'])} |"
        )
    if performance["split"] and not performance["nesting_known"]:
        lines += ["", "(nesting unknown without Jaeger: a nested phase's share also counts in its parent's)"]
    slowest = performance["slowest_phase"]
    lines += [
        "",
        f"slowest phase: {slowest} (mean {_number(performance['split'][slowest]['mean'])} s per span)"
        if slowest
        else "slowest phase: - (no phase spans)",
        f"tokens generated {_number(tokens['generated'])}, trained {_number(tokens['trained'])} "
        f"({_number(tokens['trained_per_s'])} per second), MFU {_number(tokens['mfu'])}",
        f"slowest step: {step['step']} ({_number(step['seconds'])} s), trace {step['trace_id']}"
        if step
        else "slowest step: - (no Jaeger given)",
    ]
    return lines


def _health(health: dict[str, Any]) -> list[str]:
    ratio, groups, signs, ranks = (
        health["importance_ratio"],
        health["groups"],
        health["advantage_signs"],
        health["ranks"],
    )
    return [
        "## Rollout health (trainer vs generator, prompt groups, ranks)",
        "",
        f"importance ratio pi_train/pi_inference over {_number(ratio['tokens'])} tokens: "
        f"mean {_number(ratio['mean'])}, p50 {_number(ratio['p50'])}, p99 {_number(ratio['p99'])}, "
        f"effective sample size {_number(ratio['ess_fraction'])}",
        f"mismatch KL(pi_inference || pi_train) per token: k1 {_number(health['mismatch_kl']['k1'])}, "
        f"k3 {_number(health['mismatch_kl']['k3'])}; entropy {_number(health['entropy_mean'])} nats",
        f"prompt groups solved by none {_number(groups['none'])}, some {_number(groups['some'])}, "
        f"all {_number(groups['all'])}; zero reward variance {_number(groups['zero_variance'])}",
        f"advantages: {_number(signs['positive'])} positive, {_number(signs['negative'])} negative, "
        f"{_number(signs['zero'])} zero",
        "reward by dataset: "
        + ", ".join(f"{name} {_number(value)}" for name, value in health["reward_by_dataset"].items()),
        f"ranks reporting (peak) {_number(ranks['up'])} of {_number(ranks['expected'])}; finished cleanly: "
        f"{'yes' if ranks['finished'] == 1 else 'no'}",
    ]
