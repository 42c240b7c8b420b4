"""librdkafka's partitioners by name, with its sticky placement of keyless messages.

Keyless messages go to one partition per topic until a batch of that partition is sent or
`sticky.partitioning.linger.ms` passes (librdkafka switches on the timer; the Java client on the
batch). Random placement per message spreads a linger window over the most partitions, the worst
case for the number of record batches a request carries (issue 36, C29).

Which messages are sticky is librdkafka's rule (`rd_kafka_msg_partitioner`): every keyless message,
and an empty key too under `consistent_random`, unless the partitioner is `random`, which places
every message at random.
"""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Callable, Sequence

from aiokafka.structs import TopicPartition

from rebalancer.produce.aiokafka_adapter import murmur2_partition
from rebalancer.produce.config import PARTITIONERS

__all__ = ["Partitioner"]


def _available(leader: int | None) -> bool:
    return leader is not None and leader >= 0


class Partitioner:
    """`partitioner(topic, key, count)` -> partition. Clock and random source are injectable for tests."""

    def __init__(
        self,
        name: str,
        sticky_linger_ms: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        if name not in PARTITIONERS:
            raise ValueError(f"partitioner must be one of {', '.join(PARTITIONERS)}; got {name!r}")
        self.name = name
        self._linger_s = sticky_linger_ms / 1000.0
        self._clock = clock
        self._random = (rng or random.Random()).random
        self._per_message = name == "random"
        self._empty_key_random = name == "consistent_random"
        self._crc = name in ("consistent", "consistent_random")
        self._sticky: dict[str, tuple[int, float]] = {}  # topic -> (partition, chosen at)
        self.switches = 0  # new sticky partitions chosen

    def __call__(
        self, topic: str, key: bytes | None, count: int, leaders: Sequence[int | None] | None = None
    ) -> int:
        if self._per_message:
            return int(self._random() * count)
        if key is None or (not key and self._empty_key_random):
            return self._sticky_partition(topic, count, leaders)
        if self._crc:
            return zlib.crc32(key) % count  # librdkafka's rd_crc32 is zlib's CRC-32
        return murmur2_partition(key, count)

    def _sticky_partition(self, topic: str, count: int, leaders: Sequence[int | None] | None) -> int:
        now = self._clock()
        current = self._sticky.get(topic)
        if current is not None:
            partition, chosen = current
            if (
                partition < count
                and now - chosen < self._linger_s
                and (leaders is None or _available(leaders[partition]))
            ):
                return partition
        partition = self._pick(count, leaders)
        self._sticky[topic] = (partition, now)
        self.switches += 1
        return partition

    def _pick(self, count: int, leaders: Sequence[int | None] | None) -> int:
        """A random partition, among those with a leader when any has one (as librdkafka does)."""
        partition = int(self._random() * count)
        if leaders is None or _available(leaders[partition]):
            return partition
        available = [p for p in range(count) if _available(leaders[p])]
        return available[int(self._random() * len(available))] if available else partition

    def batch_sent(self, tp: TopicPartition) -> None:
        """A batch of `tp` went out: its topic's keyless messages move to a new partition."""
        current = self._sticky.get(tp.topic)
        if current is not None and current[0] == tp.partition:
            del self._sticky[tp.topic]
