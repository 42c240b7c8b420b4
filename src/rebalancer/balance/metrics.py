"""Load metrics shared by the planners, the queue's reports and the benchmarks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def imbalance(loads: Sequence[float] | np.ndarray) -> float:
    """Max over mean load: 1.0 is perfect balance, and it is what a bottleneck worker costs.

    Max/mean (not max/min) because throughput is set by the busiest worker relative to the
    average; an idle worker does not make the figure infinite. No load at all counts as balanced.
    """
    values = np.asarray(loads, dtype=np.float64)
    if values.size == 0:
        return 1.0
    mean = float(values.mean())
    if mean <= 0.0:
        return 1.0
    return float(values.max()) / mean


def lower_bound(throughput: Sequence[float] | np.ndarray, workers: int) -> float:
    """No assignment can have a max worker load below `max(largest partition, total / workers)`."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    values = np.asarray(throughput, dtype=np.float64)
    if values.size == 0:
        return 0.0
    return max(float(values.max()), float(values.sum()) / workers)
