"""The ``stack`` marker: ``pytest -m "not stack"`` (and a bare ``pytest tests/unit``) runs no test that needs the
stack, so neither starts a Go build. Checked on a real collection of the whole suite in a child pytest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import STACK_RERUNS

ROOT = Path(__file__).resolve().parents[2]

_COLLECT = """
import json, sys, pytest

def reruns(item):
    flaky = item.get_closest_marker("flaky")
    return None if flaky is None else flaky.kwargs.get("reruns")

class Report:
    def pytest_collection_finish(self, session):
        for item in session.items:
            print("ITEM " + json.dumps([item.nodeid, sorted(getattr(item, "fixturenames", ())), reruns(item)]))

    def pytest_deselected(self, items):
        for item in items:
            print("DESELECTED " + json.dumps([item.nodeid, reruns(item)]))

arguments = ["--collect-only", "-q", "-p", "no:cacheprovider", "-m", "not stack", "tests"]
sys.exit(pytest.main(arguments, plugins=[Report()]))
"""
"""A child pytest that collects ``tests`` with ``-m "not stack"`` and prints each selected test with every fixture
it uses (pytest's own fixture closure, not the marker hook's reading of it) and its reruns, and each deselected
test with its reruns."""


@pytest.fixture(scope="module")
def collection() -> tuple[dict[str, tuple[list[str], int | None]], dict[str, int | None]]:
    """The child collection: selected tests (fixtures, reruns) and deselected ones (reruns), by node id."""
    result = subprocess.run(
        [sys.executable, "-c", _COLLECT], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    lines = result.stdout.splitlines()
    selected = {
        nodeid: (fixtures, reruns)
        for nodeid, fixtures, reruns in (
            json.loads(line.removeprefix("ITEM ")) for line in lines if line.startswith("ITEM ")
        )
    }
    deselected = dict(json.loads(line.removeprefix("DESELECTED ")) for line in lines if line.startswith("DESELECTED "))
    return selected, deselected


def test_not_stack_selects_no_test_that_needs_the_stack(
    collection: tuple[dict[str, tuple[list[str], int | None]], dict[str, int | None]],
) -> None:
    """Under -m "not stack" no selected test uses a stack fixture (directly or through another fixture) or runs
    the benchmarks' stacks; something is deselected, and nothing in tests/unit is."""
    selected, deselected = collection
    needing = {"stack_binaries", "shared_stack", "promtool"}
    assert [nodeid for nodeid, (fixtures, _) in selected.items() if needing & set(fixtures)] == []
    assert not [nodeid for nodeid in selected if nodeid.startswith("tests/bench/")]
    assert any(nodeid.startswith("tests/pipeline/") for nodeid in deselected)
    assert not [nodeid for nodeid in deselected if nodeid.startswith("tests/unit/")]
    assert any(nodeid.startswith("tests/unit/") for nodeid in selected)


def test_only_stack_tests_run_again_on_failure(
    collection: tuple[dict[str, tuple[list[str], int | None]], dict[str, int | None]],
) -> None:
    """Every stack test may run once more after a failure (timing on a shared machine); no other test ever does."""
    selected, deselected = collection
    assert {nodeid: reruns for nodeid, (_, reruns) in selected.items() if reruns is not None} == {}
    assert {nodeid: reruns for nodeid, reruns in deselected.items() if reruns != STACK_RERUNS} == {}
    assert deselected
