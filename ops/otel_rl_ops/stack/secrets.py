"""The secure profile's secrets: a private CA, a server and a client certificate, the OTLP bearer token, and one
basic-auth password each for Prometheus, VictoriaLogs, Alertmanager and Jaeger, all files in one folder (made once,
then reused).

Every component reads them from files, so no secret is on a command line (``ps`` shows the paths only) or in a
log: the collector (``collector_config/secure.yaml``: ``${file:...}`` and ``*_file`` settings), Prometheus and
Alertmanager (``--web.config.file``, whose ``basic_auth_users`` holds a bcrypt hash), VictoriaLogs
(``-httpAuth.password=file://...``), Jaeger (``jaeger.htpasswd``, a bcrypt hash) and Grafana (``$__file{...}`` in
its provisioned datasources). The same files serve ``otel-rl stack up --secure`` and docker-compose.yml
(``otel-rl stack secrets``).

Certificates are made with the ``openssl`` command line (ECDSA P-256, valid 825 days); the server certificate
names ``hosts`` and is made again when they change. The folder is 0700; its files are 0600, or 0644 with
``readable_by_containers`` (compose bind-mounts each file into containers whose users differ from yours; the
folder's mode still keeps other local users out).
"""

from __future__ import annotations

import base64
import ipaddress
import os
import secrets
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import bcrypt
import yaml

USERNAME: Final = "otel-rl"
"""The basic-auth user of Prometheus, VictoriaLogs, Alertmanager and Jaeger (not a secret)."""


@dataclass(frozen=True)
class StackSecrets:
    """The secret files of one deployment, in :attr:`folder`."""

    folder: Path

    @property
    def ca(self) -> Path:
        """The CA certificate that signed the server and client certificates: what clients trust."""
        return self.folder / "ca.pem"

    @property
    def server_cert(self) -> Path:
        return self.folder / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.folder / "server.key"

    @property
    def client_cert(self) -> Path:
        """A client certificate for mutual TLS (``TelemetryConfig.client_certificate_file``)."""
        return self.folder / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.folder / "client.key"

    @property
    def otlp_token(self) -> Path:
        """The bearer token ranks send (``authorization: Bearer <token>``)."""
        return self.folder / "otlp.token"

    def password(self, store: str) -> Path:
        """The basic-auth password of ``store`` (``"prometheus"``, ``"victorialogs"`` or ``"alertmanager"``)."""
        return self.folder / f"{store}.password"

    def authorization(self, store: str) -> Path:
        """The ``Authorization`` header value (``Basic <base64 user:password>``) the collector sends to ``store``."""
        return self.folder / f"{store}.authorization"

    @property
    def prometheus_web_config(self) -> Path:
        """Prometheus's ``--web.config.file``: TLS with the server certificate, basic auth (bcrypt hash); its paths
        are relative to the file, so it works wherever the folder is mounted."""
        return self.folder / "prometheus-web.yml"

    @property
    def alertmanager_web_config(self) -> Path:
        """Alertmanager's ``--web.config.file``, the same kind as :attr:`prometheus_web_config` with its own
        password."""
        return self.folder / "alertmanager-web.yml"

    @property
    def jaeger_htpasswd(self) -> Path:
        """Jaeger's users (htpasswd, a bcrypt hash of its password) for its basic auth (``jaeger/secure.yaml``)."""
        return self.folder / "jaeger.htpasswd"

    def read(self, path: Path) -> str:
        """A secret's text without its trailing newline."""
        return path.read_text(encoding="utf-8").strip()

    def basic_auth(self, store: str) -> tuple[str, str]:
        """``(user, password)`` of ``store``, for a client (a test, the stack's health checks)."""
        return USERNAME, self.read(self.password(store))


STORES: Final = ("prometheus", "victorialogs", "alertmanager", "jaeger")


def ensure_secrets(folder: Path, *, hosts: Sequence[str], readable_by_containers: bool = False) -> StackSecrets:
    """Return the secrets in ``folder``, making whatever is missing, and the server certificate again when it does
    not name exactly ``hosts`` (IP addresses and DNS names).

    Raises:
        ValueError: when ``hosts`` is empty.
        RuntimeError: when ``openssl`` fails (its message).
    """
    if not hosts:
        raise ValueError(f'"hosts" must name at least one address or name, got {hosts!r}')
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    found = StackSecrets(folder)
    mode = 0o644 if readable_by_containers else 0o600
    if not found.ca.is_file():
        _openssl(
            folder,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "825",
            "-subj",
            "/CN=otel-rl CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        )
    names = ",".join(f"IP:{h}" if _is_ip(h) else f"DNS:{h}" for h in dict.fromkeys(hosts))
    hosts_file = folder / "server.hosts"
    if not found.server_cert.is_file() or not hosts_file.is_file() or hosts_file.read_text() != names:
        _certificate(folder, "server", "/CN=otel-rl", f"subjectAltName={names}\nextendedKeyUsage=serverAuth\n")
        hosts_file.write_text(names, encoding="utf-8")
    if not found.client_cert.is_file():
        _certificate(folder, "client", "/CN=otel-rl rank", "extendedKeyUsage=clientAuth\n")
    if not found.otlp_token.is_file():
        _write_secret(found.otlp_token, secrets.token_urlsafe(32))
    for store in STORES:
        if not found.password(store).is_file():
            _write_secret(found.password(store), secrets.token_urlsafe(24))
        user, password = found.basic_auth(store)
        header = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        if not found.authorization(store).is_file() or found.read(found.authorization(store)) != header:
            _write_secret(found.authorization(store), header)
    for store, web in (("prometheus", found.prometheus_web_config), ("alertmanager", found.alertmanager_web_config)):
        _, password = found.basic_auth(store)
        if not web.is_file() or not _web_config_matches(web, password):
            hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt()).decode()
            config = {
                "tls_server_config": {"cert_file": "server.pem", "key_file": "server.key", "min_version": "TLS12"},
                "basic_auth_users": {USERNAME: hashed},
            }
            _write_secret(web, yaml.safe_dump(config, sort_keys=False))
    _, password = found.basic_auth("jaeger")
    if not found.jaeger_htpasswd.is_file() or not _htpasswd_matches(found.jaeger_htpasswd, password):
        hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt()).decode()
        _write_secret(found.jaeger_htpasswd, f"{USERNAME}:{hashed}\n")
    for path in folder.iterdir():
        if path.is_file():
            path.chmod(mode)
    return found


def _web_config_matches(web: Path, password: str) -> bool:
    hashed = (yaml.safe_load(web.read_text(encoding="utf-8")) or {}).get("basic_auth_users", {}).get(USERNAME, "")
    return bool(hashed) and bcrypt.checkpw(password.encode(), str(hashed).encode())


def _htpasswd_matches(path: Path, password: str) -> bool:
    user, _, hashed = path.read_text(encoding="utf-8").strip().partition(":")
    return user == USERNAME and bool(hashed) and bcrypt.checkpw(password.encode(), hashed.encode())


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _write_secret(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, created 0600 (never readable by others, not even for a moment)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)


def _certificate(folder: Path, name: str, subject: str, extensions: str) -> None:
    """A key and a certificate ``<name>.pem`` signed by the folder's CA, with ``extensions`` (openssl syntax)."""
    (folder / f"{name}.ext").write_text(extensions, encoding="utf-8")
    _openssl(
        folder,
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-subj",
        subject,
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.csr",
    )
    _openssl(
        folder,
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "825",
        "-extfile",
        f"{name}.ext",
        "-out",
        f"{name}.pem",
    )


def _openssl(folder: Path, *args: str) -> None:
    result = subprocess.run(["openssl", *args], cwd=folder, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed in {str(folder)!r}: {result.stderr.strip()[-500:]}")
