"""The one place where anything a user hands in becomes what otel-rl computes with, with one rejection vocabulary.

Users pass torch tensors of any dtype, layout and device, numpy arrays and scalars, Python numbers, lists, nested
lists, None, and objects that merely have ``.item()``, ``__array__`` or ``__dlpack__``. Every public entry point turns
them into typed values here, and nowhere else:

- :func:`as_values`: numbers to summarize, as a tensor plus the positions that could not be used. Tensors and arrays
  are never copied when they need not be (no pass over the data: NaN and inf are counted by the kernels). Python
  numbers and lists become float64 (int64 with ``integers=True``), so Python floats and ``np.float64`` stay exact
  end to end; a ``None`` or a non-number inside a list is dropped on its own and counted, the rest kept.
- :func:`as_mask`: a selection of the values' shape, on their device.
- :func:`as_integer` and :func:`as_real`: one number (a step, a version, a count, a sample's field). Integers must
  fit OTLP's signed 64 bits (reason ``range``), so nothing outside OTLP's types can reach an exporter.
- :func:`as_text` and :func:`describe`: strings from anything, never raising (a ``__repr__`` may).

Reasons (``otel_rl.reason`` of ``otel_rl.values.rejected``, docs/contract.md): see :data:`Reason`.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, get_args

import numpy as np
import torch
import torch.utils.dlpack


class SupportsArray(Protocol):
    """Anything numpy can read: ``np.asarray`` calls ``__array__`` (JAX, CuPy on the host, pandas, numpy scalars)."""

    def __array__(self, *args: Any, **kwargs: Any) -> Any: ...


class SupportsDLPack(Protocol):
    """Anything torch can read without a copy through the DLPack protocol (CuPy, JAX, TensorFlow on a device)."""

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...


TensorLike: TypeAlias = (
    torch.Tensor | np.ndarray[Any, Any] | SupportsArray | SupportsDLPack | float | int | Sequence[Any]
)
"""What the recording calls take as values, masks, versions: a torch tensor (any dtype, layout, device), a numpy
array or scalar, an object with ``__array__`` or ``__dlpack__``, a Python number, or a (nested) list of numbers. Any
other object is still accepted at run time and counted as rejected (``type``), never raised."""

Reason = Literal[
    "nonfinite",
    "negative",
    "nonintegral",
    "range",
    "missing",
    "shape",
    "dtype",
    "type",
    "layout",
    "phase",
    "invalid",
    "unknown_key",
    "name_overflow",
    "name_invalid",
    "incomplete_group",
    "unpaired",
]
"""Why values were rejected: ``nonfinite`` (NaN or inf), ``negative`` (below the allowed minimum), ``nonintegral``
(a fraction where an integer is needed), ``range`` (an integer outside signed 64 bits), ``missing`` (``None``
inside a list, NaN where an integer is needed, or a field another needs), ``shape`` (shapes that do not fit
together, or more dimensions than the call takes), ``dtype`` (complex or text, or a bool where an integer identity
is needed: a version, a group id), ``type`` (not a number at all), ``layout`` (a tensor whose values cannot be
read: nested, meta), ``phase``, ``unknown_key`` (a sample dict's key), ``name_overflow`` and ``name_invalid``
(label names past their cap or unusable), ``incomplete_group`` (a usable rollout of a prompt group whose outcome
cannot be told, because another rollout of it, or of the call, is unusable), ``unpaired`` (a rollout left out of
``rl.joint`` because its value or its total reward is unusable), ``invalid`` (anything else)."""

REASONS: tuple[Reason, ...] = get_args(Reason)
"""Every reason; :attr:`Values.reasons` codes a position's reason as 1 + its index here (0: usable)."""

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_DESCRIBE_CHARS = 80
_NUMBA_DTYPES = (torch.float32, torch.float64, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
_FAST_ITEMS = frozenset({float, int})
_FAST_VALUES = frozenset({float, int, bool})


class BadInput(ValueError):  # noqa: N818 - the name says what it is: bad input, not an error of otel-rl
    """A value, field or whole call is unusable; ``reason`` names the rule (a :data:`Reason`)."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason: Reason = reason


@dataclass(frozen=True)
class Values:
    """Numbers ready to summarize: ``tensor`` (any shape, on the input's device), and where some positions could not
    be used, ``usable`` (a bool tensor of its shape, False there) with ``dropped`` counting them by reason."""

    tensor: torch.Tensor
    usable: torch.Tensor | None = None
    dropped: Mapping[Reason, int] = field(default_factory=dict)
    reasons: torch.Tensor | None = None
    """Where ``usable`` is given: each position's reason, an int8 tensor of ``tensor``'s shape, 0 where usable, else
    1 + the reason's index in :data:`REASONS` (callers that count only selected positions need it)."""


def as_values(values: Any, *, argument: str, integers: bool = False) -> Values:
    """The numbers in ``values``: a tensor, array, number, list or nested list (at most 2-D), or anything with
    ``__dlpack__``, ``__array__`` or ``.item()``.

    Bools (tensors, arrays, Python and numpy bools) are the numbers 0 and 1 (``pred == target`` is a reward): a bool
    tensor or array is read as uint8, without a copy. Python numbers and lists become float64, or int64 with
    ``integers=True`` (versions and ids, which must stay exact beyond 2**53: an int outside signed 64 bits is then
    dropped as ``range``, a NaN as ``missing``); a list of floats only stays float64 (see :func:`as_integers`).
    With ``integers=True`` a bool is not an integer identity: rejected as ``dtype``, whole or inside a list. Inside
    a list, ``None`` is dropped as ``missing`` and a non-number (a string, a container) as ``type``; the rest are
    kept. Raises :class:`BadInput` when the whole argument is unusable.

    >>> v = as_values([1.0, None, 0.1, "x", True], argument="rewards")
    >>> v.tensor.tolist(), v.usable.tolist(), dict(v.dropped)
    ([1.0, 0.0, 0.1, 0.0, 1.0], [True, False, True, False, True], {'missing': 1, 'type': 1})
    >>> as_values(torch.tensor([True, False]), argument="rewards").tensor
    tensor([1, 0], dtype=torch.uint8)
    """
    if isinstance(values, Values):
        return values
    if isinstance(values, torch.Tensor):
        return Values(_numeric(_readable(values, argument=argument, booleans=not integers)))
    if isinstance(values, np.ndarray):
        return _from_array(values, argument=argument, integers=integers)
    if isinstance(values, (bool, np.bool_)):
        if integers:
            raise BadInput("dtype", f'"{argument}" must be integers, got a bool')
        return Values(torch.tensor(float(values), dtype=torch.float64))
    if isinstance(values, numbers.Real):
        return _from_items([values], argument=argument, integers=integers, shape=())
    if isinstance(values, (str, bytes, bytearray, Mapping)):
        raise BadInput("type", f'"{argument}" must be numbers, got {type(values).__name__}')
    if isinstance(values, Sequence):
        items, shape = _flatten(values, argument=argument)
        return _from_items(items, argument=argument, integers=integers, shape=shape)
    if hasattr(values, "__dlpack__"):
        try:
            tensor = _readable(torch.utils.dlpack.from_dlpack(values), argument=argument, booleans=not integers)
            return Values(_numeric(tensor))
        except BadInput:
            raise
        except Exception:  # noqa: BLE001, S110 - not every __dlpack__ is usable; the other protocols may be
            pass
    if hasattr(values, "__array__"):
        try:
            array = np.asarray(values)
        except Exception as error:  # noqa: BLE001 - a broken __array__ is not a number
            raise BadInput(
                "type", f'"{argument}" must be numbers, got {type(values).__name__}: {describe(error)}'
            ) from None
        return _from_array(array, argument=argument, integers=integers)
    if callable(getattr(values, "item", None)):
        return as_values(_item(values, argument=argument), argument=argument, integers=integers)
    raise BadInput("type", f'"{argument}" must be a tensor, array, sequence or number, got {type(values).__name__}')


def as_selection(mask: Any) -> torch.Tensor:
    """``mask`` (bools or numbers, nonzero = keep; a ``None`` inside it makes it unusable) as a bool tensor on its
    own device."""
    if isinstance(mask, torch.Tensor):
        selected = _readable(mask, argument="mask", booleans=True)
        return selected if selected.dtype == torch.bool else selected != 0
    try:
        array = np.asarray(mask)
    except Exception as error:  # noqa: BLE001 - a broken mask is not a mask
        raise BadInput(
            "type", f'"mask" must be bools or numbers, got {type(mask).__name__}: {describe(error)}'
        ) from None
    if array.dtype.kind not in "biuf":
        raise BadInput("dtype", f'"mask" must be bools or numbers, got dtype {array.dtype}')
    return torch.from_numpy(np.ascontiguousarray(array if array.dtype.kind == "b" else array != 0))


def as_mask(mask: Any, like: torch.Tensor, *, argument: str) -> torch.Tensor | None:
    """``mask`` as a bool tensor of ``like``'s shape on its device (see :func:`as_selection`), or None for no mask.
    Raises :class:`BadInput` (``shape``) when the shapes differ."""
    if mask is None:
        return None
    selected = as_selection(mask)
    if tuple(selected.shape) != tuple(like.shape):
        raise BadInput(
            "shape", f'"mask" must have the shape of "{argument}" {tuple(like.shape)}, got {tuple(selected.shape)}'
        )
    return selected.to(device=like.device)


def combined(usable: torch.Tensor | None, selected: torch.Tensor | None) -> torch.Tensor | None:
    """Positions both usable and selected (None means all)."""
    if usable is None:
        return selected
    if selected is None:
        return usable
    return usable.to(device=selected.device) & selected


def as_integer(value: Any, *, argument: str, minimum: int = INT64_MIN) -> int:
    """``value`` as a Python int in ``[minimum, 2**63 - 1]``: an int, a numpy integer, an integral float, a
    one-element tensor or array, or anything with ``__index__``; never a bool or a string.

    >>> as_integer(12.0, argument="version"), as_integer(np.int64(3), argument="step")
    (12, 3)
    """
    if isinstance(value, (bool, np.bool_)):
        raise BadInput("type", f'"{argument}" must be an integer, got a bool')
    if isinstance(value, (float, np.floating)):
        number = float(value)
        if not math.isfinite(number):
            raise BadInput("nonfinite", f'"{argument}" must be a finite integer, got {number!r}')
        if not number.is_integer():
            raise BadInput("nonintegral", f'"{argument}" must be an integer, got {number!r}')
        return _in_range(int(number), argument=argument, minimum=minimum)
    if isinstance(value, (int, np.integer)):
        return _in_range(int(value), argument=argument, minimum=minimum)
    if isinstance(value, (torch.Tensor, np.ndarray)) or callable(getattr(value, "item", None)):
        return as_integer(_item(value, argument=argument), argument=argument, minimum=minimum)
    if hasattr(value, "__index__"):
        try:
            return _in_range(operator.index(value), argument=argument, minimum=minimum)
        except BadInput:
            raise
        except Exception:  # noqa: BLE001, S110 - a failing __index__ means "not an integer"
            pass
    raise BadInput("type", f'"{argument}" must be an integer, got {type(value).__name__}')


def as_real(value: Any, *, argument: str) -> float:
    """``value`` as a Python float (possibly NaN or inf: the caller decides): a real number, a numpy scalar, a
    one-element tensor or array; never a bool, a string or a complex number."""
    if isinstance(value, (bool, np.bool_)):
        raise BadInput("type", f'"{argument}" must be a number, got a bool')
    if isinstance(value, numbers.Real):
        try:
            return float(value)
        except OverflowError:
            raise BadInput("range", f'"{argument}" must fit a double, got an integer beyond 1.8e308') from None
    if isinstance(value, (torch.Tensor, np.ndarray)) or callable(getattr(value, "item", None)):
        return as_real(_item(value, argument=argument), argument=argument)
    raise BadInput("type", f'"{argument}" must be a number, got {type(value).__name__}')


def as_value(value: Any, *, argument: str) -> float:
    """A recorded value as a float: what :func:`as_real` takes, and a bool (Python, numpy, or a one-element bool
    tensor or array) as 1 or 0, since a correctness reward is naturally ``pred == target``."""
    if isinstance(value, (bool, np.bool_)):
        return float(value)
    if (isinstance(value, torch.Tensor) and value.dtype == torch.bool) or (
        isinstance(value, np.ndarray) and value.dtype.kind == "b"
    ):
        return float(_item(value, argument=argument))
    return as_real(value, argument=argument)


def as_flag(value: Any, *, argument: str) -> bool:
    """``value`` as a bool: a bool, a number, or a one-element tensor or array."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Real):
        return bool(value)
    if isinstance(value, (torch.Tensor, np.ndarray)) or callable(getattr(value, "item", None)):
        return as_flag(_item(value, argument=argument), argument=argument)
    raise BadInput("type", f'"{argument}" must be a bool, got {type(value).__name__}')


def as_text(value: Any) -> str:
    """``value`` as text: a string as it is, bytes decoded as UTF-8 (invalid bytes replaced), anything else by
    ``str``; never raises."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - a __str__ that raises still gives text
        return f"<{type(value).__name__}>"


def describe(value: object) -> str:
    """A short ``repr`` of ``value`` for a warning (at most 80 characters); never raises."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a __repr__ that raises still gets described
        text = f"<{type(value).__name__} whose repr fails>"
    return text if len(text) <= _DESCRIBE_CHARS else text[: _DESCRIBE_CHARS - 3] + "..."


def count(values: object) -> int:
    """How many values an argument held, for counting a rejected whole (1 when that cannot be told)."""
    try:
        if isinstance(values, torch.Tensor):
            return int(values.numel())
        if isinstance(values, np.ndarray):
            return int(values.size)
        if isinstance(values, Sequence) and not isinstance(values, (str, bytes, bytearray)):
            return sum(len(item) if _is_row(item) else 1 for item in values)
    except Exception:  # noqa: BLE001, S110 - an odd object still counts once
        pass
    return 1


def numpy_view(tensor: torch.Tensor) -> np.ndarray:
    """A zero-copy numpy view of a CPU tensor; dtypes the compiled kernels cannot read (float16, bfloat16, unsigned
    wider than 8 bits, float8) go through float64."""
    return (tensor if tensor.dtype in _NUMBA_DTYPES else tensor.to(torch.float64)).numpy()


def _readable(tensor: torch.Tensor, *, argument: str, booleans: bool = False) -> torch.Tensor:
    """A plain strided tensor with the same values: detached, dense, dequantized, a distributed tensor's local
    shard, conjugate and negative views resolved, contiguous on the CPU (the kernels read memory in order)."""
    tensor = tensor.detach()
    if type(tensor) is not torch.Tensor and callable(getattr(tensor, "to_local", None)):
        tensor = getattr(tensor, "to_local")()  # a DTensor: this rank's shard, no collective
    if tensor.is_nested or tensor.device.type == "meta":
        raise BadInput("layout", f'"{argument}" must hold readable values, got a {_kind(tensor)} tensor')
    if tensor.is_quantized:
        tensor = tensor.dequantize()
    if tensor.layout != torch.strided:
        tensor = tensor.to_dense()
    if (tensor.dtype == torch.bool and not booleans) or tensor.is_complex():
        raise BadInput("dtype", f'"{argument}" must be real numbers, got dtype {tensor.dtype}')
    tensor = tensor.resolve_conj().resolve_neg()
    return tensor.contiguous() if tensor.device.type == "cpu" else tensor


def _kind(tensor: torch.Tensor) -> str:
    return "nested" if tensor.is_nested else tensor.device.type


def _from_array(array: np.ndarray, *, argument: str, integers: bool) -> Values:
    kind = array.dtype.kind
    if kind == "O":
        items, _ = _flatten(array.tolist() if array.ndim else [array.item()], argument=argument)
        return _from_items(items, argument=argument, integers=integers, shape=array.shape if array.ndim else ())
    if kind not in "iufb" or (kind == "b" and integers):
        raise BadInput("dtype", f'"{argument}" must be numeric, got an array of dtype {array.dtype}')
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    if kind == "b":
        array = array.view(np.uint8)
    elif kind == "f" and array.dtype.itemsize > 8:
        array = array.astype(np.float64)
    elif kind == "u" and array.dtype.itemsize > 1 and not (integers and array.dtype.itemsize == 8):
        array = array.astype(np.float64 if array.dtype.itemsize == 8 else np.int64)
    return Values(torch.from_numpy(np.ascontiguousarray(array)))


def _numeric(tensor: torch.Tensor) -> torch.Tensor:
    """A bool tensor as the uint8 numbers 0 and 1 (a view, no copy); any other tensor as it is."""
    return tensor.view(torch.uint8) if tensor.dtype == torch.bool else tensor


def as_integers(values: Values, *, argument: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``values`` (from ``as_values(..., integers=True)``) as exact int64 on their device, and each position's
    reason code (see :attr:`Values.reasons`; None when every position is usable), with no copy to the host.

    Every integer dtype converts exactly; unsigned 64-bit values at or above 2**63 are ``range``. Floats must be
    integral (``nonintegral``), finite (``nonfinite``; NaN is ``missing``) and below 2**63 in magnitude
    (``range``). A bool tensor is ``dtype`` (a bool is not an identity).

    >>> ids, codes = as_integers(Values(torch.tensor([2**63 + 1, 7], dtype=torch.uint64)), argument="group_ids")
    >>> ids[1].item(), [REASONS[c - 1] if c else None for c in codes.tolist()]
    (7, ['range', None])
    """
    tensor = values.tensor
    codes = None if values.reasons is None else values.reasons.to(device=tensor.device, dtype=torch.int8)
    bad: torch.Tensor | None = None
    if tensor.dtype == torch.bool:
        raise BadInput("dtype", f'"{argument}" must be integers, got dtype {tensor.dtype}')
    if tensor.dtype == torch.uint64:
        wide = tensor.view(torch.int64)  # values at or above 2**63 turn negative: exactly those are out of range
        bad = torch.where(wide < 0, _code("range"), 0).to(torch.int8)
    elif tensor.is_floating_point():
        x = tensor.to(torch.float64)
        finite = torch.isfinite(x)
        integral = finite & (x == torch.trunc(x))
        fits = x.abs() < 2.0**63
        bad = torch.where(
            torch.isnan(x),
            _code("missing"),
            torch.where(~finite, _code("nonfinite"), torch.where(~integral, _code("nonintegral"), _code("range"))),
        )
        bad = torch.where(integral & fits, 0, bad).to(torch.int8)
        wide = torch.where(integral & fits, x, torch.zeros_like(x)).to(torch.int64)
    else:
        wide = tensor.to(torch.int64)
    if bad is None:
        return wide, codes
    return wide, bad if codes is None else torch.where(codes != 0, codes, bad)


def _code(reason: Reason) -> int:
    return REASONS.index(reason) + 1


def _flatten(values: Sequence[Any], *, argument: str) -> tuple[list[Any], tuple[int, ...]]:
    """The items of a list (1-D) or of a list of equal-length lists (2-D), in order, and the shape."""
    rows = [_is_row(item) for item in values]
    if not any(rows):
        return list(values), (len(values),)
    if not all(rows):
        raise BadInput("shape", f'"{argument}" mixes numbers and lists: it must be 1-D or 2-D')
    widths = {len(item) for item in values}
    if len(widths) != 1:
        raise BadInput("shape", f'"{argument}" is ragged: rows of lengths {sorted(widths)[:5]}')
    items = [element for item in values for element in item]
    if any(_is_row(element) for element in items):
        raise BadInput("shape", f'"{argument}" must have at most 2 dimensions')
    return items, (len(values), widths.pop())


def _is_row(item: object) -> bool:
    return isinstance(item, Sequence) and not isinstance(item, (str, bytes, bytearray))


def _from_items(items: list[Any], *, argument: str, integers: bool, shape: tuple[int, ...]) -> Values:
    """Python items to a float64 (or int64) CPU tensor of ``shape``; unusable items are zeros marked unusable.

    With ``integers``, int64 unless the items are floats without a single int (then float64, as given: the
    caller checks them, see :func:`as_integers`), so that ids and versions stay exact beside a ``None``."""
    kinds = set(map(type, items))
    floats = any(issubclass(kind, (float, np.floating)) for kind in kinds)
    ints = any(issubclass(kind, (int, np.integer)) and not issubclass(kind, bool) for kind in kinds)
    integer = integers and (ints or not floats)
    if kinds <= ({int} if integer else _FAST_ITEMS if integers else _FAST_VALUES):
        try:
            return Values(torch.from_numpy(np.array(items, dtype=np.int64 if integer else np.float64).reshape(shape)))
        except OverflowError:
            pass  # an int too large for the dtype: item by item below
    out = np.zeros(len(items), dtype=np.int64 if integer else np.float64)
    codes = np.zeros(len(items), dtype=np.int8)
    dropped: dict[Reason, int] = {}
    for index, item in enumerate(items):
        try:
            out[index] = _item_number(item, argument=argument, integer=integer, integers=integers)
        except BadInput as error:
            codes[index] = _code(error.reason)
            dropped[error.reason] = dropped.get(error.reason, 0) + 1
    tensor = torch.from_numpy(out.reshape(shape))
    if not dropped:
        return Values(tensor)
    reasons = torch.from_numpy(codes.reshape(shape))
    return Values(tensor, reasons == 0, dropped, reasons)


def _item_number(item: Any, *, argument: str, integer: bool, integers: bool) -> float | int:
    """One list item as a number: an int with ``integer``, else a float; a bool is 1 or 0 unless ``integers``."""
    if item is None:
        raise BadInput("missing", f'"{argument}" holds None')
    if isinstance(item, (bool, np.bool_)) and integers:
        raise BadInput("dtype", f'"{argument}" must be integers, got a bool')
    if integer and not isinstance(item, (bool, np.bool_)):
        if isinstance(item, (float, np.floating)) and math.isnan(item):
            raise BadInput("missing", f'"{argument}" holds NaN where an integer is needed')
        return as_integer(item, argument=argument)
    return as_value(item, argument=argument)


def _in_range(number: int, *, argument: str, minimum: int) -> int:
    if number > INT64_MAX or number < INT64_MIN:
        raise BadInput(
            "range", f'"{argument}" must fit in signed 64 bits, got an integer of {number.bit_length()} bits'
        )
    if number < minimum:
        raise BadInput("negative", f'"{argument}" must be >= {minimum}, got {number}')
    return number


def _item(value: Any, *, argument: str) -> Any:
    """The Python number of a one-element tensor or array, or of anything with ``.item()`` (numpy scalars)."""
    try:
        if isinstance(value, torch.Tensor):
            return _readable(value, argument=argument, booleans=True).item()
        return value.item()
    except BadInput:
        raise
    except Exception as error:  # noqa: BLE001 - any failure means "not one number"
        raise BadInput(
            "type", f'"{argument}" must be one number, got {type(value).__name__}: {describe(error)}'
        ) from None
