"""BatchingProducer: an asyncio Kafka producer whose sends are timed per broker, not per partition.

Design (docs/produce.md has the long form). aiokafka already does the hard protocol work: its
client keeps connections and metadata, its record builder encodes batches, its
`SendProduceReqHandler` sends one ProduceRequest per broker carrying many partitions and retries
what may be retried, and its `TransactionManager` keeps idempotent sequence numbers. What aiokafka
decides badly for many partitions is *when* a partition is ready (a per-partition `linger_ms`) and
how many requests may be in flight (one per broker). So we keep its pieces and replace the two
deciders:

- `_Accumulator` (a `MessageAccumulator`) never blocks `send` on a full batch: it starts another
  batch for that partition, and it reports every append to the `BrokerBatchCollector`.
- `_Sender` (a `Sender`) runs our loop: it asks the collector which partitions are due, pops one
  batch per partition into one request per planned send, and frees the collector's in-flight slot
  when the response (or the final error) arrives.

All state lives on the event loop's thread; nothing here is shared with other threads.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import logging
import random
import time
from collections import Counter, deque
from collections.abc import Hashable, Mapping

import numpy as np
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError, LeaderNotAvailableError
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.producer.message_accumulator import BatchBuilder, MessageAccumulator, MessageBatch
from aiokafka.producer.sender import Sender, SendProduceReqHandler
from aiokafka.producer.transaction_manager import TransactionManager
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.structs import TopicPartition
from aiokafka.util import INTEGER_MAX_VALUE, create_task

from rebalancer.produce.collector import BrokerBatchCollector, Send
from rebalancer.produce.config import (
    COLLECTOR_KEYS,
    CollectorConfig,
    check_known_keys,
    parse_bool,
    parse_int,
    parse_ms,
)
from rebalancer.produce.stats import LogHistogram

__all__ = ["PRODUCER_DEFAULTS", "BatchingProducer", "ProducerStoppedError"]

log = logging.getLogger(__name__)

PRODUCER_DEFAULTS: dict[str, object] = {
    "bootstrap.servers": None,  # required
    "client.id": "rebalancer-producer",
    "acks": "all",
    "enable.idempotence": False,
    "request.timeout.ms": 30_000,
    "retry.backoff.ms": 100,
    "delivery.timeout.ms": 120_000,
    "batch.size": 1_000_000,
    "compression.type": None,
    "metadata.max.age.ms": 300_000,
    "queue.buffering.max.messages": 1_000_000,
}
_COMPRESSION = {None: 0, "none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_NO_HEADERS: list = []  # the C record builder wants a list; never mutated
_ACKS = {"all": -1, "-1": -1, -1: -1, 1: 1, "1": 1, 0: 0, "0": 0}


_BYTES_TYPES = (bytes, bytearray, memoryview)
_Future = asyncio.Future
_YIELD_MASK = 1023


class _TopicRoute:
    """Per-topic partition objects and leaders, cached until the next metadata update."""

    __slots__ = ("all_partitions", "leaders", "tps")

    def __init__(self, tps: list[TopicPartition], leaders: list[int | None]) -> None:
        self.tps = tps
        self.leaders = leaders
        self.all_partitions = list(range(len(tps)))


class ProducerStoppedError(RuntimeError):
    """`send` on a producer that is stopping or stopped."""


class _Counters:
    """Delivery outcomes; touched only from the event loop."""

    def __init__(self) -> None:
        self.acked = 0
        self.failed = 0
        self.errors: Counter[str] = Counter()
        self._latency = LogHistogram()
        # (ack time, send times) per batch, folded into the histogram in bulk: one numpy call per
        # few hundred batches instead of one per batch keeps the ack path cheap.
        self._settled: list[tuple[float, list[float]]] = []
        self.requests = 0
        self.request_msgs = 0
        self.retries = 0  # batches re-queued after a retriable error

    def settle(self, now: float, sent_at: list[float]) -> None:
        self.acked += len(sent_at)
        self._settled.append((now, sent_at))
        if len(self._settled) >= 512:
            self._fold()

    def _fold(self) -> None:
        if not self._settled:
            return
        lengths = [len(sent) for _, sent in self._settled]
        acked_at = np.repeat(np.fromiter((now for now, _ in self._settled), dtype=np.float64), lengths)
        sent_at = np.fromiter(itertools.chain.from_iterable(sent for _, sent in self._settled), dtype=np.float64)
        self._settled.clear()
        self._latency.add_many((acked_at - sent_at) * 1000.0)

    @property
    def latency(self) -> LogHistogram:
        self._fold()
        return self._latency


class _Batch(MessageBatch):
    """A partition batch whose message futures resolve to (partition, offset) and feed the stats."""

    def __init__(self, tp: TopicPartition, builder: BatchBuilder, ttl: float, counters: _Counters) -> None:
        super().__init__(tp, builder, ttl, 0.0)
        self._counters = counters
        self._sent_at: list[float] = []
        self._futures: list[asyncio.Future] = []
        self.nbytes = 0
        self.last_size = 0

    def add(self, key: bytes | None, value: bytes | None, now: float, loop: asyncio.AbstractEventLoop) -> asyncio.Future | None:
        """Append one record; None when the batch is full. Returns the record's future."""
        # Straight to the C record builder: BatchBuilder.append's serializer hooks are unused here
        # and its extra Python frame is a measurable share of the send path.
        builder = self._builder
        if builder._closed:
            return None
        metadata = builder._builder.append(builder._relative_offset, None, key, value, _NO_HEADERS)
        if metadata is None:
            builder.close()
            return None
        builder._relative_offset += 1
        future = _Future(loop=loop)  # the C Future directly: loop.create_future adds a Python frame
        self._futures.append(future)  # record i of the batch has relative offset i
        self._sent_at.append(now)
        self.last_size = size = metadata.size
        self.nbytes += size
        return future

    def done(self, base_offset: int, timestamp: int | None = None, log_start_offset: int | None = None, **_: object) -> None:
        now = time.monotonic()
        if not self.future.done():
            self.future.set_result(base_offset)
        partition = self._tp.partition
        for relative, future in enumerate(self._futures):
            if not future.done():
                future.set_result((partition, base_offset + relative))
        self._settle(now)

    def done_noack(self) -> None:
        now = time.monotonic()
        if not self.future.done():
            self.future.set_result(None)
        partition = self._tp.partition
        for future in self._futures:
            if not future.done():
                future.set_result((partition, -1))
        self._settle(now)

    def _settle(self, now: float) -> None:
        if self._sent_at:
            self._counters.settle(now, self._sent_at)
            self._sent_at = []

    def failure(self, exception: BaseException) -> None:
        counters = self._counters
        if self._sent_at:
            counters.failed += len(self._sent_at)
            counters.errors[type(exception).__name__] += len(self._sent_at)
            self._sent_at = []
        if not self.future.done():
            self.future.set_exception(exception)
            self.future.exception()  # retrieved: the per-message futures carry it to the user
        for future in self._futures:
            if not future.done():
                future.set_exception(copy.copy(exception))
        if not self._drain_waiter.done():
            self._drain_waiter.set_exception(exception)
            self._drain_waiter.exception()


class _Accumulator(MessageAccumulator):
    """Per-partition queues of batches; readiness is the collector's decision, not a per-batch timer."""

    def __init__(
        self,
        cluster: object,
        collector: BrokerBatchCollector,
        counters: _Counters,
        *,
        batch_size: int,
        compression: int,
        ttl: float,
        txn_manager: TransactionManager | None,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        super().__init__(cluster, batch_size, compression, ttl, txn_manager=txn_manager, loop=loop, linger_ms=0)
        self.collector = collector
        self._counters = counters
        self._unrouted: dict[TopicPartition, None] = {}
        self._wakeup_at: float | None = None

    def wake(self) -> None:
        if not self._waiter_future.done():
            self._waiter_future.set_result(None)

    def append(self, tp: TopicPartition, key: bytes | None, value: bytes | None, leader: int | None) -> asyncio.Future:
        """Queue one message; never blocks (a full batch starts the next one)."""
        if self._closed:
            raise ProducerStoppedError("the producer is stopped")
        if self._exception is not None:
            raise copy.copy(self._exception)
        now = time.monotonic()
        queue = self._batches.get(tp)
        future = None
        if queue:
            batch = queue[-1]
            future = batch.add(key, value, now, self._loop)
        if future is None:
            batch = _Batch(tp, self.create_builder(), self._batch_ttl, self._counters)
            if queue is None:
                queue = self._batches[tp] = deque()
            queue.append(batch)
            future = batch.add(key, value, now, self._loop)
            assert future is not None  # an empty builder always takes one record
        if leader is not None and leader >= 0:
            if self.collector.add(leader, tp, batch.last_size):
                self.wake()
        else:
            self._route(tp, batch.last_size, leader, None)
        return future

    def _route(self, tp: TopicPartition, nbytes: int, leader: int | None, oldest: float | None) -> None:
        if leader is None or leader < 0:
            self._unrouted[tp] = None
            self.wake()
            return
        if self.collector.add(leader, tp, nbytes, oldest=oldest):
            self.wake()

    def _reroute_queued(self, tp: TopicPartition) -> None:
        queue = self._batches.get(tp)
        if queue:
            self._route(tp, sum(b.nbytes for b in queue), self._cluster.leader_for_partition(tp), queue[0]._ctime)

    def reenqueue(self, batch: MessageBatch) -> None:
        """A retriable failure: the batch goes back to the front and its partition back to the collector."""
        super().reenqueue(batch)
        tp = batch.tp
        leader = self._cluster.leader_for_partition(tp)
        self._route(tp, batch.nbytes, leader, batch._ctime)

    def route_unrouted(self) -> bool:
        """Give partitions that had no leader to their leader now; fail expired ones. True if some remain."""
        if not self._unrouted:
            return False
        pending = list(self._unrouted)
        self._unrouted.clear()
        for tp in pending:
            queue = self._batches.get(tp)
            if not queue:
                continue
            leader = self._cluster.leader_for_partition(tp)
            if leader is not None and leader >= 0:
                self._route(tp, sum(b.nbytes for b in queue), leader, queue[0]._ctime)
            elif self._txn_manager is None and queue[0].expired():
                while queue and queue[0].expired():
                    batch = self._pop_batch(tp)
                    batch.failure(LeaderNotAvailableError())
                    queue = self._batches.get(tp)
                if queue:
                    self._unrouted[tp] = None
            else:
                self._unrouted[tp] = None
        return bool(self._unrouted)

    def drain_due(self) -> tuple[list[tuple[Send, dict[TopicPartition, MessageBatch]]], bool]:
        """The collector's due sends, each with one batch per partition; and whether leaders are unknown."""
        unknown = self.route_unrouted()
        plans: list[tuple[Send, dict[TopicPartition, MessageBatch]]] = []
        moved: list[TopicPartition] = []
        for send in self.collector.poll():
            batches: dict[TopicPartition, MessageBatch] = {}
            for tp in send.partitions:
                queue = self._batches.get(tp)
                if not queue:
                    continue
                leader = self._cluster.leader_for_partition(tp)
                if leader != send.broker:
                    moved.append(tp)
                    continue
                batch = self._pop_batch(tp)
                if batch.is_empty():
                    batch.done_noack()
                    continue
                batches[tp] = batch
                rest = self._batches.get(tp)
                if rest:  # more than one batch queued: the rest waits for the next send
                    self.collector.add(send.broker, tp, sum(b.nbytes for b in rest), oldest=rest[0]._ctime)
            if batches:
                plans.append((send, batches))
            else:
                self.collector.complete(send)
        for tp in moved:
            self._reroute_queued(tp)
        if moved:
            unknown = unknown or bool(self._unrouted)
        self._schedule_wakeup()
        return plans, unknown or bool(self._unrouted)

    def _schedule_wakeup(self) -> None:
        if self._waiter_future.done():
            self._waiter_future = self._loop.create_future()
        deadline = self.collector.next_deadline()
        if self._wakeup_handle is not None and deadline == self._wakeup_at:
            return
        if self._wakeup_handle is not None:
            self._wakeup_handle.cancel()
            self._wakeup_handle = None
        self._wakeup_at = deadline
        if deadline is not None:
            delay = max(0.0, deadline - time.monotonic())
            self._wakeup_handle = self._loop.call_later(delay, self._wake_handle)

    def _wake_handle(self) -> None:
        self._wakeup_handle = None
        self._wakeup_at = None
        self.wake()

    def queued_messages(self) -> int:
        return sum(b.record_count for q in self._batches.values() for b in q)


class _Sender(Sender):
    """aiokafka's Sender with our loop: the collector plans, up to N requests per broker in flight."""

    def __init__(self, *args: object, counters: _Counters, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._counters = counters

    async def _sender_routine(self) -> None:
        accumulator: _Accumulator = self._message_accumulator
        tasks: set[asyncio.Task] = set()
        try:
            while True:
                await self._maybe_wait_for_pid()
                plans, unknown_leaders = accumulator.drain_due()
                for send, batches in plans:
                    tasks.add(create_task(self._send_planned(send, batches)))
                waiters: set[asyncio.Future] = set(tasks)
                if unknown_leaders:
                    waiters.add(self.client.force_metadata_update())
                    waiters.add(create_task(asyncio.sleep(self._retry_backoff)))
                waiters.add(accumulator.waiter())
                done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task in tasks:
                        task.result()  # a produce task never raises; if it does, the sender must die loudly
                tasks -= done
        except asyncio.CancelledError:
            for task in tasks:
                await task
        except Exception as exc:
            log.exception("Unexpected error in the batching sender")
            raise KafkaError("Unexpected error during batch delivery") from exc

    async def _send_planned(self, send: Send, batches: dict[TopicPartition, MessageBatch]) -> None:
        counters = self._counters
        counters.requests += 1
        counters.request_msgs += sum(b.record_count for b in batches.values())
        handler = SendProduceReqHandler(self, batches)
        started = time.monotonic()
        try:
            await handler.do(send.broker)
        finally:
            rtt_ms = (time.monotonic() - started) * 1000.0
            counters.retries += len(handler._to_reenqueue)
            ok = not handler._to_reenqueue and all(
                b.future.done() and not b.future.cancelled() and b.future.exception() is None for b in batches.values()
            )
            self._message_accumulator.collector.complete(send, rtt_ms=rtt_ms, ok=ok)


PRODUCER_KEYS: tuple[str, ...] = (*PRODUCER_DEFAULTS, *COLLECTOR_KEYS)


class BatchingProducer:
    """Asyncio Kafka producer with broker-level linger. Config keys: `PRODUCER_KEYS`.

    >>> p = BatchingProducer({"bootstrap.servers": bs, "broker.linger.ms": 500})
    >>> await p.start(); fut = await p.send("t", b"v"); partition, offset = await fut
    """

    def __init__(self, config: Mapping[str, object]) -> None:
        config = dict(config)
        check_known_keys(config, PRODUCER_KEYS)
        merged = {**PRODUCER_DEFAULTS, **config}
        servers = merged["bootstrap.servers"]
        if not servers or not isinstance(servers, str | list | tuple):
            raise ValueError(f"bootstrap.servers is required (host:port[,host:port]), got {servers!r}")
        self._bootstrap = servers if isinstance(servers, str) else ",".join(servers)
        self._client_id = str(merged["client.id"])
        self._idempotent = parse_bool("enable.idempotence", merged["enable.idempotence"])
        acks = merged["acks"]
        if acks not in _ACKS:
            raise ValueError(f"acks must be one of all, -1, 1, 0; got {acks!r}")
        self._acks = _ACKS[acks]
        if self._idempotent and self._acks != -1:
            raise ValueError(f"acks must be all when enable.idempotence is true, got {acks!r}")
        self._request_timeout_ms = int(parse_ms("request.timeout.ms", merged["request.timeout.ms"]))
        self._retry_backoff_ms = int(parse_ms("retry.backoff.ms", merged["retry.backoff.ms"]))
        self._delivery_timeout_ms = parse_ms("delivery.timeout.ms", merged["delivery.timeout.ms"])
        self._metadata_max_age_ms = int(parse_ms("metadata.max.age.ms", merged["metadata.max.age.ms"]))
        self._max_outstanding = parse_int(
            "queue.buffering.max.messages", merged["queue.buffering.max.messages"], minimum=1
        )
        compression = merged["compression.type"]
        if compression not in _COMPRESSION:
            raise ValueError(f"compression.type must be one of none, gzip, snappy, lz4, zstd; got {compression!r}")
        self._compression = _COMPRESSION[compression]
        collector_config = {k: v for k, v in config.items() if k in COLLECTOR_KEYS}
        self.collector_config = CollectorConfig.from_dict(collector_config, stacklevel=3)
        self._batch_size = min(
            parse_int("batch.size", merged["batch.size"], minimum=1), self.collector_config.max_request_size
        )
        self._max_message_size = self.collector_config.max_request_size
        self._counters = _Counters()
        self._produced = 0
        self._state = "new"  # new -> started -> stopping -> stopped
        self._topics: dict[str, _TopicRoute] = {}
        # Records this much smaller than max.request.size cannot exceed it; skip the exact estimate.
        self._size_guard = self._max_message_size - 4096
        self._partitioner = DefaultPartitioner()
        self._client: AIOKafkaClient | None = None
        self._collector: BrokerBatchCollector | None = None
        self._accumulator: _Accumulator | None = None
        self._sender: _Sender | None = None
        self._flushers = 0
        self._backpressure_waits = 0

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._state != "new":
            raise RuntimeError(f"start() on a producer that is {self._state}")
        loop = asyncio.get_running_loop()
        self._client = AIOKafkaClient(
            bootstrap_servers=self._bootstrap,
            client_id=self._client_id,
            request_timeout_ms=self._request_timeout_ms,
            retry_backoff_ms=self._retry_backoff_ms,
            metadata_max_age_ms=self._metadata_max_age_ms,
        )
        self._client.cluster.add_listener(self._on_metadata)
        txn_manager = TransactionManager(None, INTEGER_MAX_VALUE) if self._idempotent else None
        self._collector = BrokerBatchCollector(self.collector_config, clock=time.monotonic)
        self._accumulator = _Accumulator(
            self._client.cluster,
            self._collector,
            self._counters,
            batch_size=self._batch_size,
            compression=self._compression,
            ttl=self._delivery_timeout_ms / 1000.0,
            txn_manager=txn_manager,
            loop=loop,
        )
        self._sender = _Sender(
            self._client,
            acks=self._acks,
            txn_manager=txn_manager,
            message_accumulator=self._accumulator,
            retry_backoff_ms=self._retry_backoff_ms,
            request_timeout_ms=self._request_timeout_ms,
            counters=self._counters,
        )
        try:
            await self._client.bootstrap()
            await self._sender.start()
        except BaseException:
            await self._client.close()
            self._state = "stopped"
            raise
        self._state = "started"

    async def flush(self) -> None:
        """Send everything queued now (reason `flush`) and wait until each message is acked or failed."""
        if self._state == "new":
            return
        accumulator, collector = self._accumulator, self._collector
        assert accumulator is not None and collector is not None
        self._flushers += 1
        collector.set_flushing(True)
        try:
            while True:
                accumulator.wake()
                waiters = [b.future for q in accumulator._batches.values() for b in q if not b.future.done()]
                waiters += [b.future for b in accumulator._pending_batches if not b.future.done()]
                if not waiters:
                    break
                sender_task = self._sender.sender_task if self._sender is not None else None
                if sender_task is None or sender_task.done():
                    # The sender is gone; nothing would resolve the rest, so fail them with its error.
                    error = sender_task.exception() if sender_task is not None and not sender_task.cancelled() else None
                    accumulator.fail_all(error or KafkaError("the producer's sender is not running"))
                    continue
                all_done = asyncio.ensure_future(asyncio.wait(waiters))
                await asyncio.wait([all_done, sender_task], return_when=asyncio.FIRST_COMPLETED)
                if not all_done.done():
                    all_done.cancel()  # cancels the wait only, never the delivery futures
                # New batches may have been queued meanwhile; go around until none is pending.
        finally:
            self._flushers -= 1
            if self._flushers == 0:
                collector.set_flushing(False)

    async def stop(self) -> None:
        """Flush, then close the connections; later `send` calls raise ProducerStoppedError."""
        if self._state in ("stopping", "stopped"):
            return
        if self._state == "new":
            self._state = "stopped"
            return
        self._state = "stopping"
        try:
            await self.flush()
        finally:
            assert self._accumulator is not None and self._sender is not None and self._client is not None
            self._accumulator._closed = True
            await self._sender.close()
            await self._client.close()
            self._state = "stopped"

    async def __aenter__(self) -> BatchingProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- sending -----------------------------------------------------------------------------------
    def _on_metadata(self, _cluster: object) -> None:
        self._topics.clear()  # partition counts and leaders are re-read on the next send

    async def _topic(self, topic: str) -> _TopicRoute:
        route = self._topics.get(topic)
        if route is None:
            assert self._client is not None
            await self._client._wait_on_metadata(topic)
            cluster = self._client.cluster
            parts = sorted(cluster.partitions_for_topic(topic) or ())
            if not parts:
                raise ValueError(f"topic {topic!r} has no partitions")
            tps = [TopicPartition(topic, p) for p in range(parts[-1] + 1)]
            route = _TopicRoute(tps, [cluster.leader_for_partition(tp) for tp in tps])
            self._topics[topic] = route
        return route

    async def send(
        self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None
    ) -> asyncio.Future:
        """Queue one message; returns a future of (partition, offset), or of the delivery error."""
        if self._state != "started":
            if self._state == "new":
                raise RuntimeError("send() before start()")
            raise ProducerStoppedError(f"send() on a producer that is {self._state}")
        size = 0
        if value is not None:
            if type(value) is not bytes and not isinstance(value, _BYTES_TYPES):
                raise ValueError(f"value must be bytes, got {type(value).__name__}")
            size = len(value)
        elif key is None:
            raise ValueError("a message needs a key or a value, got neither")
        if key is not None:
            if type(key) is not bytes and not isinstance(key, _BYTES_TYPES):
                raise ValueError(f"key must be bytes, got {type(key).__name__}")
            size += len(key)
        if size > self._size_guard:
            exact = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, [])
            if exact > self._max_message_size:
                raise ValueError(f"message of {exact} bytes exceeds max.request.size={self._max_message_size}")
        route = self._topics.get(topic)
        if route is None:
            route = await self._topic(topic)
            if self._state != "started":
                raise ProducerStoppedError(f"send() on a producer that is {self._state}")
        count = len(route.tps)
        if partition is None:
            if key is None:
                partition = int(random.random() * count)
            else:
                partition = self._partitioner(bytes(key), route.all_partitions, route.all_partitions)
        elif type(partition) is not int or not 0 <= partition < count:
            raise ValueError(f"partition must be one of {topic!r}'s partitions 0..{count - 1}, got {partition!r}")
        counters = self._counters
        if self._produced - counters.acked - counters.failed >= self._max_outstanding:
            await self._wait_for_room()
        future = self._accumulator.append(route.tps[partition], key, value, route.leaders[partition])
        self._produced += 1
        if self._produced & _YIELD_MASK == 0:
            # send() never blocks, so a caller looping on it would starve the sender and the linger
            # timers; give the loop one turn every 1024 messages.
            await asyncio.sleep(0)
        return future

    async def _wait_for_room(self) -> None:
        """Backpressure: queue.buffering.max.messages are unresolved; wait until one resolves."""
        counters = self._counters
        accumulator = self._accumulator
        assert accumulator is not None
        self._backpressure_waits += 1
        while self._produced - counters.acked - counters.failed >= self._max_outstanding:
            if self._state != "started":
                raise ProducerStoppedError(f"send() on a producer that is {self._state}")
            # Room comes only from sends, so make the collector treat this as a flush for a moment.
            self._collector.set_flushing(True)
            accumulator.wake()
            await asyncio.sleep(0.001)
            if self._flushers == 0:
                self._collector.set_flushing(False)

    # -- introspection -----------------------------------------------------------------------------
    def stats(self) -> dict[str, object]:
        counters = self._counters
        collector = self._collector.stats() if self._collector is not None else BrokerBatchCollector().stats()
        return {
            "sends": collector["sends"],
            "requests": counters.requests,
            "partitions_per_send_avg": collector["partitions_per_send_avg"],
            "partitions_per_send_max": collector["partitions_per_send_max"],
            "msgs_per_request": counters.request_msgs / counters.requests if counters.requests else 0.0,
            "wait_ms_avg": collector["wait_ms_avg"],
            "wait_ms_p99": collector["wait_ms_p99"],
            "triggers_by_reason": collector["triggers_by_reason"],
            "in_flight": collector["in_flight"],
            "window_waits": collector["window_waits"],
            "window_wait_ms_total": collector["window_wait_ms_total"],
            "split_sends": collector["split_sends"],
            "effective_linger_ms": collector["effective_linger_ms"],
            "latency_ms_p50": counters.latency.percentile(50),
            "latency_ms_p95": counters.latency.percentile(95),
            "latency_ms_p99": counters.latency.percentile(99),
            "retries": counters.retries,
            "acked": counters.acked,
            "failed": counters.failed,
            "produced": self._produced,
            "queued": self._accumulator.queued_messages() if self._accumulator is not None else 0,
            "backpressure_waits": self._backpressure_waits,
            "errors": dict(counters.errors),
        }

    def partition_leader(self, topic: str, partition: int) -> Hashable | None:
        """The broker id currently leading `topic`/`partition` (None if unknown)."""
        if self._client is None:
            return None
        return self._client.cluster.leader_for_partition(TopicPartition(topic, partition))
