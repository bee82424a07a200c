"""The console's quantiles are the dashboards' (issue #28): the dashboards' own PromQL (``otel_rl_ops.promql``),
evaluated by Prometheus in promtool, equals the library's estimate, and the console prints that value. A stack test
(it runs promtool), so it lives beside the dashboards' other checks rather than in tests/unit."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import otel_rl_contract as contract
import pytest
import yaml
from otel_rl_contract import Distribution
from otel_rl_ops import promql

from otel_rl._export.console import _number, classic_quantile, native_quantile, shown_quantile
from otel_rl._record.buckets import HistogramForm
from tests.unit.test_console import CASES, INTEGERS, _fields, _one_step, _point


def _library_quantile(q: float, point: Any, integer: bool) -> float:
    """The console's value: the library's estimate of the point, rounded and clamped as the console does."""
    if histogram_is_explicit(point):
        estimate = classic_quantile(q, point.explicit_bounds, point.bucket_counts)
    else:
        sides = [
            {side.offset + i: n for i, n in enumerate(side.bucket_counts) if n}
            for side in (point.positive, point.negative)
        ]
        estimate = native_quantile(
            q, scale=point.scale, zero_count=point.zero_count, positive=sides[0], negative=sides[1]
        )
    return shown_quantile(estimate, minimum=point.min, maximum=point.max, integer=integer)


def histogram_is_explicit(point: Any) -> bool:
    return hasattr(point, "explicit_bounds")


def _series(metric: Distribution, case: str, point: Any) -> list[dict[str, str]]:
    """promtool input series of ``point``: the native histogram (Prometheus's bucket ``i`` is OpenTelemetry's
    ``i - 1``) or the classic ``_bucket``/``_count`` series, and the extremes gauges."""
    labels = f'rl_run_id="{case}"'
    histogram = contract.series(metric.histogram)
    low, high = contract.series(metric.minimum).name, contract.series(metric.maximum).name
    series = [
        {"series": f"{low}{{{labels}}}", "values": f"{point.min!r}x10"},
        {"series": f"{high}{{{labels}}}", "values": f"{point.max!r}x10"},
    ]
    if histogram_is_explicit(point):
        cumulative = np.cumsum(point.bucket_counts).tolist()
        for le, n in zip([*map(repr, point.explicit_bounds), "+Inf"], cumulative, strict=True):
            series.append({"series": f'{histogram.bucket}{{{labels},le="{le}"}}', "values": f"{n}x10"})
        series.append({"series": f"{histogram.count}{{{labels}}}", "values": f"{point.count}x10"})
        return series
    parts = [f"schema:{point.scale}", f"count:{point.count}", f"sum:{point.sum!r}", f"z_bucket:{point.zero_count}"]
    if point.positive.bucket_counts:
        parts += [
            f"offset:{point.positive.offset + 1}",
            f"buckets:[{' '.join(map(str, point.positive.bucket_counts))}]",
        ]
    if point.negative.bucket_counts:
        parts += [
            f"n_offset:{point.negative.offset + 1}",
            f"n_buckets:[{' '.join(map(str, point.negative.bucket_counts))}]",
        ]
    series.append({"series": f"{histogram.name}{{{labels}}}", "values": f"{{{{{' '.join(parts)}}}}}x10"})
    return series


@pytest.mark.stack  # runs promtool
@pytest.mark.parametrize("histogram", ["exponential", "explicit"])
def test_console_quantiles_are_the_dashboards_on_the_same_data(
    promtool: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], histogram: HistogramForm
) -> None:
    """For each data set, p50/p90/p99 by the dashboards' PromQL (promql.quantile_estimate, rounded for integers,
    clamp_to_extremes) evaluated by Prometheus in promtool equal the library's estimate of the same histogram, and
    the console prints that value."""
    series: list[dict[str, str]] = []
    cases = []
    for case, (metric, values) in CASES.items():
        point = _point(metric, values, histogram)
        series += _series(metric, case, point)
        selector = f'rl_run_id="{case}"'
        for q in (0.5, 0.9, 0.99):
            estimate = promql.quantile_estimate(
                q,
                *promql.buckets(contract.series(metric.histogram), selector, window=None),
                integers=metric in INTEGERS,
            )
            expr = promql.clamp_to_extremes(estimate, *promql.extremes(metric, selector, window="1m"))
            expected = _library_quantile(q, point, metric in INTEGERS)
            # Equal up to float rounding (Go's Log2/Exp2 and Python's differ in the last bits): 0 when they agree.
            differs = f"abs(({expr}) - {expected!r}) > bool {abs(expected) * 1e-12 + 1e-300!r}"
            cases.append({"expr": differs, "eval_time": "1m", "exp_samples": [{"labels": "{}", "value": 0}]})
        _one_step(metric, values, histogram=histogram)
        name = "rl.reward{fn=total}" if metric == contract.REWARDS else metric.histogram.name
        fields = _fields(capsys.readouterr().out, 0, 0, name)
        assert [fields[f"p{p}"] for p in (50, 90, 99)] == [
            _number(_library_quantile(q, point, metric in INTEGERS)) for q in (0.5, 0.9, 0.99)
        ], case
    test = {
        "evaluation_interval": "15s",
        "tests": [{"interval": "15s", "input_series": series, "promql_expr_test": cases}],
    }
    path = tmp_path / "console_quantiles.yml"
    path.write_text(yaml.safe_dump(test, width=100_000), encoding="utf-8")
    result = subprocess.run(
        [promtool, "test", "rules", path.name], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr
