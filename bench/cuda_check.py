"""Item 5: on a CUDA device, each record call synchronizes with the host exactly once, and what it costs.

Run alone with ``python -m bench.cuda_check``, or as part of ``python -m bench``. Without CUDA it prints
``CUDA not available: skipped`` and reports ``{"available": false}``. Synchronizations are counted with
``torch.cuda.set_sync_debug_mode("warn")``, which warns once per synchronizing operation.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch

from bench.timing import interleaved, median
from bench.workload import CURRENT_VERSION, flat_values, make_rollouts, make_step
from otel_rl import Telemetry, TelemetryConfig

SKIPPED = "CUDA not available: skipped"


def count_syncs(call: Callable[[], object]) -> int:
    """Synchronizing CUDA operations performed by ``call`` (inputs must already be on the device)."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            call()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message).lower() for w in caught)


def cuda_check(*, repeats: int = 15) -> dict[str, Any]:
    """Sync counts and median times of each record call on CUDA tensors; raises AssertionError if not one sync."""
    if not torch.cuda.is_available():
        print(SKIPPED)
        return {"available": False, "skipped": SKIPPED}
    device = torch.device("cuda")
    step = make_step(512, 2048)
    rewards, mask, versions = (t.to(device) for t in (step.rewards, step.mask, step.versions))
    flat, flat_mask = (t.to(device) for t in flat_values(step.tokens))
    floor_values = torch.randn(step.tokens, device=device)
    rollout_fields: dict[str, Any] = {name: t.to(device) for name, t in make_rollouts(step).items()}
    telemetry = Telemetry(TelemetryConfig(run_id="bench-cuda", exporter="none", shutdown_timeout_s=1.0))
    calls: dict[str, Callable[[], object]] = {
        "rewards_2d": lambda: telemetry.record_rewards(rewards, mask=mask),
        "staleness_2d": lambda: telemetry.record_staleness(versions, CURRENT_VERSION, mask=mask),
        "rewards_1d": lambda: telemetry.record_rewards(flat, mask=flat_mask),
        "rewards_per_rollout": lambda: telemetry.record_rewards(rewards[:, 0], fn="correctness"),
        "rollouts_all_fields": lambda: telemetry.record_rollouts(mask=mask, **rollout_fields),
    }
    try:
        for call in calls.values():
            call()  # warm-up: bounds tables move to the device once
        syncs = {name: count_syncs(call) for name, call in calls.items()}

        def floor() -> None:
            floor_values.sum()
            torch.cuda.synchronize()

        samples = interleaved({**calls, "floor_sum_and_sync": floor}, repeats=repeats)
    finally:
        telemetry.shutdown(1.0)
    times = {name: median(values) for name, values in samples.items()}
    result: dict[str, Any] = {
        "available": True,
        "device": torch.cuda.get_device_name(device),
        "syncs_per_call": syncs,
        "median_ns": times,
        "x_floor": {name: value / times["floor_sum_and_sync"] for name, value in times.items()},
    }
    bad = {name: count for name, count in syncs.items() if count != 1}
    result["one_sync_per_call"] = not bad
    print(f"CUDA check on {result['device']}")
    print(f"{'call':22} {'syncs':>5} {'median':>12} {'x floor':>8}")
    for name in calls:
        print(f"{name:22} {syncs[name]:>5} {times[name] / 1e3:>10.1f}us {result['x_floor'][name]:>8.1f}")
    assert not bad, f"expected exactly one device-to-host sync per record call, got {bad!r}"
    return result


if __name__ == "__main__":
    torch.set_num_threads(2)
    cuda_check()
    sys.exit(0)
