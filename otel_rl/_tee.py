"""One line for trainers that log to W&B or TensorBoard: ``otel_rl.tee_wandb()`` and ``otel_rl.tee_tensorboard()``
send what they already log through the metrics-dict bridge (:class:`otel_rl.tracking.MetricsDictLogger`) too.

OpenRLHF, prime-rl, SkyRL, slime, AReaL and NeMo-RL's loggers call ``wandb.log(dict, step=...)`` or
``SummaryWriter.add_scalar(tag, value, step)``; reaching otel-rl otherwise means editing their code. The technique is
W&B's own ``sync_tensorboard`` (``wandb/integration/tensorboard/monkeypatch.py``): patch the logging classes in place,
so every object of them, made before or after, is covered, and keep the originals to put back. Here that is
``wandb.Run._log`` (every ``run.log`` and ``wandb.log`` of a live online, offline or shared run goes through it) and
the disabled run's ``log`` (``mode="disabled"``), and ``torch.utils.tensorboard.SummaryWriter``'s ``add_scalar``,
``add_scalars`` and ``add_histogram``.

The original is called first and its result returned, so the trainer's W&B or TensorBoard behaviour is unchanged
(their own errors stay theirs); then the values go to the bridge, which never raises: what it cannot record it
counts in ``otel_rl.values.rejected`` (a W&B table or image, a string) and what goes wrong past it is counted under
``otel_rl.tee`` the same way. A tee is one per process and package: a second call returns the tee in place.
``close()`` on the returned :class:`Tee` (or leaving its ``with`` block) restores the originals. Neither wandb nor
torch is imported before the function that needs it is called.

Steps: ``wandb.log``'s ``step=``, else the dict's own step key (W&B trainers often log their step as a value and
plot against it with ``define_metric``: prime-rl's ``step``, OpenRLHF's ``train/global_step``, SkyRL's
``trainer/global_step``, slime's ``rollout/step``), which sets the step instead of being recorded as a metric;
TensorBoard's ``global_step``. A dict or scalar without a step belongs to the current step.
"""

from __future__ import annotations

import importlib
import inspect
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Literal

from otel_rl._guard import failed
from otel_rl._telemetry import Telemetry
from otel_rl.tracking import MetricsDictLogger

__all__ = ["STEP_KEYS", "Tee", "tee_tensorboard", "tee_wandb"]

_METRIC = "otel_rl.tee"
"""Where a logging call the tee cannot read is counted (``otel_rl.values.rejected{otel_rl.metric}``)."""
STEP_KEYS = ("step", "global_step", "train/global_step", "trainer/global_step", "rollout/step")
"""Keys of a ``wandb.log`` dict that carry the trainer's step (prime-rl, OpenRLHF, SkyRL, slime); the first found
wins. slime's ``train/step`` counts micro-batches, not steps, and stays a metric."""

Package = Literal["wandb", "tensorboard"]
Read = Callable[[], tuple[Mapping[str, Any], Any]]
"""What a patched method hands the tee: a function returning the logged values and their step (None: none)."""


class Tee:
    """An installed tee of one package, as ``tee_wandb()`` and ``tee_tensorboard()`` return it. ``close()`` restores
    the original methods (a second close does nothing); as a context manager it closes on exit."""

    def __init__(self, package: Package, telemetry: Telemetry | None) -> None:
        self.package: Package = package
        """``"wandb"`` or ``"tensorboard"``."""
        self.telemetry = telemetry
        """Where values go; None: the telemetry of ``otel_rl.setup()``, looked up per call."""

    @property
    def active(self) -> bool:
        """Whether this tee's patches are in place."""
        installed = _ACTIVE.get(self.package)
        return installed is not None and installed.tee is self

    def close(self) -> None:
        """Put the original methods back: what is logged from now on reaches only W&B or TensorBoard."""
        _uninstall(self)

    def __enter__(self) -> Tee:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Tee(package={self.package!r}, active={self.active!r})"


class _Installed:
    """A tee in place: its bridge, the methods it replaced (``(owner, name, original)``) and what else to undo."""

    def __init__(self, tee: Tee) -> None:
        self.tee = tee
        self.bridge = MetricsDictLogger(tee.telemetry)
        self.lock = threading.Lock()
        self.patched: list[tuple[Any, str, Any]] = []
        self.restores: list[Callable[[], None]] = []

    def forward(self, read: Read) -> None:
        """Record what ``read()`` returns through the bridge, one call at a time; never raises (a call that cannot
        be read is counted under ``otel_rl.tee``, a value the bridge cannot record under its metric and reason)."""
        try:
            data, step = read()
            with self.lock:
                self.bridge.log(data, step=step)
        except Exception as error:  # noqa: BLE001 - a tee must never break the trainer's logging call
            failed(self.bridge.self_telemetry, _METRIC, error, None)

    def patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> Any:
        """Replace ``owner.name`` (defined on ``owner`` itself) by ``make(original)``; return the original."""
        original = owner.__dict__[name]
        replacement = make(original)
        replacement.__wrapped__ = original
        self.patched.append((owner, name, original))
        setattr(owner, name, replacement)
        return original

    def undo(self) -> None:
        """Restore every original, newest first."""
        for owner, name, original in reversed(self.patched):
            setattr(owner, name, original)
        for restore in self.restores:
            restore()
        self.patched.clear()
        self.restores.clear()


_LOCK = threading.Lock()
_ACTIVE: dict[Package, _Installed] = {}


def tee_wandb(telemetry: Telemetry | None = None) -> Tee:
    """From now on, every ``wandb.log``/``run.log`` of this process's W&B runs (online, offline, shared or disabled;
    started before or after) also records its values in otel-rl, through the metrics-dict bridge with its step.

    ``telemetry`` defaults to the one of ``otel_rl.setup()``, looked up at each log. Calling again returns the tee in
    place; with another ``telemetry`` that is a ``ValueError``. Raises ``ImportError`` if wandb is not installed.
    """
    wandb = _require("wandb", "wandb", "pip install wandb")
    from wandb.sdk.lib.noop_run import NoopRun
    from wandb.sdk.wandb_run import Run

    signature = inspect.signature(Run.log)

    def install(installed: _Installed) -> None:
        def teed(original: Callable[..., Any]) -> Callable[..., Any]:
            def log(self: Any, *args: Any, **kwargs: Any) -> Any:
                result = original(self, *args, **kwargs)
                installed.forward(lambda: _wandb_values(signature.bind(self, *args, **kwargs).arguments))
                return result

            return log

        installed.patch(Run, "_log", teed)
        noop_log = installed.patch(NoopRun, "log", teed)
        if isinstance(wandb.run, NoopRun) and getattr(wandb.log, "__func__", None) is noop_log:
            # A disabled run made before the tee bound ``wandb.log`` to its unpatched ``log``: bind it anew.
            run: NoopRun = wandb.run
            wandb.log = run.log

            def rebind() -> None:
                if getattr(wandb.log, "__self__", None) is run:
                    wandb.log = run.log

            installed.restores.append(rebind)

    return _install("wandb", telemetry, install)


def tee_tensorboard(telemetry: Telemetry | None = None) -> Tee:
    """From now on, every ``add_scalar``, ``add_scalars`` (as ``<main_tag>/<tag>``) and ``add_histogram`` (each
    value, exactly) of a ``torch.utils.tensorboard.SummaryWriter``, made before or after, also records its values in
    otel-rl, through the metrics-dict bridge with its ``global_step``.

    ``telemetry`` defaults to the one of ``otel_rl.setup()``, looked up at each write. Calling again returns the tee
    in place; with another ``telemetry`` that is a ``ValueError``. Raises ``ImportError`` if torch or tensorboard is
    not installed.
    """
    writer = _require("torch.utils.tensorboard.writer", "torch and tensorboard", "pip install torch tensorboard")

    def install(installed: _Installed) -> None:
        def teed(original: Callable[..., Any]) -> Callable[..., Any]:
            signature = inspect.signature(original)

            def add(self: Any, *args: Any, **kwargs: Any) -> Any:
                result = original(self, *args, **kwargs)
                installed.forward(lambda: _tensorboard_values(signature.bind(self, *args, **kwargs).arguments))
                return result

            return add

        for name in ("add_scalar", "add_scalars", "add_histogram"):
            installed.patch(writer.SummaryWriter, name, teed)

    return _install("tensorboard", telemetry, install)


def _wandb_values(call: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    """A ``log(data, step, commit)`` call's values and step: ``step=``, else the data's first :data:`STEP_KEYS`
    entry (taken out of the values either way)."""
    data = dict(call["data"])
    found = [data.pop(key) for key in STEP_KEYS if key in data]
    step = call.get("step")
    return data, found[0] if step is None and found else step


def _tensorboard_values(call: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    """An ``add_scalar``/``add_scalars``/``add_histogram`` call's values, by tag, and its ``global_step``."""
    if "tag_scalar_dict" in call:
        data = {f"{call['main_tag']}/{tag}": value for tag, value in dict(call["tag_scalar_dict"]).items()}
    else:
        data = {call["tag"]: call["scalar_value"] if "scalar_value" in call else call["values"]}
    return data, call.get("global_step")


def _install(package: Package, telemetry: Telemetry | None, install: Callable[[_Installed], None]) -> Tee:
    """The tee of ``package``: the one in place, or a new one that ``install`` patches in."""
    with _LOCK:
        installed = _ACTIVE.get(package)
        if installed is not None:
            if installed.tee.telemetry is not telemetry:
                raise ValueError(
                    f'"telemetry" must be the one otel_rl.tee_{package}() already tees into, got {telemetry!r} '
                    "(close() the tee in place first)"
                )
            return installed.tee
        installed = _Installed(Tee(package, telemetry))
        try:
            install(installed)
        except BaseException:
            installed.undo()
            raise
        _ACTIVE[package] = installed
        return installed.tee


def _uninstall(tee: Tee) -> None:
    with _LOCK:
        installed = _ACTIVE.get(tee.package)
        if installed is not None and installed.tee is tee:
            installed.undo()
            del _ACTIVE[tee.package]


def _require(module: str, packages: str, install: str) -> Any:
    """Import ``module`` now (not when otel-rl is imported); an ImportError naming the packages if it cannot be."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"{module} cannot be imported ({error}): the tee needs {packages} ({install})") from error
