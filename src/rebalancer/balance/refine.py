"""Local search and worker relabelling: the parts of `plan_rebalance` that go beyond LPT."""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np

from rebalancer.balance._inputs import Inputs, worker_loads

# Below this many partitions on the two workers a swap search is cheaper in plain Python.
_NUMPY_SWAP_MIN = 160
# The subset-sum split of two workers runs on at most this many partitions and value units.
_RESPLIT_MAX_PARTITIONS = 256
_RESPLIT_UNITS = 1 << 16
# Subset-sum splits are the slow step; a few per worker is all the search needs.
_RESPLITS_PER_WORKER = 2
# Ejection chains try this many of the smallest partitions on the heaviest worker, each on this
# many of the lightest workers.
_EJECT_PARTITIONS = 3
_EJECT_WORKERS = 3


class Assignment:
    """A mutable assignment of the busy partitions, with per-worker throughputs kept sorted.

    Sorted lists turn "the partition closest to half the gap" into one bisection, which keeps each
    local-search step at O(workers + log partitions). `moved` counts partitions away from their
    `origin` owner; partitions whose origin is -1 (unowned) move for free.
    """

    def __init__(
        self, t: np.ndarray, owner: np.ndarray, origin: np.ndarray, workers: int, closed: int = 0
    ) -> None:
        self.workers = workers
        # Workers [0, closed) hold one big partition each and take no single moves.
        self.open_workers = range(closed, workers) if closed < workers else range(workers)
        self.owner: list[int] = owner.tolist()
        self.origin = origin.tolist()
        self.weight = t.tolist()
        busy = np.flatnonzero(t > 0)
        busy = busy[np.lexsort((t[busy], owner[busy]))]
        bounds = np.searchsorted(owner[busy], np.arange(workers + 1)).tolist()
        keys = t[busy].tolist()
        ids = busy.tolist()
        self.keys = [keys[bounds[w] : bounds[w + 1]] for w in range(workers)]
        self.ids = [ids[bounds[w] : bounds[w + 1]] for w in range(workers)]
        self.loads: list = worker_loads(t, owner, workers).tolist()
        origin_busy = origin[busy]
        self.moved = int(np.count_nonzero((origin_busy >= 0) & (origin_busy != owner[busy])))

    def owner_array(self) -> np.ndarray:
        return np.array(self.owner, dtype=np.int64)

    @property
    def max_load(self) -> int | float:
        return max(self.loads)

    def moves_needed(self, target: int | float, cap: int) -> int:
        """A lower bound on the moves that bring every worker to `target` (counting stops past `cap`).

        Each overloaded worker must shed its excess, and its largest partitions shed it fastest.
        """
        need = 0
        for w, load in enumerate(self.loads):
            excess = load - target
            keys = self.keys[w]
            i = len(keys)
            while excess > 0 and i > 0 and need <= cap:
                i -= 1
                excess -= keys[i]
                need += 1
            if need > cap:
                break
        return need

    def cost(self, p: int, dest: int) -> int:
        """Change in `moved` if partition `p` went to `dest`."""
        home = self.origin[p]
        if home < 0:
            return 0
        return (dest != home) - (self.owner[p] != home)

    def _take(self, w: int, p: int, value: int | float) -> None:
        keys, ids = self.keys[w], self.ids[w]
        i = bisect_left(keys, value)
        i = ids.index(p, i)
        del keys[i]
        del ids[i]

    def _put(self, w: int, p: int, value: int | float) -> None:
        keys = self.keys[w]
        i = bisect_right(keys, value)
        keys.insert(i, value)
        self.ids[w].insert(i, p)

    def move(self, p: int, dest: int) -> None:
        src = self.owner[p]
        value = self.weight[p]
        self.moved += self.cost(p, dest)
        self._take(src, p, value)
        self._put(dest, p, value)
        self.loads[src] -= value
        self.loads[dest] += value
        self.owner[p] = dest

    def _best_move(
        self, heavy: int, light: int, gap: int | float, budget: int | None
    ) -> tuple[int | None, int | float]:
        """The partition on `heavy` whose move to `light` lowers `heavy` most without `light` overtaking it."""
        keys = self.keys[heavy]
        i = bisect_left(keys, gap / 2)
        best, best_gain = None, 0
        for j in (i - 1, i):
            if 0 <= j < len(keys):
                value = keys[j]
                gain = min(value, gap - value)
                if gain > best_gain:
                    p = self.ids[heavy][j]
                    if budget is None or self.moved + self.cost(p, light) <= budget:
                        best, best_gain = p, gain
        return best, best_gain

    def _best_swap(self, heavy: int, light: int, gap: int | float) -> tuple[int, int, int | float] | None:
        """(p on heavy, q on light, gain) for the exchange that lowers `heavy` most, if any lowers it."""
        a, b = self.keys[heavy], self.keys[light]
        if not a or not b or a[-1] <= b[0] or a[0] - b[-1] >= gap:
            return None  # every difference is <= 0 or >= gap: no exchange helps
        half = gap / 2
        if len(a) + len(b) < _NUMPY_SWAP_MIN:
            # Merge walk: as q rises so does the ideal partner q + gap/2, so the index only moves forward.
            best, best_gain, n, i = None, 0, len(a), 0
            for jb, qv in enumerate(b):
                ideal = qv + half
                while i < n and a[i] < ideal:
                    i += 1
                if i < n:
                    d = a[i] - qv
                    if d < gap:
                        gain = gap - d if d > half else d
                        if gain > best_gain:
                            best, best_gain = (i, jb), gain
                if i:
                    d = a[i - 1] - qv
                    if d > 0:
                        gain = gap - d if d > half else d
                        if gain > best_gain:
                            best, best_gain = (i - 1, jb), gain
            if best is None:
                return None
            return self.ids[heavy][best[0]], self.ids[light][best[1]], best_gain
        av, bv = np.asarray(a), np.asarray(b)
        idx = np.searchsorted(av, bv + half)
        lo = np.maximum(idx - 1, 0)
        hi = np.minimum(idx, len(a) - 1)
        d_lo = av[lo] - bv
        d_hi = av[hi] - bv
        gain_lo = np.minimum(d_lo, gap - d_lo)
        gain_hi = np.minimum(d_hi, gap - d_hi)
        j_lo, j_hi = int(gain_lo.argmax()), int(gain_hi.argmax())
        if gain_lo[j_lo] >= gain_hi[j_hi]:
            gain, ja, jb = gain_lo[j_lo], int(lo[j_lo]), j_lo
        else:
            gain, ja, jb = gain_hi[j_hi], int(hi[j_hi]), j_hi
        if gain <= 0:
            return None
        return self.ids[heavy][ja], self.ids[light][jb], gain.item()

    def improve(self, target: int | float, budget: int | None, max_steps: int) -> None:
        """Greedy descent on the heaviest worker: the best single move to the lightest or the best swap.

        When neither helps, the heaviest and another worker pool their partitions and split them as
        evenly as a subset-sum search allows: that escapes the local optima where every single
        partition is bigger than the gap. Each step strictly lowers the heaviest load and leaves
        the other worker below it, so the sorted load vector falls and the loop ends; it stops early at `target` (nothing lower is
        possible) or once `budget` moves are used.
        """
        loads = self.loads
        order = range(self.workers)
        resplits = _RESPLITS_PER_WORKER * self.workers
        for _ in range(max_steps):
            heavy = max(order, key=loads.__getitem__)
            top = loads[heavy]
            if top <= target:
                return
            light = min(self.open_workers, key=loads.__getitem__)
            gap = top - loads[light]
            if gap <= 0:
                return
            p, _ = self._best_move(heavy, light, gap, budget)
            if p is not None:
                self.move(p, light)
                continue
            if self._swap_somewhere(heavy, top, budget, 0):
                continue
            if resplits <= 0:
                return
            resplits -= 1
            if not (self._resplit_somewhere(heavy, top, budget) or self._eject(heavy, top, budget)):
                return

    def _swap_somewhere(self, heavy: int, top: int | float, budget: int | None, beat: int | float) -> bool:
        """Apply the best exchange between `heavy` and any lighter worker if it sheds more than `beat`."""
        loads = self.loads
        best = None
        for light in sorted(range(self.workers), key=loads.__getitem__):
            gap = top - loads[light]
            if gap <= 0 or gap <= 2 * beat:
                break  # lighter-first: no later worker leaves room for a bigger gain
            found = self._best_swap(heavy, light, gap)
            if found is None:
                continue
            p, q, gain = found
            if gain <= beat:
                continue
            if budget is not None and self.moved + self.cost(p, light) + self.cost(q, heavy) > budget:
                continue
            best, beat = (p, q, light), gain
        if best is None:
            return False
        p, q, light = best
        self.move(p, light)
        self.move(q, heavy)
        return True

    def _resplit_somewhere(self, heavy: int, top: int | float, budget: int | None) -> bool:
        loads = self.loads
        for light in sorted(range(self.workers), key=loads.__getitem__):
            if top - loads[light] <= 0:
                return False
            if len(self.keys[heavy]) + len(self.keys[light]) > _RESPLIT_MAX_PARTITIONS:
                continue
            if self._resplit(heavy, light, top, budget):
                return True
        return False

    def _eject(self, heavy: int, top: int | float, budget: int | None) -> bool:
        """Move a small partition off `heavy` even if that overloads a light worker, then resplit
        that worker with a third; the chain keeps every load below `top` or is undone.

        This is the escape from "a big partition plus a small one": no worker can take the small
        one without passing `top`, and no pair split helps, until two others share the extra.
        """
        loads = self.loads
        lights = sorted((w for w in range(self.workers) if w != heavy), key=loads.__getitem__)
        for p in self.ids[heavy][:_EJECT_PARTITIONS]:
            for light in lights[:_EJECT_WORKERS]:
                self.move(p, light)
                for third in lights:
                    if (
                        third == light
                        or len(self.keys[light]) + len(self.keys[third]) > _RESPLIT_MAX_PARTITIONS
                    ):
                        continue
                    if self._resplit(light, third, top, budget):
                        return True
                self.move(p, heavy)
        return False

    def _resplit(self, heavy: int, light: int, top: int | float, budget: int | None) -> bool:
        """Split the two workers' partitions by subset sum; apply it if it lowers `top`.

        Big-int bitsets make the subset-sum table cheap; values are scaled to at most
        _RESPLIT_UNITS units, so large counts cost no more (the split is then near-even, and it is
        only accepted if the exact loads improve).
        """
        values = self.keys[heavy] + self.keys[light]
        ids = self.ids[heavy] + self.ids[light]
        total = loads_total = self.loads[heavy] + self.loads[light]
        if isinstance(total, int) and total <= _RESPLIT_UNITS:
            units = values
        else:
            scale = _RESPLIT_UNITS / loads_total
            units = [round(v * scale) for v in values]
            total = sum(units)
        reach = 1
        history = [reach]
        for u in units:
            reach |= reach << u
            history.append(reach)
        goal = total // 2
        part = (reach & ((1 << (goal + 1)) - 1)).bit_length() - 1
        chosen = [False] * len(units)
        for i in range(len(units) - 1, -1, -1):
            if not (history[i] >> part) & 1:
                chosen[i] = True
                part -= units[i]
        side = sum(v for v, c in zip(values, chosen, strict=True) if c)
        if max(side, loads_total - side) >= top:
            return False
        # Orient the split so that more partitions stay where they are.
        stay = sum(1 for j, c in enumerate(chosen) if c == (j < len(self.keys[heavy])))
        to_heavy = chosen if stay * 2 >= len(chosen) else [not c for c in chosen]
        plan = [
            (p, heavy if h else light)
            for p, h in zip(ids, to_heavy, strict=True)
            if self.owner[p] != (heavy if h else light)
        ]
        if budget is not None and self.moved + sum(self.cost(p, dest) for p, dest in plan) > budget:
            return False
        for p, dest in plan:
            self.move(p, dest)
        return True


def first_fit_decreasing(values: list, workers: int, capacity: float) -> list[int] | None:
    """Worker per value (values heaviest first), each in the first worker it fits, or None."""
    loads = [0] * workers
    chosen: list[int] = []
    keep = chosen.append
    first_open = 0
    for value in values:
        w = first_open
        while w < workers and loads[w] + value > capacity:
            w += 1
        if w == workers:
            return None
        loads[w] += value
        keep(w)
        while first_open < workers and loads[first_open] >= capacity:
            first_open += 1
    return chosen


def multifit(values: list, workers: int, low: float, high: float, rounds: int = 12) -> list[int] | None:
    """MULTIFIT: bisect the capacity at which first-fit-decreasing still packs everything.

    LPT gives a small last partition to whichever worker is lightest, even one that already holds
    a big partition; packing against a capacity near the bound leaves that worker alone instead.
    """
    best = None
    for _ in range(rounds):
        capacity = (low + high) / 2
        packed = first_fit_decreasing(values, workers, capacity)
        if packed is None:
            low = capacity
        else:
            best, high = packed, capacity
    return best


def match_labels(overlap: np.ndarray) -> np.ndarray:
    """The permutation `sigma` (group g -> worker sigma[g]) maximising `sum(overlap[g, sigma[g]])`.

    The Hungarian algorithm (shortest augmenting paths with potentials, O(m^3)), with the scan
    over workers vectorised: scipy is not a dependency, and m is at most a few hundred.
    """
    m = overlap.shape[0]
    cost = overlap.max(initial=0) - overlap.astype(np.float64)
    u = np.zeros(m + 1)
    v = np.zeros(m + 1)
    row_of = np.zeros(m + 1, dtype=np.int64)  # row_of[j]: 1-based group matched to worker j (0: none)
    way = np.zeros(m + 1, dtype=np.int64)
    for i in range(1, m + 1):
        row_of[0] = i
        j0 = 0
        minv = np.full(m + 1, np.inf)
        used = np.zeros(m + 1, dtype=bool)
        while True:
            used[j0] = True
            i0 = row_of[j0]
            free = ~used
            free[0] = False
            reduced = cost[i0 - 1] - u[i0] - v[1:]
            better = free[1:] & (reduced < minv[1:])
            minv[1:][better] = reduced[better]
            way[1:][better] = j0
            masked = np.where(free, minv, np.inf)
            j1 = int(masked.argmin())
            delta = masked[j1]
            u[row_of[used]] += delta
            v[used] -= delta
            minv[free] -= delta
            j0 = j1
            if row_of[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            row_of[j0] = row_of[j1]
            j0 = j1
    sigma = np.empty(m, dtype=np.int64)
    sigma[row_of[1:] - 1] = np.arange(m)
    return sigma


def send_home(inputs: Inputs, owner: np.ndarray, limit: list) -> None:
    """Undo moves, lightest first, wherever the old owner can take the partition back within its
    `limit` (the most throughput it may hold without raising the plan's max load), in place."""
    t, current, m = inputs.throughput, inputs.current_owner, inputs.workers
    loads = worker_loads(t, owner, m).tolist()
    for _ in range(2):
        away = np.flatnonzero((current >= 0) & (owner != current) & (t > 0))
        away = away[t[away] <= max(cap - load for cap, load in zip(limit, loads, strict=True))]
        if away.size == 0:
            return
        away = away[np.argsort(t[away], kind="stable")]
        undone = 0
        for p, value, home, there in zip(
            away.tolist(), t[away].tolist(), current[away].tolist(), owner[away].tolist(), strict=True
        ):
            if loads[home] + value <= limit[home]:
                loads[home] += value
                loads[there] -= value
                owner[p] = home
                undone += 1
        if undone == 0:
            return
