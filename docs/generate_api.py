"""Write docs/api.md, the reference of otel_rl's public API, from the code, so that it cannot drift from it.

Everything comes from the package itself: the names of ``otel_rl.__all__``, their signatures (``inspect``) and
docstrings, the fields of the configuration and sample dataclasses with the string literal under each field
(read with ``ast``), the defaults a lone process resolves to (a ``TelemetryConfig`` built with no environment
variable set), and the environment variables declared in ``otel_rl/_env.py`` with their ``#:`` comments.
``tests/unit/test_api_doc.py`` regenerates the page in memory and fails when the committed one differs.

    .venv/bin/python docs/generate_api.py            # rewrite docs/api.md
    .venv/bin/python docs/generate_api.py --check    # exit 1 when docs/api.md is out of date
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import os
import re
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import otel_rl
from otel_rl import _env

API_DOC = Path(__file__).resolve().parent / "api.md"
COMMAND = ".venv/bin/python docs/generate_api.py"
_ROLE = re.compile(r":(?:class|meth|func|data|attr|mod|obj):`~?([^`]+)`")
_CONSTANT = re.compile(r"\b[A-Z][A-Z0-9_]+\b")
_NAME = re.compile(r"\b[A-Za-z_]\w*\b")
_UNDOCUMENTED = "*(no docstring)*"
_WIDTH = 100
"""Signatures longer than this are written one parameter a line."""


def attribute_docs(source: str) -> dict[str, str]:
    """The documentation of each assignment at the top level of ``source`` (a module or a class body): the string
    literal right under it, or the ``#:`` comment lines right above it (Sphinx's two conventions)."""
    tree = ast.parse(textwrap.dedent(source))
    body = tree.body[0].body if len(tree.body) == 1 and isinstance(tree.body[0], ast.ClassDef) else tree.body
    lines = textwrap.dedent(source).splitlines()
    docs: dict[str, str] = {}
    for index, node in enumerate(body):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
        else:
            continue
        after = body[index + 1] if index + 1 < len(body) else None
        if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
            docs[name] = inspect.cleandoc(after.value.value)
            continue
        comments: list[str] = []
        row = node.lineno - 2
        while row >= 0 and lines[row].strip().startswith("#:"):
            comments.insert(0, lines[row].strip()[2:].strip())
            row -= 1
        if comments:
            docs[name] = " ".join(comments)
    return docs


def field_docs(cls: type) -> dict[str, str]:
    """The string literal under each field of dataclass ``cls``, from its source."""
    return attribute_docs(inspect.getsource(cls))


def markdown(doc: str | None) -> str:
    """A docstring as Markdown: Sphinx roles become code, doctest examples become fenced Python blocks."""
    if not doc:
        return _UNDOCUMENTED
    out: list[str] = []
    in_example = False
    for line in _ROLE.sub(lambda match: f"``{match.group(1).split('.')[-1]}``", doc).splitlines():
        if line.startswith(">>>") and not in_example:
            out.append("```python")
            in_example = True
        elif in_example and not line.strip():
            out.append("```")
            in_example = False
        out.append(line)
    if in_example:
        out.append("```")
    return "\n".join(out)


def cell(doc: str | None) -> str:
    """A docstring on one line, for a table cell."""
    return " ".join(markdown(doc).split()).replace("|", "\\|")


def _annotation(annotation: object, module: str) -> str:
    """An annotation as written, with the ``Literal`` aliases of ``module`` (``ExporterKind``) spelled out."""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    namespace = vars(sys.modules[module])

    def spell(match: re.Match[str]) -> str:
        alias = namespace.get(match.group(0))
        if typing.get_origin(alias) is not typing.Literal:
            return match.group(0)
        return f"Literal[{', '.join(repr(value) for value in typing.get_args(alias))}]"

    return _NAME.sub(spell, text)


def value_text(value: object) -> str:
    """A default as code: functions by their dotted name, mappings as plain dicts, public constants by name."""
    for name in otel_rl.__all__:
        public = getattr(otel_rl, name)
        if name.isupper() and type(public) is type(value) and public == value:
            return name
    if isinstance(value, Mapping):
        return repr(dict(value))
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', None) or ''}.{value.__qualname__}".lstrip(".")
    return repr(value)


def signature(name: str, obj: Callable[..., object], *, method: bool = False) -> str:
    """``name(parameters) -> return`` as the code declares it (annotations as written, ``self`` left out); a
    function that wraps a class (``setup``) returns that class."""
    sig = inspect.signature(obj)
    module = inspect.unwrap(obj).__module__
    parameters: list[str] = []
    star = False
    items = list(sig.parameters.values())[1 if method else 0 :]
    for parameter in items:
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and not star:
            parameters.append("*")
            star = True
        text = parameter.name
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            text, star = f"*{text}", True
        elif parameter.kind is inspect.Parameter.VAR_KEYWORD:
            text = f"**{text}"
        if parameter.annotation is not inspect.Parameter.empty:
            text += f": {_annotation(parameter.annotation, module)}"
        if parameter.default is not inspect.Parameter.empty:
            text += f" = {value_text(parameter.default)}"
        parameters.append(text)
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY and (
            parameter is items[-1] or items[items.index(parameter) + 1].kind is not inspect.Parameter.POSITIONAL_ONLY
        ):
            parameters.append("/")
    wrapped = inspect.unwrap(obj)
    returns = ""
    if inspect.isclass(wrapped) and wrapped is not obj:
        returns = f" -> {wrapped.__name__}"
    elif not inspect.isclass(obj) and sig.return_annotation is not inspect.Signature.empty:
        returns = f" -> {_annotation(sig.return_annotation, module)}"
    flat = f"{name}({', '.join(parameters)}){returns}"
    if len(flat) <= _WIDTH:
        return flat
    return f"{name}(\n" + "".join(f"    {parameter},\n" for parameter in parameters) + f"){returns}"


@contextmanager
def _clean_environment() -> Iterator[None]:
    """No variable of ``otel_rl._env.VARIABLES`` set, for the duration (restored after)."""
    saved = {name: os.environ.pop(name) for name in _env.VARIABLES if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def resolved_defaults() -> dict[str, str]:
    """What each field of a ``TelemetryConfig()`` resolves to in a lone process with no environment variable set;
    "random" for the fields that differ between two such configs."""
    with _clean_environment():
        first, second = otel_rl.TelemetryConfig().resolved, otel_rl.TelemetryConfig().resolved
    return {
        item.name: "random"
        if getattr(first, item.name) != getattr(second, item.name)
        else value_text(getattr(first, item.name))
        for item in dataclasses.fields(first)
        if item.name != "resolved"
    }


def variable_docs() -> dict[str, str]:
    """Each environment variable of ``otel_rl._env.VARIABLES`` with its meaning: its constant's ``#:`` comment, or
    for the launcher variables the precedence of the group it belongs to."""
    docs = attribute_docs(inspect.getsource(_env))
    groups = {
        name: value
        for name, value in vars(_env).items()
        if name.isupper() and isinstance(value, tuple) and name != "VARIABLES"
    }
    meanings: dict[str, str] = {}
    for variable in _env.VARIABLES:
        constant = next((name for name, value in vars(_env).items() if name.isupper() and value == variable), None)
        if constant is not None and constant in docs:
            meanings[variable] = docs[constant]
            continue
        group = next(values for values in groups.values() if variable in values)
        order = ", ".join(f"``{name}``" for name in group)
        meanings[variable] = f"Read from the launcher: the first set of {order}."
    return meanings


def _fields_table(cls: type, *, defaults: Mapping[str, str] | None = None, environment: bool = False) -> list[str]:
    """One row per dataclass field: name, type, default, environment variables (named by its docstring), meaning."""
    docs = field_docs(cls)
    variables = set(_env.VARIABLES)
    head = ["Field", "Type", "Default", *(["Environment"] if environment else []), "Meaning"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for item in dataclasses.fields(cls):
        if not item.init:
            default = "set at construction (not an argument)"
        elif item.default is not dataclasses.MISSING:
            default = f"`{value_text(item.default)}`"
        elif item.default_factory is not dataclasses.MISSING:
            made = item.default_factory(), item.default_factory()
            default = "random" if made[0] != made[1] else f"`{value_text(made[0])}`"
        else:
            default = "required"
        if defaults is not None and item.init and item.default is None and defaults[item.name] != "None":
            resolved = defaults[item.name]
            default += f" → {resolved}" if resolved == "random" else f" → `{resolved}`"
        row = [
            f"`{item.name}`",
            f"`{_annotation(item.type, cls.__module__)}`".replace("|", "\\|"),
            default.replace("|", "\\|"),
        ]
        if environment:
            named = [name for name in _CONSTANT.findall(docs.get(item.name, "")) if name in variables]
            row.append(", ".join(f"`{name}`" for name in dict.fromkeys(named)) or "")
        row.append(cell(docs.get(item.name)))
        rows.append("| " + " | ".join(row) + " |")
    return rows


def _methods(cls: type) -> list[str]:
    """Each public method and property of ``cls``, in the order the class defines them, with its docstring."""
    out: list[str] = []
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            out += [f"#### `{cls.__name__}.{name}` (property)", "", markdown(inspect.getdoc(member)), ""]
        elif inspect.isfunction(inspect.unwrap(member)):
            out += [
                f"#### `{cls.__name__}.{name}`",
                "",
                "```python",
                signature(name, member, method=True),
                "```",
                "",
                markdown(inspect.getdoc(member)),
                "",
            ]
            takes = getattr(inspect.unwrap(member, stop=lambda f: hasattr(f, "takes")), "takes", None)
            if takes is not None:  # keyword arguments declared as a dataclass's fields, with their documents
                out += [*_fields_table(takes), ""]
    return out


def _defining_module(name: str) -> ModuleType:
    """The module ``otel_rl/__init__.py`` imports ``name`` from."""
    for node in ast.parse(inspect.getsource(otel_rl)).body:
        if isinstance(node, ast.ImportFrom) and any(alias.name == name for alias in node.names):
            return sys.modules[node.module or ""]
    raise LookupError(f"otel_rl/__init__.py does not import {name!r}")


def _entry(name: str, defaults: Mapping[str, str]) -> list[str]:
    """The section of one public name."""
    obj = getattr(otel_rl, name)
    if name.isupper():
        module = _defining_module(name)
        annotation = inspect.get_annotations(module).get(name)
        declared = f"{name}: {_annotation(annotation, module.__name__)}" if annotation else name
        return [
            f"### `{name}`",
            "",
            "```python",
            f"{declared} = {obj!r}",
            "```",
            "",
            markdown(attribute_docs(inspect.getsource(module)).get(name)),
            "",
        ]
    out = [f"### `{name}`", ""]
    if typing.get_origin(obj) in (typing.Union, types.UnionType):
        source = inspect.getsource(_defining_module(name))
        (alias,) = [
            ast.get_source_segment(source, node) or name
            for node in ast.parse(source).body
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name
        ]
        return [*out, "```python", alias, "```", "", markdown(attribute_docs(source).get(name)), ""]
    if inspect.isclass(obj) and dataclasses.is_dataclass(obj):
        out += [markdown(inspect.getdoc(obj)), ""]
        if obj is otel_rl.TelemetryConfig:
            out += [
                "Keyword-only. A field left `None` is read from the environment variable named in its row, then "
                "takes the default after the arrow: what a lone process (rank 0 of 1, no variable set) gets.",
                "",
                *_fields_table(obj, defaults=defaults, environment=True),
                "",
            ]
        elif obj is otel_rl.EpisodeSample:
            out += ["Keyword-only.", "", *_fields_table(obj), ""]
        return out
    if inspect.isclass(obj):
        constructor = [] if _is_protocol(obj) else ["```python", signature(name, obj), "```", ""]
        return [*out, *constructor, markdown(inspect.getdoc(obj)), "", *_methods(obj)]
    return [*out, "```python", signature(name, obj), "```", "", markdown(inspect.getdoc(obj)), ""]


def _is_protocol(cls: type) -> bool:
    return bool(getattr(cls, "_is_protocol", False))


def render() -> str:
    """The whole of docs/api.md."""
    defaults = resolved_defaults()
    order = ["setup", "Telemetry", "TelemetryConfig", "EpisodeSample"]
    names = [*order, *(name for name in otel_rl.__all__ if name not in order)]
    lines = [
        "# API reference",
        "",
        f"<!-- Generated by docs/generate_api.py from the code: do not edit by hand. Edit the docstrings, then run "
        f"`{COMMAND}`. -->",
        "",
        markdown(inspect.getdoc(otel_rl)),
        "",
        "Everything public is importable from `otel_rl` (its `__all__`); modules whose names start with `_` are "
        "private. The integrations (`otel_rl.torchforge`, `otel_rl.tracking`, `otel_rl.trl`) are described in the "
        "README and their own docstrings.",
        "",
        "## Contents",
        "",
        *(f"- [`{name}`](#{name.lower()})" for name in names),
        "- [Environment variables](#environment-variables)",
        "",
        "## Public names",
        "",
    ]
    for name in names:
        lines += _entry(name, defaults)
    lines += [
        "## Environment variables",
        "",
        markdown(inspect.getdoc(_env)),
        "",
        "| Variable | `TelemetryConfig` field | Meaning |",
        "|---|---|---|",
    ]
    docs = field_docs(otel_rl.TelemetryConfig)
    for variable, meaning in variable_docs().items():
        owners = [name for name, doc in docs.items() if variable in _CONSTANT.findall(doc)]
        fields = ", ".join(f"`{name}`" for name in owners)
        lines.append(f"| `{variable}` | {fields} | {cell(meaning)} |")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write docs/api.md from otel_rl's code.")
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/api.md is out of date; write nothing")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = API_DOC.read_text(encoding="utf-8") if API_DOC.exists() else ""
        if current != text:
            print(f"{API_DOC} is out of date: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    API_DOC.write_text(text, encoding="utf-8")
    print(f"wrote {API_DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
