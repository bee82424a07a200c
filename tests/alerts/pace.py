"""Runs shaped like real GRPO runs at three step paces, for the promtool tests ``prometheus/rules/tests/pace_*.yml``
and the false-alarm table of docs/runbooks.md ("Windows by pace").

A run is simulated rollout by rollout (:func:`simulate`) and written as the aggregated series the collector sends to
Prometheus (cumulative counters sampled every ``sample_s``, ``rl_step``, the staleness extremes present only right
after a step, as ranks hold them): prompt groups of varied difficulty, a policy whose skill grows, a format reward
learned early, responses that lengthen, entropy that decays, a mismatch KL with heavy-tailed batches, a step time
that jitters 10%. From step ``diverge`` on, a scenario run departs from the honest one (:data:`SCENARIOS`).

``python -m tests.alerts.pace write`` regenerates the committed test files: the input series from the model, and the
expectations from what promtool evaluates on them (the rules' own verdict), after checking that each scenario's
alerts fire within :data:`WITHIN` of the divergence, stay silent before it, and that the honest run raises no
windowed alert at any evaluation. ``python -m tests.alerts.pace measure`` runs honest runs of several seeds at each
pace through promtool and prints how often each alert went pending or fired (the runbooks' table).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
TESTS_DIR = ROOT / "prometheus" / "rules" / "tests"
LABELS = 'job="trainer",rl_role="trainer",rl_world_size="8"'
WINDOWED = (
    "RLRewardGaming",
    "RLLengthRewardCorrelationRising",
    "RLRewardFunctionDominates",
    "RLEntropyFalling",
    "RLMismatchKLAccelerating",
    "RLZeroVarianceShareRising",
    "RLStaleDropsBiasedByLength",
    "RLStalenessHigh",
    "RLImportanceRatioHigh",
    "RLMismatchKLHigh",
    "RLEffectiveSampleSizeLow",
    "RLEntropyCollapse",
    "RLZeroVarianceGroupsHigh",
    "RLRewardCollapse",
)
"""Every alert whose window holds steps (prometheus/generate.py)."""
STALENESS_BOUNDS = (1, 2, 4, 8, 16)
HORIZON = 400
"""Steps over which an honest run's skill, lengths and entropy move through their ranges (the runs are shorter)."""
"""The classic buckets of the staleness histogram in these runs (``le``), plus +Inf."""


@dataclass(frozen=True)
class Pace:
    """One step pace, the run shape that goes with it, and where each scenario run diverges."""

    name: str
    step_s: float
    """Mean seconds per step (each step jitters 10%)."""
    groups: int
    """Prompt groups a step."""
    group_size: int
    length: float
    """Mean response length in tokens at the start."""
    sample_s: int
    """Seconds between the points written to Prometheus (the test's input interval)."""
    eval_s: int
    """The promtool evaluation interval."""
    runs: dict[str, tuple[int, int]]
    """Per scenario run: (the step it diverges at, its steps). A divergence comes once the run has the history its
    alert compares with (the earlier windows, at the smallest window judged at this pace)."""


PACES = (
    # 0.25 s: the audit judges 15 s windows (60 steps); the health alerts' 10-minute floors and for: are longer
    # than a demo run, so no health scenario here.
    Pace(
        "demo",
        0.25,
        64,
        8,
        3.0,
        5,
        15,
        {"honest": (0, 400), "gamed": (130, 260), "paid": (250, 380), "collapse": (250, 380), "dominated": (70, 200)},
    ),
    # 27 s: 10 and 20-minute windows for N = 20 (22 and 44 steps), 5 and 10 for N = 10, 1 and 2 for N = 2.
    Pace(
        "30s",
        27.0,
        64,
        8,
        400.0,
        60,
        60,
        {
            "honest": (0, 300),
            "gamed": (100, 230),
            "paid": (100, 230),
            "collapse": (165, 295),
            "dominated": (50, 180),
            "stale": (30, 120),
        },
    ),
    # 5 minutes: 160-minute windows for N = 20 (32 steps), 80 for N = 10, 10 and 20 for N = 2.
    Pace(
        "5m",
        300.0,
        256,
        16,
        1500.0,
        240,
        300,
        {
            "honest": (0, 250),
            "gamed": (75, 205),
            "paid": (140, 270),
            "collapse": (230, 360),
            "dominated": (40, 170),
            "stale": (20, 80),
        },
    ),
)
"""The demo's 0.25 s steps (4 ranks x 16 prompts x 8), a small model's ~30 s steps, a large model's 5-minute steps
with long responses (256 prompts x 16)."""

SERIES: dict[str, tuple[str, ...]] = {
    "honest": (),
    "gamed": ("rl_reward", "rl_joint_total"),
    "paid": ("rl_reward", "rl_joint_total"),
    "collapse": ("rl_reward", "rl_entropy", "rl_groups"),
    "dominated": ("rl_reward", "rl_joint_total"),
    "stale": ("rl_staleness",),
}
"""The series each run carries besides rl_step (prefixes; the honest run: all), so that the test files stay small."""

SCENARIOS: dict[str, tuple[str, ...]] = {
    "honest": (),
    "gamed": ("RLRewardGaming",),
    "paid": ("RLLengthRewardCorrelationRising",),
    "collapse": ("RLEntropyFalling", "RLRewardCollapse"),
    "dominated": ("RLRewardFunctionDominates",),
    "stale": ("RLStalenessHigh",),
}
"""Each run and the alerts it must fire after its divergence (more may fire: the tests pin exactly which)."""

WITHIN = {"RLStalenessHigh": 40, "RLRewardCollapse": 120}
"""Steps after the divergence within which a scenario's alert must fire, where not :data:`WITHIN_DEFAULT`."""
WITHIN_DEFAULT = 120
HEALTH_FLOORED = {"RLRewardCollapse", "RLEntropyCollapse", "RLZeroVarianceGroupsHigh", "RLStalenessHigh"}
"""Health alerts whose smallest window and ``for:`` (minutes) outlast a demo-paced run: not expected there."""
"""6N for N = 20: the change fills the judged window (up to 3N steps), then holds for ``for:`` (one window)."""


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-x)))


Key = tuple[str, tuple[tuple[str, str], ...]]
"""A series of a run: its metric name and its labels besides the run's."""


class _Sums:
    """Cumulative sums of one run per series, appended after each step."""

    def __init__(self) -> None:
        self.values: dict[Key, list[float]] = {}

    def add(self, name: str, value: float, **labels: str) -> None:
        series = self.values.setdefault((name, tuple(sorted(labels.items()))), [])
        series.append((series[-1] if series else 0.0) + value)

    def signed(self, name: str, values: np.ndarray, **labels: str) -> None:
        """The exact positive and negative parts of a histogram's values (``<name>_positive_total``)."""
        self.add(f"{name}_positive_total", float(np.clip(values, 0, None).sum()), **labels)
        self.add(f"{name}_negative_total", float(np.clip(-values, 0, None).sum()), **labels)


def simulate(
    pace: Pace, scenario: str, seed: int
) -> tuple[list[float], dict[Key, list[float]], list[dict[str, float]]]:
    """Step end times (seconds), cumulative sums per series name (after each step) and each step's staleness
    extremes, of one run of ``scenario`` at ``pace``."""
    rng = np.random.default_rng(seed)
    sums = _Sums()
    ends, extremes = [], []
    clock = 0.0
    g, k = pace.groups, pace.group_size
    d, steps = pace.runs[scenario]
    for s in range(steps):
        clock += pace.step_s * float(rng.lognormal(0.0, 0.1))
        ends.append(clock)
        after = max(0, s - d + 1) if scenario != "honest" else 0
        ramp = min(1.0, after / 30)
        progress = s / HORIZON
        skill = -1.0 + 2.0 * progress
        mean_length = pace.length * (1 + 0.5 * progress)
        entropy = 0.6 * math.exp(-0.6 * progress)
        if scenario == "collapse" and after:
            skill -= 3.0 * min(1.0, after / 20)
            entropy *= max(0.85**after, 0.02)
        if scenario == "paid" and after:
            mean_length *= 1 + 1.5 * min(1.0, after / 40)
        difficulty = rng.normal(0.0, 1.5, (g, 1))
        log_length = rng.normal(math.log(mean_length), 0.4, (g, k))
        lengths = np.maximum(1.0, np.round(np.exp(log_length)))
        longer = (log_length - math.log(mean_length)) / 0.4
        correct = rng.random((g, k)) < _sigmoid(skill - difficulty + 0.15 * longer)
        well_formed = 0.6 + 0.38 * (1 - math.exp(-s / 20))
        if scenario == "collapse" and after:
            well_formed *= 1 - 0.8 * min(1.0, after / 20)  # degenerate, repetitive text: the format breaks too
        formatted = rng.random((g, k)) < well_formed
        fmt = np.where(formatted, 0.5, -0.5)
        if scenario == "gamed" and after:
            gamed = rng.random((g, k)) < 0.9 * ramp
            fmt = np.where(gamed, 2.0, fmt)
            correct &= ~gamed
        if scenario == "paid" and after:
            fmt = fmt + 0.6 * lengths / pace.length
        if scenario == "dominated" and after:
            fmt = rng.normal(0.5, 1.5, (g, k))
        correctness = correct.astype(float)
        total = correctness + fmt
        for fn, values in (("total", total), ("correctness", correctness), ("format", fmt)):
            sums.signed("rl_reward", values, rl_reward_fn=fn)
            sums.add("rl_reward_squares_total", float((values * values).sum()), rl_reward_fn=fn)
            sums.add("rl_reward_count", float(values.size), rl_reward_fn=fn)
        for x_name, xs in (("response_length", lengths), ("reward.format", fmt)):
            x, y = xs.ravel(), total.ravel()
            joint = {
                "n": float(x.size),
                "x.positive": float(np.clip(x, 0, None).sum()),
                "x.negative": float(np.clip(-x, 0, None).sum()),
                "y.positive": float(np.clip(y, 0, None).sum()),
                "y.negative": float(np.clip(-y, 0, None).sum()),
                "xx": float((x * x).sum()),
                "yy": float((y * y).sum()),
                "xy.positive": float(np.clip(x * y, 0, None).sum()),
                "xy.negative": float(np.clip(-x * y, 0, None).sum()),
            }
            for moment, value in joint.items():
                sums.add("rl_joint_total", value, rl_joint_x=x_name, rl_joint_moment=moment)
        solved = correct.sum(axis=1)
        for outcome, count in (("none", solved == 0), ("some", (solved > 0) & (solved < k)), ("all", solved == k)):
            sums.add("rl_groups_total", float(count.sum()), rl_group_outcome=outcome)
        sums.add("rl_groups_zero_variance_total", float((total.max(axis=1) == total.min(axis=1)).sum()))
        tokens = float(lengths.sum())
        sums.add("rl_response_length_positive_total", tokens)
        sums.add("rl_response_length_count", float(lengths.size))
        step_entropy = entropy * float(rng.lognormal(0.0, 0.05))
        sums.signed("rl_entropy", np.array([step_entropy * tokens]))
        sums.add("rl_entropy_count", tokens)
        kl = 1e-3 * float(rng.lognormal(0.0, 0.25)) * (3.0 if rng.random() < 0.02 else 1.0)
        sums.signed("rl_mismatch_kl", np.array([kl * tokens]), rl_kl_estimator="k3")
        sums.add("rl_mismatch_kl_count", tokens, rl_kl_estimator="k3")
        if scenario == "stale" and after:
            lags = 10 + rng.binomial(4, 0.5, int(min(tokens, 200_000)))
        else:
            lags = rng.poisson(1.5, int(min(tokens, 200_000)))
        scale = tokens / lags.size
        below = 0.0
        for bound in STALENESS_BOUNDS:
            below = float((lags <= bound).sum()) * scale
            sums.add("rl_staleness_bucket", below, le=str(bound))
        sums.add("rl_staleness_bucket", tokens, le="+Inf")
        extremes.append({"max": float(lags.max()), "min": float(lags.min())})
    return ends, sums.values, extremes


def _series_name(run_id: str, key: Key) -> str:
    """The Prometheus series of ``key`` for run ``run_id``."""
    name, labels = key
    extra = "".join(f',{label}="{value}"' for label, value in labels)
    return f'{name}{{{LABELS},rl_run_id="{run_id}"{extra}}}'


def _encode(values: Iterable[float | None]) -> str:
    """promtool's notation for a series: runs of one value as ``v+0xN``, a missing point as ``_``."""
    out: list[str] = []
    items = list(values)
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[i]:
            j += 1
        value = items[i]
        text = "_" if value is None else f"{value:.10g}"
        if j > i:
            out.append(f"{text}x{j - i}" if value is None else f"{text}+0x{j - i}")
        else:
            out.append(text)
        i = j + 1
    return " ".join(out)


def input_series(pace: Pace, run_id: str, scenario: str, seed: int) -> list[tuple[str, str]]:
    """The run's series sampled every ``pace.sample_s`` seconds from 0 to its last step's end: (series, values)."""
    ends, sums, extremes = simulate(pace, scenario, seed)
    samples = math.ceil(ends[-1] / pace.sample_s) + 1
    done = [int(np.searchsorted(ends, t * pace.sample_s, side="right")) for t in range(samples)]
    keep = SERIES[scenario]
    out = [(f'rl_step{{{LABELS},rl_run_id="{run_id}"}}', _encode(float(n) for n in done))]
    out.append((f'rl_run_finished{{{LABELS},rl_run_id="{run_id}"}}', f"0+0x{samples - 2} 1"))
    truth = f'rl_reward_ground_truth{{{LABELS},rl_run_id="{run_id}",rl_reward_fn="correctness"}}'
    if not keep or "rl_reward" in keep:
        out.append((truth, f"1+0x{samples - 1}"))
    for key in sorted(sums):
        if keep and not key[0].startswith(keep):
            continue
        series = sums[key]
        out.append((_series_name(run_id, key), _encode(series[n - 1] if n else 0.0 for n in done)))
    for which in ("max", "min"):
        if keep and "rl_staleness" not in keep:
            continue
        points: list[float | None] = []
        for t in range(samples):
            now, before = done[t], done[t - 1] if t else 0
            points.append(max(e[which] for e in extremes[before:now]) if which == "max" and now > before else None)
            if which == "min" and now > before:
                points[-1] = min(e["min"] for e in extremes[before:now])
        out.append((f'rl_staleness_{which}{{{LABELS},rl_run_id="{run_id}"}}', _encode(points)))
    return out


def step_time(pace: Pace, step: int, seed: int, scenario: str) -> float:
    """When step ``step`` of the run ended (seconds from its start)."""
    ends, _, _ = simulate(pace, scenario, seed)
    return ends[step]


PROMTOOL = Path.home() / ".cache" / "otel-rl" / "bin" / "promtool"
"""promtool as ``otel-rl stack install --tools`` installs it (the tests use their fixture's)."""
_HEADER = """\
# GENERATED by `python -m tests.alerts.pace write` (tests/alerts/pace.py): runs shaped like real GRPO runs at
# {what},
# simulated rollout by rollout, and what the shipped rules say of them. Do not edit; regenerate after changing the
# rules or the model (tests/alerts/test_pace.py checks the input series against the model).
#
{runs}
# Each scenario run is the honest one until its divergence step (the comment above its series). The tests below pin,
# per scenario, that its alerts stay silent at the step before the divergence and fire within {within} steps of it
# (at the first evaluation they fire; exactly which windows and runs fire then), and that the honest run raises no
# alert at all, pending or firing, at any evaluation.
"""


def _duration(seconds: float) -> str:
    return f"{round(seconds)}s"


GROUPS = (("honest", "gamed", "paid"), ("collapse", "dominated", "stale"))
"""The runs evaluated together (one promtool test group each): promtool caps a query at 10,000 samples, which
rl:step_unchanged_seconds's 6-hour subquery exceeds with more than three runs."""


def _runs(pace: Pace, seed: int, names: Iterable[str]) -> dict[str, list[tuple[str, str]]]:
    return {scenario: input_series(pace, scenario, scenario, seed) for scenario in names if scenario in pace.runs}


def _eval_times(pace: Pace, seed: int, names: Iterable[str]) -> list[int]:
    longest = max(simulate(pace, scenario, seed)[0][-1] for scenario in names if scenario in pace.runs)
    return list(range(0, int(longest) + pace.eval_s, pace.eval_s))


def _group(pace: Pace, series: dict[str, list[tuple[str, str]]], tests: str) -> str:
    """One promtool test group: the runs' input series, then ``tests`` (its alert and expression tests)."""
    lines = [
        f"  - interval: {pace.sample_s}s",
        "    external_labels:",
        "      otel_rl_grafana_url: https://grafana.example",
        "      otel_rl_runbook_url: https://docs.example/otel-rl/runbooks.md",
        "    input_series:",
    ]
    for scenario, items in series.items():
        if scenario in pace.runs:
            diverge, steps = pace.runs[scenario]
            lines.append(f"      # {scenario}: {steps} steps" + (f", diverging at step {diverge}" if diverge else ""))
        for name, values in items:
            lines += [f"      - series: '{name}'", f"        values: '{values}'"]
    return "\n".join(lines) + "\n" + tests


def _file(pace: Pace, groups: Iterable[str], header: str = "") -> str:
    head = [header + "rule_files:", "  - ../otel_rl.yml", "  - ../otel_rl_windows.yml"]
    head += [f"evaluation_interval: {pace.eval_s}s", "group_eval_order:"]
    head += [f"  - {group}" for group in GROUP_ORDER]
    head.append("tests:")
    return "\n".join(head) + "\n" + "".join(groups)


GROUP_ORDER = ("otel_rl_recording", "otel_rl_alerts", "otel_rl_windows")
"""The rule groups in the order promtool evaluates them here: Prometheus runs groups concurrently, so an alert may
read another group's recording of this evaluation or of the one before; a fixed order makes the expectations exact."""
_UNIT_S = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
"""Seconds of each unit of the durations promtool prints (``1d2h56m44s``)."""
Alert = tuple[str, str, str, tuple[tuple[str, str], ...]]
"""(run, alert name, state, its other labels) of one ALERTS series."""


def probe(
    pace: Pace, series: dict[str, list[tuple[str, str]]], times: list[int], promtool: Path = PROMTOOL
) -> dict[int, set[Alert]]:
    """What the shipped rules say of ``series`` (one group): at each evaluation time, every alert of ALERTS, pending
    or firing (promtool evaluates the rules over the whole input once; each check reads ALERTS at its time)."""
    checks = "".join(
        f"      - expr: ALERTS\n        eval_time: {_duration(t)}\n        exp_samples: []\n" for t in times
    )
    text = _file(pace, [_group(pace, series, "    promql_expr_test:\n" + checks)])
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "probe.yml"
        path.write_text(text.replace("../otel_rl", str(ROOT / "prometheus" / "rules" / "otel_rl")), encoding="utf-8")
        done = subprocess.run(
            [promtool, "test", "rules", path.name],
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
    out = done.stdout
    if " err: " in out or (done.returncode, "FAILED" in out) not in ((0, False), (1, True)):
        raise AssertionError(f"promtool could not evaluate the probe (exit {done.returncode}): {out[:2000]}")
    found: dict[int, set[Alert]] = {t: set() for t in times}
    for block in re.finditer(r'expr: "ALERTS", time: (\S+),\n\s+exp: nil\n\s+got: (.*)\n', out):
        at = sum(int(n) * _UNIT_S[u] for n, u in re.findall(r"(\d+)([wdhms])", block.group(1)))
        for labels_text in re.findall(r"\{([^}]*)\} 1E\+00", block.group(2)):
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels_text))
            run, name, state = labels.pop("rl_run_id"), labels.pop("alertname"), labels.pop("alertstate")
            labels.pop("__name__")
            found[at].add((run, name, state, tuple(sorted(labels.items()))))
    return found


def _go_string(text: str) -> str:
    return str(json.loads(f'"{text}"'))


def firing(
    pace: Pace, series: dict[str, list[tuple[str, str]]], checks: list[tuple[str, int]], promtool: Path = PROMTOOL
) -> dict[tuple[str, int], list[tuple[dict[str, str], dict[str, str]]]]:
    """The firing alerts of each (alert name, time) of ``checks`` with their labels and annotations, as promtool's
    ``alert_rule_test`` sees them."""
    tests = "".join(
        f"      - eval_time: {_duration(at)}\n        alertname: {name}\n        exp_alerts: []\n"
        for name, at in checks
    )
    text = _file(pace, [_group(pace, series, "    alert_rule_test:\n" + tests)])
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "probe.yml"
        path.write_text(text.replace("../otel_rl", str(ROOT / "prometheus" / "rules" / "otel_rl")), encoding="utf-8")
        out = subprocess.run(
            [promtool, "test", "rules", path.name],
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        ).stdout
    found: dict[tuple[str, int], list[tuple[dict[str, str], dict[str, str]]]] = {check: [] for check in checks}
    pair = r'(\w+)="((?:[^"\\]|\\.)*)"'
    for block in re.finditer(r"alertname: (\w+), time: (\S+), \n\s+exp:\[\s*\], \n\s+got:\[(.*?)\n\s+\]\n", out, re.S):
        at = sum(int(n) * _UNIT_S[u] for n, u in re.findall(r"(\d+)([wdhms])", block.group(2)))
        lines = block.group(3).split("\n")
        for n, line in enumerate(lines):
            if line.strip().startswith("Labels:{"):
                labels = {k: _go_string(v) for k, v in re.findall(pair, line)}
                annotations = {k: _go_string(v) for k, v in re.findall(r"(?:\{|, )" + pair, lines[n + 1])}
                labels.pop("alertname")
                found[(block.group(1), at)].append((labels, annotations))
    return found


def _step_at(ends: list[float], at: float) -> int:
    """The step a run was in at ``at`` (steps finished by then)."""
    return int(np.searchsorted(ends, at, side="right"))


def write(pace: Pace, seed: int = 1, promtool: Path = PROMTOOL) -> tuple[str, dict[str, dict[str, int]]]:
    """The test file of ``pace`` and, per scenario and alert, the steps after the divergence at which it first went
    pending and fired (checks the promises of :data:`SCENARIOS` and :data:`WITHIN` on the way)."""
    groups: list[str] = []
    lags: dict[str, dict[str, int]] = {}
    for names in GROUPS:
        series = _runs(pace, seed, names)
        times = _eval_times(pace, seed, names)
        timeline = probe(pace, series, times, promtool)
        honest = sorted((t, a) for t, items in timeline.items() for a in items if a[0] == "honest")
        assert not honest, f"{pace.name}: the honest run raised {honest[:5]}"
        text = ["    alert_rule_test:"]
        checks: list[tuple[str, str, int, str]] = []
        for scenario in series:
            if not SCENARIOS[scenario]:
                continue
            diverge, _ = pace.runs[scenario]
            ends = simulate(pace, scenario, seed)[0]
            before = [t for t in times if t <= ends[diverge - 1]][-1]
            lags[scenario] = {}
            for alert in SCENARIOS[scenario]:
                mine = {t: {a for a in items if a[0] == scenario and a[1] == alert} for t, items in timeline.items()}
                assert not any(mine[t] for t in times if t <= before), f"{pace.name}/{scenario}: {alert} too early"
                fired = next((t for t in times if any(a[2] == "firing" for a in mine[t])), None)
                if fired is None and alert in HEALTH_FLOORED and pace.name == "demo":
                    continue
                assert fired is not None, f"{pace.name}/{scenario}: {alert} never fired"
                pending = next(t for t in times if mine[t])
                lag = _step_at(ends, fired) - diverge
                assert lag <= WITHIN.get(alert, WITHIN_DEFAULT), f"{pace.name}/{scenario}: {alert} {lag} steps late"
                lags[scenario][alert] = _step_at(ends, pending) - diverge
                lags[scenario][f"{alert} firing"] = lag
                checks += [(scenario, alert, before, "the step before its divergence")]
                checks += [(scenario, alert, fired, f"first firing, {lag} steps after the divergence")]
        got = firing(pace, series, [(alert, at) for _, alert, at, _ in checks], promtool)
        for scenario, alert, at, what in checks:
            text += [
                f"      # {scenario}: {what}",
                f"      - eval_time: {_duration(at)}",
                f"        alertname: {alert}",
            ]
            ordered = sorted(got[(alert, at)], key=lambda item: sorted(item[0].items()))
            assert {item[0].get("rl_run_id") for item in ordered} >= ({scenario} if "firing" in what else set())
            if not ordered:
                text.append("        exp_alerts: []")
                continue
            text.append("        exp_alerts:")
            for labels, notes in ordered:
                text.append("          - exp_labels:")
                text += [f"              {key}: {json.dumps(value)}" for key, value in sorted(labels.items())]
                text.append("            exp_annotations:")
                text += [f"              {key}: {json.dumps(value)}" for key, value in sorted(notes.items())]
        if "honest" in series:
            text += ["    promql_expr_test:", "      # The honest run: no alert, pending or firing, at any evaluation."]
            for t in times:
                text += ['      - expr: ALERTS{rl_run_id="honest"}', f"        eval_time: {_duration(t)}"]
                text.append("        exp_samples: []")
        groups.append(_group(pace, series, "\n".join(text) + "\n"))
    header = header_text(pace)
    return _file(pace, groups, header), lags


def header_text(pace: Pace) -> str:
    """The comment that opens the test file of ``pace``."""
    runs = ", ".join(f"{scenario} {steps} steps" for scenario, (_, steps) in pace.runs.items())
    described = (
        f"Runs ({pace.groups} prompt groups of {pace.group_size} a step, responses ~{pace.length:g} tokens at first): "
        f"{runs}."
    )
    return _HEADER.format(
        what=f"{pace.step_s:g} s a step" + (" (the demo's)" if pace.name == "demo" else ""),
        runs="\n".join(f"# {line}" for line in textwrap.wrap(described, 116)),
        within=WITHIN_DEFAULT,
    )


def measure(pace: Pace, seeds: Iterable[int], promtool: Path = PROMTOOL) -> dict[str, dict[str, int]]:
    """Honest runs of each seed at ``pace`` through the rules: per alert (and window), on how many runs it went
    pending, on how many it fired, and at how many evaluations it fired in all."""
    seeds = list(seeds)
    went: dict[str, dict[str, set[str]]] = {}
    firing: dict[str, int] = {}
    for first in range(0, len(seeds), 3):
        chunk = seeds[first : first + 3]
        series = {f"honest-{seed}": input_series(pace, f"honest-{seed}", "honest", seed) for seed in chunk}
        longest = max(simulate(pace, "honest", seed)[0][-1] for seed in chunk)
        timeline = probe(pace, series, list(range(0, int(longest) + pace.eval_s, pace.eval_s)), promtool)
        for items in timeline.values():
            for run, name, state, labels in items:
                key = f"{name} {dict(labels).get('window', '')}".strip()
                went.setdefault(key, {"pending": set(), "firing": set()})[state].add(run)
                firing[key] = firing.get(key, 0) + (state == "firing")
    return {
        key: {
            "runs": len(seeds),
            "pending_runs": len(states["pending"] | states["firing"]),
            "firing_runs": len(states["firing"]),
            "firing_evaluations": firing[key],
        }
        for key, states in sorted(went.items())
    }


def main(argv: list[str]) -> int:
    """``write``: regenerate prometheus/rules/tests/pace_*.yml; ``measure [seeds]``: the false-alarm counts."""
    command = argv[0] if argv else "write"
    if command == "write":
        for pace in PACES:
            text, lags = write(pace)
            (TESTS_DIR / f"pace_{pace.name}.yml").write_text(text, encoding="utf-8")
            print(pace.name, json.dumps(lags))
        return 0
    if command == "measure":
        seeds = range(1, 1 + (int(argv[1]) if len(argv) > 1 else 10))
        for pace in PACES:
            print(pace.name, json.dumps(measure(pace, seeds)))
        return 0
    raise SystemExit(f"unknown command {command!r}: write or measure")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
