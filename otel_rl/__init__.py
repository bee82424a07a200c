"""otel-rl: RL training telemetry over OpenTelemetry.

Every rank records reward and staleness distributions and episode samples; they leave the process over OTLP and an
OpenTelemetry Collector merges the ranks (no collectives in the trainer). See ``docs/contract.md`` for the names.
"""

from otel_rl._config import ResolvedConfig, TelemetryConfig
from otel_rl._global import get_telemetry, reset, setup
from otel_rl._record.buckets import DEFAULT_REWARD_BOUNDS, DEFAULT_STALENESS_BOUNDS
from otel_rl._record.inputs import TensorLike
from otel_rl._record.samples import EpisodeSample, SampleFilter, TopBottomFilter
from otel_rl._tee import Tee, tee_tensorboard, tee_wandb
from otel_rl._telemetry import Telemetry

__all__ = [
    "DEFAULT_REWARD_BOUNDS",
    "DEFAULT_STALENESS_BOUNDS",
    "EpisodeSample",
    "ResolvedConfig",
    "SampleFilter",
    "Tee",
    "Telemetry",
    "TelemetryConfig",
    "TensorLike",
    "TopBottomFilter",
    "get_telemetry",
    "reset",
    "setup",
    "tee_tensorboard",
    "tee_wandb",
]
