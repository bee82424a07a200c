"""``otel-rl report``: a run's dashboard as a PNG or an HTML page, for people without Grafana.

The panels and queries are read from the Grafana dashboard JSON (``grafana/dashboards/rl-run.json``), so the
picture shows exactly what Grafana shows. Tooling, not part of the trainer API: ``otel_rl`` does not re-export
it. Drawing needs the ``report`` extra (matplotlib).
"""
