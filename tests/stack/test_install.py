"""Tests of the install modules: the pins (versions), the Go tooling (gotools), the collector build's identity
(collector_build) and the install_all face. Only the test marked ``stack`` runs the go command."""

from __future__ import annotations

import dataclasses
import hashlib
import zipfile
from pathlib import Path

import pytest
from otel_rl_ops import cli
from otel_rl_ops.package_data import data_root
from otel_rl_ops.stack import backfill_build, collector_build, install, layout, versions
from otel_rl_ops.stack.env import OTEL_RL_HOME
from otel_rl_ops.stack.gotools import InstallError, ensure_go_binary, go_cache_dir
from otel_rl_ops.stack.versions import GoBinary

PINS = {name: value for name, value in vars(versions).items() if isinstance(value, GoBinary)}


def test_pins_name_their_target_and_stamp() -> None:
    """A pin's go install target is module/package@version (module@version at the root), its stamp adds the tags."""
    assert versions.PROMTOOL.target == "github.com/prometheus/prometheus/cmd/promtool@v0.316.0"
    assert versions.PROMTOOL.stamp == "v0.316.0 -tags=remove_all_sd"
    assert collector_build.collector_builder("v0.161.0").target == "go.opentelemetry.io/collector/cmd/builder@v0.161.0"
    assert versions.THANOS.stamp == "v0.42.5 -tags=netgo,slicelabels"


@pytest.mark.parametrize("name", sorted(name for name, pin in PINS.items() if not pin.module_copy))
def test_go_install_pins_name_the_binary_go_install_writes(name: str) -> None:
    """``go install`` names the executable after the package folder: a pin's binary must be that name (a module
    copy is built with ``go build -o``, which takes any name)."""
    pin = PINS[name]
    assert pin.binary == (pin.package or pin.module).rsplit("/", 1)[-1]


def _stamp(home: Path, *pins: GoBinary) -> Path:
    """Put an (empty) executable with its version stamp for each of ``pins`` into ``home``'s bin folder."""
    bin_dir = layout.bin_dir(home)
    bin_dir.mkdir(parents=True, exist_ok=True)
    for pin in pins:
        (bin_dir / pin.binary).write_bytes(b"")
        (bin_dir / f"{pin.binary}.version").write_text(pin.stamp + "\n", encoding="utf-8")
    return bin_dir


def _with_collector(home: Path) -> Path:
    """Put an (empty) collector at the repository manifest's digest into ``home``; return its path."""
    collector = collector_build.collector_binary_path(layout.collector_manifest(data_root()), home=home)
    collector.parent.mkdir(parents=True)
    collector.write_bytes(b"")
    return collector


def _with_backfill(home: Path) -> Path:
    """Put an (empty) otel-rl-backfill at the package sources' digest into ``home``; return its path."""
    source = layout.backfill_source(data_root())
    backfill = layout.backfill_dir(home) / backfill_build.backfill_digest(source) / backfill_build.BACKFILL_BINARY_NAME
    backfill.parent.mkdir(parents=True)
    backfill.write_bytes(b"")
    return backfill


DEMO_PINS = (versions.PROMETHEUS, versions.VICTORIALOGS, versions.ALERTMANAGER, versions.JAEGER)
"""What the demo and ``otel-rl stack up`` run, besides the collector."""


def test_default_install_is_what_the_stack_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the stack's own binaries in place, the default install builds nothing more: no promtool, amtool or
    Thanos (GOPROXY=off makes any attempt fail at once instead of fetching)."""
    monkeypatch.setenv("GOPROXY", "off")
    bin_dir = _stamp(tmp_path, *DEMO_PINS)
    collector = _with_collector(tmp_path)
    assert install.install_all(root=data_root(), home=tmp_path) == install.Binaries(
        collector=collector,
        victorialogs=bin_dir / "victoria-logs",
        prometheus=bin_dir / "prometheus",
        alertmanager=bin_dir / "alertmanager",
        jaeger=bin_dir / "jaeger",
    )
    assert sorted(path.name for path in bin_dir.iterdir() if path.suffix != ".version") == [
        "alertmanager",
        "jaeger",
        "prometheus",
        "victoria-logs",
    ]


def test_tools_and_cluster_add_their_binaries(tmp_path: Path) -> None:
    """Binaries whose version stamps match their pins are returned as they are; promtool and amtool only with
    tools=True, Thanos only with cluster=True."""
    bin_dir = _stamp(tmp_path, *versions.GO_BINARIES)
    root = data_root()
    stack = install.Binaries(
        collector=_with_collector(tmp_path),
        victorialogs=bin_dir / "victoria-logs",
        prometheus=bin_dir / "prometheus",
        alertmanager=bin_dir / "alertmanager",
        jaeger=bin_dir / "jaeger",
    )
    tools = dataclasses.replace(stack, promtool=bin_dir / "promtool", amtool=bin_dir / "amtool")
    assert install.install_all(root=root, home=tmp_path) == stack
    assert install.install_all(root=root, home=tmp_path, tools=True) == tools
    assert install.install_all(root=root, home=tmp_path, cluster=True) == dataclasses.replace(
        stack, thanos=bin_dir / "thanos"
    )
    assert install.install_all(root=root, home=tmp_path, tools=True, cluster=True) == dataclasses.replace(
        tools, thanos=bin_dir / "thanos"
    )


@pytest.mark.parametrize(
    ("flags", "printed"),
    [
        ((), {"collector", "victorialogs", "prometheus", "alertmanager", "jaeger"}),
        (("--tools",), {"collector", "victorialogs", "prometheus", "promtool", "alertmanager", "amtool", "jaeger"}),
        (("--cluster",), {"collector", "victorialogs", "prometheus", "alertmanager", "jaeger", "thanos"}),
        (("--replay",), {"collector", "victorialogs", "prometheus", "alertmanager", "jaeger", "backfill"}),
    ],
)
def test_stack_install_command_lists_what_it_installed(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flags: tuple[str, ...],
    printed: set[str],
) -> None:
    """``otel-rl stack install`` installs and prints the stack's five binaries; --tools adds promtool and amtool,
    --cluster adds Thanos, --replay otel-rl-backfill (nothing is built: GOPROXY=off and every binary in place)."""
    monkeypatch.setenv(OTEL_RL_HOME, str(tmp_path))
    monkeypatch.setenv("GOPROXY", "off")
    _stamp(tmp_path, *versions.GO_BINARIES)
    _with_collector(tmp_path)
    _with_backfill(tmp_path)
    assert cli.main(["stack", "install", *flags]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert {line.split()[0] for line in lines[:-1]} == printed
    assert lines[-1].startswith("ready in ")


def test_manifest_core_version() -> None:
    """The builder version comes from the manifest's core v0 modules."""
    assert collector_build.collector_core_version(layout.collector_manifest(data_root())) == "v0.161.0"


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
    with pytest.raises(ValueError, match=r"collector manifest .* must be a YAML mapping, got list"):
        collector_build.collector_core_version(manifest)


def test_missing_manifest_is_reported(tmp_path: Path) -> None:
    """Building from a manifest that does not exist is a FileNotFoundError naming it."""
    with pytest.raises(FileNotFoundError, match=r"collector manifest .*nope\.yaml' does not exist"):
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


def _module_proxy(folder: Path, module: str, *versions_: str, zips: bool = True) -> str:
    """Write a file-based Go module proxy holding ``module`` at ``versions_``: two commands (``cmd/one``,
    ``cmd/two``) that share a package; without ``zips`` it lists the versions but cannot serve their code. Return
    its GOPROXY URL."""
    files = {
        "go.mod": f"module {module}\n\ngo 1.22\n",
        "shared/shared.go": "package shared\n\nfunc Code() int { return 3 }\n",
        "cmd/one/main.go": f'package main\n\nimport "{module}/shared"\n\nfunc main() {{ _ = shared.Code() }}\n',
        "cmd/two/main.go": f'package main\n\nimport "{module}/shared"\n\nfunc main() {{ _ = shared.Code() + 1 }}\n',
    }
    at = folder / module / "@v"
    at.mkdir(parents=True)
    (at / "list").write_text("".join(f"{version}\n" for version in versions_), encoding="utf-8")
    for version in versions_:
        (at / f"{version}.info").write_text(f'{{"Version":"{version}","Time":"2026-01-01T00:00:00Z"}}', "utf-8")
        (at / f"{version}.mod").write_text(files["go.mod"], encoding="utf-8")
        if not zips:
            continue
        with zipfile.ZipFile(at / f"{version}.zip", "w") as archive:
            for name, text in files.items():
                archive.writestr(f"{module}@{version}/{name}", text)
    return folder.resolve().as_uri()


@pytest.mark.stack
def test_tools_of_one_module_share_its_caches_until_all_are_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module's caches are kept after its first tool and a version change removes the old version's; the second
    tool builds from the module download the first left (its proxy lacks the code), then the caches go (real go runs
    on a two-command module served by a local file proxy)."""
    module = "example.com/twotools"
    monkeypatch.setenv("GOPROXY", _module_proxy(tmp_path / "proxy", module, "v1.0.0", "v1.1.0"))
    monkeypatch.setenv("GOSUMDB", "off")
    monkeypatch.setenv("GOTOOLCHAIN", "local")
    home = tmp_path / "home"
    old = GoBinary(module=module, package="cmd/one", version="v1.0.0", binary="one")
    one = dataclasses.replace(old, version="v1.1.0")
    two = dataclasses.replace(one, package="cmd/two", binary="two")
    caches = go_cache_dir(home, one)

    ensure_go_binary(old, home=home, pins=(old, dataclasses.replace(two, version="v1.0.0")))
    assert [path.name for path in caches.parent.iterdir()] == [go_cache_dir(home, old).name]
    ensure_go_binary(one, home=home, pins=(one, two))
    assert [path.name for path in caches.parent.iterdir()] == [caches.name]
    assert (caches / "mod" / "cache" / "download" / module / "@v" / "v1.1.0.zip").is_file()
    assert (caches / "build").is_dir()

    monkeypatch.setenv("GOPROXY", _module_proxy(tmp_path / "no-code", module, "v1.0.0", "v1.1.0", zips=False))
    assert ensure_go_binary(two, home=home, pins=(one, two)) == home / "bin" / "two"
    assert list(caches.parent.iterdir()) == []
