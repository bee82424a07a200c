"""The collector's container image without a checkout: a Docker build context made from the package's data.

``collector_config/Dockerfile`` builds from a context laid out like the repository's top level: the collector's
configuration (``collector_config/``) and the stack's own build code (``ops/otel_rl_ops/stack/``, run as
``python3 -m otel_rl_ops.stack.collector_build``). In a checkout that context is the repository itself (as
``docker-compose.yml`` builds it); :func:`write_context` lays out the same files from an installed package, so
``docker build`` makes the same image: the same manifest, patches and build code, hence the same collector.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from otel_rl_contract import __version__

IMAGE = f"otel-rl/otelcol-rl:{__version__}"
"""The image's name and tag: the otel-rl version (``docker-compose.yml`` and the Helm chart use it)."""

BUILD_CODE = ("__init__.py", "stack")
"""What the image's build stage needs of ``otel_rl_ops``: the package marker and the stack modules."""


def write_context(data_root: Path, package: Path, folder: Path) -> Path:
    """Write the build context into ``folder`` (created; must not exist or be empty): ``collector_config/`` from
    ``data_root`` and ``ops/otel_rl_ops/{__init__.py,stack/}`` from ``package``; return the Dockerfile's path.

    Raises:
        FileExistsError: when ``folder`` exists and is not empty.
    """
    if folder.exists() and any(folder.iterdir()):
        raise FileExistsError(f"the image context folder {str(folder)!r} is not empty; give a new or empty folder")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(data_root / "collector_config", folder / "collector_config", ignore=ignore, dirs_exist_ok=True)
    code = folder / "ops" / "otel_rl_ops"
    code.mkdir(parents=True)
    shutil.copy2(package / "__init__.py", code / "__init__.py")
    shutil.copytree(package / "stack", code / "stack", ignore=ignore)
    return folder / "collector_config" / "Dockerfile"


def build_command(folder: Path) -> list[str]:
    """The ``docker build`` command of the context in ``folder``."""
    return ["docker", "build", "-f", str(folder / "collector_config" / "Dockerfile"), "-t", IMAGE, str(folder)]
