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
from collections.abc import Callable
from pathlib import Path

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
    lines += [f"| `{rule.name}` | {rule.description} |" for rule in contract.rules.RECORDING_RULES]
    lines += [
        "",
        "Read from other programs (`otel_rl_contract.foreign`):",
        "",
        "| series | kind | what |",
        "|---|---|---|",
    ]
    lines += [f"| `{item.name}` | {item.kind} | {item.description} |" for item in contract.foreign.FOREIGN_SERIES]
    return "\n".join(lines) + "\n"


SECTIONS: dict[str, Callable[[], str]] = {"pipelines": pipelines, "series": series}
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
