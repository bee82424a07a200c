"""``otel-rl samples`` through the real stack: runs with hostile ids record samples with hostile texts through the
collector (every log export delivered twice, as a resend does) into VictoriaLogs; the export, in every format, is
read back as users read it (json, pyarrow, pandas, Hugging Face ``datasets``) and compared field by field with what
the ranks recorded: one row per sample, each run's own samples only."""

from __future__ import annotations

import io
import json
import math
import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import otel_rl_contract as contract
import pytest
from otel_rl_ops import promql
from otel_rl_ops.cli import main
from otel_rl_ops.query import Jaeger, Span, VictoriaLogs
from otel_rl_ops.samples import Steps, export

from tests.pipeline.harness import RankProcess, eventually
from tests.reliability.test_sample_dedup import DuplicatingProxy

SESSION = uuid.uuid4().hex[:8]
VICTIM = f"samples-victim-{SESSION}"
RUN_IDS = (
    VICTIM,
    f'{SESSION} q"uote\\back\\slash\\',
    f"{SESSION} new\nline\ttab",
    f"{SESSION} ünï©ødé 实验 🚀",
    f'{VICTIM}" OR rl.run.id:="{VICTIM}',
    f'{VICTIM}"}} OR {{rl.run.id="{VICTIM}',
)
"""A victim and ids that break naive queries (tests/queries/test_hostile_run_ids.py): the last two, pasted into an
exact filter or a stream filter by hand, select the victim's records. Each starts or ends as that module's do, and
each holds this session's own part: the two modules may share a worker's stack, and its runs must not count here."""
STEPS = 3
PER_STEP = 4
BUDGET = 16_384
"""The default sample_text_budget_bytes: texts are cut to it."""
TEXTS = (
    "line one\nline two\r\nline three\ttabbed",
    "say \"hi\" \\ back\\slash 'single' `tick`",
    "ctrl \x00\x01\x07\x08\x1b\x7f end",
    "separators \u2028 \u2029 \x85 \x1c\x1d\x1e end",
    "$\\frac{1}{2}$ \\boxed{42} { $$ } %s {0}",
    "ünï©ødé 实验 🚀 \u200b\ufeff",
    "λ" * (BUDGET // 2),
    "y" * (BUDGET + 3000),
    "  padded  ",
    '{"looks": "like json"}, a,b;c|d',
    "NA",
    "",
)
"""Texts as trainers produce them and worse: newlines, quotes, control characters, line separators that JSON
writers leave unescaped, LaTeX, unicode, exactly the byte budget (2-byte characters), over it, CSV's and pandas'
special values, and an empty text (which VictoriaLogs does not keep: it reads back as null)."""


@dataclass(frozen=True)
class Run:
    run_id: str
    expected: dict[str, dict[str, Any]]
    """Per episode id, the row the export must hold, as the ranks recorded it."""
    started: float
    ended: float


def _text(text: str) -> str | None:
    """A recorded text as the store keeps it: cut to the byte budget on a character boundary, empty as absent."""
    data = text.encode("utf-8")[:BUDGET]
    return data.decode("utf-8", errors="ignore") or None


def _sample(run: int, step: int | None, index: int) -> dict[str, Any]:
    """The ``index``-th sample of ``step`` of run number ``run``: every field set, texts rotating through TEXTS;
    the last of each step has a NaN reward (kept at random only) and an infinite advantage."""
    k = run * 7 + (step or 0) * PER_STEP + index
    reward = math.nan if index == PER_STEP - 1 else round(run + index / 10 - 0.15, 4)
    return {
        "reward": reward,
        "episode_id": f"run{run}-step{step}-{index}",
        "group_id": k // 2,
        "policy_version": 100 + (step or 0),
        "prompt": TEXTS[k % len(TEXTS)],
        "response": TEXTS[(k + 5) % len(TEXTS)],
        "target": TEXTS[(k + 9) % len(TEXTS)],
        "reward_breakdown": {"correctness": float(index % 2), "format": 0.25 * index, "step": -1.5},
        "advantage": -math.inf if index == PER_STEP - 1 else index / 3,
        "staleness": index,
        "request_len": 10 + k,
        "response_len": 20 + k,
        "dataset": TEXTS[k % 6],
        "extra": {"flag": index % 2 == 0, "n": k, "f": k / 7, "s": TEXTS[k % 6], "nested": {"k": [k, "é"]}},
    }


def _expected(run_id: str, step: int | None, sample: dict[str, Any]) -> dict[str, Any]:
    texts = [sample["prompt"], sample["response"], sample["target"], *(sample["extra"]["s"],)]
    return {
        "run_id": run_id,
        "step": step,
        "prompt": _text(sample["prompt"]),
        "completion": _text(sample["response"]),
        "target": _text(sample["target"]),
        "reward": sample["reward"],
        **{("reward.step" if fn == "step" else fn): v for fn, v in sample["reward_breakdown"].items()},
        "advantage": sample["advantage"],
        "episode_id": sample["episode_id"],
        "group_id": str(sample["group_id"]),
        "table": contract.SAMPLE_TABLE_DEFAULT,
        "selection": "random" if math.isnan(sample["reward"]) else "top",
        "policy_version": sample["policy_version"],
        "staleness": sample["staleness"],
        "prompt_length": sample["request_len"],
        "completion_length": sample["response_len"],
        "dataset": sample["dataset"] or None,
        "truncated": any(len(text.encode("utf-8")) > BUDGET for text in texts[:3]),
        "extra": json.dumps({"nested": sample["extra"]["nested"]}, ensure_ascii=False),
        "extra.flag": sample["extra"]["flag"],
        "extra.n": sample["extra"]["n"],
        "extra.f": sample["extra"]["f"],
        "extra.s": sample["extra"]["s"] or None,
        "rank": 0,
        "role": "trainer",
    }


def _record(run: int, run_id: str, endpoint: str) -> Run:
    """One rank of ``run_id``: a sample before its first step, then PER_STEP a step; top-k keeps every sample with a
    reward, the reservoir the NaN ones."""
    started = time.time()
    rank = RankProcess(
        endpoint=endpoint,
        protocol="http/protobuf",
        run_id=run_id,
        rank=0,
        world_size=1,
        export_interval_s=0.2,
        top_k=PER_STEP,
        bottom_k=0,
        random_k=PER_STEP,
    )
    expected: dict[str, dict[str, Any]] = {}
    try:
        unstepped = _sample(run, None, 0)
        rank.sample(**unstepped)
        expected[unstepped["episode_id"]] = _expected(run_id, None, unstepped)
        for step in range(STEPS):
            rank.step(step)
            for index in range(PER_STEP):
                sample = _sample(run, step, index)
                rank.sample(**sample)
                expected[sample["episode_id"]] = _expected(run_id, step, sample)
        rank.step(STEPS)
        assert rank.shutdown()
    finally:
        if rank.alive():
            rank.kill()
    return Run(run_id, expected, started, time.time())


@pytest.fixture(scope="module")
def proxy(shared_stack: Any) -> Iterator[DuplicatingProxy]:
    running = DuplicatingProxy(shared_stack.otlp_http_endpoint)
    yield running
    running.close()


@pytest.fixture(scope="module")
def runs(shared_stack: Any, proxy: DuplicatingProxy) -> dict[str, Run]:
    """The runs, recorded side by side, once every sample of each is in VictoriaLogs and its records at least twice
    (more when a rank's exporter timed out on the proxy under load and sent the request again)."""
    with ThreadPoolExecutor(len(RUN_IDS)) as pool:
        recorded = list(pool.map(_record, range(len(RUN_IDS)), RUN_IDS, [proxy.url] * len(RUN_IDS)))
    logs = VictoriaLogs(shared_stack.victorialogs_url)

    def doubled(run: Run) -> bool:
        found = logs.query(
            f"{promql.logsql_stream(contract.RUN_ID, run.run_id)} "
            f"| stats count() as records, count_uniq({promql.quote(contract.SAMPLE_ID)}) as samples"
        )
        return (
            bool(found)
            and int(found[0]["samples"]) == len(run.expected)
            and int(found[0]["records"]) >= 2 * len(run.expected)
        )

    eventually(lambda: all(doubled(run) for run in recorded), what="every sample record twice in VictoriaLogs")
    return {run.run_id: run for run in recorded}


def test_the_crafted_ids_pull_the_victims_records_into_naive_queries(shared_stack: Any, runs: dict[str, Run]) -> None:
    """Pasted into an exact filter or a stream filter by hand, the crafted ids select the victim's records: the
    export's filters, built by otel_rl_ops.promql, must not."""
    logs = VictoriaLogs(shared_stack.victorialogs_url)
    for naive in (f'rl.run.id:="{RUN_IDS[4]}"', f'{{rl.run.id="{RUN_IDS[5]}"}}'):
        assert VICTIM in {record["rl.run.id"] for record in logs.query(naive)}, naive


def _same(actual: Any, expected: Any) -> bool:
    """Equal, NaN equal to NaN, and a missing value (None, or NaN where a reader has no null) equal to None. A
    double may differ in its last two bits: VictoriaLogs stores a number of up to 20 characters as the double its
    own parser makes of the text (``tryParseFloat64``: the fraction's digits times a power of ten, not correctly
    rounded), and the export carries what the store holds (docs/dashboards.md, "Samples out")."""
    if expected is None:
        return actual is None or (isinstance(actual, float) and math.isnan(actual))
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(actual, float) and math.isnan(actual)
    if isinstance(expected, float) and isinstance(actual, float) and math.isfinite(expected):
        return abs(actual - expected) <= 2 * math.ulp(expected)
    if isinstance(expected, bool):
        return isinstance(actual, (bool, np.bool_)) and bool(actual) is expected
    return not isinstance(actual, (bool, np.bool_)) and bool(actual == expected)


def _check(rows: list[dict[str, Any]], runs: dict[str, Run], order: tuple[str, ...], *, nonfinite: bool) -> None:
    """``rows`` are the runs' samples in ``order``, each once, every field as recorded; ``nonfinite``: the format
    carries NaN and infinities (JSON writes them as null)."""
    assert [row["run_id"] for row in rows] == [run for run in order for _ in runs[run].expected]
    for run_id in order:
        run = runs[run_id]
        mine = [row for row in rows if row["run_id"] == run_id]
        assert sorted(row["episode_id"] for row in mine) == sorted(run.expected)
        steps = [-1 if row["step"] is None or row["step"] != row["step"] else row["step"] for row in mine]
        assert steps == sorted(steps), "rows are by step, the samples before the first step first"
        for row in mine:
            expected = run.expected[row["episode_id"]]
            for name, want in expected.items():
                if not nonfinite and isinstance(want, float) and not math.isfinite(want):
                    want = None
                assert _same(row[name], want), (run_id, row["episode_id"], name, row[name], want)
            assert re.fullmatch(r"[0-9a-f]{32}", row["sample_id"]) and re.fullmatch(r"[0-9a-f]{32}", row["trace_id"])
            assert re.fullmatch(r"[0-9a-f]{16}", row["span_id"])
        assert len({row["sample_id"] for row in mine}) == len(mine)


def _export(shared_stack: Any, tmp_path: Path, form: str, *arguments: str, runs: tuple[str, ...] = RUN_IDS) -> Path:
    out = tmp_path / f"samples.{form}"
    options = [option for run_id in runs for option in ("--run-id", run_id)]
    url = ["--victorialogs-url", shared_stack.victorialogs_url]
    assert main(["samples", *options, *url, "--format", form, "--out", str(out), *arguments]) == 0
    return out


def _rows_of_parquet_readers(path: Path, cache: Path) -> dict[str, list[dict[str, Any]]]:
    """The parquet file's rows as pyarrow, pandas and ``datasets`` give them, as they are."""
    import datasets
    import pandas as pd
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    frame = pd.read_parquet(path)
    dataset = datasets.load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(cache))
    return {
        "pyarrow": table.to_pylist(),
        "pandas": [{k: (None if v is pd.NA else v) for k, v in row.items()} for row in frame.to_dict("records")],
        "datasets": dataset.to_list(),
    }


def test_parquet_reads_back_in_pyarrow_pandas_and_datasets(
    shared_stack: Any, runs: dict[str, Run], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parquet export of every run, read by pyarrow, pandas and ``datasets.load_dataset("parquet")`` as they
    are: one row per sample (each record arrived twice), every field as recorded, times in the runs' lives."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    path = _export(shared_stack, tmp_path, "parquet")
    for reader, rows in _rows_of_parquet_readers(path, tmp_path / "hf").items():
        _check(rows, runs, RUN_IDS, nonfinite=True)
        for row in rows:
            run = runs[row["run_id"]]
            stamp = row["time"].timestamp()
            assert run.started - 1 <= stamp <= run.ended + 1, (reader, row["time"])


def test_json_lines_read_back_with_json_and_datasets(
    shared_stack: Any, runs: dict[str, Run], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JSON lines, one object per line with every column (null where a sample has no value, and for NaN and
    infinities, which JSON cannot write), U+2028, U+2029 and U+0085 escaped so that any line splitting finds the
    records, read by ``json`` and by ``datasets.load_dataset("json")``."""
    import datasets

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    path = _export(shared_stack, tmp_path, "jsonl")
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(lines[:-1])
    assert len(path.read_text(encoding="utf-8").splitlines()) == len(lines) - 1, "no line break inside a record"
    rows = [json.loads(line) for line in lines[:-1]]
    _check(rows, runs, RUN_IDS, nonfinite=False)
    assert all(row["time"].endswith("Z") for row in rows)
    dataset = datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))
    _check(dataset.to_list(), runs, RUN_IDS, nonfinite=False)


def test_csv_reads_back_with_pandas(shared_stack: Any, runs: dict[str, Run], tmp_path: Path) -> None:
    """CSV with a header, texts quoted (newlines, quotes and control characters inside), nulls empty, NaN as
    ``nan``: pandas reads every field back, texts such as "NA" included when told that only empty fields and ``nan``
    are missing (docs/dashboards.md, "Samples out")."""
    import pandas as pd

    path = _export(shared_stack, tmp_path, "csv")
    texts = ["run_id", "prompt", "completion", "target", "episode_id", "group_id", "sample_id", "dataset", "extra.s"]
    texts += ["extra", "trace_id", "span_id", "table", "selection", "role", "time"]
    frame = pd.read_csv(path, keep_default_na=False, na_values=["", "nan"], dtype=dict.fromkeys(texts, str))
    rows = frame.to_dict("records")
    for row in rows:
        for name in (*texts, "step"):
            if isinstance(row[name], float) and math.isnan(row[name]):
                row[name] = None
        row["step"] = None if row["step"] is None else int(row["step"])
    _check(rows, runs, RUN_IDS, nonfinite=True)


def test_steps_and_selection_choose_the_rows(shared_stack: Any, runs: dict[str, Run], tmp_path: Path) -> None:
    """--step A:B keeps those steps (both included) and drops the samples recorded before the first step;
    --selection keeps the samples kept that way (the NaN rewards were drawn at random)."""
    run_id = RUN_IDS[1]
    path = _export(shared_stack, tmp_path, "jsonl", "--step", "1:2", runs=(run_id,))
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    want = {e for e, row in runs[run_id].expected.items() if row["step"] in (1, 2)}
    assert {row["episode_id"] for row in rows} == want and {row["step"] for row in rows} == {1, 2}
    path = _export(shared_stack, tmp_path, "jsonl", "--selection", "random", "--step", "1:", runs=(run_id,))
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [row["step"] for row in rows] == [1, 2] and all(row["reward"] is None for row in rows)


def test_small_chunks_give_the_same_export(shared_stack: Any, runs: dict[str, Run]) -> None:
    """Read in chunks of 2 samples (many queries, many writes), the export is byte for byte the one read at once:
    chunks follow steps, and the order within a step is fixed (reward, then sample id)."""
    logs = VictoriaLogs(shared_stack.victorialogs_url)
    exports = []
    for batch in (2, 1000):
        sink = io.BytesIO()
        assert export(logs, RUN_IDS, sink, form="jsonl", batch=batch, progress=False) == sum(
            len(run.expected) for run in runs.values()
        )
        exports.append(sink.getvalue())
    assert exports[0] == exports[1]
    one = io.BytesIO()
    export(logs, RUN_IDS[:1], one, form="jsonl", steps=Steps(2, 2), batch=1, progress=False)
    assert {json.loads(line)["step"] for line in one.getvalue().splitlines()} == {2}


def test_trace_and_span_ids_lead_to_the_step_span(shared_stack: Any, runs: dict[str, Run], tmp_path: Path) -> None:
    """A row's trace_id and span_id name the rank's span of the sample's step in Jaeger (``rl.rank.step``, with that
    step), where the trace of the step is."""
    run_id = RUN_IDS[0]
    path = _export(shared_stack, tmp_path, "jsonl", "--step", "0:", runs=(run_id,))
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    jaeger = Jaeger(shared_stack.jaeger_url)

    def step_span(trace_id: str, span_id: str) -> list[Span]:
        return [span for span in jaeger.trace(trace_id) if span.span_id == span_id]

    for trace_id, span_id, step in {(row["trace_id"], row["span_id"], row["step"]) for row in rows}:
        (span,) = eventually(lambda: step_span(trace_id, span_id), what=f"span {span_id} of trace {trace_id}")
        assert span.name == contract.RANK_STEP_SPAN and span.attributes[contract.SAMPLE_STEP] == step


def test_a_run_without_samples_is_an_error(
    shared_stack: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run id VictoriaLogs holds no sample of ends in one error line naming it, and writes no file."""
    absent = f"absent-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "samples.parquet"
    url = ["--victorialogs-url", shared_stack.victorialogs_url]
    assert main(["samples", "--run-id", absent, *url, "--format", "parquet", "--out", str(out)]) == 1
    error = capsys.readouterr().err
    assert error.startswith("otel-rl: error: no sample of run ") and repr(absent) in error
    assert list(tmp_path.iterdir()) == []
