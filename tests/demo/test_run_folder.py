"""The demo's output folder of a run is safe for any run id (issue 20): never outside --out, never shared."""

from __future__ import annotations

from pathlib import Path

import pytest

from demo.__main__ import run_folder
from tests.ops.test_promql import HOSTILE


@pytest.mark.parametrize("run_id", [*HOSTILE, "..", ".", "../../etc", "/abs/path", "a/b", "x" * 300, ".hidden"])
def test_run_folder_stays_inside_the_output_folder(tmp_path: Path, run_id: str) -> None:
    """The demo's folder of a run is a direct child of --out for every run id (no ../, no absolute path, no
    separator, no hidden name, within the 255-byte name limit), and can be created there."""
    folder = run_folder(tmp_path, run_id)
    assert folder.parent == tmp_path and folder.name not in ("", ".", "..") and not folder.name.startswith(".")
    assert "/" not in folder.name and len(folder.name.encode()) <= 255
    folder.mkdir()
    assert folder.resolve().parent == tmp_path.resolve()


def test_run_folder_keeps_plain_ids_and_never_merges_two_runs(tmp_path: Path) -> None:
    """A plain run id is its own folder name; ids that differ only in unsafe characters get different folders."""
    assert run_folder(tmp_path, "demo-1a2b_c.d") == tmp_path / "demo-1a2b_c.d"
    names = {run_folder(tmp_path, run_id).name for run_id in ("a/b", "a_b", "a b", "a\\b", "a/b/", "x" * 61, "x" * 62)}
    assert len(names) == 7
