"""Load metrics shared by the planners, the queue's reports, the pipeline, shedding and the benchmarks.

One vocabulary for imbalance, so every package names the same figure the same way:
`max_over_mean` (what a bottleneck worker costs), `max_over_median` (a straggler against the
typical task, the pipeline's skew) and `spread` (max - min, the shedding simulator's usage gap).
"""

from __future__ import annotations

import math
import statistics

import numpy as np

from rebalancer.balance.checks import (
    ArrayLike,
    check_capacity,
    check_fixed_load,
    check_values,
    check_workers,
)


def max_over_mean(loads: ArrayLike) -> float:
    """Max over mean load; 1.0 for no load at all (nothing is waiting on a busiest worker)."""
    values = check_values("loads", loads).tolist()
    total = sum(values)
    if not values or total <= 0:
        return 1.0
    return max(values) * len(values) / total


def max_over_median(loads: ArrayLike, ndigits: int | None = None) -> float | None:
    """Max over median load; None when there is no load or the median worker is idle (no finite ratio).

    The median, unlike the mean, is not pulled up by the straggler itself: the figure Spark's
    skewed tasks are judged by. `ndigits` rounds the result.
    """
    values = check_values("loads", loads).tolist()
    if not values:
        return None
    median = statistics.median(values)
    if median <= 0:
        return None
    ratio = max(values) / median
    if not math.isfinite(ratio):  # a median so tiny the ratio overflows: no finite ratio either
        return None
    return ratio if ndigits is None else round(ratio, ndigits)


def spread(loads: ArrayLike) -> float:
    """Max minus min load, in the loads' own unit (0.0 for none): an absolute gap, not a ratio."""
    values = check_values("loads", loads).tolist()
    return float(max(values) - min(values)) if values else 0.0


def imbalance(loads: ArrayLike, capacity: ArrayLike | None = None) -> float:
    """Max over mean load: 1.0 is perfect balance, and it is what a bottleneck worker costs.

    Max/mean (not max/min) because throughput is set by the busiest worker relative to the
    average; an idle worker does not make the figure infinite. No load at all counts as balanced.
    With `capacity` (relative worker speeds) it is the max finish time `load / capacity` over the
    fluid one, `total / Σcapacity`. Inputs are validated as the planners validate them.
    """
    values = check_values("loads", loads)
    speed = check_capacity(capacity, values.shape[0]) if capacity is not None else None
    if values.size == 0:
        return 1.0
    total = sum(values.tolist())
    if total <= 0:
        return 1.0
    if speed is None:
        return max_over_mean(values)
    return float((values / speed).max()) * float(speed.sum()) / total


def lower_bound(
    throughput: ArrayLike,
    workers: int,
    capacity: ArrayLike | None = None,
    fixed_load: ArrayLike | None = None,
) -> int | float:
    """No assignment can have a max worker load below `max(largest partition, total / workers)`.

    With `capacity` the objective is the max finish time `load_w / capacity_w`, and the bound is
    `max(total / Σcapacity, largest / max capacity)`; with `fixed_load` (load that cannot move) also
    the fixed load alone, and the largest partition where it ends soonest. Integer loads without
    capacity or fixed load stay exact (Python ints).
    """
    workers = check_workers(workers)
    values = check_values("throughput", throughput)
    speed = check_capacity(capacity, workers) if capacity is not None else None
    fixed = check_fixed_load(fixed_load, workers) if fixed_load is not None else None
    return lower_bound_of(values, workers, speed, fixed)


def lower_bound_of(
    t: np.ndarray,
    workers: int,
    speed: np.ndarray | None = None,
    fixed: np.ndarray | None = None,
    *,
    whole: bool = False,
) -> int | float:
    """`lower_bound` on arrays already checked: the one place the bound is computed (the planners'
    hot path calls it directly).

    Equal workers without fixed load: `max(largest, total / workers)`, exact for integer loads; with
    `whole`, integer loads round it up, since a max load of integer counts is an integer too. Else
    the fluid split of all load, the largest partition on the worker where it ends soonest, and the
    fixed load alone, as finish times.
    """
    if speed is None and fixed is None:
        if t.size == 0:
            return 0.0
        largest, total = t.max().item(), t.sum().item()  # Python numbers: int64 sums are exact
        if whole and t.dtype.kind == "i":
            return max(largest, -(-total // workers))
        return max(largest, total / workers)
    speed = np.ones(workers) if speed is None else speed
    fixed = np.zeros(workers) if fixed is None else fixed
    total = float(t.sum()) + float(fixed.sum())
    bound = max(total / float(speed.sum()), float((fixed / speed).max()))
    if t.size:
        bound = max(bound, float(((fixed + float(t.max())) / speed).min()))
    return bound
