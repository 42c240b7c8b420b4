"""A counter many threads bump without a lock, with a documented read."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable


class Counter:
    """`increment()` is `next()` on an `itertools.count`, atomic in CPython and cheap on hot paths.

    An `itertools.count` cannot be read without advancing it, so `value()` advances it too and
    subtracts the reads it has made; reads are rare (stats, the control thread) and take a lock.
    """

    __slots__ = ("_count", "_lock", "_reads", "increment")

    def __init__(self) -> None:
        self._count = itertools.count()
        self.increment: Callable[[], int] = self._count.__next__
        # hot paths call `next(counter.raw)`: a builtin call on the count is cheaper than the bound method
        self._reads = 0
        self._lock = threading.Lock()

    @property
    def raw(self) -> itertools.count[int]:
        return self._count

    def value(self) -> int:
        """How many times `increment()` has been called so far."""
        with self._lock:
            issued = next(self._count)
            value = issued - self._reads
            self._reads += 1
        return value

    def __repr__(self) -> str:
        return f"Counter({self.value()})"
