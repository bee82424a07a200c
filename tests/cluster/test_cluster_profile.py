"""The VictoriaLogs cluster profile's configuration and command lines (no processes started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_rl.stack.components import COMPONENTS, SPECS, active_components
from otel_rl.stack.config import StackConfig, StackPorts
from otel_rl.stack.install import Binaries

BINARIES = Binaries(
    collector=Path("/bin/otelcol-rl"), victorialogs=Path("/bin/victoria-logs"), prometheus=Path("/bin/prometheus"),
    promtool=Path("/bin/promtool"),
)  # fmt: skip


def test_cluster_flag_must_be_a_bool() -> None:
    """victorialogs_cluster is validated at construction: a non-bool is a TypeError showing it."""
    with pytest.raises(TypeError, match=r"\"victorialogs_cluster\" must be a bool, got 'yes'"):
        StackConfig(victorialogs_cluster="yes")  # type: ignore[arg-type]


def test_single_node_profile_is_unchanged(tmp_path: Path) -> None:
    """Without the flag the stack runs the three components, and VictoriaLogs stores locally."""
    config = StackConfig(ports=StackPorts.free(), state_dir=tmp_path)
    assert active_components(config) == COMPONENTS
    argv = SPECS["victorialogs"].command(config, BINARIES, tmp_path).argv
    assert f"-storageDataPath={tmp_path / 'data' / 'victorialogs'}" in argv
    assert not any(arg.startswith("-storageNode") for arg in argv)


def test_cluster_profile_routes_the_front_to_two_storage_nodes(tmp_path: Path) -> None:
    """With the flag, two storage nodes with their own data folders start first, and the VictoriaLogs component
    becomes a front with -storageNode naming both and no data folder of its own."""
    ports = StackPorts.free()
    config = StackConfig(ports=ports, state_dir=tmp_path, victorialogs_cluster=True)
    assert active_components(config) == ("vlstorage-0", "vlstorage-1", *COMPONENTS)
    front = SPECS["victorialogs"].command(config, BINARIES, tmp_path).argv
    assert f"-storageNode=127.0.0.1:{ports.vlstorage_0},127.0.0.1:{ports.vlstorage_1}" in front
    assert not any(arg.startswith(("-storageDataPath", "-retentionPeriod")) for arg in front)
    for index, port in enumerate((ports.vlstorage_0, ports.vlstorage_1)):
        argv = SPECS[f"vlstorage-{index}"].command(config, BINARIES, tmp_path).argv  # type: ignore[index]
        assert f"-storageDataPath={tmp_path / 'data' / f'vlstorage-{index}'}" in argv
        assert f"-httpListenAddr=127.0.0.1:{port}" in argv and "-inmemoryDataFlushInterval=1s" in argv


def test_cli_status_with_cluster_lists_the_storage_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`otel-rl stack status --cluster` on a stack that is not running reports all five components, unhealthy."""
    from otel_rl.cli import main

    ports = [f"--{name.replace('_', '-')}-port={port}" for name, port in StackPorts.free().as_dict().items()]
    assert main(["stack", "status", "--cluster", "--state-dir", str(tmp_path), *ports]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:-1]] == ["vlstorage-0", "vlstorage-1", *COMPONENTS]
