"""Who may send data: OTLP over TLS with a bearer token against the real collector (collector_config/secure.yaml),
secrets kept out of logs, and size limits at the collector and the log store (issue 7, 3).

A throwaway CA and server certificate (SAN 127.0.0.1, localhost) are made with the ``openssl`` command line.
"""

from __future__ import annotations

import secrets
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from otel_rl.query import Prometheus, VictoriaLogs
from tests.pipeline.harness import RankProcess, eventually
from tests.reliability.helpers import CONFIG_DIR, flush_ok, private_stack


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca_and_server_cert(folder: Path, name: str = "ca") -> tuple[Path, Path, Path]:
    """A CA certificate and a server certificate/key it signed, for 127.0.0.1 and localhost (valid 1 day)."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN=otel-rl test {name}",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=folder)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "server.key",
             "-out", "server.csr", cwd=folder)  # fmt: skip
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n", encoding="utf-8")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", f"{name}.pem", "-CAkey", f"{name}.key", "-CAcreateserial",
             "-days", "1", "-extfile", "san.ext", "-out", "server.pem", cwd=folder)  # fmt: skip
    return folder / f"{name}.pem", folder / "server.pem", folder / "server.key"


class Secure:
    def __init__(self, stack: Any, token: str, ca: Path, other_ca: Path, folder: Path) -> None:
        self.stack, self.token, self.ca, self.other_ca, self.folder = stack, token, ca, other_ca, folder
        host, ports = stack.config.host, stack.config.ports
        self.grpc = f"https://{host}:{ports.otlp_grpc}"
        self.http = f"https://{host}:{ports.otlp_http}"


@pytest.fixture(scope="module")
def secure(stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    folder = tmp_path_factory.mktemp("tls")
    ca, cert, key = make_ca_and_server_cert(folder / "pki")
    other_ca, _, _ = make_ca_and_server_cert(folder / "other", "other")
    token = secrets.token_hex(16)
    token_file = folder / "token"
    token_file.write_text(token + "\n", encoding="utf-8")
    token_file.chmod(0o600)
    environment = {
        "OTEL_RL_TLS_CERT_FILE": str(cert),
        "OTEL_RL_TLS_KEY_FILE": str(key),
        "OTEL_RL_BEARER_TOKEN_FILE": str(token_file),
    }
    with private_stack(
        stack_binaries,
        folder / "stack",
        collector_configs=(CONFIG_DIR / "collector.yaml", CONFIG_DIR / "secure.yaml"),
        collector_environment=environment,
    ) as stack:
        yield Secure(stack, token, ca, other_ca, folder)


def _rank(secure: Secure, name: str, **settings: Any) -> RankProcess:
    stderr = open(secure.folder / f"{name}.stderr", "w", encoding="utf-8")  # noqa: SIM115 - closed with the process
    settings.setdefault("endpoint", secure.grpc)
    return RankProcess(
        run_id=f"{name}-{uuid.uuid4().hex[:8]}", rank=0, world_size=1, stderr=stderr, export_interval_s=0.3,
        export_timeout_s=1.0, **settings,
    )  # fmt: skip


def test_tls_and_bearer_token_accept_the_authenticated_and_reject_the_rest(secure: Secure) -> None:
    """Over TLS, only ranks with the token get data in (exact counts, gRPC and HTTP/protobuf, settings or OTEL_*
    variables); no token, a wrong token, plaintext or an untrusted CA: nothing in Prometheus, failures counted."""
    bearer = {"authorization": f"Bearer {secure.token}"}
    env_settings = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": secure.grpc,
        "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{secure.token}",
        "OTEL_EXPORTER_OTLP_CERTIFICATE": str(secure.ca),
    }
    import os

    accepted = {
        "grpc": _rank(secure, "grpc", certificate_file=str(secure.ca), headers=bearer),
        "grpc_capitalized": _rank(
            secure, "grpccap", certificate_file=str(secure.ca), headers={"Authorization": f"Bearer {secure.token}"}
        ),
        "http": _rank(
            secure, "http", endpoint=secure.http, protocol="http/protobuf", certificate_file=str(secure.ca),
            headers=bearer,
        ),
        "env": _rank(secure, "env", endpoint=None, env={**os.environ, **env_settings}),
    }  # fmt: skip
    rejected = {
        "no_token": _rank(secure, "notoken", certificate_file=str(secure.ca)),
        "wrong_token": _rank(
            secure, "wrongtoken", certificate_file=str(secure.ca), headers={"authorization": "Bearer not-the-token"}
        ),
        "http_no_token": _rank(secure, "httpnotoken", endpoint=secure.http, protocol="http/protobuf",
                               certificate_file=str(secure.ca)),  # fmt: skip
        "plaintext": _rank(
            secure, "plain", endpoint=secure.grpc.replace("https://", "http://"), headers=bearer
        ),
        "untrusted_ca": _rank(secure, "otherca", certificate_file=str(secure.other_ca), headers=bearer),
    }
    prometheus = Prometheus(secure.stack.prometheus_url)
    everyone = {**accepted, **rejected}
    try:
        for rank in everyone.values():
            rank.rewards([0.5, -0.25, 1.0])
            rank.sample(reward=1.0, episode_id="e", response="hello")
            rank.step(1)
        for name, rank in accepted.items():
            flush_ok(rank)
            run = rank.run_id
            eventually(lambda: prometheus.value(f'rl_reward_count{{rl_run_id="{run}"}}') == 3, what=f"{name} data")
            stats = rank.stats()
            assert stats["samples_exported"] == 1, name
        for name, rank in rejected.items():
            eventually(
                lambda: rank.stats()["export_failures_metrics"] >= 2 and rank.stats()["export_failures_logs"] >= 1,
                what=f"{name}: export failures counted",
                timeout_s=20,
            )
            assert rank.stats()["samples_exported"] == 0, name
        time.sleep(2.5)  # two collector ticks after the accepted ones arrived
        for name, rank in rejected.items():
            assert prometheus.query(f'{{rl_run_id="{rank.run_id}"}}') == [], name
            assert VictoriaLogs(secure.stack.victorialogs_url).query(f'{{rl.run.id="{rank.run_id}"}}') == [], name
    finally:
        for rank in everyone.values():
            rank.kill()
    texts = {path.name: path.read_text(encoding="utf-8", errors="replace") for path in secure.folder.glob("*.stderr")}
    texts["collector.log"] = secure.stack.log_file("collector").read_text(encoding="utf-8", errors="replace")
    for name, text in texts.items():
        assert secure.token not in text, f"the token appears in {name}"
        assert "not-the-token" not in text, f"the wrong token appears in {name}"
    assert "UNAUTHENTICATED" in texts["notoken.stderr"] or "Unauthenticated" in texts["notoken.stderr"]


def test_oversized_otlp_requests_are_refused_and_the_collector_stays_healthy(shared_stack: Any) -> None:
    """A 20 MiB OTLP request (HTTP and gRPC) is refused at the receiver (limit 16 MiB); the collector keeps its pid,
    stays healthy and still takes a rank's data."""
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs.export import LogRecordExportResult

    pid = shared_stack.pid("collector")
    huge = b"\x0a" + b"\xff" * 4 + b"\x7f" + b"x" * (20 * 1024 * 1024)  # a (bogus) protobuf body of 20 MiB
    response = requests.post(
        f"{shared_stack.otlp_http_endpoint}/v1/logs",
        data=huge,
        headers={"Content-Type": "application/x-protobuf"},
        timeout=30,
    )
    assert response.status_code == 400 and "request body too large" in response.text, response.text[:200]
    exporter = OTLPLogExporter(endpoint=shared_stack.otlp_grpc_endpoint, insecure=True, timeout=5)
    try:
        assert exporter.export([_big_log_record(20 * 1024 * 1024)]) == LogRecordExportResult.FAILURE
    finally:
        exporter.shutdown()
    assert shared_stack.pid("collector") == pid and shared_stack.is_healthy("collector")
    run_id = f"after-abuse-{uuid.uuid4().hex[:8]}"
    rank = RankProcess(endpoint=shared_stack.otlp_grpc_endpoint, run_id=run_id, rank=0, world_size=1)
    try:
        rank.rewards([1.0, 2.0])
        flush_ok(rank)
        prometheus = Prometheus(shared_stack.prometheus_url)
        eventually(lambda: prometheus.value(f'rl_reward_count{{rl_run_id="{run_id}"}}') == 2, what="data after abuse")
    finally:
        rank.kill()


def _big_log_record(size: int) -> Any:
    from opentelemetry._logs import LogRecord
    from opentelemetry.sdk._logs import ReadableLogRecord
    from opentelemetry.sdk.resources import Resource

    record = LogRecord(body="x" * size, attributes={"rl.run.id": "abuse"})
    return ReadableLogRecord(log_record=record, resource=Resource.create({}))


def test_log_store_limits_requests_not_otlp_record_sizes(shared_stack: Any) -> None:
    """VictoriaLogs refuses an OTLP request above -opentelemetry.maxRequestSize (32 MiB) and stays healthy; a
    300 KB sample record (a raised text budget) is stored whole: -insert.maxLineSizeBytes does not apply to OTLP."""
    response = requests.post(
        f"{shared_stack.victorialogs_url}/insert/opentelemetry/v1/logs",
        data=b"\x0a" + b"x" * (40 * 1024 * 1024),
        headers={"Content-Type": "application/x-protobuf"},
        timeout=60,
    )
    assert response.status_code == 400 and "maxRequestSize" in response.text, response.text[:200]
    assert shared_stack.is_healthy("victorialogs")
    run_id = f"longline-{uuid.uuid4().hex[:8]}"
    rank = RankProcess(
        endpoint=shared_stack.otlp_grpc_endpoint, run_id=run_id, rank=0, world_size=1,
        sample_text_budget_bytes=400_000, top_k=2, bottom_k=0,
    )  # fmt: skip
    try:
        rank.sample(reward=2.0, episode_id="long", response="y" * 300_000)
        rank.sample(reward=1.0, episode_id="short", response="fine")
        rank.step(1)
        flush_ok(rank)
        logs = VictoriaLogs(shared_stack.victorialogs_url)
        found = eventually(
            lambda: len(got := logs.query(f'{{rl.run.id="{run_id}"}}')) == 2 and got,
            what="both samples",
        )
        lengths = {record["rl.episode.id"]: len(record["_msg"]) for record in found}
        assert lengths == {"long": 300_000, "short": 4}
    finally:
        rank.kill()
