"""``python -m demo``: run the multi-rank GRPO demo through the local stack (or a given collector) and summarize.

Examples::

    python -m demo                                   # local stack, 4 ranks, 200 steps
    python -m demo --ranks 2 --steps 50              # smaller
    python -m demo --endpoint http://collector:4317  # an existing collector (summary needs --prometheus-url ...)
    python -m demo --exporter console                # no stack at all: readable per-step output
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import torch.multiprocessing as mp
from tqdm import tqdm

from demo.job import JobSettings, run_rank
from demo.readback import Sources, summarize
from demo.report import format_summary

_DEFAULT_OUT = Path("demo-output")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    parser.add_argument("--ranks", type=int, default=4, help="rank processes (default 4)")
    parser.add_argument("--step-seconds", type=float, default=0.25, help="minimum seconds per step (default 0.25)")
    parser.add_argument("--exporter", choices=("otlp", "console", "file"), default="otlp")
    parser.add_argument("--endpoint", default=None, help="OTLP endpoint of an existing collector (no local stack)")
    parser.add_argument("--prometheus-url", default=None, help="Prometheus behind --endpoint, for the summary")
    parser.add_argument("--victorialogs-url", default=None, help="VictoriaLogs behind --endpoint, for the summary")
    parser.add_argument("--run-id", default=None, help="default: demo-<random>")
    parser.add_argument("--out", type=Path, default=_DEFAULT_OUT, help="where the summary and records go")
    args = parser.parse_args(argv)
    for name in ("steps", "ranks"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)!r}")
    return args


def run_job(settings: JobSettings) -> None:
    """Start the ranks, show progress, and wait for all of them; raises if any rank failed."""
    context = mp.get_context("spawn")
    progress = context.Queue()
    processes = [context.Process(target=run_rank, args=(rank, settings, progress)) for rank in range(settings.ranks)]
    for process in processes:
        process.start()
    with tqdm(total=settings.steps * settings.ranks, desc=f"{settings.run_id} (rank-steps)", unit="step") as bar:
        done = 0
        while done < settings.steps * settings.ranks and any(p.is_alive() for p in processes):
            try:
                done += progress.get(timeout=0.5)
                bar.update(1)
            except Exception:  # noqa: BLE001 - queue.Empty from a multiprocessing queue
                continue
    for process in processes:
        process.join()
    failed = [rank for rank, process in enumerate(processes) if process.exitcode != 0]
    if failed:
        raise SystemExit(f"ranks {failed} failed (exit codes {[processes[r].exitcode for r in failed]})")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run_id = args.run_id or f"demo-{uuid.uuid4().hex[:8]}"
    out = args.out / run_id
    (out / "records").mkdir(parents=True, exist_ok=True)
    sources: Sources | None = None
    endpoint = args.endpoint
    if args.exporter == "otlp" and endpoint is None:
        from otel_rl.stack.config import StackConfig
        from otel_rl.stack.services import Stack

        config = StackConfig()
        stack = Stack.attach(config.resolved_state_dir(), config=config)
        stack.up()
        endpoint = stack.otlp_grpc_endpoint
        sources = Sources(stack.prometheus_url, stack.victorialogs_url, run_id)
        print(f"stack up: OTLP {endpoint}, Prometheus {stack.prometheus_url}, VictoriaLogs {stack.victorialogs_url}")
    elif args.prometheus_url and args.victorialogs_url:
        sources = Sources(args.prometheus_url, args.victorialogs_url, run_id)
    settings = JobSettings(
        run_id=run_id,
        steps=args.steps,
        ranks=args.ranks,
        exporter=args.exporter,
        endpoint=endpoint,
        record_dir=str(out / "records"),
        master_port=_free_port(),
        step_seconds=args.step_seconds,
    )
    started = time.time()
    run_job(settings)
    print(f"job finished in {time.time() - started:.1f}s")
    if sources is None:
        print(f"no summary: Prometheus and VictoriaLogs unknown (records in {out / 'records'})")
        return 0
    expected = settings.steps * settings.ranks * settings.prompts_per_rank * settings.group_size
    summary: dict[str, Any] = summarize(sources, expected_count=expected)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    text = format_summary(summary)
    (out / "summary.md").write_text(text)
    print(text)
    print(f"summary written to {out / 'summary.md'} and {out / 'summary.json'}")
    report = render_report(sources, out / "report.html")
    print(f"rendered dashboard report: {report}")
    return 0


def render_report(sources: Sources, path: Path) -> Path:
    """The RL run dashboard rendered for this run (the same queries as Grafana), as an HTML page with a PNG."""
    from otel_rl.report.render import build_report, write_report

    report = build_report(
        prometheus_url=sources.prometheus_url,
        victorialogs_url=sources.victorialogs_url,
        run_id=sources.run_id,
        lookback_s=3600,
    )
    write_report(report, path)
    return path


if __name__ == "__main__":
    sys.exit(main())
