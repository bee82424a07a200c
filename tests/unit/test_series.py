"""The contract's Prometheus series, derived from each metric's name, kind and unit, are the names the real stack
writes: the names below are the union of the series the live golden tests read from Prometheus
(tests/pipeline/test_aggregation.py, test_health.py, test_quantiles.py, tests/traces/test_timeline.py)."""

from __future__ import annotations

import otel_rl_contract as contract

SEEN_IN_PROMETHEUS = {
    "otel_rl_export_failures_total",
    "otel_rl_export_unencodable_total",
    "otel_rl_merge_canary",
    "otel_rl_samples_dropped_total",
    "otel_rl_samples_exported_total",
    "otel_rl_spans_dropped_total",
    "otel_rl_spans_exported_total",
    "otel_rl_values_recorded_total",
    "otel_rl_values_rejected_total",
    "rl_advantage_sign_total",
    "rl_gpu_seconds_total",
    "rl_groups_total",
    "rl_groups_zero_variance_total",
    "rl_joint_total",
    "rl_phase",
    "rl_phase_calls_total",
    "rl_phase_duration_seconds_bucket",
    "rl_phase_started_seconds",
    "rl_policy_version",
    "rl_ranks_expected",
    "rl_ranks_up",
    "rl_reward_ground_truth",
    "rl_run_finished",
    "rl_run_start_time_seconds",
    "rl_staleness_dropped_total",
    "rl_staleness_unversioned_total",
    "rl_step",
    "rl_reward_exemplars",
    "rl_staleness_exemplars_bucket",
    *(
        f"rl_{name}{suffix}"
        for name in ("reward", "advantage", "response_length", "entropy", "importance_ratio", "mismatch_kl", "metric")
        for suffix in ("", "_bucket", "_count", "_sum", "_positive_total", "_negative_total", "_squares_total")
    ),
    *(f"rl_{name}{suffix}" for name in ("reward", "staleness", "metric") for suffix in ("_max", "_min")),
}


def test_every_series_seen_in_prometheus_is_derived_from_the_contract() -> None:
    """Each name the live tests read from Prometheus is one a metric of the contract yields, in one form or the other
    (histograms' exemplar carriers included)."""
    derived: set[str] = set()
    for metric in contract.ALL_METRICS:
        derived |= contract.series(metric).names("exponential") | contract.series(metric).names("explicit")
    for carrier in (contract.REWARDS, contract.STALENESS):
        exemplars = contract.exemplar_series(carrier.histogram)
        derived |= exemplars.names("exponential") | exemplars.names("explicit")
    assert sorted(SEEN_IN_PROMETHEUS - derived) == []


def test_units_and_kinds_make_the_suffixes() -> None:
    """Seconds, per-second rates and braces, ``_total`` once, and labels, as otlptranslator writes them."""
    assert contract.series(contract.GPU_SECONDS).name == "rl_gpu_seconds_total"  # the unit is in the name already
    assert contract.series(contract.RUN_START).name == "rl_run_start_time_seconds"
    assert contract.series(contract.FLOPS_PEAK).name == "rl_flops_peak_per_second"
    assert contract.series(contract.TOKENS_GENERATED).name == "rl_tokens_generated_total"  # {token}: no suffix
    assert contract.series(contract.RESPONSE_LENGTHS.histogram).names("explicit") == {
        "rl_response_length_bucket",
        "rl_response_length_count",
        "rl_response_length_sum",
    }
    ratio = contract.MetricName("x.share", "gauge", "1", "a ratio")
    assert contract.series(ratio).name == "x_share_ratio"
    assert contract.label(contract.RUN_ID) == "rl_run_id" and contract.label("9.lives") == "key_9_lives"
