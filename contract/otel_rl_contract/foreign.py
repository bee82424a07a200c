"""The series otel-rl reads on purpose that other programs name: the collector's own metrics, Prometheus's alert and
scrape series, the inference engines' metrics, VictoriaLogs' own, and the NeMo Lens metric names the collector maps.

otel-rl cannot rename these; declaring them here gives the rules, dashboards, tooling and tests one spelling each,
and lets ``tests/unit/test_contract_check.py`` tell a name read on purpose from a typo.

The collector's own metrics (``otelcol_*``, scraped by the stack's Prometheus as job ``otelcol``) are named as the
collector emits them and as Prometheus 3 stores them: dots kept, no ``_total`` (measured on the collector this project
builds, v0.161.0). Its ``/metrics`` text for a scraper that asks for no UTF-8 names escapes the dots
(:func:`text_name`), and a collector whose Prometheus exporter adds type suffixes ends its counters with ``_total``:
the rules match every spelling (:func:`spellings`).

    >>> COLLECTOR_POINTS_REJECTED.name, VLLM_TIME_TO_FIRST_TOKEN.bucket
    ('otelcol_otel_rl_points_rejected', 'vllm:time_to_first_token_seconds_bucket')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from otel_rl_contract.prometheus import Series

# The collector's own metrics ---------------------------------------------------------------------------------------

COLLECTOR_POINTS_REJECTED = Series(
    "otelcol_otel_rl_points_rejected",
    "counter",
    "Points otel-rl's processors dropped (pointcheck, runbudget, lens), by rl_run_id, metric and reason "
    "(collector_config/processors/rejections): OtelRLRejectedPoints.",
)
COLLECTOR_FILTERED_POINTS = Series(
    "otelcol_processor_filter_datapoints.filtered",
    "counter",
    "Data points a filter processor dropped, by filter (filter/contract, filter/rank_streams, filter/run_streams: "
    "OtelRLCollectorCapHit).",
)
COLLECTOR_FILTERED_RECORDS = Series(
    "otelcol_processor_filter_logs.filtered",
    "counter",
    "Log records a filter processor dropped, by filter (filter/oversized_records: OtelRLCollectorCapHit).",
)
COLLECTOR_DELTA_TO_CUMULATIVE_POINTS = Series(
    "otelcol_deltatocumulative_datapoints",
    "counter",
    'Points delta_to_cumulative processed, by error (error="limit": streams beyond OTEL_RL_MAX_STREAMS were '
    "dropped: OtelRLCollectorCapHit).",
)
COLLECTOR_REFUSED_METRIC_POINTS = Series(
    "otelcol_receiver_refused_metric_points",
    "counter",
    "Metric points a receiver refused (the memory limiter's back-pressure).",
)
COLLECTOR_LOG_RECORDS_SEND_FAILED = Series(
    "otelcol_exporter_send_failed_log_records",
    "counter",
    "Log records an exporter failed to send after its retries (samples lost on the way to VictoriaLogs).",
)
COLLECTOR_LOG_RECORDS_ENQUEUE_FAILED = Series(
    "otelcol_exporter_enqueue_failed_log_records",
    "counter",
    "Log records an exporter could not queue (its sending queue was full).",
)

COLLECTOR_METRICS: tuple[Series, ...] = (
    COLLECTOR_POINTS_REJECTED,
    COLLECTOR_FILTERED_POINTS,
    COLLECTOR_FILTERED_RECORDS,
    COLLECTOR_DELTA_TO_CUMULATIVE_POINTS,
    COLLECTOR_REFUSED_METRIC_POINTS,
    COLLECTOR_LOG_RECORDS_SEND_FAILED,
    COLLECTOR_LOG_RECORDS_ENQUEUE_FAILED,
)
"""The collector's own metrics otel-rl reads."""


def text_name(metric: Series) -> str:
    """The name of one of the collector's own metrics in its ``/metrics`` text for a scraper without UTF-8 names
    (the tests' ``requests.get``, Prometheus 2): every character outside ``[a-zA-Z0-9_:]`` as ``_``.

    >>> text_name(COLLECTOR_FILTERED_POINTS)
    'otelcol_processor_filter_datapoints_filtered'
    """
    return re.sub(r"[^a-zA-Z0-9_:]", "_", metric.name)


def spellings(metric: Series) -> frozenset[str]:
    """Every name one of the collector's own metrics may reach a reader under: as stored (dots kept) and escaped
    (:func:`text_name`), a counter each also with ``_total`` (a collector whose exporter adds type suffixes).

    >>> sorted(spellings(COLLECTOR_FILTERED_RECORDS))  # doctest: +NORMALIZE_WHITESPACE
    ['otelcol_processor_filter_logs.filtered', 'otelcol_processor_filter_logs.filtered_total',
     'otelcol_processor_filter_logs_filtered', 'otelcol_processor_filter_logs_filtered_total']
    """
    names = {metric.name, text_name(metric)}
    return frozenset(names | {f"{name}_total" for name in names} if metric.kind == "counter" else names)


# Prometheus's own series -------------------------------------------------------------------------------------------

ALERTS = Series(
    "ALERTS",
    "gauge",
    "One series per pending or firing alert (labels alertname, alertstate and the alert's), from the rule evaluator.",
)
ALERTS_FOR_STATE = Series(
    "ALERTS_FOR_STATE", "gauge", "The Unix time each pending or firing alert became active (its `for` clock)."
)
UP = Series("up", "gauge", "1 while a scrape target answers, 0 when it does not, per job and instance.")

# The inference engines (collector_config/inference.yaml scrapes them, keeping their own names) ------------------

VLLM_REQUESTS_WAITING = Series("vllm:num_requests_waiting", "gauge", "vLLM: requests waiting in its queue.")
VLLM_REQUESTS_RUNNING = Series("vllm:num_requests_running", "gauge", "vLLM: requests being generated.")
VLLM_KV_CACHE_USAGE = Series("vllm:kv_cache_usage_perc", "gauge", "vLLM (0.10 on): share of the KV cache in use.")
VLLM_GPU_CACHE_USAGE = Series(
    "vllm:gpu_cache_usage_perc", "gauge", "vLLM before 0.10: share of the KV cache in use (kv_cache_usage_perc since)."
)
VLLM_TIME_TO_FIRST_TOKEN = Series(
    "vllm:time_to_first_token_seconds", "histogram", "vLLM: seconds from a request's arrival to its first token."
)
VLLM_INTER_TOKEN_LATENCY = Series(
    "vllm:inter_token_latency_seconds", "histogram", "vLLM (0.10 on): seconds between output tokens."
)
VLLM_TIME_PER_OUTPUT_TOKEN = Series(
    "vllm:time_per_output_token_seconds",
    "histogram",
    "vLLM before 0.10: seconds between output tokens (inter_token_latency_seconds since).",
)
VLLM_GENERATION_TOKENS = Series("vllm:generation_tokens_total", "counter", "vLLM: tokens generated.")
SGLANG_QUEUE_REQUESTS = Series("sglang:num_queue_reqs", "gauge", "SGLang: requests waiting in its queue.")
SGLANG_RUNNING_REQUESTS = Series("sglang:num_running_reqs", "gauge", "SGLang: requests being generated.")
SGLANG_TOKEN_USAGE = Series("sglang:token_usage", "gauge", "SGLang: share of its KV pool in use.")
SGLANG_TIME_TO_FIRST_TOKEN = Series(
    "sglang:time_to_first_token_seconds", "histogram", "SGLang: seconds from a request's arrival to its first token."
)
SGLANG_TIME_PER_OUTPUT_TOKEN = Series(
    "sglang:time_per_output_token_seconds", "histogram", "SGLang: seconds between output tokens."
)
SGLANG_GENERATION_TOKENS = Series("sglang:generation_tokens_total", "counter", "SGLang: tokens generated.")

# VictoriaLogs' own metrics -----------------------------------------------------------------------------------------

VICTORIALOGS_STORAGE_ROWS = Series(
    "vl_storage_rows", "gauge", "VictoriaLogs: rows stored, by type of part (storage/small, storage/big, inmemory)."
)

FOREIGN_SERIES: tuple[Series, ...] = (
    *COLLECTOR_METRICS,
    ALERTS,
    ALERTS_FOR_STATE,
    UP,
    VLLM_REQUESTS_WAITING,
    VLLM_REQUESTS_RUNNING,
    VLLM_KV_CACHE_USAGE,
    VLLM_GPU_CACHE_USAGE,
    VLLM_TIME_TO_FIRST_TOKEN,
    VLLM_INTER_TOKEN_LATENCY,
    VLLM_TIME_PER_OUTPUT_TOKEN,
    VLLM_GENERATION_TOKENS,
    SGLANG_QUEUE_REQUESTS,
    SGLANG_RUNNING_REQUESTS,
    SGLANG_TOKEN_USAGE,
    SGLANG_TIME_TO_FIRST_TOKEN,
    SGLANG_TIME_PER_OUTPUT_TOKEN,
    SGLANG_GENERATION_TOKENS,
    VICTORIALOGS_STORAGE_ROWS,
)
"""Every foreign series otel-rl reads."""

LENS_GAUGES: Mapping[str, str] = MappingProxyType(
    {
        "rl.reward.mean": "reward/mean",
        "rl.kl_divergence": "kl/mean",
        "rl.entropy": "entropy/mean",
        "rl.response_length.mean": "response_length/mean",
        "rl.policy_loss": "loss/policy",
        "rl.value_loss": "loss/value",
        "rl.grad_norm": "grad_norm",
        "rl.learning_rate": "learning_rate",
        "rl.throughput.tokens_per_sec": "throughput/tokens_per_sec",
    }
)
"""NeMo Lens's gauges (OpenTelemetry names, scope ``nemo.lens``) → the canonical ``rl.metric.key`` under which the
collector's ``transform/lens`` sends each as ``rl.reported``. ``rl.entropy`` is Lens's gauge there, not otel-rl's
histogram of the same name (a gauge of scope ``nemo.lens`` never reaches the merge as such)."""
