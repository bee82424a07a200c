"""The secure profile against the real components (issue 20): OTLP over TLS with the bearer token (mutual TLS as an
option), Prometheus behind --web.config.file (TLS, basic auth, no lifecycle API), VictoriaLogs behind -httpAuth.*
and TLS, the collector authenticating to both; secrets only in files; size limits at the collector and the log
store; a record over the receiver's limit dropped without stalling the rank's samples.

The secrets are the stack's own (``otel-rl stack up --secure``: ops/otel_rl_ops/stack/secrets.py); a second CA made here
with ``openssl`` stands for a CA the ranks must not trust.
"""

from __future__ import annotations

import os
import select
import socket
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import otel_rl_contract as contract
import pytest
import requests
from otel_rl_ops.query import Jaeger, Prometheus, VictoriaLogs
from otel_rl_ops.stack.secrets import StackSecrets

from otel_rl._state.phases import step_trace
from tests.pipeline.harness import REWARD_BOUNDS, RankProcess, eventually, expected_buckets, private_stack, start_ranks
from tests.reliability.helpers import flush_ok

REWARD = contract.series(contract.REWARDS.histogram)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_other_ca(folder: Path) -> Path:
    """A CA that signed nothing the stack serves (valid 1 day)."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=otel-rl test other CA",
        "-keyout",
        "other.key",
        "-out",
        "other.pem",
        cwd=folder,
    )
    return folder / "other.pem"


@dataclass
class Secure:
    stack: Any
    secrets: StackSecrets
    folder: Path
    other_ca: Path

    @property
    def token(self) -> str:
        return self.secrets.read(self.secrets.otlp_token)

    def session(self, store: str) -> requests.Session:
        """A client of ``store`` as the stack's users are: the stack's CA, the store's basic auth."""
        session = requests.Session()
        session.verify, session.auth = str(self.secrets.ca), self.secrets.basic_auth(store)
        session.trust_env = False  # else REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE replace ``verify`` (requests #3829)
        return session

    def prometheus(self) -> Prometheus:
        return Prometheus(self.stack.prometheus_url, session=self.session("prometheus"))

    def victorialogs(self) -> VictoriaLogs:
        return VictoriaLogs(self.stack.victorialogs_url, session=self.session("victorialogs"))


@pytest.fixture(scope="module")
def secure(stack_binaries: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    folder = tmp_path_factory.mktemp("secure")
    with private_stack(stack_binaries, folder / "stack", secure=True) as stack:
        yield Secure(stack, stack.config.secrets(), folder, make_other_ca(folder / "other"))


def _ranks(secure: Secure, specs: dict[str, tuple[str, dict[str, Any]]]) -> dict[str, RankProcess]:
    """Start one rank per entry (``label -> (name, settings)``) side by side (each takes seconds to import torch)."""
    with ThreadPoolExecutor(len(specs)) as pool:
        futures = {label: pool.submit(_rank, secure, name, **settings) for label, (name, settings) in specs.items()}
    return {label: future.result() for label, future in futures.items()}


def _rank(secure: Secure, name: str, **settings: Any) -> RankProcess:
    settings.setdefault("endpoint", secure.stack.otlp_grpc_endpoint)
    return RankProcess(
        run_id=f"{name}-{uuid.uuid4().hex[:8]}",
        rank=0,
        world_size=1,
        stderr=secure.folder / f"{name}.stderr",
        export_interval_s=0.3,
        export_timeout_s=1.0,
        **settings,
    )


def test_tls_and_bearer_token_accept_the_authenticated_and_reject_the_rest(secure: Secure) -> None:
    """Over TLS, only ranks with the token get data in (exact counts, gRPC and HTTP/protobuf, settings or OTEL_*
    variables); no token, a wrong token, plaintext or an untrusted CA: nothing in Prometheus, failures counted;
    neither token appears in any rank's or the collector's output."""
    ca, grpc, http = str(secure.secrets.ca), secure.stack.otlp_grpc_endpoint, secure.stack.otlp_http_endpoint
    bearer = {"authorization": f"Bearer {secure.token}"}
    env_settings = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": grpc,
        "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{secure.token}",
        "OTEL_EXPORTER_OTLP_CERTIFICATE": ca,
    }
    ranks = _ranks(
        secure,
        {
            "grpc": ("grpc", {"certificate_file": ca, "headers": bearer}),
            "grpc_capitalized": (
                "grpccap",
                {"certificate_file": ca, "headers": {"Authorization": f"Bearer {secure.token}"}},
            ),
            "http": (
                "http",
                {"endpoint": http, "protocol": "http/protobuf", "certificate_file": ca, "headers": bearer},
            ),
            "env": ("env", {"endpoint": None, "env": {**os.environ, **env_settings}}),
            "no_token": ("notoken", {"certificate_file": ca}),
            "wrong_token": (
                "wrongtoken",
                {"certificate_file": ca, "headers": {"authorization": "Bearer not-the-token"}},
            ),
            "http_no_token": ("httpnotoken", {"endpoint": http, "protocol": "http/protobuf", "certificate_file": ca}),
            "plaintext": ("plain", {"endpoint": grpc.replace("https://", "http://"), "headers": bearer}),
            "untrusted_ca": ("otherca", {"certificate_file": str(secure.other_ca), "headers": bearer}),
        },
    )
    accepted = {label: ranks[label] for label in ("grpc", "grpc_capitalized", "http", "env")}
    rejected = {label: rank for label, rank in ranks.items() if label not in accepted}
    prometheus, logs = secure.prometheus(), secure.victorialogs()
    everyone = {**accepted, **rejected}
    try:
        for rank in everyone.values():
            rank.rewards([0.5, -0.25, 1.0])
            rank.sample(reward=1.0, episode_id="e", response="hello")
            rank.step(1)
        for name, rank in accepted.items():
            flush_ok(rank)
            run = rank.run_id
            eventually(lambda: prometheus.value(f'{REWARD.count}{{rl_run_id="{run}"}}') == 3, what=f"{name} data")
            eventually(lambda: len(logs.query(f'{{rl.run.id="{run}"}}')) == 1, what=f"{name} sample")
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
            assert logs.query(f'{{rl.run.id="{rank.run_id}"}}') == [], name
    finally:
        for rank in everyone.values():
            rank.kill()
    texts = {path.name: path.read_text(encoding="utf-8", errors="replace") for path in secure.folder.glob("*.stderr")}
    texts["collector.log"] = secure.stack.log_file("collector").read_text(encoding="utf-8", errors="replace")
    for name, text in texts.items():
        assert secure.token not in text, f"the token appears in {name}"
        assert "not-the-token" not in text, f"the wrong token appears in {name}"
    assert "UNAUTHENTICATED" in texts["notoken.stderr"] or "Unauthenticated" in texts["notoken.stderr"]


def test_a_multi_rank_run_is_exact_through_the_secure_profile(secure: Secure) -> None:
    """4 ranks over TLS with the token: the collector's remote write, log and trace exports authenticate to the
    stores, and Prometheus (read with basic auth) holds the run's exact count, sum and every bucket; VictoriaLogs its
    samples; Jaeger the step's trace of every rank."""
    ca, run_id = str(secure.secrets.ca), f"secure-run-{uuid.uuid4().hex[:8]}"
    ranks = start_ranks(
        4,
        endpoint=secure.stack.otlp_grpc_endpoint,
        run_id=run_id,
        certificate_file=ca,
        headers={"authorization": f"Bearer {secure.token}"},
        export_interval_s=0.3,
    )
    values = {rank.rank: [round(0.25 * rank.rank - 0.5 + 0.125 * i, 3) for i in range(12)] for rank in ranks}
    for rank in ranks:
        rank.rewards(values[rank.rank])
        rank.sample(reward=1.0, episode_id=f"e{rank.rank}", response="ok")
        rank.step(1)
        rank.step(2)
    for rank in ranks:
        flush_ok(rank)
    everything = [v for vs in values.values() for v in vs]
    prometheus = secure.prometheus()
    selector = f'{{rl_run_id="{run_id}",rl_reward_fn="total"}}'
    try:
        eventually(lambda: prometheus.value(f"{REWARD.count}{selector}") == len(everything), what="the whole run")
        assert prometheus.value(f"{REWARD.sum}{selector}") == pytest.approx(sum(everything), abs=1e-12)
        assert prometheus.buckets(REWARD, selector) == expected_buckets(everything, REWARD_BOUNDS)
        samples = eventually(
            lambda: len(got := secure.victorialogs().query(f'{{rl.run.id="{run_id}"}}')) == 4 and got,
            what="the 4 samples",
        )
        assert sorted(record["rl.episode.id"] for record in samples) == ["e0", "e1", "e2", "e3"]
        # Every span to Jaeger over TLS with its basic auth: step 1's trace holds the 4 ranks' step spans.
        jaeger = Jaeger(secure.stack.jaeger_url, session=secure.session("jaeger"))
        trace_id = f"{step_trace(run_id, 1)[0]:032x}"
        eventually(
            lambda: (
                {s.attributes["rl.rank"] for s in jaeger.trace(trace_id) if s.name == "rl.rank.step"} == {0, 1, 2, 3}
            ),
            what="step 1's trace in Jaeger",
        )
    finally:
        for rank in ranks:
            rank.kill()


def test_the_stores_refuse_unauthenticated_reads_and_writes_and_prometheus_has_no_lifecycle_api(secure: Secure) -> None:
    """Prometheus and VictoriaLogs answer only TLS with their basic auth: reads and writes without it, or with a
    wrong password, get 401 (plain HTTP on their ports does not work at all); with it, 200. Prometheus's
    /-/quit and /-/reload are off (403) and it keeps running. The collector's unauthenticated health and own
    metrics listen on 127.0.0.1 only."""
    prometheus, logs, ca = secure.stack.prometheus_url, secure.stack.victorialogs_url, str(secure.secrets.ca)
    calls = {
        "prometheus query": ("GET", f"{prometheus}/api/v1/query?query=up", "prometheus"),
        "prometheus remote write": ("POST", f"{prometheus}/api/v1/write", "prometheus"),
        "prometheus own metrics": ("GET", f"{prometheus}/metrics", "prometheus"),
        "victorialogs query": ("POST", f"{logs}/select/logsql/query?query=*", "victorialogs"),
        "victorialogs insert": ("POST", f"{logs}/insert/opentelemetry/v1/logs", "victorialogs"),
        "victorialogs own metrics": ("GET", f"{logs}/metrics", "victorialogs"),
        "jaeger query": ("GET", f"{secure.stack.jaeger_url}/api/services", "jaeger"),
    }
    for what, (method, url, store) in calls.items():
        assert requests.request(method, url, verify=ca, timeout=10).status_code == 401, what
        wrong = requests.request(
            method, url, verify=ca, auth=(secure.secrets.basic_auth(store)[0], "wrong"), timeout=10
        )
        assert wrong.status_code == 401, what
        body = b"" if method == "POST" else None
        right = requests.request(method, url, verify=ca, auth=secure.secrets.basic_auth(store), data=body, timeout=10)
        # An empty remote-write body is a bad request (400): it was let in, then read.
        assert right.status_code == (400 if what == "prometheus remote write" else 200), (what, right.text[:200])
        plain = requests.request(method, url.replace("https://", "http://"), timeout=10)
        assert plain.status_code == 400 and "HTTPS" in plain.text, (what, plain.text[:200])
    # Jaeger's OTLP receiver, where the collector sends spans: TLS and the same basic auth.
    otlp = f"https://{secure.stack.config.host}:{secure.stack.config.ports.jaeger_otlp}/v1/traces"
    headers = {"Content-Type": "application/x-protobuf"}
    assert requests.post(otlp, data=b"", headers=headers, verify=ca, timeout=10).status_code == 401
    right = requests.post(
        otlp, data=b"", headers=headers, verify=ca, auth=secure.secrets.basic_auth("jaeger"), timeout=10
    )
    assert right.status_code == 200, right.text[:200]
    auth = secure.secrets.basic_auth("prometheus")
    for path in ("/-/quit", "/-/reload"):
        response = requests.post(f"{prometheus}{path}", verify=ca, auth=auth, timeout=10)
        assert response.status_code == 403 and "not enabled" in response.text.lower(), (path, response.text)
    time.sleep(1)
    assert secure.stack.is_healthy("prometheus")
    environment = secure.stack.collector_environment()
    assert environment["OTEL_RL_HEALTH_ENDPOINT"].startswith("127.0.0.1:")
    assert environment["OTEL_RL_COLLECTOR_METRICS_HOST"] == "127.0.0.1"


def test_secrets_are_private_files_never_on_command_lines_or_in_logs(secure: Secure) -> None:
    """The secrets folder is 0700 and its files 0600; no component's command line or log holds the token or a
    password (they name files only)."""
    folder = secure.secrets.folder
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in folder.iterdir() if path.is_file())
    secrets = [
        secure.token,
        *(secure.secrets.basic_auth(store)[1] for store in ("prometheus", "victorialogs", "jaeger")),
    ]
    secrets += [
        secure.secrets.read(secure.secrets.authorization(store)) for store in ("prometheus", "victorialogs", "jaeger")
    ]
    for name in secure.stack.component_names:
        pid = secure.stack.pid(name)
        assert pid is not None, name
        command_line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        log = secure.stack.log_file(name).read_text(encoding="utf-8", errors="replace")
        for secret in secrets:
            assert secret.split(" ")[-1] not in command_line, f"a secret is on {name}'s command line"
            assert secret.split(" ")[-1] not in log, f"a secret is in {name}'s log"


def test_mutual_tls_requires_a_client_certificate(stack_binaries: Any, tmp_path: Path) -> None:
    """With mtls=True the collector takes only ranks that present a client certificate signed by the stack's CA
    (gRPC and HTTP, from TelemetryConfig's client_certificate_file/client_key_file or the OTEL_* variables); the
    token alone is refused."""
    with private_stack(stack_binaries, tmp_path / "stack", secure=True, mtls=True) as stack:
        secrets: StackSecrets = stack.config.secrets()
        secure = Secure(stack, secrets, tmp_path, secrets.ca)
        ca, token = str(secrets.ca), secure.token
        bearer = {"authorization": f"Bearer {token}"}
        client = {"client_certificate_file": str(secrets.client_cert), "client_key_file": str(secrets.client_key)}
        env = {
            **os.environ,
            "OTEL_EXPORTER_OTLP_ENDPOINT": stack.otlp_grpc_endpoint,
            "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{token}",
            "OTEL_EXPORTER_OTLP_CERTIFICATE": ca,
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": str(secrets.client_cert),
            "OTEL_EXPORTER_OTLP_CLIENT_KEY": str(secrets.client_key),
        }
        http = stack.otlp_http_endpoint
        ranks = _ranks(
            secure,
            {
                "grpc": ("mtls-grpc", {"certificate_file": ca, "headers": bearer, **client}),
                "http": (
                    "mtls-http",
                    {
                        "endpoint": http,
                        "protocol": "http/protobuf",
                        "certificate_file": ca,
                        "headers": bearer,
                        **client,
                    },
                ),
                "env": ("mtls-env", {"endpoint": None, "env": env}),
                "grpc without a certificate": ("nocert-grpc", {"certificate_file": ca, "headers": bearer}),
                "http without a certificate": (
                    "nocert-http",
                    {"endpoint": http, "protocol": "http/protobuf", "certificate_file": ca, "headers": bearer},
                ),
            },
        )
        accepted = {label: ranks[label] for label in ("grpc", "http", "env")}
        rejected = {label: rank for label, rank in ranks.items() if label not in accepted}
        prometheus = secure.prometheus()
        try:
            for rank in (*accepted.values(), *rejected.values()):
                rank.rewards([1.0, 2.0])
            for name, rank in accepted.items():
                flush_ok(rank)
                run = rank.run_id
                eventually(lambda: prometheus.value(f'{REWARD.count}{{rl_run_id="{run}"}}') == 2, what=f"{name} data")
            for name, rank in rejected.items():
                eventually(lambda: rank.stats()["export_failures_metrics"] >= 2, what=f"{name} refused", timeout_s=20)
            time.sleep(2.5)
            for name, rank in rejected.items():
                assert prometheus.query(f'{{rl_run_id="{rank.run_id}"}}') == [], name
        finally:
            for rank in (*accepted.values(), *rejected.values()):
                rank.kill()


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
        eventually(lambda: prometheus.value(f'{REWARD.count}{{rl_run_id="{run_id}"}}') == 2, what="data after abuse")
    finally:
        rank.kill()


def _post_reading_early(url: str, size: int) -> bytes:
    """POST ``size`` bytes to ``url`` over a raw socket the way Go's and curl's clients do: while sending, read the
    answer as soon as the server sends one, and stop sending then. Returns what the server answered."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as connection:
        head = (
            f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/x-protobuf\r\n"
            f"Content-Length: {size}\r\n\r\n"
        )
        connection.sendall(head.encode())
        chunk, sent = b"\x0a" + b"x" * (64 * 1024 - 1), 0
        while sent < size:
            readable, _, _ = select.select([connection], [], [], 0)
            if readable:
                break
            connection.sendall(chunk[: size - sent])
            sent += len(chunk)
        return connection.recv(4096)


def test_an_oversized_otlp_http_body_is_answered_400_however_large(shared_stack: Any) -> None:
    """A 50 MB OTLP/HTTP body is answered as the 20 MiB one is, HTTP 400 ``request body too large`` (the collector's
    confighttp limit answers 400, never 413), to a client that reads the answer while it sends (Go's, curl); Python's
    requests writes the whole body first and sees the connection closed after the answer instead (documented in
    docs/reliability.md, "Limits"). The collector stays healthy."""
    answer = _post_reading_early(f"{shared_stack.otlp_http_endpoint}/v1/logs", 50 * 1000 * 1000)
    assert answer.startswith(b"HTTP/1.1 400") and b"request body too large" in answer, answer[:300]
    assert shared_stack.is_healthy("collector")


def _big_log_record(size: int) -> Any:
    from opentelemetry._logs import LogRecord
    from opentelemetry.sdk._logs import ReadableLogRecord
    from opentelemetry.sdk.resources import Resource

    record = LogRecord(body="x" * size, attributes={"rl.run.id": "abuse"})
    return ReadableLogRecord(log_record=record, resource=Resource.create({}))


def test_a_record_over_the_receivers_limit_is_dropped_and_the_ranks_later_samples_arrive(
    stack_binaries: Any, tmp_path: Path
) -> None:
    """A collector whose OTLP/HTTP receiver takes at most 600 kB refuses a 900 kB sample record (under the rank's
    own 1 MiB limit) every time: the rank drops it (otel_rl.samples.dropped{reason="refused"}, after halving its batch
    down to the record alone) while its metrics go through, and the samples of its later steps arrive."""
    with private_stack(
        stack_binaries, tmp_path / "stack", collector_environment={"OTEL_RL_OTLP_MAX_REQUEST_BYTES": "600000"}
    ) as stack:
        run_id = f"refused-{uuid.uuid4().hex[:8]}"
        rank = RankProcess(
            endpoint=stack.otlp_http_endpoint,
            protocol="http/protobuf",
            run_id=run_id,
            rank=0,
            world_size=1,
            top_k=1,
            bottom_k=0,
            sample_text_budget_bytes=3_000_000,
            export_interval_s=0.2,
        )
        logs = VictoriaLogs(stack.victorialogs_url)
        try:
            rank.sample(reward=1.0, episode_id="huge", response="h" * 900_000)
            rank.step(1)
            rank.sample(reward=1.0, episode_id="small-1", response="fine")
            rank.step(2)
            rank.sample(reward=1.0, episode_id="small-2", response="fine")
            rank.step(3)
            eventually(
                lambda: rank.flush() and rank.stats()["samples_dropped_refused"] == 1,
                what="the huge record dropped",
                timeout_s=60,
            )
            found = eventually(
                lambda: len(got := logs.query(f'{{rl.run.id="{run_id}"}}')) == 2 and got,
                what="the later samples",
                timeout_s=60,
            )
            assert sorted(record["rl.episode.id"] for record in found) == ["small-1", "small-2"]
            assert rank.stats()["samples_dropped_oversized"] == 0
        finally:
            rank.kill()


def test_log_store_limits_requests_not_otlp_record_sizes(shared_stack: Any) -> None:
    """VictoriaLogs refuses an OTLP request above -opentelemetry.maxRequestSize (32 MiB) and stays healthy; a
    300 KB sample record (a raised text budget) is stored whole: -insert.maxLineSizeBytes (256 KiB) does not apply to
    OTLP (its own 2 MiB entry limit does: test_isolation.py)."""
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
        endpoint=shared_stack.otlp_grpc_endpoint,
        run_id=run_id,
        rank=0,
        world_size=1,
        sample_text_budget_bytes=400_000,
        top_k=2,
        bottom_k=0,
    )
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
