"""The process-wide Telemetry used by module-level helpers such as the torchforge shim.

:func:`setup` says what it set up in one line: the run id (under torchrun a random one, unless the launcher's
rendezvous id or ``OTEL_RL_RUN_ID`` gives it), rank and world size, where telemetry goes, and the command that shows
the run. It is an INFO record of the ``otel_rl`` loggers on rank 0 (DEBUG on the other ranks: under torchrun every
rank's output lands in one terminal, and the run id is the same on all). A library does not configure logging, so
when the application has configured none (no handler on these loggers or the root), Python would show only
WARNING and above (``logging.lastResort``), and the line meant for a first run would never show: then, and only then,
it is written to stderr directly, touching no logger's handlers or level. Once the application configures logging,
its levels decide (``logging.basicConfig(level=logging.INFO)`` shows it).
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
from collections.abc import Callable
from typing import ParamSpec

from otel_rl._config import ResolvedConfig
from otel_rl._export.exporters import destination
from otel_rl._telemetry import Telemetry

P = ParamSpec("P")
_logger = logging.getLogger(__name__)

_lock = threading.Lock()
_current: Telemetry | None = None


def _process_wide(make: Callable[P, Telemetry]) -> Callable[P, Telemetry]:
    """``setup``: ``make``'s parameters, forwarded as they are, making the process-wide instance once."""

    @functools.wraps(make)
    def setup(*args: P.args, **kwargs: P.kwargs) -> Telemetry:
        global _current
        with _lock:
            if _current is not None:
                raise RuntimeError("otel_rl.setup() was already called in this process; call otel_rl.reset() first")
            _current = make(*args, **kwargs)
        announce(_current.config.resolved)
        return _current

    setup.__doc__ = """Configure telemetry for this process (once) and return it: takes what :class:`Telemetry`
    takes (``config``, exporters, ``sample_filter``, ``clock``).

    Reads rank, world size and run id from torchrun or SLURM, endpoint and headers from the ``OTEL_*`` variables;
    see :class:`TelemetryConfig`. Calling it again without :func:`reset` raises ``RuntimeError``.

    >>> from otel_rl import TelemetryConfig
    >>> telemetry = setup(TelemetryConfig(run_id="doc", exporter="none"))
    >>> telemetry.record_rewards([1.0, -0.5], fn="correctness")
    >>> reset()
    """
    setup.__name__ = setup.__qualname__ = "setup"
    return setup


setup = _process_wide(Telemetry)

_LOCAL_STACK_REPORT = (
    "--prometheus-url http://127.0.0.1:9090 --victorialogs-url http://127.0.0.1:9428 --out report.html"
)
"""The rest of ``otel-rl report``'s command line for the local stack (``otel-rl stack up``) on its default ports."""


def announce(config: ResolvedConfig) -> None:
    """Log what :func:`setup` set up, in one line (see the module docstring for who sees it and why)."""
    level = logging.INFO if config.rank == 0 else logging.DEBUG
    show = (
        f"; see the run with: otel-rl report --run-id {config.run_id} {_LOCAL_STACK_REPORT} "
        "(the operator tooling: pip install otel-rl-ops)"
        if config.exporter == "otlp"
        else ""
    )
    message = "otel-rl: run id %s, rank %d of world size %d (%s); telemetry goes to %s%s"
    arguments = (config.run_id, config.rank, config.world_size, config.role, destination(config), show)
    if _logger.hasHandlers():
        _logger.log(level, message, *arguments)
    elif level >= logging.INFO:  # logging is not configured: lastResort would drop an INFO line
        sys.stderr.write(message % arguments + "\n")


def get_telemetry() -> Telemetry:
    """The Telemetry made by :func:`setup`; raises ``RuntimeError`` before it."""
    if _current is None:
        raise RuntimeError("otel_rl.setup() has not been called in this process")
    return _current


def current() -> Telemetry | None:
    """The Telemetry made by :func:`setup`, or None before it (for helpers that must not raise)."""
    return _current


def reset(timeout_s: float | None = None) -> None:
    """Shut down and forget the process-wide Telemetry (for tests and re-configuration)."""
    global _current
    with _lock:
        current, _current = _current, None
    if current is not None:
        current.shutdown(timeout_s)
