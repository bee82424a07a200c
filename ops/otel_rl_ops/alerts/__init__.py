"""``otel-rl alerts``: the alerts of runs, read from Alertmanager and Prometheus (or Thanos), silenced per run, and
the webhook end of a notification, for a terminal, the demo and the tests. Tooling: a trainer needs none of it."""
