"""Validation shared by the planners, the metrics and the packages that use `balance` (shedding,
consumers, and through them produce, pipeline and testing): what a real number and an int are, and the array checks every planner input passes.

Imports nothing else of ours, so any package may use it.
"""

from __future__ import annotations

import math
import numbers
import reprlib
from collections.abc import Sequence
from typing import TypeGuard

import numpy as np

ArrayLike = Sequence[float] | Sequence[int] | np.ndarray

INT64_MAX = 2**63 - 1
# Below this an integer sum is exact in float64, so numpy's float bincount may add it up.
EXACT_IN_FLOAT = 2**53


_REPR = reprlib.Repr()
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxdict = 6
_REPR.maxstring = _REPR.maxother = 60


def is_int(value: object) -> TypeGuard[int]:
    """An integer: an int or numpy's (`np.int64(5)` is a count as 5 is), never a bool (True is no
    count; numpy's bool is no Integral). The one rule for every package: callers store `int(value)`."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[float]:
    """A real number (int, float, or numpy's), never a bool; not checked for being finite."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_real(value: object) -> bool:
    """A finite int or float (numpy's too), not a bool (True is not a CPU percentage).

    An int too large for a float (``10**400``) is not finite either: ``math.isfinite`` would raise
    OverflowError on it, which is not the ValueError callers promise.
    """
    if not isinstance(value, int | float | np.integer | np.floating) or isinstance(value, bool | np.bool_):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def describe(value: object) -> str:
    """A value for an error message: a bounded repr and its type (a huge list stays one short line)."""
    return f"{_REPR.repr(value)} ({type(value).__name__})"


def is_sequence(value: object) -> bool:
    """A list, tuple, range or numpy array (or anything with ``__array__``): not a str or bytes, a
    mapping (its keys would be taken), a set (no order) or an iterator (consumed by a first look)."""
    if isinstance(value, np.ndarray) or (hasattr(value, "__array__") and not isinstance(value, np.generic)):
        return True
    return isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray)


def as_1d(name: str, values: object, element: str = "a number") -> np.ndarray:
    """The gate every array input of every planner passes: a one-dimensional sequence, as an array.

    Bools are refused element by element (numpy would read True as 1); everything else that is not
    a flat sequence raises ValueError naming `name` and the value, never a TypeError from numpy.
    """
    if not is_sequence(values):
        plural = "ints" if element == "an int" else "numbers"
        raise ValueError(
            f"{name} must be a sequence of {plural} (list, tuple or numpy array), got {describe(values)}"
        )
    if not isinstance(values, np.ndarray):
        if isinstance(values, Sequence):
            types = set(map(type, values))  # C speed; the index is only looked for when needed
            if bool in types or np.bool_ in types:
                i, v = next((i, v) for i, v in enumerate(values) if isinstance(v, bool | np.bool_))
                raise ValueError(f"{name}[{i}] must be {element}, got {v!r}")
        try:
            values = np.asarray(values)
        except (ValueError, TypeError, OverflowError):  # ragged nesting, or an element numpy cannot hold
            raise ValueError(
                f"{name} must be a one-dimensional sequence of numbers, got {describe(values)}"
            ) from None
    if values.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {values.shape}")
    return values


def _first_non_number(name: str, t: np.ndarray, element: str) -> None:
    """In an object array, the first element that is not an int or a float, by index and value."""
    for i, v in enumerate(t.tolist()):
        if not (is_int(v) or isinstance(v, float)):
            raise ValueError(f"{name}[{i}] must be {element}, got {v!r}")


def check_values(name: str, values: ArrayLike) -> np.ndarray:
    """A 1-D array of loads >= 0: int64 for integers (exact, and their sum fits in int64), else float64.

    Non-sequences, nested sequences, bools, None and other non-numbers, NaN, ±inf, complex numbers
    and a float sum that overflows to inf raise ValueError naming `name` (the index and the value
    where there is one); so does an integer above int64, rather than wrapping around.
    """
    t = as_1d(name, values)
    if t.size == 0:
        return t.astype(np.float64)
    kind = t.dtype.kind
    if kind == "b":
        raise ValueError(f"{name} must hold numbers, got dtype bool")
    if kind == "O":
        _first_non_number(name, t, "a number")
        for i, v in enumerate(t.tolist()):
            if is_int(v) and not -INT64_MAX - 1 <= v <= INT64_MAX:
                raise ValueError(f"{name}[{i}] must fit in int64, got {v}")
        raise ValueError(f"{name} must hold real numbers, got dtype {t.dtype}")
    if kind == "u":
        if int(t.max()) > INT64_MAX:
            bad = int(np.flatnonzero(t > INT64_MAX)[0])
            raise ValueError(f"{name}[{bad}] must fit in int64, got {t[bad]}")
        t = t.astype(np.int64)
    elif kind == "i":
        t = t.astype(np.int64, copy=False)
    elif kind == "f":
        t = t.astype(np.float64, copy=False)
        if not np.isfinite(t).all():
            bad = int(np.flatnonzero(~np.isfinite(t))[0])
            raise ValueError(f"{name}[{bad}] must be finite, got {t[bad]}")
    else:
        raise ValueError(f"{name} must hold real numbers, got dtype {t.dtype}")
    if t.min() < 0:
        bad = int(np.flatnonzero(t < 0)[0])
        raise ValueError(f"{name}[{bad}] must be >= 0, got {t[bad]}")
    if kind == "f":
        with np.errstate(over="ignore"):
            total = float(t.sum())
        if not math.isfinite(total):
            raise ValueError(f"{name} must have a finite sum, got {total} (scale the loads down)")
    elif int(t.max()) * t.size > INT64_MAX and sum(t.tolist()) > INT64_MAX:
        raise ValueError(f"{name} must sum to at most 2**63 - 1 (int64), got {sum(t.tolist())}")
    return t


def check_capacity(capacity: ArrayLike | None, workers: int) -> np.ndarray | None:
    """Relative worker speeds as float64 (None when absent)."""
    if capacity is None:
        return None
    c = check_values("capacity", capacity).astype(np.float64)
    if c.shape[0] != workers:
        raise ValueError(f"capacity must have one entry per worker ({workers}), got {c.shape[0]}")
    if (c <= 0).any():
        bad = int(np.flatnonzero(c <= 0)[0])
        raise ValueError(f"capacity[{bad}] must be > 0, got {c[bad]}")
    return c


def check_fixed_load(fixed_load: ArrayLike, workers: int) -> np.ndarray:
    """Per-worker load no plan can move, as float64 (>= 0, finite)."""
    f = check_values("fixed_load", fixed_load).astype(np.float64)
    if f.shape[0] != workers:
        raise ValueError(f"fixed_load must have one entry per worker ({workers}), got {f.shape[0]}")
    return f


def check_owners(name: str, values: ArrayLike, workers: int) -> np.ndarray:
    """Owner per partition as int64, each in [-1, workers) (-1: unowned), checked before any cast
    (a uint64 of 2**64 - 1 would otherwise wrap to -1 and silently mean "unowned")."""
    owner = as_1d(name, values, "an int")
    if owner.size == 0:
        return owner.astype(np.int64)
    if owner.dtype.kind == "O":
        _first_non_number(name, owner, "an int")
        for i, v in enumerate(owner.tolist()):
            if not is_int(v):
                raise ValueError(f"{name}[{i}] must be an int, got {v!r}")
            if not -1 <= v < workers:
                raise ValueError(f"{name}[{i}] must be in [-1, {workers}), got {v}")
    if owner.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold ints, got dtype {owner.dtype}")
    bad = owner >= workers if owner.dtype.kind == "u" else (owner < -1) | (owner >= workers)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name}[{i}] must be in [-1, {workers}), got {owner[i]}")
    return owner.astype(np.int64, copy=False)


def check_workers(workers: int) -> int:
    if not is_int(workers):
        raise ValueError(f"workers must be an int, got {workers!r}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    return int(workers)
