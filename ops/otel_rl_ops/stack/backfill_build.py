"""The ``otel-rl-backfill`` build (the ``backfill/`` Go program ``otel-rl replay`` writes TSDB blocks with): cached by
the digest of its sources, like the collector, in ``$OTEL_RL_HOME/backfill/<digest>/otel-rl-backfill``."""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Final

from otel_rl_ops.stack import layout
from otel_rl_ops.stack.gotools import InstallError, go_env, go_executable, install_lock, run_tool

_logger = logging.getLogger(__name__)

BACKFILL_BINARY_NAME: Final = "otel-rl-backfill"
"""File name of the built program."""


def backfill_sources(source: Path) -> tuple[Path, ...]:
    """The files that make the program: ``go.mod``, ``go.sum`` and every ``.go`` file of the folder, sorted."""
    return tuple(sorted([source / "go.mod", source / "go.sum", *source.glob("*.go")]))


def backfill_digest(source: Path) -> str:
    """The first 16 hex digits of the SHA-256 of the sources' names and bytes: the build's identity."""
    digest = hashlib.sha256()
    for path in backfill_sources(source):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def ensure_backfill(source: Path, *, home: Path) -> Path:
    """Return ``otel-rl-backfill`` built from ``source``, building it first (``go build``, minutes once) if these
    sources were never built. Takes the install lock itself; the binary is renamed into place whole.

    Raises:
        FileNotFoundError: when ``source`` has no ``go.mod``.
        InstallError: when the build fails.
    """
    if not (source / "go.mod").is_file():
        raise FileNotFoundError(f"the backfill sources {str(source)!r} have no go.mod")
    target = layout.backfill_dir(home) / backfill_digest(source) / BACKFILL_BINARY_NAME
    if target.is_file():
        return target
    with install_lock(home):
        if target.is_file():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        _logger.info("building %s from %s into %s; this takes minutes", BACKFILL_BINARY_NAME, source, target)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=".build-", dir=target.parent) as scratch:
            built = Path(scratch) / BACKFILL_BINARY_NAME
            flags = f"{os.environ.get('GOFLAGS', '')} -mod=readonly".strip()
            run_tool([go_executable(), "build", "-trimpath", "-o", built, "."], env=go_env(GOFLAGS=flags), cwd=source)
            if not built.is_file():
                raise InstallError(f"'go build' in {str(source)!r} succeeded but produced no {BACKFILL_BINARY_NAME!r}")
            os.replace(built, target)
        _logger.info("built %s in %.1f s", BACKFILL_BINARY_NAME, time.monotonic() - started)
    return target
