"""Tests of the install modules: the pins (versions), the Go tooling (gotools), the collector build's identity
(collector_build) and the install_all face. Only the test marked ``stack`` runs the go command."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest

from otel_rl.ops.stack import collector_build, install, layout, versions
from otel_rl.ops.stack.gotools import InstallError, ensure_go_binary
from otel_rl.ops.stack.versions import GoBinary

PINS = {name: value for name, value in vars(versions).items() if isinstance(value, GoBinary)}


def test_pins_name_their_target_and_stamp() -> None:
    """A pin's go install target is module/package@version (module@version at the root), its stamp adds the tags."""
    assert versions.PROMTOOL.target == "github.com/prometheus/prometheus/cmd/promtool@v0.316.0"
    assert versions.PROMTOOL.stamp == "v0.316.0"
    assert collector_build.collector_builder("v0.161.0").target == "go.opentelemetry.io/collector/cmd/builder@v0.161.0"
    assert versions.THANOS.stamp == "v0.42.5 -tags=netgo,slicelabels"


@pytest.mark.parametrize("name", sorted(name for name, pin in PINS.items() if not pin.module_copy))
def test_go_install_pins_name_the_binary_go_install_writes(name: str) -> None:
    """``go install`` names the executable after the package folder: a pin's binary must be that name (a module
    copy is built with ``go build -o``, which takes any name)."""
    pin = PINS[name]
    assert pin.binary == (pin.package or pin.module).rsplit("/", 1)[-1]


def test_install_all_reuses_what_home_holds(tmp_path: Path) -> None:
    """Binaries whose version stamps match their pins, and a collector at its manifest digest, are returned as they
    are; Thanos only with cluster=True."""
    bin_dir = layout.bin_dir(tmp_path)
    bin_dir.mkdir()
    for pin in (
        versions.PROMETHEUS,
        versions.PROMTOOL,
        versions.VICTORIALOGS,
        versions.ALERTMANAGER,
        versions.AMTOOL,
        versions.JAEGER,
        versions.THANOS,
    ):
        (bin_dir / pin.binary).write_bytes(b"")
        (bin_dir / f"{pin.binary}.version").write_text(pin.stamp + "\n", encoding="utf-8")
    root = layout.repository_root()
    collector = collector_build.collector_binary_path(layout.collector_manifest(root), home=tmp_path)
    collector.parent.mkdir(parents=True)
    collector.write_bytes(b"")
    expected = install.Binaries(
        collector=collector,
        victorialogs=bin_dir / "victoria-logs",
        prometheus=bin_dir / "prometheus",
        promtool=bin_dir / "promtool",
        alertmanager=bin_dir / "alertmanager",
        amtool=bin_dir / "amtool",
        jaeger=bin_dir / "jaeger",
    )
    assert install.install_all(root=root, home=tmp_path) == expected
    assert install.install_all(root=root, home=tmp_path, cluster=True) == dataclasses.replace(
        expected, thanos=bin_dir / "thanos"
    )


def test_manifest_core_version() -> None:
    """The builder version comes from the manifest's core v0 modules."""
    assert collector_build.collector_core_version(layout.collector_manifest(layout.repository_root())) == "v0.161.0"


def test_manifest_with_mixed_core_versions_is_rejected(tmp_path: Path) -> None:
    """A manifest mixing core releases is a ValueError listing them."""
    manifest = tmp_path / "builder.yaml"
    manifest.write_text(
        "receivers:\n  - gomod: go.opentelemetry.io/collector/receiver/otlpreceiver v0.160.0\n"
        "exporters:\n  - gomod: go.opentelemetry.io/collector/exporter/otlpexporter v0.161.0\n",
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match=r"must pin exactly one core version .*\['v0.160.0', 'v0.161.0'\]"):
        collector_build.collector_core_version(manifest)


def test_collector_binary_path_follows_manifest_digest(tmp_path: Path) -> None:
    """The collector's install path is keyed by the first 16 hex of the manifest's SHA-256."""
    manifest = tmp_path / "builder.yaml"
    manifest.write_bytes(b"dist: {}\n")
    digest = hashlib.sha256(b"dist: {}\n").hexdigest()[:16]
    path = collector_build.collector_binary_path(manifest, home=tmp_path)
    assert path == tmp_path / "collector" / digest / "otelcol-rl"


def test_manifest_must_be_a_mapping(tmp_path: Path) -> None:
    """A manifest that is not a YAML mapping is a ValueError naming the file."""
    manifest = tmp_path / "builder.yaml"
    manifest.write_text("- just a list\n", encoding="utf-8")
    with pytest.raises(ValueError, match="collector manifest .* must be a YAML mapping, got list"):
        collector_build.collector_core_version(manifest)


def test_missing_manifest_is_reported(tmp_path: Path) -> None:
    """Building from a manifest that does not exist is a FileNotFoundError naming it."""
    with pytest.raises(FileNotFoundError, match="collector manifest .*nope.yaml' does not exist"):
        collector_build.ensure_collector(tmp_path / "nope.yaml", home=tmp_path)


@pytest.mark.stack
def test_failed_go_install_is_an_install_error(tmp_path: Path) -> None:
    """A go install that fails raises InstallError with the command and its output, and writes no stamp."""
    missing = dataclasses.replace(versions.VICTORIALOGS, version="v0.0.0-nonexistent")
    with pytest.raises(InstallError, match=r"(?s)go install .*victoria-logs@v0\.0\.0-nonexistent.* failed with exit"):
        ensure_go_binary(missing, home=tmp_path)
    assert not (tmp_path / "bin" / "victoria-logs.version").exists()


def test_module_files_need_a_module_copy() -> None:
    """Files to write into a module need a writable copy of it (the module cache is read-only): a ValueError."""
    with pytest.raises(ValueError, match=r'"module_files" needs "module_copy" .*got \(\(\'ui/x.html\', \'x\'\),\)'):
        GoBinary(module="example.com/m", version="v1.0.0", binary="m", module_files=(("ui/x.html", "x"),))


def test_alertmanager_is_built_with_placeholders_for_the_web_ui_it_embeds() -> None:
    """Alertmanager's ui/web.go embeds app/dist, which its module lacks: the pin builds in a module copy with a page
    in each asset folder the UI serves (elm and mantine), and amtool, which embeds nothing, by go install."""
    assert versions.ALERTMANAGER.module_copy and not versions.AMTOOL.module_copy
    assert [path for path, _ in versions.ALERTMANAGER.module_files] == [
        "ui/app/dist/elm/index.html",
        "ui/app/dist/mantine/index.html",
    ]
    assert versions.ALERTMANAGER.version == versions.AMTOOL.version == "v0.35.0"
