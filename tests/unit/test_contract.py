"""The OpenTelemetry side of the wire contract: names, kinds and units, and that docs/contract.md lists them."""

from __future__ import annotations

from pathlib import Path

from otel_rl import _names

CONTRACT = (Path(__file__).parents[2] / "docs" / "contract.md").read_text()


def test_metric_names_are_pinned() -> None:
    """Renaming a metric is a breaking change: it must show up here."""
    assert {(m.name, m.kind, m.unit) for m in _names.ALL_METRICS} == {
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
        ("otel_rl.export.failures", "counter", "{export}"),
    }


def test_contract_document_lists_every_name() -> None:
    """Every metric, attribute and event name appears in docs/contract.md."""
    names = [m.name for m in _names.ALL_METRICS if not m.name.startswith("rl.metric.")]
    names += [
        _names.RUN_ID, _names.RANK, _names.WORLD_SIZE, _names.LOCAL_RANK, _names.ROLE, _names.REWARD_FN,
        _names.METRIC_KEY, _names.SAMPLE_EVENT, _names.SAMPLE_SELECTION, _names.SAMPLE_TRUNCATED,
    ]  # fmt: skip
    missing = [name for name in names if f"`{name}`" not in CONTRACT]
    assert missing == []
