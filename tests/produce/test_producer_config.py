"""ProducerConfig: one parser and one defaults table for every producer key; defaults checked against
librdkafka's own (C34), read from the library confluent-kafka bundles."""

from __future__ import annotations

import ctypes

import pytest

from rebalancer.produce import BatchingProducer, ProducerConfig
from rebalancer.produce.config import PRODUCER_DEFAULTS, producer_keys
from rebalancer.testing.mock_cluster import librdkafka_path

# our key -> librdkafka's (global or topic) key where the names differ
LIBRDKAFKA_NAMES = {"delivery.timeout.ms": "message.timeout.ms", "acks": "request.required.acks"}
# Differ on purpose; docs/produce.md's C34 table gives each reason.
DIFFERENT = {"max.in.flight.requests.per.connection", "client.id"}


def librdkafka_defaults() -> dict[str, str]:
    lib = ctypes.CDLL(librdkafka_path())
    out: dict[str, str] = {}
    for kind in ("conf", "topic_conf"):
        new = getattr(lib, f"rd_kafka_{kind}_new")
        dump = getattr(lib, f"rd_kafka_{kind}_dump")
        destroy = getattr(lib, f"rd_kafka_{kind}_destroy")
        new.restype = ctypes.c_void_p
        dump.restype = ctypes.POINTER(ctypes.c_char_p)
        dump.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
        destroy.argtypes = [ctypes.c_void_p]
        lib.rd_kafka_conf_dump_free.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t]
        conf, count = new(), ctypes.c_size_t()
        pairs = dump(conf, ctypes.byref(count))
        out.update({pairs[i].decode(): pairs[i + 1].decode() for i in range(0, count.value, 2)})
        lib.rd_kafka_conf_dump_free(pairs, count)
        destroy(conf)
    return out


def test_defaults_are_librdkafkas_except_the_documented_ones():
    theirs = librdkafka_defaults()
    cfg = ProducerConfig.from_dict({"bootstrap.servers": "x:1"})
    ours = {
        "delivery.timeout.ms": cfg.delivery_timeout_ms,
        "metadata.max.age.ms": cfg.metadata_max_age_ms,
        "queue.buffering.max.messages": cfg.max_outstanding,
        "message.max.bytes": cfg.collector.max_request_size,
        "sticky.partitioning.linger.ms": cfg.sticky_linger_ms,
        "batch.size": cfg.batch_size,
        "request.timeout.ms": cfg.request_timeout_ms,
        "retry.backoff.ms": cfg.retry_backoff_ms,
        "transaction.timeout.ms": cfg.transaction_timeout_ms,
        "acks": cfg.acks,
        "enable.idempotence": str(cfg.idempotent).lower(),
        "partitioner": cfg.partitioner,
        "max.in.flight.requests.per.connection": cfg.collector.max_in_flight,
        "client.id": cfg.client_id,
    }
    same = {k: str(v if not isinstance(v, float) else int(v)) for k, v in ours.items() if k not in DIFFERENT}
    assert same == {k: theirs[LIBRDKAFKA_NAMES.get(k, k)] for k in same}
    assert {k: str(ours[k]) for k in DIFFERENT} != {k: theirs[k] for k in DIFFERENT}  # still documented as different
    assert cfg.collector.broker_linger_ms == 5.0  # librdkafka's linger.ms default, now per broker


def test_every_key_is_parsed_once_by_producer_config():
    cfg = ProducerConfig.from_dict(
        {"bootstrap.servers": ["a:1", "b:2"], "transactional.id": "t", "compression.type": "GZIP",
         "partitioner": "murmur2_random", "max.request.size": 5000, "broker.batch.max.partitions": 0}
    )  # fmt: skip
    assert cfg.bootstrap_servers == "a:1,b:2" and cfg.idempotent and cfg.acks == -1 and cfg.compression == 1
    assert (cfg.collector.max_request_size, cfg.collector.request_size_key, cfg.batch_size) == (
        5000, "max.request.size", 5000,
    )  # fmt: skip
    assert cfg.collector.batch_max_partitions == -1
    producer = BatchingProducer(cfg)
    assert producer.config is cfg and producer.collector_config is cfg.collector
    assert set(producer_keys()) >= set(PRODUCER_DEFAULTS) | {"linger.ms", "max.request.size", "sasl.password"}


def test_repr_never_shows_a_secret():
    cfg = ProducerConfig.from_dict(
        {"bootstrap.servers": "x:1", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
         "sasl.username": "u", "sasl.password": "hunter2-secret"}
    )  # fmt: skip
    assert "hunter2" not in repr(cfg) and "sasl_mechanism='PLAIN'" in repr(cfg)
    assert "sasl_username" not in repr(cfg)  # librdkafka flags the user name sensitive too


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"partitioner": "murmur3"}, r"^partitioner must be one of consistent_random, consistent, murmur2_random, "
                                     r"murmur2, random; got 'murmur3'$"),
        ({"queue.buffering.max.messages": 0}, r"^queue.buffering.max.messages must be >= 1, got 0$"),
        ({"sasl.password": "pw"}, r"^sasl.password need security.protocol SASL_PLAINTEXT or SASL_SSL, got PLAINTEXT$"),
        ({"transaction.timeout.ms": "soon"}, r"^transaction.timeout.ms must be an integer, got 'soon'$"),
    ],
)  # fmt: skip
def test_bad_values_name_the_key_and_value(config, message):
    with pytest.raises(ValueError, match=message):
        ProducerConfig.from_dict({"bootstrap.servers": "x:1", **config})
