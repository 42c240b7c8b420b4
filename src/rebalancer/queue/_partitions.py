"""Partitions: bounded deques, demand counters, routing, and the produce hot path.

`produce()` is a closure over locals: the route lookup, a demand count, the shut-down check, a length
check and the append. Demand is counted before the item lands, so the control thread sees refused
items as load too, and shutdown can wait until every counted call has landed, been dropped or been
refused: an item never slips in after the final drain.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from typing import Any

from rebalancer.queue._counter import Counter
from rebalancer.queue._ownership import DRAIN_CONTEXT, OwnershipTable
from rebalancer.queue.selectors import PartitionSelector, as_partition

log = logging.getLogger(__name__)

Route = tuple[deque[Any], "itertools.count[int]"]


def type_name(t: type) -> str:
    return f"{t.__module__}.{t.__qualname__}"


class Partitions:
    """Every partition's deque and counters; routing changes happen under the queue's admin lock."""

    def __init__(self, name: str, capacity: int, blocking: bool, selector: PartitionSelector,
                 table: OwnershipTable, admin: threading.RLock) -> None:
        self.name = name
        self.capacity = capacity
        self.blocking = blocking
        self.selector = selector
        self.table = table
        self._admin = admin
        self.deques: list[deque[Any]] = []
        self.demand: list[Counter] = []
        self.routes: list[Route] = []
        self.types: list[tuple[type, ...]] = []  # types pinned to each partition (type_hash)
        self.type_routes: dict[type, Route] = {}
        self.type_partition: dict[type, int] = {}
        self._index: dict[int, int] = {}  # id(deque) -> partition, for the slow paths
        self.dropped = Counter()  # IF_POSSIBLE and full, or a drain worker producing into its own full partition
        self.self_drops = Counter()  # of those, the drain-worker case
        self.rejected = Counter()  # refused because the queue was shut down
        self.aborted = Counter()  # of those, the ones whose demand was already counted
        self.closed: list[bool] = []  # empty while open: `if closed` is the cheapest check there is
        self._mutex = threading.Lock()
        self.not_full = threading.Condition(self._mutex)  # BLOCKING producers wait here for room
        self.settled = threading.Condition(self._mutex)  # shutdown waits here for in-flight produce calls
        self.blocked = 0  # producers waiting on not_full; written under the mutex
        self._warned_self = False

    def __len__(self) -> int:
        return len(self.deques)

    # ---------------------------------------------------------------- growth and routing

    def add(self, owner: int) -> None:
        """One more partition (under the admin lock)."""
        part: deque[Any] = deque()
        demand = Counter()
        self._index[id(part)] = len(self.deques)
        self.deques.append(part)
        self.demand.append(demand)
        self.types.append(())
        self.routes.append((part, demand.raw))
        self.table.add_partition(owner)

    def pin(self, t: type, partition: int) -> Route:
        """Route every item of type `t` to `partition` (under the admin lock)."""
        route = self.routes[partition]
        self.types[partition] = (*self.types[partition], t)  # published before the route
        self.type_partition[t] = partition
        self.type_routes[t] = route
        return route

    def emptiest(self) -> int:
        """The partition with the fewest pinned types, lowest first: a new handler's own partition."""
        kinds = self.types
        return min(range(len(kinds)), key=lambda p: (len(kinds[p]), p))

    def hashed(self, t: type) -> int:
        return zlib.crc32(type_name(t).encode()) % len(self.deques)

    # ---------------------------------------------------------------- produce

    def make_produce(self) -> Callable[[object], bool]:
        kind = self.selector.kind
        if kind == "type_hash":
            return self._produce_pinned()
        if kind == "round_robin":
            return self._produce_indexed(None)
        return self._produce_indexed(self.selector.function)

    def _produce_pinned(self) -> Callable[[object], bool]:
        routes_get = self.type_routes.get
        capacity = self.capacity
        closed = self.closed
        new_type, full, refuse, landed = self._produce_new_type, self._full, self._refuse, self._landed

        def produce(item: object) -> bool:
            route = routes_get(type(item))
            if route is None:
                return new_type(item)
            part, demand = route
            next(demand)  # counted before put/offer (next() on an itertools.count is atomic)
            if closed:
                return refuse()
            if len(part) < capacity:
                part.append(item)
                if closed:  # shutdown began after the check above: tell it this call has landed
                    landed()
                return True
            return full(part, item)

        return produce

    def _produce_indexed(self, select: Callable[[Any, int], int] | None) -> Callable[[object], bool]:
        routes = self.routes  # grows in place
        capacity = self.capacity
        closed = self.closed
        full, refuse, landed = self._full, self._refuse, self._landed
        turn = itertools.count().__next__

        def produce(item: object) -> bool:
            n = len(routes)
            if select is None:
                p = turn() % n
            else:
                p = select(item, n)
                if type(p) is not int or not 0 <= p < n:
                    p = as_partition(p, n, item)
            part, demand = routes[p]
            next(demand)
            if closed:
                return refuse()
            if len(part) < capacity:
                part.append(item)
                if closed:
                    landed()
                return True
            return full(part, item)

        return produce

    def _produce_new_type(self, item: object) -> bool:
        t = type(item)
        with self._admin:  # shutdown closes under this lock, so demand is counted before it can
            if self.closed:
                self.rejected.increment()
                return False
            part, demand = self.type_routes.get(t) or self.pin(t, self.hashed(t))
            next(demand)
        if len(part) < self.capacity:
            part.append(item)
            if self.closed:
                self._landed()
            return True
        return self._full(part, item)

    def _refuse(self) -> bool:
        self.aborted.increment()
        self.rejected.increment()
        self._landed()
        return False

    def _landed(self) -> None:
        with self._mutex:
            self.settled.notify_all()

    def _full(self, part: deque[Any], item: object) -> bool:
        if not self.blocking:
            self.dropped.increment()
            if self.closed:
                self._landed()
            return False
        p = self._index[id(part)]
        if getattr(DRAIN_CONTEXT, "table", None) is self.table and self.table.owner[p] == DRAIN_CONTEXT.worker:
            return self._drop_self(p)
        with self._mutex:
            self.blocked += 1
            try:
                while len(part) >= self.capacity:
                    if self.closed:
                        self.aborted.increment()
                        self.rejected.increment()
                        self.settled.notify_all()
                        return False
                    self.not_full.wait()
                part.append(item)
                if self.closed:
                    self.settled.notify_all()
            finally:
                self.blocked -= 1
        return True

    def _drop_self(self, p: int) -> bool:
        """A handler producing into its own worker's full partition would wait for itself forever."""
        self.self_drops.increment()
        self.dropped.increment()
        if not self._warned_self:
            self._warned_self = True
            log.warning("BatchQueue[%s]: a handler produced into partition %d, which its own drain worker "
                        "owns and which is full; the item is dropped (counted in stats().self_drops)",
                        self.name, p)
        if self.closed:
            self._landed()
        return False

    def made_room(self) -> None:
        """A drain worker took items: wake BLOCKING producers, if any wait."""
        if self.blocked:
            with self._mutex:
                self.not_full.notify_all()

    # ---------------------------------------------------------------- shutdown

    def close(self) -> None:
        """Refuse new items and release every waiting producer (called under the admin lock)."""
        with self._mutex:
            self.closed.append(True)
            self.not_full.notify_all()

    def entered(self) -> int:
        return sum(c.value() for c in self.demand)

    def wait_settled(self, taken: Callable[[], int], deadline: float) -> int:
        """Wait until every counted produce() call has landed, been dropped or been refused; returns
        the calls still in flight at the deadline (0 normally)."""
        with self._mutex:
            while True:
                landed = sum(len(d) for d in self.deques) + taken()  # the "left" side first: both only grow
                landed += self.dropped.value() + self.aborted.value()
                left = self.entered() - landed
                remaining = deadline - time.monotonic()
                if left <= 0 or remaining <= 0:
                    return max(0, left)
                self.settled.wait(remaining)

    def take(self, p: int) -> list[Any]:
        """Everything in partition `p`, oldest first (popleft in C, n times)."""
        part = self.deques[p]
        return list(itertools.starmap(part.popleft, itertools.repeat((), len(part))))
