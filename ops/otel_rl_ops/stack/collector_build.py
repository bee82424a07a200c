"""The patched collector build: the builder manifest's identity (:func:`manifest_digest`), its core version, its
patches of upstream modules, and :func:`ensure_collector`.

``go install`` the OpenTelemetry Collector Builder at the core version the manifest pins, then build the manifest
into ``$OTEL_RL_HOME/collector/<digest>/otelcol-rl`` where ``<digest>`` is the first 16 hex digits of the SHA-256
of the manifest bytes and of the patches beside it (:func:`collector_patches`). A changed manifest or patch is a
new digest, hence a new build; an unchanged one is never rebuilt.

The container image's build runs this module as it is (``collector_config/Dockerfile``), with nothing but PyYAML,
``go`` and ``patch``: it imports only ``otel_rl_ops.stack`` modules that need no other package.

    python3 -m otel_rl_ops.stack.collector_build --manifest collector_config/builder.yaml --home DIR
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import yaml

from otel_rl_ops.stack import layout
from otel_rl_ops.stack.gotools import (
    InstallError,
    ensure_go_binary,
    go_executable,
    install_lock,
    run_tool,
    writable_module_copy,
)
from otel_rl_ops.stack.versions import COLLECTOR_BUILDER_MODULE, COLLECTOR_CORE_MODULE_PREFIX, GoBinary

_logger = logging.getLogger(__name__)

COLLECTOR_BINARY_NAME: Final = "otelcol-rl"
"""File name of the built collector."""

_MANIFEST_COMPONENT_KEYS: Final = ("receivers", "processors", "exporters", "connectors", "extensions", "providers")

PATCHES_DIR_NAME: Final = "patches"
"""Folder beside the manifest whose ``*.patch`` files are applied to upstream Go modules before a build."""

_PATCH_HEADER: Final = re.compile(r"# module: (\S+) (v\S+)\n")
"""First line of a patch file: the Go module and version it applies to."""


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


def manifest_digest(manifest: Path, *, patched: bool = True) -> str:
    """Return the collector build's identity: the first 16 hex digits of the SHA-256 of the manifest's bytes,
    followed by the path and bytes of every file of its local modules (:func:`local_module_files`), then the name
    and bytes of each of its patches (none with ``patched=False``)."""
    digest = hashlib.sha256(manifest.read_bytes())
    for path in local_module_files(manifest):
        digest.update(b"\0" + path.relative_to(manifest.parent).as_posix().encode() + b"\0" + path.read_bytes())
    for patch in collector_patches(manifest) if patched else ():
        digest.update(b"\0" + patch.path.name.encode() + b"\0" + patch.path.read_bytes())
    return digest.hexdigest()[:16]


def local_module_files(manifest: Path) -> tuple[Path, ...]:
    """Return the files of the manifest's local components (entries with a ``path``, such as otel-rl's own
    ``pointcheck`` processor), sorted: their sources are part of the build's identity."""
    data = yaml.safe_load(manifest.read_text(encoding="utf-8"))
    entries = (
        [entry for key in _MANIFEST_COMPONENT_KEYS for entry in data.get(key) or ()] if isinstance(data, dict) else []
    )
    folders = [manifest.parent / entry["path"] for entry in entries if isinstance(entry, dict) and entry.get("path")]
    return tuple(sorted({path for folder in folders for path in folder.rglob("*") if path.is_file()}))


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
            if len(parts) == 2 and parts[0].startswith(COLLECTOR_CORE_MODULE_PREFIX) and parts[1].startswith("v0."):
                versions.add(parts[1])
    if len(versions) != 1:
        raise ValueError(
            f"collector manifest {str(manifest)!r} must pin exactly one core version "
            f"({COLLECTOR_CORE_MODULE_PREFIX}... v0.x gomod lines), got {sorted(versions)!r}"
        )
    return versions.pop()


def collector_builder(version: str) -> GoBinary:
    """Return the OpenTelemetry Collector Builder pinned at ``version`` (the manifest's core version)."""
    return GoBinary(module=COLLECTOR_BUILDER_MODULE, version=version, binary="builder")


def collector_binary_path(manifest: Path, *, home: Path, patched: bool = True) -> Path:
    """Return where the collector built from ``manifest`` (with its patches unless ``patched=False``) lives, whether
    or not it was built yet."""
    return layout.collector_dir(home) / manifest_digest(manifest, patched=patched) / COLLECTOR_BINARY_NAME


def ensure_collector(manifest: Path, *, home: Path, patched: bool = True) -> Path:
    """Return the collector built from ``manifest`` and its patches, building it first if they were never built.

    ``patched=False`` builds the manifest as upstream ships its modules, without the patches: what a stock contrib
    collector of the same release does (the tests that show the merge canary catching it use that build). It is
    cached like the patched one, under the manifest's own digest.

    The builder writes into a temporary folder next to the destination (its ``dist.output_path`` is overridden
    through the environment variable ``dist.output_path``, which the builder reads on top of the manifest); the
    binary is then renamed into place, so a crashed build never leaves a half-written collector behind. The
    builder is installed (:func:`ensure_go_binary`) before this function takes the install lock for the build.
    The builder reads an effective manifest in that folder: the original with copies of its local components and,
    with patches, one ``replaces`` entry per patched module, pointing at a patched copy there
    (:func:`_effective_manifest`).

    Raises:
        FileNotFoundError: when ``manifest`` does not exist.
        ValueError: when the manifest's core version cannot be determined or a patch has no module header.
        InstallError: when installing the builder, fetching or patching a module, or building fails.
    """
    if not manifest.is_file():
        raise FileNotFoundError(f"collector manifest {str(manifest)!r} does not exist")
    target = collector_binary_path(manifest, home=home, patched=patched)
    if target.is_file():
        return target
    version = collector_core_version(manifest)
    builder = ensure_go_binary(collector_builder(version), home=home)
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
            config = _effective_manifest(manifest, go=go, scratch=Path(scratch), patched=patched)
            run_tool([builder, f"--config={config}"], env=env, cwd=manifest.parent)
            built = output / name
            if not built.is_file():
                raise InstallError(f"the builder succeeded but produced no {name!r} in {scratch!r}")
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(built, target)
        _logger.info("built the collector in %.1f s: %s", time.monotonic() - started, target)
    return target


def _effective_manifest(manifest: Path, *, go: Path, scratch: Path, patched: bool) -> Path:
    """Return the manifest to build, written into ``scratch``: the original with its local components copied beside
    it and, when ``patched``, its patched modules.

    The binary records replacement paths (its build info), so every path the build sees is relative to the builder's
    output folder ``scratch/dist`` and the same in every build: each local component (an entry with a ``path``) is
    copied into ``scratch/local/<folder>``; each patched module is copied from the Go module cache (``go mod
    download``) into ``scratch/modules``, made writable and patched, and replaced by a ``replaces`` entry ``<module>
    => ../modules/<copy>`` after the original's own. Several patches of one module apply in file-name order.

    Raises:
        InstallError: when a module cannot be fetched or a patch does not apply cleanly.
    """
    data = yaml.safe_load(manifest.read_text(encoding="utf-8"))
    for kind in _MANIFEST_COMPONENT_KEYS:
        for entry in data.get(kind) or ():
            if isinstance(entry, dict) and entry.get("path"):
                source = manifest.parent / entry["path"]
                copy = scratch / "local" / source.name
                if not copy.exists():  # one module may hold several components
                    shutil.copytree(source, copy)
                entry["path"] = str(copy)
    copies: dict[tuple[str, str], Path] = {}
    for patch in collector_patches(manifest) if patched else ():
        key = (patch.module, patch.version)
        if key not in copies:
            destination = scratch / "modules" / f"{patch.module.replace('/', '_')}@{patch.version}"
            copies[key] = writable_module_copy(go, patch.module, patch.version, destination)
        try:
            run_tool(
                [_patch_executable(), "-p1", "--batch", "--forward", "--fuzz=0", "-i", patch.path], cwd=copies[key]
            )
        except InstallError as error:
            raise InstallError(
                f"collector patch {str(patch.path)!r} does not apply to {patch.module}@{patch.version}: {error}"
            ) from error
    data["replaces"] = [
        *(data.get("replaces") or ()),
        *(f"{module} => ../modules/{copy.name}" for (module, _), copy in copies.items()),
    ]
    effective = scratch / manifest.name
    effective.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return effective


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


def main(argv: list[str] | None = None) -> int:
    """Build ``--manifest`` (with its patches) into ``--home``, as the stack does, and print the binary's path."""
    parser = argparse.ArgumentParser(description="Build the otel-rl collector distribution (builder.yaml and patches).")
    parser.add_argument(
        "--manifest", type=Path, required=True, help="the builder manifest (collector_config/builder.yaml)"
    )
    parser.add_argument("--home", type=Path, required=True, help="where the builder and the collector go")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    print(ensure_collector(args.manifest.resolve(), home=args.home.resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
