"""The one seam between `rebalancer.produce` and aiokafka's internals.

Every private aiokafka name the package uses is used here and nowhere else; `PRIVATE_NAMES` lists
them and tests/produce/test_aiokafka_contract.py pins the behaviour of each, so an aiokafka upgrade
that changes one fails there, in one place, instead of silently in production.

What we keep of aiokafka: its client (connections, metadata), its record batch builder, its
`SendProduceReqHandler` (one ProduceRequest for many partitions, per-partition errors, the
retry-or-fail decision), its `TransactionManager` (idempotent sequences, transaction state) and the
Sender's transactional handlers (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn). What we replace is *when* a partition goes out (the `BrokerBatchCollector`
decides per broker) and how many requests are in flight. The sender loop below is aiokafka's, with
its transactional branch and its re-raise of fatal errors, and with the collector's plan in place of
`drain_by_nodes`.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from aiokafka import codec
from aiokafka.client import AIOKafkaClient
from aiokafka.cluster import ClusterMetadata
from aiokafka.conn import get_ip_port_afi
from aiokafka.errors import (
    KafkaError,
    LeaderNotAvailableError,
    OutOfOrderSequenceNumber,
    ProducerFenced,
    TransactionalIdAuthorizationFailed,
)
from aiokafka.partitioner import murmur2
from aiokafka.producer.message_accumulator import MessageAccumulator, MessageBatch
from aiokafka.producer.sender import Sender, SendProduceReqHandler
from aiokafka.producer.transaction_manager import TransactionManager, TransactionState
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.structs import OffsetAndMetadata, TopicPartition
from aiokafka.util import INTEGER_MAX_VALUE, commit_structure_validate, create_task

from rebalancer.produce.collector import BrokerBatchCollector, Send
from rebalancer.produce.delivery import Delivery
from rebalancer.produce.errors import ProducerStoppedError
from rebalancer.produce.stats import DeliveryCounters

__all__ = [
    "FATAL_ERRORS",
    "PRIVATE_NAMES",
    "Accumulator",
    "Batch",
    "BatchingSender",
    "Transactions",
    "broker_address",
    "has_codec",
    "murmur2_partition",
    "new_builder",
    "record_size",
    "validate_offsets",
    "wait_on_metadata",
]

log = logging.getLogger(__name__)

# Every private aiokafka name used below, by owner. The contract tests check each one.
PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    "aiokafka.producer.message_accumulator.MessageBatch": (
        "_builder",
        "_drain_waiter",
        "_tp",
        "_ttl",
        "_linger_time",
        "_ctime",
        "_msg_futures",
        "_retry_count",
    ),
    "aiokafka.producer.message_accumulator.MessageAccumulator": (
        "_batches",
        "_pending_batches",
        "_waiter_future",
        "_pop_batch",
        "_txn_manager",
        "_exception",
    ),
    "aiokafka.producer.sender.Sender": (
        "_sender_routine",
        "_fail_all",
        "_maybe_wait_for_pid",
        "_maybe_do_transactional_request",
    ),
    "aiokafka.client.AIOKafkaClient": ("_wait_on_metadata",),
}

# As in aiokafka's sender: these end the producer (every pending future fails with them) instead of
# failing one batch. A fenced producer must not write again; a sequence gap cannot be repaired.
FATAL_ERRORS: tuple[type[BaseException], ...] = (
    ProducerFenced,
    OutOfOrderSequenceNumber,
    TransactionalIdAuthorizationFailed,
)

_NO_HEADERS: list = []  # the C record builder wants a list; never mutated
_NO_FUTURES: tuple = ()  # MessageBatch._msg_futures of every Batch: its messages are Deliverys
_Future = asyncio.Future


async def wait_on_metadata(client: AIOKafkaClient, topic: str) -> set[int]:
    """The partition ids of `topic`, after fetching its metadata if needed."""
    return await client._wait_on_metadata(topic)


def broker_address(entry: str) -> tuple[str, int]:
    """(host, port) of one `bootstrap.servers` entry as aiokafka's client reads it (9092 if none is
    given; an IPv6 host in brackets). ValueError for what it cannot read ('h:x')."""
    host, port, _ = get_ip_port_afi(entry)
    return host, port


def has_codec(name: str) -> bool:
    """Whether aiokafka can compress with `name` here (snappy, lz4 and zstd need cramjam)."""
    return bool(getattr(codec, f"has_{name}")())


def record_size(key: bytes | None, value: bytes | None) -> int:
    """The exact size of a one-record batch, as aiokafka's builder writes it."""
    return int(DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, []))


def murmur2_partition(key: bytes, count: int) -> int:
    """The Java client's (and librdkafka's `murmur2`) partition of `key`."""
    return (murmur2(key) & 0x7FFFFFFF) % count


def validate_offsets(offsets: dict[TopicPartition, object]) -> dict[TopicPartition, OffsetAndMetadata]:
    """aiokafka's own structure check of a transaction's offsets; raises ValueError/TypeError/AssertionError."""
    return commit_structure_validate(offsets)


class Transactions:
    """The producer's calls into aiokafka's TransactionManager (idempotent sequences, transaction state).

    Here so that the producer module uses aiokafka's public names only.
    """

    def __init__(self, transactional_id: str | None, timeout_ms: int) -> None:
        self.transactional_id = transactional_id
        # Idempotence without transactions: aiokafka's own "no timeout" value.
        self.manager = TransactionManager(
            transactional_id, timeout_ms if transactional_id is not None else INTEGER_MAX_VALUE
        )

    @property
    def state_name(self) -> str:
        return str(self.manager.state.name.lower())

    def is_ready(self) -> bool:
        return bool(self.manager.state == TransactionState.READY)

    def in_transaction(self) -> bool:
        return bool(self.manager.is_in_transaction())

    def can_abort(self) -> bool:
        return self.manager.state in (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR)

    async def begin(self) -> None:
        await asyncio.shield(self.manager.wait_for_pid())
        self.manager.begin_transaction()

    async def add_offsets(self, offsets: dict[TopicPartition, OffsetAndMetadata], group_id: str) -> None:
        await asyncio.shield(self.manager.add_offsets_to_txn(offsets, group_id))

    async def commit(self) -> None:
        """EndTxn(commit); raises at once if the transaction can only be aborted."""
        self.manager.committing_transaction()
        await asyncio.shield(self.manager.wait_for_transaction_end())

    async def abort(self) -> None:
        self.manager.aborting_transaction()
        await asyncio.shield(self.manager.wait_for_transaction_end())


def new_builder(batch_size: int, compression: int, transactional: bool) -> DefaultRecordBatchBuilder:
    """aiokafka's C record batch builder, without its Python BatchBuilder wrapper.

    Below one message per partition per window every message gets its own batch: the wrapper's
    object, its six attributes and its extra Python frame per append cost about as much as the C
    builder itself, and `Batch` keeps the little state it held (offset, closed, buffer).
    """
    return DefaultRecordBatchBuilder(2, compression, int(transactional), -1, -1, 0, batch_size)


class Batch(MessageBatch):
    """A partition batch: one future for all its messages, whose `Delivery`s read their outcome from it.

    Its future's result is the batch's base offset (None with acks=0), or the batch's error. Cheaper
    than aiokafka's MessageBatch per batch, since below one message per partition per window each
    message is a batch: one future (not two plus one per message: the drain waiter only served
    aiokafka's own `add_message`), the C builder held directly, and, given `pending`, the batch
    leaves its accumulator's pending set as it resolves instead of through a done callback.
    """

    def __init__(
        self,
        tp: TopicPartition,
        builder: DefaultRecordBatchBuilder,
        ttl: float,
        counters: DeliveryCounters,
        loop: asyncio.AbstractEventLoop,
        now: float | None = None,
        pending: set[MessageBatch] | None = None,
    ) -> None:
        # MessageBatch.__init__'s state, set directly: its create_future() calls cost Python frames.
        self._builder = builder
        self._tp = tp
        self.partition = tp.partition
        self._ttl = ttl
        self._linger_time = 0.0
        self._ctime = self.created = time.monotonic() if now is None else now
        self.future: asyncio.Future = _Future(loop=loop)
        self._msg_futures = _NO_FUTURES  # aiokafka's per-message futures: none here (see Delivery)
        self._drain_waiter = None  # see drain_ready: nothing here waits for a drain
        self._retry_count = 0
        self.loop = loop
        self.counters = counters
        self.pending = pending
        self.sent_at: list[float] = []
        self.count = 0
        self.nbytes = 0
        self.last_size = 0
        self.closed = False
        self.buffer: bytearray | None = None

    def add(self, key: bytes | None, value: bytes | None, now: float) -> Delivery | None:
        """Append one record; None when the batch is full or closed. Returns the record's Delivery."""
        if self.closed:
            return None
        index = self.count  # record i of the batch has relative offset i
        metadata = self._builder.append(index, None, key, value, _NO_HEADERS)
        if metadata is None:
            self.closed = True
            return None
        self.count = index + 1
        self.sent_at.append(now)
        self.last_size = size = metadata.size
        self.nbytes += size
        return Delivery(self, index)

    # -- MessageBatch's interface, on the C builder ------------------------------------------------
    @property
    def record_count(self) -> int:
        return self.count

    def is_empty(self) -> bool:
        return self.count == 0

    def close(self) -> None:
        """No more records (a transaction's commit fixes its scope)."""
        self.closed = True

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        assert self.buffer is None, "the producer state goes in before the batch is built"
        self._builder.set_producer_state(producer_id, producer_epoch, base_sequence)

    def get_data_buffer(self) -> bytearray:
        buffer = self.buffer
        if buffer is None:  # built once; a retry resends the same bytes
            self.closed = True
            buffer = self.buffer = self._builder.build()
        return buffer

    def drain_ready(self) -> None:
        self._retry_count += 1

    def reset_drain(self) -> None:
        """Nothing to reset: no drain waiter (a retry goes back to the queue as is)."""

    async def wait_drain(self, timeout: float | None = None) -> None:
        raise NotImplementedError("Batch has no drain waiter: the collector decides when it goes")

    def remaining_linger(self) -> float | None:
        return None  # the collector's linger, not the batch's

    # -- resolution --------------------------------------------------------------------------------
    def done(
        self, base_offset: int, timestamp: int | None = None, log_start_offset: int | None = None, **_: object
    ) -> None:
        """Acked at `base_offset`: every message resolves with the batch's one future."""
        now = time.monotonic()
        if not self.future.done():
            self.future.set_result(base_offset)
        self._settle(now)

    def done_noack(self) -> None:
        """acks=0: every message resolves to (partition, -1)."""
        now = time.monotonic()
        if not self.future.done():
            self.future.set_result(None)
        self._settle(now)

    def _settle(self, now: float) -> None:
        if self.sent_at:
            self.counters.settle(now, self.sent_at)
            self.sent_at = []
        if self.pending is not None:
            self.pending.discard(self)

    def failure(self, exception: BaseException) -> None:
        if self.sent_at:  # counted once: a batch failed twice (stop after a fatal error) counts once
            self.counters.fail(len(self.sent_at), exception)
            self.sent_at = []
        if self.pending is not None:
            self.pending.discard(self)
        self.closed = True
        if not self.future.done():
            self.future.set_exception(exception)
            self.future.exception()  # retrieved: each Delivery raises its own copy to the user


class ProduceHandler(SendProduceReqHandler):
    """aiokafka's produce handler (request, per-partition errors, retry or fail) with a one-pass ack path."""

    def __init__(self, sender: BatchingSender, batches: dict[TopicPartition, MessageBatch]) -> None:
        super().__init__(sender, batches)
        self.plan = batches

    def handle_response(self, response: Any) -> None:
        """Acks (error code 0) resolve here; every partition with an error goes to aiokafka's handler.

        aiokafka makes a TopicPartition and looks up the error class per partition, acks
        included; here an ack is one tuple index and a dict lookup (a TopicPartition is a named
        tuple, so `(topic, partition)` finds it). Retry-or-fail stays aiokafka's decision.
        """
        plan: dict[Any, MessageBatch] = self.plan
        errors: list[tuple[str, list[tuple[Any, ...]]]] = []
        for topic, partitions in response.topics:
            failed: list[tuple[Any, ...]] | None = None
            for info in partitions:  # (partition, error_code, offset, ...) in every version
                if info[1] == 0:
                    batch = plan.get((topic, info[0]))
                    if batch is not None:
                        batch.done(info[2])
                    continue
                if failed is None:
                    failed = []
                    errors.append((topic, failed))
                failed.append(info)
        if errors:
            super().handle_response(_ErrorsOnly(errors, response.API_VERSION))


class _ErrorsOnly:
    """The part of a ProduceResponse aiokafka's handler still has to read: partitions with errors."""

    __slots__ = ("API_VERSION", "topics")

    def __init__(self, topics: list[tuple[str, list[tuple[Any, ...]]]], api_version: int) -> None:
        self.topics = topics
        self.API_VERSION = api_version


class Accumulator(MessageAccumulator):
    """Per-partition queues of batches; readiness is the collector's decision, not a per-batch timer.

    On a transactional producer a partition reaches the collector only once AddPartitionsToTxn has
    added it to the current transaction; until then it waits in `awaiting_add`.
    """

    _waiter_future: asyncio.Future  # set by MessageAccumulator.__init__

    def __init__(
        self,
        cluster: ClusterMetadata,
        collector: BrokerBatchCollector,
        counters: DeliveryCounters,
        *,
        batch_size: int,
        compression: int,
        ttl: float,
        txn_manager: TransactionManager | None,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        super().__init__(
            cluster, batch_size, compression, ttl, txn_manager=txn_manager, loop=loop, linger_ms=0
        )
        self.cluster = cluster
        self.collector = collector
        self.counters = counters
        self.loop = loop
        self.ttl = ttl
        self.batch_size = batch_size
        self.compression = compression
        self.transactional = txn_manager is not None and txn_manager.transactional_id is not None
        self.idempotent = txn_manager is not None
        self.txn_gate = (
            txn_manager if txn_manager is not None and txn_manager.transactional_id is not None else None
        )
        self.unrouted: dict[TopicPartition, None] = {}
        self.awaiting_add: dict[TopicPartition, None] = {}
        self.wakeup_at: float | None = None
        self.wakeup_timer: asyncio.TimerHandle | None = None
        self.closed = False
        self.fatal: BaseException | None = None
        self.on_sent: Callable[[TopicPartition], None] | None = None  # a partition's batch went into a send

    def wake(self) -> None:
        if not self._waiter_future.done():
            self._waiter_future.set_result(None)

    def append(
        self, tp: TopicPartition, key: bytes | None, value: bytes | None, leader: int | None
    ) -> Delivery:
        """Queue one message; never blocks (a full batch starts the next one)."""
        if self.fatal is not None:  # the more telling error first: a fenced producer says so
            raise copy.copy(self.fatal)
        if self.closed:
            raise ProducerStoppedError("the producer is stopped")
        now = time.monotonic()
        queue = self._batches.get(tp)
        delivery = None
        if queue:
            batch = queue[-1]
            delivery = batch.add(key, value, now)
        if delivery is None:
            batch = Batch(tp, new_builder(self.batch_size, self.compression, self.transactional), self.ttl,
                          self.counters, self.loop, now, self._pending_batches)  # fmt: skip
            if queue is None:
                queue = self._batches[tp] = deque()
            queue.append(batch)
            delivery = batch.add(key, value, now)
            assert delivery is not None  # an empty builder always takes one record
        gate = self.txn_gate
        if gate is not None and tp not in gate.txn_partitions:
            if tp not in self.awaiting_add:
                self.awaiting_add[tp] = None
                gate.maybe_add_partition_to_txn(tp)  # wakes the sender's transactional branch
            return delivery
        if leader is not None and leader >= 0:
            if self.collector.add(leader, tp, batch.last_size):
                self.wake()
        else:
            self._route(tp, batch.last_size, leader, None)
        return delivery

    def _route(self, tp: TopicPartition, nbytes: int, leader: int | None, oldest: float | None) -> None:
        if leader is None or leader < 0:
            self.unrouted[tp] = None
            self.wake()
            return
        if self.collector.add(leader, tp, nbytes, oldest=oldest):
            self.wake()

    def _route_queue(self, tp: TopicPartition) -> None:
        queue = self._batches.get(tp)
        if queue:
            self._route(
                tp, sum(b.nbytes for b in queue), self.cluster.leader_for_partition(tp), queue[0].created
            )

    def admit_added(self) -> None:
        """Partitions that AddPartitionsToTxn has added go to the collector now."""
        if not self.awaiting_add or self.txn_gate is None:
            return
        added = self.txn_gate.txn_partitions
        for tp in [tp for tp in self.awaiting_add if tp in added]:
            del self.awaiting_add[tp]
            self._route_queue(tp)

    def _pop_batch(self, tp: TopicPartition) -> MessageBatch:
        """aiokafka's `_pop_batch` (sequence, retry count, pending set) without its per-batch closure.

        aiokafka leaves the pending set through a done callback, a loop turn per batch; a `Batch`
        leaves it as it resolves.
        """
        queue = self._batches[tp]
        batch = queue.popleft()
        txn = self._txn_manager
        if txn is not None and batch.retry_count == 0:
            assert txn.has_pid(), "the sender waits for the producer id before it drains"
            count = batch.record_count
            batch.set_producer_state(txn.producer_id, txn.producer_epoch, txn.sequence_number(tp))
            txn.increment_sequence_number(tp, count)
        batch.drain_ready()
        if not queue:
            del self._batches[tp]
        self._pending_batches.add(batch)
        return batch

    def reenqueue(self, batch: MessageBatch) -> None:
        """A retriable failure: the batch goes back to the front and its partition back to the collector."""
        super().reenqueue(batch)
        self.counters.retries += 1
        tp = batch.tp
        self._route(tp, batch.nbytes, self.cluster.leader_for_partition(tp), batch.created)

    def route_unrouted(self) -> bool:
        """Give partitions that had no leader to their leader now; fail expired ones. True if some remain."""
        if not self.unrouted:
            return False
        pending = list(self.unrouted)
        self.unrouted.clear()
        for tp in pending:
            queue = self._batches.get(tp)
            if not queue:
                continue
            leader = self.cluster.leader_for_partition(tp)
            if leader is not None and leader >= 0:
                self._route(tp, sum(b.nbytes for b in queue), leader, queue[0].created)
            elif not self.idempotent and queue[0].expired():
                while queue and queue[0].expired():
                    batch = self._pop_batch(tp)
                    batch.failure(LeaderNotAvailableError())
                    queue = self._batches.get(tp)
                if queue:
                    self.unrouted[tp] = None
            else:
                self.unrouted[tp] = None
        return bool(self.unrouted)

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
                leader = self.cluster.leader_for_partition(tp)
                if leader != send.broker:
                    moved.append(tp)
                    continue
                batch = self._pop_batch(tp)  # sets the idempotent sequence, moves it to the pending set
                if batch.is_empty():
                    batch.done_noack()
                    continue
                batches[tp] = batch
                if self.on_sent is not None:
                    self.on_sent(tp)
                rest = self._batches.get(tp)
                if rest:  # more than one batch queued: the rest waits for the next send
                    self.collector.add(send.broker, tp, sum(b.nbytes for b in rest), oldest=rest[0].created)
            if batches:
                plans.append((send, batches))
            else:
                self.collector.complete(send)
        for tp in moved:
            self._route_queue(tp)
        self._schedule_wakeup()
        return plans, unknown or bool(self.unrouted)

    def _schedule_wakeup(self) -> None:
        if self._waiter_future.done():
            self._waiter_future = self.loop.create_future()
        deadline = self.collector.next_deadline()
        if self.wakeup_timer is not None and deadline == self.wakeup_at:
            return
        if self.wakeup_timer is not None:
            self.wakeup_timer.cancel()
            self.wakeup_timer = None
        self.wakeup_at = deadline
        if deadline is not None:
            self.wakeup_timer = self.loop.call_later(max(0.0, deadline - time.monotonic()), self._on_timer)

    def _on_timer(self) -> None:
        self.wakeup_timer = None
        self.wakeup_at = None
        self.wake()

    # -- whole-producer operations ----------------------------------------------------------------
    def unresolved(self) -> list[asyncio.Future]:
        """Futures of every batch not yet acked or failed: queued, in flight or awaiting a retry."""
        waiters = [b.future for q in self._batches.values() for b in q if not b.future.done()]
        waiters += [b.future for b in self._pending_batches if not b.future.done()]
        return waiters

    def queued_messages(self) -> int:
        return sum(b.record_count for q in self._batches.values() for b in q if not b.future.done())

    def fail_all(self, exception: BaseException) -> None:
        """A fatal error: every unresolved message fails with it and later appends raise it."""
        self.fatal = exception
        self._exception = exception
        self.fail_unresolved(exception)  # over a copy: a failing batch leaves the pending set

    async def flush_for_commit(self) -> None:
        """aiokafka's commit-time flush: close what is queued (the transaction's scope), wait for it all."""
        waiters = []
        for queue in self._batches.values():
            for batch in queue:
                batch.close()
                waiters.append(batch.future)
        self.wake()
        waiters += [batch.future for batch in self._pending_batches]
        if waiters:
            await asyncio.wait(waiters)

    def fail_unresolved(self, exception: BaseException) -> None:
        """Every unresolved message fails with `exception`, exactly once (stop() gave up, or the sender died)."""
        for batch in [b for q in self._batches.values() for b in q] + list(self._pending_batches):
            batch.failure(exception)

    def drop_unsent(self, exception: BaseException) -> int:
        """An abort: batches never sent fail with `exception` and leave the collector; returns messages dropped.

        Batches already sent once and awaiting a retry stay: their records may be on the broker,
        and the retry keeps the idempotent sequence intact; EndTxn(abort) hides them either way.
        """
        dropped = 0
        for tp in list(self._batches):
            queue = self._batches[tp]
            kept = deque(b for b in queue if b.retry_count > 0)
            for batch in queue:
                if batch.retry_count == 0:
                    dropped += batch.record_count
                    batch.failure(exception)
            self.collector.discard_partition(tp)
            if kept:
                self._batches[tp] = kept
                self._route_queue(tp)
            else:
                del self._batches[tp]
        self.awaiting_add.clear()
        self.unrouted = {tp: None for tp in self.unrouted if self._batches.get(tp)}
        self.wake()
        return dropped


class BatchingSender(Sender):
    """aiokafka's Sender with our loop: the collector plans, up to N requests per broker in flight."""

    def __init__(
        self,
        client: AIOKafkaClient,
        *,
        acks: int,
        txn_manager: TransactionManager | None,
        accumulator: Accumulator,
        retry_backoff_ms: int,
        request_timeout_ms: int,
        counters: DeliveryCounters,
    ) -> None:
        super().__init__(
            client,
            acks=acks,
            txn_manager=txn_manager,
            message_accumulator=accumulator,
            retry_backoff_ms=retry_backoff_ms,
            request_timeout_ms=request_timeout_ms,
        )
        self.accumulator = accumulator
        self.txn = txn_manager
        self.counters = counters
        self.backoff_s = retry_backoff_ms / 1000.0
        self.transactional = txn_manager is not None and txn_manager.transactional_id is not None

    async def _sender_routine(self) -> None:
        accumulator = self.accumulator
        txn = self.txn
        tasks: set[asyncio.Future] = set()
        txn_task: asyncio.Future | None = None
        try:
            while True:
                await self._maybe_wait_for_pid()
                waiters: set[asyncio.Future] = set()
                if self.transactional:
                    assert txn is not None
                    # One transactional request at a time (AddPartitionsToTxn first, then offsets, then
                    # EndTxn), on the coordinator's connection, as aiokafka does it.
                    if txn_task is None or txn_task.done():
                        txn_task = self._maybe_do_transactional_request()
                        if txn_task is not None:
                            tasks.add(txn_task)
                        else:
                            waiters.add(txn.make_task_waiter())
                    accumulator.admit_added()
                plans, unknown_leaders = accumulator.drain_due()
                for send, batches in plans:
                    tasks.add(create_task(self.send_planned(send, batches)))
                waiters |= tasks
                if unknown_leaders:
                    waiters.add(self.client.force_metadata_update())
                    waiters.add(create_task(asyncio.sleep(self.backoff_s)))
                waiters.add(accumulator.waiter())
                done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task in tasks:
                        task.result()  # a fatal error (fenced, sequence gap) ends the sender here
                tasks -= done
        except asyncio.CancelledError:
            # Stopping: whatever is still in flight is abandoned; stop() fails its futures.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        except FATAL_ERRORS:
            for task in tasks:
                task.cancel()
            raise
        except Exception as exc:
            log.exception("Unexpected error in the batching sender")
            raise KafkaError("Unexpected error during batch delivery") from exc

    def _fail_all(self, task: asyncio.Task) -> None:
        """The sender died: fail every pending message and the transaction with its error."""
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        self.accumulator.fail_all(exc)
        txn = self.txn
        if txn is not None and txn.transactional_id is not None:
            if txn.wait_for_transaction_end() is None:  # no transaction begun yet: nothing to fail
                txn.state = TransactionState.FATAL_ERROR
            else:
                txn.fatal_error(exc)

    async def send_planned(self, send: Send, batches: dict[TopicPartition, MessageBatch]) -> None:
        counters = self.counters
        counters.requests += 1
        counters.request_msgs += sum([len(b.sent_at) for b in batches.values()])
        handler = ProduceHandler(self, batches)
        started = time.monotonic()
        fatal: BaseException | None = None
        try:
            await handler.do(send.broker)
        finally:
            rtt_ms = (time.monotonic() - started) * 1000.0
            # One pass, no call per batch: with one message per partition a request carries thousands.
            ok = True
            for batch in batches.values():
                future = batch.future
                if not future.done() or future.cancelled():
                    ok = False
                    continue
                exc = future.exception()
                if exc is not None:
                    ok = False
                    if fatal is None and isinstance(exc, FATAL_ERRORS):
                        fatal = exc
            self.accumulator.collector.complete(send, rtt_ms=rtt_ms, ok=ok)
        if fatal is not None:
            raise copy.copy(fatal)
