"""Where the stack's configuration lives in the repository, and where installed things go under the home."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_ROOT = Path(__file__).resolve().parents[3]


def repository_root() -> Path:
    """Return the repository checkout this package was imported from (the folder holding ``collector_config/``).

    The stack runs from a source checkout: the collector manifest and configs, and the Prometheus config and
    rules, are repository files, not package data.

    Raises:
        FileNotFoundError: when the package is not inside a checkout that has ``collector_config/``.
    """
    if not (_PACKAGE_ROOT / "collector_config").is_dir() and not (_PACKAGE_ROOT / "prometheus").is_dir():
        raise FileNotFoundError(
            f"repository root {str(_PACKAGE_ROOT)!r} has neither 'collector_config/' nor 'prometheus/'; "
            "the stack tooling must run from a source checkout of otel-rl"
        )
    return _PACKAGE_ROOT


def collector_manifest(root: Path) -> Path:
    """Return the OpenTelemetry Collector Builder manifest of the checkout at ``root``."""
    return root / "collector_config" / "builder.yaml"


def collector_configs(root: Path) -> tuple[Path, ...]:
    """Return the collector ``--config`` files of the single-process local stack, in merge order."""
    return (root / "collector_config" / "collector.yaml",)


def jaeger_configs(root: Path, *, secure: bool) -> tuple[Path, ...]:
    """Return Jaeger's ``--config`` files in merge order: ``jaeger/jaeger.yaml``, then in the secure profile
    ``jaeger/secure.yaml`` (TLS and basic auth)."""
    folder = root / "jaeger"
    return (folder / "jaeger.yaml", folder / "secure.yaml") if secure else (folder / "jaeger.yaml",)


def prometheus_config(root: Path) -> Path:
    """Return the Prometheus configuration template (rendered per stack by ``services``)."""
    return root / "prometheus" / "prometheus.yml"


def prometheus_rules_dir(root: Path) -> Path:
    """Return the folder whose ``*.yml`` files are Prometheus rule files."""
    return root / "prometheus" / "rules"


def alertmanager_config(root: Path) -> Path:
    """Return the Alertmanager configuration template (rendered per stack by ``components``)."""
    return root / "alertmanager" / "alertmanager.yml"


def bin_dir(home: Path) -> Path:
    """Return the folder for Go-installed tools (``GOBIN``): the collector builder and VictoriaLogs."""
    return home / "bin"


def collector_dir(home: Path) -> Path:
    """Return the folder holding one built collector per manifest digest."""
    return home / "collector"


def default_state_dir(home: Path) -> Path:
    """Return the default state directory of a stack (pid files, logs, data)."""
    return home / "stack"
