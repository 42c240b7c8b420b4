"""Load metrics shared by the planners, the queue's reports and the benchmarks."""

from __future__ import annotations

from rebalancer.balance._checks import ArrayLike, check_capacity, check_values, check_workers


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
        return max(values.tolist()) * values.size / total
    return float((values / speed).max()) * float(speed.sum()) / total


def lower_bound(throughput: ArrayLike, workers: int, capacity: ArrayLike | None = None) -> int | float:
    """No assignment can have a max worker load below `max(largest partition, total / workers)`.

    With `capacity` the objective is the max finish time `load_w / capacity_w`, and the bound is
    `max(total / Σcapacity, largest / max capacity)`. Integer loads stay exact (Python ints).
    """
    workers = check_workers(workers)
    values = check_values("throughput", throughput)
    speed = check_capacity(capacity, workers) if capacity is not None else None
    if values.size == 0:
        return 0.0
    largest, total = max(values.tolist()), sum(values.tolist())
    if speed is None:
        return max(largest, total / workers)
    return max(total / float(speed.sum()), largest / float(speed.max()))
