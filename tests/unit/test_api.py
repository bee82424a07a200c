"""The public face: __all__ is pinned, and setup is once per process."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
from pathlib import Path

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
        "Tee",
        "Telemetry",
        "TelemetryConfig",
        "TensorLike",
        "TopBottomFilter",
        "get_telemetry",
        "reset",
        "setup",
        "tee_tensorboard",
        "tee_wandb",
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


_PACKAGE = Path(otel_rl.__file__).parent


def test_no_module_imports_another_modules_private_names() -> None:
    """Private helpers stay in their module: what modules share has a public name (a module may be private, its
    shared functions are not underscored). ``_rollouts`` imported ``_first_unmasked`` and ``_numpy`` from ``_stats``."""
    crossings = []
    for path in sorted(_PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("otel_rl"):
                crossings += [
                    f"{path.name}: {alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_")
                    and not alias.name.startswith("__")
                    and importlib.util.find_spec(f"{node.module}.{alias.name}") is None
                ]
    assert crossings == []


def test_the_architecture_document_names_every_module() -> None:
    """docs/architecture.md maps the code: every module and sub-package of the three distributions is named there
    (it once omitted _buckets, _parallel and _rollouts)."""
    root = _PACKAGE.parent
    text = (root / "docs" / "architecture.md").read_text()
    missing = []
    for package in (_PACKAGE, root / "contract" / "otel_rl_contract", root / "ops" / "otel_rl_ops"):
        sources = [path for path in package.rglob("*.py") if "data" not in path.relative_to(package).parts]
        missing += [path.stem for path in sources if path.stem != "__init__" and path.stem not in text]
        missing += [f"{path.parent.name}/" for path in sources if path.name == "__init__.py" and path.parent != package]
    assert sorted(name for name in missing if name not in text) == []
