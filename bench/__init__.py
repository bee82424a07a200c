"""otel-rl benchmarks: every cost measured side by side with its baselines in one run, reported as ratios.

Run ``python -m bench`` (``make bench``); ``--quick`` is a seconds-long smoke run. See docs/performance.md.
"""
