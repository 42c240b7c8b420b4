"""Count balance: every flow holds the same number of partitions ±1, with the fewest possible handoffs.

Kafka's sticky assignors keep "as many owners as possible"; here that is made exact. The flows that hold
the most partitions now get the larger (ceil) targets, so the number of handoffs equals the lower bound
`Σ_f max(0, count_f − target_f)`. Optional per-partition weights only choose *which* partitions move and
where, never how many: neither Solace nor Kafka evens out throughput this way.

Partitions without a live owner (new ones, or ones whose flow left) are mapped directly; they are not
handoffs, because there is no old flow to drain.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rebalancer.balance.checks import as_1d, check_values, describe, is_int, is_real, is_sequence

FlowId = Hashable

# Refinement stops after this many swaps per moved partition (plus a constant), and never does more
# than _MAX_SWAPS: the plan stays fast at 10,000 partitions even when everything moves.
_SWAPS_PER_MOVE = 4
_MAX_SWAPS = 400
# Each refinement round pairs only this many of the heaviest flows with as many of the lightest.
_PAIR_CANDIDATES = 8


@dataclass(frozen=True, slots=True)
class Move:
    """One partition changing flow. `from_flow` is None when nobody live owned it (not a handoff)."""

    partition: int
    from_flow: FlowId | None
    to_flow: FlowId


@dataclass(frozen=True, slots=True)
class CountPlan:
    """What a count rebalance does.

    `assignments` map ownerless partitions at once; `handoffs` move partitions between live flows, in
    execution order: each leaves a flow holding the most at that point, and (without weights) goes to
    a flow holding the fewest.
    `lower_bound` is computed from the counts alone, so `len(handoffs) == lower_bound` is checkable.
    """

    targets: dict[FlowId, int]
    assignments: tuple[Move, ...]
    handoffs: tuple[Move, ...]
    lower_bound: int


def count_targets(counts: Sequence[int], partition_count: int) -> list[int]:
    """Per-flow targets that sum to `partition_count`, each floor or ceil of the mean.

    The ceil targets go to the flows holding the most partitions now (ties: earlier flow first); this
    choice minimises `Σ max(0, count − target)` because any swap of a ceil and a floor target between a
    larger and a smaller holder can only raise the excess.
    """
    if not is_int(partition_count):
        raise ValueError(f"partition_count must be an int, got {partition_count!r}")
    if partition_count < 0:
        raise ValueError(f"partition_count must be >= 0, got {partition_count}")
    counts = _check_counts(counts)
    flows = len(counts)
    if flows == 0:
        raise ValueError("counts must name at least one flow, got []")
    base, extra = divmod(int(partition_count), flows)
    order = sorted(range(flows), key=lambda i: (-counts[i], i))
    targets = [base] * flows
    for i in order[:extra]:
        targets[i] = base + 1
    return targets


def _check_counts(counts: Sequence[int]) -> list[int]:
    """Partitions per flow: the planners' shared validator, then ints only (a count of 1.5 is a bug)."""
    values = check_values("counts", counts)
    if values.size and values.dtype.kind != "i":
        raise ValueError(f"counts must hold ints, got dtype {values.dtype}")
    return [int(c) for c in values.tolist()]


def handoff_lower_bound(counts: Sequence[int], partition_count: int) -> int:
    """The fewest handoffs that bring `counts` (live-owned partitions per flow) to balance ±1."""
    targets = count_targets(counts, partition_count)
    return sum(max(0, c - t) for c, t in zip(_check_counts(counts), targets))


def is_count_balanced(counts: Sequence[int]) -> bool:
    values = _check_counts(counts)
    return not values or max(values) - min(values) <= 1


def plan_count_balance(
    owner_by_partition: Mapping[int, FlowId | None] | Sequence[FlowId | None],
    flows: Sequence[FlowId],
    weights: Mapping[int, float] | Sequence[float] | None = None,
) -> CountPlan:
    """Plan a count rebalance of `owner_by_partition` over `flows` (order breaks ties).

    `owner_by_partition` is a mapping or a sequence indexed by partition; an owner that is None or not in
    `flows` means the partition is ownerless. `weights` (per-partition throughput, >= 0) pick which
    partitions move so that summed weight per flow is as even as the minimal handoff count allows.
    """
    owners = _owner_items(owner_by_partition)
    if not is_sequence(flows):
        raise ValueError(
            f"flows must be a sequence of flow ids (its order breaks ties), got {describe(flows)}"
        )
    flow_list = list(flows)
    if not flow_list:
        raise ValueError("flows must name at least one flow, got []")
    index: dict[FlowId, int] = {}
    for i, f in enumerate(flow_list):
        if f is None:
            raise ValueError("flows must not contain None (None means ownerless), got None")
        _check_hashable(f"flows[{i}]", f)
        if f in index:
            raise ValueError(f"flows must be unique, got {f!r} twice")
        index[f] = i
    owned: list[list[int]] = [[] for _ in flow_list]
    orphans: list[int] = []
    for p, o in owners:
        slot = index.get(o) if o is not None else None
        if slot is None:
            orphans.append(p)
        else:
            owned[slot].append(p)
    counts = [len(ps) for ps in owned]
    targets = count_targets(counts, len(owners))
    lower = sum(max(0, c - t) for c, t in zip(counts, targets))
    if weights is None:
        assignments, handoffs = _plan_unweighted(owned, orphans, counts, targets)
    else:
        w = _weights(weights, [p for p, _ in owners])
        assignments, handoffs = _plan_weighted(owned, orphans, counts, targets, w)
    return CountPlan(
        targets={flow_list[i]: t for i, t in enumerate(targets)},
        assignments=tuple(Move(p, None, flow_list[i]) for p, i in assignments),
        handoffs=tuple(Move(p, flow_list[d], flow_list[r]) for p, d, r in handoffs),
        lower_bound=lower,
    )


def _owner_items(
    owner_by_partition: Mapping[int, FlowId | None] | Sequence[FlowId | None],
) -> list[tuple[int, FlowId | None]]:
    if isinstance(owner_by_partition, Mapping):
        for p in owner_by_partition:  # checked before sorting: mixed key types would raise TypeError
            if not is_int(p) or p < 0:
                raise ValueError(f"owner_by_partition keys must be partitions (ints >= 0), got {p!r}")
        items = sorted(((int(p), o) for p, o in owner_by_partition.items()), key=lambda kv: kv[0])
    elif is_sequence(owner_by_partition):
        items = list(enumerate(owner_by_partition))
    else:
        raise ValueError(
            f"owner_by_partition must be a mapping or a sequence of owners, got {describe(owner_by_partition)}"
        )
    for p, o in items:
        _check_hashable(f"owner_by_partition[{p}]", o)
    return items


def _check_hashable(name: str, value: object) -> None:
    try:
        hash(value)
    except TypeError:
        raise ValueError(f"{name} must be hashable, got {value!r}") from None


def _weights(weights: Mapping[int, float] | Sequence[float], partitions: list[int]) -> dict[int, float]:
    out: dict[int, float] = {}
    is_map = isinstance(weights, Mapping)
    if not is_map and not is_sequence(weights):
        raise ValueError(f"weights must be a mapping or a sequence of numbers, got {describe(weights)}")
    if isinstance(weights, np.ndarray):
        as_1d("weights", weights)  # a 0-d or 2-d array is named, not indexed into
    for p in partitions:
        if is_map:
            if p not in weights:
                raise ValueError(f"weights must cover every partition, partition {p} is missing")
            v = weights[p]
        else:
            if p >= len(weights):
                raise ValueError(f"weights must cover every partition, got {len(weights)} for partition {p}")
            v = weights[p]
        if not is_real(v) or v < 0:  # float(v) used to take "1.5" and True
            raise ValueError(f"weights[{p}] must be a finite number >= 0, got {v!r}")
        out[p] = float(v)
    return out


def _place_orphans_by_count(
    orphans: list[int], counts: list[int], deficit: list[int]
) -> list[tuple[int, int]]:
    """Ownerless partitions go to the flows with fewest partitions (Solace's step 2), within targets."""
    heap = [(counts[i], i) for i in range(len(counts)) if deficit[i] > 0]
    heapq.heapify(heap)
    placed: list[tuple[int, int]] = []
    for p in orphans:
        c, i = heapq.heappop(heap)
        placed.append((p, i))
        counts[i] = c + 1
        deficit[i] -= 1
        if deficit[i] > 0:
            heapq.heappush(heap, (counts[i], i))
    return placed


def _plan_unweighted(
    owned: list[list[int]], orphans: list[int], counts: list[int], targets: list[int]
) -> tuple[list[tuple[int, int]], list[tuple[int, int, int]]]:
    cur = list(counts)
    deficit = [max(0, t - c) for c, t in zip(counts, targets)]
    assignments = _place_orphans_by_count(orphans, cur, deficit)
    donors = [(-cur[i], i) for i in range(len(cur)) if cur[i] > targets[i]]
    receivers = [(cur[i], i) for i in range(len(cur)) if deficit[i] > 0]
    heapq.heapify(donors)
    heapq.heapify(receivers)
    # A donor keeps its lowest-numbered partitions: deterministic, and stable across rebalances.
    release = {i: sorted(owned[i]) for _, i in donors}
    handoffs: list[tuple[int, int, int]] = []
    while donors:
        _, d = heapq.heappop(donors)
        _, r = heapq.heappop(receivers)
        handoffs.append((release[d].pop(), d, r))
        cur[d] -= 1
        cur[r] += 1
        deficit[r] -= 1
        if cur[d] > targets[d]:
            heapq.heappush(donors, (-cur[d], d))
        if deficit[r] > 0:
            heapq.heappush(receivers, (cur[r], r))
    return assignments, handoffs


def _plan_weighted(
    owned: list[list[int]],
    orphans: list[int],
    counts: list[int],
    targets: list[int],
    w: dict[int, float],
) -> tuple[list[tuple[int, int]], list[tuple[int, int, int]]]:
    """Same counts and handoff total as unweighted; LPT placement, then count-preserving swaps."""
    n = len(counts)
    donors = [i for i in range(n) if counts[i] > targets[i]]
    receivers = [i for i in range(n) if counts[i] < targets[i]]
    is_receiver = [False] * n
    for r in receivers:
        is_receiver[r] = True
    load = [sum(w[p] for p in owned[i]) for i in range(n)]
    total = sum(w.values())
    per_partition = total / len(w) if w else 0.0
    origin: dict[int, int] = {p: -1 for p in orphans}
    movable: dict[int, list[int]] = {i: [] for i in donors + receivers}
    pool = list(orphans)
    for d in donors:
        kept, released = _choose_kept(owned[d], targets[d], targets[d] * per_partition, w)
        movable[d] = kept
        for p in owned[d]:
            origin[p] = d
        load[d] = sum(w[p] for p in kept)
        pool.extend(released)
    # LPT into receivers, within each receiver's deficit.
    capacity = {r: targets[r] - counts[r] for r in receivers}
    heap = [(load[r], r) for r in receivers]
    heapq.heapify(heap)
    where: dict[int, int] = {}
    for p in sorted(pool, key=lambda p: (-w[p], p)):
        ld, r = heapq.heappop(heap)
        movable[r].append(p)
        where[p] = r
        load[r] = ld + w[p]
        capacity[r] -= 1
        if capacity[r] > 0:
            heapq.heappush(heap, (load[r], r))
    budget = min(_SWAPS_PER_MOVE * len(pool) + 16, _MAX_SWAPS)
    _refine(movable, load, origin, where, is_receiver, w, budget)
    assignments = sorted((p, where[p]) for p in orphans)
    moves = [(p, origin[p], where[p]) for p in sorted(where) if origin[p] >= 0 and where[p] != origin[p]]
    cur = list(counts)
    for _, r in assignments:
        cur[r] += 1
    return assignments, _order_handoffs(moves, cur)


def _choose_kept(
    partitions: list[int], keep: int, ideal: float, w: dict[int, float]
) -> tuple[list[int], list[int]]:
    """Pick `keep` partitions whose summed weight is near `ideal`.

    Start from the partitions closest to the average weight `ideal / keep`, then make 1-for-1 swaps
    while they bring the sum closer. Starting from the lightest would let one huge partition in first.
    """
    mean = ideal / keep if keep else 0.0
    ps = sorted(partitions, key=lambda p: (abs(w[p] - mean), p))
    kept = ps[:keep]
    released = sorted(ps[keep:], key=lambda p: (w[p], p))
    total = sum(w[p] for p in kept)
    for _ in range(2 * keep + 2):
        short = ideal - total
        if not released or not kept:
            break
        rw = [w[p] for p in released]
        best = None
        best_err = abs(short) * (1 - 1e-12)
        for i, k in enumerate(kept):
            j = bisect_left(rw, w[k] + short)
            for m in (j - 1, j):
                if 0 <= m < len(rw):
                    err = abs(short - (rw[m] - w[k]))
                    if err < best_err:
                        best_err, best = err, (i, m)
        if best is None:
            break
        i, m = best
        total += rw[m] - w[kept[i]]
        kept[i], released[m] = released[m], kept[i]
        released.sort(key=lambda p: (w[p], p))
    return sorted(kept), sorted(released)


def _refine(
    movable: dict[int, list[int]],
    load: list[float],
    origin: dict[int, int],
    where: dict[int, int],
    is_receiver: list[bool],
    w: dict[int, float],
    budget: int,
) -> None:
    """Swap partitions between a heavy and a light flow while that narrows their gap.

    A partition may sit at any receiver or at its own donor, so every swap keeps all counts and the
    handoff total. Each swap strictly lowers the sum of squared loads, so this terminates. A heavy flow
    tries the lightest flows, and also the flows its swappable partitions come from or went to.
    """
    flexible = list(movable)
    away: dict[int, set[int]] = {f: set() for f in flexible}  # donor -> its partitions now elsewhere
    for p, f in where.items():
        if origin[p] >= 0 and f != origin[p]:
            away[origin[p]].add(p)
    by_load = lambda f: (load[f], f)  # noqa: E731
    for _ in range(budget):
        heavies = heapq.nlargest(_PAIR_CANDIDATES, flexible, key=by_load)
        lights = heapq.nsmallest(_PAIR_CANDIDATES, flexible, key=by_load)
        swapped = False
        for heavy in heavies:
            if is_receiver[heavy]:
                linked = {origin[p] for p in movable[heavy] if origin[p] >= 0}
            else:
                linked = {where[p] for p in away[heavy]}
            partners = sorted(set(lights) | linked, key=by_load)
            for light in partners:
                gap = load[heavy] - load[light]
                if gap <= 0:
                    break
                found = _best_swap(movable[heavy], movable[light], heavy, light, gap, origin, is_receiver, w)
                if found is None:
                    continue
                a, b = found
                movable[heavy].remove(a)
                movable[light].remove(b)
                movable[heavy].append(b)
                movable[light].append(a)
                for p, f in ((a, light), (b, heavy)):
                    where[p] = f
                    if origin[p] >= 0:
                        if f == origin[p]:
                            away[f].discard(p)
                        else:
                            away[origin[p]].add(p)
                delta = w[a] - w[b]
                load[heavy] -= delta
                load[light] += delta
                swapped = True
                break
            if swapped:
                break
        if not swapped:
            return


def _best_swap(
    at_heavy: list[int],
    at_light: list[int],
    heavy: int,
    light: int,
    gap: float,
    origin: dict[int, int],
    is_receiver: list[bool],
    w: dict[int, float],
) -> tuple[int, int] | None:
    a_side = [p for p in at_heavy if is_receiver[light] or origin[p] == light]
    b_side = [p for p in at_light if is_receiver[heavy] or origin[p] == heavy]
    if not a_side or not b_side:
        return None
    b_side.sort(key=lambda p: (w[p], p))
    bw = [w[p] for p in b_side]
    best: tuple[int, int] | None = None
    best_gap = gap * (1 - 1e-12)
    for a in sorted(a_side):
        ideal = w[a] - gap / 2
        j = bisect_left(bw, ideal)
        for k in (j - 1, j):
            if 0 <= k < len(bw):
                delta = w[a] - bw[k]
                if 0 < delta < gap:
                    new_gap = abs(gap - 2 * delta)
                    if new_gap < best_gap:
                        best_gap = new_gap
                        best = (a, b_side[k])
    return best


def _order_handoffs(moves: list[tuple[int, int, int]], cur: list[int]) -> list[tuple[int, int, int]]:
    """Execution order: always from the donor holding most, to its receiver holding fewest now."""
    by_donor: dict[int, list[tuple[int, int, int]]] = {}
    for p, d, r in moves:
        by_donor.setdefault(d, []).append((cur[r], r, p))
    for heap in by_donor.values():
        heapq.heapify(heap)
    donors = [(-cur[d], d) for d in by_donor]
    heapq.heapify(donors)
    ordered: list[tuple[int, int, int]] = []
    while donors:
        _, d = heapq.heappop(donors)
        heap = by_donor[d]
        while True:
            key, r, p = heapq.heappop(heap)
            if key == cur[r]:
                break
            heapq.heappush(heap, (cur[r], r, p))
        ordered.append((p, d, r))
        cur[d] -= 1
        cur[r] += 1
        if heap:
            heapq.heappush(donors, (-cur[d], d))
    return ordered
