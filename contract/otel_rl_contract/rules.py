"""The series Prometheus records from the contract's: every name a ``record:`` of ``prometheus/rules/*.yml`` writes,
and the per-run alert thresholds, each with what it holds.

The rules' own names follow Prometheus's ``level:metric:operations`` convention: ``rl:`` for a run's signals,
``otel_rl:`` for otel-rl's self-checks; each keeps the window in its last part (``:rate10m``), which alerts,
dashboards and runbooks name. A rule added to (or renamed in) a rules file is declared here too:
``tests/unit/test_contract_check.py`` names every ``record:`` missing from :data:`RECORDING_RULES` and every
declaration no rule records.

    >>> REWARD_MEAN_1M.name, STEP_UNCHANGED.kind
    ('rl:reward_mean:rate1m', 'gauge')
"""

from __future__ import annotations

from otel_rl_contract.prometheus import Series


def _rule(name: str, description: str) -> Series:
    """A recorded series (a gauge: one value per evaluation)."""
    return Series(name, "gauge", description)


# otel_rl.yml: the run's signals --------------------------------------------------------------------------------

REWARD_MEAN_1M = _rule(
    "rl:reward_mean:rate1m", "Mean reward per run and reward function over 1 minute, from the exact counters."
)
REWARD_MEAN_10M = _rule(
    "rl:reward_mean:rate10m", "Mean reward per run and reward function over 10 minutes: RLRewardCollapse's baseline."
)
REWARD_STDDEV_10M = _rule(
    "rl:reward_stddev:rate10m", "Standard deviation of the rewards per reward function over 10 minutes."
)
METRIC_MEAN_10M = _rule("rl:metric_mean:rate10m", "Mean of every rl.metric key over 10 minutes.")
STALENESS_MAX_1M = _rule("rl:staleness_max:max1m", "Exact maximum staleness over 1 minute.")
STALENESS_MIN_1M = _rule("rl:staleness_min:min1m", "Exact minimum staleness over 1 minute.")
STALENESS_P50_1M = _rule(
    "rl:staleness_p50:rate1m", "Median staleness over 1 minute, clamped to the minute's exact extremes."
)
STALENESS_P99_1M = _rule(
    "rl:staleness_p99:rate1m", "99th percentile of staleness over 1 minute, clamped to the minute's exact extremes."
)
IMPORTANCE_RATIO_MAX_5M = _rule("rl:importance_ratio_max:max5m", "Exact maximum importance ratio over 5 minutes.")
IMPORTANCE_RATIO_MIN_5M = _rule("rl:importance_ratio_min:min5m", "Exact minimum importance ratio over 5 minutes.")
IMPORTANCE_RATIO_P99_5M = _rule(
    "rl:importance_ratio_p99:rate5m", "99th percentile of the importance ratios over 5 minutes, clamped."
)
IMPORTANCE_RATIO_P1_5M = _rule(
    "rl:importance_ratio_p1:rate5m", "1st percentile of the importance ratios over 5 minutes, clamped."
)
IMPORTANCE_RATIO_ESS_5M = _rule(
    "rl:importance_ratio_ess:rate5m",
    "Effective sample size fraction of the importance ratios over 5 minutes, (Σr)² / (n Σr²), in (0, 1].",
)
MISMATCH_KL_MEAN_5M = _rule(
    "rl:mismatch_kl_mean:rate5m", "Mean per-token mismatch KL per rl.kl.estimator (k1, k3) over 5 minutes."
)
ENTROPY_MEAN_10M = _rule("rl:entropy_mean:rate10m", "Mean per-token policy entropy over 10 minutes.")
ZERO_VARIANCE_FRACTION_10M = _rule(
    "rl:groups_zero_variance_fraction:rate10m",
    "Share of the prompt groups of the last 10 minutes whose rewards were all equal.",
)
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

# otel_rl_audit.yml: the audit ------------------------------------------------------------------------------------

JOINT_10M = _rule(
    "rl:joint:increase10m", "Exact increase over 10 minutes of every rl.joint sum, by rl.joint.x and rl.joint.moment."
)
JOINT_N_10M = _rule("rl:joint_n:increase10m", "Rollouts paired per rl.joint.x over 10 minutes.")
JOINT_MEAN_X_10M = _rule("rl:joint_mean_x:rate10m", "Mean of each rl.joint.x over its paired rollouts, 10 minutes.")
JOINT_MEAN_Y_10M = _rule(
    "rl:joint_mean_y:rate10m", "Mean total reward over the rollouts paired with each rl.joint.x, 10 minutes."
)
JOINT_COVARIANCE_10M = _rule(
    "rl:joint_covariance:rate10m", "Covariance of each rl.joint.x with the total reward over 10 minutes."
)
JOINT_VARIANCE_X_10M = _rule("rl:joint_variance_x:rate10m", "Variance of each rl.joint.x over 10 minutes.")
JOINT_VARIANCE_Y_10M = _rule(
    "rl:joint_variance_y:rate10m", "Variance of the total reward over the rollouts paired with each rl.joint.x."
)
JOINT_CORRELATION_10M = _rule(
    "rl:joint_correlation:rate10m", "Pearson correlation of each rl.joint.x with the total reward, in [-1, 1]."
)
REWARD_VARIANCE_SHARE_10M = _rule(
    "rl:reward_variance_share:rate10m",
    "Each reward function's share of the total reward's variance over 10 minutes, by rl.reward.fn.",
)
REWARD_GROUND_TRUTH = _rule("rl:reward_ground_truth", "1 on the rl.reward.fn each run designates as its ground truth.")
DROPPED_RESPONSE_LENGTH_MEAN_10M = _rule(
    "rl:dropped_response_length_mean:rate10m", "Mean response length of the rollouts dropped as too stale, 10 minutes."
)
RESPONSE_LENGTH_MEAN_10M = _rule(
    "rl:response_length_mean:rate10m", "Mean response length of the trained rollouts over 10 minutes."
)
STALE_DROP_FRACTION_10M = _rule(
    "rl:stale_drop_fraction:rate10m", "Rollouts dropped as too stale per rollout trained over 10 minutes."
)

# otel_rl_collector.yml: the collector ----------------------------------------------------------------------------

MERGE_CANARY_MISPLACED = _rule(
    "otel_rl:merge_canary_misplaced:ratio",
    "Fraction of the merge canary's counts outside its buckets: 0 when the collector merged exactly "
    "(OtelRLInexactMerge).",
)

RECORDING_RULES: tuple[Series, ...] = (
    REWARD_MEAN_1M,
    REWARD_MEAN_10M,
    REWARD_STDDEV_10M,
    METRIC_MEAN_10M,
    STALENESS_MAX_1M,
    STALENESS_MIN_1M,
    STALENESS_P50_1M,
    STALENESS_P99_1M,
    IMPORTANCE_RATIO_MAX_5M,
    IMPORTANCE_RATIO_MIN_5M,
    IMPORTANCE_RATIO_P99_5M,
    IMPORTANCE_RATIO_P1_5M,
    IMPORTANCE_RATIO_ESS_5M,
    MISMATCH_KL_MEAN_5M,
    ENTROPY_MEAN_10M,
    ZERO_VARIANCE_FRACTION_10M,
    VALUES_RECORDED_10M,
    VALUES_COUNTED_10M,
    VALUES_MISSING_10M,
    ALERT_THRESHOLD,
    ALERT_THRESHOLD_OVERRIDE,
    STEP_UNCHANGED,
    PHASE_OPEN,
    PHASE_DURATION_P99_1H,
    PHASE_STUCK_THRESHOLD,
    JOINT_10M,
    JOINT_N_10M,
    JOINT_MEAN_X_10M,
    JOINT_MEAN_Y_10M,
    JOINT_COVARIANCE_10M,
    JOINT_VARIANCE_X_10M,
    JOINT_VARIANCE_Y_10M,
    JOINT_CORRELATION_10M,
    REWARD_VARIANCE_SHARE_10M,
    REWARD_GROUND_TRUTH,
    DROPPED_RESPONSE_LENGTH_MEAN_10M,
    RESPONSE_LENGTH_MEAN_10M,
    STALE_DROP_FRACTION_10M,
    MERGE_CANARY_MISPLACED,
)
"""Every series a rules file records, in the order of the files (``rl_alert_threshold_override`` is recorded by the
operator's own rules, ``otel_rl_thresholds.yml``)."""
