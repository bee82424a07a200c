"""Build the otel-rl collector distribution (builder.yaml and its patches) with the code of ``otel-rl stack install``.

    python3 collector_config/build.py --home DIR      # prints DIR/collector/<digest>/otelcol-rl

The build is :func:`otel_rl.ops.stack.collector_build.ensure_collector`, the function the local stack calls: the same
builder version, module downloads, patches and manifest, so the container image (collector_config/Dockerfile) and
the local stack cannot drift apart. Needs only Python >= 3.10 with PyYAML, ``go`` and ``patch``: the trainer
library (otel_rl/__init__.py imports PyTorch and the OpenTelemetry SDK) is not imported, only ``otel_rl/ops/stack/``.
tests/stack/test_dockerfile.py runs this script outside Docker and compares its binary with the stack's.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _collector_build() -> types.ModuleType:
    """Import ``otel_rl.ops.stack.collector_build`` without running ``otel_rl/__init__.py``: a bare package object
    stands in for ``otel_rl`` (the stack tooling imports nothing else of it)."""
    if "otel_rl" not in sys.modules:
        package = types.ModuleType("otel_rl")
        package.__path__ = [str(ROOT / "otel_rl")]
        sys.modules["otel_rl"] = package
    return importlib.import_module("otel_rl.ops.stack.collector_build")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="where the builder and the collector go")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    build = _collector_build()
    print(build.ensure_collector(ROOT / "collector_config" / "builder.yaml", home=args.home.resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
