"""A rank with bad input, run beside the demo in test_live.py: ``python -m tests.dashboards.faulty_rank``.

It joins the demo's run as a (restarted) rank 3 and, for a few export periods, records rewards that are partly NaN
and staleness that is partly negative, so that the bad-input panels and RLNonFiniteRewards see real rejections.
"""

from __future__ import annotations

import argparse
import time

import otel_rl


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    telemetry = otel_rl.setup(
        otel_rl.TelemetryConfig(
            service_name="otel-rl-demo",
            run_id=args.run_id,
            rank=3,
            world_size=4,
            role="trainer",
            exporter="otlp",
            endpoint=args.endpoint,
            export_interval_s=0.5,
            shutdown_timeout_s=10,
        )
    )
    deadline = time.monotonic() + args.seconds
    step = 0
    while time.monotonic() < deadline:
        telemetry.step(step)
        telemetry.record_rewards([0.5, float("nan"), 1.0, float("inf")])
        telemetry.record_staleness([step, step + 2], step)  # a version from the future: negative staleness
        step += 1
        time.sleep(0.25)
    otel_rl.reset()


if __name__ == "__main__":
    main()
