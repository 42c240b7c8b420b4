"""Our planner: LPT quality and then some, while moving as few partitions as it can."""

from __future__ import annotations

import numpy as np

from rebalancer.balance._inputs import (
    ArrayLike,
    Inputs,
    check_inputs,
    check_max_moves,
    check_skip_ratio,
    descending,
    keep_current,
    least_loaded,
    make_plan,
    skip_reason,
    worker_loads,
)
from rebalancer.balance.checks import check_capacity, check_fixed_load
from rebalancer.balance.lpt import lpt_owner
from rebalancer.balance.metrics import lower_bound_of
from rebalancer.balance.plan import Plan
from rebalancer.balance.refine import Assignment, match_labels, multifit, send_home
from rebalancer.balance.uniform import place_unowned_by_finish, uniform_candidates

# Local-search steps allowed per worker. Enough to fix a skewed assignment of any size (each
# step moves about half the gap between the heaviest and lightest worker), small enough that
# 100,000 partitions stay well inside the time budget.
_STEPS_PER_WORKER = 64

# Max loads this close (relative to the lower bound) count as equal quality, so the plan with
# fewer moves wins. An interval's counts carry more noise than this (sqrt(N)/N is 0.3% at
# 100,000 items per worker), so chasing the difference would only churn partitions.
QUALITY_TOLERANCE = 1e-3

# MULTIFIT's first-fit scans cost partitions x workers per round; past this it is not tried
# (with that many partitions per worker, LPT plus local search already sits at the bound).
_MULTIFIT_MAX_WORK = 300_000


Start = tuple[np.ndarray, int]  # an assignment to refine, and how many leading workers are closed


def _lpt_start(inputs: Inputs, best_top: int | float) -> Start | None:
    return lpt_owner(inputs), 0


def _pinned_start(inputs: Inputs, best_top: int | float) -> Start | None:
    """LPT after giving each big partition a worker of its own, or None when none is big.

    A partition is big when it plus the smallest partition exceed the average load still to share:
    then any worker holding it with anything else would pass the bound of the rest, and LPT's
    habit of topping it up with a small partition at the end is what leaves it the heaviest.
    """
    t, m = inputs.throughput, inputs.workers
    order = descending(t, np.flatnonzero(t > 0))
    values = t[order].tolist()
    if not values:
        return None
    smallest = values[-1]
    rest, pinned = sum(values), 0
    while pinned < min(m - 1, len(values)) and values[pinned] + smallest > rest / (m - pinned):
        rest -= values[pinned]
        pinned += 1
    if pinned == 0:
        return None
    owner = lpt_owner(inputs)
    owner[order[:pinned]] = np.arange(pinned)
    loads = [0] * (m - pinned)
    owner[order[pinned:]] = least_loaded(t[order[pinned:]], loads) + pinned
    return owner, pinned


def _multifit_start(inputs: Inputs, best_top: int | float) -> Start | None:
    """MULTIFIT below the best max load so far (idle partitions keep their LPT owner), if it packs."""
    t, m = inputs.throughput, inputs.workers
    if t.size * m > _MULTIFIT_MAX_WORK:
        return None
    order = descending(t, np.flatnonzero(t > 0))
    packed = multifit(t[order].tolist(), m, lower_bound_of(t, m), float(best_top))
    if packed is None:
        return None
    owner = lpt_owner(inputs)
    owner[order] = packed
    return owner, 0


def _refined(
    inputs: Inputs, start: np.ndarray, target: int | float, closed: int = 0
) -> tuple[np.ndarray, int | float]:
    """Local search from `start` to the bound, then the labels and moves that keep most owners."""
    t, current, m = inputs.throughput, inputs.current_owner, inputs.workers
    top = worker_loads(t, start, m).max().item()
    owner = start
    if top > target:
        state = Assignment(t, start, current, m, closed)
        state.improve(target, None, max_steps=_STEPS_PER_WORKER * m)
        owner = state.owner_array()
        top = state.max_load
    busy = t > 0
    # Worker identity does not matter to LPT, so rename its groups after the owners they overlap most.
    owned = busy & (current >= 0)
    overlap = np.bincount(owner[owned] * m + current[owned], minlength=m * m).reshape(m, m)
    sigma = match_labels(overlap)
    owner[busy] = sigma[owner[busy]]
    send_home(inputs, owner, [top] * m)
    return owner, top


def plan_rebalance(
    throughput: ArrayLike,
    current_owner: ArrayLike,
    workers: int,
    *,
    skip_ratio: float = 1.15,
    max_moves: int | None = None,
    capacity: ArrayLike | None = None,
    fixed_load: ArrayLike | None = None,
) -> Plan:
    """The lowest max worker load we can find, then the fewest moves that reach it.

    Candidates: the current owners; a local search from them; then, while the bound is out of
    reach, LPT, LPT with big partitions pinned alone, and MULTIFIT, each refined by the same search,
    relabelled and with needless moves undone. Among those of equal quality (QUALITY_TOLERANCE)
    the fewest moves wins; the current owners have none, so a plan is never worse than what runs
    now and only replaces it for a real gain. `max_moves` bounds partitions taken from a live
    owner; placing an unowned partition is free. Skips like `plan_lpt` (max/min below
    `skip_ratio`), and when nothing helps.

    `capacity` gives each worker a relative speed; the objective is then the max finish time
    `load_w / capacity_w` (uniform machines), bounded below by `max(total / Σcapacity, largest /
    max capacity)`. `fixed_load` is load on each worker that no plan can move (another process,
    partitions pinned there); it counts in every finish time. Every guarantee above holds for both.
    """
    inputs = check_inputs(throughput, current_owner, workers)
    skip_ratio = check_skip_ratio(skip_ratio)
    max_moves = check_max_moves(max_moves)
    t, m = inputs.throughput, inputs.workers
    speed = check_capacity(capacity, m) if capacity is not None else None
    fixed = check_fixed_load(fixed_load, m) if fixed_load is not None else None
    if (speed is not None and (speed != speed[0]).any()) or (fixed is not None and fixed.any()):
        return _plan_uniform(
            inputs,
            np.ones(m) if speed is None else speed,
            np.zeros(m) if fixed is None else fixed,
            skip_ratio,
            max_moves,
        )
    load_before = worker_loads(t, inputs.current_owner, m)
    keep = keep_current(inputs)
    reason = skip_reason(inputs, load_before, skip_ratio)
    if reason is not None:
        return make_plan(inputs, keep, load_before, reason)
    keep_top = worker_loads(t, keep, m).max().item()
    bound = lower_bound_of(t, m, whole=True)  # a max load this low cannot be beaten
    slack = QUALITY_TOLERANCE * bound
    if keep_top <= bound + slack:
        return make_plan(
            inputs, keep, load_before, "current assignment is already within 0.1% of the lower bound"
        )

    # The local search goes first: when it reaches the bound, a fresh assignment could only add moves.
    target = bound + slack
    steps = _STEPS_PER_WORKER * m if max_moves is None else min(_STEPS_PER_WORKER * m, 2 * max_moves + m)
    local = Assignment(t, keep, inputs.current_owner, m)
    # Unbounded, skip it when it would have to move a quarter of the partitions anyway.
    if max_moves is not None or local.moves_needed(target, steps) <= min(steps, t.size // 4):
        local.improve(target, max_moves, max_steps=steps)
    candidates: list[tuple[int | float, int, np.ndarray]] = [
        (keep_top, 0, keep),
        (local.max_load, local.moved, local.owner_array()),
    ]
    # Then fresh assignments, each tried only while the bound is still out of reach.
    if max_moves is None or max_moves > 0:
        for build in (_lpt_start, _pinned_start, _multifit_start):
            best_top = min(top for top, _, _ in candidates)
            if best_top <= target:
                break
            start = build(inputs, best_top)
            if start is None:
                continue
            owner, top = _refined(inputs, start[0], target, closed=start[1])
            moved = _moved(inputs, owner)
            if max_moves is None or moved <= max_moves:
                candidates.append((top, moved, owner))

    return _best_of(inputs, candidates, keep, keep_top, target, slack, load_before, max_moves)


def _best_of(
    inputs: Inputs,
    candidates: list,
    keep: np.ndarray,
    keep_top: int | float,
    target: int | float,
    slack: float,
    load_before: np.ndarray,
    max_moves: int | None,
) -> Plan:
    """Equal quality: within `slack` of the bound once the bound is reached, else of the best found;
    among those, the fewest moves."""
    best_top = min(top for top, _, _ in candidates)
    good_enough = target if best_top <= target else best_top + slack
    _, _, owner = min((c for c in candidates if c[0] <= good_enough), key=lambda c: (c[1], c[0]))
    if owner is keep:
        limit = "" if max_moves is None else f" within max_moves={max_moves}"
        return make_plan(
            inputs, keep, load_before, f"no plan{limit} lowers the max load {keep_top} by over 0.1%"
        )
    return make_plan(inputs, owner, load_before, None)


def _plan_uniform(
    inputs: Inputs, speed: np.ndarray, fixed: np.ndarray, skip_ratio: float, max_moves: int | None
) -> Plan:
    """`plan_rebalance` for workers of unequal speed or with fixed load (see `balance.uniform`)."""
    t, m = inputs.throughput, inputs.workers
    load_before = worker_loads(t, inputs.current_owner, m)
    speeds, fixed_loads = speed.tolist(), fixed.tolist()
    keep = inputs.current_owner.copy()
    loads = [f + x for f, x in zip(fixed_loads, load_before.tolist(), strict=True)]
    place_unowned_by_finish(t, keep, loads, speeds)
    reason = skip_reason(inputs, load_before, skip_ratio, (load_before + fixed) / speed)
    if reason is not None:
        return make_plan(inputs, keep, load_before, reason)
    keep_top = max(load / s for load, s in zip(loads, speeds, strict=True))
    bound = lower_bound_of(t, m, speed, fixed)
    slack = QUALITY_TOLERANCE * bound
    target = bound + slack
    if keep_top <= target:
        return make_plan(
            inputs, keep, load_before, "current assignment is already within 0.1% of the lower bound"
        )
    candidates = uniform_candidates(inputs, keep, speeds, fixed_loads, target, max_moves)
    return _best_of(inputs, candidates, keep, keep_top, target, slack, load_before, max_moves)


def _moved(inputs: Inputs, owner: np.ndarray) -> int:
    current = inputs.current_owner
    return int(np.count_nonzero((current >= 0) & (owner != current)))
