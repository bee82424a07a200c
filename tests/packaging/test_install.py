"""otel-rl installed the way users install it: the three distributions built as sdists and wheels (``uv build``, each
wheel from its sdist), their metadata checked as PyPI checks it, installed into fresh environments outside the
checkout, and run from a folder outside it too: the stack up from the tooling's install (reusing the cached binaries),
a rank from the trainer's, then ``otel-rl status``, ``report`` and ``alerts`` from the tooling's, each checked against
the rank's exact inputs.

Both environments get their packages from the checkout's uv cache (``UV_CACHE_DIR``, the Makefile's), pinned to the
versions of the test's own environment, so nothing is downloaded twice and PyTorch's files are hard links.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, fields
from email.parser import Parser
from pathlib import Path
from typing import Any

import otel_rl_contract as contract
import pytest
from otel_rl_ops.query import Prometheus
from otel_rl_ops.stack.config import StackPorts
from otel_rl_ops.stack.env import otel_rl_home
from packaging.requirements import Requirement

from tests.packaging.installs import ROOT, VERSION, Installs
from tests.pipeline.harness import eventually

pytestmark = pytest.mark.stack

REWARDS = [[0.5, 1.0, -0.25, 2.0], [0.0, 1.5, 0.75, -1.0], [1.0, 1.0, 0.25, 0.5]]
"""The rank's total rewards, one row per step: exact in binary, so every statistic is exact."""
NONFINITE = 3
"""NaN rewards the rank records at its last step: RLNonFiniteRewards fires on them at once (no ``for:``)."""


def _metadata(wheel: Path) -> dict[str, list[str]]:
    """The wheel's core metadata fields (each a list: Requires-Dist repeats) and its description as ``Body``."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(item for item in archive.namelist() if item.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(archive.read(name).decode("utf-8"))
    fields_: dict[str, list[str]] = {key: message.get_all(key) or [] for key in set(message.keys())}
    fields_["Body"] = [str(message.get_payload())]
    return fields_


def test_the_distributions_metadata_is_what_pypi_takes(installed: Installs) -> None:
    """Three wheels and three sdists of one version; twine's check (the README renders as the long description);
    each wheel's requirements keep the halves apart, and the tooling's wheel carries its data and their manifest."""
    built = sorted(path.name for path in installed.dist.iterdir() if path.suffix in (".whl", ".gz"))
    assert len(built) == 6 and all(f"-{VERSION}" in name for name in built), built
    twine = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, installed.dist.glob("otel_rl*"))],
        capture_output=True,
        text=True,
    )
    assert twine.returncode == 0, twine.stdout + twine.stderr
    trainer, tooling = (_metadata(next(installed.dist.glob(f"{n}-*.whl"))) for n in ("otel_rl", "otel_rl_ops"))
    assert trainer["Description-Content-Type"] == ["text/markdown"]
    assert trainer["Body"][0].strip() == (ROOT / "README.md").read_text(encoding="utf-8").strip()
    trainer_needs = {Requirement(line).name for line in trainer["Requires-Dist"] if "extra ==" not in line}
    tooling_needs = {Requirement(line).name for line in tooling["Requires-Dist"] if "extra ==" not in line}
    assert {"torch", "numba", "opentelemetry-sdk", "otel-rl-contract"} <= trainer_needs
    assert not trainer_needs & {"otel-rl-ops", "pyyaml", "matplotlib", "bcrypt", "pyarrow"}
    assert "otel-rl-contract" in tooling_needs and not tooling_needs & {
        "torch",
        "numba",
        "opentelemetry-sdk",
        "otel-rl",
    }
    with zipfile.ZipFile(next(installed.dist.glob("otel_rl_ops-*.whl"))) as archive:
        manifest = json.loads(archive.read("otel_rl_ops/data-manifest.json"))
        names = set(archive.namelist())
    assert manifest["version"] == VERSION
    assert {f"otel_rl_ops/data/{name}" for name in manifest["files"]} <= names
    for shipped in (
        "collector_config/builder.yaml",
        "collector_config/processors/go.mod",
        "prometheus/rules/otel_rl.yml",
    ):
        assert shipped in manifest["files"], shipped


def _run(command: list[str], installed: Installs, **environment: str) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in the empty work folder, with only what a user's shell would have (no PYTHONPATH)."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        command, cwd=installed.work, env={**env, **environment}, capture_output=True, text=True, timeout=600
    )


# Which of the modules named on the command line an environment could import (a missing parent package counts as
# absent: the tooling's ``opentelemetry`` namespace holds only ``opentelemetry.proto``, which the replay reads).
_PROBE = """
import importlib.util, sys
def found(name):
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False
print([name for name in sys.argv[1:] if found(name)])
"""


def test_each_install_holds_only_its_half(installed: Installs) -> None:
    """The tooling's environment cannot import torch, numba or the OpenTelemetry SDK, nor the trainer library; the
    trainer's has none of the tooling's packages and ``otel_rl.setup()`` works there."""
    tooling = _run([str(installed.tooling / "python"), "-c", "import torch"], installed)
    assert tooling.returncode != 0 and "No module named 'torch'" in tooling.stderr
    tooling_has = _run(
        [
            str(installed.tooling / "python"),
            "-c",
            _PROBE,
            "numba",
            "opentelemetry.sdk",
            "opentelemetry.exporter",
            "otel_rl",
        ],
        installed,
    )
    assert tooling_has.stdout.strip() == "[]", tooling_has.stdout + tooling_has.stderr
    trainer_has = _run(
        [str(installed.trainer / "python"), "-c", _PROBE, "otel_rl_ops", "yaml", "matplotlib"], installed
    )
    assert trainer_has.stdout.strip() == "[]", trainer_has.stdout + trainer_has.stderr
    setup = (
        "import otel_rl; t = otel_rl.setup(otel_rl.TelemetryConfig(exporter='none', run_id='installed'));"
        "t.record_rewards([1.0]); print(t.config.resolved.run_id); otel_rl.reset()"
    )
    ran = _run([str(installed.trainer / "python"), "-c", setup], installed)
    assert ran.returncode == 0 and ran.stdout.strip() == "installed", ran.stderr
    assert not (installed.trainer / "otel-rl").exists() and (installed.tooling / "otel-rl").is_file()


@dataclass(frozen=True)
class RunningStack:
    """The stack the tooling's install started, and the flags that name it."""

    state: Path
    ports: StackPorts

    @property
    def flags(self) -> list[str]:
        return [
            "--state-dir",
            str(self.state),
            *(f"--{item.name.replace('_', '-')}-port={getattr(self.ports, item.name)}" for item in fields(StackPorts)),
        ]


@pytest.fixture(scope="module")
def stack(installed: Installs, stack_binaries: object) -> Iterator[RunningStack]:
    """``otel-rl stack up`` from the tooling's install, in the work folder, on free ports; the binaries come from the
    shared cache ($OTEL_RL_HOME), which a checkout's install filled: nothing is rebuilt."""
    running = RunningStack(installed.work / "stack", StackPorts.free())
    otel = str(installed.tooling / "otel-rl")
    home = str(otel_rl_home())
    up = _run([otel, "stack", "up", *running.flags], installed, OTEL_RL_HOME=home)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "building the collector" not in up.stderr and "installing" not in up.stderr, up.stderr
        yield running
    finally:
        _run([otel, "stack", "down", "--state-dir", str(running.state)], installed, OTEL_RL_HOME=home)


_RANK = """
import math, sys
import otel_rl

telemetry = otel_rl.setup(otel_rl.TelemetryConfig(run_id=sys.argv[1], endpoint=sys.argv[2], export_interval_s=0.5))
rewards = {rewards!r}
for step, row in enumerate(rewards):
    telemetry.step(step)
    telemetry.record_rewards(row)
    telemetry.record_staleness([0, 1, 1, 2], current_version=step + 2)
    for index, reward in enumerate(row):
        telemetry.record_sample(otel_rl.EpisodeSample(reward=reward, prompt=f"p{{step}}-{{index}}", response="r"))
telemetry.record_rewards([math.nan] * {nonfinite})
sys.exit(0 if telemetry.shutdown() else 1)
"""


def test_a_rank_of_the_trainer_install_reaches_the_tooling_install(installed: Installs, stack: RunningStack) -> None:
    """A rank from the trainer's install sends to the stack the tooling's install started; ``otel-rl status --json``,
    ``otel-rl report`` and ``otel-rl alerts`` from the tooling's install show the run as the rank recorded it."""
    run_id = f"installed-{uuid.uuid4().hex[:8]}"
    script = _RANK.format(rewards=REWARDS, nonfinite=NONFINITE)
    endpoint = f"http://127.0.0.1:{stack.ports.otlp_grpc}"
    rank = _run([str(installed.trainer / "python"), "-c", script, run_id, endpoint], installed)
    assert rank.returncode == 0, rank.stderr
    otel, state = str(installed.tooling / "otel-rl"), ["--state-dir", str(stack.state)]
    prometheus = Prometheus(f"http://127.0.0.1:{stack.ports.prometheus}")
    values = [value for row in REWARDS for value in row]
    count = contract.series(contract.REWARDS.histogram).name
    eventually(
        lambda: prometheus.value(f'histogram_count({count}{{rl_run_id="{run_id}"}})') == len(values),
        timeout_s=120,
        what="the rank's rewards in Prometheus",
    )

    def status_with_samples() -> dict[str, Any] | None:
        found = _run([otel, "status", "--run-id", run_id, "--json", *state], installed)
        assert found.returncode == 0, found.stderr
        status: dict[str, Any] = json.loads(found.stdout)
        return status if status["samples"]["top"] else None  # the samples reach VictoriaLogs on their own path

    status = eventually(status_with_samples, timeout_s=120, what="otel-rl status with the run's samples")
    assert status["step"]["value"] == len(REWARDS) - 1
    assert (status["ranks"]["expected"], status["ranks"]["finished"]) == (1, 1)
    top = max(values)
    assert [float(sample["reward"]) for sample in status["samples"]["top"]][:1] == [top]
    eventually(
        lambda: f"{NONFINITE} non-finite rewards" in _run([otel, "alerts", "--run", run_id, *state], installed).stdout,
        timeout_s=120,
        what="RLNonFiniteRewards listed by otel-rl alerts",
    )
    report = installed.work / "report.html"
    rendered = _run([otel, "report", "--run-id", run_id, "--out", str(report), *state], installed)
    assert rendered.returncode == 0, rendered.stderr
    html = report.read_text(encoding="utf-8")
    whole_run = f"mean {sum(values) / len(values):.3f}, p50 "
    assert f"RL run {run_id}</title>" in html and whole_run in html and f"({len(values)} rollouts)" in html
    assert f"reward {min(values):g} at step 1: p1-3" in html and f"Samples ({len(values)})" in html
    assert "data:image/png;base64," in html  # the panels, drawn


@pytest.mark.parametrize("profile", ["--secure", "--cluster"])
def test_the_other_profiles_start_from_the_installed_tooling(
    installed: Installs, stack_binaries: object, profile: str, tmp_path: Path
) -> None:
    """``otel-rl stack up --secure`` (TLS and authentication everywhere) and ``--cluster`` (Thanos, a VictoriaLogs
    cluster) start healthy from the installed tooling's data and cached binaries, and stop."""
    otel, home = str(installed.tooling / "otel-rl"), str(otel_rl_home())
    running = RunningStack(tmp_path / "stack", StackPorts.free())
    up = _run([otel, "stack", "up", profile, *running.flags], installed, OTEL_RL_HOME=home)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "building" not in up.stderr, up.stderr
        status = _run([otel, "stack", "status", profile, *running.flags], installed, OTEL_RL_HOME=home)
        assert status.returncode == 0 and "unhealthy" not in status.stdout, status.stdout + status.stderr
    finally:
        down = _run([otel, "stack", "down", profile, *running.flags], installed, OTEL_RL_HOME=home)
    assert down.returncode == 0, down.stderr


def test_missing_package_data_stops_the_stack_before_it_starts(installed: Installs, tmp_path: Path) -> None:
    """A tooling install whose data lost a file refuses ``otel-rl stack up`` with one error naming the file, and
    starts nothing; restoring the file makes ``otel-rl stack data`` pass again."""
    otel = str(installed.tooling / "otel-rl")
    found = _run([otel, "stack", "data"], installed)
    assert found.returncode == 0, found.stderr
    rules = Path(found.stdout.strip()) / "prometheus" / "rules" / "otel_rl_windows.yml"
    saved = tmp_path / rules.name
    shutil.move(rules, saved)
    try:
        up = _run([otel, "stack", "up", "--state-dir", str(tmp_path / "state")], installed)
        assert up.returncode == 1 and "prometheus/rules/otel_rl_windows.yml" in up.stderr, up.stderr
        assert not (tmp_path / "state").exists()
    finally:
        shutil.move(saved, rules)
    assert _run([otel, "stack", "data"], installed).returncode == 0
