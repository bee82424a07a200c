"""verl 0.9.1 with otel-rl installed and no edit to verl: ``Tracking(default_backend=['console', 'otel_rl'])`` (what
``trainer.logger=['console','otel_rl']`` builds) works, its ``otel_rl`` backend registered by verl's own plugin
loader from otel-rl's ``verl.plugins`` entry point, and every key of verl's own step and validation metrics reaches
Prometheus through the real collector, in a plain process and in a Ray actor whose settings come from its
``runtime_env``.

verl lives in its own environment (``.venv-verl``, ``make verl-env``; ``make test`` builds it), so each job is
``tests/integrations/verl_job.py`` run by that environment's Python; it writes what verl computed and logged as JSON,
and the tests compare Prometheus's values with it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import otel_rl_contract as contract
from otel_rl_ops.query import Prometheus

from otel_rl import _env
from otel_rl.tracking import canonical_key
from tests.pipeline.harness import eventually

METRIC = contract.series(contract.METRICS.histogram)
RUN_FINISHED = contract.series(contract.RUN_FINISHED)
STEP = contract.series(contract.STEP)
TOKENS_TRAINED = contract.series(contract.TOKENS_TRAINED)
VALUES_REJECTED = contract.series(contract.VALUES_REJECTED)

REPO = Path(__file__).resolve().parents[2]
VERL_PYTHON = REPO / ".venv-verl" / "bin" / "python"
JOB = Path(__file__).with_name("verl_job.py")
STEPS = 3
EXPORT_INTERVAL_MS = "500"


def _job(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[dict[str, Any], str]:
    """Run verl_job.py under ``.venv-verl``'s Python with ``env`` as the only otel-rl, OpenTelemetry, verl and Ray
    settings: its JSON result and its stdout (the console backend's)."""
    assert VERL_PYTHON.exists(), f"{VERL_PYTHON} is missing: `make verl-env` builds it (`make test` does)"
    inherited = {
        name: value
        for name, value in os.environ.items()
        if name not in _env.VARIABLES and not name.startswith(("OTEL_", "VERL_", "RAY_"))
    }
    out = tmp_path / "job.json"
    completed = subprocess.run(
        [str(VERL_PYTHON), str(JOB), "--out", str(out), "--steps", str(STEPS), *args],
        env={**inherited, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-5000:]
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["loaded_by_verl"], "verl's plugin loader did not import otel_rl.verl_plugin"
    return result, completed.stdout


def _assert_every_key_in_prometheus(prometheus: Prometheus, run_id: str, logged: list[dict[str, float]]) -> None:
    """Every logged key is an ``rl.metric`` series under its canonical key with one value per dict that held it, and
    the sums of its positive and negative parts are exactly those of verl's values; the step, the tokens trained on
    and verl's timed sections are there too."""
    run = f'rl_run_id="{run_id}",rl_rank=""'
    values: dict[str, list[float]] = defaultdict(list)
    for data in logged:
        for key, value in data.items():
            values[canonical_key(key)].append(value)
    counts = {key: float(len(logged_values)) for key, logged_values in values.items()}
    eventually(
        lambda: (
            prometheus.by_label(f"histogram_count(sum by (rl_metric_key) ({METRIC.name}{{{run}}}))", "rl_metric_key")
            == counts
        ),
        what=f"the count of each of the {len(counts)} logged keys",
    )
    for part, sign in (("positive", 1.0), ("negative", -1.0)):
        found = prometheus.by_label(f"sum by (rl_metric_key) (rl_metric_{part}_total{{{run}}})", "rl_metric_key")
        expected = {
            key: sum(max(sign * value, 0.0) for value in logged_values) for key, logged_values in values.items()
        }
        assert {key: found.get(key, 0.0) for key in expected} == expected, part
        assert set(found) <= set(expected), part
    assert prometheus.value(f"max({STEP.name}{{{run}}})") == STEPS
    tokens = sum(data["perf/total_num_tokens"] for data in logged if "perf/total_num_tokens" in data)
    assert prometheus.value(f"sum({TOKENS_TRAINED.name}{{{run}}})") == tokens
    rejected = prometheus.value(f"sum({VALUES_REJECTED.name}{{{run}}})")
    assert rejected in (None, 0.0)


def test_verl_tracking_logs_every_key_through_the_plugin(shared_stack: Any, tmp_path: Path) -> None:
    """verl's Tracking with ['console', 'otel_rl'], the backend from verl's plugin loader, sends every key of verl's
    own metrics (3 steps and 2 validations, 300+ values) to Prometheus exactly, flushed when the Tracking is
    collected as at the end of ``fit``, the run marked finished at exit; the console backend still prints."""
    run_id = f"verl-{uuid.uuid4().hex[:8]}"
    env = {
        _env.OTEL_RL_RUN_ID: run_id,
        _env.OTEL_EXPORTER_OTLP_ENDPOINT: shared_stack.otlp_grpc_endpoint,
        _env.OTEL_METRIC_EXPORT_INTERVAL: EXPORT_INTERVAL_MS,
    }
    result, stdout = _job(tmp_path, env)
    assert result["run_id"] == run_id
    assert f"step:{STEPS} - " in stdout and "critic/score/mean:" in stdout
    prometheus = Prometheus(shared_stack.prometheus_url)
    _assert_every_key_in_prometheus(prometheus, run_id, result["logged"])
    assert prometheus.value(f'min({RUN_FINISHED.name}{{rl_run_id="{run_id}"}})') == 1


def test_verl_tracking_in_a_ray_actor_takes_its_settings_from_runtime_env(shared_stack: Any, tmp_path: Path) -> None:
    """Tracking built inside a Ray actor, as verl's TaskRunner builds it, on a local CPU-only Ray whose driver has no
    otel-rl settings: the endpoint comes from the job's runtime_env, the run id from Ray's runtime context
    (``ray-<session>-<job id>``, what the driver computes from its own context), and every key reaches Prometheus."""
    runtime_env_vars = {
        _env.OTEL_EXPORTER_OTLP_ENDPOINT: shared_stack.otlp_grpc_endpoint,
        _env.OTEL_METRIC_EXPORT_INTERVAL: EXPORT_INTERVAL_MS,
    }
    result, _stdout = _job(tmp_path, {}, "--ray", "--runtime-env-vars", json.dumps(runtime_env_vars))
    run_id = result["run_id"]
    assert run_id == result["expected_run_id"]
    assert re.fullmatch(r"ray-\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d+_\d+-[0-9a-f]+", run_id), run_id
    _assert_every_key_in_prometheus(Prometheus(shared_stack.prometheus_url), run_id, result["logged"])
