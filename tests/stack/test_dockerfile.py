"""The collector image (collector_config/Dockerfile): checked statically (no Docker engine here), and its build stage's
command run outside Docker on the context `otel-rl stack image-context` makes, which must produce the stack's own
collector, byte for byte."""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from otel_rl_contract._version import __version__
from otel_rl_ops.stack import collector_build, layout
from otel_rl_ops.stack.gotools import go_executable

ROOT = Path(__file__).parents[2]
DOCKERFILE = ROOT / "collector_config" / "Dockerfile"
IMAGE = f"otel-rl/otelcol-rl:{__version__}"


def _instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (keyword, arguments), continuation lines joined, comments left out."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text(encoding="utf-8"))
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for keyword, arguments in _instructions():
        if keyword == "FROM":
            stages.append([])
        stages[-1].append((keyword, arguments))
    return stages


def _context_includes(path: str) -> bool:
    """Whether the build context keeps ``path`` (relative to the repository root) after Dockerfile.dockerignore:
    the last matching pattern decides, ``!`` re-includes (Docker's rule)."""
    patterns = [
        line.strip()
        for line in (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    kept = True
    for pattern in patterns:
        negated = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
            kept = negated
    return kept


def test_base_images_are_pinned_and_the_runtime_user_is_not_root() -> None:
    """Every FROM names an exact tag (a version number) or a digest, or scratch; the last stage runs as a numeric
    non-root user and starts the collector."""
    images = [arguments.split()[0] for keyword, arguments in _instructions() if keyword == "FROM"]
    assert images and all(
        image == "scratch" or "@sha256:" in image or re.fullmatch(r"[\w./-]+:\d+\.\d+(\.\d+)?[\w.-]*", image)
        for image in images
    ), images
    final = _stages()[-1]
    (user,) = [arguments for keyword, arguments in final if keyword == "USER"]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) > 0 and gid.isdigit() and int(gid) > 0, user
    (entrypoint,) = [json.loads(arguments) for keyword, arguments in final if keyword == "ENTRYPOINT"]
    assert entrypoint == ["/otelcol-rl"]


BUILD_COMMAND = (
    "PYTHONPATH=ops python3 -m otel_rl_ops.stack.collector_build --manifest collector_config/builder.yaml --home /build"
)


def test_the_image_is_built_by_the_stacks_build_code_from_files_in_the_context() -> None:
    """The build stage runs the stack's ensure_collector (python3 -m otel_rl_ops.stack.collector_build) on the
    manifest it copies; every COPY source exists and is in the build context; the image carries every collector
    config."""
    build = _stages()[0]
    runs = " ".join(arguments for keyword, arguments in build if keyword == "RUN")
    assert BUILD_COMMAND in runs
    copied = [arguments.split() for stage in _stages() for keyword, arguments in stage if keyword == "COPY"]
    sources = [
        part
        for parts in copied
        if not any(p.startswith("--from") for p in parts)
        for part in parts[:-1]
        if not part.startswith("--")
    ]
    for source in sources:
        matches = list(ROOT.glob(source.rstrip("/"))) or ([ROOT / source] if (ROOT / source).exists() else [])
        assert matches, source
        for match in matches:
            files = (
                [match]
                if match.is_file()
                else [p for p in match.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
            )
            assert all(_context_includes(str(f.relative_to(ROOT))) for f in files), source
    needed = [
        Path(collector_build.__file__),
        Path(layout.__file__),
        ROOT / "collector_config" / "builder.yaml",
        *(patch.path.resolve() for patch in collector_build.collector_patches(layout.collector_manifest(ROOT))),
    ]
    for path in needed:
        assert _context_includes(str(path.relative_to(ROOT))), path
    assert not _context_includes(".venv/bin/python") and not _context_includes("tests/conftest.py")
    assert ["collector_config/*.yaml", "/etc/otel-rl/"] in copied


@pytest.mark.stack  # runs the go command
def test_the_builder_image_has_the_go_the_builder_needs() -> None:
    """The golang image's Go version is at least the `go` directive of the builder module the manifest pins."""
    (image,) = [
        arguments.split()[0] for keyword, arguments in _instructions() if keyword == "FROM" and "golang" in arguments
    ]
    go = re.match(r"golang:(\d+)\.(\d+)\.(\d+)", image)
    assert go is not None, image
    image_go = tuple(int(part) for part in go.groups())
    version = collector_build.collector_core_version(layout.collector_manifest(ROOT))
    result = subprocess.run(
        [str(go_executable()), "mod", "download", "-json", f"go.opentelemetry.io/collector/cmd/builder@{version}"],
        capture_output=True,
        text=True,
        check=True,
    )
    directive = re.search(r"^go (\d+)\.(\d+)(?:\.(\d+))?", Path(json.loads(result.stdout)["GoMod"]).read_text(), re.M)
    assert directive is not None
    needed = tuple(int(part or 0) for part in directive.groups())
    assert image_go >= needed, (image, needed)


def test_compose_runs_this_image() -> None:
    """docker-compose.yml builds the collector from this Dockerfile and names the image otel-rl/otelcol-rl:<version>
    (the Helm chart uses the same name)."""
    collector: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))["services"][
        "collector"
    ]
    assert collector["image"] == IMAGE
    assert collector["build"] == {"context": ".", "dockerfile": "collector_config/Dockerfile"}


def test_the_build_stage_outside_docker_builds_the_stacks_collector(stack_binaries: Any, tmp_path: Path) -> None:
    """The build stage's command, run as the image runs it in the context `otel-rl stack image-context` writes (no
    otel-rl package installed there: neither PyTorch, the OpenTelemetry SDK nor otel_rl_contract is imported), builds
    a collector identical byte for byte to the stack's."""
    context = tmp_path / "context"
    written = subprocess.run(
        [sys.executable, "-m", "otel_rl_ops.cli", "stack", "image-context", str(context)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert written.stdout.split()[:2] == ["docker", "build"]
    probe = (
        "import os, runpy, sys\n"
        "sys.path[:0] = ['ops']\n"
        "sys.argv = ['collector_build', '--manifest', 'collector_config/builder.yaml', '--home', sys.argv[1]]\n"
        "try:\n    runpy.run_module('otel_rl_ops.stack.collector_build', run_name='__main__', alter_sys=True)\n"
        "except SystemExit as end:\n    assert end.code == 0, end.code\n"
        "imported = {m.split('.')[0] for m in sys.modules}\n"
        "assert not {'torch', 'opentelemetry', 'numpy', 'otel_rl', 'otel_rl_contract'} & imported, sorted(imported)\n"
        "assert sys.modules['otel_rl_ops'].__file__.startswith(os.getcwd()), sys.modules['otel_rl_ops'].__file__\n"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", probe, str(tmp_path / "home")],
        cwd=context,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    built = Path(result.stdout.strip().splitlines()[-1])
    assert built.name == "otelcol-rl" and built.parent.name == stack_binaries.collector.parent.name
    assert built.read_bytes() == stack_binaries.collector.read_bytes()
