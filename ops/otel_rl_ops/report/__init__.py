"""``otel-rl report``: a run's dashboard, or several runs compared by step, as a PNG or an HTML page, for people
without Grafana.

The panels and queries are read from the Grafana dashboard JSON (``grafana/dashboards/rl-run.json``; for a comparison
``rl-compare.json``, evaluated over each run's step windows), so the picture shows what Grafana shows. Tooling, not
part of the trainer API: ``otel_rl`` does not re-export it. Drawing needs the ``report`` extra (matplotlib).
"""
