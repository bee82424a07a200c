"""Configuration: precedence argument > environment > default, and errors that name the setting."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import logging
from pathlib import Path
from typing import Any, cast

import pytest

import otel_rl
from otel_rl import ResolvedConfig, Telemetry, TelemetryConfig, _env
from otel_rl._env import parse_headers


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _env.VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_every_variable_read_is_declared() -> None:
    """The environment a test clears is every variable otel-rl reads: each name ``otel_rl._env`` declares as a
    constant or in a launcher tuple is in ``VARIABLES`` (the hand-written list of the tests missed four)."""
    tree = ast.parse(Path(_env.__file__).read_text())
    declared: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id.isupper():
            value = getattr(_env, node.targets[0].id)
            if isinstance(value, str) and node.targets[0].id == value:
                declared.add(value)
            elif isinstance(value, tuple) and node.targets[0].id.endswith("_VARS"):
                declared.update(value)
    assert declared and declared == set(_env.VARIABLES)


def test_resolved_config_is_derived_from_the_user_form() -> None:
    """Fields are declared once: the resolved form is the user form with every field set, redeclaring only the
    fields the environment can fill (to their resolved types); a new setting needs no second declaration."""
    user = {f.name for f in dataclasses.fields(TelemetryConfig)}
    assert issubclass(ResolvedConfig, TelemetryConfig)
    assert {f.name for f in dataclasses.fields(ResolvedConfig)} == user
    redeclared = {name for name, kind in ResolvedConfig.__annotations__.items() if "InitVar" not in str(kind)}
    assert redeclared < user and len(redeclared) <= 16
    resolved = TelemetryConfig(run_id="r", exporter="none", top_k=7).resolved
    assert resolved.resolved is resolved and resolved.top_k == 7 and resolved.rank == 0


def test_setup_forwards_every_telemetry_parameter() -> None:
    """setup() takes what Telemetry takes, without re-listing it (it had lost ``clock``)."""
    assert inspect.signature(otel_rl.setup) == inspect.signature(Telemetry)
    ticks = iter(range(10**9, 10**12, 10**6))
    telemetry = otel_rl.setup(TelemetryConfig(run_id="clock", exporter="none"), clock=lambda: next(ticks))
    try:
        assert telemetry._pipeline.store._start_time_ns == 10**9
    finally:
        otel_rl.reset()


def test_headers_never_show(caplog: pytest.LogCaptureFixture) -> None:
    """A token in the headers is in no repr (of the config or its resolved form) and in no error message; sent over
    plain http to another host it is warned about once, naming the header, never its value."""
    config = TelemetryConfig(
        run_id="r", endpoint="http://collector.example:4317", headers={"authorization": "Bearer s3cret"}
    )
    assert "s3cret" not in repr(config) and "s3cret" not in repr(config.resolved)
    with caplog.at_level(logging.WARNING):
        TelemetryConfig(
            run_id="r", endpoint="http://collector.example:4317", headers={"authorization": "Bearer s3cret"}
        )
    assert not [r for r in caplog.records if "s3cret" in r.getMessage()]
    with pytest.raises(ValueError, match='"headers" values must be strings') as error:
        TelemetryConfig(run_id="r", headers={"authorization": cast(Any, b"Bearer s3cret")})
    assert "s3cret" not in str(error.value)


def test_a_token_over_plain_http_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    """One warning per endpoint for headers over http:// to another host; none for https, a CA file or loopback."""
    with caplog.at_level(logging.WARNING, logger="otel_rl._config"):
        for _ in range(3):
            TelemetryConfig(run_id="r", endpoint="http://10.1.2.3:4317", headers={"authorization": "Bearer t"})
        TelemetryConfig(run_id="r", endpoint="https://10.1.2.3:4317", headers={"authorization": "Bearer t"})
        TelemetryConfig(run_id="r", endpoint="http://127.0.0.1:4317", headers={"authorization": "Bearer t"})
    warned = [r for r in caplog.records if "plain http" in r.getMessage()]
    assert len(warned) == 1 and "authorization" in warned[0].getMessage()


def test_client_certificate_and_key_go_together() -> None:
    """Mutual TLS needs both files."""
    with pytest.raises(ValueError, match='"client_certificate_file" and "client_key_file" go together'):
        TelemetryConfig(run_id="r", client_certificate_file="/tmp/c.pem")


def test_torchrun_variables_are_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    """RANK, WORLD_SIZE, LOCAL_RANK and TORCHELASTIC_RUN_ID fill the rank attributes."""
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-42")
    config = TelemetryConfig().resolved
    assert (config.rank, config.world_size, config.local_rank, config.run_id) == (3, 8, 1, "job-42")


def test_slurm_variables_are_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    """SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and SLURM_JOB_ID are the fallback."""
    monkeypatch.setenv("SLURM_PROCID", "5")
    monkeypatch.setenv("SLURM_NTASKS", "6")
    monkeypatch.setenv("SLURM_LOCALID", "2")
    monkeypatch.setenv("SLURM_JOB_ID", "777")
    config = TelemetryConfig().resolved
    assert (config.rank, config.world_size, config.local_rank, config.run_id) == (5, 6, 2, "777")


def test_arguments_win_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Explicit arguments beat launcher and OTEL_* variables."""
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4317")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "2500")
    config = TelemetryConfig(rank=1, world_size=2, run_id="r", endpoint="http://arg:4317").resolved
    assert (config.rank, config.world_size, config.endpoint) == (1, 2, "http://arg:4317")
    assert config.export_interval_s == pytest.approx(2.5)


def test_headers_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_EXPORTER_OTLP_HEADERS is parsed with URL-decoding."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20s3cret")
    assert TelemetryConfig(run_id="r").resolved.headers == {"authorization": "Bearer s3cret"}


def test_malformed_header_error_hides_the_value() -> None:
    """A malformed header names its position, never its content (it may be a token)."""
    with pytest.raises(ValueError, match="entry 1 must be 'key=value'") as error:
        parse_headers("a=b,s3cret-token", variable="OTEL_EXPORTER_OTLP_HEADERS")
    assert "s3cret" not in str(error.value)


def test_multi_rank_needs_a_run_id() -> None:
    """Several ranks with no shared run id would split one run into many: refused."""
    with pytest.raises(ValueError, match='"run_id" is required when "world_size" > 1'):
        TelemetryConfig(rank=0, world_size=2)


def test_torchrun_default_rendezvous_id_is_not_a_run_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchrun's default TORCHELASTIC_RUN_ID 'none' is shared by unrelated runs, so it does not count."""
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="run_id"):
        TelemetryConfig()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"exporter": "kafka"}, r'"exporter" must be one of otlp, console, file, otlp\+file, none, got \'kafka\''),
        ({"protocol": "udp"}, r'"protocol" must be one of grpc, http/protobuf, got \'udp\''),
        ({"rank": -1}, r'"rank" must be an integer >= 0, got -1'),
        ({"rank": 2, "world_size": 2}, r'"rank" must be < "world_size" \(2\), got 2'),
        ({"export_interval_s": 0}, r'"export_interval_s" must be a positive number of seconds up to 1e\+09, got 0'),
        ({"extremes_hold_s": -1}, r'"extremes_hold_s" must be a positive number of seconds up to 1e\+09, got -1'),
        ({"top_k": -1}, r'"top_k" must be an integer >= 0, got -1'),
        ({"histogram": "explicit", "reward_bounds": (1.0, 0.0)}, r'"reward_bounds" must be strictly increasing'),
        ({"histogram": "explicit", "reward_bounds": ()}, r'"reward_bounds" must be a non-empty tuple'),
        (
            {"histogram": "explicit", "reward_bounds": (0.0, float("nan"))},
            r'"reward_bounds" must hold finite numbers, got nan',
        ),
        (
            {"histogram": "explicit", "staleness_bounds": (0, 1.5)},
            r'"staleness_bounds" must hold integers >= 0, got 1.5',
        ),
        (
            {"reward_bounds": (0.0, 1.0)},
            r'"reward_bounds" applies to histogram="explicit" only, got reward_bounds=\(0.0, 1.0\)',
        ),
        ({"staleness_bounds": (0, 4)}, r'"staleness_bounds" applies to histogram="explicit" only'),
        ({"histogram": "native"}, r'"histogram" must be one of exponential, explicit, got \'native\''),
        ({"histogram_scale": 9}, r'"histogram_scale" must be an integer from 0 to 8, got 9'),
        ({"histogram_scale": -1}, r'"histogram_scale" must be an integer from 0 to 8, got -1'),
        ({"histogram_scale": 2.5}, r'"histogram_scale" must be an integer from 0 to 8, got 2.5'),
        ({"histogram_scale": True}, r'"histogram_scale" must be an integer from 0 to 8, got True'),
        ({"max_datasets": 0}, r'"max_datasets" must be an integer >= 1, got 0'),
        ({"solved_reward": float("nan")}, r'"solved_reward" must be a finite number, got nan'),
        (
            {"endpoint": "collector:4318", "protocol": "http/protobuf"},
            r'"endpoint" must start with http:// or https:// with protocol "http/protobuf" \(host:port is a form of '
            r"gRPC endpoints\), got 'collector:4318'",
        ),
        (
            {"endpoint": "grpc://collector:4317"},
            r"\"endpoint\" must be http://host:port or https://host:port or host:port",
        ),
        ({"endpoint": "http://collector:4317/v1"}, r'"endpoint" must be .* with no path'),
        ({"endpoint": "http://collector:99999"}, r'"endpoint" has a port that is not a number from 0 to 65535'),
        ({"role": ""}, r'"role" must be a non-empty string'),
        ({"group": ""}, r'"group" must be a non-empty string or None, got \'\''),
        ({"group": 3}, r'"group" must be a non-empty string or None, got 3'),
        ({"max_reward_fns": 0}, r'"max_reward_fns" must be an integer >= 1, got 0'),
        ({"max_metric_keys": True}, r'"max_metric_keys" must be an integer >= 1, got True'),
        ({"sample_queue_size": 0}, r'"sample_queue_size" must be an integer >= 1, got 0'),
        ({"redact": "mask"}, r'"redact" must be a callable \(field, text\) -> text, got \'mask\''),
    ],
)
def test_bad_settings_raise_naming_setting_and_value(kwargs: dict[str, Any], message: str) -> None:
    """Each invalid setting raises ValueError naming the setting and showing the value."""
    with pytest.raises(ValueError, match=message):
        TelemetryConfig(run_id="r", **kwargs)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("RANK", "zero", "environment variable RANK must be an integer, got 'zero'"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "soon", "OTEL_METRIC_EXPORT_INTERVAL must be a number, got 'soon'"),
        ("OTEL_RL_EXPORTER", "kafka", "environment variable OTEL_RL_EXPORTER must be one of otlp, console"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http", "environment variable OTEL_EXPORTER_OTLP_PROTOCOL must be one of"),
        ("RANK", "-1", "environment variable RANK must be an integer >= 0, got -1"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "0", "OTEL_METRIC_EXPORT_INTERVAL must be a positive .* in milliseconds"),
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "collector 4317",
            "environment variable OTEL_EXPORTER_OTLP_ENDPOINT must be http://host:port or https://host:port or "
            "host:port, got 'collector 4317'",
        ),
    ],
)
def test_bad_environment_raises_naming_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    """Invalid environment variables raise at construction, naming the variable."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        TelemetryConfig(run_id="r")


def test_unknown_setting_is_an_error() -> None:
    """A misspelled setting is a TypeError, not silently ignored."""
    with pytest.raises(TypeError, match="top_kk"):
        TelemetryConfig(**cast(dict[str, Any], {"top_kk": 3}))


def test_instance_ids_are_unique_per_process_config() -> None:
    """service.instance.id differs between two configurations (a restarted rank is a new stream)."""
    assert TelemetryConfig(run_id="r").instance_id != TelemetryConfig(run_id="r").instance_id
