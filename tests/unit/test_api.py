"""The public face: __all__ is pinned, and setup is once per process."""

from __future__ import annotations

import pytest

import otel_rl


def test_public_api_is_pinned() -> None:
    """Adding or removing a public name is a deliberate change to this list."""
    assert otel_rl.__all__ == [
        "DEFAULT_REWARD_BOUNDS",
        "DEFAULT_STALENESS_BOUNDS",
        "EpisodeSample",
        "ResolvedConfig",
        "SampleFilter",
        "Telemetry",
        "TelemetryConfig",
        "TopBottomFilter",
        "get_telemetry",
        "reset",
        "setup",
    ]
    assert otel_rl.__all__ == sorted(otel_rl.__all__)


def test_setup_is_once_per_process() -> None:
    """A second setup without reset raises; reset allows a new one."""
    otel_rl.setup(otel_rl.TelemetryConfig(run_id="a", exporter="none"))
    try:
        with pytest.raises(RuntimeError, match="already called"):
            otel_rl.setup(otel_rl.TelemetryConfig(run_id="b", exporter="none"))
    finally:
        otel_rl.reset()
    with pytest.raises(RuntimeError, match="has not been called"):
        otel_rl.get_telemetry()
