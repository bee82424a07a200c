"""otel-rl's three distributions built and installed the way users install them, for the tests that run them:
``uv build`` of each (every wheel from its sdist), then the tooling's half (``otel-rl-ops``) and the trainer's half
(``otel-rl``) each into a fresh environment outside the checkout, with an empty work folder outside it too.

Both environments get their packages from the checkout's uv cache (``UV_CACHE_DIR``, the Makefile's), pinned to the
versions of the test's own environment, so nothing is downloaded twice and PyTorch's files are hard links (about 10 s
for both on a warm cache).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import otel_rl_contract as contract

ROOT = Path(__file__).parents[2]
UV = ROOT / ".uv" / "venv" / "bin" / "uv"
VERSION = contract.__version__


def _uv(*args: str, cwd: Path) -> str:
    """Run uv with the checkout's cache, from ``cwd``; its output, or the test fails with uv's own error."""
    environment = {**os.environ, "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR", str(ROOT / ".uv" / "cache"))}
    result = subprocess.run([str(UV), *args], cwd=cwd, env=environment, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"uv {' '.join(args)}: {result.stderr}"
    return result.stdout


@dataclass(frozen=True)
class Installs:
    """The built distributions and the two environments made from them."""

    dist: Path
    tooling: Path
    """The tooling's environment (``otel-rl-ops`` and ``otel-rl-contract``): its ``bin/``."""
    trainer: Path
    """The trainer's environment (``otel-rl`` and ``otel-rl-contract``): its ``bin/``."""
    work: Path
    """An empty folder outside the checkout, where every command runs."""


def build_installs(base: Path) -> Installs:
    """Build the three distributions into ``base``, then install each half into a fresh environment there, as a
    user would (``base`` must lie outside the checkout)."""
    assert ROOT not in base.parents
    dist = base / "dist"
    for project in (ROOT / "contract", ROOT / "ops", ROOT):
        _uv("build", "--quiet", "--out-dir", str(dist), str(project), cwd=base)
    constraints = base / "constraints.txt"
    constraints.write_text(_uv("pip", "freeze", "--python", sys.executable, cwd=base), encoding="utf-8")
    pinned = [
        line
        for line in constraints.read_text(encoding="utf-8").splitlines()
        if not line.startswith(("-e ", "otel-rl")) and "==" in line
    ]
    constraints.write_text("\n".join(pinned) + "\n", encoding="utf-8")
    wheel = {
        name: next(dist.glob(f"{name}-{VERSION}-*.whl")) for name in ("otel_rl", "otel_rl_contract", "otel_rl_ops")
    }
    environments = {}
    for half, wanted in (("tooling", "otel_rl_ops"), ("trainer", "otel_rl")):
        environment = base / half
        _uv("venv", "--quiet", "--python", sys.executable, str(environment), cwd=base)
        python = str(environment / "bin" / "python")
        _uv("pip", "install", "--quiet", "--python", python, "-c", str(constraints), str(wheel[wanted]),
            str(wheel["otel_rl_contract"]), cwd=base)  # fmt: skip
        environments[half] = environment / "bin"
    work = base / "work"
    work.mkdir()
    return Installs(dist, environments["tooling"], environments["trainer"], work)
