"""Alertmanager in the secure profile (``otel-rl stack up --secure``): its own web config (TLS with the stack's
certificate, basic auth with its own password), Prometheus sending to it over TLS with that password, and
``otel-rl alerts --secure`` reading both; against the real Prometheus and Alertmanager."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from otel_rl_ops.alerts.client import Alertmanager
from otel_rl_ops.query import QueryError

from tests.pipeline.harness import eventually, private_stack

ALWAYS = """groups:
  - name: secure_delivery
    rules:
      - alert: SecureDeliveryProbe
        expr: vector(1)
        labels: {severity: warning, rl_run_id: secure-probe}
        annotations: {summary: "delivered over TLS with basic auth"}
"""
"""A rule that fires at the first evaluation: what Prometheus must manage to send."""


@pytest.fixture(scope="module")
def secure(stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    folder = tmp_path_factory.mktemp("alerts-secure")
    probe = folder / "probe.yml"
    probe.write_text(ALWAYS, encoding="utf-8")
    with private_stack(stack_binaries, folder / "stack", secure=True, rule_files=(probe,)) as stack:
        yield stack


def _session(stack: Any, *, service: str | None) -> requests.Session:
    """A client with the stack's CA and, unless ``service`` is None, that service's basic auth."""
    secrets = stack.config.secrets()
    session = requests.Session()
    session.verify, session.trust_env = str(secrets.ca), False
    if service is not None:
        session.auth = secrets.basic_auth(service)
    return session


def test_alertmanager_refuses_plain_http_unauthenticated_and_other_passwords(secure: Any) -> None:
    """The API answers only TLS (the stack's CA) with Alertmanager's own user and password: no credentials, the
    Prometheus password or plain HTTP get nothing; its command line names the web config file, never a secret."""
    url = secure.alertmanager_url
    assert url.startswith("https://")
    assert _session(secure, service=None).get(f"{url}/api/v2/status", timeout=5).status_code == 401
    assert _session(secure, service="prometheus").get(f"{url}/api/v2/status", timeout=5).status_code == 401
    plain = requests.get(url.replace("https://", "http://") + "/api/v2/status", timeout=5)
    assert plain.status_code == 400 and "HTTPS server" in plain.text  # Go's answer to plain HTTP on a TLS port
    assert _session(secure, service="alertmanager").get(f"{url}/api/v2/status", timeout=5).status_code == 200
    secrets = secure.config.secrets()
    argv = Path(f"/proc/{secure.pid('alertmanager')}/cmdline").read_bytes().decode().split("\0")
    assert f"--web.config.file={secrets.alertmanager_web_config}" in argv
    assert secrets.read(secrets.password("alertmanager")) not in " ".join(argv)


def test_prometheus_delivers_over_tls_with_basic_auth_and_the_cli_reads_both(secure: Any) -> None:
    """A rule that fires at once reaches Alertmanager (Prometheus authenticates over TLS: no notification errors),
    and ``otel-rl alerts --secure`` lists it from both, with the stack's CA and each service's password."""
    from otel_rl_ops.cli import main

    alertmanager = Alertmanager(secure.alertmanager_url, session=_session(secure, service="alertmanager"))

    def delivered() -> bool:
        return any(a["labels"].get("alertname") == "SecureDeliveryProbe" for a in alertmanager.alerts())

    eventually(delivered, what="the probe alert in Alertmanager", timeout_s=60)
    with pytest.raises(QueryError, match="HTTP 401"):
        Alertmanager(secure.alertmanager_url, session=_session(secure, service=None)).alerts()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["alerts", "--secure", "--state-dir", str(secure.state_dir), "--run", "secure-probe"])
    assert status == 0 and "SecureDeliveryProbe" in out.getvalue() and " firing " in out.getvalue(), out.getvalue()
    # Prometheus's own counters, read from its /metrics (its self-scrape may not have run yet): sent, no errors.
    exposition = _session(secure, service="prometheus").get(f"{secure.prometheus_url}/metrics", timeout=5).text
    counters = {
        name: sum(float(line.rsplit(" ", 1)[1]) for line in exposition.splitlines() if line.startswith(name))
        for name in ("prometheus_notifications_sent_total", "prometheus_notifications_errors_total")
    }
    assert (
        counters["prometheus_notifications_sent_total"] >= 1 and counters["prometheus_notifications_errors_total"] == 0
    ), counters
