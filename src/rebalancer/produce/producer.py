"""BatchingProducer: an asyncio Kafka producer whose sends are timed per broker, not per partition.

Design (docs/produce.md has the long form). aiokafka does the protocol work: connections and
metadata, record batches, one ProduceRequest per broker carrying many partitions, retries,
idempotent sequences and transactions. What it decides badly for many partitions is *when* a
partition is ready (a per-partition `linger_ms`) and how many requests may be in flight (one per
broker). The `BrokerBatchCollector` makes those two decisions here; `aiokafka_adapter` is the one
module that plugs it into aiokafka's internals. This module uses aiokafka's public names only.

All state lives on the event loop's thread; nothing here is shared with other threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from collections.abc import AsyncIterator, Hashable, Mapping

from aiokafka import AIOKafkaClient
from aiokafka.errors import KafkaError, KafkaTimeoutError
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from rebalancer.produce.aiokafka_adapter import (
    Accumulator,
    BatchingSender,
    Transactions,
    record_size,
    validate_offsets,
    wait_on_metadata,
)
from rebalancer.produce.collector import BrokerBatchCollector
from rebalancer.produce.collector_config import CollectorConfig
from rebalancer.produce.config import ProducerConfig, producer_keys
from rebalancer.produce.defaults import PRODUCER_DEFAULTS
from rebalancer.produce.delivery import Delivery
from rebalancer.produce.errors import ProducerStoppedError, TransactionAbortedError
from rebalancer.produce.partitioner import Partitioner
from rebalancer.produce.stats import DeliveryCounters

__all__ = [
    "PRODUCER_DEFAULTS",
    "PRODUCER_KEYS",
    "BatchingProducer",
    "ProducerStoppedError",
    "TransactionAbortedError",
]

log = logging.getLogger(__name__)

_BYTES_TYPES = (bytes, bytearray, memoryview)
_YIELD_MASK = 1023


def _transaction_offsets(offsets: Mapping[TopicPartition, object]) -> dict[TopicPartition, OffsetAndMetadata]:
    """aiokafka's form of `offsets`; ValueError naming the partition for an offset that is not an int >= 0.

    aiokafka checks the structure only: it would commit a negative offset as is.
    """
    malformed = f"offsets must map TopicPartition to an offset >= 0 (or OffsetAndMetadata), got {offsets!r}"
    try:
        items = dict(offsets)
    except (TypeError, ValueError):
        raise ValueError(malformed) from None
    for tp, value in items.items():
        if not isinstance(tp, TopicPartition):
            continue  # left to aiokafka's structure check below
        offset = value[0] if isinstance(value, tuple) and len(value) == 2 else value  # OffsetAndMetadata is a tuple
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(
                f"offsets: topic {tp.topic!r} partition {tp.partition}: offset must be an int >= 0, got {offset!r}"
            )
    try:
        return validate_offsets(items)
    except (ValueError, TypeError, AssertionError):
        raise ValueError(malformed) from None


class _TopicRoute:
    """Per-topic partition objects and leaders, cached until the next metadata update."""

    __slots__ = ("leaders", "tps")

    def __init__(self, tps: list[TopicPartition], leaders: list[int | None]) -> None:
        self.tps = tps
        self.leaders = leaders


PRODUCER_KEYS: tuple[str, ...] = producer_keys()


class BatchingProducer:
    """Asyncio Kafka producer with broker-level linger. Config keys: `PRODUCER_KEYS`.

    >>> p = BatchingProducer({"bootstrap.servers": bs, "broker.linger.ms": 500})
    >>> await p.start(); fut = await p.send("t", b"v"); partition, offset = await fut
    """

    def __init__(self, config: Mapping[str, object] | ProducerConfig) -> None:
        cfg = config if isinstance(config, ProducerConfig) else ProducerConfig.from_dict(config, stacklevel=4)
        self.config = cfg
        self._bootstrap = cfg.bootstrap_servers
        self._client_id = cfg.client_id
        self._transactional_id: str | None = cfg.transactional_id
        self._idempotent = cfg.idempotent
        self._max_outstanding = cfg.max_outstanding
        self.security = cfg.security
        self.collector_config: CollectorConfig = cfg.collector
        self._max_message_size = cfg.collector.max_request_size
        self._size_key = cfg.collector.request_size_key
        self._counters = DeliveryCounters()
        self._produced = 0
        self._state = "new"  # new -> started -> stopping -> stopped
        self._topics: dict[str, _TopicRoute] = {}
        # Records this much smaller than message.max.bytes cannot exceed it; skip the exact estimate.
        self._size_guard = self._max_message_size - 4096
        self._partitioner = Partitioner(cfg.partitioner, cfg.sticky_linger_ms)
        self._client: AIOKafkaClient | None = None
        self._collector: BrokerBatchCollector | None = None
        self._accumulator: Accumulator | None = None
        self._sender: BatchingSender | None = None
        self._txn: Transactions | None = None
        self._flushers = 0
        self._backpressure_waits = 0
        self._aborted_messages = 0
        self._stop_failed = 0

    def __repr__(self) -> str:
        txn = f" transactional.id={self._transactional_id!r}" if self._transactional_id else ""
        return (
            f"<BatchingProducer {self._state} bootstrap.servers={self._bootstrap!r} client.id={self._client_id!r} "
            f"{self.security.describe()}{txn}>"
        )

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect; with `transactional.id`, also InitProducerId, which fences older instances of the id."""
        if self._state != "new":
            raise RuntimeError(f"start() on a producer that is {self._state}")
        loop = asyncio.get_running_loop()
        cfg = self.config
        self._client = AIOKafkaClient(
            bootstrap_servers=cfg.bootstrap_servers,
            client_id=cfg.client_id,
            request_timeout_ms=cfg.request_timeout_ms,
            retry_backoff_ms=cfg.retry_backoff_ms,
            metadata_max_age_ms=cfg.metadata_max_age_ms,
            **self.security.client_kwargs(),
        )
        self._client.cluster.add_listener(self._on_metadata)
        if self._idempotent:
            self._txn = Transactions(cfg.transactional_id, cfg.transaction_timeout_ms)
        txn_manager = self._txn.manager if self._txn is not None else None
        self._collector = BrokerBatchCollector(self.collector_config, clock=time.monotonic)
        self._accumulator = Accumulator(
            self._client.cluster,
            self._collector,
            self._counters,
            batch_size=cfg.batch_size,
            compression=cfg.compression,
            ttl=cfg.delivery_timeout_ms / 1000.0,
            txn_manager=txn_manager,
            loop=loop,
        )
        self._accumulator.on_sent = self._partitioner.batch_sent
        self._sender = BatchingSender(
            self._client,
            acks=cfg.acks,
            txn_manager=txn_manager,
            accumulator=self._accumulator,
            retry_backoff_ms=cfg.retry_backoff_ms,
            request_timeout_ms=cfg.request_timeout_ms,
            counters=self._counters,
        )
        try:
            await self._client.bootstrap()
            await self._sender.start()
        except BaseException:
            self._state = "stopped"
            await self._client.close()
            raise
        self._state = "started"

    @contextlib.asynccontextmanager
    async def _flushing(self) -> AsyncIterator[None]:
        """While inside, every broker sends what it has at once (reason `flush`)."""
        collector = self._collector
        assert collector is not None
        self._flushers += 1
        collector.set_flushing(True)
        assert self._accumulator is not None
        self._accumulator.wake()
        try:
            yield
        finally:
            self._flushers -= 1
            if self._flushers == 0:
                collector.set_flushing(False)

    def _sender_error(self) -> BaseException | None:
        """The error the sender died of (None while it runs)."""
        task = self._sender.sender_task if self._sender is not None else None
        if task is None or not task.done():
            return None
        if task.cancelled():
            return KafkaError("the producer's sender is not running")
        return task.exception() or KafkaError("the producer's sender is not running")

    async def flush(self) -> None:
        """Send everything queued now (reason `flush`) and wait until each message is acked or failed."""
        if self._state == "new":
            return
        accumulator = self._accumulator
        assert accumulator is not None and self._sender is not None
        async with self._flushing():
            while True:
                accumulator.wake()
                waiters = accumulator.unresolved()
                if not waiters:
                    break
                sender_task = self._sender.sender_task
                if sender_task is None or sender_task.done():
                    # The sender is gone; nothing would resolve the rest, so fail them with its error.
                    accumulator.fail_unresolved(
                        self._sender_error() or KafkaError("the sender is not running")
                    )
                    continue
                all_done = asyncio.ensure_future(asyncio.wait(waiters))
                try:
                    await asyncio.wait([all_done, sender_task], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not all_done.done():
                        all_done.cancel()  # cancels the wait only, never the delivery futures
                # New batches may have been queued meanwhile; go around until none is pending.

    async def stop(self, timeout: float | None = None) -> None:
        """Flush, then close the connections; later `send` calls raise ProducerStoppedError.

        With `timeout` (seconds), messages still unresolved at the deadline fail with
        KafkaTimeoutError (an outage with idempotence on would otherwise retry forever). However
        `stop()` ends, a cancellation included, every message's future is resolved exactly once:
        what is left fails with ProducerStoppedError.
        """
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0
        ):
            raise ValueError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
        if self._state in ("stopping", "stopped"):
            return
        if self._state == "new":
            self._state = "stopped"
            return
        self._state = "stopping"
        leftover: BaseException = ProducerStoppedError("stop() ended before this message was delivered")
        try:
            if timeout is None:
                await self.flush()
            else:
                try:
                    await asyncio.wait_for(self.flush(), timeout)
                except TimeoutError:
                    leftover = KafkaTimeoutError(
                        f"stop(timeout={timeout:g}) expired before this message was delivered"
                    )
        finally:
            self._shutdown(leftover)
            assert self._sender is not None and self._client is not None
            # Shielded: a second cancellation must not leave the connections open.
            await asyncio.shield(self._close_connections())

    def _shutdown(self, leftover: BaseException) -> None:
        """Synchronous, so no cancellation can cut it short: stop the sender, resolve every future."""
        assert self._accumulator is not None and self._sender is not None
        self._state = "stopped"
        self._accumulator.closed = True
        task = self._sender.sender_task
        if task is not None and not task.done():
            task.cancel()
        before = self._counters.failed
        self._accumulator.fail_unresolved(leftover)
        self._stop_failed += self._counters.failed - before
        if self._stop_failed:
            log.warning("stop() failed %d undelivered message(s): %s", self._stop_failed, leftover)

    async def _close_connections(self) -> None:
        assert self._sender is not None and self._client is not None
        task = self._sender.sender_task
        try:
            if task is not None:
                task.cancel()
                await asyncio.wait([task])  # never raises the task's own cancellation into stop()
        finally:
            await self._client.close()

    async def __aenter__(self) -> BatchingProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- transactions ------------------------------------------------------------------------------
    def _transactions(self) -> Transactions:
        if self._transactional_id is None:
            raise RuntimeError("transactions need transactional.id in the producer's config")
        if self._state != "started":
            raise ProducerStoppedError(f"transaction call on a producer that is {self._state}")
        error = self._fatal_error()
        if error is not None:
            raise copy.copy(error)
        assert self._txn is not None
        return self._txn

    def _fatal_error(self) -> BaseException | None:
        if self._accumulator is not None and self._accumulator.fatal is not None:
            return self._accumulator.fatal
        return self._sender_error() if self._state == "started" else None

    async def begin_transaction(self) -> None:
        txn = self._transactions()
        if not txn.is_ready():
            raise RuntimeError(f"begin_transaction() while a transaction is {txn.state_name}")
        await txn.begin()

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, object], group_id: str
    ) -> None:
        """Commit a consumer group's offsets with this transaction (consume-transform-produce)."""
        txn = self._transactions()
        if not txn.in_transaction():
            raise RuntimeError(
                "send_offsets_to_transaction() outside a transaction; call begin_transaction() first"
            )
        if not group_id or not isinstance(group_id, str):
            raise ValueError(f"group_id must be a non-empty string, got {group_id!r}")
        formatted = _transaction_offsets(offsets)
        await txn.add_offsets(formatted, group_id)

    async def commit_transaction(self) -> None:
        """Flush this transaction's partitions, then EndTxn(commit); committed records become visible."""
        txn = self._transactions()
        if not txn.in_transaction():
            raise RuntimeError(f"commit_transaction() while the transaction is {txn.state_name}")
        log.debug("committing transaction %s", self._transactional_id)
        async with self._flushing():
            await txn.commit()  # raises the error at once if the transaction can only be aborted

    async def abort_transaction(self) -> None:
        """Drop what is still unsent (its futures fail with TransactionAbortedError), then EndTxn(abort).

        Records already sent stay on the brokers but are never visible to read_committed consumers.
        """
        txn = self._transactions()
        if not txn.can_abort():
            raise RuntimeError(f"abort_transaction() while the transaction is {txn.state_name}")
        assert self._accumulator is not None
        dropped = self._accumulator.drop_unsent(
            TransactionAbortedError(
                f"transaction of {self._transactional_id!r} aborted before this message was sent"
            )
        )
        self._aborted_messages += dropped
        log.debug("aborting transaction %s: %d unsent message(s) dropped", self._transactional_id, dropped)
        async with self._flushing():  # in-flight and retried batches settle before EndTxn
            await txn.abort()

    # -- sending -----------------------------------------------------------------------------------
    def _on_metadata(self, _cluster: object) -> None:
        self._topics.clear()  # partition counts and leaders are re-read on the next send

    async def _topic(self, topic: str) -> _TopicRoute:
        route = self._topics.get(topic)
        if route is None:
            assert self._client is not None
            await wait_on_metadata(self._client, topic)
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
    ) -> Delivery:
        """Queue one message; returns its `Delivery`, a future of (partition, offset) or of its error."""
        if self._state != "started":
            if self._state == "new":
                raise RuntimeError("send() before start()")
            raise ProducerStoppedError(f"send() on a producer that is {self._state}")
        txn = self._txn
        if txn is not None and self._transactional_id is not None and not txn.in_transaction():
            error = self._fatal_error()
            if error is not None:
                raise copy.copy(error)
            raise RuntimeError(
                f"send() outside a transaction on a transactional producer (transaction is {txn.state_name}); "
                "call begin_transaction() first"
            )
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
            exact = record_size(key, value)
            if exact > self._max_message_size:
                raise ValueError(f"message of {exact} bytes exceeds {self._size_key}={self._max_message_size}")
        route = self._topics.get(topic)
        if route is None:
            route = await self._topic(topic)
            if self._state != "started":
                raise ProducerStoppedError(f"send() on a producer that is {self._state}")
        count = len(route.tps)
        if partition is None:
            partition = self._partitioner(topic, None if key is None else bytes(key), count, route.leaders)
        elif type(partition) is not int or not 0 <= partition < count:
            raise ValueError(
                f"partition must be one of {topic!r}'s partitions 0..{count - 1}, got {partition!r}"
            )
        counters = self._counters
        if self._produced - counters.acked - counters.failed >= self._max_outstanding:
            await self._wait_for_room()
        accumulator = self._accumulator
        assert accumulator is not None
        delivery = accumulator.append(route.tps[partition], key, value, route.leaders[partition])
        self._produced += 1
        if self._produced & _YIELD_MASK == 0:
            # send() never blocks, so a caller looping on it would starve the sender and the linger
            # timers; give the loop one turn every 1024 messages.
            await asyncio.sleep(0)
        return delivery

    async def _wait_for_room(self) -> None:
        """Backpressure: queue.buffering.max.messages are unresolved; wait until one resolves."""
        counters = self._counters
        accumulator = self._accumulator
        assert accumulator is not None
        self._backpressure_waits += 1
        # Room comes only from sends, so every broker sends at once (reason `flush`) meanwhile.
        async with self._flushing():
            while self._produced - counters.acked - counters.failed >= self._max_outstanding:
                if self._state != "started":
                    raise ProducerStoppedError(f"send() on a producer that is {self._state}")
                error = self._fatal_error()
                if error is not None:
                    raise copy.copy(error)
                waiters = accumulator.unresolved()
                if not waiters:
                    break  # awaiting AddPartitionsToTxn: nothing to wait for but the sender
                accumulator.wake()
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)

    # -- introspection -----------------------------------------------------------------------------
    def stats(self) -> dict[str, object]:
        """What the producer did since `start()`: counts are messages unless named otherwise, and
        times are milliseconds. Keys:

        - ``produced``: messages `send()` accepted; ``acked`` + ``failed`` equals it once every future
          resolved, and ``queued`` counts those not yet sent;
        - ``acked``: messages a broker acknowledged; ``failed``: messages whose future failed, and
          ``errors``: those failures by exception class name;
        - ``sends``: ProduceRequests planned, one per broker per linger window (or more when one
          request cannot hold them: ``split_sends``); ``requests``: ProduceRequests sent, retries
          included; ``retries``: record batches sent again after a retriable error;
        - ``partitions_per_send_avg``, ``partitions_per_send_max``: partitions one send carried;
          ``msgs_per_request``: mean messages per ProduceRequest;
        - ``wait_ms_avg``, ``wait_ms_p99``: linger, from a broker window's first ready partition to
          its send; ``effective_linger_ms``: per broker, the linger in use (adaptive mode moves it);
        - ``triggers_by_reason``: sends per reason (`flush`, `max_partitions`, `max_bytes`,
          `broker_linger`, and `partition_linger` in legacy mode);
        - ``in_flight``: ProduceRequests awaiting their response; ``window_waits`` and
          ``window_wait_ms_total``: sends held because `max.in.flight` requests were out, and for
          how long in all;
        - ``latency_ms_p50``, ``latency_ms_p95``, ``latency_ms_p99``: `send()` to acknowledgement,
          over acked messages;
        - ``backpressure_waits``: `send()` calls that waited for room (`queue.buffering.max.messages`);
        - ``aborted``: messages dropped unsent by `abort_transaction()`; ``failed_at_stop``: messages
          `stop()` failed because they could not be delivered in time;
        - ``transaction_state``: the transaction's state with `transactional.id`, else None;
        - ``brokers``: per broker, the collector's `batch_collector_*` metrics.
        """
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
            "brokers": collector["brokers"],
            "latency_ms_p50": counters.latency.percentile(50),
            "latency_ms_p95": counters.latency.percentile(95),
            "latency_ms_p99": counters.latency.percentile(99),
            "retries": counters.retries,
            "acked": counters.acked,
            "failed": counters.failed,
            "produced": self._produced,
            "queued": self._accumulator.queued_messages() if self._accumulator is not None else 0,
            "backpressure_waits": self._backpressure_waits,
            "aborted": self._aborted_messages,
            "failed_at_stop": self._stop_failed,
            "transaction_state": self._txn.state_name
            if self._transactional_id and self._txn
            else None,
            "errors": dict(counters.errors),
        }

    def partition_leader(self, topic: str, partition: int) -> Hashable | None:
        """The broker id currently leading `topic`/`partition` (None if unknown)."""
        if self._client is None:
            return None
        return self._client.cluster.leader_for_partition(TopicPartition(topic, partition))
