"""The Go toolchain as an installer: the ``go`` executable, the install lock, and :func:`ensure_go_binary`, which
builds a pinned :class:`~otel_rl_ops.stack.versions.GoBinary` into ``$OTEL_RL_HOME/bin`` once.

The tools built from one module at one version (Prometheus and promtool; Alertmanager and amtool) share one Go
module and build cache, ``$OTEL_RL_HOME/go-cache/<module>@<version>`` (:func:`go_cache_dir`): the second tool's build
finds the module and the dependencies both use downloaded and their common packages compiled. The folder is kept
while a tool of that module and version is still unbuilt, and removed once all are built or the version changes.

Every install into ``$OTEL_RL_HOME`` holds an exclusive lock on ``$OTEL_RL_HOME/install.lock`` so that concurrent
``up`` calls (a test session and a shell) do not build the same thing twice or read a half-written binary. Each
``ensure_*`` function takes the lock itself and never while holding it (see :func:`install_lock`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from otel_rl_ops.stack import layout, versions
from otel_rl_ops.stack.versions import GoBinary

_logger = logging.getLogger(__name__)


class InstallError(RuntimeError):
    """An external install step (``go``, the builder, ``patch``) failed; the message carries its output."""


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


def go_env(**variables: str) -> dict[str, str]:
    """Return this process's environment with ``variables`` (e.g. ``GOBIN``, ``GOTOOLCHAIN``) set on top."""
    return {**os.environ, **variables}


def run_tool(argv: Sequence[str | Path], *, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> None:
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


def go_cache_dir(home: Path, pin: GoBinary) -> Path:
    """Return the Go module and build caches (``mod/``, ``build/``) that builds of ``pin``'s module at its version
    share: ``$OTEL_RL_HOME/go-cache/<module, / as _>@<version>``."""
    return home / "go-cache" / f"{pin.module.replace('/', '_')}@{pin.version}"


def is_installed(pin: GoBinary, *, home: Path) -> bool:
    """Return whether ``pin``'s executable is in ``$OTEL_RL_HOME/bin`` with the version stamp ``pin`` asks for."""
    bin_dir = layout.bin_dir(home)
    stamp = bin_dir / f"{pin.binary}.version"
    return (
        (bin_dir / pin.binary).is_file() and stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == pin.stamp
    )


def ensure_go_binary(pin: GoBinary, *, home: Path, pins: Sequence[GoBinary] = versions.GO_BINARIES) -> Path:
    """Return ``pin``'s executable in ``$OTEL_RL_HOME/bin``, building it first if it is missing or stale.

    It is built when the binary is missing or its version stamp (``<binary>.version`` beside it) is not
    :attr:`~otel_rl_ops.stack.versions.GoBinary.stamp`: by ``go install <target>`` into a temporary GOBIN, or with
    :attr:`~otel_rl_ops.stack.versions.GoBinary.module_copy` by ``go build`` inside a writable copy of the module
    (:func:`writable_module_copy`) with its :attr:`~otel_rl_ops.stack.versions.GoBinary.module_files` written in. The
    result is renamed into place, so a failed build leaves nothing half-written. The build uses the module's shared
    caches (:func:`go_cache_dir`); afterwards those of the module's other versions are removed, and this version's
    too once every pin of ``pins`` from the same module and version is installed. Takes :func:`install_lock`
    itself: the caller must not hold it.

    Raises:
        InstallError: when fetching or building fails, or ``go install`` produces no such binary.
    """
    bin_dir = layout.bin_dir(home)
    binary = bin_dir / pin.binary
    if is_installed(pin, home=home):
        return binary
    tags = f" -tags={','.join(pin.tags)}" if pin.tags else ""
    what = pin.target + (f" (go build{tags} in a module copy)" if pin.module_copy else "")
    with install_lock(home):
        if is_installed(pin, home=home):
            return binary
        _logger.info("installing %s into %s", what, bin_dir)
        started = time.monotonic()
        bin_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".go-install-", dir=bin_dir) as scratch:
            os.replace(_build(pin, Path(scratch), caches=go_cache_dir(home, pin)), binary)
        (bin_dir / f"{pin.binary}.version").write_text(pin.stamp + "\n", encoding="utf-8")
        _logger.info("installed %s in %.1f s", what, time.monotonic() - started)
        _prune_go_caches(pin, home=home, pins=pins)
    return binary


def _prune_go_caches(pin: GoBinary, *, home: Path, pins: Sequence[GoBinary]) -> None:
    """Remove the shared caches of ``pin``'s module at other versions, and at its version once no pin of ``pins``
    from that module and version is left to build (the caches only speed up those builds; they hold gigabytes)."""
    kept = go_cache_dir(home, pin)
    siblings = [other for other in (pin, *pins) if (other.module, other.version) == (pin.module, pin.version)]
    done = all(is_installed(other, home=home) for other in siblings)
    for folder in kept.parent.glob(f"{pin.module.replace('/', '_')}@*"):
        if folder != kept or done:
            _logger.info("removing the Go caches %s", folder)
            shutil.rmtree(folder, onerror=_make_writable_and_retry)


def _make_writable_and_retry(function: Callable[[str], object], path: str, _error: object) -> None:
    """``shutil.rmtree``'s error handler: make ``path`` and its folder writable and retry, for an entry the go
    command left read-only (the module cache's are without ``-modcacherw``); a second failure raises."""
    for entry in (Path(path).parent, Path(path)):
        entry.chmod(entry.stat().st_mode | 0o700)
    function(path)


def _build(pin: GoBinary, scratch: Path, *, caches: Path) -> Path:
    """Build ``pin`` in the empty folder ``scratch`` with the module and build caches in ``caches`` and return the
    executable made there.

    ``caches`` is the module's shared folder (:func:`go_cache_dir`), not ``GOPATH``'s: these tools' dependency
    versions share next to nothing with each other's modules or the collector, so one cache for all only grew (a
    cold ``make test`` left 15 GB of Go caches, 2026-12-01); per module and version, it serves the module's other
    tools and goes when they are built. A version bump rebuilds from empty caches, as a fresh machine does."""
    go = go_executable()
    env = go_env(
        GOCACHE=str(caches / "build"),
        GOMODCACHE=str(caches / "mod"),
        GOFLAGS=f"{os.environ.get('GOFLAGS', '')} -modcacherw".strip(),
        **({"GOTOOLCHAIN": pin.toolchain} if pin.toolchain else {}),
    )
    flags = [f"-tags={','.join(pin.tags)}"] if pin.tags else []
    if pin.version_variable:
        flags.append(f"-ldflags=-X {pin.version_variable}={pin.version.removeprefix('v')}")
    if pin.module_copy:
        source = writable_module_copy(go, pin.module, pin.version, scratch / "module", env=env)
        for relative, text in pin.module_files:
            (source / relative).parent.mkdir(parents=True, exist_ok=True)
            (source / relative).write_text(text, encoding="utf-8")
        built = scratch / pin.binary
        run_tool([go, "build", *flags, "-o", built, f"./{pin.package}" if pin.package else "."], env=env, cwd=source)
        return built
    run_tool([go, "install", *flags, pin.target], env={**env, "GOBIN": str(scratch)})
    built = scratch / pin.binary
    if not built.is_file():
        raise InstallError(f"'go install {pin.target}' succeeded but produced no {pin.binary!r} in GOBIN")
    return built


def writable_module_copy(
    go: Path, module: str, version: str, destination: Path, *, env: Mapping[str, str] | None = None
) -> Path:
    """Copy ``module@version`` from the Go module cache (downloading it if needed) to ``destination``, make every
    file writable (the cache's are read-only) and return ``destination``.

    ``env`` replaces the environment of ``go mod download`` (e.g. to set ``GOTOOLCHAIN``).

    Raises:
        InstallError: when ``go mod download`` fails.
    """
    shutil.copytree(_go_module_dir(go, module, version, env=env), destination)
    for entry in (destination, *destination.rglob("*")):
        entry.chmod(entry.stat().st_mode | 0o200)
    return destination


def _go_module_dir(go: Path, module: str, version: str, *, env: Mapping[str, str] | None = None) -> Path:
    """Return the module cache folder of ``module@version``, downloading it if needed (read-only files).

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
