"""The secure profile's secrets and settings (otel_rl_ops/stack/secrets.py, StackConfig.secure/mtls), no stack."""

from __future__ import annotations

import base64
import stat
import subprocess
from pathlib import Path
from typing import Any, cast

import bcrypt
import pytest
import yaml
from otel_rl_ops.stack import components
from otel_rl_ops.stack.config import StackConfig
from otel_rl_ops.stack.secrets import USERNAME, ensure_secrets


def test_secrets_are_made_once_private_and_consistent(tmp_path: Path) -> None:
    """The folder is 0700 and every file 0600; the server certificate names the hosts and is signed by the CA, the
    client certificate too; the authorization headers and the web config's bcrypt hash match the passwords; a second
    call changes nothing, new hosts remake only the server certificate."""
    folder = tmp_path / "secrets"
    secrets = ensure_secrets(folder, hosts=("127.0.0.1", "localhost"))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in folder.iterdir())
    for certificate in (secrets.server_cert, secrets.client_cert):
        verify = subprocess.run(
            ["openssl", "verify", "-CAfile", str(secrets.ca), str(certificate)], capture_output=True, text=True
        )
        assert verify.returncode == 0, verify.stderr
    names = subprocess.run(
        ["openssl", "x509", "-in", str(secrets.server_cert), "-noout", "-ext", "subjectAltName"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "IP Address:127.0.0.1" in names and "DNS:localhost" in names
    for store in ("prometheus", "victorialogs"):
        user, password = secrets.basic_auth(store)
        assert user == USERNAME and len(password) >= 32
        header = secrets.read(secrets.authorization(store))
        assert base64.b64decode(header.removeprefix("Basic ")).decode() == f"{user}:{password}"
    web = yaml.safe_load(secrets.prometheus_web_config.read_text())
    assert bcrypt.checkpw(secrets.basic_auth("prometheus")[1].encode(), web["basic_auth_users"][USERNAME].encode())
    assert web["tls_server_config"] == {"cert_file": "server.pem", "key_file": "server.key", "min_version": "TLS12"}
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    ensure_secrets(folder, hosts=("127.0.0.1", "localhost"))
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before
    ensure_secrets(folder, hosts=("127.0.0.1", "localhost", "collector"))
    after = {path.name: path.read_bytes() for path in folder.iterdir()}
    assert after["server.pem"] != before["server.pem"] and after["otlp.token"] == before["otlp.token"]


def test_secrets_for_containers_are_readable_inside_a_private_folder(tmp_path: Path) -> None:
    """readable_by_containers (compose bind-mounts the files into containers with other users) makes the files 0644;
    the folder stays 0700."""
    secrets = ensure_secrets(tmp_path / "s", hosts=("collector",), readable_by_containers=True)
    assert stat.S_IMODE(secrets.folder.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o644 for path in secrets.folder.iterdir())


def test_bad_secret_settings_are_refused(tmp_path: Path) -> None:
    """No hosts, mtls without secure, secure with a cluster profile, non-bool switches: errors naming the setting."""
    with pytest.raises(ValueError, match=r'"hosts" must name at least one address or name, got \(\)'):
        ensure_secrets(tmp_path, hosts=())
    with pytest.raises(ValueError, match=r'"mtls" needs "secure" .*, got secure=False'):
        StackConfig(mtls=True)
    with pytest.raises(ValueError, match=r'"secure" is the single-node profile: .*tsdb_cluster=True'):
        StackConfig(secure=True, tsdb_cluster=True)
    with pytest.raises(TypeError, match=r'"secure" must be a bool, got 1'):
        StackConfig(secure=cast(Any, 1))


def test_openssl_failures_name_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing openssl is a RuntimeError naming the step and the folder."""

    def failing(*args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(args, 1, "", "unknown option -pkeyopt")

    monkeypatch.setattr(subprocess, "run", failing)  # how otel_rl_ops.stack.secrets runs openssl
    with pytest.raises(RuntimeError, match=r"openssl req failed in .*: unknown option -pkeyopt"):
        ensure_secrets(tmp_path / "s", hosts=("localhost",))


def test_the_secure_profile_switches_every_component(tmp_path: Path) -> None:
    """secure=True: the stores' URLs are https, Prometheus gets its web config and loses the lifecycle flag,
    VictoriaLogs gets TLS and basic auth from a file, the collector secure.yaml, the secrets' files and loopback-only
    health and own metrics; mtls adds the client CA; no flag holds a secret."""
    plain = StackConfig(state_dir=tmp_path / "plain")
    secure = StackConfig(state_dir=tmp_path / "secure", secure=True)
    mutual = StackConfig(state_dir=tmp_path / "secure", secure=True, mtls=True)
    assert components.secure_flags(plain, "prometheus") == ("--web.enable-lifecycle",)
    assert components.secure_flags(plain, "victorialogs") == ()
    secrets = secure.secrets()
    assert components.secure_flags(secure, "prometheus") == (f"--web.config.file={secrets.prometheus_web_config}",)
    flags = components.secure_flags(secure, "victorialogs")
    assert "-tls" in flags and f"-httpAuth.password=file://{secrets.password('victorialogs')}" in flags
    assert not any(secrets.basic_auth(store)[1] in " ".join(flags) for store in ("prometheus", "victorialogs"))
    assert components.query_url(secure).startswith("https://") and components.query_url(plain).startswith("http://")
    assert (
        secure.resolved_collector_configs()[-1].name == "secure.yaml" and len(plain.resolved_collector_configs()) == 1
    )
    environment = components.collector_environment(secure)
    assert environment["OTEL_RL_REMOTE_WRITE_URL"].startswith("https://")
    assert (
        environment["OTEL_RL_HEALTH_ENDPOINT"].startswith("127.0.0.1:")
        and environment["OTEL_RL_TLS_CLIENT_CA_FILE"] == ""
    )
    assert components.collector_environment(mutual)["OTEL_RL_TLS_CLIENT_CA_FILE"] == str(secrets.ca)
    assert "OTEL_RL_TLS_CERT_FILE" not in components.collector_environment(plain)
