"""The generated parts of the docs (docs/generate_sections.py) are what the code and configuration declare."""

from __future__ import annotations

import importlib.util
import re
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


def test_every_component_of_a_pipeline_is_explained(sections: ModuleType) -> None:
    """Each receiver, processor and exporter of collector.yaml's pipelines is named in docs/pipeline.md outside its
    generated parts: a component added to a pipeline needs its explanation there."""
    prose = sections._PART.sub("", (ROOT / "docs" / "pipeline.md").read_text())
    declared = sections.configurations()["collector.yaml"]["service"]["pipelines"]
    components = {
        c
        for pipeline in declared.values()
        for kind in ("receivers", "processors", "exporters")
        for c in pipeline.get(kind, [])
    }
    assert {"transform/merge_ranks", "filter/oversized_records", "spanmetrics"} <= components
    assert sorted(c for c in components if not re.search(rf"(?<![\w/]){re.escape(c)}(?![\w/])", prose)) == []


def test_every_configuration_file_is_in_the_files_table() -> None:
    """docs/pipeline.md's Files table names every collector and Jaeger configuration of the repository."""
    text = (ROOT / "docs" / "pipeline.md").read_text()
    files = text[text.index("## Files") : text.index("Environment:")]
    configurations = [*(ROOT / "collector_config").glob("*.yaml"), *(ROOT / "jaeger").glob("*.yaml")]
    named = [p for p in configurations if p.name == "builder.yaml" or f"`{p.parent.name}/{p.name}`" in files]
    assert sorted(str(p.relative_to(ROOT)) for p in set(configurations) - set(named)) == []
    assert "collector_config/agent-dns.yaml" in files


def test_the_collector_builds_what_its_configurations_use(sections: ModuleType) -> None:
    """builder.yaml builds as many components of each kind as the configurations use (the components part lists what
    they use; a component built and never used, or used and never built, breaks the count)."""
    import yaml

    manifest = yaml.safe_load((ROOT / "collector_config" / "builder.yaml").read_text())
    used = sections.used_components(sections.configurations())
    assert {kind: len(manifest.get(kind, [])) for kind in used} == {kind: len(types) for kind, types in used.items()}
    assert (
        "| extensions | bearertokenauth (secure.yaml), file_storage (gateway.yaml), health_check |"
        in sections.components()
    )


def test_the_environment_part_reads_every_reference(sections: ModuleType, tmp_path: Path) -> None:
    """Every ``${env:NAME}`` of the configurations, in keys' values and lists, a default holding another reference,
    an empty default and none at all: each variable's defaults by file and the settings it sets."""
    (tmp_path / "builder.yaml").write_text("exporters: [{gomod: x}]\n")
    (tmp_path / "a.yaml").write_text(
        "extensions:\n"
        "  file_storage/q:\n"
        "    directory: ${env:DIR:-${env:HOME}/q}/${env:PORT:-4317}\n"
        "processors:\n"
        "  filter/x:\n"
        "    metric_conditions: ['Len(metric.data_points) > ${env:CAP:-2048}']\n"
        "  tls: {client_ca_file: '${env:CA:-}', key_file: '${env:KEY}'}\n"
    )
    (tmp_path / "b.yaml").write_text("receivers:\n  otlp: {endpoint: '${env:PORT:-0.0.0.0:4317}'}\n")
    assert sections.environment(tmp_path).splitlines() == [
        "| variable | default | sets |",
        "|---|---|---|",
        "| `CA` | empty | a.yaml: `processors.tls.client_ca_file` |",
        "| `CAP` | `2048` | a.yaml: `processors.filter/x.metric_conditions` |",
        "| `DIR` | `${env:HOME}/q` | a.yaml: `extensions.file_storage/q.directory` |",
        "| `KEY` | (required) | a.yaml: `processors.tls.key_file` |",
        "| `PORT` | a.yaml: `4317`; b.yaml: `0.0.0.0:4317` | a.yaml: `extensions.file_storage/q.directory`; b.yaml: "
        "`receivers.otlp.endpoint` |",
    ]
    assert "| `PORT` |" not in sections.environment(tmp_path, files=("c.yaml",))


def test_the_series_part_lists_every_series_the_contract_declares(sections: ModuleType) -> None:
    """docs/contract.md carries the series part, which names every series the contract derives, every recorded one
    and every foreign one (a metric added to the contract changes it)."""
    import otel_rl_contract as contract

    assert "<!-- generated: series -->" in (ROOT / "docs" / "contract.md").read_text()
    made = sections.series()
    windowed = {series.name for statistic in contract.rules.WINDOWED for series in statistic.series}
    declared = (*contract.DERIVED_SERIES, *contract.rules.RECORDING_RULES, *contract.foreign.FOREIGN_SERIES)
    assert [item.name for item in declared if item.name not in windowed and f"`{item.name}" not in made] == []
    assert [
        s.pattern for s in contract.rules.WINDOWED if f"`{s.pattern}`, `{{w}}` one of `{s.windows[0]}`" not in made
    ] == []
    assert "`rl_phase_duration_seconds_bucket`" in made and "`rl_phase_duration_seconds`" not in made
