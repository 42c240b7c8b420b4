"""Point-in-time snapshots of a queue: buffer usage, counters, and (with rebalancing) ownership."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PartitionUsage:
    """One partition's buffer: `used` items of `capacity`, and `percentage` (100 * used / capacity)."""

    partition: int
    used: int
    capacity: int
    percentage: float


@dataclass(frozen=True)
class RebalanceReport:
    """One throughput rebalance. Ratios are max/mean produce() calls per drain worker over the
    interval (the same figure a skip reason quotes); `moved` is 0 when skipped. `failed` says why
    some planned moves were given back (a fence that timed out): nothing is ever left unowned."""

    moved: int  # partitions that changed drain worker
    ratio_before: float  # max/mean produce() calls per worker, before the moves
    ratio_after: float  # the same, with the owners after them
    wait_ms: float  # milliseconds spent fencing the moved partitions
    skipped: str | None = None  # why nothing moved
    at: float = 0.0  # when, as time.time() (seconds since the epoch)
    failed: str | None = None  # why some planned moves were given back

    def __str__(self) -> str:
        """A sentence for people; repr() keeps the fields."""
        when = time.strftime("%H:%M:%S UTC", time.gmtime(self.at))
        if self.skipped is not None:
            return f"at {when}, nothing moved: {self.skipped}"
        moved = f"{self.moved} partition{'s' * (self.moved != 1)}"
        text = (f"at {when}, moved {moved}: worker load ratio (max/mean) {self.ratio_before:.2f} -> "
                f"{self.ratio_after:.2f}, {self.wait_ms:.1f} ms waiting for fences")
        return text + (f"; some moves given back: {self.failed}" if self.failed else "")


@dataclass(frozen=True)
class BatchQueueStats:
    """Counters reconcile after shutdown: produced == dispatched + unhandled + unfinished.

    `produced` counts items `produce()` accepted; `dispatched` counts items handed to a handler
    (including those whose handler raised, also counted in `failed`); `unhandled` counts items of a
    type without a handler, drained and discarded with a warning; `dropped` counts items refused
    because the partition was full (IF_POSSIBLE), or because a handler produced into its own worker's
    full partition (BLOCKING would wait for itself forever; also counted in `self_drops`);
    `rejected` counts items refused because the queue was shut down; `unfinished` counts items a
    `shutdown(timeout)` could not hand to a handler in time (0 after a clean shutdown).
    `worker_items` is per drain worker over the last interval: between the last two throughput
    measurements (every rebalance), or, with periodic rebalancing off, between the last two
    `stats()` calls. `worker_items_total` counts since the start. `idle_failures` counts on_idle
    calls that raised.

    The snapshot of the partitions: `capacity_per_partition` (items one partition buffers), `used`
    (items buffered now, per partition), `owners` (the drain worker of each partition),
    `partition_types` (partition -> the item types routed to it) and `last_rebalance` (the latest
    throughput rebalance, None before the first). Every count is in items.
    """

    capacity_per_partition: int
    used: tuple[int, ...]
    produced: int
    dispatched: int
    dropped: int
    unhandled: int
    failed: int
    rejected: int
    owners: tuple[int, ...] = ()
    worker_items: tuple[int, ...] = ()
    last_rebalance: RebalanceReport | None = None
    partition_types: dict[int, tuple[str, ...]] = field(default_factory=dict)
    worker_items_total: tuple[int, ...] = ()
    unfinished: int = 0
    self_drops: int = 0
    idle_failures: int = 0

    @property
    def partition_count(self) -> int:
        return len(self.used)

    @property
    def total_capacity(self) -> int:
        return self.capacity_per_partition * len(self.used)

    @property
    def total_used(self) -> int:
        return sum(self.used)

    @property
    def total_used_percentage(self) -> float:
        total = self.total_capacity
        return 100.0 * self.total_used / total if total else 0.0

    def partition_used(self, partition: int) -> int:
        if not 0 <= partition < len(self.used):
            raise ValueError(f"partition must be in [0, {len(self.used)}), got {partition!r}")
        return self.used[partition]

    def partition_usage(self, partition: int) -> PartitionUsage:
        used = self.partition_used(partition)
        cap = self.capacity_per_partition
        return PartitionUsage(partition, used, cap, 100.0 * used / cap)

    def top_n(self, n: int) -> list[PartitionUsage]:
        """The n fullest partitions, fullest first (ties by partition number)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"n must be an int >= 0, got {n!r}")
        order = sorted(range(len(self.used)), key=lambda p: (-self.used[p], p))[:n]
        return [self.partition_usage(p) for p in order]
