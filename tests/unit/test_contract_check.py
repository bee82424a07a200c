"""The contract check (tests/contract_check.py): the rules, the promtool tests, the dashboards and the collector
configurations spell only names the contract declares; a planted name fails it, named with where it stands."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import otel_rl_contract as contract
import pytest
import yaml

from tests.contract_check import check, collector_names, promql, prose, unknown_names

ROOT = Path(__file__).parents[2]


def test_every_name_the_configurations_spell_is_declared() -> None:
    """Every series of every rule, promtool test and dashboard query, every series or label the panels' descriptions
    and the alerts' annotations name, every OpenTelemetry name of the collector configurations, and every recording
    rule is declared in the contract."""
    check(ROOT)


def test_the_check_reads_every_source() -> None:
    """The check reads the rules (their annotations' queries too), the promtool tests, both dashboard variables'
    and every panel's PromQL, the panels' descriptions and the alerts' annotations, and the collector's OTTL and
    spanmetrics names: none is skipped unseen."""
    where = {place.split(":")[0] for place, _ in promql(ROOT)}
    assert {"prometheus/rules/otel_rl.yml", "prometheus/rules/tests/health.yml"} <= where
    assert "grafana/dashboards/rl-run.json" in where
    read = [expr for place, expr in promql(ROOT)]
    assert 'rl:phase_stuck_threshold_seconds{rl_run_id="",rl_phase_name=""}' in read  # an annotation's query
    assert 'rl_step{rl_run_id="$run",rl_rank=""}' in read  # the dashboard's service variable
    described = {place.rsplit(" ", 1)[-1] for place, _ in prose(ROOT)}
    assert described == {"description", "summary", "runbook_url", "dashboard_url"}
    spelled = {name for _, name, pattern in collector_names(ROOT) if not pattern}
    assert {"rl.phase.duration", "rl.reported", "rl.reward.mean", "rl.staleness.max"} <= spelled


def _copy(tmp_path: Path) -> Path:
    """The files the check reads, copied under ``tmp_path``."""
    for folder in ("prometheus/rules", "grafana/dashboards"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    (tmp_path / "collector_config").mkdir()
    for path in (ROOT / "collector_config").glob("*.yaml"):
        shutil.copy(path, tmp_path / "collector_config" / path.name)
    return tmp_path


def _plant(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


@pytest.mark.parametrize(
    ("file", "old", "new", "where", "name"),
    [
        (
            "prometheus/rules/otel_rl_windows.yml",
            'max_over_time(rl_staleness_max{rl_rank=""}[1m])',
            'max_over_time(rl_staleness_maximum{rl_rank=""}[1m])',
            "prometheus/rules/otel_rl_windows.yml: rl:staleness_max:max1m",
            "rl_staleness_maximum",
        ),
        (
            "prometheus/rules/otel_rl_collector.yml",
            'otelcol_otel_rl_points_rejected(_total)?"} offset 5m',
            'otelcol_otel_rl_point_rejected(_total)?"} offset 5m',
            "prometheus/rules/otel_rl_collector.yml: OtelRLRejectedPoints",
            "otelcol_otel_rl_point_rejected(_total)?",
        ),
        (
            "prometheus/rules/otel_rl.yml",
            'printf "rl:phase_duration_p99:rate1h{',
            'printf "rl:phase_duration_p95:rate1h{',
            "prometheus/rules/otel_rl.yml: RLPhaseStuck",
            "rl:phase_duration_p95:rate1h",
        ),
        (
            "prometheus/rules/tests/staleness.yml",
            "- series: 'rl_staleness_max{",
            "- series: 'rl_stalenes_max{",
            "prometheus/rules/tests/staleness.yml",
            "rl_stalenes_max",
        ),
        (
            "grafana/dashboards/rl-run.json",
            "max(rl_policy_version{",
            "max(rl_policy_versions{",
            "grafana/dashboards/rl-run.json: Policy version and step A",
            "rl_policy_versions",
        ),
        (
            "collector_config/per_rank.yaml",
            'metric.name == "rl.staleness.max"',
            'metric.name == "rl.staleness.maximum"',
            "collector_config/per_rank.yaml: processors.filter/per_rank.metric_conditions",
            "rl.staleness.maximum",
        ),
        (
            "collector_config/collector.yaml",
            "namespace: rl.phase",
            "namespace: rl.phases",
            "collector_config/collector.yaml: connectors.spanmetrics",
            "rl.phases.calls, rl.phases.duration",
        ),
        (
            "prometheus/rules/otel_rl_windows.yml",
            "- record: rl:joint_n:increase10m",
            "- record: rl:joint_count:increase10m",
            "recorded but not declared in otel_rl_contract/rules.py",
            "rl:joint_count:increase10m",
        ),
        (
            "grafana/dashboards/rl-run.json",
            "(rl_groups_total), and of groups",
            "(rl_group_total), and of groups",
            "grafana/dashboards/rl-run.json: Prompt groups: outcome and zero variance description",
            "rl_group_total",
        ),
        (
            "prometheus/rules/otel_rl_collector.yml",
            '(rl_alert_threshold{threshold="merge_canary_misplaced"}, default',
            '(rl_alert_thresholds{threshold="merge_canary_misplaced"}, default',
            "prometheus/rules/otel_rl_collector.yml: OtelRLInexactMerge description",
            "rl_alert_thresholds",
        ),
    ],
    ids=[
        "rule",
        "name-pattern",
        "annotation",
        "promtool-input",
        "dashboard",
        "ottl",
        "spanmetrics",
        "record",
        "panel-description",
        "alert-description",
    ],
)
def test_a_planted_name_fails_the_check_naming_it(
    tmp_path: Path, file: str, old: str, new: str, where: str, name: str
) -> None:
    """A name the contract does not know, planted in a copy of one source, fails the check with its place and name
    (and a renamed recording rule leaves its declaration unrecorded)."""
    root = _copy(tmp_path)
    _plant(root / file, old, new)
    with pytest.raises(AssertionError, match=re.escape(f"{where}: {name}")):
        check(root)


def test_exemplar_carriers_are_the_collectors() -> None:
    """The collector carries the exemplars of exactly the contract's EXEMPLAR_CARRIERS (filter/exemplar_carriers)."""
    config = yaml.safe_load((ROOT / "collector_config" / "collector.yaml").read_text(encoding="utf-8"))
    (condition,) = config["processors"]["filter/exemplar_carriers"]["metric_conditions"]
    carried = set(re.findall(r'metric\.name == "([^"]+)"', condition))
    assert carried == {distribution.histogram.name for distribution in contract.EXEMPLAR_CARRIERS}


def test_the_lens_mapping_is_the_contracts() -> None:
    """transform/lens maps exactly NeMo Lens's gauges of the contract (LENS_GAUGES), each to its canonical key."""
    config = yaml.safe_load((ROOT / "collector_config" / "collector.yaml").read_text(encoding="utf-8"))
    statements = [
        s for group in config["processors"]["transform/lens"]["metric_statements"] for s in group["statements"]
    ]
    mapped = {
        name: key
        for statement in statements
        for key, name in re.findall(r'"rl\.metric\.key"\], "([^"]+)"\) where metric\.name == "([^"]+)"', statement)
    }
    assert mapped == dict(contract.foreign.LENS_GAUGES)
    (pattern,) = {p for _, p, is_pattern in collector_names(ROOT) if is_pattern and "reward\\.mean" in p}
    assert [name for name in contract.foreign.LENS_GAUGES if not re.search(pattern, name)] == []


def test_unknown_names_are_empty_when_nothing_is_read(tmp_path: Path) -> None:
    """Folders without sources leave nothing unknown but the declared recording rules no rule records."""
    (tmp_path / "prometheus" / "rules" / "tests" / "fixtures").mkdir(parents=True)
    (tmp_path / "grafana" / "dashboards").mkdir(parents=True)
    (tmp_path / "collector_config").mkdir()
    assert list(unknown_names(tmp_path)) == ["declared in otel_rl_contract/rules.py but recorded by no rule"]


def test_the_inference_scrape_keeps_every_engine_series_the_contract_reads() -> None:
    """collector_config/inference.yaml keeps only the engines' families: each vLLM and SGLang series the contract
    declares (a histogram's classic series too) passes its keep rule, so no dashboard query reads a dropped one."""
    config = yaml.safe_load((ROOT / "collector_config" / "inference.yaml").read_text(encoding="utf-8"))
    (scrape,) = config["receivers"]["prometheus/inference"]["config"]["scrape_configs"]
    (keep,) = [rule["regex"] for rule in scrape["metric_relabel_configs"] if rule["action"] == "keep"]
    engines = [s for s in contract.foreign.FOREIGN_SERIES if s.name.startswith(("vllm:", "sglang:"))]
    read = {name for engine in engines for name in engine.names("explicit")}
    assert len(engines) == 14 and [name for name in sorted(read) if not re.fullmatch(keep, name)] == []
