"""Every pinned version and Go module path of the stack, in one place.

Each Go-built executable is one :class:`GoBinary` pin; :func:`otel_rl_ops.stack.gotools.ensure_go_binary` installs
any of them. Adding a component is a pin here and one ``ensure_go_binary`` line in :mod:`otel_rl_ops.stack.install`.
The collector is the exception: its components and their versions are the builder manifest
(``collector_config/builder.yaml``), and the builder is installed at the core version that manifest pins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, kw_only=True)
class GoBinary:
    """One executable built from a pinned version of a Go module, installed into ``$OTEL_RL_HOME/bin``."""

    module: str
    """The Go module path, e.g. ``"github.com/prometheus/prometheus"``."""
    version: str
    """The module version, e.g. ``"v0.316.0"``."""
    package: str = ""
    """The main package's folder inside the module, e.g. ``"cmd/prometheus"``; ``""`` for the module root."""
    binary: str
    """The executable's file name (for ``go install``, the package folder's last element)."""
    tags: tuple[str, ...] = ()
    """Go build tags (``-tags``); the version stamp names them, so a binary built with other tags is rebuilt."""
    toolchain: str | None = None
    """``GOTOOLCHAIN`` for fetching and building, when the module needs a newer Go than some local installs (the
    go command downloads that toolchain once, a module of its own, seconds)."""
    version_variable: str | None = None
    """A string variable set to the version without its ``v`` (``-ldflags=-X <variable>=<version>``), for modules
    whose ``--version`` would otherwise print nothing."""
    module_copy: bool = False
    """Build with ``go build`` inside a writable copy of the module instead of ``go install package@version``, which
    refuses a module whose go.mod has ``replace`` directives."""
    module_files: tuple[tuple[str, str], ...] = ()
    """``(path inside the module, text)`` of files written into the module copy before building, for files the
    module lacks but its build needs (Alertmanager's embedded web UI assets); needs :attr:`module_copy`."""

    def __post_init__(self) -> None:
        if self.module_files and not self.module_copy:
            raise ValueError(
                f'"module_files" needs "module_copy" (the module cache is read-only), got {self.module_files!r}'
            )

    @property
    def target(self) -> str:
        """``<package path>@<version>``, as ``go install`` takes it."""
        return f"{self.module}/{self.package}@{self.version}" if self.package else f"{self.module}@{self.version}"

    @property
    def stamp(self) -> str:
        """The version stamp beside the installed binary: the version, then the build tags if any."""
        return f"{self.version} -tags={','.join(self.tags)}" if self.tags else self.version


COLLECTOR_BUILDER_MODULE: Final = "go.opentelemetry.io/collector/cmd/builder"
"""Go module of the OpenTelemetry Collector Builder (``ocb``); installed at the manifest's core version."""

COLLECTOR_CORE_MODULE_PREFIX: Final = "go.opentelemetry.io/collector/"
"""Module path prefix of the collector core; its v0.x modules carry the release version the builder must match."""

VICTORIALOGS: Final = GoBinary(
    module="github.com/VictoriaMetrics/VictoriaLogs",
    package="app/victoria-logs",
    version="v1.52.1",
    binary="victoria-logs",
)
"""The VictoriaLogs single-node server."""

PROMETHEUS_MODULE: Final = "github.com/prometheus/prometheus"
"""Go module of Prometheus 3.16.0 (native histograms stable, remote-write 2.0 receiver). It has no built web UI;
its API, which Grafana, the report and the tests use, is complete."""

PROMETHEUS_VERSION: Final = "v0.316.0"
"""Pinned Prometheus module version (Prometheus 3.16.0): the server and promtool come from the same one."""

PROMETHEUS: Final = GoBinary(
    module=PROMETHEUS_MODULE,
    package="cmd/prometheus",
    version=PROMETHEUS_VERSION,
    binary="prometheus",
    tags=("remove_all_sd",),
)
"""The Prometheus server, without the cloud and cluster service discoveries (``remove_all_sd``: Prometheus's own
build tag, ``plugins/``): the stack's scrape and alerting targets are static, and file and HTTP discovery stay. The
AWS, Azure, GCE, Kubernetes, ... SDKs were most of its cold build (13 min 23 s of ``go install`` on 2 cores, from
empty module and build caches)."""

PROMTOOL: Final = GoBinary(
    module=PROMETHEUS_MODULE,
    package="cmd/promtool",
    version=PROMETHEUS_VERSION,
    binary="promtool",
    tags=("remove_all_sd",),
)
"""Prometheus's companion tool (config and rule checks, rule unit tests), built with the server's tags: the same
configs pass both (neither knows cloud or Kubernetes discovery), and it reuses the server's module and build cache
instead of compiling the cloud SDKs (186 s of CPU instead of 422 s, measured 2026-12-02)."""

THANOS: Final = GoBinary(
    module="github.com/thanos-io/thanos",
    package="cmd/thanos",
    version="v0.42.5",
    binary="thanos",
    tags=("netgo", "slicelabels"),
    toolchain="go1.26.10",
    version_variable="github.com/prometheus/common/version.Version",
    module_copy=True,
)
"""Thanos, one binary for every component (``receive``, ``query``, ...) of the TSDB cluster profile; native
histograms are on by default in ``receive``. Its go.mod has ``replace`` directives and says ``go 1.26.10``. The tags
are its release build's (``.promu.yml``); ``slicelabels`` is required: Thanos converts Prometheus
``labels.Labels`` to its own label slices without copying, which only matches Prometheus's slice implementation
(without the tag a receiver panics in gRPC marshalling on the querier's first call, measured). A 136 MB binary,
minutes to build (docs/scale.md)."""

ALERTMANAGER_MODULE: Final = "github.com/prometheus/alertmanager"
"""Go module of Alertmanager (routing, grouping, inhibition, silences and delivery of the rules' alerts)."""

ALERTMANAGER_VERSION: Final = "v0.35.0"
"""Pinned Alertmanager module version: the server and amtool come from the same one."""

ALERTMANAGER_UI_PLACEHOLDER: Final = (
    "<!doctype html><title>Alertmanager</title>"
    "<p>This Alertmanager was built by otel-rl from its Go module, which holds no built web UI. "
    'Its API is complete: <a href="api/v2/alerts">/api/v2/alerts</a>, <a href="api/v2/silences">/api/v2/silences</a>; '
    "otel-rl alerts reads and silences from a terminal.\n"
)
"""The page that stands in for each of the web UI's built asset folders (``ui/app/dist/elm``, ``.../mantine``):
``ui/web.go`` embeds them (``//go:embed app/dist``), the module lacks them, and ``go build`` fails on an embed
pattern that matches no file."""

ALERTMANAGER: Final = GoBinary(
    module=ALERTMANAGER_MODULE,
    package="cmd/alertmanager",
    version=ALERTMANAGER_VERSION,
    binary="alertmanager",
    version_variable="github.com/prometheus/common/version.Version",
    module_copy=True,
    module_files=(
        ("ui/app/dist/elm/index.html", ALERTMANAGER_UI_PLACEHOLDER),
        ("ui/app/dist/mantine/index.html", ALERTMANAGER_UI_PLACEHOLDER),
    ),
)
"""The Alertmanager server, built in a copy of its module with a placeholder for the web UI's assets (the API, which
Prometheus, Thanos Ruler, ``otel-rl alerts`` and the tests use, is complete)."""

AMTOOL: Final = GoBinary(
    module=ALERTMANAGER_MODULE,
    package="cmd/amtool",
    version=ALERTMANAGER_VERSION,
    binary="amtool",
    version_variable="github.com/prometheus/common/version.Version",
)
"""Alertmanager's companion tool (``check-config``, ``config routes test``)."""

JAEGER: Final = GoBinary(
    module="github.com/jaegertracing/jaeger",
    package="cmd/jaeger",
    version="v1.76.0",
    binary="jaeger",
    version_variable="github.com/jaegertracing/jaeger/internal/version.latestVersion",
    module_copy=True,
)
"""Jaeger v2 (module version v1.76.0 is the release v2.13.0): the trace store the collector's traces pipeline writes
to, with its query API (``/api/v3/traces/<id>``, ``/api/v3/traces`` search). One binary, itself a collector
distribution: the OTLP receiver, the memory or Badger trace storage and the ``jaeger_query`` extension. Its go.mod
has a ``replace`` directive (``Shopify/sarama``), so it is built in a module copy; the module holds no built web UI
(``cmd/query/app/ui/actual`` has only a ``.gitignore``), so the UI is Jaeger's own placeholder page and the API is
complete. Apache-2.0."""

GO_BINARIES: Final = (VICTORIALOGS, PROMETHEUS, PROMTOOL, ALERTMANAGER, AMTOOL, JAEGER, THANOS)
"""Every Go-built pin of the stack. Pins of one module at one version (Prometheus and promtool; Alertmanager and
amtool) share their Go module and build caches until all of them are built
(:func:`otel_rl_ops.stack.gotools.ensure_go_binary`)."""
