"""The order in which Java's hash maps iterate, so the ports break ties as Pulsar does.

Pulsar's strategies read brokers and bundles out of ``ConcurrentHashMap``s and ``HashMap``s, and
wherever they keep "the first" of equals (a stable sort, a strict ``>`` scan) the winner is the one
that map iterates first. That order is a function of Java's ``String.hashCode``, the table's
capacity and, within a bin, of insertion and resizing history, all of which is reproduced here for
keys inserted once, in a given order, into a fresh map (the harness in conformance/pulsar fills
Pulsar's maps that way, in report order).

One case is not reproduced: a ``java.util.HashMap`` bin that turns into a red-black tree (nine keys
in one bin of a table of 64 or more). Its order depends on the tree's shape; such a bin keeps
insertion order here. Java's own documentation puts the chance of a bin that full at about 6e-8 for
well-spread keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache

_TREEIFY = 8  # a bin that already holds 8 keys turns into a tree when the 9th arrives
_MIN_TREEIFY_CAPACITY = 64
_UNTREEIFY = 6
_MAX_CAPACITY = 1 << 30


@lru_cache(maxsize=1 << 16)
def string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as an unsigned 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def _spread(key: str) -> int:
    """``HashMap.hash`` / ``ConcurrentHashMap.spread``: the high half folded into the low half."""
    h = string_hash(key)
    return (h ^ (h >> 16)) & 0x7FFFFFFF


def _table_size_for(c: int) -> int:
    n = 1
    while n < c:
        n <<= 1
    return min(max(n, 1), _MAX_CAPACITY)


def hash_map_order(keys: Iterable[str], capacity: int = 16) -> tuple[list[str], int]:
    """Iteration order of a ``java.util.HashMap``/``HashSet`` filled with ``keys`` in order.

    ``capacity`` is the table size at the first insertion (16 for ``new HashMap<>()``; a map that was
    cleared keeps its table). Returns the order and the table size afterwards. Within a bin a HashMap
    keeps insertion order, through resizes too, so only the final capacity matters; it is simulated
    because a crowded bin also doubles a small table.
    Memoised: the strategies ask for the same maps every cycle.
    """
    order, cap = _hash_map_order(tuple(keys), capacity)
    return list(order), cap


@lru_cache(maxsize=512)
def _hash_map_order(keys: tuple[str, ...], capacity: int) -> tuple[tuple[str, ...], int]:
    """The simulation behind ``hash_map_order``."""
    cap = _table_size_for(capacity)
    threshold = int(cap * 0.75)
    bins: dict[int, int] = {}
    ordered: list[str] = []
    seen: set[str] = set()
    hashes: list[int] = []
    for key in keys:
        if key in seen:
            continue
        seen.add(key)
        h = _spread(key)
        ordered.append(key)
        hashes.append(h)
        index = h & (cap - 1)
        bins[index] = bins.get(index, 0) + 1
        if bins[index] > _TREEIFY and cap < _MIN_TREEIFY_CAPACITY:
            cap, threshold = cap * 2, threshold * 2
            bins = _count_bins(hashes, cap)
        if len(ordered) > threshold:
            cap, threshold = cap * 2, threshold * 2
            bins = _count_bins(hashes, cap)
    mask = cap - 1
    order = sorted(range(len(ordered)), key=lambda i: hashes[i] & mask)
    return tuple(ordered[i] for i in order), cap


def _count_bins(hashes: Sequence[int], cap: int) -> dict[int, int]:
    counts: dict[int, int] = {}
    for h in hashes:
        counts[h & (cap - 1)] = counts.get(h & (cap - 1), 0) + 1
    return counts


class _ConcurrentTable:
    """A ``ConcurrentHashMap``'s bins, as a single thread fills it."""

    def __init__(self) -> None:
        self.n = 16
        self.size_ctl = 12
        self.bins: list[list[tuple[int, str]]] = [[] for _ in range(self.n)]
        self.tree: list[bool] = [False] * self.n
        self.count = 0

    def put(self, key: str) -> None:
        h = _spread(key)
        i = h & (self.n - 1)
        bin_ = self.bins[i]
        if self.tree[i]:
            bin_.insert(0, (h, key))  # TreeBin.putTreeVal links the new node in first
        else:
            existing = len(bin_)
            bin_.append((h, key))
            if existing >= _TREEIFY:
                if self.n < _MIN_TREEIFY_CAPACITY:
                    self._presize(self.n << 1)
                else:
                    self.tree[i] = True
        self.count += 1
        while self.count >= self.size_ctl and self.n < _MAX_CAPACITY:
            self._transfer()

    def _presize(self, size: int) -> None:
        c = _MAX_CAPACITY if size >= _MAX_CAPACITY >> 1 else _table_size_for(size + (size >> 1) + 1)
        while not (c <= self.size_ctl or self.n >= _MAX_CAPACITY):
            self._transfer()

    def _transfer(self) -> None:
        n = self.n
        bins: list[list[tuple[int, str]]] = [[] for _ in range(2 * n)]
        tree = [False] * (2 * n)
        for i, nodes in enumerate(self.bins):
            if not nodes:
                continue
            if self.tree[i]:
                lo = [node for node in nodes if not node[0] & n]
                hi = [node for node in nodes if node[0] & n]
                bins[i], bins[i + n] = lo, hi
                tree[i], tree[i + n] = len(lo) > _UNTREEIFY, len(hi) > _UNTREEIFY
                continue
            run_bit, last_run = nodes[0][0] & n, 0
            for j in range(1, len(nodes)):
                bit = nodes[j][0] & n
                if bit != run_bit:
                    run_bit, last_run = bit, j
            low: list[tuple[int, str]] = nodes[last_run:] if run_bit == 0 else []
            high: list[tuple[int, str]] = nodes[last_run:] if run_bit != 0 else []
            for node in nodes[:last_run]:  # each is linked in ahead of the list built so far
                if node[0] & n:
                    high = [node, *high]
                else:
                    low = [node, *low]
            bins[i], bins[i + n] = low, high
        self.bins, self.tree, self.n = bins, tree, 2 * n
        self.size_ctl = (n << 1) - (n >> 1)

    def keys(self) -> list[str]:
        return [key for nodes in self.bins for _, key in nodes]


def concurrent_hash_map_order(keys: Iterable[str]) -> list[str]:
    """Iteration order of a fresh ``ConcurrentHashMap`` filled with ``keys`` in order."""
    return list(_concurrent_hash_map_order(tuple(keys)))


@lru_cache(maxsize=512)
def _concurrent_hash_map_order(keys: tuple[str, ...]) -> tuple[str, ...]:
    table = _ConcurrentTable()
    seen: set[str] = set()
    for key in keys:
        if key not in seen:
            seen.add(key)
            table.put(key)
    return tuple(table.keys())

