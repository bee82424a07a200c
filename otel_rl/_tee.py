"""One line for trainers that log to W&B or TensorBoard: ``otel_rl.tee_wandb()`` and ``otel_rl.tee_tensorboard()``
send what they already log through the metrics-dict bridge (:class:`otel_rl.tracking.MetricsDictLogger`) too.

OpenRLHF, prime-rl, SkyRL, slime, AReaL and NeMo-RL's loggers call ``wandb.log(dict, step=...)`` or
``SummaryWriter.add_scalar(tag, value, step)``; reaching otel-rl otherwise means editing their code. The technique is
W&B's own ``sync_tensorboard`` (``wandb/integration/tensorboard/monkeypatch.py``): patch the logging classes in place,
so every object of them, made before or after, is covered, and keep the originals to put back. Here that is
``wandb.Run._log`` (every ``run.log`` and ``wandb.log`` of a live online, offline or shared run goes through it) and
``wandb.Run._define_metric`` (its step metrics, below), the disabled run's ``log`` and ``define_metric``
(``mode="disabled"``), and ``torch.utils.tensorboard.SummaryWriter``'s ``add_scalar``, ``add_scalars`` and
``add_histogram``.

The original is called first and its result returned, so the trainer's W&B or TensorBoard behaviour is unchanged
(their own errors stay theirs); then the values go to the bridge, which never raises: what it cannot record it
counts in ``otel_rl.values.rejected`` (a W&B table or image, a string) and what goes wrong past it is counted under
``otel_rl.tee`` the same way. A tee is one per process and package: a second call returns the tee in place.
``close()`` on the returned :class:`Tee` (or leaving its ``with`` block) restores the originals. Neither wandb nor
torch is imported before the function that needs it is called.

Steps: ``wandb.log``'s ``step=``, else the dict's own step key (W&B trainers often log their step as a value and
plot against it with ``define_metric``: prime-rl's ``step``, OpenRLHF's ``train/global_step``, SkyRL's
``trainer/global_step``, slime's ``rollout/step``, transformers' ``train/global_step``), which sets the step instead
of being recorded as a metric, else the run's own step counter, as W&B files the row: ``Run._log``
(``wandb/sdk/wandb_run.py``) puts a row without ``step=`` at ``_local_step`` and moves it on at every commit (a log
without ``commit=``, or ``commit=True``), so ``commit=False`` rows share the step of the next commit, ``step=n``
moves it up to ``n``, and a run that logged before the tee was installed (or was resumed) goes on from where W&B
counts. A disabled run (``mode="disabled"``) counts nothing in W&B; the tee counts its rows by the same rule. A run
whose step is a key of its own (it logged a step key, or declared a step metric with ``define_metric(...,
step_metric=...)``, as transformers' W&B integration, OpenRLHF and prime-rl do before their first log) keeps it: its
rows without the key belong to the current step, where W&B's ``step_sync`` plots them too (TRL's ``profiling/``
rows, OpenRLHF's sample table), since W&B's counter is not the trainer's step there. TensorBoard's ``global_step``; a
scalar without one belongs to the current step.
"""

from __future__ import annotations

import importlib
import inspect
import threading
import weakref
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
        """Record what ``read()`` returns through the bridge (see :meth:`safely`)."""
        self.safely(lambda: self.bridge.log(*read()))

    def safely(self, action: Callable[[], None]) -> None:
        """Run ``action`` (reading a logging call, recording it through the bridge), one at a time; never raises (a
        call that cannot be read is counted under ``otel_rl.tee``, a value the bridge cannot record under its metric
        and reason)."""
        try:
            with self.lock:
                action()
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

    log_signature, define_signature = inspect.signature(Run.log), inspect.signature(Run.define_metric)

    def install(installed: _Installed) -> None:
        steps = _WandbSteps(NoopRun)

        def teed_log(original: Callable[..., Any]) -> Callable[..., Any]:
            def log(self: Any, *args: Any, **kwargs: Any) -> Any:
                counter = steps.counter(self)
                result = original(self, *args, **kwargs)
                installed.forward(lambda: steps.row(self, log_signature.bind(self, *args, **kwargs).arguments, counter))
                return result

            return log

        def teed_define(original: Callable[..., Any]) -> Callable[..., Any]:
            def define_metric(self: Any, *args: Any, **kwargs: Any) -> Any:
                result = original(self, *args, **kwargs)
                installed.safely(lambda: steps.defined(self, define_signature.bind(self, *args, **kwargs).arguments))
                return result

            return define_metric

        installed.patch(Run, "_log", teed_log)
        installed.patch(Run, "_define_metric", teed_define)
        noop = {"log": installed.patch(NoopRun, "log", teed_log)}
        noop["define_metric"] = installed.patch(NoopRun, "define_metric", teed_define)
        run = wandb.run
        if isinstance(run, NoopRun):
            # A disabled run made before the tee bound ``wandb.log`` and ``wandb.define_metric`` to its unpatched
            # methods: bind them anew, and back when the tee closes.
            bound = [
                name for name, function in noop.items() if getattr(getattr(wandb, name), "__func__", None) is function
            ]
            for name in bound:
                setattr(wandb, name, getattr(run, name))

            def rebind() -> None:
                for name in bound:
                    if getattr(getattr(wandb, name), "__self__", None) is run:
                        setattr(wandb, name, getattr(run, name))

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


class _WandbSteps:
    """The step of each W&B row the tee forwards (the module docstring's rule), for every run it sees."""

    def __init__(self, disabled: type) -> None:
        self._disabled = disabled
        self._keyed: weakref.WeakSet[Any] = weakref.WeakSet()
        """Runs whose step is a key of their own: they logged a step key or declared a step metric."""
        self._counts: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        """The tee's count of each disabled run's rows, W&B's ``_local_step`` of a run that counts nothing."""

    def counter(self, run: Any) -> int | None:
        """W&B's step of ``run``'s next row, read before W&B logs (and moves) it; None for a disabled run, which
        the tee counts itself in :meth:`row`, or for a W&B without the counter."""
        return None if isinstance(run, self._disabled) else getattr(run, "_local_step", None)

    def row(self, run: Any, call: Mapping[str, Any], counter: int | None) -> tuple[dict[str, Any], Any]:
        """A ``log(data, step, commit)`` call's values and step: ``step=``, else the data's first :data:`STEP_KEYS`
        entry (taken out of the values either way), else, in a run without step keys, the run's counter."""
        data = dict(call["data"])
        found = [data.pop(key) for key in STEP_KEYS if key in data]
        step, commit = call.get("step"), call.get("commit")
        if isinstance(run, self._disabled):
            counter = self._counts.get(run, 0)
            self._counts[run] = _next_wandb_step(counter, step, commit)
        if found:
            self._keyed.add(run)
        if step is not None:
            return data, step
        if found:
            return data, found[0]
        return data, None if run in self._keyed else counter

    def defined(self, run: Any, call: Mapping[str, Any]) -> None:
        """A ``define_metric`` call: one with ``step_metric`` says the run plots against a step of its own (W&B then
        files rows without it at its last value, ``step_sync``), so the run counts as one with a step key."""
        if call.get("step_metric") is not None:
            self._keyed.add(run)


def _next_wandb_step(counter: int, step: Any, commit: Any) -> int:
    """W&B's step counter after a row logged with ``step`` and ``commit`` (``Run._log``: up to ``step=``, then one
    more at a commit).

    >>> _next_wandb_step(0, None, None), _next_wandb_step(3, None, False), _next_wandb_step(3, 7, None)
    (1, 3, 7)
    """
    if step is not None and step > counter:
        counter = step
    if (step is None and commit is None) or commit:
        counter += 1
    return counter


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
