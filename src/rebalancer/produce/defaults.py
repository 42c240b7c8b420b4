"""The one defaults table of every producer key, and the collector's keys among them.

A leaf of the package: `ProducerConfig` and `CollectorConfig` (the collector's module, which the
aiokafka adapter imports) both read it, so it can sit in neither of their modules.
"""

from __future__ import annotations

__all__ = ["COLLECTOR_DEFAULTS", "COLLECTOR_KEYS", "PRODUCER_DEFAULTS"]

# The one defaults table of every producer key (security keys: security.SecuritySettings, which
# config.ProducerConfig calls). librdkafka's keys with librdkafka's defaults, except where
# docs/produce.md's "Defaults against librdkafka" table gives the reason for another value.
PRODUCER_DEFAULTS: dict[str, object] = {
    "bootstrap.servers": None,  # required
    "client.id": "rebalancer-producer",
    "acks": "all",
    "enable.idempotence": False,
    "transactional.id": None,
    "transaction.timeout.ms": 60_000,
    "request.timeout.ms": 30_000,
    "retry.backoff.ms": 100,
    "delivery.timeout.ms": 300_000,
    "batch.size": 1_000_000,
    "compression.type": None,
    "metadata.max.age.ms": 900_000,
    "queue.buffering.max.messages": 100_000,
    "partitioner": "consistent_random",
    "sticky.partitioning.linger.ms": 10,
    "broker.linger.ms": 5,
    "broker.batch.max.partitions": -1,
    "broker.batch.max.bytes": -1,
    "message.max.bytes": 1_000_000,
    "max.in.flight.requests.per.connection": 5,
    "broker.adaptive": False,
}
_COLLECTOR_NAMES = (
    "broker.linger.ms",
    "broker.batch.max.partitions",
    "broker.batch.max.bytes",
    "message.max.bytes",
    "max.in.flight.requests.per.connection",
    "broker.adaptive",
)
COLLECTOR_DEFAULTS: dict[str, object] = {key: PRODUCER_DEFAULTS[key] for key in _COLLECTOR_NAMES}  # a view
# `linger.ms` is accepted (deprecated) but has no default: its presence changes behaviour.
# `max.request.size` is the Java client's name for librdkafka's `message.max.bytes`: accepted as an alias.
COLLECTOR_KEYS: tuple[str, ...] = (*COLLECTOR_DEFAULTS, "linger.ms", "max.request.size")
