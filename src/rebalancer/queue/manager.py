"""The process-wide registry of named queues (shared schedulers are ref-counted by their queues)."""

from __future__ import annotations

import logging
import threading
from typing import ClassVar

from rebalancer.queue.batch_queue import BatchQueue
from rebalancer.queue.config import BatchQueueConfig

log = logging.getLogger(__name__)


class BatchQueueManager:
    """Create, find and shut down queues by name. All methods are thread-safe."""

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _queues: ClassVar[dict[str, BatchQueue]] = {}

    def __init__(self) -> None:
        raise TypeError("BatchQueueManager is a registry of class methods; do not instantiate it")

    @classmethod
    def create(cls, name: str, config: BatchQueueConfig) -> BatchQueue:
        """A new running queue; ValueError if `name` is taken."""
        with cls._lock:
            if name in cls._queues:
                raise ValueError(f"queue name {name!r} already exists")
            queue = BatchQueue(name, config)
            cls._queues[name] = queue
            return queue

    @classmethod
    def create_if_absent(cls, name: str, config: BatchQueueConfig) -> BatchQueue:
        """The existing queue if `name` is taken (mode must match; other differences are logged)."""
        with cls._lock:
            existing = cls._queues.get(name)
            if existing is None:
                queue = BatchQueue(name, config)
                cls._queues[name] = queue
                return queue
        if existing.config.single_consumer != config.single_consumer:
            have = "single-consumer" if existing.config.single_consumer else "handler-map"
            want = "single-consumer" if config.single_consumer else "handler-map"
            raise ValueError(f"queue {name!r} exists in {have} mode; cannot reuse it in {want} mode")
        differences = config.infrastructure_differences(existing.config)
        if differences:
            log.warning(
                "queue %r exists with different settings (%s); using the existing queue",
                name, ", ".join(differences),
            )
        return existing

    @classmethod
    def get(cls, name: str) -> BatchQueue | None:
        with cls._lock:
            return cls._queues.get(name)

    @classmethod
    def names(cls) -> list[str]:
        with cls._lock:
            return sorted(cls._queues)

    @classmethod
    def shutdown(cls, name: str) -> bool:
        """Shut the queue down (final drain included) and forget it; False if there was none."""
        with cls._lock:
            queue = cls._queues.pop(name, None)
        if queue is None:
            return False
        queue.shutdown()
        return True

    @classmethod
    def shutdown_all(cls) -> None:
        with cls._lock:
            queues = list(cls._queues.values())
            cls._queues.clear()
        for queue in queues:
            queue.shutdown()
