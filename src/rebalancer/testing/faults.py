"""Broker faults on a real `KafkaCluster`: a leader crash while an idempotent producer sends, and a
count of what the brokers kept.

`produce_through_leader_crash` sends at a fixed rate through the producer it is given (built with
`enable.idempotence` and `acks=all`; `rebalancer.produce.BatchingProducer` in the tests), SIGKILLs the broker that leads the most partitions of the topic when the send loop's
clock reaches `kill_at`, and restarts it at `restart_at`: the schedule is the send loop's, measured
by the messages it has sent, so it does not race anything. `read_topic` reads every partition back
from offset 0 to its high watermark, and `tally` says what happened to each message: acked and
stored once at the offset its ack named, failed (reported by its future), lost, duplicated or out
of send order. tests/testing/test_kafka_faults.py and benchmarks/kafka_faults.py use them.

The producer is an argument, not an import: `testing` imports none of the components (the
components' demos and tests import it), so `produce`, whose demo starts a `MockKafkaCluster`,
and `testing` never import each other in a loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from rebalancer._librdkafka import LibrdkafkaLog

if TYPE_CHECKING:
    from rebalancer.testing.kafka_cluster import KafkaCluster

__all__ = [
    "CrashProducer",
    "CrashRun",
    "CrashSchedule",
    "FaultTally",
    "SentMessage",
    "produce_through_leader_crash",
    "read_topic",
    "tally",
]

log = logging.getLogger(__name__)

# A message's outcome: (partition, offset) once acked, its delivery error once failed, None while unresolved.
Outcome = tuple[int, int] | BaseException | None
# The send loop gives the event loop a turn (and paces itself) every this many messages.
_CHUNK = 50


class SentMessage(Protocol):
    """What `CrashProducer.send` returns: a future of (partition, offset), as BatchingProducer's `Delivery`."""

    def cancelled(self) -> bool: ...

    def exception(self) -> BaseException | None: ...

    def result(self) -> tuple[int, int]: ...

    def add_done_callback(self, fn: Callable[[SentMessage], object]) -> None: ...


class CrashProducer(Protocol):
    """The producer `produce_through_leader_crash` drives: BatchingProducer's start/send/stop/stats."""

    async def start(self) -> None: ...

    async def send(
        self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None
    ) -> SentMessage: ...

    async def stop(self, timeout: float | None = None) -> None: ...

    def stats(self) -> dict[str, object]: ...


@dataclass(frozen=True)
class CrashSchedule:
    """`rate` messages/s for `seconds`; the leader of most partitions is killed at `kill_at` s and
    restarted at `restart_at` s of the send loop's clock (message i is due at i / rate)."""

    rate: int
    seconds: float
    kill_at: float
    restart_at: float

    def __post_init__(self) -> None:
        if isinstance(self.rate, bool) or not isinstance(self.rate, int) or self.rate < 1:
            raise ValueError(f"rate must be an int >= 1 message/s, got {self.rate!r}")
        if not self.seconds > 0:
            raise ValueError(f"seconds must be > 0, got {self.seconds!r}")
        if not 0 <= self.kill_at < self.restart_at <= self.seconds:
            raise ValueError(
                f"kill_at and restart_at must satisfy 0 <= kill_at < restart_at <= seconds={self.seconds:g}, "
                f"got kill_at={self.kill_at!r} restart_at={self.restart_at!r}"
            )

    @property
    def total(self) -> int:
        return round(self.rate * self.seconds)

    @property
    def kill_index(self) -> int:
        """The message before which the broker is killed."""
        return round(self.rate * self.kill_at)

    @property
    def restart_index(self) -> int:
        return round(self.rate * self.restart_at)


@dataclass
class CrashRun:
    """What `produce_through_leader_crash` did: each message sent (partition, value) in send order, its
    outcome, how many times its future resolved, and the producer's stats at the end."""

    topic: str
    partitions: int
    schedule: CrashSchedule
    victim: int = -1
    victim_partitions: int = 0  # partitions the victim led when it was killed
    sent: list[tuple[int, bytes]] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    resolutions: list[int] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    send_seconds: float = 0.0  # the send loop, first message to last send() (not the flush)
    flush_seconds: float = 0.0  # from the last send() until every message was acked or failed
    restart_seconds: float = 0.0  # set_up(): the JVM's start until it was back in the metadata

    @property
    def acked(self) -> int:
        return sum(1 for o in self.outcomes if isinstance(o, tuple))

    @property
    def failed(self) -> int:
        return sum(1 for o in self.outcomes if isinstance(o, BaseException))

    def errors(self) -> Counter[str]:
        """Failed messages by error class."""
        return Counter(type(o).__name__ for o in self.outcomes if isinstance(o, BaseException))


def message_value(partition: int, seq: int) -> bytes:
    """The value of `partition`'s message number `seq` (0, 1, ...): unique, and its send order readable."""
    return b"p%03d-%09d-" % (partition, seq) + b"x" * 48


async def _produce(
    cluster: KafkaCluster,
    run: CrashRun,
    make_producer: Callable[[dict[str, object]], CrashProducer],
    config: Mapping[str, object],
    stop_timeout_s: float,
    crash: bool,
) -> None:
    schedule, topic, partitions = run.schedule, run.topic, run.partitions
    loop = asyncio.get_running_loop()
    producer = make_producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            **config,
        }
    )
    total = schedule.total
    run.outcomes = [None] * total
    run.resolutions = [0] * total

    def resolved(index: int, future: SentMessage) -> None:
        run.resolutions[index] += 1
        if future.cancelled():
            run.outcomes[index] = asyncio.CancelledError(f"message {index}'s future was cancelled")
        elif future.exception() is not None:
            run.outcomes[index] = future.exception()
        else:
            partition, offset = future.result()
            run.outcomes[index] = (int(partition), int(offset))

    def kill() -> None:
        leaders = Counter(b for b in cluster.partition_leaders(topic).values() if b >= 0)
        run.victim, run.victim_partitions = max(leaders.items(), key=lambda kv: (kv[1], -kv[0]))
        cluster.set_down(run.victim)
        log.info("send loop at message %d: killed broker %d, leader of %d of %d partitions",
                 schedule.kill_index, run.victim, run.victim_partitions, partitions)  # fmt: skip

    def restart() -> None:
        started = time.monotonic()
        cluster.set_up(run.victim)
        run.restart_seconds = time.monotonic() - started
        log.info("broker %d back in the metadata after %.1f s", run.victim, run.restart_seconds)

    restarting: asyncio.Future[None] | None = None
    seqs = [0] * partitions
    await producer.start()
    try:
        t0 = loop.time()
        for index in range(total):
            if crash and index == schedule.kill_index:
                await loop.run_in_executor(None, kill)
            if crash and index == schedule.restart_index:
                restarting = loop.run_in_executor(None, restart)  # sending goes on while the JVM starts
            if index % _CHUNK == 0:
                delay = t0 + index / schedule.rate - loop.time()
                await asyncio.sleep(max(0.0, delay))
            partition = index % partitions
            value = message_value(partition, seqs[partition])
            seqs[partition] += 1
            run.sent.append((partition, value))
            future = await producer.send(topic, value, partition=partition)
            future.add_done_callback(functools.partial(resolved, index))
        if schedule.restart_index >= total and restarting is None and run.victim >= 0:
            restarting = loop.run_in_executor(None, restart)
        run.send_seconds = loop.time() - t0
        flushed = loop.time()
        await producer.stop(timeout=stop_timeout_s)  # what is unresolved then fails, and is counted failed
        run.flush_seconds = loop.time() - flushed
    finally:
        await producer.stop(timeout=0)  # a no-op after the stop above; resolves every future otherwise
        await asyncio.sleep(0)  # the done callbacks of futures resolved by the stop
        run.stats = producer.stats()
        if restarting is not None:
            await restarting


def produce_through_leader_crash(
    cluster: KafkaCluster,
    topic: str,
    partitions: int,
    schedule: CrashSchedule,
    config: Mapping[str, object] | None = None,
    stop_timeout_s: float = 180.0,
    crash: bool = True,
    *,
    producer: Callable[[dict[str, object]], CrashProducer],
) -> CrashRun:
    """Send `schedule.total` messages to `topic` (message i to partition i % partitions) through an
    idempotent `acks=all` producer, crashing the leader of most partitions meanwhile.

    `producer` builds it from its settings: `rebalancer.produce.BatchingProducer`, or any class with
    its start/send/stop/stats (`CrashProducer`).

    However it ends, the killed broker is up again and every partition in sync when this returns
    (or raises). `config` adds producer settings; `stop_timeout_s` bounds the final flush, after
    which what is still unresolved fails with KafkaTimeoutError (and is counted failed).
    `crash=False` sends the same schedule with no fault: the baseline.
    """
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    run = CrashRun(topic=topic, partitions=partitions, schedule=schedule)
    try:
        asyncio.run(_produce(cluster, run, producer, dict(config or {}), stop_timeout_s, crash))
    finally:
        if run.victim >= 0 and not cluster.is_up(run.victim):
            cluster.set_up(run.victim)
        if run.victim >= 0:
            cluster.wait_until_in_sync(timeout_s=120)
    return run


def read_topic(
    bootstrap_servers: str, topic: str, partitions: int, timeout_s: float = 120.0
) -> dict[int, list[tuple[int, bytes]]]:
    """{partition: [(offset, value), ...]}: every record from offset 0 to the high watermark read when
    the call starts, with a confluent-kafka consumer that assigns all partitions (no group)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition  # the 'kafka' extra: loaded on use

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"faults-reader-{topic}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            "log_level": 3,
            "logger": LibrdkafkaLog(),  # a crashed broker's refused connections, as records, not stderr
        }
    )
    records: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    try:
        ends = {}
        for p in range(partitions):
            _low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=timeout_s, cached=False
            )
            ends[p] = int(high)
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in sorted(pending)])
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"read_topic({topic!r}): partitions {sorted(pending)[:10]} not read to their high watermark "
                    f"within {timeout_s:g} s"
                )
            for message in consumer.consume(num_messages=5000, timeout=0.5):
                error, partition, offset = message.error(), message.partition(), message.offset()
                if partition is None:
                    raise RuntimeError(f"read_topic({topic!r}): a message without a partition: {error}")
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        if offset is not None and offset >= ends[partition]:
                            pending.discard(partition)
                        continue
                    raise RuntimeError(f"read_topic({topic!r}) partition {partition}: {error.str()}")
                if partition not in pending or offset is None or offset >= ends[partition]:
                    continue
                records[partition].append((int(offset), bytes(message.value() or b"")))
                if offset >= ends[partition] - 1:
                    pending.discard(partition)
    finally:
        consumer.close()
    return records


@dataclass(frozen=True)
class FaultTally:
    """What happened to each sent message, counted from the producer's outcomes and the stored records.

    - `lost`: acked, but not in the topic;
    - `duplicates`: copies beyond the first of any message in the topic;
    - `out_of_order`: records of a partition stored before a message sent earlier to it;
    - `offset_mismatch`: acked at an offset that holds something else;
    - `failed_stored`: reported failed, yet in the topic (the producer gave up on a write that landed:
      reported, not lost; zero when no delivery times out);
    - `unresolved`: futures never resolved (a producer bug: every message must end acked or failed);
    - `unknown`: records in the topic that were never sent.
    """

    sent: int
    acked: int
    failed: int
    unresolved: int
    stored: int
    lost: int
    duplicates: int
    out_of_order: int
    offset_mismatch: int
    failed_stored: int
    unknown: int

    @property
    def ok(self) -> bool:
        """Nothing acked was lost, nothing stored twice or out of order, every message resolved."""
        return not (
            self.lost
            or self.duplicates
            or self.out_of_order
            or self.offset_mismatch
            or self.unresolved
            or self.unknown
        )


def tally(
    sent: Sequence[tuple[int, bytes]],
    outcomes: Sequence[Outcome],
    stored: Mapping[int, Sequence[tuple[int, bytes]]],
) -> FaultTally:
    """Count `sent` (partition, value) messages against their `outcomes` and the `stored` records."""
    if len(sent) != len(outcomes):
        raise ValueError(f"outcomes must have one entry per sent message ({len(sent)}), got {len(outcomes)}")
    index_of = {(p, v): i for i, (p, v) in enumerate(sent)}
    if len(index_of) != len(sent):
        raise ValueError("sent messages must be unique (partition, value) pairs")
    copies: Counter[tuple[int, bytes]] = Counter()
    at_offset: dict[tuple[int, int], bytes] = {}
    unknown = out_of_order = 0
    for partition, records in stored.items():
        last = -1
        for offset, value in records:
            at_offset[(partition, offset)] = value
            index = index_of.get((partition, value))
            if index is None:
                unknown += 1
                continue
            copies[(partition, value)] += 1
            if index <= last:
                out_of_order += 1
            last = max(last, index)
    acked = failed = unresolved = lost = mismatch = failed_stored = 0
    for (partition, value), outcome in zip(sent, outcomes):
        if outcome is None:
            unresolved += 1
        elif isinstance(outcome, BaseException):
            failed += 1
            failed_stored += copies[(partition, value)] > 0
        else:
            acked += 1
            lost += copies[(partition, value)] == 0
            mismatch += at_offset.get(outcome) != value or outcome[0] != partition
    return FaultTally(
        sent=len(sent),
        acked=acked,
        failed=failed,
        unresolved=unresolved,
        stored=sum(len(r) for r in stored.values()),
        lost=lost,
        duplicates=sum(n - 1 for n in copies.values()),
        out_of_order=out_of_order,
        offset_mismatch=mismatch,
        failed_stored=failed_stored,
        unknown=unknown,
    )
