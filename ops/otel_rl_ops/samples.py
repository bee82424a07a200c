"""``otel-rl samples``: runs' kept samples out of VictoriaLogs, as JSON lines, parquet or CSV, one row per sample.

Every field of a sample record (docs/contract.md, "Sample records") is a column. The names follow TRL's
``completions_{step:05d}.parquet`` where they fit (``step``, ``prompt``, ``completion``, one column per reward
function named by the function, ``advantage``), then the rest: the run, the total reward, the reference answer
(``target``), the episode's and group's ids, the policy version and the staleness (which neither TRL nor verl
writes), the lengths, the data source, the scalar extras (``extra.<key>``, typed by what all their values are), the
rank and role, the step span's trace and span ids (``trace_id`` and ``span_id``: Jaeger's trace of the step, the
exemplars of the reward histograms) and the record's time. :func:`columns` lists them.

Each sample is one row: a record the collector resent has the same ``rl.sample.id``, and of the records of one id one
is kept, as the dashboard's samples table does (``sort ... limit 1 partition by (rl.sample.id)``). What the store does
not keep comes back empty: VictoriaLogs keeps no empty field, so an empty text or a missing field is null.

Large runs stream: a run's steps are counted first (one ``stats`` query), then read in chunks of consecutive steps of
about ``batch`` samples, each de-duplicated and sorted (step, then reward from the highest) by VictoriaLogs and read
line by line, and written ``batch`` rows at a time (a parquet row group each), so memory holds one batch whatever the
run's size. A progress bar (tqdm) counts the samples on standard error.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, get_args

import otel_rl_contract as contract

from otel_rl_ops import promql
from otel_rl_ops.query import QueryError, VictoriaLogs

Format = Literal["jsonl", "parquet", "csv"]
Selection = Literal["top", "bottom", "random"]
Kind = Literal["string", "int", "float", "bool", "time"]
"""How a column's text in VictoriaLogs is read: as it is, a 64-bit integer, a double, ``true``/``false``, or an
RFC 3339 time (a UTC timestamp in nanoseconds in parquet, the text itself in JSON lines and CSV)."""

BATCH = 1000
"""Samples per query and per write: what the export holds in memory at once."""

_TIME = "_time"
_DEDUPLICATE = f"sort by (_time) limit 1 partition by ({promql.quote(contract.SAMPLE_ID)})"
_ORDER = (
    f"sort by ({promql.quote(contract.SAMPLE_STEP)}, {promql.quote(contract.SAMPLE_REWARD)} desc, "
    f"{promql.quote(contract.SAMPLE_ID)})"
)
_LINE_BREAKS = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}
"""The line breaks JSON may leave raw inside a string, escaped: every reader then finds one record per line (Python's
``str.splitlines`` breaks at them)."""
_INTEGER = r"^-?[0-9]{1,18}$"
"""An extra's value that is an integer for sure within 64 bits; a longer one is read as a double."""


@dataclass(frozen=True)
class Column:
    """One column of the export: its name, the record's field it reads, and how."""

    name: str
    field: str
    kind: Kind


_HEAD = (
    Column("run_id", contract.RUN_ID, "string"),
    Column("step", contract.SAMPLE_STEP, "int"),
    Column("prompt", "prompt", "string"),
    Column("completion", "_msg", "string"),
    Column("target", "target", "string"),
    Column("reward", contract.SAMPLE_REWARD, "float"),
)
"""The columns before the reward functions' (the body's texts: ``prompt``, ``target``, and the response, which the
collector makes the message)."""
_MIDDLE = (
    Column("advantage", contract.SAMPLE_ADVANTAGE, "float"),
    Column("episode_id", contract.SAMPLE_EPISODE_ID, "string"),
    Column("group_id", contract.SAMPLE_GROUP_ID, "string"),
    Column("sample_id", contract.SAMPLE_ID, "string"),
    Column("table", contract.SAMPLE_TABLE, "string"),
    Column("selection", contract.SAMPLE_SELECTION, "string"),
    Column("policy_version", contract.SAMPLE_POLICY_VERSION, "int"),
    Column("staleness", contract.SAMPLE_STALENESS, "int"),
    Column("prompt_length", contract.SAMPLE_REQUEST_LENGTH, "int"),
    Column("completion_length", contract.SAMPLE_RESPONSE_LENGTH, "int"),
    Column("dataset", contract.DATASET, "string"),
    Column("truncated", contract.SAMPLE_TRUNCATED, "bool"),
    Column("extra", "extra", "string"),
)
"""The columns between the reward functions' and the scalar extras' (``extra``: the body's JSON of the other
extras)."""
_TAIL = (
    Column("rank", contract.RANK, "int"),
    Column("role", contract.ROLE, "string"),
    Column("trace_id", "trace_id", "string"),
    Column("span_id", "span_id", "string"),
    Column("time", _TIME, "time"),
)
_FIXED = frozenset(column.name for column in (*_HEAD, *_MIDDLE, *_TAIL))


def reward_column(fn: str) -> str:
    """The column of reward function ``fn`` (its attribute ``rl.reward.<fn>``): the function's own name, as TRL
    writes it, unless that is another column's or begins as one of the prefixed columns do: then ``reward.<fn>``.

    >>> reward_column("correctness"), reward_column("step"), reward_column("extra.x")
    ('correctness', 'reward.step', 'reward.extra.x')
    """
    return f"reward.{fn}" if fn in _FIXED or fn.startswith(("reward.", "extra.")) else fn


def columns(fields: Sequence[str], extra_kinds: dict[str, Kind]) -> list[Column]:
    """The export's columns, given the fields the runs' records have: the fixed ones, a column per reward function
    (``rl.reward.<fn>``, after ``reward``) and one per scalar extra (``rl.sample.extra.<key>``, named
    ``extra.<key>``, read as ``extra_kinds`` says), each group sorted by name."""
    functions = sorted(field for field in fields if field.startswith(contract.SAMPLE_REWARD_PREFIX))
    extras = sorted(field for field in fields if field.startswith(contract.SAMPLE_EXTRA_PREFIX))
    return [
        *_HEAD,
        *(Column(reward_column(f.removeprefix(contract.SAMPLE_REWARD_PREFIX)), f, "float") for f in functions),
        *_MIDDLE,
        *(Column(f"extra.{f.removeprefix(contract.SAMPLE_EXTRA_PREFIX)}", f, extra_kinds[f]) for f in extras),
        *_TAIL,
    ]


def value(column: Column, record: dict[str, Any]) -> str | int | float | bool | None:
    """The record's value of ``column``, None where the record has none.

    >>> value(Column("reward", "rl.reward", "float"), {"rl.reward": "-0.25"})
    -0.25
    """
    text = VictoriaLogs.message(record) if column.field == "_msg" else record.get(column.field)
    if text is None:
        return None
    if column.kind == "int":
        return int(text)
    if column.kind == "float":
        return float(text)
    if column.kind == "bool":
        return text == "true"
    return str(text)


@dataclass(frozen=True)
class Steps:
    """The steps to export, both ends included; None: unbounded."""

    first: int | None = None
    last: int | None = None

    @property
    def bounded(self) -> bool:
        return self.first is not None or self.last is not None


def parse_steps(text: str) -> Steps:
    """``--step``: ``A:B`` (steps A to B, both included), ``A:``, ``:B`` or one step ``A``.

    >>> parse_steps("10:20"), parse_steps("7")
    (Steps(first=10, last=20), Steps(first=7, last=7))

    Raises:
        ValueError: for anything else, or A above B.
    """
    low, colon, high = text.partition(":")
    try:
        first = int(low) if low.strip() else None
        last = (int(high) if high.strip() else None) if colon else first
    except ValueError:
        raise ValueError(f'--step must be "A:B", "A:", ":B" or "A" with integer steps, got {text!r}') from None
    if first is not None and last is not None and first > last:
        raise ValueError(f"--step {text!r}: the first step {first} is after the last {last}")
    return Steps(first, last)


@dataclass(frozen=True)
class _Plan:
    """One run's export: its filter, the chunks of its steps to read one after the other, and its samples."""

    run_id: str
    selector: str
    chunks: tuple[str, ...]
    samples: int


def _selector(run_id: str, steps: Steps, selection: Selection | None) -> str:
    """The LogsQL filters of ``run_id``'s sample records within ``steps`` and of ``selection`` (None: any)."""
    parts = [
        promql.logsql_stream(contract.RUN_ID, run_id),
        promql.logsql_exact(promql.LOGS_EVENT, contract.SAMPLE_EVENT),
    ]
    if steps.bounded:
        parts.append(promql.logsql_range(contract.SAMPLE_STEP, steps.first, steps.last))
    if selection is not None:
        parts.append(promql.logsql_exact(contract.SAMPLE_SELECTION, selection))
    return " ".join(parts)


def _plan(logs: VictoriaLogs, run_id: str, steps: Steps, selection: Selection | None, batch: int) -> _Plan:
    """Count the run's samples per step and cut its steps into chunks of consecutive steps of about ``batch``
    samples (one step may hold more); the samples without a step (recorded before the first ``step()``) are a
    chunk of their own, read first."""
    selector = _selector(run_id, steps, selection)
    by_step, ids = promql.quote(contract.SAMPLE_STEP), promql.quote(contract.SAMPLE_ID)
    counted = f"{selector} | stats by ({by_step}) count_uniq({ids}) as samples"
    per_step: dict[int | None, int] = {}
    for row in logs.stream(counted):
        number = row.get(contract.SAMPLE_STEP)
        per_step[int(number) if number else None] = int(row["samples"])
    chunks: list[str] = []
    if None in per_step:
        chunks.append(promql.logsql_missing(contract.SAMPLE_STEP))
    first: int | None = None
    gathered = 0
    numbered = sorted(step for step in per_step if step is not None)
    for index, step in enumerate(numbered):
        first = step if first is None else first
        gathered += per_step[step]
        if gathered >= batch or index == len(numbered) - 1:
            chunks.append(promql.logsql_range(contract.SAMPLE_STEP, first, step))
            first, gathered = None, 0
    return _Plan(run_id, selector, tuple(chunks), sum(per_step.values()))


def _extra_kinds(logs: VictoriaLogs, plans: Sequence[_Plan], extras: Sequence[str]) -> dict[str, Kind]:
    """How each scalar extra is read: ``bool`` when all its values are ``true``/``false``, ``int`` when all are
    integers of at most 18 digits, ``float`` when all are numbers (NaN and infinities included), else ``string``.
    VictoriaLogs stores text, so an extra's type is what all its values across the runs are."""
    if not extras:
        return {}
    parts = []
    for index, field in enumerate(extras):
        quoted = promql.quote(field)
        tests = {
            "bool": f'{quoted}:in("true", "false")',
            "int": f"{quoted}:~{promql.quote(_INTEGER)}",
            "float": f'({promql.logsql_number(field)} or {quoted}:="NaN")',
        }
        parts.append(f"count({quoted}) as n{index}")
        parts += [f"count() if ({test}) as {kind}{index}" for kind, test in tests.items()]
    totals: dict[str, int] = {}
    for plan in plans:
        for row in logs.stream(f"{plan.selector} | stats {', '.join(parts)}"):
            for key, count in row.items():
                totals[key] = totals.get(key, 0) + int(count)
    kinds: dict[str, Kind] = {}
    for index, field in enumerate(extras):
        present = totals.get(f"n{index}", 0)
        matched: list[Kind] = [kind for kind in ("bool", "int", "float") if totals.get(f"{kind}{index}", 0) == present]
        kinds[field] = matched[0] if present and matched else "string"
    return kinds


def _records(logs: VictoriaLogs, plan: _Plan) -> Iterator[dict[str, Any]]:
    """The run's sample records, chunk after chunk, one per sample id, by step and then reward (highest first)."""
    for chunk in plan.chunks:
        yield from logs.stream(f"{plan.selector} {chunk} | {_DEDUPLICATE} | {_ORDER}")


class _Writer:
    """Writes rows (one value per column) in one of the formats to a binary ``sink``."""

    def __init__(self, sink: IO[bytes], export: list[Column], form: Format) -> None:
        self._sink, self._columns, self._form = sink, export, form
        if form == "jsonl":
            return
        import pyarrow as pa
        import pyarrow.csv as pa_csv
        import pyarrow.parquet as pa_parquet

        kinds = {"string": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}
        time = pa.timestamp("ns", tz="UTC") if form == "parquet" else pa.string()
        self._schema = pa.schema([(c.name, time if c.kind == "time" else kinds[c.kind]) for c in export])
        self._arrow: Any = (
            pa_parquet.ParquetWriter(sink, self._schema) if form == "parquet" else pa_csv.CSVWriter(sink, self._schema)
        )

    def write(self, rows: list[list[Any]]) -> None:
        if not rows:
            return
        if self._form == "jsonl":
            names = [column.name for column in self._columns]
            lines = (
                json.dumps(dict(zip(names, map(_json, row), strict=True)), ensure_ascii=False).translate(_LINE_BREAKS)
                for row in rows
            )
            self._sink.write("".join(f"{line}\n" for line in lines).encode("utf-8"))
            return
        import pyarrow as pa

        arrays = []
        for index, (column, field) in enumerate(zip(self._columns, self._schema, strict=True)):
            values = [row[index] for row in rows]
            arrays.append(
                pa.array(values, pa.string()).cast(field.type)
                if column.kind == "time"
                else pa.array(values, field.type)
            )
        self._arrow.write_batch(pa.record_batch(arrays, schema=self._schema))

    def close(self) -> None:
        if self._form != "jsonl":
            self._arrow.close()


def _json(item: Any) -> Any:
    """A value as JSON has it: NaN and infinities (which JSON has no literal for) as null."""
    return None if isinstance(item, float) and not math.isfinite(item) else item


def export(
    logs: VictoriaLogs,
    run_ids: Sequence[str],
    sink: IO[bytes],
    *,
    form: Format,
    steps: Steps = Steps(),
    selection: Selection | None = None,
    batch: int = BATCH,
    progress: bool | None = None,
) -> int:
    """Write the sample records of ``run_ids`` (in that order) within ``steps`` and of ``selection`` to ``sink`` in
    ``form``; returns the number of rows. ``progress``: draw tqdm's bar on standard error (None: when it is a
    terminal).

    Raises:
        ValueError: when a run has no such sample in VictoriaLogs (nothing is written).
    """
    from tqdm import tqdm

    plans = [_plan(logs, run_id, steps, selection, batch) for run_id in dict.fromkeys(run_ids)]
    for plan in plans:
        if not plan.samples:
            within = "" if not steps.bounded and selection is None else " matching --step and --selection"
            raise ValueError(f"no sample of run {plan.run_id!r}{within} in VictoriaLogs at {logs.url}")
    fields: dict[str, None] = {}
    for plan in plans:
        fields.update(dict.fromkeys(logs.field_names(plan.selector)))
    extras = sorted(field for field in fields if field.startswith(contract.SAMPLE_EXTRA_PREFIX))
    export_columns = columns(list(fields), _extra_kinds(logs, plans, extras))
    writer = _Writer(sink, export_columns, form)
    rows: list[list[Any]] = []
    written = 0
    with tqdm(
        total=sum(p.samples for p in plans), unit="sample", disable=None if progress is None else not progress
    ) as bar:
        for plan in plans:
            for record in _records(logs, plan):
                rows.append([value(column, record) for column in export_columns])
                bar.update()
                if len(rows) >= batch:
                    writer.write(rows)
                    written, rows = written + len(rows), []
        writer.write(rows)
        writer.close()
    return written + len(rows)


@contextmanager
def _output(out: str, form: Format) -> Iterator[IO[bytes]]:
    """The binary sink of ``--out``: standard output for ``-``, else ``.<name>.partial`` next to ``out``, which
    becomes ``out`` once the export is whole (an interrupted export leaves no partial file under the name)."""
    if out == "-":
        if form == "parquet":
            raise ValueError('--format parquet writes a file: give --out PATH (not "-", standard output)')
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    path = Path(out)
    if not path.parent.is_dir():
        raise ValueError(f"--out {out!r}: the folder {str(path.parent)!r} does not exist")
    partial = path.with_name(f".{path.name}.partial")
    try:
        with partial.open("wb") as sink:
            yield sink
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def _samples(args: argparse.Namespace) -> int:
    from otel_rl_ops.report.cli import stores

    url = args.victorialogs_url
    if not url:
        found, note = stores(
            prometheus_url=None,
            victorialogs_url=None,
            jaeger_url=None,
            state_dir=args.state_dir,
            prometheus_needed=False,
        )
        if note:
            print(note, file=sys.stderr)
        url = found.victorialogs_url
    steps = parse_steps(args.step) if args.step is not None else Steps()
    logs = VictoriaLogs(url.rstrip("/"))
    try:
        with _output(args.out, args.format) as sink:
            rows = export(logs, args.run_id, sink, form=args.format, steps=steps, selection=args.selection)
    except QueryError as error:
        raise ValueError(str(error)) from error
    if args.out != "-":
        print(f"wrote {args.out}: {rows} samples", file=sys.stderr)
    return 0


def add_samples_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``otel-rl samples``."""
    parser = subparsers.add_parser(
        "samples",
        help="runs' kept samples as JSON lines, parquet or CSV",
        description="Every kept sample of the runs (one row each, resent records counted once) with every field: "
        "step, prompt, completion, target, the total reward and one column per reward function, advantage, ids of "
        "the episode and its group, policy version, staleness, lengths, extras, rank, and the trace and span ids of "
        "its step. VictoriaLogs defaults to the running local stack's (otel-rl stack up).",
    )
    parser.add_argument("--run-id", action="append", required=True, help="rl.run.id of a run (repeat for several)")
    parser.add_argument("--step", default=None, metavar="A:B", help='steps A to B, both included ("A:", ":B", "A")')
    parser.add_argument("--selection", choices=get_args(Selection), default=None, help="only the samples kept so")
    parser.add_argument("--format", choices=get_args(Format), default="jsonl", help="default: jsonl")
    parser.add_argument("--out", default="-", help='the file to write (default "-": standard output; not parquet)')
    parser.add_argument(
        "--victorialogs-url", default=None, help="e.g. http://127.0.0.1:9428 (default: the running stack's)"
    )
    parser.add_argument("--state-dir", type=Path, default=None, help="the running stack (default: $OTEL_RL_HOME/stack)")
    parser.set_defaults(handler=_samples)
