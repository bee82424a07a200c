"""The ``stack`` marker: ``pytest -m "not stack"`` (and a bare ``pytest tests/unit``) runs no test that needs the
stack, so neither starts a Go build. Checked on a real collection of the whole suite in a child pytest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_COLLECT = """
import json, sys, pytest

class Report:
    def pytest_collection_finish(self, session):
        for item in session.items:
            print("ITEM " + json.dumps([item.nodeid, sorted(getattr(item, "fixturenames", ()))]))

    def pytest_deselected(self, items):
        for item in items:
            print("DESELECTED " + json.dumps(item.nodeid))

sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-m", "not stack", "tests"], plugins=[Report()]))
"""
"""A child pytest that collects ``tests`` with ``-m "not stack"`` and prints each selected test with every fixture
it uses (pytest's own fixture closure, not the marker hook's reading of it), and each deselected test."""


def test_not_stack_selects_no_test_that_needs_the_stack() -> None:
    """Under -m "not stack" no selected test uses a stack fixture (directly or through another fixture) or runs
    the benchmarks' stacks; something is deselected, and nothing in tests/unit is."""
    result = subprocess.run(
        [sys.executable, "-c", _COLLECT], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    lines = result.stdout.splitlines()
    selected = dict(json.loads(line.removeprefix("ITEM ")) for line in lines if line.startswith("ITEM "))
    deselected = [json.loads(line.removeprefix("DESELECTED ")) for line in lines if line.startswith("DESELECTED ")]
    needing = {"stack_binaries", "shared_stack", "promtool"}
    assert [nodeid for nodeid, fixtures in selected.items() if needing & set(fixtures)] == []
    assert not [nodeid for nodeid in selected if nodeid.startswith("tests/bench/")]
    assert any(nodeid.startswith("tests/pipeline/") for nodeid in deselected)
    assert not [nodeid for nodeid in deselected if nodeid.startswith("tests/unit/")]
    assert any(nodeid.startswith("tests/unit/") for nodeid in selected)
