"""Tests of the local stack: a private stack on free ports in a temporary folder, with the real binaries.

The first run installs what is missing (building the collector takes minutes); later runs reuse
``$OTEL_RL_HOME``. Telemetry goes through the real collector configuration of the repository.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import otel_rl_contract as contract
import pytest
import yaml
from otel_rl_ops.cli import main
from otel_rl_ops.package_data import data_root
from otel_rl_ops.stack import layout
from otel_rl_ops.stack.components import SPECS
from otel_rl_ops.stack.config import render_prometheus_config
from otel_rl_ops.stack.install import Binaries
from otel_rl_ops.stack.process import process_alive
from otel_rl_ops.stack.services import COMPONENTS, Stack, StackConfig, StackError, StackPorts, find_free_ports

GROUPS = contract.series(contract.GROUPS)

_WAIT_S = 90.0
_FAST_COLLECTOR = {"OTEL_RL_AGGREGATION_INTERVAL": "1s"}
"""Collector knobs for tests: flush the rank-merging pipeline every second instead of every 5 s."""


@pytest.fixture(scope="module")
def stack(stack_binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A private stack shared by the module's tests that leave it running."""
    config = StackConfig(
        ports=StackPorts.free(), state_dir=tmp_path_factory.mktemp("stack"), collector_environment=_FAST_COLLECTOR
    )
    with Stack(config, binaries=stack_binaries) as running:
        yield running


def _get_json(url: str, **params: str) -> Any:
    """GET ``url`` with query ``params`` and decode the JSON answer."""
    with urllib.request.urlopen(f"{url}?{urllib.parse.urlencode(params)}", timeout=5) as response:
        return json.loads(response.read())


def _eventually(check: Callable[[], Any], *, what: str, timeout_s: float = _WAIT_S) -> Any:
    """Call ``check`` until it returns something truthy; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.5)


def _listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


# Configuration -------------------------------------------------------------------------------------------------


def test_find_free_ports_are_distinct() -> None:
    """find_free_ports returns n distinct bindable ports."""
    ports = find_free_ports(6)
    assert len(set(ports)) == 6
    assert all(1 <= port <= 65535 for port in ports)


def test_find_free_ports_rejects_negative() -> None:
    """A negative count is a ValueError naming "n"."""
    with pytest.raises(ValueError, match='"n" must be >= 0, got -1'):
        find_free_ports(-1)


def test_ports_must_be_distinct() -> None:
    """Two components on one port is a ValueError naming both fields."""
    with pytest.raises(ValueError, match='"otlp_http" must differ from "otlp_grpc", both are 4317'):
        StackPorts(otlp_grpc=4317, otlp_http=4317)


def test_ports_must_be_in_range() -> None:
    """A port outside 1..65535 is a ValueError naming the field."""
    with pytest.raises(ValueError, match=r'"prometheus" must be in 1\.\.65535, got 70000'):
        StackPorts(prometheus=70000)


def test_ports_must_be_int() -> None:
    """A non-int port is a TypeError naming the field."""
    with pytest.raises(TypeError, match="\"victorialogs\" must be an int, got '9428'"):
        StackPorts(victorialogs=cast(Any, "9428"))


def test_config_rejects_bad_timeout() -> None:
    """A non-positive ready timeout is a ValueError naming the field."""
    with pytest.raises(ValueError, match='"ready_timeout_s" must be a number > 0, got 0'):
        StackConfig(ready_timeout_s=0)


def test_config_rejects_overriding_stack_variables() -> None:
    """collector_environment cannot override the variables the stack sets itself."""
    with pytest.raises(ValueError, match=r"must not set the stack's own variables, got \['OTEL_RL_REMOTE_WRITE_URL'\]"):
        StackConfig(collector_environment={"OTEL_RL_REMOTE_WRITE_URL": "http://elsewhere"})


def test_unknown_component_is_rejected(tmp_path: Path) -> None:
    """Component methods reject names outside COMPONENTS."""
    with pytest.raises(ValueError, match=r"\"name\" must be one of .*, got 'grafana'"):
        Stack(StackConfig(state_dir=tmp_path)).pid(cast(Any, "grafana"))


def test_health_urls_follow_the_component_specs(tmp_path: Path) -> None:
    """Each component's health URL is its spec's health port and path on the stack's host."""
    stack = Stack(StackConfig(ports=StackPorts.free(), state_dir=tmp_path))
    ports = stack.config.ports
    assert stack.health_url("victorialogs") == f"http://127.0.0.1:{ports.victorialogs}/health"
    assert stack.health_url("prometheus") == f"http://127.0.0.1:{ports.prometheus}/-/ready"
    assert stack.health_url("collector") == stack.collector_health_url == f"http://127.0.0.1:{ports.collector_health}/"


def test_component_specs_cover_every_port() -> None:
    """Every StackPorts field is listened on by exactly one component."""
    listened = [port for spec in SPECS.values() for port in spec.listen_ports]
    assert sorted(listened) == sorted(StackPorts().as_dict())


def test_component_spec_rejects_unknown_port() -> None:
    """A spec listening on a name that is no StackPorts field is a ValueError naming it."""
    with pytest.raises(ValueError, match=r"\"listen_ports\" must be StackPorts fields .*, got \['grafana'\]"):
        dataclasses.replace(SPECS["prometheus"], listen_ports=("grafana",))


def test_component_spec_rejects_health_port_it_does_not_listen_on() -> None:
    """A spec whose health port is not among its listen ports is a ValueError naming both."""
    message = r"\"health_port\" must be one of \"listen_ports\" \('prometheus',\), got 'otlp_grpc'"
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(SPECS["prometheus"], health_port="otlp_grpc")


def test_component_spec_rejects_relative_health_path() -> None:
    """A health path without a leading slash is a ValueError showing it."""
    with pytest.raises(ValueError, match='"health_path" must start with "/", got \'health\''):
        dataclasses.replace(SPECS["victorialogs"], health_path="health")


def test_rendered_prometheus_config_is_valid(tmp_path: Path, promtool: Path) -> None:
    """The rendered Prometheus config passes promtool and points its jobs at the stack's ports."""
    root = data_root()
    ports = StackPorts.free()
    rendered = tmp_path / "prometheus.yml"
    rendered.write_text(
        render_prometheus_config(layout.prometheus_config(root), StackConfig(ports=ports)),
        encoding="utf-8",
    )
    subprocess.run([str(promtool), "check", "config", str(rendered)], check=True, capture_output=True)
    data = yaml.safe_load(rendered.read_text(encoding="utf-8"))
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in data["scrape_configs"]}
    assert targets["prometheus"] == [f"127.0.0.1:{ports.prometheus}"]
    assert targets["otelcol"] == [f"127.0.0.1:{ports.collector_metrics}"]
    assert all(Path(entry).is_absolute() for entry in data["rule_files"])


def test_prometheus_template_must_be_a_mapping(tmp_path: Path) -> None:
    """A Prometheus template that is not a YAML mapping is a ValueError naming the file."""
    template = tmp_path / "prometheus.yml"
    template.write_text("42\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"Prometheus config template .* must be a YAML mapping, got 42"):
        render_prometheus_config(template, StackConfig())


def test_missing_collector_config_is_reported(tmp_path: Path, stack_binaries: Binaries) -> None:
    """Starting the collector without its config file is a StackError naming the file."""
    config = StackConfig(ports=StackPorts.free(), state_dir=tmp_path, collector_configs=(tmp_path / "none.yaml",))
    with pytest.raises(StackError, match=r"cannot start collector: config file .*none\.yaml' does not exist"):
        Stack(config, binaries=stack_binaries).start_component("collector")


def test_cli_reports_bad_option_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An invalid port on the command line exits 1 with the validation message."""
    assert main(["stack", "status", "--state-dir", str(tmp_path), "--prometheus-port", "70000"]) == 1
    assert '"prometheus" must be in 1..65535, got 70000' in capsys.readouterr().err


# A running stack ------------------------------------------------------------------------------------------------


def test_all_components_healthy(stack: Stack) -> None:
    """After up(), every component runs and answers its health endpoint."""
    statuses = stack.status()
    assert [statuses[name].state for name in COMPONENTS] == ["running"] * len(COMPONENTS)
    assert all(statuses[name].healthy for name in COMPONENTS)


def test_metric_through_collector_reaches_prometheus(stack: Stack) -> None:
    """A contract counter exported over OTLP/gRPC by a plain SDK arrives in Prometheus by remote write; a name
    outside the contract is dropped by the collector (filter/contract)."""
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    run_id = f"stack-probe-{uuid.uuid4().hex[:8]}"
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=stack.otlp_grpc_endpoint, insecure=True), export_interval_millis=1000
    )
    provider = MeterProvider(
        metric_readers=[reader], resource=Resource.create({"service.name": "otel-rl-stack-test", "rl.run.id": run_id})
    )
    meter = provider.get_meter("otel_rl.tests.stack")
    counter, outside = meter.create_counter("rl.groups"), meter.create_counter("stack.probe")

    def arrived() -> list[Any]:
        counter.add(1)
        outside.add(1)
        provider.force_flush()
        answer = _get_json(f"{stack.prometheus_url}/api/v1/query", query=f'{GROUPS.name}{{rl_run_id="{run_id}"}}')
        return list(answer["data"]["result"])

    try:
        result = _eventually(arrived, what=f"{GROUPS.name} of {run_id} in Prometheus")
    finally:
        provider.shutdown()
    assert float(result[0]["value"][1]) >= 1
    dropped = _get_json(
        f"{stack.prometheus_url}/api/v1/query", query=f'{{rl_run_id="{run_id}",__name__=~"stack_probe.*"}}'
    )
    assert dropped["data"]["result"] == []


def test_log_record_through_collector_reaches_victorialogs(stack: Stack) -> None:
    """A log record exported over OTLP/gRPC is searchable in VictoriaLogs."""
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    marker = f"stackprobe{uuid.uuid4().hex}"
    provider = LoggerProvider(resource=Resource.create({"service.name": "otel-rl-stack-test"}))
    provider.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=stack.otlp_grpc_endpoint, insecure=True))
    )
    logger = provider.get_logger("otel_rl.tests.stack")

    def found() -> str:
        logger.emit(body=f"sample {marker}", attributes={"probe": marker})
        provider.force_flush()
        url = f"{stack.victorialogs_url}/select/logsql/query?{urllib.parse.urlencode({'query': marker})}"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())

    try:
        lines = _eventually(found, what=f"log record {marker} in VictoriaLogs")
    finally:
        provider.shutdown()
    assert marker in json.loads(lines.splitlines()[0])["_msg"]


def test_pause_and_resume(stack: Stack) -> None:
    """A paused component reports paused and unhealthy; resumed, it is healthy again."""
    stack.pause_component("prometheus")
    try:
        assert stack.status()["prometheus"].state == "paused"
        assert not stack.is_healthy("prometheus")
    finally:
        stack.resume_component("prometheus")
    stack.wait_healthy("prometheus")
    assert stack.status()["prometheus"].state == "running"


def test_kill_then_start_component(stack: Stack) -> None:
    """A SIGKILLed component is reported stopped, and start_component brings it back healthy."""
    old_pid = stack.pid("victorialogs")
    stack.kill_component("victorialogs")
    assert stack.pid("victorialogs") is None
    assert old_pid is not None and not process_alive(old_pid)
    stack.start_component("victorialogs")
    assert stack.is_healthy("victorialogs")


def test_pause_of_stopped_component_fails(stack: Stack) -> None:
    """Pausing a component that is not running is a StackError naming it."""
    stack.stop_component("collector")
    try:
        with pytest.raises(StackError, match="cannot pause collector: it is not running"):
            stack.pause_component("collector")
        with pytest.raises(StackError, match="cannot resume collector: it is not running"):
            stack.resume_component("collector")
    finally:
        stack.start_component("collector")


def test_status_from_another_process_view(stack: Stack) -> None:
    """A Stack attached to the state directory sees the same pids, ports and health."""
    other = Stack.attach(stack.state_dir)
    assert other.prometheus_url == stack.prometheus_url
    assert {name: other.pid(name) for name in COMPONENTS} == {name: stack.pid(name) for name in COMPONENTS}
    assert main(["stack", "status", "--state-dir", str(stack.state_dir)]) == 0


def test_port_in_use_is_reported(stack: Stack, tmp_path: Path, stack_binaries: Binaries) -> None:
    """Starting on a port another stack holds is a StackError naming the port."""
    clash = StackConfig(
        ports=StackPorts(**{**StackPorts.free().as_dict(), "prometheus": stack.config.ports.prometheus}),
        state_dir=tmp_path,
    )
    with pytest.raises(StackError, match=f"port prometheus={stack.config.ports.prometheus} .* already in use"):
        Stack(clash, binaries=stack_binaries).start_component("prometheus")


def test_unhealthy_component_error_names_it_and_tails_log(
    tmp_path: Path, stack_binaries: Binaries, promtool: Path
) -> None:
    """A component that exits at once fails with its name, exit status and log tail."""
    broken = dataclasses.replace(stack_binaries, prometheus=promtool)  # promtool rejects Prometheus's flags and exits
    stack = Stack(StackConfig(ports=StackPorts.free(), state_dir=tmp_path, ready_timeout_s=20), binaries=broken)
    with pytest.raises(StackError, match=r"(?s)prometheus exited with status \d+ before becoming healthy.*lines of"):
        stack.start_component("prometheus")


def test_down_stops_everything(tmp_path: Path, stack_binaries: Binaries) -> None:
    """down() leaves no component process alive, no pid file and no listening port."""
    stack = Stack(StackConfig(ports=StackPorts.free(), state_dir=tmp_path), binaries=stack_binaries)
    stack.up()
    pids = [stack.pid(name) for name in COMPONENTS]
    assert all(pid is not None for pid in pids)
    stack.pause_component("collector")  # a paused process must still stop
    stack.down()
    assert not any(process_alive(pid) for pid in pids if pid is not None)
    assert not list((tmp_path / "run").glob("*.pid"))
    assert not any(_listening(port) for port in stack.config.ports.as_dict().values())
    assert {status.state for status in stack.status().values()} == {"stopped"}


def test_up_restarts_a_component_whose_configuration_changed(tmp_path: Path, stack_binaries: Binaries) -> None:
    """up() on a running stack keeps what is unchanged and restarts a component started with another config."""
    ports = StackPorts.free()
    first = Stack(StackConfig(ports=ports, state_dir=tmp_path), binaries=stack_binaries)
    first.up()
    try:
        pids = {name: first.pid(name) for name in COMPONENTS}
        Stack(StackConfig(ports=ports, state_dir=tmp_path), binaries=stack_binaries).up()
        assert {name: first.pid(name) for name in COMPONENTS} == pids
        changed = StackConfig(
            ports=ports, state_dir=tmp_path, collector_environment={"OTEL_RL_AGGREGATION_INTERVAL": "2s"}
        )
        Stack(changed, binaries=stack_binaries).up()
        assert first.pid("collector") not in (None, pids["collector"])
        assert first.pid("prometheus") == pids["prometheus"] and first.pid("victorialogs") == pids["victorialogs"]
    finally:
        first.down()


def test_cli_up_status_down(tmp_path: Path, stack_binaries: Binaries) -> None:
    """otel-rl stack up/status/down drive a stack on the given ports and state directory."""
    ports = StackPorts.free()
    flags = [f"--{name.replace('_', '-')}-port={port}" for name, port in ports.as_dict().items()]
    state = ["--state-dir", str(tmp_path)]
    assert main(["stack", "up", *state, *flags]) == 0
    try:
        assert main(["stack", "status", *state]) == 0
    finally:
        assert main(["stack", "down", *state]) == 0
    assert main(["stack", "status", *state]) == 1
