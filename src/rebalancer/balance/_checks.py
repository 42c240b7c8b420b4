"""Validation shared by the planners and the metrics (imports nothing else of ours)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

ArrayLike = Sequence[float] | Sequence[int] | np.ndarray

INT64_MAX = 2**63 - 1
# Below this an integer sum is exact in float64, so numpy's float bincount may add it up.
EXACT_IN_FLOAT = 2**53


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def check_values(name: str, values: ArrayLike) -> np.ndarray:
    """A 1-D array of loads >= 0: int64 for integers (exact, and their sum fits in int64), else float64.

    Bools, NaN, ±inf, complex numbers and a float sum that overflows to inf raise ValueError naming
    `name`, the index and the value; so does an integer above int64, rather than wrapping around.
    """
    if not isinstance(values, np.ndarray):
        seq = values if isinstance(values, Sequence) else list(values)
        for i, v in enumerate(seq):
            if isinstance(v, bool | np.bool_):
                raise ValueError(f"{name}[{i}] must be a number, got {v!r}")
        values = seq
    t = np.asarray(values)
    if t.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {t.shape}")
    if t.size == 0:
        return t.astype(np.float64)
    kind = t.dtype.kind
    if kind == "b":
        raise ValueError(f"{name} must hold numbers, got dtype bool")
    if kind == "O":
        for i, v in enumerate(t.tolist()):
            if _is_int(v) and not -INT64_MAX - 1 <= v <= INT64_MAX:
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


def check_workers(workers: int) -> int:
    if not _is_int(workers):
        raise ValueError(f"workers must be an int, got {workers!r}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    return int(workers)
