"""The series Prometheus records from the contract's: every name a ``record:`` of ``prometheus/rules/*.yml`` writes,
and the per-run alert thresholds, each with what it holds.

The rules' own names follow Prometheus's ``level:metric:operations`` convention: ``rl:`` for a run's signals,
``otel_rl:`` for otel-rl's self-checks; each keeps the window in its last part (``:rate10m``), which alerts,
dashboards and runbooks name. The statistics whose windows must hold steps are recorded over every window of the
ladder :data:`WINDOWS` from their floor on (:class:`Windowed`: windows by pace, ``prometheus/generate.py``, which
takes their names from here). A rule added to (or renamed in) a rules file is declared here too:
``tests/unit/test_contract_check.py`` names every ``record:`` missing from :data:`RECORDING_RULES` and every
declaration no rule records.

    >>> REWARD_MEAN.at("1m").name, STEP_UNCHANGED.kind, STALENESS_P99.windows[0]
    ('rl:reward_mean:rate1m', 'gauge', '1m')
"""

from __future__ import annotations

from dataclasses import dataclass

from otel_rl_contract.prometheus import Series

WINDOWS: tuple[str, ...] = ("15s", "30s", "1m", "2m", "5m", "10m", "20m", "40m", "80m", "160m", "320m", "640m")
"""The ladder of windows the step-holding statistics are recorded over: 15 s is the rules' evaluation interval
(three collector flushes of 5 s); 640 minutes holds 20 steps of 32 minutes. Each is about double the one before,
so at any step pace one or two windows hold N to 3N steps (docs/runbooks.md, "Windows by pace")."""

WINDOW_LABEL = "window"
"""The label by which an alert judged over each window of the ladder tells its rules apart (``window="5m"``): one
alert, whichever window holds enough steps at the run's pace; as a run's pace changes (or it ends and its narrow
windows empty) the same alert moves from one window's rule to the next."""


def _rule(name: str, description: str) -> Series:
    """A recorded series (a gauge: one value per evaluation)."""
    return Series(name, "gauge", description)


@dataclass(frozen=True)
class Windowed:
    """A statistic recorded over each window of :data:`WINDOWS` from ``floor`` on: one series per window, named by
    ``pattern`` with the window in place of ``{w}`` (``rl:reward_mean:rate{w}``)."""

    pattern: str
    description: str
    """What it holds, with ``{w}`` for the window."""
    floor: str = WINDOWS[0]
    """The smallest window it is recorded over."""

    def __post_init__(self) -> None:
        if "{w}" not in self.pattern or self.floor not in WINDOWS:
            raise ValueError(
                f'"pattern" needs {{w}} and "floor" one of {WINDOWS}, got {self.pattern!r}, {self.floor!r}'
            )

    @property
    def windows(self) -> tuple[str, ...]:
        """The windows it is recorded over, smallest first."""
        return WINDOWS[WINDOWS.index(self.floor) :]

    def at(self, window: str) -> Series:
        """Its series over ``window``.

        Raises:
            ValueError: when it is not recorded over ``window``.
        """
        if window not in self.windows:
            raise ValueError(f'"window" of {self.pattern!r} must be one of {self.windows}, got {window!r}')
        return _rule(self.pattern.format(w=window), self.description.format(w=window))

    @property
    def series(self) -> tuple[Series, ...]:
        """Its series over every window it is recorded over."""
        return tuple(self.at(window) for window in self.windows)


# otel_rl_windows.yml: the statistics whose windows hold steps (windows by pace) ---------------------------------

WINDOW_STEPS = Windowed(
    "rl:window_steps:increase{w}",
    "Steps the run started in the last {w} (from rl_step, or {w} over the run's stated step_seconds): which windows "
    "an alert judges.",
)
REWARD_MEAN = Windowed("rl:reward_mean:rate{w}", "Mean reward per run and reward function over {w}.")
REWARD_STDDEV = Windowed("rl:reward_stddev:rate{w}", "Standard deviation of the reward per function over {w}.")
ENTROPY_MEAN = Windowed("rl:entropy_mean:rate{w}", "Mean per-token policy entropy over {w}.")
ZERO_VARIANCE_FRACTION = Windowed(
    "rl:groups_zero_variance_fraction:rate{w}", "Share of the prompt groups of the last {w} whose rewards were equal."
)
MISMATCH_KL_MEAN = Windowed(
    "rl:mismatch_kl_mean:rate{w}", "Mean per-token mismatch KL per rl.kl.estimator (k1, k3) over {w}."
)
STALENESS_MAX = Windowed("rl:staleness_max:max{w}", "Exact maximum staleness over {w}.", "1m")
STALENESS_MIN = Windowed("rl:staleness_min:min{w}", "Exact minimum staleness over {w}.", "1m")
STALENESS_P99 = Windowed(
    "rl:staleness_p99:rate{w}", "99th percentile of staleness over {w}, clamped to its exact extremes.", "1m"
)
STALENESS_P50_1M = _rule(
    "rl:staleness_p50:rate1m", "Median staleness over 1 minute (the dashboards' quick look), clamped as the p99."
)
IMPORTANCE_RATIO_MAX = Windowed("rl:importance_ratio_max:max{w}", "Exact maximum importance ratio over {w}.", "5m")
IMPORTANCE_RATIO_MIN = Windowed("rl:importance_ratio_min:min{w}", "Exact minimum importance ratio over {w}.", "5m")
IMPORTANCE_RATIO_P99 = Windowed(
    "rl:importance_ratio_p99:rate{w}", "99th percentile of the importance ratios over {w}, clamped.", "5m"
)
IMPORTANCE_RATIO_P1 = Windowed(
    "rl:importance_ratio_p1:rate{w}", "1st percentile of the importance ratios over {w}, clamped.", "5m"
)
IMPORTANCE_RATIO_ESS = Windowed(
    "rl:importance_ratio_ess:rate{w}",
    "Effective sample size fraction of the importance ratios over {w}, (Σr)² / (n Σr²), in (0, 1].",
    "5m",
)
JOINT = Windowed(
    "rl:joint:increase{w}", "Exact increase over {w} of every rl.joint sum, by rl.joint.x and rl.joint.moment."
)
JOINT_N = Windowed("rl:joint_n:increase{w}", "Rollouts paired per rl.joint.x over {w}.")
JOINT_MEAN_X = Windowed("rl:joint_mean_x:rate{w}", "Mean of each rl.joint.x over its paired rollouts, {w}.")
JOINT_MEAN_Y = Windowed(
    "rl:joint_mean_y:rate{w}", "Mean total reward over the rollouts paired with each rl.joint.x, {w}."
)
JOINT_COVARIANCE = Windowed(
    "rl:joint_covariance:rate{w}", "Covariance of each rl.joint.x with the total reward over {w}."
)
JOINT_VARIANCE_X = Windowed("rl:joint_variance_x:rate{w}", "Variance of each rl.joint.x over {w}.")
JOINT_VARIANCE_Y = Windowed(
    "rl:joint_variance_y:rate{w}", "Variance of the total reward over the rollouts paired with each rl.joint.x."
)
JOINT_CORRELATION = Windowed(
    "rl:joint_correlation:rate{w}", "Pearson correlation of each rl.joint.x with the total reward over {w}."
)
REWARD_VARIANCE_SHARE = Windowed(
    "rl:reward_variance_share:rate{w}", "Each reward function's share of the total reward's variance over {w}."
)
DROPPED_RESPONSE_LENGTH_MEAN = Windowed(
    "rl:dropped_response_length_mean:rate{w}", "Mean response length of the rollouts dropped as too stale, {w}."
)
RESPONSE_LENGTH_MEAN = Windowed(
    "rl:response_length_mean:rate{w}", "Mean response length of the trained rollouts over {w}."
)
STALE_DROP_FRACTION = Windowed(
    "rl:stale_drop_fraction:rate{w}", "Rollouts dropped as too stale per rollout trained over {w}."
)
REWARD_GROUND_TRUTH = _rule("rl:reward_ground_truth", "1 on the rl.reward.fn each run designates as its ground truth.")
WINDOWED: tuple[Windowed, ...] = (
    WINDOW_STEPS,
    REWARD_MEAN,
    REWARD_STDDEV,
    ENTROPY_MEAN,
    ZERO_VARIANCE_FRACTION,
    MISMATCH_KL_MEAN,
    STALENESS_MAX,
    STALENESS_MIN,
    STALENESS_P99,
    IMPORTANCE_RATIO_MAX,
    IMPORTANCE_RATIO_MIN,
    IMPORTANCE_RATIO_P99,
    IMPORTANCE_RATIO_P1,
    IMPORTANCE_RATIO_ESS,
    JOINT,
    JOINT_N,
    JOINT_MEAN_X,
    JOINT_MEAN_Y,
    JOINT_COVARIANCE,
    JOINT_VARIANCE_X,
    JOINT_VARIANCE_Y,
    JOINT_CORRELATION,
    REWARD_VARIANCE_SHARE,
    DROPPED_RESPONSE_LENGTH_MEAN,
    RESPONSE_LENGTH_MEAN,
    STALE_DROP_FRACTION,
)
"""Every statistic recorded per window, in the order the generator writes them."""

# otel_rl.yml: the run's other signals and self-checks -------------------------------------------------------

METRIC_MEAN_10M = _rule("rl:metric_mean:rate10m", "Mean of every rl.metric key over 10 minutes.")
VALUES_RECORDED_10M = _rule(
    "otel_rl:histogram_values_recorded:increase10m",
    "Values the ranks folded into each histogram over 10 minutes, per otel_rl.metric (otel_rl.values.recorded).",
)
VALUES_COUNTED_10M = _rule(
    "otel_rl:histogram_values_counted:increase10m",
    "Values the same histograms count in Prometheus over 10 minutes, per otel_rl.metric.",
)
VALUES_MISSING_10M = _rule(
    "otel_rl:histogram_values_missing:increase10m",
    "Recorded minus counted: values whose histogram points were lost on the way (OtelRLHistogramPointsDropped).",
)
ALERT_THRESHOLD = _rule(
    "rl_alert_threshold",
    "Each run's effective alert thresholds, one series per rl_run_id and threshold: the run's override, else the "
    "default.",
)
ALERT_THRESHOLD_OVERRIDE = _rule(
    "rl_alert_threshold_override",
    "A per-run threshold the operator records in otel_rl_thresholds.yml (labels rl_run_id and threshold); read by "
    "rl_alert_threshold.",
)
STEP_UNCHANGED = _rule("rl:step_unchanged_seconds", "Seconds since rl_step last changed, to 15 s (RLTrainerStalled).")
PHASE_OPEN = _rule("rl:phase_open_seconds", "How long the run has been in each phase it is in now, per rl.phase.name.")
PHASE_DURATION_P99_1H = _rule(
    "rl:phase_duration_p99:rate1h", "Each phase's p99 duration over the last hour of its phase spans."
)
PHASE_STUCK_THRESHOLD = _rule(
    "rl:phase_stuck_threshold_seconds",
    "How long each open phase may last: a multiple of its recent p99, at least a floor (RLPhaseStuck).",
)

# otel_rl_collector.yml: the collector ----------------------------------------------------------------------------

MERGE_CANARY_MISPLACED = _rule(
    "otel_rl:merge_canary_misplaced:ratio",
    "Fraction of the merge canary's counts outside its buckets: 0 when the collector merged exactly "
    "(OtelRLInexactMerge).",
)

RECORDING_RULES: tuple[Series, ...] = (
    *(series for statistic in WINDOWED for series in statistic.series),
    STALENESS_P50_1M,
    REWARD_GROUND_TRUTH,
    METRIC_MEAN_10M,
    VALUES_RECORDED_10M,
    VALUES_COUNTED_10M,
    VALUES_MISSING_10M,
    ALERT_THRESHOLD,
    ALERT_THRESHOLD_OVERRIDE,
    STEP_UNCHANGED,
    PHASE_OPEN,
    PHASE_DURATION_P99_1H,
    PHASE_STUCK_THRESHOLD,
    MERGE_CANARY_MISPLACED,
)
"""Every series a rules file records (``rl_alert_threshold_override`` is recorded by the operator's own rules,
``otel_rl_thresholds.yml``)."""
