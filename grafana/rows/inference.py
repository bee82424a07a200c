"""Row "Inference engines": the run's vLLM and SGLang servers, scraped by the collector's inference overlay
(collector_config/inference.yaml) with the run's identity: queue and running requests, KV-cache use, time to first
token and per output token, generation throughput. One line per server (``instance``); each query reads vLLM's
names, older vLLM's and SGLang's in one expression (:func:`otel_rl_ops.promql.either`)."""

from __future__ import annotations

from otel_rl_contract import foreign
from otel_rl_ops import promql

from rows.panels import RUN, WINDOW, Row, prom, series

WAITING = (foreign.VLLM_REQUESTS_WAITING, foreign.SGLANG_QUEUE_REQUESTS)
RUNNING = (foreign.VLLM_REQUESTS_RUNNING, foreign.SGLANG_RUNNING_REQUESTS)
KV_CACHE = (foreign.VLLM_KV_CACHE_USAGE, foreign.VLLM_GPU_CACHE_USAGE, foreign.SGLANG_TOKEN_USAGE)
"""vLLM 0.10 renamed gpu_cache_usage_perc to kv_cache_usage_perc; SGLang's token usage is its KV pool's share."""
TTFT = (foreign.VLLM_TIME_TO_FIRST_TOKEN, foreign.SGLANG_TIME_TO_FIRST_TOKEN)
TPOT = (foreign.VLLM_INTER_TOKEN_LATENCY, foreign.VLLM_TIME_PER_OUTPUT_TOKEN, foreign.SGLANG_TIME_PER_OUTPUT_TOKEN)
"""vLLM's inter-token latency replaced its time per output token (deprecated in 0.10); SGLang's own name."""
GENERATED = (foreign.VLLM_GENERATION_TOKENS, foreign.SGLANG_GENERATION_TOKENS)


def row() -> Row:
    """The inference-engines row."""
    requests = series(
        55,
        "Inference: waiting and running requests",
        "Requests queued and running per inference server (vLLM num_requests_waiting/running, SGLang "
        "num_queue_reqs/num_running_reqs). A growing queue with a full KV cache: generation is the bottleneck.",
        "short",
        "requests",
        prom("A", promql.either(WAITING, RUN), "waiting {{instance}}"),
        prom("B", promql.either(RUNNING, RUN), "running {{instance}}"),
    ).min(0)
    kv_cache = (
        series(
            56,
            "Inference: KV-cache use",
            "Share of each server's KV cache in use (vLLM kv_cache_usage_perc, before 0.10 gpu_cache_usage_perc; "
            "SGLang "
            "token_usage). Near 1: requests are preempted or wait.",
            "percentunit",
            "of the KV cache",
            prom("A", promql.either(KV_CACHE, RUN), "{{instance}}"),
        )
        .min(0)
        .max(1)
    )
    ttft = series(
        57,
        "Inference: time to first token",
        "p50 and p99 of the time from a request's arrival to its first token, per server, interpolated in the "
        "engine's buckets.",
        "s",
        "seconds",
        prom("A", promql.either_quantile(0.5, TTFT, RUN, window=WINDOW), "p50 {{instance}}"),
        prom("B", promql.either_quantile(0.99, TTFT, RUN, window=WINDOW), "p99 {{instance}}"),
    ).min(0)
    tpot = series(
        58,
        "Inference: time per output token",
        "p50 and p99 of the time between output tokens (vLLM inter_token_latency_seconds, before 0.10 "
        "time_per_output_token_seconds; SGLang time_per_output_token_seconds), per server.",
        "s",
        "seconds",
        prom("A", promql.either_quantile(0.5, TPOT, RUN, window=WINDOW), "p50 {{instance}}"),
        prom("B", promql.either_quantile(0.99, TPOT, RUN, window=WINDOW), "p99 {{instance}}"),
    ).min(0)
    throughput = series(
        59,
        "Inference: generated tokens per second",
        "Tokens the servers generated per second (generation_tokens_total), per server; compare with the trainer's "
        "tokens per second above.",
        "short",
        "tokens / s",
        prom("A", promql.either_rate(GENERATED, RUN, window=WINDOW), "{{instance}}"),
    ).min(0)
    return Row(
        "Inference engines",
        54,
        (
            requests.span(8).height(7),
            kv_cache.span(8).height(7),
            throughput.span(8).height(7),
            ttft.span(12).height(7),
            tpot.span(12).height(7),
        ),
    )
