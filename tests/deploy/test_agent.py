"""``otel-rl agent``'s pieces without a scheduler: the agent's command and environment, the rank's environment, and
every configuration error (the SLURM job itself: test_slurm.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from otel_rl_ops.cli import main
from otel_rl_ops.stack.agent import AgentPorts, agent_command, gateways_flow_list, rank_environment, wait_healthy
from otel_rl_ops.stack.config import find_free_ports
from otel_rl_ops.stack.services import StackError

ROOT = Path(__file__).resolve().parents[2]
PORTS = AgentPorts(grpc=14317, http=14318, health=14133, metrics=18888)


def test_static_gateways_use_agent_yaml_on_the_loopback() -> None:
    """A gateway list becomes OTEL_RL_GATEWAYS (a YAML flow list); the agent listens on 127.0.0.1 only."""
    argv, env = agent_command(
        Path("/bin/otelcol-rl"), ports=PORTS, gateways="gw-0:4317,gw-1:4317", root=ROOT, environ={}
    )
    assert argv == ["/bin/otelcol-rl", f"--config={ROOT / 'collector_config' / 'agent.yaml'}"]
    assert env["OTEL_RL_GATEWAYS"] == "[gw-0:4317, gw-1:4317]"
    assert env["OTEL_RL_OTLP_GRPC_ENDPOINT"] == "127.0.0.1:14317"
    assert env["OTEL_RL_OTLP_HTTP_ENDPOINT"] == "127.0.0.1:14318"
    assert env["OTEL_RL_HEALTH_ENDPOINT"] == "127.0.0.1:14133"
    assert (env["OTEL_RL_COLLECTOR_METRICS_HOST"], env["OTEL_RL_COLLECTOR_METRICS_PORT"]) == ("127.0.0.1", "18888")


def test_a_dns_name_adds_agent_dns_yaml() -> None:
    """One DNS name (from the option or the environment) selects the failover resolver of agent-dns.yaml."""
    argv, env = agent_command(Path("c"), ports=PORTS, gateways_dns="gateways.cluster:24317", root=ROOT, environ={})
    assert argv[1:] == [f"--config={ROOT / 'collector_config' / name}" for name in ("agent.yaml", "agent-dns.yaml")]
    assert (env["OTEL_RL_GATEWAYS_HOSTNAME"], env["OTEL_RL_GATEWAYS_PORT"]) == ("gateways.cluster", "24317")
    argv, _ = agent_command(Path("c"), ports=PORTS, root=ROOT, environ={"OTEL_RL_GATEWAYS_HOSTNAME": "gateways"})
    assert argv[-1].endswith("agent-dns.yaml")


def test_gateways_must_be_named_once() -> None:
    """No gateway at all, both kinds at once, or an empty list: each is refused, naming the setting."""
    with pytest.raises(ValueError, match=r'"--gateways" \(or OTEL_RL_GATEWAYS\) or "--gateways-dns"'):
        agent_command(Path("c"), ports=PORTS, root=ROOT, environ={})
    with pytest.raises(ValueError, match=r'give "--gateways" or "--gateways-dns", not both'):
        agent_command(Path("c"), ports=PORTS, gateways="a:1", gateways_dns="b", root=ROOT, environ={})
    with pytest.raises(ValueError, match=r""""--gateways" must name at least one host:port, got '\[ \]'"""):
        gateways_flow_list("[ ]")


def test_ports_are_checked() -> None:
    """A port out of range or two equal ports are configuration errors."""
    with pytest.raises(ValueError, match=r'"grpc" port must be in 1..65535, got 0'):
        AgentPorts(grpc=0)
    with pytest.raises(ValueError, match=r"agent ports must differ"):
        AgentPorts(grpc=4318)


def test_a_rank_exports_to_its_node_agent_with_the_job_id() -> None:
    """The rank's run id is SLURM_JOB_ID unless OTEL_RL_RUN_ID is set; its endpoint is the node's agent."""
    env = rank_environment(ports=PORTS, environ={"SLURM_JOB_ID": "4242", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1"})
    assert env["OTEL_RL_RUN_ID"] == "4242"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://127.0.0.1:14317"
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc"
    assert (
        rank_environment(ports=PORTS, environ={"SLURM_JOB_ID": "4242", "OTEL_RL_RUN_ID": "grpo-7b"})["OTEL_RL_RUN_ID"]
        == "grpo-7b"
    )
    with pytest.raises(ValueError, match=r"OTEL_RL_RUN_ID or SLURM_JOB_ID must be set"):
        rank_environment(ports=PORTS, environ={})


def test_exec_gives_up_when_no_agent_answers() -> None:
    """Without a healthy agent on the node, a rank fails after the timeout instead of exporting nowhere."""
    (health,) = find_free_ports(1)
    with pytest.raises(StackError, match=rf"agent at http://127.0.0.1:{health}/ was not healthy within 0.5 s"):
        wait_healthy(AgentPorts(health=health), timeout_s=0.5)


def test_cli_reports_errors_in_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``otel-rl agent exec`` outside a job and ``exec`` without a command end with an error line, status 1."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("OTEL_RL_RUN_ID", raising=False)
    assert main(["agent", "exec", "--", "true"]) == 1
    assert "OTEL_RL_RUN_ID or SLURM_JOB_ID must be set" in capsys.readouterr().err
    assert main(["agent", "exec"]) == 1
    assert '"otel-rl agent exec" needs a command after "--"' in capsys.readouterr().err
