"""The result type every planner returns."""

from __future__ import annotations

from dataclasses import dataclass

from rebalancer.balance.metrics import imbalance

Load = int | float


@dataclass(frozen=True)
class Plan:
    """A new partition-to-worker assignment, and what it changes.

    `moves` holds `(partition, old, new)` for every partition whose owner changed, in partition
    order. An entry with `old == -1` assigns a previously unowned partition: it needs no handoff
    fence and is not counted by `moved` or by `max_moves`. `load_before` sums throughput over the
    current owners (unowned partitions count for nobody); `load_after` over `owner`.
    """

    owner: tuple[int, ...]
    moves: tuple[tuple[int, int, int], ...]
    load_before: tuple[Load, ...]
    load_after: tuple[Load, ...]
    skipped: str | None = None

    @property
    def moved(self) -> int:
        """Partitions taken away from a live owner: the ones that need a two-phase handoff."""
        return sum(1 for _, old, _ in self.moves if old >= 0)

    @property
    def ratio_before(self) -> float:
        """Max/mean worker load before the plan (see `imbalance`)."""
        return imbalance(self.load_before)

    @property
    def ratio_after(self) -> float:
        """Max/mean worker load after the plan (see `imbalance`)."""
        return imbalance(self.load_after)

    @property
    def max_load_before(self) -> Load:
        return max(self.load_before)

    @property
    def max_load_after(self) -> Load:
        return max(self.load_after)
