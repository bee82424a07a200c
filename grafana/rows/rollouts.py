"""Row "Rollout health": what ``record_rollouts`` measured (advantages, lengths, entropy, the trainer/inference
importance ratio and mismatch KL, prompt-group outcomes, advantage signs)."""

from __future__ import annotations

import otel_rl_contract as contract
from grafana_foundation_sdk.builders import prometheus
from otel_rl_contract import Distribution
from otel_rl_ops import promql

from rows.panels import GROUP_OUTCOME, KL_ESTIMATOR, RUN, SIGN, WINDOW, Row, legend, prom, series, stacked

ZERO_VARIANCE_FRACTION = promql.fraction(
    contract.series(contract.GROUPS_ZERO_VARIANCE), contract.series(contract.GROUPS), RUN, window=WINDOW
)
"""The share of the interval's prompt groups whose rewards are all equal, from record_rollouts' exact counters (the
source of RLRewardCollapse's zero-variance signal and of RLZeroVarianceGroupsHigh)."""


def _percentiles(
    values: Distribution, quantiles: tuple[float, ...], *, first: str = "B", integers: bool = False
) -> list[prometheus.Dataquery]:
    """Queries ``first``, ... of the ``quantiles`` of ``values`` over the interval, clamped, legends ``p10``, ...."""
    return [
        prom(chr(ord(first) + i), promql.quantile(q, values, RUN, window=WINDOW, integers=integers), f"p{q * 100:g}")
        for i, q in enumerate(quantiles)
    ]


def row() -> Row:
    """The rollout-health row."""
    advantage = series(
        26,
        "Advantage: mean and percentiles",
        "Per rollout (rl_advantage). Mean from the exact counters; p10/p50/p90 from the histogram, clamped to the "
        "exact min and max of the interval. A mean far from 0 or a collapsing spread: check the baseline and the "
        "advantage normalization.",
        "none",
        "advantage",
        prom("A", promql.mean(contract.ADVANTAGES, RUN, window=WINDOW), "mean"),
        *_percentiles(contract.ADVANTAGES, (0.1, 0.5, 0.9)),
    )
    length = series(
        27,
        "Response length: mean and percentiles",
        "Tokens per response (rl_response_length). Mean from the exact counters; p50/p90/p99 clamped to the "
        "exact min and max. A p99 at the generation limit: responses are truncated. 'mean (reported)': the mean a "
        "trainer sends alone (NeMo Lens).",
        "none",
        "tokens",
        prom("A", promql.mean(contract.RESPONSE_LENGTHS, RUN, window=WINDOW), "mean"),
        *_percentiles(contract.RESPONSE_LENGTHS, (0.5, 0.9, 0.99), integers=True),
        prom("E", promql.reported(RUN, "response_length/mean"), "mean (reported)"),
    ).min(0)
    entropy = series(
        28,
        "Entropy per token: mean and percentiles",
        "Policy entropy per unmasked token (rl_entropy, nats). Mean from the exact counters; p10/p50/p90 clamped "
        "to the exact min and max. A mean falling towards 0: entropy collapse, exploration is gone "
        "(RLEntropyCollapse). 'mean (reported)': the mean a trainer sends alone (NeMo Lens).",
        "none",
        "nats",
        prom("A", promql.mean(contract.ENTROPY, RUN, window=WINDOW), "mean"),
        *_percentiles(contract.ENTROPY, (0.1, 0.5, 0.9)),
        prom("E", promql.reported(RUN, "entropy/mean"), "mean (reported)"),
    ).min(0)
    ratio = series(
        29,
        "Importance ratio π_train / π_inference (per token)",
        "rl_importance_ratio = exp(trainer log-prob − inference log-prob) per token: p1/p50/p99 clamped to the "
        "exact min and max. 1 when the inference engine and the trainer agree; tails far from 1 mean a "
        "trainer/inference mismatch (RLImportanceRatioHigh).",
        "none",
        "ratio",
        *_percentiles(contract.IMPORTANCE_RATIO, (0.01, 0.5, 0.99), first="A"),
    )
    mismatch = series(
        30,
        "Mismatch KL(π_inference ‖ π_train): mean per estimator",
        "Mean per token of rl_mismatch_kl by rl_kl_estimator (k1 = −log r, unbiased, can be negative per token; "
        "k3 = (r − 1) − log r, never negative), from the exact counters (RLMismatchKLHigh watches k3).",
        "none",
        "nats per token",
        prom("A", promql.mean(contract.MISMATCH_KL, RUN, by=KL_ESTIMATOR, window=WINDOW), legend(KL_ESTIMATOR)),
    )
    ess = (
        series(
            31,
            "Effective sample size fraction",
            "(Σr)² / (n·Σr²) of the interval's importance ratios r, from the exact counters: 1 when all tokens weigh "
            "the same, towards 0 when a few tokens carry the importance weights (RLEffectiveSampleSizeLow).",
            "percentunit",
            "fraction of tokens",
            prom("A", promql.effective_sample_size(contract.IMPORTANCE_RATIO, RUN, window=WINDOW), "ESS / n"),
        )
        .min(0)
        .max(1)
    )
    groups = (
        series(
            32,
            "Prompt groups: outcome and zero variance",
            "Share of the interval's prompt groups whose rollouts were solved by none, some or all of them "
            "(rl_groups_total), and of groups whose rewards are all equal (rl_groups_zero_variance_total: no GRPO "
            "signal, RLZeroVarianceGroupsHigh). Exact ratios of counter increases.",
            "percentunit",
            "fraction of groups",
            prom(
                "A",
                promql.share(contract.series(contract.GROUPS), GROUP_OUTCOME, RUN, window=WINDOW),
                f"{legend(GROUP_OUTCOME)} solved",
            ),
            prom("B", ZERO_VARIANCE_FRACTION, "zero variance"),
        )
        .min(0)
        .max(1)
    )
    signs = stacked(
        series(
            33,
            "Advantage sign shares",
            "Share of the interval's rollouts with a positive, negative or zero advantage (rl_advantage_sign_total). "
            "Mostly zero: groups without signal; lopsided: a biased baseline.",
            "percentunit",
            "fraction of rollouts",
            prom("A", promql.share(contract.series(contract.ADVANTAGE_SIGNS), SIGN, RUN, window=WINDOW), legend(SIGN)),
        )
        .min(0)
        .max(1)
    )
    return Row(
        "Rollout health",
        25,
        (
            advantage.span(8).height(8),
            length.span(8).height(8),
            entropy.span(8).height(8),
            ratio.span(8).height(8),
            mismatch.span(8).height(8),
            ess.span(8).height(8),
            groups.span(12).height(8),
            signs.span(12).height(8),
        ),
    )
