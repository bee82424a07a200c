"""The layers, read from every import (absolute, relative, lazy): three distributions that depend one way, and the
trainer library's stages.

- ``otel_rl_contract`` imports neither half; ``otel_rl`` (the trainer library) never imports ``otel_rl_ops`` (the
  operator tooling), and the tooling never imports the library: each takes only the contract from the other side,
  so a trainer's install needs none of the tooling and the tooling none of PyTorch.
- Inside the library, each stage imports only the stages before it (:data:`_STAGES`): what a call takes and
  summarizes (``_record``) knows nothing of what is kept (``_state``), which knows nothing of what leaves the process
  (``_export``); construction (``_pipeline``) wires them, the public face (``Telemetry``) holds what was built, and
  the integrations reach the library only through the public face, the guard and the input boundary.
"""

from __future__ import annotations

import ast
from pathlib import Path

_ROOT = Path(__file__).parents[2]
_DISTRIBUTIONS = {
    "otel_rl": _ROOT / "otel_rl",
    "otel_rl_contract": _ROOT / "contract" / "otel_rl_contract",
    "otel_rl_ops": _ROOT / "ops" / "otel_rl_ops",
}
"""Each distribution's package, read from the checkout's sources (the trainer's environment has no tooling)."""
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


_STAGES: tuple[tuple[str, frozenset[str]], ...] = (
    ("what a call takes and summarizes", frozenset({"otel_rl._record", "otel_rl._env"})),
    ("configuration", frozenset({"otel_rl._config"})),
    ("what is kept", frozenset({"otel_rl._state"})),
    ("what leaves the process", frozenset({"otel_rl._export"})),
    ("the guard", frozenset({"otel_rl._guard"})),
    ("construction", frozenset({"otel_rl._pipeline"})),
    ("the public face", frozenset({"otel_rl._telemetry", "otel_rl._global"})),
    (
        "the integrations",
        frozenset({"otel_rl._tee", "otel_rl.tracking", "otel_rl.trl", "otel_rl.torchforge", "otel_rl.verl_plugin"}),
    ),
)
"""The library's stages, lowest first; a module may import its own stage and those before it."""
_INTEGRATIONS_MAY_IMPORT = frozenset(
    {"otel_rl._telemetry", "otel_rl._global", "otel_rl._config", "otel_rl._env", "otel_rl._guard"}
    | {"otel_rl._record.inputs", "otel_rl._record.samples", "otel_rl._state.self_telemetry"}
)
"""The library as the integrations see it: the public face, the guard, the input boundary, samples, the counts."""


def _stage(module: str) -> int | None:
    """The index in :data:`_STAGES` of the library module ``module`` (None: the package itself or a public name)."""
    for index, (_, prefixes) in enumerate(_STAGES):
        if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes):
            return index
    return None


def _library_imports() -> list[tuple[str, str]]:
    """(importing module, imported library module) for every import inside the library."""
    folder = _DISTRIBUTIONS["otel_rl"]
    found = []
    for path in _sources(folder):
        module = ".".join(path.relative_to(folder.parent).with_suffix("").parts).removesuffix(".__init__")
        found += [
            (module, name) for name in sorted(_imported_modules(path, folder.parent)) if name.startswith("otel_rl.")
        ]
    return found


def test_every_library_module_has_a_stage() -> None:
    """Every module of ``otel_rl`` but the package itself belongs to one stage of :data:`_STAGES`."""
    folder = _DISTRIBUTIONS["otel_rl"]
    modules = [".".join(path.relative_to(folder.parent).with_suffix("").parts) for path in _sources(folder)]
    assert [module for module in modules if module != "otel_rl.__init__" and _stage(module) is None] == []


def test_each_stage_imports_only_the_stages_before_it() -> None:
    """No module imports a later stage; the integrations import only :data:`_INTEGRATIONS_MAY_IMPORT` of the rest."""
    crossings = []
    for module, name in _library_imports():
        own, imported = _stage(module), _stage(name)
        if own is None or imported is None:
            continue
        if imported > own:
            crossings.append(f"{module} ({_STAGES[own][0]}) imports {name} ({_STAGES[imported][0]})")
        integrations = len(_STAGES) - 1
        if (
            own == integrations
            and imported < integrations
            and not any(name == allowed or name.startswith(allowed + ".") for allowed in _INTEGRATIONS_MAY_IMPORT)
        ):
            crossings.append(f"{module} (an integration) imports {name}")
    assert crossings == []


def test_the_layer_check_sees_a_crossing(tmp_path: Path) -> None:
    """The import scan finds absolute, relative and lazy imports (so the checks above can fail)."""
    source = tmp_path / "otel_rl" / "_probe.py"
    source.parent.mkdir()
    source.write_text("def f():\n    from ._record import stats\n    import otel_rl_ops.stack\n")
    assert _imported_modules(source, tmp_path) >= {"otel_rl_ops.stack", "otel_rl._record", "otel_rl._record.stats"}
    assert _stage("otel_rl._record.stats") == 0 and _stage("otel_rl._export.worker") == 3
    assert _stage("otel_rl.trl") == len(_STAGES) - 1 and _stage("otel_rl") is None
