"""docs/api.md is what docs/generate_api.py makes from the code: regenerated, compared, checked for coverage."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
from pathlib import Path
from types import ModuleType

import pytest

import otel_rl
from otel_rl import _env
from otel_rl._record.rollouts import Rollouts

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "docs" / "generate_api.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_api", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    return _generator()


@pytest.fixture(scope="module")
def rendered(generator: ModuleType) -> str:
    text: str = generator.render()
    return text


def test_committed_api_doc_is_what_the_code_generates(generator: ModuleType, rendered: str) -> None:
    """docs/api.md equals a fresh rendering: a changed signature, field, default or docstring needs a regeneration."""
    committed = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    assert committed == rendered, f"docs/api.md is out of date: run {generator.COMMAND}"


def test_api_doc_covers_every_public_name_method_field_and_variable(rendered: str) -> None:
    """Every name of ``otel_rl.__all__``, public method of Telemetry, config and sample field, and environment
    variable of ``otel_rl._env`` has its place in the page."""
    methods = [name for name, member in vars(otel_rl.Telemetry).items() if not name.startswith("_")]
    missing = [
        *(f"### `{name}`" for name in otel_rl.__all__),
        *(f"#### `Telemetry.{name}`" for name in methods),
        *(f"| `{item.name}` |" for item in dataclasses.fields(otel_rl.TelemetryConfig)),
        *(f"| `{item.name}` |" for item in dataclasses.fields(otel_rl.EpisodeSample)),
        *(f"| `{name}` |" for name in _env.VARIABLES),
        *(f"| `{item.name}` | `" for item in dataclasses.fields(Rollouts)),
    ]
    assert [entry for entry in missing if entry not in rendered] == []
    assert "record_rollouts(\n    *,\n    mask: TensorLike | None = None," in rendered


def test_api_doc_does_not_depend_on_the_callers_environment(
    generator: ModuleType, rendered: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defaults are those of a process with no otel-rl variable set, whatever the generating shell has, and the
    shell's variables are back afterwards."""
    monkeypatch.setenv(_env.OTEL_SERVICE_NAME, "from-the-shell")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv(_env.OTEL_RL_RUN_ID, "shell-run")
    assert generator.render() == rendered
    assert "from-the-shell" not in rendered
    assert [_env.read(name) for name in (_env.OTEL_SERVICE_NAME, "WORLD_SIZE", "RANK", _env.OTEL_RL_RUN_ID)] == [
        "from-the-shell",
        "4",
        "3",
        "shell-run",
    ]


def test_field_docs_read_the_string_under_each_field(generator: ModuleType) -> None:
    """The meaning of a field is the string literal right under it in the class body, and ``#:`` comments above a
    module constant document it."""
    docs = generator.field_docs(otel_rl.TelemetryConfig)
    assert docs["rank"] == inspect.cleandoc("``rl.rank``; env ``RANK``, ``SLURM_PROCID``; default 0.")
    assert set(docs) == {item.name for item in dataclasses.fields(otel_rl.TelemetryConfig)}
    module = generator.attribute_docs('#: first line\n#: second\nA = 1\nB = 2\n"""about B"""\nC = 3\n')
    assert module == {"A": "first line second", "B": "about B"}
