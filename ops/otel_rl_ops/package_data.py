"""The package's data: the configurations the tooling runs, and the check that they are this release's, whole.

The data root is ``otel_rl_ops/data/``, laid out as the repository's top level: ``collector_config/`` (the builder
manifest, patches, processors' Go sources and every collector configuration), ``prometheus/`` (configuration and
rules), ``alertmanager/``, ``jaeger/``, ``grafana/dashboards/`` and ``grafana/provisioning/``, ``deploy/slurm/`` and
``docs/`` (the runbooks the alerts link to), ``backfill/`` (the Go program ``otel-rl replay`` writes blocks with).
In a source checkout its folders are symbolic links to the repository's own, the single sources; a built wheel carries
copies and ``data-manifest.json`` (``ops/hatch_build.py``: every file's SHA-256 digest and the version), which
:func:`data_root` checks before anything is built or started.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path

from otel_rl_contract import __version__

MANIFEST = "data-manifest.json"
"""The data manifest's file name beside ``data/`` in an installed package (absent in a source checkout)."""

REQUIRED = (
    "collector_config/builder.yaml",
    "collector_config/collector.yaml",
    "prometheus/prometheus.yml",
    "alertmanager/alertmanager.yml",
    "jaeger/jaeger.yaml",
    "grafana/dashboards/rl-run.json",
    "backfill/go.mod",
)
"""Files whose absence means the data folder is not otel-rl's at all, whatever a manifest says."""


class DataError(FileNotFoundError):
    """The package's data are missing, incomplete or from another version: nothing may be built or started."""


def package_dir() -> Path:
    """Return the folder of the installed ``otel_rl_ops`` package, as a real path (the tooling runs its files)."""
    folder = resources.files("otel_rl_ops")
    if not isinstance(folder, Path):
        raise DataError(f"otel_rl_ops is installed as {folder!r}, not a folder: install it from a wheel or a checkout")
    return folder


def data_root(package: Path | None = None) -> Path:
    """Return the data root of ``package`` (default: this installed package), after checking it.

    An installed package's manifest must carry this version and every file it lists must be there with its digest;
    any required file must exist in either case.

    Raises:
        DataError: naming the missing or differing files (at most ten of each) and the versions.
    """
    folder = package_dir() if package is None else package
    root = folder / "data"
    missing = [name for name in REQUIRED if not (root / name).is_file()]
    manifest_path = folder / MANIFEST
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        if manifest.get("version") != __version__:
            raise DataError(
                f"the data of otel-rl-ops in {str(root)!r} are of version {manifest.get('version')!r}, the tooling of "
                f"{__version__!r}: reinstall otel-rl-ops so that both come from one release"
            )
        changed = []
        for name, digest in sorted(manifest.get("files", {}).items()):
            path = root / name
            if not path.is_file():
                missing.append(name)
            elif hashlib.sha256(path.read_bytes()).hexdigest() != digest:
                changed.append(name)
        if changed:
            raise DataError(
                f"{len(changed)} data file(s) of otel-rl-ops {__version__} in {str(root)!r} differ from the release: "
                f"{', '.join(changed[:10])}; reinstall otel-rl-ops (configure a stack through `otel-rl stack up` "
                "options instead of editing its package)"
            )
    if missing:
        raise DataError(
            f"{len(missing)} data file(s) of otel-rl-ops {__version__} are missing from {str(root)!r}: "
            f"{', '.join(sorted(set(missing))[:10])}; reinstall otel-rl-ops"
        )
    return root
