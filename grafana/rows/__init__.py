"""The rows of the "RL run" dashboard, one module each; ``grafana/generate.py`` assembles them.

Each module's ``row()`` returns a :class:`~rows.panels.Row`: its panels with their queries (from
:mod:`otel_rl_ops.promql`), ids, widths and heights. Panel ids are explicit and permanent (links use them): the next
new panel or row takes id 66.
"""
