"""Queue configuration, validated up front so that a bad value fails at `create`, not in a worker."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from rebalancer.queue.policies import BufferStrategy, PartitionPolicy, ThreadPolicy
from rebalancer.queue.selectors import PartitionSelector


class HandlerConsumer:
    """A batch handler. In handler-map mode the queue never calls one instance from two threads at once."""

    def consume(self, batch: list[Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__}.consume")

    def on_idle(self) -> None:
        """Flush here: called when the partitions holding this handler's types are found empty, by
        whichever worker saw it, never concurrently with `consume`, at once after data and then at
        most once per `max_idle_ms` while they stay empty."""


Consumer = HandlerConsumer | Callable[[list[Any]], object]
ErrorHandler = Callable[[list[Any], BaseException], object]
Selector = PartitionSelector | Callable[[Any, int], int]


@dataclass(frozen=True)
class BatchQueueConfig:
    """Everything a BatchQueue needs; exactly one of `threads` and `shared_scheduler` is set.

    `consumer` set means single-consumer mode: every drained batch goes to it, from each drain worker
    concurrently, so it must be thread-safe (its `on_idle` is never concurrent with itself). Otherwise
    handlers are registered per type with `BatchQueue.add_handler`.

    `selector` defaults to `PartitionSelector.type_hash()` with handlers and to
    `PartitionSelector.round_robin()` with a single consumer. `fence_timeout_ms` bounds how long a
    handoff waits for the old owner's pass to end; past it the old owner keeps the partition.
    """

    threads: ThreadPolicy | None = None
    partitions: PartitionPolicy = field(default_factory=PartitionPolicy.adaptive)
    buffer_size: int = 10_000
    strategy: BufferStrategy = BufferStrategy.BLOCKING
    min_idle_ms: float = 1
    max_idle_ms: float = 50
    consumer: Consumer | None = None
    error_handler: ErrorHandler | None = None
    selector: Selector | None = None
    shared_scheduler: tuple[str, ThreadPolicy] | None = None
    rebalance_interval_ms: float = 0
    rebalance_skip_ratio: float = 1.15
    rebalance_delay_ms: float = 0
    fence_timeout_ms: float = 30_000

    def __post_init__(self) -> None:
        if (self.threads is None) == (self.shared_scheduler is None):
            both = "both" if self.threads is not None else "neither"
            raise ValueError(
                f"threads / shared_scheduler: set exactly one of them, got {both} "
                f"(threads={self.threads!r}, shared_scheduler={self.shared_scheduler!r})"
            )
        if self.threads is not None and not isinstance(self.threads, ThreadPolicy):
            raise ValueError(f"threads must be a ThreadPolicy, got {self.threads!r}")
        if self.shared_scheduler is not None:
            ok = (
                isinstance(self.shared_scheduler, tuple)
                and len(self.shared_scheduler) == 2
                and isinstance(self.shared_scheduler[0], str)
                and self.shared_scheduler[0] != ""
                and isinstance(self.shared_scheduler[1], ThreadPolicy)
            )
            if not ok:
                raise ValueError(
                    "shared_scheduler must be a (name, ThreadPolicy) tuple with a non-empty name, "
                    f"got {self.shared_scheduler!r}"
                )
        if not isinstance(self.partitions, PartitionPolicy):
            raise ValueError(f"partitions must be a PartitionPolicy, got {self.partitions!r}")
        if isinstance(self.buffer_size, bool) or not isinstance(self.buffer_size, int) or self.buffer_size <= 0:
            raise ValueError(f"buffer_size must be an int > 0, got {self.buffer_size!r}")
        if not isinstance(self.strategy, BufferStrategy):
            raise ValueError(f"strategy must be a BufferStrategy, got {self.strategy!r}")
        for name in ("min_idle_ms", "max_idle_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{name} must be a number > 0, got {value!r}")
        if self.min_idle_ms > self.max_idle_ms:
            raise ValueError(
                f"min_idle_ms must be <= max_idle_ms, got min_idle_ms={self.min_idle_ms!r} "
                f"> max_idle_ms={self.max_idle_ms!r}"
            )
        for name in ("rebalance_interval_ms", "rebalance_delay_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        timeout = self.fence_timeout_ms
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < float("inf"):
            raise ValueError(f"fence_timeout_ms must be a finite number > 0, got {timeout!r}")
        ratio = self.rebalance_skip_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not ratio >= 1:
            raise ValueError(f"rebalance_skip_ratio must be a number >= 1, got {ratio!r}")
        if self.consumer is not None and not (
            isinstance(self.consumer, HandlerConsumer) or callable(self.consumer)
        ):
            raise ValueError(f"consumer must be a HandlerConsumer or a callable(list), got {self.consumer!r}")
        if self.error_handler is not None and not callable(self.error_handler):
            raise ValueError(f"error_handler must be callable, got {self.error_handler!r}")
        if self.selector is not None and not (isinstance(self.selector, PartitionSelector) or callable(self.selector)):
            raise ValueError(f"selector must be a PartitionSelector or a callable(item, partitions), "
                             f"got {self.selector!r}")

    def resolved_selector(self) -> PartitionSelector:
        """The selector in force: the configured one, or the mode's default."""
        if isinstance(self.selector, PartitionSelector):
            return self.selector
        if self.selector is not None:
            return PartitionSelector.of(self.selector)
        return PartitionSelector.round_robin() if self.consumer is not None else PartitionSelector.type_hash()

    @property
    def single_consumer(self) -> bool:
        return self.consumer is not None

    def infrastructure_differences(self, other: BatchQueueConfig) -> list[str]:
        """The settings that shape a queue's threads and buffers and differ from `other`'s."""
        names = [f.name for f in fields(self) if f.name not in ("consumer", "error_handler", "selector")]
        return [n for n in names if getattr(self, n) != getattr(other, n)]
