"""The project's one version, carried by its three distributions.

``otel-rl-contract`` reads it here; ``pyproject.toml`` (``otel-rl``) and ``ops/pyproject.toml`` (``otel-rl-ops``)
state it, and pin ``otel-rl-contract`` to it: ``tests/unit/test_packaging.py`` fails when any of them differs.
"""

__version__ = "0.1.0"
