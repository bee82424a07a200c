"""The chart's manifests, rendered once per session for every values case (deploy/helm/check's renderer)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from otel_rl_ops.stack.gotools import go_executable

CHECK_MODULE = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "check"


@pytest.fixture(scope="session")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Every values case rendered by ``go run ./cmd/render`` (``helm template`` through Helm's library), by case."""
    out = tmp_path_factory.mktemp("rendered")
    result = subprocess.run(
        [str(go_executable()), "run", "./cmd/render", "-out", str(out)],
        cwd=CHECK_MODULE,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr
    return {path.stem: [doc for doc in yaml.safe_load_all(path.read_text()) if doc] for path in out.glob("*.yaml")}
