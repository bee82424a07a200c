"""The Prometheus series the contract yields, pinned: each metric's (and exemplar carrier's) series name, derived
from its OpenTelemetry name, kind and unit as the collector's otlptranslator writes it. The golden list of the
project (STYLE 12): a change of any name is a deliberate edit here, and the live golden tests
(tests/pipeline/test_aggregation.py, test_health.py, test_quantiles.py, tests/traces/test_timeline.py) compare what
Prometheus holds with the contract's derivation, not with lists of their own."""

from __future__ import annotations

import otel_rl_contract as contract
import pytest

GOLDEN_SERIES = {
    "rl.reward": "rl_reward",
    "rl.reward.positive": "rl_reward_positive_total",
    "rl.reward.negative": "rl_reward_negative_total",
    "rl.reward.squares": "rl_reward_squares_total",
    "rl.reward.max": "rl_reward_max",
    "rl.reward.min": "rl_reward_min",
    "rl.staleness": "rl_staleness",
    "rl.staleness.max": "rl_staleness_max",
    "rl.staleness.min": "rl_staleness_min",
    "rl.policy.version": "rl_policy_version",
    "rl.step": "rl_step",
    "otel_rl.samples.exported": "otel_rl_samples_exported_total",
    "otel_rl.samples.dropped": "otel_rl_samples_dropped_total",
    "otel_rl.spans.exported": "otel_rl_spans_exported_total",
    "otel_rl.spans.dropped": "otel_rl_spans_dropped_total",
    "otel_rl.values.rejected": "otel_rl_values_rejected_total",
    "otel_rl.values.recorded": "otel_rl_values_recorded_total",
    "otel_rl.export.failures": "otel_rl_export_failures_total",
    "otel_rl.export.unencodable": "otel_rl_export_unencodable_total",
    "otel_rl.merge.canary": "otel_rl_merge_canary",
    "rl.metric": "rl_metric",
    "rl.metric.positive": "rl_metric_positive_total",
    "rl.metric.negative": "rl_metric_negative_total",
    "rl.metric.squares": "rl_metric_squares_total",
    "rl.metric.max": "rl_metric_max",
    "rl.metric.min": "rl_metric_min",
    "rl.advantage": "rl_advantage",
    "rl.advantage.positive": "rl_advantage_positive_total",
    "rl.advantage.negative": "rl_advantage_negative_total",
    "rl.advantage.squares": "rl_advantage_squares_total",
    "rl.advantage.max": "rl_advantage_max",
    "rl.advantage.min": "rl_advantage_min",
    "rl.response.length": "rl_response_length",
    "rl.response.length.positive": "rl_response_length_positive_total",
    "rl.response.length.negative": "rl_response_length_negative_total",
    "rl.response.length.squares": "rl_response_length_squares_total",
    "rl.response.length.max": "rl_response_length_max",
    "rl.response.length.min": "rl_response_length_min",
    "rl.entropy": "rl_entropy",
    "rl.entropy.positive": "rl_entropy_positive_total",
    "rl.entropy.negative": "rl_entropy_negative_total",
    "rl.entropy.squares": "rl_entropy_squares_total",
    "rl.entropy.max": "rl_entropy_max",
    "rl.entropy.min": "rl_entropy_min",
    "rl.importance_ratio": "rl_importance_ratio",
    "rl.importance_ratio.positive": "rl_importance_ratio_positive_total",
    "rl.importance_ratio.negative": "rl_importance_ratio_negative_total",
    "rl.importance_ratio.squares": "rl_importance_ratio_squares_total",
    "rl.importance_ratio.max": "rl_importance_ratio_max",
    "rl.importance_ratio.min": "rl_importance_ratio_min",
    "rl.mismatch.kl": "rl_mismatch_kl",
    "rl.mismatch.kl.positive": "rl_mismatch_kl_positive_total",
    "rl.mismatch.kl.negative": "rl_mismatch_kl_negative_total",
    "rl.mismatch.kl.squares": "rl_mismatch_kl_squares_total",
    "rl.mismatch.kl.max": "rl_mismatch_kl_max",
    "rl.mismatch.kl.min": "rl_mismatch_kl_min",
    "rl.groups": "rl_groups_total",
    "rl.groups.zero_variance": "rl_groups_zero_variance_total",
    "rl.advantage.sign": "rl_advantage_sign_total",
    "rl.staleness.unversioned": "rl_staleness_unversioned_total",
    "rl.staleness.dropped": "rl_staleness_dropped_total",
    "rl.run.start_time": "rl_run_start_time_seconds",
    "rl.run.finished": "rl_run_finished",
    "rl.ranks.up": "rl_ranks_up",
    "rl.ranks.expected": "rl_ranks_expected",
    "rl.phase": "rl_phase",
    "rl.phase.started": "rl_phase_started_seconds",
    "rl.phase.duration": "rl_phase_duration_seconds",
    "rl.phase.calls": "rl_phase_calls_total",
    "rl.tokens.generated": "rl_tokens_generated_total",
    "rl.tokens.trained": "rl_tokens_trained_total",
    "rl.samples.trained": "rl_samples_trained_total",
    "rl.flops.per_token": "rl_flops_per_token",
    "rl.flops.peak": "rl_flops_peak_per_second",
    "rl.queue.depth": "rl_queue_depth",
    "rl.rollouts.in_flight": "rl_rollouts_in_flight",
    "rl.buffer.used": "rl_buffer_used",
    "rl.buffer.capacity": "rl_buffer_capacity",
    "rl.reported": "rl_reported",
    "rl.trajectory.versions": "rl_trajectory_versions",
    "rl.trajectory.versions.max": "rl_trajectory_versions_max",
    "rl.trajectory.versions.min": "rl_trajectory_versions_min",
    "rl.dropped.response.length": "rl_dropped_response_length",
    "rl.dropped.response.length.max": "rl_dropped_response_length_max",
    "rl.dropped.response.length.min": "rl_dropped_response_length_min",
    "rl.dropped.staleness": "rl_dropped_staleness",
    "rl.dropped.staleness.max": "rl_dropped_staleness_max",
    "rl.dropped.staleness.min": "rl_dropped_staleness_min",
    "rl.joint": "rl_joint_total",
    "rl.reward.ground_truth": "rl_reward_ground_truth",
    "rl.gpu.seconds": "rl_gpu_seconds_total",
    "rl.gpu.hour_price": "rl_gpu_hour_price",
    "rl.reward.exemplars": "rl_reward_exemplars",
    "rl.staleness.exemplars": "rl_staleness_exemplars",
}
"""OpenTelemetry metric → its Prometheus series: a counter's or gauge's name, an exponential histogram's native
histogram; an explicit histogram writes ``_bucket``, ``_count`` and ``_sum`` under it."""


def test_the_contracts_series_are_the_golden_names() -> None:
    """Every series the contract derives (metrics and exemplar carriers) is the pinned name of its metric."""
    derived = {metric.name: contract.series(metric).name for metric in contract.ALL_METRICS}
    derived |= {
        f"{d.histogram.name}.exemplars": contract.exemplar_series(d.histogram).name for d in contract.EXEMPLAR_CARRIERS
    }
    assert derived == GOLDEN_SERIES
    assert [item.name for item in contract.DERIVED_SERIES] == list(GOLDEN_SERIES.values())


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


def test_the_histogram_forms_write_their_series() -> None:
    """A run's series in either form, with its exemplar carriers: the native histogram alone, or the classic
    ``_bucket``/``_count``/``_sum``; counters and gauges alike in both."""
    metrics = (contract.REWARDS.histogram, contract.GROUPS, contract.STEP)
    assert contract.prometheus_names(metrics, "exponential", exemplars=contract.EXEMPLAR_CARRIERS) == {
        "rl_reward",
        "rl_groups_total",
        "rl_step",
        "rl_reward_exemplars",
        "rl_staleness_exemplars",
    }
    assert contract.prometheus_names(metrics, "explicit") == {
        "rl_reward_bucket",
        "rl_reward_count",
        "rl_reward_sum",
        "rl_groups_total",
        "rl_step",
    }


def test_every_known_name_is_declared_once() -> None:
    """The catalog holds the derived, recorded and foreign names, the collector's own under every spelling; two
    declarations of one name are refused, naming it."""
    from otel_rl_contract import catalog

    known = contract.KNOWN_SERIES
    assert {"rl_reward_bucket", "rl:reward_mean:rate1m", "ALERTS", "vllm:num_requests_waiting"} <= set(known)
    for name in ("otelcol_processor_filter_datapoints.filtered", "otelcol_processor_filter_datapoints_filtered_total"):
        assert known[name] is contract.foreign.COLLECTOR_FILTERED_POINTS
    clash = contract.Series("rl_reward_count", "counter", "a counter named like a histogram's count")
    with pytest.raises(ValueError, match="'rl_reward_count' is declared twice"):
        catalog._by_name((contract.series(contract.REWARDS.histogram), clash))


def test_fixed_histogram_forms() -> None:
    """Phase durations are classic histograms and the merge canary a native one whatever the run's form; only a
    histogram can fix its form, and saying otherwise names the metric."""
    assert contract.prometheus_names((contract.PHASE_DURATION, contract.MERGE_CANARY), "exponential") == {
        "rl_phase_duration_seconds_bucket",
        "rl_phase_duration_seconds_count",
        "rl_phase_duration_seconds_sum",
        "otel_rl_merge_canary",
    }
    assert contract.prometheus_names((contract.MERGE_CANARY,), "explicit") == {"otel_rl_merge_canary"}
    with pytest.raises(ValueError, match=r'"form" of \'x\.y\' must be None for a gauge, got \'explicit\''):
        contract.MetricName("x.y", "gauge", "", "a gauge", form="explicit")


def test_only_signed_distributions_have_sums() -> None:
    """A signed distribution's exact sums are its positive, negative and squares counters; a distribution of counts
    has none, and asking for them names it."""
    assert contract.REWARDS.sums == (contract.REWARDS.positive, contract.REWARDS.negative, contract.REWARDS.squares)
    with pytest.raises(ValueError, match=r"'rl\.staleness' has no signed sums"):
        _ = contract.STALENESS.sums
