"""The operator tooling: what runs beside a training job, never inside it.

* :mod:`otel_rl_ops.stack`: install, configure and run the collector, Prometheus, Alertmanager, VictoriaLogs,
  Jaeger and Thanos (``otel-rl stack``).
* :mod:`otel_rl_ops.report`: the dashboard rendered to PNG/HTML from the stores (``otel-rl report``).
* :mod:`otel_rl_ops.alerts`: Alertmanager's routes and a webhook receiver (``otel-rl alerts``).
* :mod:`otel_rl_ops.promql` and :mod:`otel_rl_ops.query`: the PromQL and LogsQL the dashboards, rules and readers share.
* :mod:`otel_rl_ops.cli`: the ``otel-rl`` command.

The dependency runs one way: this package may import the trainer library's contract (``otel_rl_contract``), and the
trainer library never imports this package (``tests/unit/test_layers.py``), so ``pip install otel-rl`` without the
``[stack]`` and ``[report]`` extras records everything.
"""
