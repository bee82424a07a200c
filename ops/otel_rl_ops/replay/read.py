"""Reading the offline files (:mod:`otel_rl_contract.files`): which files, whose, and their lines as OTLP messages.

A file is recognised by its name (the otel-rl version, rank, process, signal and rotation index); a file of another
version, a line that is not an OTLP/JSON message of the file's signal (a foreign file), and a line cut short (a
process killed while writing) are each a :class:`Problem` naming the file and line, and the rest is read on. Lines
of one process are read in the order it wrote them: its files by rotation index, each from the top.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.json_format import ParseDict, ParseError
from google.protobuf.message import Message
from opentelemetry.proto.logs.v1.logs_pb2 import LogsData
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData
from otel_rl_contract import __version__
from otel_rl_contract.files import FileName, Signal, ids_from_hex, parse_name

MESSAGES: dict[Signal, type[Message]] = {"metrics": MetricsData, "logs": LogsData, "traces": TracesData}
"""The OTLP message of each signal's lines."""


@dataclass(frozen=True)
class Problem:
    """Something in the files that was not replayed, and why."""

    path: Path
    line: int
    """1-based; 0 for the file as a whole."""
    message: str

    def __str__(self) -> str:
        where = f"{self.path}" if self.line == 0 else f"{self.path}:{self.line}"
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class OfflineFile:
    """One offline file and what its name says."""

    path: Path
    name: FileName


def find(paths: Iterable[Path], problems: list[Problem]) -> list[OfflineFile]:
    """The offline files among ``paths`` (files, and folders searched for files named as otel-rl writes them); a
    file given by name that is not one, or one of another version, is a problem."""
    found: list[OfflineFile] = []
    for path in paths:
        if path.is_dir():
            candidates = sorted(item for item in path.rglob("otel-rl-*.jsonl") if item.is_file())
        elif path.is_file():
            candidates = [path]
        else:
            problems.append(Problem(path, 0, "no such file or folder"))
            continue
        for candidate in candidates:
            name = parse_name(candidate.name)
            if name is None:
                problems.append(
                    Problem(
                        candidate,
                        0,
                        "not an otel-rl offline file (named otel-rl-<version>_rank<r>_..._<signal>_<n>.jsonl)",
                    )
                )
            elif name.version != __version__:
                problems.append(
                    Problem(
                        candidate,
                        0,
                        f"written by otel-rl {name.version}, this is otel-rl-ops {__version__}: replay it with "
                        f"otel-rl-ops {name.version}",
                    )
                )
            else:
                found.append(OfflineFile(candidate, name))
    return found


def processes(files: Iterable[OfflineFile], signal: Signal) -> dict[tuple[int, str], list[OfflineFile]]:
    """The files of ``signal`` by process (rank and instance), each process's in rotation order."""
    grouped: dict[tuple[int, str], list[OfflineFile]] = {}
    for item in files:
        if item.name.signal == signal:
            grouped.setdefault((item.name.rank, item.name.instance), []).append(item)
    return {key: sorted(items, key=lambda item: item.name.index) for key, items in sorted(grouped.items())}


def lines(files: Iterable[OfflineFile], problems: list[Problem]) -> Iterator[tuple[OfflineFile, int, Any]]:
    """Each good line of ``files``, in order, as its signal's OTLP message, with its file and line number."""
    for item in files:
        message_type = MESSAGES[item.name.signal]
        with item.path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                if not raw.endswith(b"\n"):
                    problems.append(
                        Problem(item.path, number, "the line is cut short (the process stopped while writing it)")
                    )
                    continue
                try:
                    parsed = json.loads(raw)
                    message = ParseDict(ids_from_hex(parsed), message_type())
                except (ValueError, ParseError) as error:
                    problems.append(Problem(item.path, number, f"not an OTLP/JSON {message_type.__name__}: {error}"))
                    continue
                yield item, number, message
