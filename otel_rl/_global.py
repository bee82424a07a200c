"""The process-wide Telemetry used by module-level helpers such as the torchforge shim."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import ParamSpec

from otel_rl._telemetry import Telemetry

P = ParamSpec("P")

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
