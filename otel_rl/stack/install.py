"""Install the stack's binaries, reusing whatever is already there.

* The collector: ``go install`` the OpenTelemetry Collector Builder at the core version the manifest pins, then
  build the manifest into ``$OTEL_RL_HOME/collector/<digest>/otelcol-rl`` where ``<digest>`` is the first 16 hex
  digits of the SHA-256 of the manifest bytes and of the patches beside it (:func:`collector_patches`). A changed
  manifest or patch is a new digest, hence a new build; an unchanged one is never rebuilt.
* VictoriaLogs, Prometheus and promtool: ``go install`` at :data:`VICTORIALOGS_VERSION` and
  :data:`PROMETHEUS_VERSION` into ``$OTEL_RL_HOME/bin``, with a version stamp (the builder is installed the same
  way, by :func:`ensure_go_binary`). Prometheus's module has no built web UI; its API, which Grafana, the report
  and the tests use, is complete.
* Thanos (the TSDB cluster profile only, :func:`ensure_thanos`): ``go build`` of ``cmd/thanos`` inside a writable
  copy of the module at :data:`THANOS_VERSION`, into ``$OTEL_RL_HOME/bin`` with a version stamp; minutes cold, so
  :func:`install_all` builds it only when asked (``cluster=True``, ``otel-rl stack install --cluster``).

The Go installs and the collector build hold an exclusive lock on ``$OTEL_RL_HOME/install.lock`` so that
concurrent ``up`` calls (a test session and a shell) do not build the same thing twice or read a half-written
binary. Each ``ensure_*`` function takes the lock itself and never while holding it (see :func:`install_lock`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import yaml

from otel_rl.stack import layout
from otel_rl.stack.env import otel_rl_home

_logger = logging.getLogger(__name__)

BUILDER_PACKAGE: Final = "go.opentelemetry.io/collector/cmd/builder"
"""Go package of the OpenTelemetry Collector Builder (``ocb``)."""

BUILDER_BINARY_NAME: Final = "builder"
"""File name of the installed collector builder."""

CORE_MODULE_PREFIX: Final = "go.opentelemetry.io/collector/"
"""Module path prefix of the collector core; its v0.x modules carry the release version the builder must match."""

COLLECTOR_BINARY_NAME: Final = "otelcol-rl"
"""File name of the built collector."""

VICTORIALOGS_PACKAGE: Final = "github.com/VictoriaMetrics/VictoriaLogs/app/victoria-logs"
"""Go package of the VictoriaLogs single-node server."""

VICTORIALOGS_VERSION: Final = "v1.52.1"
"""Pinned VictoriaLogs release."""

VICTORIALOGS_BINARY_NAME: Final = "victoria-logs"
"""File name of the installed VictoriaLogs server."""

PROMETHEUS_MODULE: Final = "github.com/prometheus/prometheus"
"""Go module of Prometheus; its ``cmd/prometheus`` and ``cmd/promtool`` are the server and the rule tool."""

PROMETHEUS_VERSION: Final = "v0.316.0"
"""Pinned Prometheus module version: Prometheus 3.16.0 (native histograms stable, remote-write 2.0 receiver)."""

THANOS_MODULE: Final = "github.com/thanos-io/thanos"
"""Go module of Thanos; its ``cmd/thanos`` is one binary for every component (``receive``, ``query``, ...)."""

THANOS_VERSION: Final = "v0.42.5"
"""Pinned Thanos release (native histograms on by default in ``receive``: ``--tsdb.enable-native-histograms``)."""

THANOS_TOOLCHAIN: Final = "go1.26.10"
"""``GOTOOLCHAIN`` for fetching and building Thanos: its go.mod says ``go 1.26.10``, newer than some local Go
installs; the go command downloads this toolchain once (a module of its own, seconds)."""

THANOS_BINARY_NAME: Final = "thanos"
"""File name of the built Thanos binary."""

THANOS_BUILD_TAGS: Final = ("netgo", "slicelabels")
"""Go build tags of the Thanos release build (its ``.promu.yml``). ``slicelabels`` is required: Thanos converts
Prometheus ``labels.Labels`` to its own label slices without copying, which only matches Prometheus's slice
implementation (without the tag a receiver panics in gRPC marshalling on the querier's first call, measured)."""

_MANIFEST_COMPONENT_KEYS: Final = ("receivers", "processors", "exporters", "connectors", "extensions", "providers")

PATCHES_DIR_NAME: Final = "patches"
"""Folder beside the manifest whose ``*.patch`` files are applied to upstream Go modules before a build."""

_PATCH_HEADER: Final = re.compile(r"# module: (\S+) (v\S+)\n")
"""First line of a patch file: the Go module and version it applies to."""


class InstallError(RuntimeError):
    """An external install step (``go``, the builder) failed; the message carries its output."""


@dataclass(frozen=True, kw_only=True)
class Binaries:
    """Paths of the installed executables of one stack."""

    collector: Path
    """The custom collector built from the repository manifest."""
    victorialogs: Path
    """The VictoriaLogs single-node server."""
    prometheus: Path
    """The Prometheus server."""
    promtool: Path
    """Prometheus's companion tool (config and rule checks)."""
    thanos: Path | None = None
    """Thanos (``receive`` and ``query`` of the TSDB cluster profile), or ``None`` when it was not built (the default
    install skips it: :func:`install_all` with ``cluster=False``)."""


@dataclass(frozen=True, kw_only=True)
class ModulePatch:
    """A unified diff (``patch -p1``, paths relative to the module root) of one upstream Go module version.

    Why: some upstream components merge wrongly (each patch's header says which and how); the build uses a patched
    copy of their module (an ocb ``replaces`` entry) instead of a fork, so a fix stays a small reviewed diff pinned
    to one module version, and a version bump that no longer matches fails the build instead of dropping the fix.
    """

    path: Path
    """The patch file; its first line is ``# module: <module path> <version>``."""
    module: str
    """The Go module path it applies to, e.g. ``github.com/open-telemetry/.../internal/coreinternal``."""
    version: str
    """The module version it applies to, e.g. ``v0.161.0``."""


def collector_patches(manifest: Path) -> tuple[ModulePatch, ...]:
    """Return the patches in the ``patches`` folder beside ``manifest`` (none when absent), sorted by file name.

    Raises:
        ValueError: when a patch file does not start with ``# module: <module path> <version>``.
    """
    patches = []
    for path in sorted((manifest.parent / PATCHES_DIR_NAME).glob("*.patch")):
        header = _PATCH_HEADER.match(path.read_text(encoding="utf-8"))
        if header is None:
            raise ValueError(
                f"collector patch {str(path)!r} must start with a line '# module: <module path> <version>'"
            )
        patches.append(ModulePatch(path=path, module=header.group(1), version=header.group(2)))
    return tuple(patches)


def manifest_digest(manifest: Path) -> str:
    """Return the collector build's identity: the first 16 hex digits of the SHA-256 of the manifest's bytes,
    followed by the name and bytes of each of its patches (so without patches, the manifest's own SHA-256)."""
    digest = hashlib.sha256(manifest.read_bytes())
    for patch in collector_patches(manifest):
        digest.update(b"\0" + patch.path.name.encode() + b"\0" + patch.path.read_bytes())
    return digest.hexdigest()[:16]


def collector_core_version(manifest: Path) -> str:
    """Return the collector release (``v0.N.M``) that the manifest's core ``gomod`` lines pin.

    Core modules are those under ``go.opentelemetry.io/collector/`` with a ``v0.`` version (the stable ``v1.x``
    modules of the same release are ignored). The builder is installed at this version.

    Raises:
        ValueError: when the manifest pins no core v0 module, or several different core v0 versions.
    """
    data = yaml.safe_load(manifest.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"collector manifest {str(manifest)!r} must be a YAML mapping, got {type(data).__name__}")
    versions: set[str] = set()
    for key in _MANIFEST_COMPONENT_KEYS:
        for entry in data.get(key) or ():
            gomod = entry.get("gomod", "") if isinstance(entry, dict) else ""
            parts = str(gomod).split()
            if len(parts) == 2 and parts[0].startswith(CORE_MODULE_PREFIX) and parts[1].startswith("v0."):
                versions.add(parts[1])
    if len(versions) != 1:
        raise ValueError(
            f"collector manifest {str(manifest)!r} must pin exactly one core version "
            f"({CORE_MODULE_PREFIX}... v0.x gomod lines), got {sorted(versions)!r}"
        )
    return versions.pop()


def collector_binary_path(manifest: Path, *, home: Path) -> Path:
    """Return where the collector built from ``manifest`` lives (whether or not it was built yet)."""
    return layout.collector_dir(home) / manifest_digest(manifest) / COLLECTOR_BINARY_NAME


@contextlib.contextmanager
def install_lock(home: Path) -> Iterator[None]:
    """Hold the exclusive install lock of ``home`` (blocking) for the duration of the ``with`` block.

    Not re-entrant: a second ``flock`` by the same process on another descriptor waits for the first, forever.
    So each ``ensure_*`` function takes the lock itself and never calls another one while holding it.
    """
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "install.lock", "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def go_executable() -> Path:
    """Return the ``go`` tool: from ``PATH``, else ``/usr/local/go/bin/go``.

    Raises:
        InstallError: when neither exists.
    """
    found = shutil.which("go")
    if found:
        return Path(found)
    fallback = Path("/usr/local/go/bin/go")
    if fallback.is_file():
        return fallback
    raise InstallError("the 'go' tool is not on PATH nor at '/usr/local/go/bin/go'; install Go >= 1.25")


def _run(argv: Sequence[str | Path], *, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> None:
    """Run ``argv`` to completion; on failure raise :class:`InstallError` with the command and its output tail."""
    command = [str(arg) for arg in argv]
    _logger.info("running %s", " ".join(command))
    try:
        subprocess.run(
            command,
            check=True,
            env=None if env is None else dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    except FileNotFoundError as error:
        raise InstallError(f"cannot run {command[0]!r}: {error}") from error
    except subprocess.CalledProcessError as error:
        tail = "\n".join((error.stdout or "").splitlines()[-40:])
        raise InstallError(
            f"command {' '.join(command)!r} failed with exit status {error.returncode}:\n{tail}"
        ) from error


def _go_env(**variables: str) -> dict[str, str]:
    """Return this process's environment with ``variables`` (e.g. ``GOBIN``, ``GOTOOLCHAIN``) set on top."""
    return {**os.environ, **variables}


def _ensure_binary(binary_name: str, version: str, *, home: Path, what: str, build: Callable[[Path], Path]) -> Path:
    """Return ``binary_name`` at ``version`` in ``$OTEL_RL_HOME/bin``, calling ``build`` first if needed.

    ``build(scratch)`` runs when the binary is missing or its version stamp (``<binary_name>.version`` beside it)
    names another version; it works in ``scratch``, a temporary folder in the bin folder, and returns the binary it
    made there, which is then renamed into place, so a failed build leaves nothing half-written. ``what`` names the
    build in the log lines. Takes :func:`install_lock` itself: the caller must not hold it.
    """
    bin_dir = layout.bin_dir(home)
    binary = bin_dir / binary_name
    stamp = bin_dir / f"{binary_name}.version"

    def current() -> bool:
        return binary.is_file() and stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == version

    if current():
        return binary
    with install_lock(home):
        if current():
            return binary
        _logger.info("installing %s into %s", what, bin_dir)
        started = time.monotonic()
        bin_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".go-install-", dir=bin_dir) as scratch:
            os.replace(build(Path(scratch)), binary)
        stamp.write_text(version + "\n", encoding="utf-8")
        _logger.info("installed %s in %.1f s", what, time.monotonic() - started)
    return binary


def ensure_go_binary(package: str, version: str, binary_name: str, *, home: Path) -> Path:
    """Return ``binary_name`` at ``version`` in ``$OTEL_RL_HOME/bin``, installing ``package@version`` if needed.

    ``go install`` runs when the binary is missing or its version stamp (``<binary_name>.version`` beside it)
    names another version. It writes into a temporary GOBIN and the binary is then renamed into place, so a
    failed install leaves nothing half-written. Takes :func:`install_lock` itself: the caller must not hold it.

    Raises:
        InstallError: when ``go install`` fails or produces no ``binary_name``.
    """
    target = f"{package}@{version}"

    def build(scratch: Path) -> Path:
        _run([go_executable(), "install", target], env=_go_env(GOBIN=str(scratch)))
        built = scratch / binary_name
        if not built.is_file():
            raise InstallError(f"'go install {target}' succeeded but produced no {binary_name!r} in GOBIN")
        return built

    return _ensure_binary(binary_name, version, home=home, what=target, build=build)


def ensure_thanos(*, home: Path) -> Path:
    """Return Thanos at :data:`THANOS_VERSION` in ``$OTEL_RL_HOME/bin``, building it first if needed.

    ``go install github.com/thanos-io/thanos/cmd/thanos@version`` is refused (its go.mod has ``replace``
    directives), so the module is fetched (``go mod download``), copied into the scratch folder, made writable, and
    ``go build -tags`` :data:`THANOS_BUILD_TAGS` ``./cmd/thanos`` runs inside the copy, with ``GOTOOLCHAIN`` =
    :data:`THANOS_TOOLCHAIN`. Cached and locked like :func:`ensure_go_binary`; the version stamp names the tags
    too, so a binary built with other tags is rebuilt. A 136 MB binary, minutes to build (docs/scale.md).

    Raises:
        InstallError: when fetching the module or building fails.
    """
    target = f"{THANOS_MODULE}@{THANOS_VERSION}"
    env = _go_env(GOTOOLCHAIN=THANOS_TOOLCHAIN)
    tags = ",".join(THANOS_BUILD_TAGS)

    def build(scratch: Path) -> Path:
        go = go_executable()
        source = _writable_module_copy(go, THANOS_MODULE, THANOS_VERSION, scratch / "module", env=env)
        built = scratch / THANOS_BINARY_NAME
        version = f"-X github.com/prometheus/common/version.Version={THANOS_VERSION.removeprefix('v')}"
        _run([go, "build", f"-tags={tags}", f"-ldflags={version}", "-o", built, "./cmd/thanos"], env=env, cwd=source)
        return built

    stamp = f"{THANOS_VERSION} -tags={tags}"
    return _ensure_binary(THANOS_BINARY_NAME, stamp, home=home, what=f"{target} (go build -tags={tags})", build=build)


def ensure_collector(manifest: Path, *, home: Path) -> Path:
    """Return the collector built from ``manifest`` and its patches, building it first if they were never built.

    The builder writes into a temporary folder next to the destination (its ``dist.output_path`` is overridden
    through the environment variable ``dist.output_path``, which the builder reads on top of the manifest); the
    binary is then renamed into place, so a crashed build never leaves a half-written collector behind. The
    builder is installed (:func:`ensure_go_binary`) before this function takes the install lock for the build.
    With patches, the builder reads an effective manifest in that folder: the original plus one ``replaces``
    entry per patched module, pointing at a patched copy there (:func:`_patched_manifest`).

    Raises:
        FileNotFoundError: when ``manifest`` does not exist.
        ValueError: when the manifest's core version cannot be determined or a patch has no module header.
        InstallError: when installing the builder, fetching or patching a module, or building fails.
    """
    if not manifest.is_file():
        raise FileNotFoundError(f"collector manifest {str(manifest)!r} does not exist")
    target = collector_binary_path(manifest, home=home)
    if target.is_file():
        return target
    version = collector_core_version(manifest)
    builder = ensure_go_binary(BUILDER_PACKAGE, version, BUILDER_BINARY_NAME, home=home)
    with install_lock(home):
        if target.is_file():
            return target
        name = _manifest_binary_name(manifest)
        target.parent.parent.mkdir(parents=True, exist_ok=True)
        _logger.info("building the collector from %s (core %s) into %s; this takes minutes", manifest, version, target)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=".build-", dir=target.parent.parent) as scratch:
            output = Path(scratch) / "dist"
            env = dict(os.environ)
            env["dist.output_path"] = str(output)
            go = go_executable()
            env["PATH"] = f"{go.parent}{os.pathsep}{env.get('PATH', '')}"
            config = _patched_manifest(manifest, go=go, scratch=Path(scratch))
            _run([builder, f"--config={config}"], env=env, cwd=manifest.parent)
            built = output / name
            if not built.is_file():
                raise InstallError(f"the builder succeeded but produced no {name!r} in {scratch!r}")
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(built, target)
        _logger.info("built the collector in %.1f s: %s", time.monotonic() - started, target)
    return target


def _patched_manifest(manifest: Path, *, go: Path, scratch: Path) -> Path:
    """Return the manifest to build: ``manifest`` itself without patches, else an effective manifest in ``scratch``.

    Each patched module is copied from the Go module cache (``go mod download``) into ``scratch/modules``, made
    writable and patched; the effective manifest is the original plus a ``replaces`` entry ``<module> => <copy>``
    for each, after the original's own entries. Several patches of one module apply in file-name order.

    Raises:
        InstallError: when a module cannot be fetched or a patch does not apply cleanly.
    """
    patches = collector_patches(manifest)
    if not patches:
        return manifest
    copies: dict[tuple[str, str], Path] = {}
    for patch in patches:
        key = (patch.module, patch.version)
        if key not in copies:
            destination = scratch / "modules" / f"{patch.module.replace('/', '_')}@{patch.version}"
            copies[key] = _writable_module_copy(go, patch.module, patch.version, destination)
        try:
            _run([_patch_executable(), "-p1", "--batch", "--forward", "--fuzz=0", "-i", patch.path], cwd=copies[key])
        except InstallError as error:
            raise InstallError(
                f"collector patch {str(patch.path)!r} does not apply to {patch.module}@{patch.version}: {error}"
            ) from error
    data = yaml.safe_load(manifest.read_text(encoding="utf-8"))
    data["replaces"] = [
        *(data.get("replaces") or ()),
        *(f"{module} => {copy}" for (module, _), copy in copies.items()),
    ]
    effective = scratch / manifest.name
    effective.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return effective


def _writable_module_copy(
    go: Path, module: str, version: str, destination: Path, *, env: Mapping[str, str] | None = None
) -> Path:
    """Copy ``module@version`` from the Go module cache (:func:`_go_module_dir`) to ``destination``, make every
    file writable (the cache's are read-only) and return ``destination``.

    Raises:
        InstallError: when ``go mod download`` fails.
    """
    shutil.copytree(_go_module_dir(go, module, version, env=env), destination)
    for entry in (destination, *destination.rglob("*")):
        entry.chmod(entry.stat().st_mode | 0o200)
    return destination


def _go_module_dir(go: Path, module: str, version: str, *, env: Mapping[str, str] | None = None) -> Path:
    """Return the module cache folder of ``module@version``, downloading it if needed (read-only files).

    ``env`` replaces the environment of ``go mod download`` (e.g. to set ``GOTOOLCHAIN``).

    Raises:
        InstallError: when ``go mod download`` fails.
    """
    command = [str(go), "mod", "download", "-json", f"{module}@{version}"]
    result = subprocess.run(
        command, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=None if env is None else dict(env)
    )
    try:
        info = json.loads(result.stdout)
    except ValueError:
        info = {}
    if result.returncode != 0 or "Dir" not in info:
        raise InstallError(
            f"command {' '.join(command)!r} failed with exit status {result.returncode}:\n"
            f"{info.get('Error') or result.stderr.strip() or result.stdout.strip()}"
        )
    return Path(info["Dir"])


def _patch_executable() -> Path:
    """Return ``patch`` from ``PATH``, else ``/usr/bin/patch``.

    Raises:
        InstallError: when neither exists.
    """
    found = shutil.which("patch") or ("/usr/bin/patch" if Path("/usr/bin/patch").is_file() else None)
    if found is None:
        raise InstallError("the 'patch' tool is not on PATH nor at '/usr/bin/patch'; install it (apt install patch)")
    return Path(found)


def _manifest_binary_name(manifest: Path) -> str:
    """Return the binary name the builder gives the collector: ``dist.name``, default ``otelcol-custom``."""
    data = yaml.safe_load(manifest.read_text(encoding="utf-8")) or {}
    dist = data.get("dist") or {}
    return str(dist.get("name") or "otelcol-custom")


def ensure_prometheus(*, home: Path) -> tuple[Path, Path]:
    """Return ``(prometheus, promtool)`` at :data:`PROMETHEUS_VERSION`, installing them if needed.

    Raises:
        InstallError: when ``go install`` fails.
    """
    prometheus = ensure_go_binary(f"{PROMETHEUS_MODULE}/cmd/prometheus", PROMETHEUS_VERSION, "prometheus", home=home)
    promtool = ensure_go_binary(f"{PROMETHEUS_MODULE}/cmd/promtool", PROMETHEUS_VERSION, "promtool", home=home)
    return prometheus, promtool


def install_all(*, root: Path | None = None, home: Path | None = None, cluster: bool = False) -> Binaries:
    """Ensure every binary of the stack and return their paths.

    ``root`` defaults to :func:`layout.repository_root`, ``home`` to ``$OTEL_RL_HOME``. Thanos, which only the TSDB
    cluster profile runs and which takes minutes to build, is ensured only with ``cluster=True``
    (:attr:`Binaries.thanos` is ``None`` otherwise).
    """
    root = layout.repository_root() if root is None else root
    home = otel_rl_home() if home is None else home
    prometheus, promtool = ensure_prometheus(home=home)
    victorialogs = ensure_go_binary(VICTORIALOGS_PACKAGE, VICTORIALOGS_VERSION, VICTORIALOGS_BINARY_NAME, home=home)
    collector = ensure_collector(layout.collector_manifest(root), home=home)
    thanos = ensure_thanos(home=home) if cluster else None
    return Binaries(
        collector=collector, victorialogs=victorialogs, prometheus=prometheus, promtool=promtool, thanos=thanos
    )
