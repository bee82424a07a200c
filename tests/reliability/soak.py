"""Soak: an accelerated RL job against a private stack, with faults injected periodically (issue 7, 4).

Defaults (``make soak``): 4 ranks x 360 steps, one step every 0.5 s (a real job's step every 5 s: 30 minutes of
job in ~4 minutes), each step 512 rollout rewards, 512 x 64 per-token staleness values and 8 samples per rank
(4 kept). Ranks export every 0.2 s, the collector merges every 0.5 s. Every ``--fault-every`` steps, in turn:
the collector SIGSTOPped for ``--outage-s`` (3 s), VictoriaLogs stopped as long, one rank restarted (same rank
id) after a flush.

At the end the run's Prometheus totals are compared with what the ranks recorded (exact where the docs promise
it: counts, buckets; sums to 1e-9 relative), samples in VictoriaLogs with what the ranks exported, and the RSS
slopes of the ranks and the collector over the second half of their lives are reported (and judged when that
half spans >= 60 s: at most 1 MiB/min for a rank, 4 MiB/min for the collector). Exit status 1 if a check fails.

    python -m tests.reliability.soak --report soak-report.json            # the full one
    python -m tests.reliability.soak --ranks 2 --steps 60 --fault-every 15  # ~1 minute (tests/reliability)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import otel_rl_contract as contract
from otel_rl_contract import foreign
from otel_rl_ops.query import Prometheus, VictoriaLogs

from tests.pipeline.harness import REWARD_BOUNDS, RankProcess, cumulative_buckets, eventually, private_stack, rss_kib
from tests.reliability.helpers import collector_metrics, flush_ok, slope_per_minute

REWARD = contract.series(contract.REWARDS.histogram)
STALENESS = contract.series(contract.STALENESS.histogram)

FAULTS = ("collector_pause", "victorialogs_stop", "rank_restart")


@dataclass
class SoakReport:
    ranks: int
    steps: int
    step_s: float
    rollouts: int
    tokens: int
    wall_s: float = 0.0
    faults: list[str] = field(default_factory=list)
    reward_count_recorded: int = 0
    reward_count_prometheus: float | None = None
    staleness_count_recorded: int = 0
    staleness_count_prometheus: float | None = None
    reward_sum_recorded: float = 0.0
    reward_sum_prometheus: float | None = None
    buckets_exact: bool = False
    samples_exported_by_ranks: int = 0
    samples_in_victorialogs: int = 0
    samples_duplicated: int = 0
    samples_missing: int = 0
    samples_dropped_by_ranks: float = 0.0
    collector_log_records_send_failed: float = 0.0
    rank_export_failures_metrics: float = 0.0
    rank_rss_kib_start: list[int] = field(default_factory=list)
    rank_rss_kib_end: list[int] = field(default_factory=list)
    rank_rss_slope_kib_per_min: list[float] = field(default_factory=list)
    collector_rss_kib_start: int = 0
    collector_rss_kib_end: int = 0
    collector_rss_slope_kib_per_min: float = 0.0
    record_call_max_s: float = 0.0
    memory_judged: bool = False
    failures: list[str] = field(default_factory=list)


def run_soak(
    binaries: Any,
    state_dir: Path,
    *,
    ranks: int = 4,
    steps: int = 360,
    step_s: float = 0.5,
    rollouts: int = 512,
    tokens: int = 64,
    fault_every: int = 40,
    outage_s: float = 3.0,
    rss_slope_limit_kib_per_min: float = 1024.0,
) -> SoakReport:
    """Run the soak; returns the report (``failures`` empty when every check held)."""
    report = SoakReport(ranks=ranks, steps=steps, step_s=step_s, rollouts=rollouts, tokens=tokens)
    started = time.monotonic()
    with private_stack(binaries, state_dir, collector_environment={"OTEL_RL_AGGREGATION_INTERVAL": "500ms"}) as stack:
        run_id = f"soak-{uuid.uuid4().hex[:8]}"
        settings: dict[str, Any] = {"export_interval_s": 0.2, "export_timeout_s": 1.0, "top_k": 2, "bottom_k": 2}

        def start(rank: int) -> RankProcess:
            return RankProcess(
                endpoint=stack.otlp_grpc_endpoint, run_id=run_id, rank=rank, world_size=ranks, **settings
            )

        procs = [start(r) for r in range(ranks)]
        reward_buckets = [0] * (len(REWARD_BOUNDS) + 1)
        exported_before_restart = 0
        rss: dict[str, list[tuple[float, int]]] = {f"rank{r}": [] for r in range(ranks)}
        rss["collector"] = []
        fault_index = 0
        fault_at: float | None = None
        last_sample = -10.0
        try:
            for step in range(steps):
                tick = time.monotonic()
                if step and step % fault_every == 0:
                    fault = FAULTS[fault_index % len(FAULTS)]
                    fault_index += 1
                    report.faults.append(f"step {step}: {fault}")
                    fault_at = time.monotonic()
                    if fault == "collector_pause":
                        stack.pause_component("collector")
                    elif fault == "victorialogs_stop":
                        stack.stop_component("victorialogs")
                    else:
                        victim = procs[fault_index % ranks]
                        victim.step(step)  # emits its open step's samples
                        flush_ok(victim)
                        exported_before_restart += int(victim.stats()["samples_exported"])
                        report.rank_export_failures_metrics += victim.stats()["export_failures_metrics"]
                        victim.kill()
                        procs[victim.rank] = start(victim.rank)
                        rss[f"rank{victim.rank}"] = []  # a new process: its slope starts again
                for proc in procs:
                    call = time.monotonic()
                    proc.step(step)
                    reply = proc.synthetic(seed=step * 1000 + proc.rank, rollouts=rollouts, tokens=tokens, samples=8)
                    report.record_call_max_s = max(report.record_call_max_s, time.monotonic() - call)
                    report.reward_count_recorded += reply["reward_count"]
                    report.reward_sum_recorded += reply["reward_sum"]
                    report.staleness_count_recorded += reply["staleness_count"]
                    reward_buckets = [a + b for a, b in zip(reward_buckets, reply["reward_buckets"], strict=True)]
                if fault_at is not None and time.monotonic() - fault_at >= outage_s:
                    fault_at = None
                    if stack.status()["collector"].state == "paused":
                        stack.resume_component("collector")
                    if stack.pid("victorialogs") is None:
                        stack.start_component("victorialogs")
                now = time.monotonic() - started
                if now - last_sample >= 2.0:
                    last_sample = now
                    for proc in procs:
                        rss[f"rank{proc.rank}"].append((now, proc.rss_kib()))
                    rss["collector"].append((now, rss_kib(stack.pid("collector"))))
                time.sleep(max(0.0, step_s - (time.monotonic() - tick)))
            if stack.status()["collector"].state == "paused":
                stack.resume_component("collector")
            if stack.pid("victorialogs") is None:
                stack.start_component("victorialogs")
            exported = exported_before_restart
            for proc in procs:
                proc.step(steps)
                flush_ok(proc)
                stats = proc.stats()
                exported += int(stats["samples_exported"])
                report.samples_dropped_by_ranks += sum(v for k, v in stats.items() if k.startswith("samples_dropped"))
                report.rank_export_failures_metrics += stats["export_failures_metrics"]
            report.samples_exported_by_ranks = exported
            _final_checks(stack, run_id, report, reward_buckets)
            # Slopes over the second half of each process's life (a restarted rank's new process counts from
            # its start); judged only over >= 60 s, shorter windows are start-up growth.
            judged = False
            for name, series in rss.items():
                half = (series[0][0] + series[-1][0]) / 2
                late = [(t, v) for t, v in series if t >= half]
                slope = slope_per_minute([t for t, _ in late], [v for _, v in late])
                judged = judged or late[-1][0] - late[0][0] >= 60
                limit = rss_slope_limit_kib_per_min * (4 if name == "collector" else 1)
                if late[-1][0] - late[0][0] >= 60 and slope > limit:
                    report.failures.append(f"{name}'s RSS grows {slope:.0f} KiB/min over its second half")
                if name == "collector":
                    report.collector_rss_kib_start, report.collector_rss_kib_end = series[0][1], series[-1][1]
                    report.collector_rss_slope_kib_per_min = round(slope, 1)
                else:
                    report.rank_rss_kib_start.append(series[0][1])
                    report.rank_rss_kib_end.append(series[-1][1])
                    report.rank_rss_slope_kib_per_min.append(round(slope, 1))
            report.memory_judged = judged
            report.collector_log_records_send_failed = collector_metrics(stack).get(
                foreign.text_name(foreign.COLLECTOR_LOG_RECORDS_SEND_FAILED), 0.0
            )
        finally:
            for proc in procs:
                proc.kill()
    report.wall_s = round(time.monotonic() - started, 1)
    return report


def _final_checks(stack: Any, run_id: str, report: SoakReport, reward_buckets: list[int]) -> None:
    prometheus = Prometheus(stack.prometheus_url)
    selector = f'{{rl_run_id="{run_id}",rl_reward_fn="total"}}'
    try:
        eventually(
            lambda: prometheus.value(f"{REWARD.count}{selector}") == report.reward_count_recorded,
            what="the soak's reward count",
            timeout_s=60,
        )
    except AssertionError as error:
        report.failures.append(str(error))
    report.reward_count_prometheus = prometheus.value(f"{REWARD.count}{selector}")
    report.staleness_count_prometheus = prometheus.value(f'{STALENESS.count}{{rl_run_id="{run_id}"}}')
    report.reward_sum_prometheus = prometheus.value(f"{REWARD.sum}{selector}")
    got = prometheus.by_label(f"sum by (le) ({REWARD.bucket}{selector})", "le")
    report.buckets_exact = got == cumulative_buckets(reward_buckets, REWARD_BOUNDS)
    if not report.buckets_exact:
        report.failures.append("reward buckets differ from what the ranks recorded")
    if report.staleness_count_prometheus != report.staleness_count_recorded:
        report.failures.append(
            f"staleness count {report.staleness_count_prometheus} != recorded {report.staleness_count_recorded}"
        )
    if report.reward_sum_prometheus is None or abs(
        report.reward_sum_prometheus - report.reward_sum_recorded
    ) > 1e-9 * max(1.0, abs(report.reward_sum_recorded)):
        report.failures.append(f"reward sum {report.reward_sum_prometheus} != recorded {report.reward_sum_recorded}")
    # A log export that times out while the collector is stalled may still have been delivered: the rank sends
    # the batch again (at least once), so VictoriaLogs can hold duplicates. Every distinct sample must be there.
    query = f'{{rl.run.id="{run_id}"}} | stats count() as n, count_uniq(rl.episode.id) as distinct'

    def samples() -> tuple[int, int]:
        rows = VictoriaLogs(stack.victorialogs_url).query(query)
        return (int(rows[0]["n"]), int(rows[0]["distinct"])) if rows else (0, 0)

    try:
        eventually(
            lambda: samples()[1] == report.samples_exported_by_ranks, what="the soak's distinct samples", timeout_s=90
        )
    except AssertionError as error:
        report.failures.append(str(error))
    time.sleep(2.0)
    report.samples_in_victorialogs, distinct = samples()
    report.samples_duplicated = report.samples_in_victorialogs - distinct
    report.samples_missing = report.samples_exported_by_ranks - distinct


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=360)
    parser.add_argument("--step-s", type=float, default=0.5)
    parser.add_argument("--rollouts", type=int, default=512)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--fault-every", type=int, default=40)
    parser.add_argument("--outage-s", type=float, default=3.0)
    parser.add_argument("--report", type=Path, default=None, help="write the report as JSON here")
    args = parser.parse_args(argv)
    from otel_rl_ops.stack import install

    binaries = install.install_all()
    with tempfile.TemporaryDirectory(prefix="otel-rl-soak-") as state:
        report = run_soak(
            binaries,
            Path(state),
            ranks=args.ranks,
            steps=args.steps,
            step_s=args.step_s,
            rollouts=args.rollouts,
            tokens=args.tokens,
            fault_every=args.fault_every,
            outage_s=args.outage_s,
        )
    text = json.dumps(asdict(report), indent=2)
    print(text)
    if args.report is not None:
        args.report.write_text(text + "\n", encoding="utf-8")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
