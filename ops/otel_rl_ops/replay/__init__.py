"""``otel-rl replay``: offline runs' OTLP files (``exporter="file"``) into a running stack, merged as the collector
merges them, each signal at its own time (docs/deploy.md, "Offline runs")."""
