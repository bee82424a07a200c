"""The merge canary (otel_rl/_state/canary.py): a run merged by a collector without otel-rl's exact merge is caught.

Against real collectors: the otel-rl distribution, and the same manifest built without its patches, which merges
exponential histograms as the stock contrib collector of that release does (the code of the components is the same
upstream code). The alert rule is the one the stack loads (prometheus/rules/otel_rl_collector.yml).
"""

from __future__ import annotations

import dataclasses
import math
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import otel_rl_contract as contract
import pytest
import yaml
from opentelemetry.sdk.metrics.export import ExponentialHistogramDataPoint
from otel_rl_contract import foreign
from otel_rl_ops import promql
from otel_rl_ops.query import Prometheus
from otel_rl_ops.stack import collector_build, layout
from otel_rl_ops.stack.env import otel_rl_home

from tests.conftest import EXPORT_WAIT_S, RecordingMetricExporter
from tests.pipeline.harness import ROOT, eventually, private_stack, start_ranks

MERGE_CANARY = contract.series(contract.MERGE_CANARY)

RANKS = 4
STEPS = 5
RULES = ROOT / "prometheus" / "rules"


@pytest.fixture(scope="module")
def stock_stack(stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A stack whose collector is builder.yaml built without the patches (cached like the patched build)."""
    stock = collector_build.ensure_collector(layout.collector_manifest(ROOT), home=otel_rl_home(), patched=False)
    assert stock != stack_binaries.collector
    binaries = dataclasses.replace(stack_binaries, collector=stock)
    with private_stack(binaries, tmp_path_factory.mktemp("stock-stack")) as running:
        yield running


def _run_canary(stack: Any) -> tuple[str, Prometheus]:
    """4 ranks (exponential histograms) step 5 times; returns the run id once the canary's whole count arrived."""
    run_id = f"canary-{uuid.uuid4().hex[:8]}"
    ranks = start_ranks(
        RANKS, endpoint=stack.otlp_grpc_endpoint, run_id=run_id, histogram="exponential", export_interval_s=0.3
    )
    prometheus = Prometheus(stack.prometheus_url)
    try:
        for step in range(1, STEPS + 1):
            for rank in ranks:
                rank.step(step)
            for rank in ranks:
                rank.flush()
        total = RANKS * STEPS * 2
        eventually(
            lambda: prometheus.value(f'histogram_count({MERGE_CANARY.name}{{rl_run_id="{run_id}"}})') == total,
            what=f"the canary's {total} counts",
            timeout_s=60,
        )
    finally:
        for rank in ranks:
            rank.kill()
    return run_id, prometheus


def _alert_firing(prometheus: Prometheus, run_id: str) -> bool:
    return bool(
        prometheus.query(
            f'{foreign.ALERTS.name}{{alertname="OtelRLInexactMerge",alertstate="firing",rl_run_id="{run_id}"}}'
        )
    )


def test_a_stock_merge_is_caught_by_the_canary_and_the_alert_fires(stock_stack: Any) -> None:
    """Through the unpatched collector the canary's count is whole but counts leave its four buckets:
    otel_rl:merge_canary_misplaced:ratio is above 0 and OtelRLInexactMerge fires for the run."""
    run_id, prometheus = _run_canary(stock_stack)
    ratio = eventually(
        lambda: prometheus.value(f'{contract.rules.MERGE_CANARY_MISPLACED.name}{{rl_run_id="{run_id}"}}'),
        what="the recording rule's first value",
        timeout_s=60,
    )
    assert ratio > 0.01, ratio
    eventually(lambda: _alert_firing(prometheus, run_id), what="OtelRLInexactMerge firing", timeout_s=60)


def test_the_otel_rl_collector_keeps_the_canary_exact_and_the_alert_silent(shared_stack: Any) -> None:
    """Through the otel-rl collector every canary count is in its bucket (each bucket holds ranks/2 x steps), the
    recorded ratio is 0 and OtelRLInexactMerge does not fire."""
    run_id, prometheus = _run_canary(shared_stack)
    (series,) = prometheus.query(f'{MERGE_CANARY.name}{{rl_run_id="{run_id}"}}')
    width = 1 << contract.MERGE_CANARY_SCALE
    counts = {
        round(math.log2(float(low)) * width): float(count) for _, low, _, count in series["histogram"][1]["buckets"]
    }
    every = sorted(index for pair in contract.MERGE_CANARY_BUCKETS for index in pair)
    assert counts == dict.fromkeys(every, RANKS // 2 * STEPS)
    ratio = eventually(
        lambda: prometheus.query(f'{contract.rules.MERGE_CANARY_MISPLACED.name}{{rl_run_id="{run_id}"}}'),
        what="the recording rule's first value",
        timeout_s=60,
    )
    assert float(ratio[0]["value"][1]) == pytest.approx(0, abs=1e-12)
    assert not _alert_firing(prometheus, run_id)


def test_the_rule_is_the_promql_builders_expression_and_its_test_data_the_contracts_buckets() -> None:
    """otel_rl:merge_canary_misplaced:ratio is promql.merge_canary_misplaced (one definition), and the promtool test's
    exact series has its counts at the contract's canary buckets (Prometheus's index = OpenTelemetry's + 1)."""
    rules = yaml.safe_load((RULES / "otel_rl_collector.yml").read_text(encoding="utf-8"))["groups"][0]["rules"]
    (rule,) = [rule for rule in rules if rule.get("record") == contract.rules.MERGE_CANARY_MISPLACED.name]
    assert rule["expr"].strip() == promql.merge_canary_misplaced('rl_rank=""')
    test = yaml.safe_load((RULES / "tests" / "collector.yml").read_text(encoding="utf-8"))
    (exact,) = [
        s["values"]
        for s in test["tests"][0]["input_series"]
        if s["series"].startswith(f"{MERGE_CANARY.name}{{") and 'rl_run_id="exact"' in s["series"]
    ]
    canary = re.search(r"\+\{\{schema:5 .*offset:(-?\d+) buckets:\[([\d ]+)\]", exact)
    assert canary is not None, exact
    offset, buckets = canary.groups()
    filled = {int(offset) + position for position, count in enumerate(buckets.split()) if int(count)}
    assert filled == {index + 1 for pair in contract.MERGE_CANARY_BUCKETS for index in pair}


def test_no_canary_with_explicit_histograms(metric_exporter: RecordingMetricExporter) -> None:
    """histogram="explicit" records no canary (explicit histograms merge exactly on any collector); the default
    records its rank's two values at every step, in one stream at the canary's scale."""
    from otel_rl import Telemetry, TelemetryConfig

    cases: list[tuple[Literal["explicit", "exponential"], int, tuple[int, int] | None]] = [
        ("explicit", 0, None),
        ("exponential", 0, (-100, 72)),
        ("exponential", 3, (-40, 100)),
    ]
    for form, rank, expected in cases:
        metric_exporter.exports.clear()
        telemetry = Telemetry(
            TelemetryConfig(run_id="c", rank=rank, world_size=4, histogram=form, export_interval_s=60),
            metric_exporter=metric_exporter,
        )
        telemetry.step(1)
        telemetry.step(2)
        telemetry.flush(EXPORT_WAIT_S)
        telemetry.shutdown()
        points = list(metric_exporter.streams(contract.MERGE_CANARY.name).values())
        if expected is None:
            assert points == [], form
            continue
        (point,) = points
        assert isinstance(point, ExponentialHistogramDataPoint), point
        filled = [point.positive.offset + i for i, count in enumerate(point.positive.bucket_counts) if count]
        assert (point.scale, point.count, tuple(filled)) == (contract.MERGE_CANARY_SCALE, 4, expected)


def test_contract_document_names_the_canary() -> None:
    """docs/contract.md documents the canary's metric and series."""
    contract = (Path(ROOT) / "docs" / "contract.md").read_text(encoding="utf-8")
    assert "`otel_rl.merge.canary`" in contract and f"`{MERGE_CANARY.name}`" in contract


def test_every_collector_alert_has_a_firing_and_a_silent_unit_test() -> None:
    """Each alert of otel_rl_collector.yml appears in its promtool tests once expecting alerts and once expecting
    none (tests/dashboards covers otel_rl.yml the same way), with a summary, description, runbook and dashboard."""
    rules = yaml.safe_load((RULES / "otel_rl_collector.yml").read_text(encoding="utf-8"))["groups"][0]["rules"]
    alerts = {rule["alert"] for rule in rules if "alert" in rule}
    assert alerts == {"OtelRLInexactMerge", "OtelRLCollectorCapHit", "OtelRLRejectedPoints"}
    assert all(
        set(r["annotations"]) == {"summary", "description", "runbook_url", "dashboard_url"}
        for r in rules
        if "alert" in r
    )
    cases = [
        case
        for test in yaml.safe_load((RULES / "tests" / "collector.yml").read_text(encoding="utf-8"))["tests"]
        for case in test.get("alert_rule_test", ())
    ]
    assert {c["alertname"] for c in cases if c["exp_alerts"]} == alerts
    assert {c["alertname"] for c in cases if not c["exp_alerts"]} == alerts
