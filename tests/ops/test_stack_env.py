"""The variables the stack sets for its processes (``otel_rl_ops.stack.env``) are the ones their configurations read:
the module says changing one means changing both, and this holds it to that."""

from __future__ import annotations

from pathlib import Path

import pytest
from otel_rl_ops.stack import env

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("names", "folder"),
    [(env.COLLECTOR_ENV_NAMES, "collector_config"), (env.JAEGER_ENV_NAMES, "jaeger")],
)
def test_every_variable_the_stack_sets_is_read_by_its_configurations(names: tuple[str, ...], folder: str) -> None:
    """Each variable the stack exports to the collector (Jaeger) appears as ``${env:NAME`` in collector_config/*.yaml
    (jaeger/*.yaml): a variable renamed on one side only would leave a setting at its default."""
    configurations = "".join(path.read_text(encoding="utf-8") for path in sorted((ROOT / folder).glob("*.yaml")))
    assert [name for name in names if f"${{env:{name}" not in configurations] == []
