"""verl's ``otel_rl`` tracking backend: with otel-rl installed, ``trainer.logger=['console','otel_rl']`` sends a verl
job's metrics dicts to otel-rl, with no edit to verl.

verl (0.9.1) makes its ``Tracking`` inside the Ray TaskRunner from the names in ``trainer.logger``, each checked
against the fixed list ``Tracking.supported_backend``, so a user can neither name another backend nor hand verl a
logger object. What verl offers is its plugin loader: ``import verl`` imports every installed ``verl.plugins`` entry
point (``VERL_USE_EXTERNAL_PLUGINS``: ``auto`` by default, ``none`` turns it off), in every process that imports
verl. otel-rl's entry point (pyproject.toml) is this module. Importing it adds ``otel_rl`` to
``Tracking.supported_backend`` and wraps two methods of ``Tracking``:

- ``__init__``: when ``otel_rl`` is among the backends, ``self.logger["otel_rl"]`` is a
  :class:`~otel_rl.tracking.MetricsDictLogger` on this process's telemetry, so every ``log(data, step)`` goes
  through the metrics-dict bridge (otel_rl/tracking.py). The telemetry is the one of :func:`otel_rl.setup` if the
  process made one, otherwise one set up here from the environment (:class:`~otel_rl.TelemetryConfig`).
- ``finish``, which calls only the backends verl knows: it also flushes otel-rl. verl's trainer never calls it; the
  ``Tracking`` made in ``fit`` is finished when it is collected (``__del__``), as ``fit`` returns. At interpreter
  exit the telemetry exports what is left and marks the run finished (its own ``atexit`` hook); a Ray actor such
  as verl's TaskRunner is killed when its job ends, before exit hooks run, so there the flush at ``finish`` is what
  exports the last steps, and ``rl.run.finished`` stays 0.

The run id is ``OTEL_RL_RUN_ID`` (or a launcher's id, see ``TelemetryConfig.run_id``); in a Ray job without one,
``ray-<session>-<job id>`` from Ray's runtime context, the same in every process of the job and in no other job;
outside Ray, a random id (announced by :func:`otel_rl.setup`). Rank and world size come from ``RANK`` and
``WORLD_SIZE``, by default 0 of 1: verl logs from its TaskRunner, one process. A Ray actor sees the environment
variables of its ``runtime_env`` (and, on a cluster its driver started with ``ray.init()``, the driver's
environment): on a cluster started with ``ray start``, put ``OTEL_EXPORTER_OTLP_ENDPOINT`` (and ``OTEL_RL_RUN_ID``,
the other ``OTEL_*`` settings) in the job's ``runtime_env`` ``env_vars``, in verl as
``+ray_kwargs.ray_init.runtime_env.env_vars.OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4317``.

Only verl's loader imports this module (``otel_rl/__init__`` does not). Imported where verl is not being imported
(pytest collecting the package's doctests), it registers nothing.
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any

from otel_rl import _env
from otel_rl._config import TelemetryConfig
from otel_rl._global import current, setup
from otel_rl.tracking import MetricsDictLogger

__all__ = ["BACKEND", "backend", "ray_run_id", "register"]

BACKEND = "otel_rl"
"""The name in verl's ``trainer.logger`` (``Tracking``'s ``default_backend``)."""
_REGISTERED = "_otel_rl_registered"
"""Set on ``Tracking`` once it is wrapped, so that a second :func:`register` changes nothing."""


def register() -> None:
    """Teach verl's ``Tracking`` the ``otel_rl`` backend (see the module docstring); once per process."""
    from verl.utils.tracking import Tracking

    if getattr(Tracking, _REGISTERED, False):
        return
    Tracking.supported_backend = [*Tracking.supported_backend, BACKEND]
    init, finish = Tracking.__init__, Tracking.finish
    signature = inspect.signature(init)
    finalizing = sys.is_finalizing  # held here: module globals are gone when a leftover Tracking is collected at exit

    @functools.wraps(init)
    def init_too(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        arguments = signature.bind(self, *args, **kwargs)
        arguments.apply_defaults()
        backends = arguments.arguments["default_backend"]
        if BACKEND in ([backends] if isinstance(backends, str) else backends):
            self.logger[BACKEND] = backend()

    @functools.wraps(finish)
    def finish_too(self: Any, *args: Any, **kwargs: Any) -> Any:
        finished = getattr(self, "_finished", False) or finalizing()  # at exit the telemetry's own hook exported
        logger = None if finished else getattr(self, "logger", {}).get(BACKEND)
        if logger is not None:
            logger.finish()
        return finish(self, *args, **kwargs)

    Tracking.__init__ = init_too
    Tracking.finish = finish_too
    setattr(Tracking, _REGISTERED, True)


def backend() -> MetricsDictLogger:
    """The ``otel_rl`` backend of one ``Tracking``: the metrics-dict bridge on this process's telemetry, set up from
    the environment if the process has none (a bad variable raises ``ValueError`` naming it)."""
    if current() is None:
        setup(TelemetryConfig(run_id=ray_run_id()))
    return MetricsDictLogger()


def ray_run_id() -> str | None:
    """``ray-<session>-<job id>`` in a process of a Ray job when no run id variable is set, else None. The session
    names one start of a Ray cluster (time and pid), the job id one job of it, so every process of one job agrees on
    the id and no other job has it."""
    ray = sys.modules.get("ray")
    if _env.read_first(_env.RUN_ID_VARS) is not None or ray is None or not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    return f"ray-{context.get_session_name().removeprefix('session_')}-{context.get_job_id()}"


if "verl" in sys.modules:  # verl's plugin loader, running inside `import verl`
    register()
