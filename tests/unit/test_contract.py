"""The OpenTelemetry side of the wire contract: names, kinds, units and merge rules; that docs/contract.md lists
them; and that the collector configurations merge every metric the way its rule says."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import otel_rl_contract as contract
import pytest
import yaml
from opentelemetry.sdk.metrics.export import ExponentialHistogramDataPoint, HistogramDataPoint

from otel_rl import DEFAULT_REWARD_BOUNDS, DEFAULT_STALENESS_BOUNDS, Telemetry, TelemetryConfig
from tests.conftest import EXPORT_WAIT_S, RecordingMetricExporter

REWARD = contract.series(contract.REWARDS.histogram)

ROOT = Path(__file__).parents[2]
CONTRACT = (ROOT / "docs" / "contract.md").read_text()
COLLECTOR = yaml.safe_load((ROOT / "collector_config" / "collector.yaml").read_text())


def test_metric_names_are_pinned() -> None:
    """Renaming a metric is a breaking change: it must show up here."""
    assert {(m.name, m.kind, m.unit) for m in contract.ALL_METRICS} == {
        ("rl.reward", "histogram", ""),
        ("rl.reward.positive", "counter", ""),
        ("rl.reward.negative", "counter", ""),
        ("rl.reward.squares", "counter", ""),
        ("rl.reward.max", "gauge", ""),
        ("rl.reward.min", "gauge", ""),
        ("rl.staleness", "histogram", "{version}"),
        ("rl.staleness.max", "gauge", "{version}"),
        ("rl.staleness.min", "gauge", "{version}"),
        ("rl.policy.version", "gauge", "{version}"),
        ("rl.step", "gauge", "{step}"),
        ("rl.metric", "histogram", ""),
        ("rl.metric.positive", "counter", ""),
        ("rl.metric.negative", "counter", ""),
        ("rl.metric.squares", "counter", ""),
        ("rl.metric.max", "gauge", ""),
        ("rl.metric.min", "gauge", ""),
        ("otel_rl.samples.exported", "counter", "{sample}"),
        ("otel_rl.samples.dropped", "counter", "{sample}"),
        ("otel_rl.values.rejected", "counter", "{value}"),
        ("otel_rl.values.recorded", "counter", "{value}"),
        ("otel_rl.export.failures", "counter", "{export}"),
        ("rl.advantage", "histogram", ""),
        ("rl.advantage.positive", "counter", ""),
        ("rl.advantage.negative", "counter", ""),
        ("rl.advantage.squares", "counter", ""),
        ("rl.advantage.max", "gauge", ""),
        ("rl.advantage.min", "gauge", ""),
        ("rl.response.length", "histogram", "{token}"),
        ("rl.response.length.positive", "counter", "{token}"),
        ("rl.response.length.negative", "counter", "{token}"),
        ("rl.response.length.squares", "counter", ""),
        ("rl.response.length.max", "gauge", "{token}"),
        ("rl.response.length.min", "gauge", "{token}"),
        ("rl.entropy", "histogram", "{nat}"),
        ("rl.entropy.positive", "counter", "{nat}"),
        ("rl.entropy.negative", "counter", "{nat}"),
        ("rl.entropy.squares", "counter", ""),
        ("rl.entropy.max", "gauge", "{nat}"),
        ("rl.entropy.min", "gauge", "{nat}"),
        ("rl.importance_ratio", "histogram", ""),
        ("rl.importance_ratio.positive", "counter", ""),
        ("rl.importance_ratio.negative", "counter", ""),
        ("rl.importance_ratio.squares", "counter", ""),
        ("rl.importance_ratio.max", "gauge", ""),
        ("rl.importance_ratio.min", "gauge", ""),
        ("rl.mismatch.kl", "histogram", ""),
        ("rl.mismatch.kl.positive", "counter", ""),
        ("rl.mismatch.kl.negative", "counter", ""),
        ("rl.mismatch.kl.squares", "counter", ""),
        ("rl.mismatch.kl.max", "gauge", ""),
        ("rl.mismatch.kl.min", "gauge", ""),
        ("rl.groups", "counter", "{group}"),
        ("rl.groups.zero_variance", "counter", "{group}"),
        ("rl.advantage.sign", "counter", "{rollout}"),
        ("rl.staleness.unversioned", "counter", "{token}"),
        ("rl.staleness.dropped", "counter", "{sample}"),
        ("rl.run.start_time", "gauge", "s"),
        ("rl.run.finished", "gauge", ""),
        ("rl.ranks.up", "gauge", "{rank}"),
        ("rl.ranks.expected", "gauge", "{rank}"),
        ("rl.phase", "gauge", "{rank}"),
        ("otel_rl.export.unencodable", "counter", "{item}"),
        ("otel_rl.merge.canary", "histogram", ""),
        ("rl.phase.started", "gauge", "s"),
        ("rl.tokens.generated", "counter", "{token}"),
        ("rl.tokens.trained", "counter", "{token}"),
        ("rl.samples.trained", "counter", "{sample}"),
        ("rl.flops.per_token", "gauge", "{flop}"),
        ("rl.flops.peak", "gauge", "{flop}/s"),
        ("rl.queue.depth", "gauge", "{trajectory}"),
        ("rl.rollouts.in_flight", "gauge", "{rollout}"),
        ("rl.buffer.used", "gauge", "{sample}"),
        ("rl.buffer.capacity", "gauge", "{sample}"),
        ("rl.reported", "gauge", ""),
        ("otel_rl.spans.exported", "counter", "{span}"),
        ("otel_rl.spans.dropped", "counter", "{span}"),
        ("rl.phase.duration", "histogram", "s"),
        ("rl.phase.calls", "counter", ""),
        ("rl.trajectory.versions", "histogram", "{version}"),
        ("rl.trajectory.versions.max", "gauge", "{version}"),
        ("rl.trajectory.versions.min", "gauge", "{version}"),
        ("rl.dropped.response.length", "histogram", "{token}"),
        ("rl.dropped.response.length.max", "gauge", "{token}"),
        ("rl.dropped.response.length.min", "gauge", "{token}"),
        ("rl.dropped.staleness", "histogram", "{version}"),
        ("rl.dropped.staleness.max", "gauge", "{version}"),
        ("rl.dropped.staleness.min", "gauge", "{version}"),
        ("rl.joint", "counter", ""),
        ("rl.reward.ground_truth", "gauge", ""),
        ("rl.gpu.seconds", "counter", "s"),
        ("rl.gpu.hour_price", "gauge", ""),
    }


_ROLE_BOUNDS = {
    "reward": DEFAULT_REWARD_BOUNDS,
    "unbounded": (),
    "staleness": tuple(float(b) for b in DEFAULT_STALENESS_BOUNDS),
    "length": (0.0, *(float(2**k) for k in range(18))),
    "ratio": (0.5, 0.8, 0.9, 0.95, 0.98, 0.99, 1.0, 1.01, 1.02, 1.05, 1.1, 1.25, 2.0, 5.0),
    "small": (-1.0, -0.1, -0.01, -0.001, 0.0, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0),
}


@pytest.mark.parametrize(
    ("form", "expected"),
    [
        ("exponential", {d.histogram.name: ("ExponentialHistogram", 5) for d in contract.DISTRIBUTIONS}),
        ("explicit", {d.histogram.name: ("Histogram", _ROLE_BOUNDS[d.role]) for d in contract.DISTRIBUTIONS}),
    ],
)
def test_histogram_forms_are_pinned(
    form: Literal["exponential", "explicit"],
    expected: dict[str, tuple[str, object]],
    metric_exporter: RecordingMetricExporter,
) -> None:
    """Both histogram forms of every distribution are part of the contract: exponential (default, scale 5) and
    explicit, with the bounds of the distribution's role (lengths do not get reward bounds)."""
    telemetry = Telemetry(
        TelemetryConfig(run_id="forms", histogram=form, export_interval_s=60),
        metric_exporter=metric_exporter,
    )
    telemetry.record_rewards([0.5, -1.0])
    telemetry.record_staleness([3, 1], current_version=4)
    telemetry.record_metric("loss", [0.25])
    telemetry.record_rollouts(
        advantages=[0.5, -0.5],
        response_lengths=[128, 64],
        entropy=[[0.5, 0.25]] * 2,
        logprobs=[[-1.0, -2.0]] * 2,
        inference_logprobs=[[-1.1, -2.0]] * 2,
        versions_spanned=[1, 2],
    )
    telemetry.record_staleness_drops(response_lengths=[512], staleness=[9])
    telemetry.flush(EXPORT_WAIT_S)
    telemetry.shutdown()
    forms: dict[str, tuple[str, object]] = {}
    for (name, _), point in metric_exporter.latest().items():
        if name in expected:
            shape: object = None
            if isinstance(point, ExponentialHistogramDataPoint):
                shape = point.scale
            elif isinstance(point, HistogramDataPoint):
                shape = tuple(point.explicit_bounds)
            forms[name] = (type(point).__name__.removesuffix("DataPoint"), shape)
    assert forms == expected


def test_every_distribution_declares_its_role() -> None:
    """Each distribution's layout role is pinned: a new distribution must choose one."""
    assert {d.histogram.name: d.role for d in contract.DISTRIBUTIONS} == {
        "rl.reward": "reward",
        "rl.metric": "unbounded",
        "rl.staleness": "staleness",
        "rl.advantage": "reward",
        "rl.response.length": "length",
        "rl.entropy": "small",
        "rl.importance_ratio": "ratio",
        "rl.mismatch.kl": "small",
        "rl.trajectory.versions": "staleness",
        "rl.dropped.response.length": "length",
        "rl.dropped.staleness": "staleness",
    }


def test_gauge_merge_rules_are_pinned() -> None:
    """How ranks merge each gauge is part of the contract: extremes by max/min, version, step and world size by
    max, the run's start and clean end by min, per-rank indicators (ranks up, ranks per phase) by sum."""
    assert {m.name: m.merge for m in contract.ALL_METRICS if m.kind == "gauge"} == {
        "rl.reward.max": "max",
        "rl.reward.min": "min",
        "rl.staleness.max": "max",
        "rl.staleness.min": "min",
        "rl.metric.max": "max",
        "rl.metric.min": "min",
        "rl.policy.version": "max",
        "rl.step": "max",
        "rl.advantage.max": "max",
        "rl.advantage.min": "min",
        "rl.response.length.max": "max",
        "rl.response.length.min": "min",
        "rl.entropy.max": "max",
        "rl.entropy.min": "min",
        "rl.importance_ratio.max": "max",
        "rl.importance_ratio.min": "min",
        "rl.mismatch.kl.max": "max",
        "rl.mismatch.kl.min": "min",
        "rl.run.start_time": "min",
        "rl.run.finished": "min",
        "rl.ranks.up": "sum",
        "rl.ranks.expected": "max",
        "rl.phase": "sum",
        "rl.phase.started": "min",
        "rl.flops.per_token": "max",
        "rl.flops.peak": "sum",
        "rl.queue.depth": "sum",
        "rl.rollouts.in_flight": "sum",
        "rl.buffer.used": "sum",
        "rl.buffer.capacity": "sum",
        "rl.reported": "mean",
        "rl.trajectory.versions.max": "max",
        "rl.trajectory.versions.min": "min",
        "rl.dropped.response.length.max": "max",
        "rl.dropped.response.length.min": "min",
        "rl.dropped.staleness.max": "max",
        "rl.dropped.staleness.min": "min",
        "rl.reward.ground_truth": "max",
        "rl.gpu.hour_price": "max",
    }
    assert {m.merge for m in contract.ALL_METRICS if m.kind != "gauge"} == {"sum"}


def _ottl_condition(condition: str) -> Callable[[dict[str, Any]], bool]:
    """A Python predicate over a metric's fields for the OTTL conditions our collector configs use: comparisons of
    ``metric.<field>`` with enum constants, strings and booleans, ``IsMatch(metric.name, "regex")``, and/or/not."""
    patterns: list[re.Pattern[str]] = []

    def is_match(found: re.Match[str]) -> str:
        patterns.append(re.compile(found.group(1).replace("\\\\", "\\")))
        return f'(patterns[{len(patterns) - 1}].search(metric["name"]) is not None)'

    python = re.sub(r'IsMatch\(metric\.name, "((?:[^"\\]|\\.)*)"\)', is_match, condition)
    python = re.sub(r"\bmetric\.(\w+)", r'metric["\1"]', python)
    python = re.sub(r"\b(?:METRIC_DATA_TYPE|AGGREGATION_TEMPORALITY)_(\w+)", r'"\1"', python)
    python = re.sub(r"\bfalse\b", "False", re.sub(r"\btrue\b", "True", python))
    code = compile(python, condition, "eval")
    return lambda metric: bool(eval(code, {"__builtins__": {}}, {"metric": metric, "patterns": patterns}))  # noqa: S307


def _as_ottl_metrics(metric: contract.MetricName, temporality: str = "CUMULATIVE") -> list[dict[str, Any]]:
    """The forms in which the collector may receive ``metric``: a histogram is explicit or exponential."""
    types = {"histogram": ["HISTOGRAM", "EXPONENTIAL_HISTOGRAM"], "counter": ["SUM"], "gauge": ["GAUGE"]}[metric.kind]
    return [
        {"name": metric.name, "type": kind, "aggregation_temporality": temporality, "is_monotonic": True}
        for kind in types
    ]


def _filter_mergeable() -> list[Callable[[dict[str, Any]], bool]]:
    return [_ottl_condition(c) for c in COLLECTOR["processors"]["filter/mergeable"]["metric_conditions"]]


def test_collector_admits_every_contract_metric() -> None:
    """No metric of the contract, in any form it may take, is dropped by the aggregated pipeline's filter/mergeable."""
    conditions = _filter_mergeable()
    dropped = [
        (form["name"], form["type"])
        for m in contract.ALL_METRICS
        for form in _as_ottl_metrics(m)
        if any(drops(form) for drops in conditions)
    ]
    assert dropped == []


def test_collector_admits_only_contract_metric_names() -> None:
    """filter/contract (a bound: docs/reliability.md) lets every metric of the contract through and drops invented
    names, so the names that reach the merge are a finite set."""
    (condition,) = COLLECTOR["processors"]["filter/contract"]["metric_conditions"]
    drops = _ottl_condition(condition)
    assert [m.name for m in contract.ALL_METRICS if drops({"name": m.name})] == []
    invented = ["rl.invented", "rl.reward.fn", "rl.reward2", "xrl.reward", "rl.step.max", "otel_rl.x", REWARD.name, ""]
    assert [name for name in invented if not drops({"name": name})] == []


def test_collector_drops_delta_histograms_of_both_kinds() -> None:
    """filter/mergeable drops delta histograms, explicit and exponential: only cumulative points merge exactly."""
    conditions = _filter_mergeable()
    delta = [form for m in contract.ALL_METRICS if m.kind == "histogram" for form in _as_ottl_metrics(m, "DELTA")]
    assert {form["type"] for form in delta} == {"HISTOGRAM", "EXPONENTIAL_HISTOGRAM"}
    assert all(any(drops(form) for drops in conditions) for form in delta)


def test_collector_merges_each_metric_by_its_contract_rule() -> None:
    """transform/merge_ranks applies exactly one aggregate_on_attributes to each metric: the contract's rule."""
    statements = [
        statement
        for group in COLLECTOR["processors"]["transform/merge_ranks"]["metric_statements"]
        if group["context"] == "metric"
        for statement in group["statements"]
    ]
    rules: list[tuple[str, Callable[[dict[str, Any]], bool]]] = []
    for statement in statements:
        found = re.fullmatch(r'aggregate_on_attributes\("(\w+)"\) where (.+)', statement)
        if found:
            rules.append((found.group(1), _ottl_condition(found.group(2))))
    assert len(rules) == 5, statements
    forms = [(m, form) for m in contract.ALL_METRICS for form in _as_ottl_metrics(m)]
    merged = {(form["name"], form["type"]): [rule for rule, applies in rules if applies(form)] for _, form in forms}
    assert merged == {(form["name"], form["type"]): [m.merge] for m, form in forms}


def test_collector_stamps_a_flush_once_per_run() -> None:
    """transform/merge_ranks reads the clock once per resource (a run, after groupbyattrs/compact) and copies that
    time to every point; ``Now()`` per point stamped one flush's series milliseconds apart under load (a ratio's
    numerator and denominator then fell in different windows)."""
    groups = COLLECTOR["processors"]["transform/merge_ranks"]["metric_statements"]
    clock_reads = [(group["context"], s) for group in groups for s in group["statements"] if "Now()" in s]
    assert clock_reads == [("resource", 'set(resource.attributes["otel_rl.flush_time"], UnixNano(Now()))')]
    point_statements = [s for group in groups if group["context"] == "datapoint" for s in group["statements"]]
    assert 'set(datapoint.time_unix_nano, resource.attributes["otel_rl.flush_time"])' in point_statements
    assert groups[-1] == {
        "context": "resource",
        "statements": ['delete_key(resource.attributes, "otel_rl.flush_time")'],
    }


@pytest.mark.parametrize(
    ("path", "forget", "exporter", "per_process"),
    [
        ("collector.yaml", "transform/forget_rank", "prometheus_remote_write/aggregated", ()),
        ("per_rank.yaml", "transform/per_rank", "prometheus_remote_write/per_rank", (contract.RANK,)),
    ],
)
def test_collector_keeps_the_run_attributes_as_labels(
    path: str, forget: str, exporter: str, per_process: tuple[str, ...]
) -> None:
    """The run's own resource attributes (contract.RUN_ATTRIBUTES: run id, group, role, world size) survive the
    whitelist that forgets the rank and become labels of every series; nothing per-process does (the per-rank
    view adds the rank). The gateway runs collector.yaml's pipelines; the agent forwards whole resources."""
    config = yaml.safe_load((ROOT / "collector_config" / path).read_text())
    (group,) = [g for g in config["processors"][forget]["metric_statements"] if g["context"] == "resource"]
    kept = re.fullmatch(r"keep_keys\(resource\.attributes, \[(.*)\]\)", group["statements"][0])
    assert kept is not None, group
    keys = [key.strip().strip('"') for key in kept.group(1).split(",")]
    assert keys == ["service.name", "service.namespace", *contract.RUN_ATTRIBUTES, *per_process]
    labels = config["exporters"][exporter]["resource_constant_labels"]["included"]
    assert labels == [*contract.RUN_ATTRIBUTES, *per_process]


def test_contract_document_lists_every_name() -> None:
    """Every metric, attribute and event name appears in docs/contract.md."""
    names = [m.name for m in contract.ALL_METRICS if not m.name.startswith("rl.metric.")]
    names += [
        contract.RUN_ID,
        contract.RUN_GROUP,
        contract.RANK,
        contract.WORLD_SIZE,
        contract.LOCAL_RANK,
        contract.ROLE,
        contract.REWARD_FN,
        contract.METRIC_KEY,
        contract.SAMPLE_EVENT,
        contract.SAMPLE_SELECTION,
        contract.SAMPLE_TABLE,
        contract.SAMPLE_TRUNCATED,
        contract.DATASET,
        contract.STALENESS_PHASE,
        contract.KL_ESTIMATOR,
        contract.GROUP_OUTCOME,
        contract.SIGN,
        contract.PHASE,
        contract.JOINT_X,
        contract.JOINT_MOMENT,
    ]
    missing = [name for name in names if f"`{name}`" not in CONTRACT]
    assert missing == []


def test_spanmetrics_buckets_are_the_ranks_phase_buckets() -> None:
    """Other senders' phase spans (spanmetrics) and the ranks' own phase metrics share one bucket layout, so both
    merge and one dashboard query reads both."""
    units = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    buckets = COLLECTOR["connectors"]["spanmetrics"]["histogram"]["explicit"]["buckets"]

    def seconds(text: str) -> float:
        number, unit = re.fullmatch(r"([0-9.]+)(ms|s|m|h)", text).groups()  # type: ignore[union-attr]
        return float(number) * units[unit]

    assert [seconds(bucket) for bucket in buckets] == pytest.approx(list(contract.PHASE_BOUNDS), rel=1e-12)
