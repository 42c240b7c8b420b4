"""Bounded-memory latency summaries: a log-bucketed histogram (about 1% relative resolution)."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np

__all__ = ["DeliveryCounters", "LogHistogram"]

_FOLD_AT = 4096  # unfolded latencies before one numpy pass


class LogHistogram:
    """Counts of non-negative values in geometric buckets, so memory stays fixed however long we run.

    Percentiles are read as a bucket's upper edge, hence within `growth - 1` (1%) of the truth.
    """

    def __init__(self, lowest: float = 0.01, highest: float = 3_600_000.0, growth: float = 1.01) -> None:
        if not 0 < lowest < highest:
            raise ValueError(f"need 0 < lowest < highest, got lowest={lowest}, highest={highest}")
        if growth <= 1:
            raise ValueError(f"growth must be > 1, got {growth}")
        self._lowest = lowest
        self._log_growth = math.log(growth)
        self._buckets = math.ceil(math.log(highest / lowest) / self._log_growth) + 2
        self._counts = np.zeros(self._buckets, dtype=np.int64)
        # upper edge of each bucket; bucket 0 holds everything below `lowest`
        self._edges = lowest * np.exp(self._log_growth * np.arange(self._buckets, dtype=np.float64))
        self.count = 0
        self.total = 0.0
        self.max = 0.0

    def _index(self, value: float) -> int:
        if value <= self._lowest:
            return 0
        idx = int(math.log(value / self._lowest) / self._log_growth) + 1
        return idx if idx < self._buckets else self._buckets - 1

    def add(self, value: float) -> None:
        self._counts[self._index(value)] += 1
        self.count += 1
        self.total += value
        if value > self.max:
            self.max = value

    def add_many(self, values: np.ndarray) -> None:
        """Vectorised `add` for a batch acknowledged at once."""
        if values.size == 0:
            return
        values = np.maximum(values, 0.0)
        safe = np.maximum(values, self._lowest)
        idx = np.floor(np.log(safe / self._lowest) / self._log_growth).astype(np.int64) + 1
        idx[values <= self._lowest] = 0
        np.clip(idx, 0, self._buckets - 1, out=idx)
        self._counts += np.bincount(idx, minlength=self._buckets)
        self.count += int(values.size)
        self.total += float(values.sum())
        self.max = max(self.max, float(values.max()))

    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def percentile(self, q: float) -> float:
        """The q-th percentile (0..100); 0.0 when empty."""
        if not 0 <= q <= 100:
            raise ValueError(f"q must be in [0, 100], got {q}")
        if self.count == 0:
            return 0.0
        rank = max(1, math.ceil(q / 100.0 * self.count))
        idx = int(np.searchsorted(np.cumsum(self._counts), rank))
        return float(min(self._edges[idx], self.max))


class DeliveryCounters:
    """Delivery outcomes of one producer; touched only from its event loop."""

    def __init__(self) -> None:
        self.acked = 0
        self.failed = 0
        self.errors: Counter[str] = Counter()
        self._latency = LogHistogram()
        # Acked messages not yet in the histogram, folded in bulk: one numpy pass per few thousand
        # messages. A one-message batch (every batch, below one message per partition per window)
        # keeps just its latency in seconds; larger ones keep (ack time, send times).
        self._singles: list[float] = []
        self._settled: list[tuple[float, list[float]]] = []
        self._unfolded = 0
        self.requests = 0
        self.request_msgs = 0
        self.retries = 0  # batches re-queued after a retriable error

    def settle(self, now: float, sent_at: list[float]) -> None:
        """The messages sent at `sent_at` were acked at `now` (both time.monotonic())."""
        n = len(sent_at)
        self.acked += n
        if n == 1:
            self._singles.append(now - sent_at[0])
        else:
            self._settled.append((now, sent_at))
        self._unfolded += n
        if self._unfolded >= _FOLD_AT:
            self._fold()

    def fail(self, count: int, error: BaseException) -> None:
        self.failed += count
        self.errors[type(error).__name__] += count

    def _fold(self) -> None:
        if not self._unfolded:
            return
        parts = [np.array(self._singles, dtype=np.float64)]
        if self._settled:
            lengths = [len(sent) for _, sent in self._settled]
            acked_at = np.repeat(np.fromiter((now for now, _ in self._settled), dtype=np.float64), lengths)
            sent_at = np.fromiter(itertools.chain.from_iterable(sent for _, sent in self._settled), dtype=np.float64)
            parts.append(acked_at - sent_at)
        self._singles, self._settled, self._unfolded = [], [], 0
        self._latency.add_many(np.concatenate(parts) * 1000.0)

    @property
    def latency(self) -> LogHistogram:
        self._fold()
        return self._latency
