"""Local-stack tooling: install and run the OpenTelemetry Collector, Prometheus and VictoriaLogs on a dev or CI
machine, and the ``otel-rl`` command line.

This subpackage is tooling, not part of the trainer API: ``otel_rl`` does not re-export it.
"""
