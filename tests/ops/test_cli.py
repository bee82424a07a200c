"""The otel-rl command line's data verbs, and the check of the package's data that guards every verb using them."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import otel_rl_contract as contract
import pytest
from otel_rl_ops import package_data
from otel_rl_ops.cli import main
from otel_rl_ops.stack import image


def _package_copy(tmp_path: Path) -> Path:
    """A copy of the installed package's data with a manifest, as a wheel carries them (ops/hatch_build.py)."""
    package = tmp_path / "otel_rl_ops"
    shutil.copytree(package_data.package_dir() / "data", package / "data", ignore=shutil.ignore_patterns("docs"))
    files = {
        path.relative_to(package / "data").as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted((package / "data").rglob("*"))
        if path.is_file()
    }
    manifest = {"version": contract.__version__, "files": files}
    (package / package_data.MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    return package


def test_stack_data_prints_the_checked_data_root(capsys: pytest.CaptureFixture[str]) -> None:
    """`otel-rl stack data` exits 0 and prints the folder holding collector_config/ and prometheus/rules/."""
    assert main(["stack", "data"]) == 0
    root = Path(capsys.readouterr().out.strip())
    assert (root / "collector_config" / "builder.yaml").is_file() and (root / "prometheus" / "rules").is_dir()


def test_a_whole_package_of_this_release_passes(tmp_path: Path) -> None:
    """A package whose manifest lists exactly its files, at this version, is accepted."""
    package = _package_copy(tmp_path)
    assert package_data.data_root(package) == package / "data"


def test_missing_data_files_are_named(tmp_path: Path) -> None:
    """A listed file that is gone, or a required one absent even without a manifest, is named in the error."""
    package = _package_copy(tmp_path)
    (package / "data" / "prometheus" / "rules" / "otel_rl_windows.yml").unlink()
    with pytest.raises(package_data.DataError, match=r"missing .*prometheus/rules/otel_rl_windows\.yml"):
        package_data.data_root(package)
    (package / package_data.MANIFEST).unlink()
    (package / "data" / "collector_config" / "builder.yaml").unlink()
    with pytest.raises(package_data.DataError, match=r"1 data file\(s\) .* missing .*collector_config/builder\.yaml"):
        package_data.data_root(package)


def test_data_of_another_release_are_refused(tmp_path: Path) -> None:
    """A manifest of another version, or a file whose digest differs from the manifest's, is refused by name."""
    package = _package_copy(tmp_path)
    rules = package / "data" / "prometheus" / "rules" / "otel_rl.yml"
    rules.write_text(rules.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    with pytest.raises(package_data.DataError, match=r"differ from the release: prometheus/rules/otel_rl\.yml"):
        package_data.data_root(package)
    manifest = json.loads((package / package_data.MANIFEST).read_text(encoding="utf-8"))
    (package / package_data.MANIFEST).write_text(json.dumps({**manifest, "version": "0.0.9"}), encoding="utf-8")
    with pytest.raises(package_data.DataError, match=r"of version '0\.0\.9', the tooling of '"):
        package_data.data_root(package)


def test_a_data_error_is_one_line_and_exit_status_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`otel-rl stack up` on a package with missing data stops before starting anything, with one error line."""
    package = _package_copy(tmp_path)
    shutil.rmtree(package / "data" / "jaeger")
    monkeypatch.setattr(package_data, "package_dir", lambda: package)
    assert main(["stack", "up", "--state-dir", str(tmp_path / "state")]) == 1
    error = capsys.readouterr().err
    assert error.startswith("otel-rl: error: ") and "jaeger/jaeger.yaml" in error and error.count("\n") == 1
    assert not (tmp_path / "state").exists()


def test_image_context_lays_out_what_the_dockerfile_copies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`otel-rl stack image-context DIR` writes the collector configs and the build code, prints the docker build
    command, and refuses a folder that is not empty."""
    folder = tmp_path / "context"
    assert main(["stack", "image-context", str(folder)]) == 0
    assert capsys.readouterr().out.split() == image.build_command(folder)
    assert (folder / "collector_config" / "Dockerfile").is_file()
    assert (folder / "ops" / "otel_rl_ops" / "stack" / "collector_build.py").is_file()
    assert not list(folder.rglob("__pycache__"))
    assert main(["stack", "image-context", str(folder)]) == 1
    assert "is not empty" in capsys.readouterr().err
