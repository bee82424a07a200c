"""A rank process driven over stdin by the pipeline tests: one JSON command per line, one reply line each.

Runs the real otel_rl package with the real OTLP exporter, so what reaches the collector is exactly what a trainer
sends. Commands: ``rewards``, ``staleness``, ``metric``, ``sample``, ``step``, ``flush``, ``shutdown``.
"""

from __future__ import annotations

import json
import sys

import torch

import otel_rl


def main() -> None:
    settings = json.loads(sys.argv[1])
    telemetry = otel_rl.Telemetry(otel_rl.TelemetryConfig(**settings))
    print("ready", flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        kind = command.pop("command")
        if kind == "rewards":
            mask = command.get("mask")
            telemetry.record_rewards(
                torch.tensor(command["values"], dtype=torch.float64),
                fn=command.get("fn", "total"),
                mask=None if mask is None else torch.tensor(mask),
            )
        elif kind == "staleness":
            mask = command.get("mask")
            telemetry.record_staleness(
                torch.tensor(command["versions"]), command["current"], mask=None if mask is None else torch.tensor(mask)
            )
        elif kind == "metric":
            telemetry.record_metric(command["key"], torch.tensor(command["values"], dtype=torch.float64))
        elif kind == "sample":
            telemetry.record_sample(otel_rl.EpisodeSample(**command["sample"]))
        elif kind == "step":
            telemetry.step(command["step"])
        elif kind == "flush":
            print(json.dumps({"flushed": telemetry.flush(command.get("timeout_s", 30))}), flush=True)
            continue
        elif kind == "shutdown":
            print(json.dumps({"finished": telemetry.shutdown(command.get("timeout_s", 30))}), flush=True)
            return
        print("ok", flush=True)


if __name__ == "__main__":
    main()
