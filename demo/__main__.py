"""``python -m demo``: run the multi-rank GRPO demo through the local stack (or a given collector) and summarize.

Examples::

    python -m demo                                   # local stack, 4 ranks, 200 steps
    python -m demo --ranks 2 --steps 50              # smaller
    python -m demo --endpoint http://collector:4317  # an existing collector (summary needs --prometheus-url ...)
    python -m demo --exporter console                # no stack at all: readable per-step output
    python -m demo --provoke-alert                   # then let staleness run away until RLStalenessHigh pages
    python -m demo --reward-hack                     # 400 steps; from 30% on, the format reward pays length
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import socket
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.multiprocessing as mp
from otel_rl_ops.alerts.webhook import Notification, WebhookReceiver, format_notification
from otel_rl_ops.report.summary import Sources, summarize
from tqdm import tqdm

from demo.job import PHASES, SERVICE_NAME, JobSettings, run_rank
from demo.report import format_summary

_DEFAULT_OUT = Path("demo-output")
_UNSAFE = re.compile(r"[^\w.-]|^\.")
"""Characters a run's folder name does not keep: anything but letters, digits, ``_``, ``.``, ``-``, and a leading
``.`` (no ``..``, no hidden folder)."""
_NAME_CHARS = 60
"""The longest run id kept whole as a folder name (at most 4 bytes a character: within the file systems' 255)."""
_STEPS = 200
_HACK_STEPS = 400
"""The demo's steps with ``--reward-hack``: its policy finds the loophole (opened at 30%, step 120) by about step 140,
and leaves the audit 260 steps of gaming; in 200 steps it finds it at about step 185, too late to audit."""
_PROVOKE_LIMIT_S = 20 * 60
"""How long ``--provoke-alert`` lets staleness run away at most: RLStalenessHigh pages after 10 minutes above its
threshold (its ``for:``), plus up to an evaluation interval and Alertmanager's group_wait."""


def run_folder(out: Path, run_id: str) -> Path:
    """The folder of run ``run_id`` under ``out``, always directly inside it: the run id itself when it is a plain
    name, else its safe characters (others as ``_``, at most 60) and a hash of the whole id, so that distinct run
    ids never share a folder (``../etc`` becomes ``_._etc-<hash>``)."""
    name = _UNSAFE.sub("_", run_id)
    if not name or name != run_id or len(name) > _NAME_CHARS:
        digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        name = f"{name[:_NAME_CHARS]}-{digest}"
    return out / name


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help=f"training steps (default {_STEPS}; {_HACK_STEPS} with --reward-hack: the policy finds the loophole about "
        "20 steps after it opens at 30%%, and the audit's windows need 20 steps of it and 20 before)",
    )
    parser.add_argument("--ranks", type=int, default=4, help="rank processes (default 4)")
    parser.add_argument("--step-seconds", type=float, default=0.25, help="minimum seconds per step (default 0.25)")
    parser.add_argument("--exporter", choices=("otlp", "console", "file"), default="otlp")
    parser.add_argument("--endpoint", default=None, help="OTLP endpoint of an existing collector (no local stack)")
    parser.add_argument("--prometheus-url", default=None, help="Prometheus behind --endpoint, for the summary")
    parser.add_argument("--victorialogs-url", default=None, help="VictoriaLogs behind --endpoint, for the summary")
    parser.add_argument("--jaeger-url", default=None, help="Jaeger behind --endpoint: the slowest step's trace")
    parser.add_argument("--run-id", default=None, help="default: demo-<random>")
    parser.add_argument("--seed", type=int, default=0, help="seed of the policy and the rollouts (default 0)")
    parser.add_argument(
        "--group", default=None, help="the run's group (rl.run.group): runs of one group compare as a band"
    )
    parser.add_argument("--out", type=Path, default=_DEFAULT_OUT, help="where the summary and records go")
    parser.add_argument(
        "--provoke-alert",
        action="store_true",
        help="after the steps, stop syncing weights to the rollout generator so that staleness runs away, until "
        "Alertmanager's RLStalenessHigh notification reaches the demo's webhook (about 11 minutes: the rule's for: "
        "10m); print it (local stack only)",
    )
    parser.add_argument(
        "--reward-hack",
        action="store_true",
        help="from 30%% of the steps on, the format reward pays every response token (a loophole): the policy learns "
        "length instead of sums, and the audit alerts should say so",
    )
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = _HACK_STEPS if args.reward_hack else _STEPS
    if args.provoke_alert and (args.endpoint is not None or args.exporter != "otlp"):
        parser.error("--provoke-alert needs the local stack (no --endpoint, --exporter otlp)")
    for name in ("steps", "ranks"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)!r}")
    return args


def run_job(settings: JobSettings, *, runaway_until: Callable[[], bool] | None = None) -> None:
    """Start the ranks, show progress, and wait for all of them; raises if any rank failed. With
    ``settings.runaway``, ``runaway_until`` is asked twice a second once the steps are done, and the ranks stop at
    its first true answer. The ranks are forks of a forkserver that imported torch and otel_rl once (each spawned
    rank would import them again: seconds of CPU each)."""
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["demo.job"])
    progress = context.Queue()
    stop = context.Event()
    processes = [
        context.Process(target=run_rank, args=(rank, settings, progress, stop)) for rank in range(settings.ranks)
    ]
    for process in processes:
        process.start()
    total = settings.steps * settings.ranks
    with tqdm(total=total, desc=f"{settings.run_id} (rank-steps)", unit="step") as bar:
        done = 0
        while (done < total or settings.runaway) and any(p.is_alive() for p in processes):
            if done >= total and runaway_until is not None and not stop.is_set() and runaway_until():
                stop.set()
            try:
                done += progress.get(timeout=0.5)
                bar.update(1)
            except Exception:  # noqa: BLE001, S112 - queue.Empty from a multiprocessing queue
                continue
    for process in processes:
        process.join()
    failed = [rank for rank, process in enumerate(processes) if process.exitcode != 0]
    if failed:
        raise SystemExit(f"ranks {failed} failed (exit codes {[processes[r].exitcode for r in failed]})")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run_id = args.run_id or f"demo-{uuid.uuid4().hex[:8]}"
    out = run_folder(args.out, run_id)
    (out / "records").mkdir(parents=True, exist_ok=True)
    sources: Sources | None = None
    endpoint = args.endpoint
    receiver = WebhookReceiver() if args.provoke_alert else None
    if args.exporter == "otlp" and endpoint is None:
        from otel_rl_ops.stack.config import StackConfig
        from otel_rl_ops.stack.services import Stack

        config = StackConfig(alert_webhook_url=None if receiver is None else receiver.url)
        stack = Stack.attach(config.resolved_state_dir(), config=config)
        stack.up()  # with --provoke-alert, Alertmanager restarts to deliver to the receiver too
        endpoint = stack.otlp_grpc_endpoint
        sources = Sources(stack.prometheus_url, stack.victorialogs_url, run_id, stack.jaeger_url)
        print(
            f"stack up: OTLP {endpoint}, Prometheus {stack.prometheus_url}, VictoriaLogs {stack.victorialogs_url}, "
            f"Alertmanager {stack.alertmanager_url}, Jaeger {stack.jaeger_url}"
        )
    elif args.prometheus_url and args.victorialogs_url:
        sources = Sources(args.prometheus_url, args.victorialogs_url, run_id, args.jaeger_url)
    settings = JobSettings(
        run_id=run_id,
        steps=args.steps,
        ranks=args.ranks,
        exporter=args.exporter,
        endpoint=endpoint,
        record_dir=str(out / "records"),
        master_port=_free_port(),
        step_seconds=args.step_seconds,
        runaway=receiver is not None,
        reward_hack=args.reward_hack,
        seed=args.seed,
        group=args.group,
    )
    started = time.time()
    if receiver is None:
        run_job(settings)
    else:
        provoke_alert(settings, receiver)
        receiver.close()
        Stack.attach(config.resolved_state_dir()).up()  # Alertmanager back to the stack's own receivers
    print(f"job finished in {time.time() - started:.1f}s")
    if sources is None:
        print(f"no summary: Prometheus and VictoriaLogs unknown (records in {out / 'records'})")
        return 0
    expected = settings.steps * settings.ranks * settings.prompts_per_rank * settings.group_size
    spans = None if settings.runaway else settings.steps * settings.ranks * len(PHASES)  # each phase once a step
    summary: dict[str, Any] = summarize(sources, expected_count=expected, expected_spans=spans, service=SERVICE_NAME)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    text = format_summary(summary)
    (out / "summary.md").write_text(text)
    print(text)
    print(f"summary written to {out / 'summary.md'} and {out / 'summary.json'}")
    report = render_report(sources, out / "report.html")
    print(f"rendered dashboard report: {report}")
    return 0


def _paged(receiver: WebhookReceiver, run_id: str) -> Notification | None:
    """The notification of the run's group in which RLStalenessHigh fires, if it arrived."""
    return receiver.wait_for(
        lambda n: (
            n.body.get("groupLabels", {}).get("rl_run_id") == run_id
            and bool(n.alerts_named("RLStalenessHigh", status="firing"))
        ),
        timeout_s=0,
    )


def provoke_alert(settings: JobSettings, receiver: WebhookReceiver) -> Notification | None:
    """Run the job with the runaway (settings.runaway) until RLStalenessHigh's notification of the run reaches
    ``receiver`` (or :data:`_PROVOKE_LIMIT_S` passed), then print it."""
    runaway: dict[str, float] = {}

    def paged_or_late() -> bool:
        began = runaway.setdefault("began", time.time())
        return _paged(receiver, settings.run_id) is not None or time.time() - began > _PROVOKE_LIMIT_S

    print(
        "after the steps the rollout generator gets no new weights: staleness grows a version a step until "
        "RLStalenessHigh pages (its for: is 10 minutes) ..."
    )
    run_job(settings, runaway_until=paged_or_late)
    notification = _paged(receiver, settings.run_id)
    if notification is None:
        print(f"no RLStalenessHigh notification within {_PROVOKE_LIMIT_S / 60:.0f} minutes of the runaway")
        return None
    after = notification.received_at - runaway["began"]
    print(
        f"notification {after:.0f} s after the runaway began, at {receiver.url}:\n{format_notification(notification)}"
    )
    return notification


def render_report(sources: Sources, path: Path) -> Path:
    """The RL run dashboard rendered for this run (the same queries as Grafana), as an HTML page with a PNG."""
    from otel_rl_ops.report.render import build_report, write_report

    report = build_report(
        prometheus_url=sources.prometheus_url,
        victorialogs_url=sources.victorialogs_url,
        jaeger_url=sources.jaeger_url,
        run_id=sources.run_id,
        lookback_s=3600,
    )
    write_report(report, path)
    return path


if __name__ == "__main__":
    sys.exit(main())
