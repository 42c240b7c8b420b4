"""Planning for workers of unequal speed: the uniform-machines makespan `max(load_w / capacity_w)`.

`plan_rebalance(..., capacity=...)` comes here when the speeds differ or some load cannot move
(`fixed_load`: another process on the machine, partitions pinned elsewhere). The search mirrors the
identical-workers one: keep the current owners, improve them locally, or start from LPT by earliest
finish time and improve that; then undo needless moves and keep the plan with the fewest moves among
those of equal quality.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np

from rebalancer.balance._inputs import Inputs, descending, worker_loads
from rebalancer.balance.refine import match_labels, send_home

# Local-search steps allowed per worker (see rebalance._STEPS_PER_WORKER).
STEPS_PER_WORKER = 64


def earliest_finish(values: list, loads: list, speed: list) -> list[int]:
    """Give each value, in order, to the worker that would finish it soonest (ties: lowest index).

    `loads` is updated in place. LPT's rule for uniform machines; O(values x workers).
    """
    workers = range(len(loads))
    chosen = []
    for value in values:
        w = min(workers, key=lambda k: (loads[k] + value) / speed[k])
        loads[w] += value
        chosen.append(w)
    return chosen


def place_unowned_by_finish(t: np.ndarray, owner: np.ndarray, loads: list, speed: list) -> None:
    unowned = np.flatnonzero(owner < 0)
    if unowned.size:
        order = descending(t, unowned)
        owner[order] = earliest_finish(t[order].tolist(), loads, speed)


def lpt_by_finish(inputs: Inputs, speed: list, fixed: list) -> np.ndarray:
    """Every busy partition re-placed, heaviest first, by earliest finish; idle ones keep their owner."""
    t = inputs.throughput
    owner = inputs.current_owner.copy()
    order = descending(t, np.flatnonzero(t > 0))
    loads = list(fixed)
    owner[order] = earliest_finish(t[order].tolist(), loads, speed)
    place_unowned_by_finish(t, owner, loads, speed)
    return owner


class UniformSearch:
    """Greedy descent on the worker that finishes last: the best single move, else the best swap.

    A move of `x` from heavy `h` to `l` is best near `x* = (L_h s_l - L_l s_h) / (s_h + s_l)`, where
    both would finish together; per-worker throughputs are kept sorted so that is one bisection. Every
    step lowers `h` and leaves `l` below the old maximum, so the sorted finish times fall and it ends.
    """

    def __init__(
        self, t: np.ndarray, owner: np.ndarray, origin: np.ndarray, speed: list, fixed: list
    ) -> None:
        m = len(speed)
        self.speed = speed
        self.owner: list[int] = owner.tolist()
        self.origin: list[int] = origin.tolist()
        self.weight = t.tolist()
        busy = np.flatnonzero(t > 0)
        busy = busy[np.lexsort((t[busy], owner[busy]))]
        bounds = np.searchsorted(owner[busy], np.arange(m + 1)).tolist()
        keys, ids = t[busy].tolist(), busy.tolist()
        self.keys = [keys[bounds[w] : bounds[w + 1]] for w in range(m)]
        self.ids = [ids[bounds[w] : bounds[w + 1]] for w in range(m)]
        self.loads: list = [f + x for f, x in zip(fixed, worker_loads(t, owner, m).tolist(), strict=True)]
        origin_busy = origin[busy]
        self.moved = int(np.count_nonzero((origin_busy >= 0) & (origin_busy != owner[busy])))

    def finish(self) -> list[float]:
        return [load / s for load, s in zip(self.loads, self.speed, strict=True)]

    @property
    def max_finish(self) -> float:
        return max(self.finish())

    def owner_array(self) -> np.ndarray:
        return np.array(self.owner, dtype=np.int64)

    def cost(self, p: int, dest: int) -> int:
        home = self.origin[p]
        if home < 0:
            return 0
        return (dest != home) - (self.owner[p] != home)

    def move(self, p: int, dest: int) -> None:
        src, value = self.owner[p], self.weight[p]
        self.moved += self.cost(p, dest)
        keys, ids = self.keys[src], self.ids[src]
        i = ids.index(p, bisect_left(keys, value))
        del keys[i]
        del ids[i]
        i = bisect_right(self.keys[dest], value)
        self.keys[dest].insert(i, value)
        self.ids[dest].insert(i, p)
        self.loads[src] -= value
        self.loads[dest] += value
        self.owner[p] = dest

    def _pair_max(self, h: int, light: int, shift: float) -> float:
        return max((self.loads[h] - shift) / self.speed[h], (self.loads[light] + shift) / self.speed[light])

    def _ideal(self, h: int, light: int) -> float:
        sh, sl = self.speed[h], self.speed[light]
        return (self.loads[h] * sl - self.loads[light] * sh) / (sh + sl)

    def _best_move(self, h: int, top: float, budget: int | None) -> tuple[float, int, int] | None:
        best = None
        keys, ids = self.keys[h], self.ids[h]
        for light, done in enumerate(self.finish()):
            if light == h or done >= top:
                continue
            i = bisect_left(keys, self._ideal(h, light))
            for j in (i - 1, i):
                if 0 <= j < len(keys):
                    after = self._pair_max(h, light, keys[j])
                    if after < top and (best is None or after < best[0]):
                        p = ids[j]
                        if budget is None or self.moved + self.cost(p, light) <= budget:
                            best = (after, p, light)
        return best

    def _best_swap(self, h: int, top: float, budget: int | None) -> tuple[float, int, int, int] | None:
        best = None
        a = self.keys[h]
        if not a:
            return None
        av = np.asarray(a, dtype=np.float64)
        for light, done in enumerate(self.finish()):
            b = self.keys[light]
            if light == h or done >= top or not b:
                continue
            bv = np.asarray(b, dtype=np.float64)
            idx = np.searchsorted(av, bv + self._ideal(h, light))
            for ja in (np.maximum(idx - 1, 0), np.minimum(idx, len(a) - 1)):
                shift = av[ja] - bv
                after = np.maximum(
                    (self.loads[h] - shift) / self.speed[h], (self.loads[light] + shift) / self.speed[light]
                )
                after[shift <= 0] = np.inf
                jb = int(after.argmin())
                if after[jb] < top and (best is None or after[jb] < best[0]):
                    p, q = self.ids[h][int(ja[jb])], self.ids[light][jb]
                    if budget is None or self.moved + self.cost(p, light) + self.cost(q, h) <= budget:
                        best = (float(after[jb]), p, q, light)
        return best

    def improve(self, target: float, budget: int | None, max_steps: int) -> None:
        for _ in range(max_steps):
            finish = self.finish()
            top = max(finish)
            if top <= target:
                return
            h = finish.index(top)
            found = self._best_move(h, top, budget)
            if found is not None:
                self.move(found[1], found[2])
                continue
            swap = self._best_swap(h, top, budget)
            if swap is None:
                return
            _, p, q, light = swap
            self.move(p, light)
            self.move(q, h)


def relabel_equal_workers(inputs: Inputs, owner: np.ndarray, speed: list, fixed: list) -> None:
    """Rename workers of equal speed and fixed load after the owners they overlap most (in place):
    swapping two identical workers changes no finish time, only how many partitions move."""
    t, current, m = inputs.throughput, inputs.current_owner, inputs.workers
    busy = t > 0
    owned = busy & (current >= 0)
    overlap = np.bincount(owner[owned] * m + current[owned], minlength=m * m).reshape(m, m)
    sigma = np.arange(m)
    classes: dict[tuple[float, float], list[int]] = {}
    for w in range(m):
        classes.setdefault((speed[w], fixed[w]), []).append(w)
    for members in classes.values():
        if len(members) > 1:
            idx = np.array(members)
            sigma[idx] = idx[match_labels(overlap[np.ix_(idx, idx)])]
    owner[busy] = sigma[owner[busy]]


def uniform_candidates(
    inputs: Inputs, keep: np.ndarray, speed: list, fixed: list, target: float, max_moves: int | None
) -> list[tuple[float, int, np.ndarray]]:
    """(max finish, moves, owner) for: the current owners, their local improvement, refined LPT."""
    t, m = inputs.throughput, inputs.workers
    steps = STEPS_PER_WORKER * m if max_moves is None else min(STEPS_PER_WORKER * m, 2 * max_moves + m)
    local = UniformSearch(t, keep, inputs.current_owner, speed, fixed)
    out = [(local.max_finish, 0, keep)]
    local.improve(target, max_moves, steps)
    out.append((local.max_finish, local.moved, local.owner_array()))
    if min(c[0] for c in out) <= target or max_moves == 0:
        return out
    fresh = UniformSearch(t, lpt_by_finish(inputs, speed, fixed), inputs.current_owner, speed, fixed)
    fresh.improve(target, None, STEPS_PER_WORKER * m)
    owner, top = fresh.owner_array(), fresh.max_finish
    relabel_equal_workers(inputs, owner, speed, fixed)
    send_home(inputs, owner, [top * s - f for s, f in zip(speed, fixed, strict=True)])
    moved = int(np.count_nonzero((inputs.current_owner >= 0) & (owner != inputs.current_owner)))
    if max_moves is None or moved <= max_moves:
        loads = worker_loads(t, owner, m).tolist()
        out.append((max((x + f) / s for x, f, s in zip(loads, fixed, speed, strict=True)), moved, owner))
    return out
