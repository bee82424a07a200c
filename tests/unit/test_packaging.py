"""The three distributions' metadata, read from their pyproject.toml files: one version, the pins between them, and
dependency sets that keep the trainer's install free of the tooling and the tooling's free of PyTorch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import otel_rl_contract as contract
import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).parents[2]
PROJECTS = {"otel-rl": ROOT, "otel-rl-contract": ROOT / "contract", "otel-rl-ops": ROOT / "ops"}


def _project(name: str) -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads((PROJECTS[name] / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return data


def _requirements(name: str) -> dict[str, Requirement]:
    return {Requirement(line).name: Requirement(line) for line in _project(name)["dependencies"]}


def test_every_distribution_carries_the_one_version_and_pins_the_contract_to_it() -> None:
    """otel-rl and otel-rl-ops state the contract's version and require exactly that otel-rl-contract; the contract
    reads it from its own module; the dev extra pins otel-rl-ops to it too."""
    assert _project("otel-rl-contract")["dynamic"] == ["version"]
    for name in ("otel-rl", "otel-rl-ops"):
        assert _project(name)["version"] == contract.__version__, name
        assert str(_requirements(name)["otel-rl-contract"].specifier) == f"=={contract.__version__}", name
    dev = [Requirement(line) for line in _project("otel-rl")["optional-dependencies"]["dev"]]
    (ops,) = [requirement for requirement in dev if requirement.name == "otel-rl-ops"]
    assert str(ops.specifier) == f"=={contract.__version__}"


def test_the_installs_do_not_pull_each_other() -> None:
    """The trainer's install requires no tooling (no otel-rl-ops, YAML, matplotlib, bcrypt); the tooling's requires
    neither PyTorch, numba nor the OpenTelemetry SDK; the contract requires nothing."""
    trainer, tooling = set(_requirements("otel-rl")), set(_requirements("otel-rl-ops"))
    assert {"torch", "numba", "opentelemetry-sdk", "otel-rl-contract"} <= trainer
    assert not trainer & {"otel-rl-ops", "pyyaml", "matplotlib", "bcrypt"}
    assert "otel-rl-contract" in tooling and not tooling & {"torch", "numba", "numpy", "opentelemetry-sdk", "otel-rl"}
    assert _project("otel-rl-contract")["dependencies"] == []
    assert set(_project("otel-rl")["optional-dependencies"]) == {"trl", "dev"}


def test_the_command_line_and_the_verl_plugin_are_where_users_find_them() -> None:
    """`otel-rl` is otel-rl-ops's console script; the verl plugin entry point stays with the trainer library."""
    assert _project("otel-rl-ops")["scripts"] == {"otel-rl": "otel_rl_ops.cli:main"}
    assert "scripts" not in _project("otel-rl")
    assert _project("otel-rl")["entry-points"]["verl.plugins"] == {"otel_rl": "otel_rl.verl_plugin"}
