"""The two halves: the trainer library never imports the operator tooling, which imports only the library's contract."""

from __future__ import annotations

import ast
from pathlib import Path

import otel_rl

_PACKAGE = Path(otel_rl.__file__).parent
_TOOLING = _PACKAGE / "ops"
_CONTRACT = frozenset({"otel_rl._names", "otel_rl._version"})
"""What the tooling may take from the library: the names of the series it reads, and the version it stamps."""


def _imported_modules(path: Path, root: Path = _PACKAGE.parent) -> set[str]:
    """Every ``otel_rl`` module a file under ``root`` imports, absolute or relative, at any depth (lazy imports
    included)."""
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            found |= {f"{module}.{alias.name}" for alias in node.names} | {module}
    return {name for name in found if name == "otel_rl" or name.startswith("otel_rl.")}


def _library_files() -> list[Path]:
    return [path for path in sorted(_PACKAGE.rglob("*.py")) if _TOOLING not in path.parents]


def test_the_library_never_imports_the_tooling() -> None:
    """No module outside ``otel_rl/ops`` imports ``otel_rl.ops`` (a trainer's install needs none of its extras)."""
    crossings = [
        f"{path.relative_to(_PACKAGE)}: {name}"
        for path in _library_files()
        for name in sorted(_imported_modules(path))
        if name.startswith("otel_rl.ops")
    ]
    assert crossings == []


def test_the_tooling_imports_only_the_contract_of_the_library() -> None:
    """``otel_rl/ops`` takes from the library only :data:`_CONTRACT` (no recording, statistics or export code)."""
    crossings = []
    for path in sorted(_TOOLING.rglob("*.py")):
        for name in sorted(_imported_modules(path)):
            outside = not name.startswith("otel_rl.ops")
            if outside and name != "otel_rl" and not any(name.startswith(allowed) for allowed in _CONTRACT):
                crossings.append(f"{path.relative_to(_PACKAGE)}: {name}")
    assert crossings == []


def test_the_layer_check_sees_a_crossing(tmp_path: Path) -> None:
    """The import scan finds absolute, relative and lazy imports (so the two checks above can fail)."""
    source = tmp_path / "otel_rl" / "_probe.py"
    source.parent.mkdir()
    source.write_text("def f():\n    from .ops import promql\n    import otel_rl.ops.stack\n")
    assert _imported_modules(source, tmp_path) >= {"otel_rl.ops", "otel_rl.ops.promql", "otel_rl.ops.stack"}
