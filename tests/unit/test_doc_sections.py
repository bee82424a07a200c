"""The generated parts of the docs (docs/generate_sections.py) are what the code and configuration declare."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def sections() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_sections", ROOT / "docs" / "generate_sections.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_generated_part_is_current(sections: ModuleType) -> None:
    """Each committed generated part equals what the generator makes now (run it after changing the source)."""
    stale = [path.name for path in sections.documents() if sections.render(path.read_text()) != path.read_text()]
    assert stale == [], f"run {sections.COMMAND}"


def test_the_pipelines_part_exists_and_follows_the_configuration(sections: ModuleType) -> None:
    """docs/architecture.md carries the pipelines part, and a processor added to collector.yaml changes it."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert "<!-- generated: pipelines -->" in text and "transform/merge_ranks → filter/run_streams" in text
    made = sections.pipelines()
    assert made.count("\n") >= 8 and "traces/phases:" in made


def test_an_unknown_part_is_an_error(sections: ModuleType) -> None:
    """A part whose name the generator does not know is refused by name, never left as it is."""
    with pytest.raises(KeyError, match="'nonsense'"):
        sections.render("<!-- generated: nonsense -->\nold\n<!-- end generated -->")


def test_the_series_part_lists_every_series_the_contract_declares(sections: ModuleType) -> None:
    """docs/contract.md carries the series part, which names every series the contract derives, every recorded one
    and every foreign one (a metric added to the contract changes it)."""
    import otel_rl_contract as contract

    assert "<!-- generated: series -->" in (ROOT / "docs" / "contract.md").read_text()
    made = sections.series()
    declared = (*contract.DERIVED_SERIES, *contract.rules.RECORDING_RULES, *contract.foreign.FOREIGN_SERIES)
    assert [item.name for item in declared if f"`{item.name}" not in made] == []
    assert "`rl_phase_duration_seconds_bucket`" in made and "`rl_phase_duration_seconds`" not in made
