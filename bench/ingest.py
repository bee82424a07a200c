"""Items 1 and 2: the cost of ingesting one step's per-token tensors, against baselines and across sizes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from bench import baselines
from bench.timing import interleaved, median
from bench.workload import CURRENT_VERSION, Step, flat_values, make_rollouts, make_step
from otel_rl import Telemetry, TelemetryConfig

#: The targets: otel-rl's step at most 50x the floor, at least 2,000x faster than the OTel SDK loop and 20x faster
#: than TensorBoard's add_histogram (issue 6); 1M per-element rewards (1-D, exponential buckets) at most 10x the
#: floor and at least 10x faster than TensorBoard on the same values (issue 14); one record_rollouts call with
#: every field on the step's shape at most 100x the floor (issue 11).
TARGETS = {
    "step_vs_floor_max": 50.0,
    "otel_sdk_speedup_min": 2_000.0,
    "tensorboard_speedup_min": 20.0,
    "rewards_1d_vs_floor_max": 10.0,
    "tensorboard_speedup_1d_min": 10.0,
    "rollouts_vs_floor_max": 100.0,
}
#: Bytes summed to measure the read bandwidth: far larger than any cache.
_BANDWIDTH_BYTES = 256 << 20


def _telemetry(histogram: str = "exponential") -> Telemetry:
    return Telemetry(
        TelemetryConfig(run_id="bench", exporter="none", shutdown_timeout_s=1.0, histogram=histogram)  # type: ignore[arg-type]
    )


def _step_bytes(step: Step) -> int:
    """Bytes one 2-D step must read at least: every version and mask element (staleness), and each row's reward
    up to its first unmasked token (rewards; the mask is a prefix, so one element per row)."""
    return int(step.versions.nbytes + step.mask.nbytes + step.rewards.shape[0] * step.rewards.element_size())


def ingest(*, rollouts: int = 512, tokens: int = 2048, repeats: int = 15, sample_size: int = 20_000) -> dict[str, Any]:
    """Item 1: the 1M-token step and the 1-D forms, side by side with the floor and the baselines."""
    step = make_step(rollouts, tokens)
    flat, flat_mask = flat_values(step.tokens)
    floor_values = torch.randn(step.tokens)
    rollout_fields: dict[str, Any] = dict(make_rollouts(step))
    rewards = rollout_fields["rewards"]
    breakdown = {"correctness": rewards, "format": 0.5 * rewards, "length_penalty": -0.25 * rewards}
    telemetry = _telemetry()
    explicit = _telemetry("explicit")
    bandwidth_values = torch.ones(_BANDWIDTH_BYTES // 4)
    tensorboard = baselines.TensorBoard()
    try:

        def record_step(telemetry: Telemetry = telemetry) -> None:
            telemetry.record_rewards(step.rewards, mask=step.mask)
            telemetry.record_staleness(step.versions, CURRENT_VERSION, mask=step.mask)

        ours: dict[str, Callable[[], object]] = {
            "step_2d": record_step,
            "step_2d_explicit": lambda: record_step(explicit),
            "rewards_1d_explicit": lambda: explicit.record_rewards(flat, mask=flat_mask),
            "rollouts_2d": lambda: telemetry.record_rollouts(mask=step.mask, **rollout_fields),
            "rollouts_2d_breakdown": lambda: telemetry.record_rollouts(
                mask=step.mask, reward_breakdown=breakdown, **rollout_fields
            ),
            "rewards_2d": lambda: telemetry.record_rewards(step.rewards, mask=step.mask),
            "staleness_2d": lambda: telemetry.record_staleness(step.versions, CURRENT_VERSION, mask=step.mask),
            "rewards_1d": lambda: telemetry.record_rewards(flat, mask=flat_mask),
            "staleness_1d": lambda: telemetry.record_staleness(
                step.versions.reshape(-1), CURRENT_VERSION, mask=step.mask.reshape(-1)
            ),
        }
        others = {
            "floor": baselines.floor(floor_values),
            "read_bandwidth": baselines.Baseline(
                lambda: bandwidth_values.sum(), note="x.sum() of 256 MB float32: the read bandwidth"
            ),
            "numpy_histogram": baselines.numpy_histogram(flat),
            "torch_histc": baselines.torch_histc(flat),
            "tensorboard_add_histogram": tensorboard.baseline(flat),
            "prometheus_observe_loop": baselines.prometheus_loop(flat, sample_size),
            "otel_sdk_record_loop": baselines.otel_sdk_loop(flat, sample_size),
        }
        operations = {**ours, **{name: b.call for name, b in others.items()}}
        slow = {"tensorboard_add_histogram", "prometheus_observe_loop", "otel_sdk_record_loop"}
        counts = {name: max(3, repeats // 3) if name in slow else repeats for name in operations}
        samples = interleaved(operations, repeats=counts)
    finally:
        telemetry.shutdown(1.0)
        explicit.shutdown(1.0)
        tensorboard.close()
    scales = {name: b.scale for name, b in others.items()}
    results: dict[str, dict[str, Any]] = {
        name: {
            "median_ns": median(times) * scales.get(name, 1.0),
            "repeats": len(times),
            **({"note": others[name].note} if name in others else {}),
            **({"extrapolated_from_values": sample_size} if scales.get(name, 1.0) != 1.0 else {}),
        }
        for name, times in samples.items()
    }
    floor_ns = results["floor"]["median_ns"]
    step_ns = results["step_2d"]["median_ns"]
    rewards_1d_ns = results["rewards_1d"]["median_ns"]
    bytes_per_ns = _BANDWIDTH_BYTES / results["read_bandwidth"]["median_ns"]
    bandwidth_floor_ns = _step_bytes(step) / bytes_per_ns
    ratios = {
        "step_vs_floor": step_ns / floor_ns,
        "step_vs_bandwidth_floor": step_ns / bandwidth_floor_ns,
        "step_exponential_vs_explicit": step_ns / results["step_2d_explicit"]["median_ns"],
        "rewards_1d_exponential_vs_explicit": rewards_1d_ns / results["rewards_1d_explicit"]["median_ns"],
        "rewards_1d_vs_floor": rewards_1d_ns / floor_ns,
        "rollouts_vs_floor": results["rollouts_2d"]["median_ns"] / floor_ns,
        "rollouts_breakdown_vs_rollouts": results["rollouts_2d_breakdown"]["median_ns"]
        / results["rollouts_2d"]["median_ns"],
        "staleness_1d_vs_floor": results["staleness_1d"]["median_ns"] / floor_ns,
        "otel_sdk_speedup": results["otel_sdk_record_loop"]["median_ns"] / step_ns,
        "otel_sdk_speedup_1d": results["otel_sdk_record_loop"]["median_ns"] / rewards_1d_ns,
        "prometheus_speedup": results["prometheus_observe_loop"]["median_ns"] / step_ns,
        "prometheus_speedup_1d": results["prometheus_observe_loop"]["median_ns"] / rewards_1d_ns,
        "tensorboard_speedup": results["tensorboard_add_histogram"]["median_ns"] / step_ns,
        "tensorboard_speedup_1d": results["tensorboard_add_histogram"]["median_ns"] / rewards_1d_ns,
        "numpy_histogram_speedup": results["numpy_histogram"]["median_ns"] / step_ns,
        "torch_histc_speedup": results["torch_histc"]["median_ns"] / step_ns,
    }
    for result in results.values():
        result["x_floor"] = result["median_ns"] / floor_ns
    met = {
        "step_vs_floor": ratios["step_vs_floor"] <= TARGETS["step_vs_floor_max"],
        "otel_sdk_speedup": ratios["otel_sdk_speedup"] >= TARGETS["otel_sdk_speedup_min"],
        "tensorboard_speedup": ratios["tensorboard_speedup"] >= TARGETS["tensorboard_speedup_min"],
        "rewards_1d_vs_floor": ratios["rewards_1d_vs_floor"] <= TARGETS["rewards_1d_vs_floor_max"],
        "tensorboard_speedup_1d": ratios["tensorboard_speedup_1d"] >= TARGETS["tensorboard_speedup_1d_min"],
        "rollouts_vs_floor": ratios["rollouts_vs_floor"] <= TARGETS["rollouts_vs_floor_max"],
    }
    return {
        "tokens": step.tokens,
        "shape": [rollouts, tokens],
        "mask_fraction": float(step.mask.float().mean()),
        "step_bytes": _step_bytes(step),
        "read_bandwidth_gb_s": bytes_per_ns,
        "bandwidth_floor_ns": bandwidth_floor_ns,
        "operations": results,
        "ratios": ratios,
        "targets": TARGETS,
        "targets_met": met,
    }


def growth(sizes: list[int], *, tokens: int = 2048, repeats: int = 7) -> list[dict[str, Any]]:
    """Item 2: the same step at several token counts (rollouts = size / tokens); per-token ns and x floor."""
    telemetry = _telemetry()
    rows = []
    try:
        for size in sizes:
            rollouts = max(1, round(size / tokens))
            step = make_step(rollouts, tokens)
            floor_values = torch.randn(step.tokens)

            def record_step(step: Any = step) -> None:
                telemetry.record_rewards(step.rewards, mask=step.mask)
                telemetry.record_staleness(step.versions, CURRENT_VERSION, mask=step.mask)

            def floor(values: torch.Tensor = floor_values) -> None:
                values.sum()

            samples = interleaved({"step": record_step, "floor": floor}, repeats=repeats, warmup=2)
            step_ns, floor_ns = median(samples["step"]), median(samples["floor"])
            rows.append(
                {
                    "nominal_tokens": size,
                    "tokens": step.tokens,
                    "step_ns": step_ns,
                    "per_token_ns": step_ns / step.tokens,
                    "floor_ns": floor_ns,
                    "x_floor": step_ns / floor_ns,
                }
            )
            del step, floor_values
    finally:
        telemetry.shutdown(1.0)
    return rows
