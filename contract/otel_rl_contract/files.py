"""The offline files: how a rank names the OTLP files it writes (``exporter="file"``) and how their JSON carries ids.

Each file holds one signal in the OTLP file format (opentelemetry-specification ``protocol/file-exporter.md``): JSON
lines, each a ``MetricsData``, ``LogsData`` or ``TracesData`` in the OTLP/JSON encoding (the protobuf JSON mapping with
lowerCamelCase keys, enums as integers, and trace and span ids as hex strings, not base64). The name says the otel-rl
version that wrote it, the rank, the process (``service.instance.id``), the signal and the file's place in its rotation,
so that ``otel-rl replay`` knows another version's file before reading a line of it.

    >>> name = file_name(version="0.1.0", rank=3, instance="1f0e", signal="logs", index=2)
    >>> name
    'otel-rl-0.1.0_rank3_1f0e_logs_000002.jsonl'
    >>> parse_name(name)
    FileName(version='0.1.0', rank=3, instance='1f0e', signal='logs', index=2)
    >>> ids_to_hex({"spanId": "AAECAwQFBgc="})
    {'spanId': '0001020304050607'}
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any, Literal

Signal = Literal["metrics", "logs", "traces"]
SIGNALS: tuple[Signal, ...] = ("metrics", "logs", "traces")
"""The signals, one file each: ``MetricsData``, ``LogsData``, ``TracesData`` lines."""
ID_FIELDS = frozenset({"traceId", "spanId", "parentSpanId"})
"""The OTLP/JSON fields (spans, links, log records, exemplars) whose bytes are hex strings, not base64."""
_NAME = re.compile(
    r"otel-rl-(?P<version>[0-9A-Za-z.+-]+)_rank(?P<rank>\d+)_(?P<instance>[0-9A-Za-z.-]+)_(?P<signal>metrics|logs|traces)"
    r"_(?P<index>\d{6,})\.jsonl"
)
_UNSAFE = re.compile(r"[^0-9A-Za-z.-]")


@dataclass(frozen=True)
class FileName:
    """What an offline file's name says."""

    version: str
    rank: int
    instance: str
    signal: Signal
    index: int


def file_name(*, version: str, rank: int, instance: str, signal: Signal, index: int) -> str:
    """The name of file ``index`` (from 0) of ``signal`` written by the process ``instance`` (characters other than
    letters, digits, ``.`` and ``-`` become ``-``) of ``rank`` with otel-rl ``version``."""
    return f"otel-rl-{version}_rank{rank}_{_UNSAFE.sub('-', instance)}_{signal}_{index:06d}.jsonl"


def parse_name(name: str) -> FileName | None:
    """What the file name ``name`` says, or None when it is not an otel-rl offline file's."""
    found = _NAME.fullmatch(name)
    if found is None:
        return None
    signal: Signal = found["signal"]  # type: ignore[assignment]  # the pattern admits only the three
    return FileName(found["version"], int(found["rank"]), found["instance"], signal, int(found["index"]))


def ids_to_hex(value: Any) -> Any:
    """``value`` (the protobuf JSON mapping of an OTLP message) with every id field turned from base64 into hex, as
    OTLP/JSON writes them."""
    return _convert(value, lambda text: base64.b64decode(text).hex())


def ids_from_hex(value: Any) -> Any:
    """``value`` (an OTLP/JSON message) with every id field turned from hex into base64, as the protobuf JSON mapping
    reads them; raises ``ValueError`` naming the field when one is not hex."""

    def decode(text: str) -> str:
        try:
            return base64.b64encode(bytes.fromhex(text)).decode("ascii")
        except (ValueError, TypeError, binascii.Error):
            raise ValueError(f"an OTLP/JSON id must be a hex string, got {text!r}") from None

    return _convert(value, decode)


def _convert(value: Any, change: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: change(item) if key in ID_FIELDS and isinstance(item, str) and item else _convert(item, change)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_convert(item, change) for item in value]
    return value
