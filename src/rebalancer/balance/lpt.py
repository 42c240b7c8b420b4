"""The seed's planner: Longest Processing Time first, faithfully."""

from __future__ import annotations

import numpy as np

from rebalancer.balance._inputs import (
    ArrayLike,
    Inputs,
    check_inputs,
    check_skip_ratio,
    descending,
    keep_current,
    least_loaded,
    make_plan,
    place_unowned,
    skip_reason,
    worker_loads,
)
from rebalancer.balance.plan import Plan


def lpt_owner(inputs: Inputs) -> np.ndarray:
    """LPT over the partitions with throughput; the idle ones keep their owner.

    Heaviest first onto the least-loaded worker (ties: lowest worker index). Loads start at zero:
    every busy partition is re-placed, as in the seed. Unowned idle partitions go last, to the
    least-loaded worker, so every partition ends with an owner.
    """
    t = inputs.throughput
    owner = inputs.current_owner.copy()
    order = descending(t, np.flatnonzero(t > 0))
    loads = [0] * inputs.workers
    owner[order] = least_loaded(t[order], loads)
    place_unowned(inputs, owner, loads)
    return owner


def plan_lpt(
    throughput: ArrayLike, current_owner: ArrayLike, workers: int, *, skip_ratio: float = 1.15
) -> Plan:
    """Reassign partitions by LPT unless the current max/min worker-load ratio is below `skip_ratio`.

    1.15 rather than the design's 1.5: BLOCKING backpressure compresses the observed ratio, so a
    true 2x imbalance can show as about 1.3x. When skipped, owners stay as they are except that
    unowned partitions are placed (heaviest first, least-loaded worker).
    """
    inputs = check_inputs(throughput, current_owner, workers)
    skip_ratio = check_skip_ratio(skip_ratio)
    load_before = worker_loads(inputs.throughput, inputs.current_owner, inputs.workers)
    reason = skip_reason(inputs, load_before, skip_ratio)
    owner = keep_current(inputs) if reason is not None else lpt_owner(inputs)
    return make_plan(inputs, owner, load_before, reason)
