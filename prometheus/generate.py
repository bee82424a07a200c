"""The rules whose windows hold steps, as code: ``python prometheus/generate.py`` writes
``prometheus/rules/otel_rl_windows.yml`` (the health alerts whose windows hold steps, and the audit).

An RL step takes 0.3 seconds in the demo and 1 to 10 minutes in a GRPO run of a large model, so a window of fixed
wall-clock length holds thousands of steps in one run and one in another. These rules judge windows that hold a number
of steps instead (:data:`RULES`: the number per rule and why). PromQL's ranges and offsets are literals (a duration
cannot come from a series: prometheus/prometheus#8855 is open, and the experimental duration expressions are
"static arithmetic" that never touches the TSDB, #12318), so, as Sloth and Pyrra generate one recording rule per
window of an SLO, every statistic is recorded for each window of the ladder :data:`PRESETS`, and every alert has
one rule per window, gated per run: a window is judged while it holds between N and 3N of the run's steps (its
smallest allowed window, the rule's floor, from N on), counted from ``rl_step`` (or, where the run states its pace,
``step_seconds``, from that). ``for:`` scales the same way. The ladder doubles (once x2.5), so at any pace one or two
windows hold N to 3N steps, and one of them stays judged while the pace drifts by 22% either way (9% around the
2m-5m step): a jittery pace does not flap between windows, which would restart ``for:``.

``tests/dashboards/test_static.py`` checks that the committed files equal this script's output: edit the code and
rerun it, never the YAML by hand. ``promtool check rules`` and the promtool tests in ``prometheus/rules/tests/``
(``pace_*.yml``: the same runs at three step paces) check what it writes.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from otel_rl_contract import rules

RULES_DIR = Path(__file__).resolve().parent / "rules"
WINDOWS_FILE = "otel_rl_windows.yml"

PRESETS = rules.WINDOWS
"""The windows every statistic is recorded over (``otel_rl_contract.rules.WINDOWS``)."""
BAND = 3
"""A window above a rule's floor is judged while it holds at least N and fewer than ``BAND`` x N steps."""
RUN = "job, rl_run_id, rl_role"
"""The labels of one run's aggregated series (every rule's grouping)."""
_UNITS = (("h", 3600), ("m", 60), ("s", 1))


def seconds(duration: str) -> int:
    """Seconds of a duration as PromQL writes it (``"640m"`` -> 38400, ``"1h20m"`` -> 4800).

    Raises:
        ValueError: when ``duration`` is not such a duration.
    """
    parts = re.findall(r"(\d+)([hms])", duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f'a duration must be like "15s", "10m" or "1h20m", got {duration!r}')
    return sum(int(n) * dict(_UNITS)[u] for n, u in parts)


def duration(total: int) -> str:
    """A duration for PromQL from seconds, largest units first (5400 -> ``"1h30m"``)."""
    parts = []
    for unit, size in _UNITS:
        count, total = divmod(total, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def _sel(metric: str) -> str:
    return f'{metric}{{rl_rank=""}}'


def _increase(metric: str, by: str, w: str) -> str:
    """The exact increase of a counter over ``w`` summed by ``by``: each series' value now minus its value ``w`` ago,
    or its whole value where it began inside the window or went down (docs/dashboards.md, "Ratios")."""
    s = _sel(metric)
    return f"sum by ({by}) ({s} - {s} offset {w} >= 0 or {s})"


def _count(metric: str, by: str, w: str) -> str:
    """How many values a histogram counted over ``w``: the native histogram's count, else the classic ``_count``."""
    native = f"histogram_count({_sel(metric)})"
    before = f'histogram_count({metric}{{rl_rank=""}} offset {w})'
    return (
        f"(\n      sum by ({by}) ({native} - {before} >= 0 or {native})\n"
        f"    or {_increase(metric + '_count', by, w)}\n  ) > 0"
    )


def _signed_mean(metric: str, by: str, w: str) -> str:
    """The mean over ``w`` of a histogram with exact positive and negative parts (``<metric>_positive_total``)."""
    return (
        f"(\n    {_increase(metric + '_positive_total', by, w)}\n"
        f"  - {_increase(metric + '_negative_total', by, w)}\n)\n"
        f"/ (\n  {_count(metric, by, w)}\n)"
    )


def _quantile(q: float, metric: str, w: str, extremes: tuple[str, str]) -> str:
    """The ``q`` quantile over ``w`` (native histogram, else classic buckets) clamped to the exact extremes of the
    same window (three branches: within them, above the max, below the min; NaN matches none)."""
    estimate = (
        f"(\n      histogram_quantile({q}, sum by ({RUN}) (rate({_sel(metric)}[{w}])))\n"
        f"    or histogram_quantile({q}, sum by ({RUN}, le) (rate({_sel(metric + '_bucket')}[{w}])))\n  )"
    )
    high, low = extremes
    return (
        f"(\n  {estimate}\n  <= on ({RUN}) {high}\n)\n>= on ({RUN}) {low}\n"
        f"or on ({RUN})\n  {high}\n  < on ({RUN}) {estimate}\n"
        f"or on ({RUN})\n  {low}\n  > on ({RUN}) {estimate}"
    )


@dataclass(frozen=True)
class Record:
    """One recording rule per window of the contract's ``statistic`` (its name and floor: one source,
    ``otel_rl_contract.rules``)."""

    statistic: rules.Windowed
    expr: Callable[[str], str]
    comment: str


@dataclass(frozen=True)
class Alert:
    """One alert rule per window from ``floor`` on, judged while the window holds ``steps`` to 3 x ``steps`` of the
    run's steps (the floor: ``steps`` or more)."""

    name: str
    signal: str | None
    """The ``signal`` label (one alert name, several conditions), or None."""
    audit: str | None
    """The ``audit`` label of the audit's alerts (severity ``notify``), None for the health alerts (``warning``)."""
    steps: int
    """N: the steps the judged window holds at least."""
    why: str
    """Why N steps (the runbooks' table)."""
    floor: str
    """The smallest window: the former fixed window for the health alerts (they keep it at any faster pace)."""
    lookback: int
    """The windows between the judged window and the one it is compared with (0: no comparison)."""
    hold: int
    """``for:`` in windows (the audit), or 0: ``for:`` is ``hold_floor`` or one window, whichever is longer."""
    hold_floor: str
    """The least ``for:`` (the former one, for the health alerts; ``0s`` for the audit)."""
    expr: Callable[[str], str]
    """The condition on the window ``w`` (offsets in it are multiples of ``w``)."""
    summary: Callable[[str], str]
    description: Callable[[str], str]
    comment: str

    def windows(self) -> tuple[str, ...]:
        """The windows this alert has a rule for."""
        return PRESETS[PRESETS.index(self.floor) :]

    def hold_for(self, w: str) -> str:
        """``for:`` of the rule of window ``w``."""
        if self.hold:
            return duration(self.hold * seconds(w))
        return duration(max(seconds(self.hold_floor), seconds(w)))

    def gate(self, w: str) -> str:
        """The run's steps in ``w`` (and in the window it is compared with) within the band."""
        steps = f"rl:window_steps:increase{w}"
        band = f">= {self.steps}" if w == self.floor else f">= {self.steps} < {BAND * self.steps}"
        gate = f"and on ({RUN}) ({steps} {band})"
        if self.lookback:
            gate += f"\nand on ({RUN}) ({steps} offset {duration(self.lookback * seconds(w))} >= {self.steps})"
        return gate


def _threshold(name: str) -> str:
    return f'rl_alert_threshold{{threshold="{name}"}}'


def _query_threshold(name: str, digits: str = "%.3g") -> str:
    """Go template text: the run's value of threshold ``name`` (annotations)."""
    return (
        f'{{{{ with printf "rl_alert_threshold{{threshold=\\"{name}\\",rl_run_id=%q}}" $labels.rl_run_id | query }}}}'
        f'{{{{ . | first | value | printf "{digits}" }}}}{{{{ end }}}}'
    )


def _held(w: str) -> str:
    """Go template text: how many steps the run's window ``w`` holds (annotations)."""
    return (
        f'{{{{ with printf "rl:window_steps:increase{w}{{rl_run_id=%q,rl_role=%q}}" $labels.rl_run_id '
        f'$labels.rl_role | query }}}}{{{{ . | first | value | printf "%.0f" }}}}{{{{ end }}}}'
    )


def _over(w: str) -> str:
    """Go template text: "the last 10m (24 steps)"."""
    return f"the last {w} ({_held(w)} steps)"


def _before(alert_lookback: int, w: str) -> str:
    return duration(alert_lookback * seconds(w))


# ---------------------------------------------------------------------------------------------------------------
# Recording rules

_MEAN = "rl:reward_mean:rate{w}"


def _steps_expr(w: str) -> str:
    step = _sel("rl_step")
    measured = f"max by ({RUN}) ({step}) - max by ({RUN}) ({step} offset {w})"
    return (
        f"(\n    0 * ({measured})\n"
        f"  + on (rl_run_id) group_left () ({seconds(w)} / ({_threshold('step_seconds')} > 0))\n)\n"
        f"or\nclamp_min({measured}, 0)"
    )


WINDOW_RECORDS = (
    Record(
        rules.WINDOW_STEPS,
        _steps_expr,
        "Steps the run started in the last {w}: rl_step now minus {w} ago (none while the run is younger than {w}: a "
        "window reaching back before the run is not a window of {w}); where the run states its pace "
        "(step_seconds > 0), {w} over it.",
    ),
    Record(
        rules.REWARD_MEAN,
        lambda w: _signed_mean("rl_reward", f"{RUN}, rl_reward_fn", w),
        "Mean reward per reward function over {w}.",
    ),
    Record(
        rules.REWARD_STDDEV,
        lambda w: (
            f"sqrt(clamp_min(\n    {_increase('rl_reward_squares_total', f'{RUN}, rl_reward_fn', w)}\n"
            f"  / (\n  {_count('rl_reward', f'{RUN}, rl_reward_fn', w)}\n  )\n"
            f"  - rl:reward_mean:rate{w} ^ 2,\n  0\n))"
        ),
        "Standard deviation of the reward per function over {w}: sqrt(E[r^2] - mean^2), clamped at 0.",
    ),
    Record(
        rules.ENTROPY_MEAN,
        lambda w: _signed_mean("rl_entropy", RUN, w),
        "Mean per-token policy entropy over {w} (none for a run that records no entropy).",
    ),
    Record(
        rules.ZERO_VARIANCE_FRACTION,
        lambda w: (
            f"{_increase('rl_groups_zero_variance_total', RUN, w)}\n/ ({_increase('rl_groups_total', RUN, w)} > 0)"
        ),
        "Share of the prompt groups of the last {w} whose rewards were all equal (no GRPO advantage).",
    ),
    Record(
        rules.MISMATCH_KL_MEAN,
        lambda w: _signed_mean("rl_mismatch_kl", f"{RUN}, rl_kl_estimator", w),
        "Mean per-token mismatch KL(pi_inference || pi_train) per estimator (k1, k3) over {w}.",
    ),
    Record(
        rules.STALENESS_MAX,
        lambda w: f"max by ({RUN}) (max_over_time({_sel('rl_staleness_max')}[{w}]))",
        "Exact maximum staleness over {w} (each gauge holds its extreme since the previous export).",
    ),
    Record(
        rules.STALENESS_MIN,
        lambda w: f"min by ({RUN}) (min_over_time({_sel('rl_staleness_min')}[{w}]))",
        "Exact minimum staleness over {w}.",
    ),
    Record(
        rules.STALENESS_P99,
        lambda w: _quantile(0.99, "rl_staleness", w, (f"rl:staleness_max:max{w}", f"rl:staleness_min:min{w}")),
        "Staleness p99 (versions behind, per token) over {w}, clamped to the exact extremes of the window.",
    ),
    Record(
        rules.IMPORTANCE_RATIO_MAX,
        lambda w: f"max by ({RUN}) (max_over_time({_sel('rl_importance_ratio_max')}[{w}]))",
        "Exact maximum importance ratio pi_train / pi_inference per token over {w}.",
    ),
    Record(
        rules.IMPORTANCE_RATIO_MIN,
        lambda w: f"min by ({RUN}) (min_over_time({_sel('rl_importance_ratio_min')}[{w}]))",
        "Exact minimum importance ratio over {w}.",
    ),
    Record(
        rules.IMPORTANCE_RATIO_P99,
        lambda w: _quantile(
            0.99, "rl_importance_ratio", w, (f"rl:importance_ratio_max:max{w}", f"rl:importance_ratio_min:min{w}")
        ),
        "Importance ratio p99 over {w}, clamped to the exact extremes.",
    ),
    Record(
        rules.IMPORTANCE_RATIO_P1,
        lambda w: _quantile(
            0.01, "rl_importance_ratio", w, (f"rl:importance_ratio_max:max{w}", f"rl:importance_ratio_min:min{w}")
        ),
        "Importance ratio p1 over {w}, clamped to the exact extremes.",
    ),
    Record(
        rules.IMPORTANCE_RATIO_ESS,
        lambda w: (
            f"{_increase('rl_importance_ratio_positive_total', RUN, w)} ^ 2\n/ (\n  (\n"
            f"  {_count('rl_importance_ratio', RUN, w)}\n  )\n"
            f"  * {_increase('rl_importance_ratio_squares_total', RUN, w)}\n)"
        ),
        "Effective sample size fraction of the importance ratios over {w}, (sum r)^2 / (n sum r^2) (Kish), in (0, 1].",
    ),
)
"""Statistics shared by the health alerts and the audit."""

_JOINT = "rl:joint:increase{w}"


def _joint(moment: str, w: str) -> str:
    return f'sum without (rl_joint_moment) (rl:joint:increase{w}{{rl_joint_moment="{moment}"}})'


def _signed_joint(moment: str, w: str) -> str:
    return f"(\n    {_joint(moment + '.positive', w)}\n  - {_joint(moment + '.negative', w)}\n)"


def _dropped_mean(w: str) -> str:
    by = RUN
    native = f"histogram_sum({_sel('rl_dropped_response_length')})"
    before = f'histogram_sum(rl_dropped_response_length{{rl_rank=""}} offset {w})'
    return (
        f"(\n    sum by ({by}) ({native} - {before} >= 0 or {native})\n"
        f"  or {_increase('rl_dropped_response_length_sum', by, w)}\n)\n"
        f"/ (\n  {_count('rl_dropped_response_length', by, w)}\n)"
    )


AUDIT_RECORDS = (
    Record(
        rules.JOINT,
        lambda w: (
            f"sum by ({RUN}, rl_joint_x, rl_joint_moment) "
            f"({_sel('rl_joint_total')} - {_sel('rl_joint_total')} offset {w} >= 0 or {_sel('rl_joint_total')})"
        ),
        "The exact increase over {w} of every rl.joint sum (record_rollouts: rl_joint_x is response_length or "
        "reward.<fn>, paired with the total reward; rl_joint_moment names the sum).",
    ),
    Record(
        rules.JOINT_N,
        lambda w: f"{_joint('n', w)} > 0",
        "Pairs in the last {w}.",
    ),
    Record(
        rules.JOINT_MEAN_X,
        lambda w: f"{_signed_joint('x', w)} / rl:joint_n:increase{w}",
        "Mean of x over the last {w}'s pairs.",
    ),
    Record(
        rules.JOINT_MEAN_Y,
        lambda w: f"{_signed_joint('y', w)} / rl:joint_n:increase{w}",
        "Mean of the total reward over the same pairs.",
    ),
    Record(
        rules.JOINT_COVARIANCE,
        lambda w: (
            f"{_signed_joint('xy', w)} / rl:joint_n:increase{w}\n- rl:joint_mean_x:rate{w} * rl:joint_mean_y:rate{w}"
        ),
        "Population covariance of x and the total reward over the last {w}.",
    ),
    Record(
        rules.JOINT_VARIANCE_X,
        lambda w: f"clamp_min({_joint('xx', w)} / rl:joint_n:increase{w} - rl:joint_mean_x:rate{w} ^ 2, 0)",
        "Variance of x.",
    ),
    Record(
        rules.JOINT_VARIANCE_Y,
        lambda w: f"clamp_min({_joint('yy', w)} / rl:joint_n:increase{w} - rl:joint_mean_y:rate{w} ^ 2, 0)",
        "Variance of the total reward.",
    ),
    Record(
        rules.JOINT_CORRELATION,
        lambda w: (
            f"clamp(rl:joint_covariance:rate{w} / (sqrt(rl:joint_variance_x:rate{w} * rl:joint_variance_y:rate{w}) "
            "> 0), -1, 1)"
        ),
        "Pearson correlation of x with the total reward over {w}, in [-1, 1]; none where either is constant.",
    ),
    Record(
        rules.REWARD_VARIANCE_SHARE,
        lambda w: (
            f'label_replace(\n  rl:joint_covariance:rate{w}{{rl_joint_x=~"reward\\\\..+"}} / '
            f'(rl:joint_variance_y:rate{w}{{rl_joint_x=~"reward\\\\..+"}} > 0),\n'
            '  "rl_reward_fn", "$1", "rl_joint_x", "reward\\\\.(.+)"\n)'
        ),
        "Each reward function's share of the total reward's variance over {w}: Cov(f, total) / Var(total) (shares of "
        "functions that add up to the total sum to 1).",
    ),
    Record(
        rules.DROPPED_RESPONSE_LENGTH_MEAN,
        _dropped_mean,
        "Mean response length of the rollouts dropped as too stale (record_staleness_drops) over {w}.",
    ),
    Record(
        rules.RESPONSE_LENGTH_MEAN,
        lambda w: (
            f"{_increase('rl_response_length_positive_total', RUN, w)}\n"
            f"/ (\n  {_count('rl_response_length', RUN, w)}\n)"
        ),
        "Mean response length of the rollouts trained on over {w}.",
    ),
    Record(
        rules.STALE_DROP_FRACTION,
        lambda w: (
            f"{_increase('rl_staleness_dropped_total', RUN, w)}\n/ (\n  {_count('rl_response_length', RUN, w)}\n)"
        ),
        "Rollouts dropped as too stale per rollout trained over {w}.",
    ),
)
"""The audit's own statistics."""

# ---------------------------------------------------------------------------------------------------------------
# Alerts

_PREFIX = "RL run {{ $labels.rl_run_id }}"
_ROLE = "Run {{ $labels.rl_run_id }} (role {{ $labels.rl_role }})"
_VALUE1 = '{{ $value | printf "%.1f" }}'
_VALUE2 = '{{ $value | printf "%.2f" }}'


def _gaming(w: str) -> str:
    mean, std = f"rl:reward_mean:rate{w}", f"rl:reward_stddev:rate{w}"
    total = '{rl_reward_fn="total"}'
    return (
        "(\n"
        f"    ({mean}{total} - {mean}{total} offset {w})\n"
        f"    / (clamp_min({std}{total} offset {w}, 0) + 1e-6 * abs({mean}{total} offset {w}) + 1e-9)\n"
        f"  > on (rl_run_id) group_left ()\n  {_threshold('reward_gaming_rise_stddevs')}\n)\n"
        f"and on ({RUN})\n(\n  (\n"
        f"      ({mean} - {mean} offset {w})\n"
        f"    / (clamp_min({std} offset {w}, 0) + 1e-6 * abs({mean} offset {w}) + 1e-9)\n"
        "    and on (rl_run_id, rl_reward_fn) rl:reward_ground_truth\n  )\n"
        f"  < on (rl_run_id) group_left ()\n  {_threshold('ground_truth_rise_stddevs')}\n)"
    )


def _gamed_function(w: str) -> str:
    """Go template text: the reward function other than the ground truth whose mean rose most over ``w``."""
    query = (
        f'topk(1, (rl:reward_mean:rate{w}{{rl_run_id=%q,rl_role=%q,rl_reward_fn!=\\"total\\"}} '
        f"- rl:reward_mean:rate{w}{{rl_run_id=%q,rl_role=%q}} offset {w}) > 0 "
        "unless on (rl_run_id, rl_reward_fn) rl:reward_ground_truth)"
    )
    return (
        f'{{{{ with printf "{query}" $labels.rl_run_id $labels.rl_role $labels.rl_run_id $labels.rl_role | query }}}}'
        '{{ . | first | label "rl_reward_fn" }} rose most{{ else }}no other function rose{{ end }}'
    )


def _length_rising(w: str) -> str:
    corr = f'rl:joint_correlation:rate{w}{{rl_joint_x="response_length"}}'
    return (
        f"(\n  {corr}\n  > on (rl_run_id) group_left ()\n  {_threshold('length_reward_correlation')}\n)\n"
        f"and on ({RUN}, rl_joint_x)\n(\n  {corr}\n  - {corr} offset {_before(3, w)}\n"
        f"  > on (rl_run_id) group_left ()\n  {_threshold('length_reward_correlation_rise')}\n)"
    )


_TREND_WHY = (
    "the difference of two window means: with N = 20 it carries sqrt(2/20) = 0.32 of one step's batch-to-batch noise, "
    "a tenth of the 0.5 std devs the total must rise by (a step of 32 groups: noise 0.18 std devs, 0.06 for the pair)"
)

AUDIT_ALERTS = (
    Alert(
        name="RLRewardGaming",
        signal=None,
        audit="reward_gaming",
        steps=20,
        why=_TREND_WHY,
        floor="15s",
        lookback=1,
        hold=1,
        hold_floor="0s",
        expr=_gaming,
        summary=lambda w: (
            f"{_PREFIX}: total reward rose {_VALUE1} std devs over {w} windows while the ground truth did not; "
            f"{_gamed_function(w)}"
        ),
        description=lambda w: (
            f"{_ROLE}: the mean of the total reward over {_over(w)} rose {_VALUE2} standard deviations over the "
            f"{w} before (more than the run's {_query_threshold('reward_gaming_rise_stddevs')}), while the run's "
            "ground-truth function "
            '{{ with printf "rl:reward_ground_truth{rl_run_id=%q}" $labels.rl_run_id | query }}'
            '{{ . | first | label "rl_reward_fn" }}{{ end }} '
            f"rose less than {_query_threshold('ground_truth_rise_stddevs')} of its own ({_gamed_function(w)}): the "
            "reward is being earned by something other than the task. Read the top samples and the functions' "
            "variance shares."
        ),
        comment="The total reward rose while the ground-truth function stalled or fell: the policy earns reward some "
        "other way. Each function's mean over the window against the window before, in standard deviations of that "
        "function over the window before (floored at 1e-6 of its mean, as in RLRewardCollapse, and at 1e-9: a "
        "ground truth that was 0 on every rollout and still is has stalled, it did not rise 0/0). The summary names "
        "the function other than the ground truth whose mean rose most.",
    ),
    Alert(
        name="RLLengthRewardCorrelationRising",
        signal=None,
        audit="length_reward_correlation",
        steps=20,
        why="a correlation over the window's rollouts compared with three windows (60 to 180 steps) earlier: a level "
        "of 20 steps moves by a step's noise over sqrt(20); the rise is a trend over the run, not a batch",
        floor="15s",
        lookback=3,
        hold=1,
        hold_floor="0s",
        expr=_length_rising,
        summary=lambda w: (
            f'{_PREFIX}: response length and reward correlate at {{{{ $value | printf "%.2f" }}}} over {w}, rising'
        ),
        description=lambda w: (
            f"{_ROLE}: over {_over(w)} the correlation of response length with the total reward is {_VALUE2}, above "
            f"the run's threshold of {_query_threshold('length_reward_correlation')} and up by more than "
            f"{_query_threshold('length_reward_correlation_rise')} since the window {_before(3, w)} before: longer "
            "answers are paid more. Compare the longest samples' rewards by function."
        ),
        comment="Response length and reward are correlated, and more so than three windows before: length is being "
        "paid.",
    ),
    Alert(
        name="RLRewardFunctionDominates",
        signal=None,
        audit="reward_variance_share",
        steps=20,
        why="a share of the variance over the window's rollouts: 20 steps so that the policy's drift within the "
        "window, not one batch, decides which function carries the variance",
        floor="15s",
        lookback=0,
        hold=1,
        hold_floor="0s",
        expr=lambda w: (
            f"(\n  rl:reward_variance_share:rate{w}\n  unless on (rl_run_id, rl_reward_fn) rl:reward_ground_truth\n)\n"
            f"> on (rl_run_id) group_left ()\n{_threshold('reward_variance_share')}"
        ),
        summary=lambda w: (
            f"{_PREFIX}: {{{{ $labels.rl_reward_fn }}}} carries {{{{ $value | humanizePercentage }}}} of the "
            f"reward's variance over {w}"
        ),
        description=lambda w: (
            f"{_ROLE}: the reward function {{{{ $labels.rl_reward_fn }}}} accounts for {_VALUE2} of the total "
            f"reward's variance over {_over(w)}, Cov(f, total) / Var(total), above the run's threshold of "
            f"{_query_threshold('reward_variance_share')}: the advantages, hence the updates, are about it and not "
            "about the ground truth."
        ),
        comment="One reward function other than the ground truth carries most of the total's variance: it decides "
        "the advantages, so it is what the policy learns.",
    ),
    Alert(
        name="RLEntropyFalling",
        signal=None,
        audit="entropy_falling",
        steps=20,
        why="a ratio of two window means of the per-token entropy three windows (60 to 180 steps) apart: 20 steps "
        "average out a batch of easy or hard prompts",
        floor="15s",
        lookback=3,
        hold=1,
        hold_floor="0s",
        expr=lambda w: (
            f"rl:entropy_mean:rate{w} / (rl:entropy_mean:rate{w} offset {_before(3, w)} > 0)\n"
            f"< on (rl_run_id) group_left ()\n{_threshold('entropy_fall_ratio')}"
        ),
        summary=lambda w: (
            f"{_PREFIX}: entropy fell to {{{{ $value | humanizePercentage }}}} of its value {_before(3, w)} before"
        ),
        description=lambda w: (
            f"{_ROLE}: the mean per-token entropy of {_over(w)} is {_VALUE2} of its value in the window "
            f"{_before(3, w)} before, below the run's ratio of {_query_threshold('entropy_fall_ratio')}: the policy "
            "is becoming deterministic fast, before RLEntropyCollapse's level is reached."
        ),
        comment="Mean entropy fell to less than a fraction of its value three windows before (a trend; "
        "RLEntropyCollapse is the level).",
    ),
    Alert(
        name="RLMismatchKLAccelerating",
        signal=None,
        audit="mismatch_kl_accelerating",
        steps=20,
        why="a ratio of two window means of the k3 KL two windows (40 to 120 steps) apart: the KL's batches are "
        "heavy-tailed (a batch of long or rare sequences triples it), and with 10 steps two such batches in one "
        "window made an honest run's KL 'double' (measured, ~30 s steps); for: two windows",
        floor="15s",
        lookback=2,
        hold=2,
        hold_floor="0s",
        expr=lambda w: (
            f'rl:mismatch_kl_mean:rate{w}{{rl_kl_estimator="k3"}} '
            f'/ (rl:mismatch_kl_mean:rate{w}{{rl_kl_estimator="k3"}} '
            f"offset {_before(2, w)} > 0)\n> on (rl_run_id) group_left ()\n{_threshold('mismatch_kl_growth')}"
        ),
        summary=lambda w: f"{_PREFIX}: mismatch KL grew {_VALUE1}x in {_before(2, w)}",
        description=lambda w: (
            f"{_ROLE}: the mean per-token KL(pi_inference || pi_train) (k3) over {_over(w)} is {_VALUE2} times its "
            f"value {_before(2, w)} before, more than the run's factor of {_query_threshold('mismatch_kl_growth')}: "
            "it grows exponentially, so the trainer and the inference engine drift apart (a precision change, a "
            "weight-sync bug, an off-policy spiral), before RLMismatchKLHigh's level."
        ),
        comment="The k3 mismatch KL grew by more than a factor in two windows: exponential growth, not drift.",
    ),
    Alert(
        name="RLZeroVarianceShareRising",
        signal=None,
        audit="zero_variance_rising",
        steps=20,
        why="a difference of two window shares of prompt groups three windows (60 to 180 steps) apart: 20 steps of "
        "32 or more groups each",
        floor="15s",
        lookback=3,
        hold=1,
        hold_floor="0s",
        expr=lambda w: (
            f"rl:groups_zero_variance_fraction:rate{w} - rl:groups_zero_variance_fraction:rate{w} offset "
            f"{_before(3, w)}\n> on (rl_run_id) group_left ()\n{_threshold('zero_variance_share_rise')}"
        ),
        summary=lambda w: (
            f"{_PREFIX}: zero-variance groups up {{{{ $value | humanizePercentage }}}} in {_before(3, w)}"
        ),
        description=lambda w: (
            f"{_ROLE}: the share of the prompt groups of {_over(w)} whose rollouts all got the same reward is "
            f'{{{{ $value | printf "%.3f" }}}} above its value in the window {_before(3, w)} before, more than the '
            f"run's threshold of {_query_threshold('zero_variance_share_rise')}: fewer groups carry a group-relative "
            "advantage, so less of each batch teaches anything."
        ),
        comment="The share of prompt groups whose rewards are all equal rose since three windows before: the batch "
        "gives less and less signal. RLRewardCollapse's zero_variance signal is the same over six windows.",
    ),
    Alert(
        name="RLStaleDropsBiasedByLength",
        signal=None,
        audit="stale_drops_biased",
        steps=20,
        why="two window means of response length and a drop fraction: 20 steps, as drops come in bursts (a slow "
        "rollout worker, a stall)",
        floor="15s",
        lookback=0,
        hold=1,
        hold_floor="0s",
        expr=lambda w: (
            f"(\n  rl:dropped_response_length_mean:rate{w} / (rl:response_length_mean:rate{w} > 0)\n"
            f"  > on (rl_run_id) group_left ()\n  {_threshold('stale_drop_length_ratio')}\n)\n"
            f"and on ({RUN})\n(\n  rl:stale_drop_fraction:rate{w}\n  > on (rl_run_id) group_left ()\n"
            f"  {_threshold('stale_drop_fraction')}\n)"
        ),
        summary=lambda w: f"{_PREFIX}: rollouts dropped as stale are {_VALUE1}x as long as those trained over {w}",
        description=lambda w: (
            f"{_ROLE}: over {_over(w)} the rollouts dropped for staleness averaged {_VALUE2} times the response "
            f"length of those trained on (run's threshold {_query_threshold('stale_drop_length_ratio')}), with more "
            f"than {_query_threshold('stale_drop_fraction')} dropped per rollout trained: dropping stale rollouts "
            "drops the long, hard problems, and the policy learns from the easy ones."
        ),
        comment="Rollouts dropped as too stale are longer than those trained on, and enough are dropped to matter: "
        "the run trains on the short, easy problems.",
    ),
)
"""The audit (severity notify, label ``audit``)."""


def _collapse_drop(w: str) -> str:
    mean, std = f'rl:reward_mean:rate{w}{{rl_reward_fn="total"}}', f'rl:reward_stddev:rate{w}{{rl_reward_fn="total"}}'
    back = _before(6, w)
    return (
        f"(\n    {mean} offset {back}\n  - {mean}\n)\n/ (\n    {std} offset {back}\n"
        f"      >= 1e-6 * abs({mean} offset {back})\n  or\n    1e-6 * abs({mean} offset {back})\n)\n"
        f"> on (rl_run_id) group_left ()\n{_threshold('reward_drop_stddevs')}"
    )


_THRESHOLD_NOTE = '(rl_alert_threshold{{threshold="{name}"}}, default {default})'

HEALTH_ALERTS = (
    Alert(
        name="RLStalenessHigh",
        signal="staleness_p99",
        audit=None,
        steps=2,
        why="a percentile over tokens (a step holds thousands): 2 steps so that the window always holds one whole "
        "step, whenever steps end",
        floor="1m",
        lookback=0,
        hold=0,
        hold_floor="10m",
        expr=lambda w: f"rl:staleness_p99:rate{w}\n> on (rl_run_id) group_left ()\n{_threshold('staleness_p99')}",
        summary=lambda w: f"{_PREFIX}: staleness p99 is {_VALUE1} versions",
        description=lambda w: (
            f"{_ROLE}: the 99th percentile of per-token staleness (policy versions between generation and training) "
            f"over {_over(w)} is {_VALUE1} versions, above the run's threshold of "
            f"{_query_threshold('staleness_p99', '%.4g')} versions "
            f"{_THRESHOLD_NOTE.format(name='staleness_p99', default=8)} for {{for}}: rollout workers lag behind the "
            "trainer, and off-policy corrections may not cope."
        ),
        comment="Rollouts come from policies too old: p99 of per-token staleness above the run's threshold.",
    ),
    Alert(
        name="RLStalenessHigh",
        signal="staleness_max",
        audit=None,
        steps=2,
        why="the exact maximum over the window's tokens: 2 steps, as for the p99",
        floor="1m",
        lookback=0,
        hold=0,
        hold_floor="10m",
        expr=lambda w: f"rl:staleness_max:max{w}\n> on (rl_run_id) group_left ()\n{_threshold('staleness_max')}",
        summary=lambda w: f"{_PREFIX}: max staleness is {{{{ $value }}}} versions",
        description=lambda w: (
            f"{_ROLE}: the maximum per-token staleness over {_over(w)} is {{{{ $value }}}} versions, above the run's "
            f"threshold of {_query_threshold('staleness_max', '%.4g')} versions "
            f"{_THRESHOLD_NOTE.format(name='staleness_max', default=32)} for {{for}}: some tokens were generated by a "
            "policy that old (a rollout worker or a buffer entry got stuck and was trained on much later)."
        ),
        comment="The worst token: exact max staleness above the run's threshold.",
    ),
    Alert(
        name="RLImportanceRatioHigh",
        signal="importance_ratio_p99",
        audit=None,
        steps=10,
        why="a tail percentile of the per-token ratios: 10 steps (the former 5 minutes at 30 s a step), so that one "
        "batch of odd prompts does not decide it",
        floor="5m",
        lookback=0,
        hold=0,
        hold_floor="10m",
        expr=lambda w: (
            f"rl:importance_ratio_p99:rate{w}\n> on (rl_run_id) group_left ()\n{_threshold('importance_ratio_p99')}"
        ),
        summary=lambda w: f"{_PREFIX}: importance ratio p99 is {_VALUE2}",
        description=lambda w: (
            f"{_ROLE}: the 99th percentile of the per-token importance ratio pi_train / pi_inference over "
            f"{_over(w)} is "
            f'{{{{ $value | printf "%.3g" }}}}, above the run\'s threshold of '
            f"{_query_threshold('importance_ratio_p99', '%.4g')} "
            f"{_THRESHOLD_NOTE.format(name='importance_ratio_p99', default=2)} for {{for}}: the trainer gives sampled "
            "tokens much more probability than the inference engine did; those gradients are off-policy and "
            "high-variance."
        ),
        comment="Importance ratios r = pi_train / pi_inference far from 1: the p99 above the run's threshold ...",
    ),
    Alert(
        name="RLImportanceRatioHigh",
        signal="importance_ratio_p1",
        audit=None,
        steps=10,
        why="as the p99",
        floor="5m",
        lookback=0,
        hold=0,
        hold_floor="10m",
        expr=lambda w: (
            f"rl:importance_ratio_p1:rate{w}\n< on (rl_run_id) group_left ()\n{_threshold('importance_ratio_p1')}"
        ),
        summary=lambda w: f"{_PREFIX}: importance ratio p1 is {_VALUE2}",
        description=lambda w: (
            f"{_ROLE}: the 1st percentile of the per-token importance ratio pi_train / pi_inference over {_over(w)} is "
            f'{{{{ $value | printf "%.3g" }}}}, below the run\'s threshold of '
            f"{_query_threshold('importance_ratio_p1', '%.4g')} "
            f"{_THRESHOLD_NOTE.format(name='importance_ratio_p1', default=0.5)} for {{for}}: the inference engine "
            "sampled tokens that the trainer finds much less likely."
        ),
        comment="... or the p1 below it.",
    ),
    Alert(
        name="RLMismatchKLHigh",
        signal=None,
        audit=None,
        steps=10,
        why="a mean per token whose step-to-step spread is large (a few odd batches): 10 steps, so that one step 10x "
        "above the threshold is needed to cross it alone",
        floor="5m",
        lookback=0,
        hold=0,
        hold_floor="10m",
        expr=lambda w: (
            f'rl:mismatch_kl_mean:rate{w}{{rl_kl_estimator="k3"}}\n> on (rl_run_id) group_left ()\n'
            f"{_threshold('mismatch_kl_k3')}"
        ),
        summary=lambda w: f'{_PREFIX}: mismatch KL (k3) is {{{{ $value | printf "%.4f" }}}} per token',
        description=lambda w: (
            f"{_ROLE}: the mean per-token KL(pi_inference || pi_train), k3 estimator, over {_over(w)} is "
            f'{{{{ $value | printf "%.3g" }}}} nats, above the run\'s threshold of '
            f"{_query_threshold('mismatch_kl_k3', '%.4g')} "
            f"{_THRESHOLD_NOTE.format(name='mismatch_kl_k3', default=0.01)} "
            "for {for}: the policy that generated the rollouts and the one being trained differ more than numerical "
            "noise explains."
        ),
        comment="Mean per-token KL(pi_inference || pi_train), k3 estimator, above the run's threshold.",
    ),
    Alert(
        name="RLEffectiveSampleSizeLow",
        signal=None,
        audit=None,
        steps=10,
        why="as RLMismatchKLHigh: the same tokens' importance weights",
        floor="5m",
        lookback=0,
        hold=0,
        hold_floor="10m",
        expr=lambda w: f"rl:importance_ratio_ess:rate{w}\n< on (rl_run_id) group_left ()\n{_threshold('ess_fraction')}",
        summary=lambda w: f"{_PREFIX}: effective sample size is {{{{ $value | humanizePercentage }}}} of the tokens",
        description=lambda w: (
            f"{_ROLE}: the effective sample size of the per-token importance weights, (sum r)^2 / (n sum r^2) over "
            f'{_over(w)}, is {{{{ $value | printf "%.3g" }}}} of the tokens, below the run\'s threshold of '
            f"{_query_threshold('ess_fraction', '%.4g')} {_THRESHOLD_NOTE.format(name='ess_fraction', default=0.5)} "
            "for {for}: a few tokens carry most of the weight, so the gradient estimate has high variance."
        ),
        comment="The effective sample size fraction of the importance ratios below the run's threshold.",
    ),
    Alert(
        name="RLEntropyCollapse",
        signal=None,
        audit=None,
        steps=20,
        why="a level of a mean that moves with the batch's prompts: 20 steps (the former 10 minutes at 30 s a step)",
        floor="10m",
        lookback=0,
        hold=0,
        hold_floor="15m",
        expr=lambda w: f"rl:entropy_mean:rate{w}\n< on (rl_run_id) group_left ()\n{_threshold('entropy_min')}",
        summary=lambda w: f'{_PREFIX}: mean entropy is {{{{ $value | printf "%.3f" }}}} nats per token',
        description=lambda w: (
            f'{_ROLE}: the mean policy entropy per token over {_over(w)} is {{{{ $value | printf "%.3g" }}}} nats, '
            f"below the run's threshold of {_query_threshold('entropy_min', '%.4g')} "
            f"{_THRESHOLD_NOTE.format(name='entropy_min', default=0.05)} for {{for}}: the policy has become nearly "
            "deterministic, so rollouts stop exploring and groups stop giving signal."
        ),
        comment="Mean per-token entropy below the run's threshold. Runs that record no entropy stay silent.",
    ),
    Alert(
        name="RLZeroVarianceGroupsHigh",
        signal=None,
        audit=None,
        steps=20,
        why="a share of prompt groups: 20 steps of 32 or more groups each",
        floor="10m",
        lookback=0,
        hold=0,
        hold_floor="15m",
        expr=lambda w: (
            f"rl:groups_zero_variance_fraction:rate{w}\n> on (rl_run_id) group_left ()\n"
            f"{_threshold('zero_variance_fraction')}"
        ),
        summary=lambda w: (
            f"{_PREFIX}: {{{{ $value | humanizePercentage }}}} of prompt groups have zero reward variance"
        ),
        description=lambda w: (
            f'{_ROLE}: {{{{ $value | printf "%.3f" }}}} of the prompt groups of {_over(w)} had the same reward on '
            f"every rollout, more than the run's threshold of {_query_threshold('zero_variance_fraction', '%.4g')} "
            f"{_THRESHOLD_NOTE.format(name='zero_variance_fraction', default=0.8)} for {{for}}: they give no "
            "group-relative advantage, so most of each batch carries no gradient."
        ),
        comment="Share of the window's prompt groups whose rewards are all equal above the run's threshold.",
    ),
    Alert(
        name="RLRewardCollapse",
        signal="reward_drop",
        audit=None,
        steps=20,
        why=_TREND_WHY.replace("the 0.5 std devs the total must rise by", "the 1 std dev the mean must fall by")
        + "; compared with six windows (120 to 360 steps) earlier, the former hour at 30 s a step",
        floor="10m",
        lookback=6,
        hold=0,
        hold_floor="15m",
        expr=_collapse_drop,
        summary=lambda w: f"{_PREFIX}: mean reward fell {_VALUE1} std devs in {_before(6, w)}",
        description=lambda w: (
            f"{_ROLE}: the mean reward over {_over(w)} is {_VALUE1} standard deviations (of the reward "
            f"{_before(6, w)} ago) below its value {_before(6, w)} ago, more than the run's threshold of "
            f"{_query_threshold('reward_drop_stddevs', '%.4g')} "
            f"{_THRESHOLD_NOTE.format(name='reward_drop_stddevs', default=1)} for {{for}}: policy collapse, a broken "
            "reward function or a data change."
        ),
        comment="Mean reward fell, compared with six windows earlier, by more than k standard deviations of the "
        "reward then (reward_drop_stddevs, default 1): scale-free. The standard deviation is floored at 1e-6 |mean| "
        "of then: a constant reward's mean differs between windows by rounding only, which divided by 0 read as an "
        "infinite drop; a reward of 0 all along stays 0 / 0 (NaN, silent).",
    ),
    Alert(
        name="RLRewardCollapse",
        signal="zero_variance",
        audit=None,
        steps=20,
        why="a difference of two shares of prompt groups six windows (120 to 360 steps) apart",
        floor="10m",
        lookback=6,
        hold=0,
        hold_floor="15m",
        expr=lambda w: (
            f"(\n    rl:groups_zero_variance_fraction:rate{w}\n  - rl:groups_zero_variance_fraction:rate{w} offset "
            f"{_before(6, w)}\n)\n> on (rl_run_id) group_left ()\n{_threshold('zero_variance_rise')}"
        ),
        summary=lambda w: (
            f"{_PREFIX}: zero-variance groups up {{{{ $value | humanizePercentage }}}} in {_before(6, w)}"
        ),
        description=lambda w: (
            f"{_ROLE}: the share of prompt groups whose rollouts all got the same reward over {_over(w)} rose by "
            f'{{{{ $value | printf "%.3f" }}}} since the window {_before(6, w)} before, more than the run\'s '
            f"threshold of {_query_threshold('zero_variance_rise', '%.4g')} "
            f"{_THRESHOLD_NOTE.format(name='zero_variance_rise', default=0.3)} for {{for}}: those groups give no "
            "learning signal (reward saturation or collapse)."
        ),
        comment="GRPO: the share of groups whose rewards are all equal (no advantage, no gradient) rose by more "
        "than the threshold since six windows earlier.",
    ),
)
"""The health alerts whose windows hold steps (severity warning)."""


# ---------------------------------------------------------------------------------------------------------------
# Rendering


def _block(text: str, indent: int) -> str:
    pad = " " * indent
    return "\n".join(pad + line if line else "" for line in text.splitlines())


def _comment(text: str, indent: int, width: int = 118) -> str:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width - indent - 2:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return "\n".join(" " * indent + "# " + item for item in lines)


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _record(rule: Record, w: str) -> str:
    return (
        f"{_comment(rule.comment.format(w=w), 6)}\n"
        f"      - record: {rule.statistic.at(w).name}\n"
        f"        expr: |\n{_block(rule.expr(w), 10)}"
    )


def _alert(rule: Alert, w: str) -> str:
    labels = {"severity": "notify" if rule.audit else "warning", rules.WINDOW_LABEL: w}
    if rule.signal:
        labels["signal"] = rule.signal
    if rule.audit:
        labels["audit"] = rule.audit
    hold = rule.hold_for(w)
    anchor = rule.name.lower()
    lines = [
        f"      - alert: {rule.name}",
        f"        expr: |\n{_block(rule.expr(w) + chr(10) + rule.gate(w), 10)}",
        f"        for: {hold}",
        "        labels:",
        *(f"          {key}: {value}" for key, value in labels.items()),
        "        annotations:",
        f"          summary: {_quoted(rule.summary(w))}",
        f"          description: {_quoted(rule.description(w).replace('{for}', hold))}",
        f'          runbook_url: "{{{{ $externalLabels.otel_rl_runbook_url }}}}#{anchor}"',
        '          dashboard_url: "{{ $externalLabels.otel_rl_grafana_url }}/d/otel-rl-run/rl-run?var-run='
        '{{ $labels.rl_run_id | urlquery }}"',
    ]
    return "\n".join(lines)


def _alerts(alerts: tuple[Alert, ...]) -> list[str]:
    out = []
    for rule in alerts:
        first = True
        for w in rule.windows():
            text = _alert(rule, w)
            if first:
                why = f"Judged over windows holding {rule.steps} to {BAND * rule.steps} steps: {rule.why}."
                text = f"{_comment(rule.comment, 6)}\n{_comment(why, 6)}\n{text}"
                first = False
            out.append(text)
    return out


def _records(records: tuple[Record, ...]) -> list[str]:
    return [_record(record, w) for record in records for w in record.statistic.windows]


_HEADER = """\
# GENERATED by prometheus/generate.py from its tables; edit those and rerun it (tests/dashboards/test_static.py checks).
#
# {what}
#
# Windows by pace (docs/runbooks.md, "Windows by pace"). Every statistic here is recorded over each window of the
# ladder {ladder},
# and each alert has one rule per window, label `window`, judged while the window holds enough of the run's steps: at
# least N and fewer than {band}N (N per alert, stated above it); its floor (the smallest window it may use: the former
# fixed window for a health alert) from N steps on. Steps in a window are rl:window_steps:increase<w>
# (rl_step now minus w ago; none while the run is younger than w), or w over the run's stated pace where it sets
# step_seconds (otel_rl_thresholds.yml). A comparison also needs the earlier window to have held N steps. `for:` is
# one window (the audit; RLMismatchKLAccelerating two), or the former `for:` or one window, whichever is longer
# (health). PromQL ranges are literals, so the windows are rules, as Sloth and Pyrra generate per SLO window.
# Every increase is exact (`c - c offset w >= 0 or c`, see otel_rl.yml); every selector carries rl_rank="".
"""


def windows_file() -> str:
    """``otel_rl_windows.yml``: one group holding, per window, the step counts, the statistics, the health alerts and
    the audit."""
    header = _HEADER.format(
        what="Every rule whose window holds training steps, in one group: the health alerts (severity warning: "
        "staleness,\n# importance ratios, mismatch KL, effective sample size, entropy, zero-variance groups, reward "
        "collapse) and the audit\n# (severity notify, label audit): is the policy learning the task or gaming its "
        'reward, is it collapsing\n# (docs/runbooks.md, "The audit"). The audit reads the RL signals together: the '
        "total reward beside the ground-truth\n# function, response length beside reward (rl_joint_total: sums over "
        "the same rollouts, merged exactly across\n# ranks), each reward function's share of the total's variance, the "
        "entropy and mismatch-KL trends, the\n# zero-variance share of prompt groups, and the rollouts dropped as too "
        "stale beside those kept. Published evidence\n# (marin #8955: a predictive AUROC of about 0.44 to 0.62) says "
        "such signals audit a run well after the fact and warn\n# early badly, so the audit notifies, never pages, and "
        "its runbook says how often it fired on honest runs.",
        ladder=", ".join(PRESETS),
        band=BAND,
    )
    truth = (
        _comment(
            "The run's ground-truth function (TelemetryConfig.ground_truth_reward, default correctness): 1 on its "
            "rl_reward_fn, per run.",
            6,
        )
        + f"\n      - record: {rules.REWARD_GROUND_TRUTH.name}\n        expr: |\n"
        + '          max by (rl_run_id, rl_reward_fn) (rl_reward_ground_truth{rl_rank=""}) == 1'
    )
    p50 = (
        _comment("Staleness p50 over 1 minute (dashboards' quick look), clamped as the p99.", 6)
        + f"\n      - record: {rules.STALENESS_P50_1M.name}\n        expr: |\n"
        + _block(_quantile(0.5, "rl_staleness", "1m", ("rl:staleness_max:max1m", "rl:staleness_min:min1m")), 10)
    )
    body = [*_records(WINDOW_RECORDS), p50, *_records(AUDIT_RECORDS), truth]
    body += [*_alerts(HEALTH_ALERTS), *_alerts(AUDIT_ALERTS)]
    return (
        header + "groups:\n  # One group, recordings first: a group's rules run in order, so every alert reads this "
        "evaluation's statistics\n  # (groups run concurrently: an alert reading another group's would read them up "
        "to an evaluation late, a\n  # whole window at the demo's pace).\n  - name: otel_rl_windows\n    rules:\n"
        + "\n".join(body)
        + "\n"
    )


FILES: dict[str, Callable[[], str]] = {WINDOWS_FILE: windows_file}
"""Each generated file and what writes it."""


def window_table() -> str:
    """The runbooks' table of every alert whose window holds steps (docs/runbooks.md, "Windows by pace")."""
    rows = [
        "| alert | steps in the window (N to 3N) | smallest window | compared with | `for:` | why N |",
        "|---|---|---|---|---|---|",
    ]
    for rule in (*HEALTH_ALERTS, *AUDIT_ALERTS):
        name = f"`{rule.name}`" + (f" (`{rule.signal}`)" if rule.signal else "")
        compared = f"{rule.lookback} window{'s' if rule.lookback > 1 else ''} before" if rule.lookback else "-"
        hold = f"{rule.hold} window{'s' if rule.hold > 1 else ''}" if rule.hold else f"{rule.hold_floor} or 1 window"
        rows.append(
            f"| {name} | {rule.steps} to {BAND * rule.steps} | {rule.floor} | {compared} | {hold} | {rule.why} |"
        )
    return "\n".join(rows)


PACES = (("0.25 s (the demo)", 0.25), ("30 s", 30.0), ("5 min", 300.0))
"""The step paces the runbooks' table of limits reads (the demo's 0.25 s steps, a small model's, a large one's)."""


def _human(total: float) -> str:
    """``5h20m``, ``45s``: a duration for people (to the minute above an hour)."""
    total = round(total)
    if total >= 3600:
        total = round(total / 60) * 60
    return duration(total)


def limits(rule: Alert, pace: float) -> tuple[str, int, float, float] | None:
    """At ``pace`` seconds a step: the smallest window ``rule`` judges, the steps it holds, the run's age from which it
    can be judged (the window, and the one it compares with, full) and from which it can fire (plus ``for:``); None
    when no window holds N steps at that pace."""
    judged = [
        w
        for w in rule.windows()
        if rule.steps <= seconds(w) / pace and (w == rule.floor or seconds(w) / pace < BAND * rule.steps)
    ]
    if not judged:
        return None
    w = judged[0]
    judged_from = (rule.lookback + 1) * seconds(w)
    return w, int(seconds(w) / pace), judged_from, judged_from + seconds(rule.hold_for(w))


def limits_table() -> str:
    """The runbooks' table of what each alert can do at three paces: its window (steps), and from which age of the
    run (steps) it can be judged and fire (docs/runbooks.md, "Windows by pace")."""
    head = " | ".join(f"{name} a step: window, judged from, fires from" for name, _ in PACES)
    rows = [f"| alert | {head} |", "|---|" + "---|" * len(PACES)]
    for rule in (*HEALTH_ALERTS, *AUDIT_ALERTS):
        name = f"`{rule.name}`" + (f" (`{rule.signal}`)" if rule.signal else "")
        cells = []
        for _, pace in PACES:
            found = limits(rule, pace)
            if found is None:
                cells.append("never (no window holds N steps)")
                continue
            w, held, judged, fires = found
            cells.append(
                f"{w} ({held} steps), {_human(judged)} ({int(judged / pace)}), {_human(fires)} ({int(fires / pace)})"
            )
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    """Write the files into ``argv[0]`` (default: prometheus/rules/); ``--tables``: print the runbooks' tables."""
    if argv == ["--tables"]:
        print(window_table(), limits_table(), sep="\n\n")
        return 0
    folder = Path(argv[0]) if argv else RULES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for name, render in FILES.items():
        (folder / name).write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
