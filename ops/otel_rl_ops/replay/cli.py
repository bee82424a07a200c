"""``otel-rl replay PATH...``: offline runs (``exporter="file"``) into a running stack, with their own timestamps.

Metrics: merged across ranks as the collector merges them (:mod:`otel_rl_ops.replay.merge`), written with the rules'
series (recording rules, ``ALERTS``) as TSDB blocks by ``otel-rl-backfill`` into Prometheus's data folder, which
Prometheus loads within its block reload interval (a minute) without a restart; in the TSDB cluster profile uploaded
to the bucket, which the store gateway serves. Samples and spans: through the
stack's collector into VictoriaLogs and Jaeger (:mod:`otel_rl_ops.replay.records`). A run whose metrics Prometheus
holds already is left out of the metrics; records and spans already stored are not sent again. A bad file or line is
named, the rest replayed, and the exit status is then 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from tqdm import tqdm

from otel_rl_ops.query import Jaeger, Prometheus, VictoriaLogs
from otel_rl_ops.replay import metrics as replay_metrics
from otel_rl_ops.replay.merge import merge
from otel_rl_ops.replay.read import OfflineFile, Problem, find, lines, processes
from otel_rl_ops.replay.records import LogReplay, SpanReplay

if TYPE_CHECKING:
    from otel_rl_ops.stack.services import Stack

DEFAULT_INTERVAL_S = 5.0
"""The collector's aggregation interval (``OTEL_RL_AGGREGATION_INTERVAL``'s default): the replay's window."""


def _progress(files: list[OfflineFile], what: str) -> tqdm[Any]:
    return tqdm(
        total=sum(item.path.stat().st_size for item in files), unit="B", unit_scale=True, desc=what, file=sys.stderr
    )


def _tracked(files: list[OfflineFile], problems: list[Problem], bar: tqdm[Any]) -> Iterator[Any]:
    """The messages of ``files`` in order, advancing ``bar`` by each file as it is done."""
    for item in files:
        yield from (message for _, _, message in lines([item], problems))
        bar.update(item.path.stat().st_size)


def _run_of_process(files: list[OfflineFile]) -> str | None:
    """The run of a process's metrics files: the ``rl.run.id`` of its first point (its problems are named when the
    files are read in full)."""
    for _, _, message in lines(files, []):
        for point in replay_metrics.points(message):
            return dict(point.resource).get("rl.run.id")
    return None


def replay(
    paths: Iterable[Path],
    *,
    prometheus_url: str,
    data_dir: Path,
    upload: Callable[[Path], None] | None,
    backfill: Path,
    rule_files: tuple[Path, ...],
    evaluation_interval_s: float,
    external_labels: dict[str, str],
    otlp_http: str,
    victorialogs_url: str,
    jaeger_url: str,
    interval_s: float = DEFAULT_INTERVAL_S,
) -> dict[str, Any]:
    """Replay the offline files under ``paths`` into the stores (see the module): the blocks into ``data_dir``, then
    ``upload(data_dir)`` if given; what was done, and the problems."""
    problems: list[Problem] = []
    files = find(paths, problems)
    by_process = processes(files, "metrics")
    present: set[str] = set()
    kept: list[list[OfflineFile]] = []
    prometheus = Prometheus(prometheus_url)
    for process_files in by_process.values():
        run = _run_of_process(process_files)
        if run is None:
            continue
        if run in present or prometheus.series(f'{{rl_run_id="{_escape(run)}",otel_scope_name="otel_rl"}}'):
            present.add(run)
            continue
        kept.append(process_files)
    summary: dict[str, Any] = {"runs_already_in_prometheus": sorted(present)}
    metric_files = [item for group in kept for item in group]
    with _progress(metric_files, "metrics") as bar:
        streams = [list(_tracked(group, problems, bar)) for group in kept]
        samples = merge(replay_metrics.in_time_order(streams), interval_s=interval_s)
        summary["metrics"] = replay_metrics.backfill(
            backfill,
            samples,
            out=data_dir,
            rule_files=rule_files,
            evaluation_interval_s=evaluation_interval_s,
            external_labels=external_labels,
            now_ms=int(time.time() * 1000),
        )
    if upload is not None:
        upload(data_dir)
    logs = LogReplay(otlp_http, VictoriaLogs(victorialogs_url))
    log_files = [item for group in processes(files, "logs").values() for item in group]
    with _progress(log_files, "samples") as bar:
        for message in _tracked(log_files, problems, bar):
            logs.send(message)
    spans = SpanReplay(otlp_http, Jaeger(jaeger_url))
    span_files = [item for group in processes(files, "traces").values() for item in group]
    with _progress(span_files, "spans") as bar:
        for message in _tracked(span_files, problems, bar):
            spans.send(message)
    summary["samples"] = {"sent": logs.result.sent, "already_there": logs.result.already}
    summary["spans"] = {"sent": spans.result.sent, "already_there": spans.result.already}
    summary["problems"] = [str(problem) for problem in problems]
    return summary


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


BLOCK_LABELS: Final = {"tenant_id": "default-tenant"}
"""The external labels of the blocks ``otel-rl replay`` uploads to the TSDB cluster profile's bucket: the tenant the
receivers write the live runs under (they add ``receive_node`` too, naming which receiver holds a series)."""


def replay_into(stack: Stack, paths: Sequence[Path], *, interval_s: float = DEFAULT_INTERVAL_S) -> dict[str, Any]:
    """Replay the files under ``paths`` into the running ``stack`` (:func:`replay`): in the default profile the blocks
    go into Prometheus's data folder, in the TSDB cluster profile they are uploaded to the stack's bucket with
    :data:`BLOCK_LABELS` (``thanos tools bucket upload-blocks``), which its store gateway serves.

    Raises:
        ValueError: for the secure profile, whose collector wants a token (not supported yet).
    """
    from otel_rl_ops.alerts.client import duration_seconds
    from otel_rl_ops.stack.components import bucket_config, evaluation_interval
    from otel_rl_ops.stack.install import install_all

    config = stack.config
    if config.secure:
        raise ValueError('otel-rl replay does not support the secure profile yet (docs/deploy.md, "Offline runs")')
    binaries = install_all(
        root=config.resolved_root(), home=config.home, cluster=config.tsdb_cluster, replay=True
    )  # builds otel-rl-backfill on first use
    state = config.resolved_state_dir()

    def run(data_dir: Path, upload: Callable[[Path], None] | None) -> dict[str, Any]:
        assert binaries.backfill is not None  # noqa: S101 - checked above; mypy does not carry it into the closure
        return replay(
            paths,
            prometheus_url=stack.prometheus_url,
            data_dir=data_dir,
            upload=upload,
            backfill=binaries.backfill,
            rule_files=config.resolved_rule_files(),
            evaluation_interval_s=duration_seconds(evaluation_interval(config.resolved_root())),
            external_labels=config.external_labels(),
            otlp_http=stack.otlp_http_endpoint,
            victorialogs_url=stack.victorialogs_url,
            jaeger_url=stack.jaeger_url,
            interval_s=interval_s,
        )

    if not config.tsdb_cluster:
        return run(state / "data" / "prometheus", None)
    thanos, bucket = binaries.thanos, bucket_config(state)
    if thanos is None:
        raise ValueError("the TSDB cluster profile's binaries lack thanos: run otel-rl stack install --cluster")
    with tempfile.TemporaryDirectory(prefix=".replay-", dir=state / "data") as scratch:
        return run(Path(scratch), lambda folder: replay_metrics.upload_blocks(thanos, bucket, folder, BLOCK_LABELS))


def _replay(args: argparse.Namespace) -> int:
    from otel_rl_ops.stack.config import StackConfig
    from otel_rl_ops.stack.services import Stack

    config = StackConfig(**({} if args.state_dir is None else {"state_dir": args.state_dir}))
    state = config.resolved_state_dir()
    if not (state / "stack.json").is_file():
        raise ValueError(f"no running stack in {str(state)!r} (start one with otel-rl stack up, or give --state-dir)")
    summary = replay_into(Stack.attach(state), args.paths, interval_s=args.interval)
    print(json.dumps(summary, indent=2))
    for problem in summary["problems"]:
        print(f"otel-rl: not replayed: {problem}", file=sys.stderr)
    return 1 if summary["problems"] else 0


def add_replay_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``otel-rl replay``."""
    parser = subparsers.add_parser(
        "replay",
        help='bring offline runs\' files (exporter="file") into the running stack, with their own timestamps',
        description='Reads the OTLP files ranks wrote with exporter="file" (folders are searched), merges each '
        "run's ranks as the collector does, and writes its metrics (with the alerts the shipped rules would have "
        "raised) into Prometheus as blocks, its samples into VictoriaLogs and its spans into Jaeger, each at its own "
        'time. Replaying again adds nothing. docs/deploy.md, "Offline runs".',
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="offline files, or folders holding them")
    parser.add_argument("--state-dir", type=Path, default=None, help="the running stack (default: $OTEL_RL_HOME/stack)")
    parser.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_INTERVAL_S,
        help=f"seconds of one merge window: the collector's aggregation interval (default {DEFAULT_INTERVAL_S:g})",
    )
    parser.set_defaults(handler=_replay)
