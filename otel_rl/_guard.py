"""The one guard between a user's call and otel-rl: after construction, nothing otel-rl does raises into training.

Every public entry point runs its body under :func:`guarded` (methods: the ``Telemetry`` methods,
``MetricsDictLogger.log``, the TRL callback's hooks) or :func:`guarded_function` (module-level functions: the
torchforge shim). An exception from the body is counted in ``otel_rl.values.rejected`` under the entry point's
metric (a :class:`~otel_rl._record.inputs.BadInput` under its reason, anything else as ``invalid``), warned about once
per metric and reason, and the call returns its fallback value. What a body rejects only in part (NaN values,
one bad field) it counts itself and keeps the rest: the guard is for what makes a whole call unusable.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, ParamSpec, Protocol, TypeVar

from otel_rl._state.self_telemetry import SelfTelemetry

_logger = logging.getLogger(__name__)

P = ParamSpec("P")
F = TypeVar("F", bound=Callable[..., Any])


class Guarded(Protocol):
    """An object whose methods are guarded: it says where their failures are counted (None: nowhere yet, e.g. a
    TRL callback before telemetry exists; failures are then only logged once)."""

    @property
    def self_telemetry(self) -> SelfTelemetry | None: ...


def guarded(metric: str, *, values: str | None = None, fallback: Any = None) -> Callable[[F], F]:
    """Decorate a method of a :class:`Guarded` object: an exception from it is counted under ``metric``, with as
    many values as its parameter ``values`` held (1 without one), and ``fallback`` is returned."""

    def decorate(method: F) -> F:
        signature = inspect.signature(method)

        @functools.wraps(method)
        def run(self: Guarded, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except Exception as error:  # noqa: BLE001 - the one place the hot path turns errors into counts
                failed(_owner(self), metric, error, _offered(signature, values, self, args, kwargs))
                return fallback

        return run  # type: ignore[return-value]

    return decorate


def guarded_function(
    metric: str, owner: Callable[[], SelfTelemetry | None], *, values: str | None = None
) -> Callable[[Callable[P, None]], Callable[P, None]]:
    """Decorate a module-level function: like :func:`guarded`, counting in what ``owner()`` returns."""

    def decorate(function: Callable[P, None]) -> Callable[P, None]:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def run(*args: P.args, **kwargs: P.kwargs) -> None:
            try:
                function(*args, **kwargs)
            except Exception as error:  # noqa: BLE001 - the one place the hot path turns errors into counts
                failed(_safe(owner), metric, error, _offered(signature, values, None, args, kwargs))

        return run

    return decorate


def failed(self_telemetry: SelfTelemetry | None, metric: str, error: Exception, values: object) -> None:
    """Count and warn about a call that failed whole; never raises (a failure to count is logged once)."""
    try:
        if self_telemetry is None:
            _logger.warning("otel-rl %s: call dropped (%s): %s", metric, type(error).__name__, error)
        else:
            self_telemetry.reject_call(metric, error, values)
    except Exception:
        _logger.debug("otel-rl: could not count a failed call of %s", metric, exc_info=True)


def _owner(instance: Guarded) -> SelfTelemetry | None:
    return _safe(lambda: instance.self_telemetry)


def _safe(owner: Callable[[], SelfTelemetry | None]) -> SelfTelemetry | None:
    try:
        return owner()
    except Exception:  # noqa: BLE001 - no owner means "only log"
        return None


def _offered(
    signature: inspect.Signature, name: str | None, instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> object:
    """The argument ``name`` of a failed call, for counting its values (None when there is none)."""
    if name is None:
        return None
    try:
        bound = signature.bind_partial(*((instance,) if instance is not None else ()), *args, **kwargs)
    except TypeError:
        return None
    return bound.arguments.get(name)
