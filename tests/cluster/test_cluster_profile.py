"""The cluster profiles' configuration and command lines (no processes started): VictoriaLogs storage nodes, and
Thanos receivers, querier and ruler instead of Prometheus."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from otel_rl_ops.stack.components import (
    COMPONENTS,
    SPECS,
    ComponentName,
    active_components,
    collector_environment,
)
from otel_rl_ops.stack.config import StackConfig, StackPorts
from otel_rl_ops.stack.install import Binaries
from otel_rl_ops.stack.services import Stack

BINARIES = Binaries(
    collector=Path("/bin/otelcol-rl"),
    victorialogs=Path("/bin/victoria-logs"),
    prometheus=Path("/bin/prometheus"),
    promtool=Path("/bin/promtool"),
    alertmanager=Path("/bin/alertmanager"),
    amtool=Path("/bin/amtool"),
    jaeger=Path("/bin/jaeger"),
)


THANOS = dataclasses.replace(BINARIES, thanos=Path("/bin/thanos"))


@pytest.mark.parametrize("flag", ["victorialogs_cluster", "tsdb_cluster"])
def test_cluster_flags_must_be_bools(flag: str) -> None:
    """The profile flags are validated at construction: a non-bool is a TypeError showing it."""
    with pytest.raises(TypeError, match=rf"\"{flag}\" must be a bool, got 'yes'"):
        StackConfig(**{flag: cast(Any, "yes")})


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
    assert active_components(config) == ("alertmanager", "vlstorage-0", "vlstorage-1", *COMPONENTS[1:])
    front = SPECS["victorialogs"].command(config, BINARIES, tmp_path).argv
    assert f"-storageNode=127.0.0.1:{ports.vlstorage_0},127.0.0.1:{ports.vlstorage_1}" in front
    assert not any(arg.startswith(("-storageDataPath", "-retentionPeriod")) for arg in front)
    for index, port in enumerate((ports.vlstorage_0, ports.vlstorage_1)):
        argv = SPECS[cast(ComponentName, f"vlstorage-{index}")].command(config, BINARIES, tmp_path).argv
        assert f"-storageDataPath={tmp_path / 'data' / f'vlstorage-{index}'}" in argv
        assert f"-httpListenAddr=127.0.0.1:{port}" in argv and "-inmemoryDataFlushInterval=1s" in argv


TSDB_COMPONENTS = ("thanos-receive-0", "thanos-receive-1", "thanos-store", "thanos-query", "thanos-rule")


def test_tsdb_cluster_profile_replaces_prometheus_by_thanos(tmp_path: Path) -> None:
    """With tsdb_cluster, two receivers (own TSDB folder and ports, one hashring of both gRPC endpoints, replication
    factor 1), a store gateway over the stack's bucket (a folder), a querier over the receivers and the store gateway
    (strict endpoints, no partial responses) and the ruler run instead of Prometheus; the collector remote-writes to
    the first receiver's /api/v1/receive and the stack's query URL is the querier."""
    ports = StackPorts.free()
    config = StackConfig(ports=ports, state_dir=tmp_path, tsdb_cluster=True)
    assert active_components(config) == ("alertmanager", "victorialogs", "jaeger", *TSDB_COMPONENTS, "collector")
    grpc = [f"127.0.0.1:{ports.thanos_receive_0_grpc}", f"127.0.0.1:{ports.thanos_receive_1_grpc}"]
    for index, (write, http) in enumerate(
        [
            (ports.thanos_receive_0_write, ports.thanos_receive_0_http),
            (ports.thanos_receive_1_write, ports.thanos_receive_1_http),
        ]
    ):
        command = SPECS[cast(ComponentName, f"thanos-receive-{index}")].command(config, THANOS, tmp_path)
        assert command.argv[:2] == ("/bin/thanos", "receive")
        assert f"--tsdb.path={tmp_path / 'data' / f'thanos-receive-{index}'}" in command.argv
        assert f"--remote-write.address=127.0.0.1:{write}" in command.argv
        assert f"--http-address=127.0.0.1:{http}" in command.argv
        assert f"--receive.local-endpoint={grpc[index]}" in command.argv
        assert "--receive.replication-factor=1" in command.argv
        capnp = [f"127.0.0.1:{ports.thanos_receive_0_capnp}", f"127.0.0.1:{ports.thanos_receive_1_capnp}"]
        endpoints = [{"address": g, "capnproto_address": c} for g, c in zip(grpc, capnp, strict=True)]
        assert json.loads(command.inputs[0].read_text()) == [{"hashring": "default", "endpoints": endpoints}]
    query = SPECS["thanos-query"].command(config, THANOS, tmp_path)
    assert (
        f"--http-address=127.0.0.1:{ports.thanos_query}" in query.argv and "--no-query.partial-response" in query.argv
    )
    endpoints = yaml.safe_load(query.inputs[0].read_text())["endpoints"]
    ruler = {"address": f"127.0.0.1:{ports.thanos_rule_grpc}"}  # not strict: it starts after the querier
    store = {"address": f"127.0.0.1:{ports.thanos_store_grpc}", "strict": True}
    assert endpoints == [*({"address": address, "strict": True} for address in grpc), store, ruler]
    gateway = SPECS["thanos-store"].command(config, THANOS, tmp_path)
    assert (
        gateway.argv[:2] == ("/bin/thanos", "store") and f"--objstore.config-file={gateway.inputs[0]}" in gateway.argv
    )
    assert yaml.safe_load(gateway.inputs[0].read_text()) == {
        "type": "FILESYSTEM",
        "config": {"directory": str(tmp_path / "data" / "thanos-bucket")},
    }
    assert collector_environment(config)["OTEL_RL_REMOTE_WRITE_URL"] == (
        f"http://127.0.0.1:{ports.thanos_receive_0_write}/api/v1/receive"
    )
    assert Stack(config, binaries=THANOS).prometheus_url == f"http://127.0.0.1:{ports.thanos_query}"


def test_tsdb_cluster_needs_the_thanos_binary(tmp_path: Path) -> None:
    """Binaries without Thanos (the default install) cannot start a receiver: a ValueError naming the field."""
    config = StackConfig(ports=StackPorts.free(), state_dir=tmp_path, tsdb_cluster=True)
    with pytest.raises(ValueError, match=r'"binaries.thanos" must be set to run thanos-receive-0 .*got None'):
        SPECS["thanos-receive-0"].command(config, BINARIES, tmp_path)
    with pytest.raises(ValueError, match=r'"binaries.thanos" must be set to run thanos-query .*got None'):
        SPECS["thanos-query"].command(config, BINARIES, tmp_path)


def test_cli_status_with_cluster_lists_both_profiles(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`otel-rl stack status --cluster` on a stack that is not running reports the storage nodes, the Thanos
    components and no Prometheus, all unhealthy."""
    from otel_rl_ops.cli import main

    ports = [f"--{name.replace('_', '-')}-port={port}" for name, port in StackPorts.free().as_dict().items()]
    assert main(["stack", "status", "--cluster", "--state-dir", str(tmp_path), *ports]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:-1]] == [
        "alertmanager",
        "vlstorage-0",
        "vlstorage-1",
        "victorialogs",
        "jaeger",
        *TSDB_COMPONENTS,
        "collector",
    ]


def test_thanos_binary_stamped_with_its_version_and_tags_is_reused(tmp_path: Path) -> None:
    """A Thanos binary whose stamp names the pinned version and build tags is returned without building."""
    from otel_rl_ops.stack import versions
    from otel_rl_ops.stack.gotools import ensure_go_binary

    (tmp_path / "bin").mkdir()
    binary = tmp_path / "bin" / "thanos"
    binary.write_bytes(b"")
    (tmp_path / "bin" / "thanos.version").write_text(f"{versions.THANOS.version} -tags=netgo,slicelabels\n")
    assert ensure_go_binary(versions.THANOS, home=tmp_path) == binary
