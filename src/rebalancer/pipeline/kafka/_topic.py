"""The driver's view of the topic (partitions, watermarks) and a consumer group's offsets."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from rebalancer.pipeline.kafka._options import KafkaOptions

if TYPE_CHECKING:
    from confluent_kafka import Consumer

# The logger of the module these lines came from, so logging set up for it keeps working.
log = logging.getLogger("rebalancer.pipeline.kafka.source")


# A partition whose leader crashed: librdkafka fails the offsets query it sent there (_DESTROY_BROKER
# once the controller has fenced the broker and the metadata drops it, _TRANSPORT, _TIMED_OUT), and
# the next query goes to the new leader. A stream must not die of one broker's crash (a real
# cluster fences it after broker.session.timeout.ms, 9 s by default), so the query is tried this many
# times, each waiting at most metadataTimeoutMs. A cluster that cannot be reached at all still fails
# within metadataTimeoutMs: `partitions()` asks the metadata first.
FAILOVER_ATTEMPTS = 3
FAILOVER_BACKOFF_S = 0.5


def _failover(error: Any) -> bool:
    """An offsets query error that a leader's crash causes and a new leader ends."""
    from confluent_kafka import KafkaError

    return bool(error.retriable()) or error.code() in (
        KafkaError._DESTROY_BROKER,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
    )


class TopicView:
    """Partition count and watermarks, through one metadata consumer kept by the planning side.

    Each call waits at most metadataTimeoutMs, so a run against brokers it cannot reach fails at
    planning, before any task, naming the servers and librdkafka's own reason (its error callback:
    "Connection refused", a failed SASL handshake), which the call's own error ("Local: Broker
    transport failure") leaves out."""

    def __init__(self, options: KafkaOptions) -> None:
        self.options = options
        self._consumer: Consumer | None = None
        self._errors: list[Any] = []
        self.cluster_id: str | None = None  # the cluster's id, from the last metadata answer

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = self.options.consumer("planner", error_cb=self._errors.append)
        return self._consumer

    @property
    def timeout_s(self) -> float:
        return self.options.metadata_timeout_ms / 1000

    def unreachable(self, error: Any) -> str:
        """One line: the servers, the wait, and the most telling error librdkafka reported."""
        from confluent_kafka import KafkaError

        if self._consumer is not None:
            self._consumer.poll(0)  # serves the error callbacks queued while the call waited
        reasons = [e for e in self._errors if e.code() != KafkaError._ALL_BROKERS_DOWN] or self._errors
        reason = reasons[-1].str() if reasons else error.str()
        return (
            f"cannot reach Kafka at {self.options.bootstrap_servers} within "
            f"{self.timeout_s:g} s (metadataTimeoutMs, --kafka-timeout): {reason}"
        )

    def partitions(self) -> list[int]:
        from confluent_kafka import KafkaException

        topic = self.options.topic
        try:
            metadata = self._client().list_topics(topic, timeout=self.timeout_s)
        except KafkaException as exc:
            raise RuntimeError(self.unreachable(exc.args[0])) from None
        self.cluster_id = metadata.cluster_id
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            why = f" ({found.error.str()})" if found is not None and found.error is not None else ""
            raise ValueError(f"topic {topic!r} does not exist on {self.options.bootstrap_servers}{why}")
        return sorted(found.partitions)

    def watermarks(self, partitions: Sequence[int] | None = None) -> dict[int, tuple[int, int]]:
        """{partition: (earliest, latest)}; latest is the last stable offset (read_committed)."""
        from confluent_kafka import KafkaException, TopicPartition

        topic = self.options.topic
        result = {}
        for partition in self.partitions() if partitions is None else partitions:
            for attempt in range(1, FAILOVER_ATTEMPTS + 1):
                try:
                    low, high = self._client().get_watermark_offsets(
                        TopicPartition(topic, partition), timeout=self.timeout_s, cached=False
                    )
                    break
                except KafkaException as exc:
                    error = exc.args[0]
                    if attempt == FAILOVER_ATTEMPTS or not _failover(error):
                        raise RuntimeError(
                            f"topic {topic!r} partition {partition}: cannot read offsets: {self.unreachable(error)}"
                        ) from None
                    log.warning(
                        "topic %r partition %d: cannot read offsets (%s; its leader may have crashed): "
                        "attempt %d of %d, retrying",
                        topic, partition, error.str(), attempt, FAILOVER_ATTEMPTS,
                    )  # fmt: skip
                    time.sleep(FAILOVER_BACKOFF_S)
            result[partition] = (int(low), int(high))
        return result

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


# -- a consumer group's offsets (batch runs that resume) -------------------------------------------
def _group_client(options: KafkaOptions) -> Consumer:
    """A consumer that names the group but never joins it: committed() and commit() need no membership."""
    assert options.group is not None
    return options.consumer("group", options.group)


def _retrying(options: KafkaOptions, call: Any) -> Any:
    """`call()`, again while it fails with a retriable error (NOT_COORDINATOR, a coordinator still
    loading: a group's first use on a fresh cluster) until metadataTimeoutMs has passed."""
    from confluent_kafka import KafkaError, KafkaException

    coordinator = (
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    )
    deadline = time.monotonic() + options.metadata_timeout_ms / 1000
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = exc.args[0]
            if not (error.retriable() or error.code() in coordinator) or time.monotonic() >= deadline:
                raise
            log.debug("group %r: %s; retrying", options.group, error.str())
            time.sleep(0.2)


def _committed(options: KafkaOptions, consumer: Consumer, partitions: Sequence[int]) -> dict[int, int]:
    """The group's committed offset of each partition; -1 where it has none."""
    from confluent_kafka import TopicPartition

    found = _retrying(
        options,
        partial(
            consumer.committed,
            [TopicPartition(options.topic, p) for p in sorted(partitions)],
            timeout=options.metadata_timeout_ms / 1000,
        ),
    )
    return {tp.partition: tp.offset if tp.offset >= 0 else -1 for tp in found}


def group_offsets(options: KafkaOptions, marks: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    """The next offset to read of each partition: the group's committed one, or the earliest where the
    group has none (a new group, a new partition)."""
    from confluent_kafka import KafkaException

    consumer = _group_client(options)
    try:
        found = _committed(options, consumer, list(marks))
    except KafkaException as exc:
        raise RuntimeError(
            f"group {options.group!r}: cannot read its committed offsets of topic {options.topic!r} on "
            f"{options.bootstrap_servers}: {exc.args[0].str()}"
        ) from None
    finally:
        consumer.close()
    return {p: offset if offset >= 0 else marks[p][0] for p, offset in found.items()}


def commit_group_offsets(options: KafkaOptions, end: Mapping[int, int]) -> dict[int, int]:
    """Move the group to `end` (the next offset to read, per partition), synchronously, never backward:
    the caller does it once its outputs are committed, so a run that fails before reads the same
    records again. Returns the offsets it committed.

    Kafka's commit is not conditional, so each partition's committed offset is read first and only
    those below `end` are committed; one already past it (another run committed further meanwhile)
    stays, with a warning. A run holding the output's claim (`claim.py`) sees no other run of its
    group commit between the read and the commit; only a run into another output could.
    """
    from confluent_kafka import KafkaException, TopicPartition

    if not end:
        return {}
    consumer = _group_client(options)
    try:
        now = _committed(options, consumer, list(end))
        rising = {p: o for p, o in sorted(end.items()) if o > now.get(p, -1)}
        if rising:
            _retrying(
                options,
                partial(
                    consumer.commit,
                    offsets=[TopicPartition(options.topic, p, o) for p, o in rising.items()],
                    asynchronous=False,
                ),
            )
    except KafkaException as exc:
        raise RuntimeError(
            f"group {options.group!r}: cannot commit offsets of topic {options.topic!r} on "
            f"{options.bootstrap_servers}: {exc.args[0].str()}"
        ) from None
    finally:
        consumer.close()
    kept = [p for p in sorted(end) if now.get(p, -1) > end[p]]
    if kept:
        log.warning(
            "group %r: topic %r: another run committed past this run's end meanwhile; offsets never go "
            "backward, so %s",
            options.group,
            options.topic,
            ", ".join(f"partition {p} stays at {now[p]} (this run's end {end[p]})" for p in kept),
        )
    log.info("group %r: committed offsets %s of topic %r", options.group, rising, options.topic)
    return rising


def plan_group_range(options: KafkaOptions) -> tuple[dict[int, int], dict[int, int], str | None]:
    """(start, end, cluster) of a batch read for `options.group`: its committed offsets to the
    latest, and the id of the cluster that holds them (None if the brokers give none). A group's
    batch ids count from its offsets, so the same group and topic on another cluster numbers its
    batches from 0 again: the output keeps the cluster's id to refuse such an append."""
    view = TopicView(options)
    try:
        marks = view.watermarks()
        cluster = view.cluster_id
    finally:
        view.close()
    start = group_offsets(options, marks)
    return start, {p: high for p, (_low, high) in marks.items()}, cluster


def plan_group_read(options: KafkaOptions) -> tuple[dict[int, int], dict[int, int]]:
    """(start, end) of a batch read for `options.group`: its committed offsets to the latest."""
    start, end, _cluster = plan_group_range(options)
    return start, end
