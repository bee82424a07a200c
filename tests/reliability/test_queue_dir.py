"""The gateway's persistent log queue defaults to a folder private to the user running it (issue 20), not to a
shared one such as /tmp that another local user could create first."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

from otel_rl_ops.stack.config import find_free_ports

from tests.pipeline.harness import eventually
from tests.reliability.helpers import CONFIG_DIR


def test_gateway_queue_defaults_to_a_private_folder_under_home(stack_binaries: Any, tmp_path: Path) -> None:
    """A gateway started without OTEL_RL_QUEUE_DIR keeps its queue under $HOME/.local/state/otel-rl/queue, created
    0700 and owned by its user, and creates nothing under /tmp/otel-rl-queue (the old default)."""
    grpc, http, health, metrics = find_free_ports(4)
    home = tmp_path / "home"
    home.mkdir()
    environment = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_RL_")} | {
        "HOME": str(home),
        "OTEL_RL_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{grpc}",
        "OTEL_RL_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{http}",
        "OTEL_RL_HEALTH_ENDPOINT": f"127.0.0.1:{health}",
        "OTEL_RL_COLLECTOR_METRICS_HOST": "127.0.0.1",
        "OTEL_RL_COLLECTOR_METRICS_PORT": str(metrics),
    }
    old_default = Path("/tmp/otel-rl-queue") / f"127.0.0.1:{grpc}"
    log = open(tmp_path / "gateway.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [
            str(stack_binaries.collector),
            f"--config={CONFIG_DIR / 'collector.yaml'}",
            f"--config={CONFIG_DIR / 'gateway.yaml'}",
        ],
        env=environment,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        import requests

        def healthy() -> bool:
            try:
                return requests.get(f"http://127.0.0.1:{health}/", timeout=1).status_code == 200
            except requests.RequestException:
                return process.poll() is not None

        eventually(healthy, what="the gateway's health endpoint", timeout_s=30)
        assert process.poll() is None, (tmp_path / "gateway.log").read_text(errors="replace")
        queue = home / ".local" / "state" / "otel-rl" / "queue"
        folder = queue / f"127.0.0.1:{grpc}"
        assert any(folder.iterdir()), "no queue file in the private folder"
        for path in (queue, folder):
            info = path.stat()
            assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.getuid(), (path, oct(info.st_mode))
        assert not old_default.exists()
    finally:
        process.terminate()
        process.wait(30)
        log.close()
