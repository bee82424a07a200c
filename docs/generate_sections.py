"""Write the parts of the docs that list what the code and configuration declare, so that they cannot drift.

A generated part sits between ``<!-- generated: NAME -->`` and ``<!-- end generated -->`` in a Markdown file of
``docs/`` or the README; :data:`SECTIONS` says how each NAME is made. ``tests/unit/test_doc_sections.py`` renders
every part in memory and fails when a committed one differs.

    .venv/bin/python docs/generate_sections.py            # rewrite every generated part
    .venv/bin/python docs/generate_sections.py --check    # exit 1 when one is out of date
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import otel_rl_contract as contract
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ".venv/bin/python docs/generate_sections.py"
_PART = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


def pipelines() -> str:
    """Each pipeline of ``collector_config/collector.yaml``: receivers → processors → exporters, in order."""
    config = yaml.safe_load((ROOT / "collector_config" / "collector.yaml").read_text(encoding="utf-8"))
    declared = config["service"]["pipelines"]
    width = max(len(name) for name in declared) + 2
    lines = []
    for name, pipeline in declared.items():
        stages = [", ".join(pipeline["receivers"]), *pipeline.get("processors", []), ", ".join(pipeline["exporters"])]
        lines.append(f"{name + ':':<{width}}{' → '.join(stages)}")
    return "```\n" + "\n".join(lines) + "\n```\n"


_KINDS = ("receivers", "processors", "connectors", "exporters", "extensions")
"""The kinds of component a collector configuration declares, in the order the collector's docs list them."""
_ENV = re.compile(r"\$\{env:(?P<name>\w+)(?::-(?P<default>(?:[^${}]|\$\{[^{}]*\})*))?\}")
"""A ``${env:NAME}`` or ``${env:NAME:-default}`` reference of a collector configuration (a default may hold one more
reference: ``${env:HOME}/...``)."""


def configurations(folder: Path | None = None) -> dict[str, dict[str, Any]]:
    """Every collector configuration of ``folder`` (default ``collector_config/``) by file name, parsed; not the
    builder's manifest."""
    folder = folder or ROOT / "collector_config"
    return {
        path.name: yaml.safe_load(path.read_text(encoding="utf-8"))
        for path in sorted(folder.glob("*.yaml"))
        if path.name != "builder.yaml"
    }


def used_components(configs: dict[str, dict[str, Any]]) -> dict[str, dict[str, list[str]]]:
    """Kind → component type (the part of a component id before ``/``) → the files that declare one of it."""
    used: dict[str, dict[str, list[str]]] = {kind: {} for kind in _KINDS}
    for file, config in configs.items():
        for kind in _KINDS:
            for component in config.get(kind) or {}:
                files = used[kind].setdefault(component.split("/")[0], [])
                if file not in files:
                    files.append(file)
    return used


def components() -> str:
    """The components the collector configurations use, by kind, as they name them; otel-rl's own (the Go module of
    ``collector_config/processors``) apart, and the configuration providers ``builder.yaml`` builds in. A component
    that ``collector.yaml`` does not use names the files that do."""
    manifest = yaml.safe_load((ROOT / "collector_config" / "builder.yaml").read_text(encoding="utf-8"))
    own = {entry["import"].rsplit("/", 1)[1] for kind in _KINDS for entry in manifest.get(kind, []) if "path" in entry}
    rows = ["| kind | components |", "|---|---|"]
    for kind, types in used_components(configurations()).items():
        named = {
            t: t if "collector.yaml" in files else f"{t} ({', '.join(files)})" for t, files in sorted(types.items())
        }
        upstream = ", ".join(name for t, name in named.items() if t not in own)
        ours = ", ".join(name for t, name in named.items() if t in own)
        rows.append(f"| {kind} | {upstream}; otel-rl's own {ours} |" if ours else f"| {kind} | {upstream} |")
    providers = [
        entry["gomod"].split()[0].rsplit("/", 1)[1].removesuffix("provider") for entry in manifest["providers"]
    ]
    rows.append(f"| providers | {', '.join(providers)} |")
    return "\n".join(rows) + "\n"


def _strings(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, str]]:
    """``(setting, text)`` of every string of a parsed configuration, the setting its keys joined by dots."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(value, (*path, str(key)))
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value, path)
    elif isinstance(node, str):
        yield ".".join(path), node


def environment(folder: Path | None = None, *, files: tuple[str, ...] = ()) -> str:
    """Every environment variable the collector configurations of ``folder`` (default ``collector_config/``; only
    ``files`` when given) read with ``${env:NAME}``: its default in each file ("required" where it has none) and the
    settings it sets, by file."""
    reads: dict[str, dict[str, tuple[list[str], list[str]]]] = {}
    for file, config in configurations(folder).items():
        if files and file not in files:
            continue
        for setting, text in _strings(config):
            for found in _ENV.finditer(text):
                defaults, settings = reads.setdefault(found["name"], {}).setdefault(file, ([], []))
                default = {None: "(required)", "": "empty"}.get(found["default"], f"`{found['default']}`")
                if default not in defaults:
                    defaults.append(default)
                if f"`{setting}`" not in settings:
                    settings.append(f"`{setting}`")
    rows = ["| variable | default | sets |", "|---|---|---|"]
    for name in sorted(reads):
        by_file = reads[name]
        default_column = _grouped({file: ", ".join(values) for file, (values, _) in by_file.items()})
        sets_column = _grouped({file: ", ".join(values) for file, (_, values) in by_file.items()}, always=True)
        rows.append(f"| `{name}` | {default_column} | {sets_column} |")
    return "\n".join(rows) + "\n"


def _grouped(values: dict[str, str], *, always: bool = False) -> str:
    """``values`` by file, files with the same value together: ``value (files); ...``, or the value alone when every
    file has it (unless ``always``)."""
    groups: dict[str, list[str]] = {}
    for file, value in values.items():
        groups.setdefault(value, []).append(file)
    if len(groups) == 1 and not always:
        return next(iter(groups))
    return "; ".join(f"{', '.join(files)}: {value}" for value, files in groups.items())


def _names(names: frozenset[str]) -> str:
    return ", ".join(f"`{name}`" for name in sorted(names))


def _written(series: contract.Series, form: contract.HistogramForm | None) -> str:
    """What ``series`` writes: a histogram's native series and, with ``histogram="explicit"``, its classic ones;
    a histogram of a fixed ``form`` that form's alone."""
    if series.kind != "histogram":
        return f"`{series.name}`"
    if form is not None:
        return f"{_names(series.names(form))} (always {'native' if form == 'exponential' else 'classic'})"
    return f"`{series.name}`; explicit: {_names(series.names('explicit'))}"


def series() -> str:
    """Every Prometheus series name of the contract (``otel_rl_contract.KNOWN_SERIES``): each metric's series as
    derived from its name, kind and unit, the exemplar carriers, the recording rules' and the foreign ones."""
    lines = ["| OpenTelemetry metric | kind | unit | Prometheus series |", "|---|---|---|---|"]
    for metric in contract.ALL_METRICS:
        unit = f"`{metric.unit}`" if metric.unit else ""
        lines.append(f"| `{metric.name}` | {metric.kind} | {unit} | {_written(contract.series(metric), metric.form)} |")
    for distribution in contract.EXEMPLAR_CARRIERS:
        carrier = contract.exemplar_series(distribution.histogram)
        name = f"`{distribution.histogram.name}.exemplars`"
        lines.append(f"| (collector) {name} | histogram | | {_written(carrier, None)}: for exemplars only |")
    lines += ["", "Recorded by `prometheus/rules/` (`otel_rl_contract.rules`):", "", "| series | what |", "|---|---|"]
    windowed = {series.name for statistic in contract.rules.WINDOWED for series in statistic.series}
    lines += [
        f"| `{statistic.pattern}`, `{{w}}` one of {', '.join(f'`{w}`' for w in statistic.windows)} | "
        f"{statistic.description} |"
        for statistic in contract.rules.WINDOWED
    ]
    lines += [
        f"| `{rule.name}` | {rule.description} |"
        for rule in contract.rules.RECORDING_RULES
        if rule.name not in windowed
    ]
    lines += [
        "",
        "Read from other programs (`otel_rl_contract.foreign`):",
        "",
        "| series | kind | what |",
        "|---|---|---|",
    ]
    lines += [f"| `{item.name}` | {item.kind} | {item.description} |" for item in contract.foreign.FOREIGN_SERIES]
    return "\n".join(lines) + "\n"


SECTIONS: dict[str, Callable[[], str]] = {
    "pipelines": pipelines,
    "series": series,
    "collector-components": components,
    "collector-environment": environment,
    "agent-dns-environment": lambda: environment(files=("agent-dns.yaml",)),
}
"""Every generated part, by the NAME its markers carry."""


def documents() -> list[Path]:
    """The Markdown files that may hold generated parts."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def render(text: str) -> str:
    """``text`` with every generated part made anew.

    Raises:
        KeyError: naming a part whose NAME is not in :data:`SECTIONS`.
    """

    def part(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in SECTIONS:
            raise KeyError(f"unknown generated part {name!r}; known: {sorted(SECTIONS)}")
        return f"{match.group(1)}{SECTIONS[name]()}{match.group(4)}"

    return _PART.sub(part, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the generated parts of the docs from the code.")
    parser.add_argument("--check", action="store_true", help="exit 1 when a part is out of date; write nothing")
    args = parser.parse_args(argv)
    stale = []
    for path in documents():
        text = path.read_text(encoding="utf-8")
        made = render(text)
        if made != text:
            stale.append(path)
            if not args.check:
                path.write_text(made, encoding="utf-8")
    if args.check and stale:
        print(f"out of date: {', '.join(str(p.relative_to(ROOT)) for p in stale)}; run {COMMAND}", file=sys.stderr)
        return 1
    for path in [] if args.check else stale:
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
