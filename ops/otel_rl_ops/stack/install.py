"""Install the stack's binaries, reusing whatever is already there: :func:`install_all` and its :class:`Binaries`.

What the demo and ``otel-rl stack up`` run is always installed:

* The collector: built from the package's builder manifest and its patches, cached by their digest
  (:mod:`otel_rl_ops.stack.collector_build`).
* VictoriaLogs and Prometheus: the pins of :mod:`otel_rl_ops.stack.versions`, ``go install``-ed into
  ``$OTEL_RL_HOME/bin`` with a version stamp (:func:`~otel_rl_ops.stack.gotools.ensure_go_binary`).
* Alertmanager (``go build`` in a copy of its module, which lacks the web UI's assets).
* Jaeger v2, the trace store (``go build`` in a copy of its module, whose go.mod has a ``replace`` directive).
* ``otel-rl-backfill``, which ``otel-rl replay`` writes TSDB blocks with: the package's ``backfill/`` Go program, cached
  by the digest of its sources (:mod:`otel_rl_ops.stack.backfill_build`).

The rest only when asked, since nothing the stack starts runs them and each takes minutes cold:

* promtool and amtool (``go install``), the test tools that check configs, rules and routes: ``tools=True``,
  ``otel-rl stack install --tools`` (``make test``). Each reuses the Go module and build caches that the
  Prometheus or Alertmanager build left (:func:`~otel_rl_ops.stack.gotools.go_cache_dir`).
* Thanos, the TSDB cluster profile's (``go build`` inside a copy of its module): ``cluster=True``,
  ``otel-rl stack install --cluster``.

Every step holds the install lock of ``$OTEL_RL_HOME`` (:func:`~otel_rl_ops.stack.gotools.install_lock`), so concurrent
installs neither build one thing twice nor read a half-written binary.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from otel_rl_ops.package_data import data_root
from otel_rl_ops.stack import layout, versions
from otel_rl_ops.stack.backfill_build import ensure_backfill
from otel_rl_ops.stack.collector_build import ensure_collector
from otel_rl_ops.stack.env import otel_rl_home
from otel_rl_ops.stack.gotools import ensure_go_binary


@dataclass(frozen=True, kw_only=True)
class Binaries:
    """Paths of the installed executables of one stack."""

    collector: Path
    """The custom collector built from the package's manifest."""
    victorialogs: Path
    """The VictoriaLogs single-node server."""
    prometheus: Path
    """The Prometheus server."""
    promtool: Path | None = None
    """Prometheus's companion tool (config and rule checks), or ``None`` when it was not installed (the default
    install skips it: :func:`install_all` with ``tools=False``)."""
    alertmanager: Path
    """Alertmanager, which groups, inhibits, silences and delivers the alerts of Prometheus (or Thanos Ruler)."""
    amtool: Path | None = None
    """Alertmanager's companion tool (config checks, route tests), or ``None`` when it was not installed (as
    :attr:`promtool`)."""
    jaeger: Path
    """Jaeger v2, the trace store of the collector's traces pipeline (one trace per step across ranks)."""
    backfill: Path | None = None
    """``otel-rl-backfill`` (TSDB blocks and the rules' series of replayed runs), or ``None`` when it was not built
    (only ``otel-rl replay`` runs it: :func:`install_all` with ``replay=True``)."""
    thanos: Path | None = None
    """Thanos (``receive``, ``query`` and ``rule`` of the TSDB cluster profile), or ``None`` when it was not built
    (the default install skips it: :func:`install_all` with ``cluster=False``)."""


def install_all(
    *,
    root: Path | None = None,
    home: Path | None = None,
    tools: bool = False,
    cluster: bool = False,
    replay: bool = False,
) -> Binaries:
    """Ensure the binaries of the stack and return their paths.

    ``root`` defaults to :func:`layout.data_root`, ``home`` to ``$OTEL_RL_HOME``. promtool and amtool, which
    only tests and users run, are ensured only with ``tools=True``; Thanos, which only the TSDB cluster profile runs,
    only with ``cluster=True``; ``otel-rl-backfill``, which only ``otel-rl replay`` runs, only with ``replay=True``
    (a cold build takes minutes, which ``make demo`` need not pay); the fields of those not ensured are ``None``.

    Raises:
        InstallError: when a build fails (:class:`~otel_rl_ops.stack.gotools.InstallError`).
        FileNotFoundError, ValueError: when the collector manifest is missing or malformed (:func:`ensure_collector`).
    """
    root = data_root() if root is None else root
    home = otel_rl_home() if home is None else home
    return Binaries(
        prometheus=ensure_go_binary(versions.PROMETHEUS, home=home),
        promtool=ensure_go_binary(versions.PROMTOOL, home=home) if tools else None,
        victorialogs=ensure_go_binary(versions.VICTORIALOGS, home=home),
        alertmanager=ensure_go_binary(versions.ALERTMANAGER, home=home),
        amtool=ensure_go_binary(versions.AMTOOL, home=home) if tools else None,
        jaeger=ensure_go_binary(versions.JAEGER, home=home),
        collector=ensure_collector(layout.collector_manifest(root), home=home),
        backfill=ensure_backfill(layout.backfill_source(root), home=home) if replay else None,
        thanos=ensure_go_binary(versions.THANOS, home=home) if cluster else None,
    )
