"""Queue test fixtures: a clean registry per test, and deadline-based waiting (never timed asserts)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from rebalancer.queue import BatchQueueManager

DEADLINE_S = 10.0


def _wait_until(condition: Callable[[], bool], timeout: float = DEADLINE_S, interval: float = 0.002) -> bool:
    """Poll until `condition()` holds or the deadline passes; returns the last result."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return bool(condition())
        time.sleep(interval)


@pytest.fixture
def wait_until() -> Callable[..., bool]:
    return _wait_until


@pytest.fixture
def worker_threads() -> Callable[[str], list[threading.Thread]]:
    """Live drain workers of a dedicated queue: threads named `BatchQueue-<name>-<i>`."""

    def live(name: str) -> list[threading.Thread]:
        prefix = f"BatchQueue-{name}-"
        return [t for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]

    return live


@pytest.fixture(autouse=True)
def _clean_registry() -> Iterator[None]:
    """Every test starts and ends with an empty queue registry, so names and pools never leak."""
    BatchQueueManager.shutdown_all()
    yield
    BatchQueueManager.shutdown_all()
