"""The otel-rl demo: a small but real multi-rank GRPO job whose telemetry goes through the whole pipeline."""
