"""The layers, read from every import (absolute, relative, lazy): three distributions that depend one way, and the
trainer library's stages.

- ``otel_rl_contract`` imports neither half; ``otel_rl`` (the trainer library) never imports ``otel_rl_ops`` (the
  operator tooling), and the tooling never imports the library: each takes only the contract from the other side,
  so a trainer's install needs none of the tooling and the tooling none of PyTorch.
"""

from __future__ import annotations

import ast
from pathlib import Path

import otel_rl
import otel_rl_contract
import otel_rl_ops

_DISTRIBUTIONS = {
    "otel_rl": Path(otel_rl.__file__).parent,
    "otel_rl_contract": Path(otel_rl_contract.__file__).parent,
    "otel_rl_ops": Path(otel_rl_ops.__file__).parent,
}
_MAY_IMPORT = {
    "otel_rl": {"otel_rl", "otel_rl_contract"},
    "otel_rl_contract": {"otel_rl_contract"},
    "otel_rl_ops": {"otel_rl_ops", "otel_rl_contract"},
}


def _imported_modules(path: Path, root: Path) -> set[str]:
    """Every module a file under ``root`` imports, absolute or relative, at any depth (lazy imports included)."""
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            found |= {f"{module}.{alias.name}" for alias in node.names} | {module}
    return found


def _sources(package: Path) -> list[Path]:
    """The package's modules, without its data (``otel_rl_ops/data`` links to the repository's configurations)."""
    return [path for path in sorted(package.rglob("*.py")) if "data" not in path.relative_to(package).parts]


def test_the_distributions_depend_one_way() -> None:
    """No module of a distribution imports a project package it may not (see the module docstring)."""
    crossings = [
        f"{path.relative_to(folder.parent)}: {name}"
        for distribution, folder in _DISTRIBUTIONS.items()
        for path in _sources(folder)
        for name in sorted(_imported_modules(path, folder.parent))
        if name.split(".")[0] in _DISTRIBUTIONS and name.split(".")[0] not in _MAY_IMPORT[distribution]
    ]
    assert crossings == []


def test_the_layer_check_sees_a_crossing(tmp_path: Path) -> None:
    """The import scan finds absolute, relative and lazy imports (so the checks above can fail)."""
    source = tmp_path / "otel_rl" / "_probe.py"
    source.parent.mkdir()
    source.write_text("def f():\n    from ._record import stats\n    import otel_rl_ops.stack\n")
    assert _imported_modules(source, tmp_path) >= {"otel_rl_ops.stack", "otel_rl._record", "otel_rl._record.stats"}
