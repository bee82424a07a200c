"""Where things lie: the configurations under a data root (:func:`otel_rl_ops.package_data.data_root`, or a
folder laid out like it), and what is installed and run under the home (``$OTEL_RL_HOME``)."""

from __future__ import annotations

from pathlib import Path


def collector_manifest(root: Path) -> Path:
    """Return the OpenTelemetry Collector Builder manifest under the data root ``root``."""
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


def dashboard(root: Path, name: str = "rl-run") -> Path:
    """Return the Grafana dashboard JSON ``name`` under the data root ``root``."""
    return root / "grafana" / "dashboards" / f"{name}.json"


def runbooks(root: Path) -> Path:
    """Return the runbooks every alert links to (``docs/runbooks.md``)."""
    return root / "docs" / "runbooks.md"


def backfill_source(root: Path) -> Path:
    """Return the sources of ``otel-rl-backfill`` (the Go program ``otel-rl replay`` writes TSDB blocks with)."""
    return root / "backfill"


def backfill_dir(home: Path) -> Path:
    """Return the folder holding one built ``otel-rl-backfill`` per digest of its sources."""
    return home / "backfill"


def bin_dir(home: Path) -> Path:
    """Return the folder for Go-installed tools (``GOBIN``): the collector builder and VictoriaLogs."""
    return home / "bin"


def collector_dir(home: Path) -> Path:
    """Return the folder holding one built collector per manifest digest."""
    return home / "collector"


def default_state_dir(home: Path) -> Path:
    """Return the default state directory of a stack (pid files, logs, data)."""
    return home / "stack"
