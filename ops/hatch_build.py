"""The wheel's data manifest: every file under ``otel_rl_ops/data/`` with its SHA-256 digest and the version.

``otel_rl_ops.package_data.data_root`` reads it from an installed package and refuses to build or start anything
when a listed file is missing or differs (another version's data, or a file edited in place), naming the files. A
source checkout has no manifest: its ``data/`` folders are links to the repository's own configurations.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

MANIFEST = "otel_rl_ops/data-manifest.json"
EXCLUDED_PARTS = frozenset({"__pycache__", "secrets"})


def data_files(data: Path) -> dict[str, str]:
    """Every file under ``data`` (links followed), as its POSIX path relative to ``data`` → SHA-256 hex digest."""
    found = {}
    for path in sorted(data.rglob("*")):
        relative = path.relative_to(data)
        if path.is_file() and not EXCLUDED_PARTS & set(relative.parts) and path.suffix != ".pyc":
            found[relative.as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


class DataManifestHook(BuildHookInterface):  # type: ignore[misc,unused-ignore]
    """Writes the manifest into regular wheels (not editable ones, whose data are the checkout's live files); hatchling
    exists only in the build environment, so the type checker sees the base class as Any."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            return
        root = Path(self.root)
        manifest = {"version": self.metadata.version, "files": data_files(root / "otel_rl_ops" / "data")}
        folder = Path(tempfile.mkdtemp(prefix="otel-rl-ops-manifest-"))
        written = folder / "data-manifest.json"
        written.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        build_data["force_include"][str(written)] = MANIFEST
