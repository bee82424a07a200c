"""The otel-rl command line on a trainer's install: without the tooling extras it fails with one clear line."""

from __future__ import annotations

import sys

import pytest

from otel_rl.ops.cli import main


def test_missing_tooling_extra_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without PyYAML (the stack extra), `otel-rl stack status` exits 1 naming the module and the extras to install."""
    for name in [name for name in sys.modules if name.startswith(("otel_rl.ops.stack", "otel_rl.ops.report"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "yaml", None)
    assert main(["stack", "status"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("otel-rl: error: ") and "yaml" in error and "pip install 'otel-rl[stack,report]'" in error
