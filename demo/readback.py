"""Read a finished run back from Prometheus, VictoriaLogs and Jaeger: the summary the demo prints.

The readback is ``otel-rl report``'s summary (:mod:`otel_rl_ops.report.summary`), one code for both; this module
names what the demo uses of it.
"""

from __future__ import annotations

from otel_rl_ops.report.summary import Sources, samples, summarize, window_stats

__all__ = ["Sources", "samples", "summarize", "window_stats"]
