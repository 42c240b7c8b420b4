"""Helpers shared by the rebalancing and elastic-worker tests."""

from __future__ import annotations

import time
from collections.abc import Callable

from rebalancer.queue import HandlerConsumer


def make_types(n: int, prefix: str = "R") -> list[type]:
    return [type(f"{prefix}{i}", (), {"__slots__": ("seq",)}) for i in range(n)]


def item(t: type, seq: int) -> object:
    obj = t()
    obj.seq = seq
    return obj


class ReentryDetector(HandlerConsumer):
    """A deliberately non-thread-safe accumulator that records any concurrent call."""

    def __init__(self, violations: list[str], pause: float = 0.0) -> None:
        self.busy = False
        self.seen: list[int] = []
        self.violations = violations
        self.pause = pause
        self.idle_calls = 0

    def _enter(self, what: str) -> None:
        if self.busy:
            self.violations.append(what)
        self.busy = True

    def consume(self, batch: list) -> None:
        self._enter("consume")
        try:
            time.sleep(self.pause)  # releases the GIL: a concurrent caller would get in here
            self.seen.extend(x.seq for x in batch)
        finally:
            self.busy = False

    def on_idle(self) -> None:
        self._enter("on_idle")
        try:
            self.idle_calls += 1
            time.sleep(0)
        finally:
            self.busy = False


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


