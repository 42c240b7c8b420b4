"""ProducerConfig: one parser and one defaults table for every producer key; defaults checked against
librdkafka's own (C34), read from the library confluent-kafka bundles."""

from __future__ import annotations

import ctypes
import math
import re
import warnings

import pytest

from rebalancer.produce import BatchingProducer, ProducerConfig
from rebalancer.produce.config import NUMBER_RANGES, PRODUCER_DEFAULTS, producer_keys
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
        {"bootstrap.servers": "a:1,b:2", "transactional.id": "t", "compression.type": "GZIP",
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
        ({"queue.buffering.max.messages": 0}, r"^queue.buffering.max.messages must be an integer in 1..2147483647, got 0$"),
        ({"sasl.password": "pw"}, r"^sasl.password needs security.protocol SASL_PLAINTEXT or SASL_SSL, got PLAINTEXT$"),
        ({"transaction.timeout.ms": "soon"}, r"^transaction.timeout.ms must be an integer in 1000..2147483647, got 'soon'$"),
    ],
)  # fmt: skip
def test_bad_values_name_the_key_and_value(config, message):
    with pytest.raises(ValueError, match=message):
        ProducerConfig.from_dict({"bootstrap.servers": "x:1", **config})


SERVERS = "bootstrap.servers must be HOST:PORT[,HOST:PORT...] with ports in 1..65535, got "


@pytest.mark.parametrize(
    ("config", "message"),
    [
        # each was taken: a port no socket has, a list (librdkafka's is one string), an int client.id
        ({"bootstrap.servers": "h:99999"}, SERVERS + "'h:99999' (entry 'h:99999')"),
        ({"bootstrap.servers": "h:0"}, SERVERS + "'h:0' (entry 'h:0')"),
        ({"bootstrap.servers": "a:1, :2"}, SERVERS + "'a:1, :2' (entry ':2')"),
        ({"bootstrap.servers": "a:1,,b:2"}, SERVERS + "'a:1,,b:2' (entry '')"),
        ({"bootstrap.servers": "h:٣"}, SERVERS + "'h:٣' (entry 'h:٣')"),  # int() reads it as 3
        ({"bootstrap.servers": "h:x"}, SERVERS + "'h:x'"),
        ({"bootstrap.servers": ["h:1"]}, SERVERS + "['h:1'] (list)"),
        ({"bootstrap.servers": ""}, SERVERS + "''"),
        ({"bootstrap.servers": None}, "bootstrap.servers is required (HOST:PORT[,HOST:PORT...])"),
        ({"bootstrap.servers": "x:1", "client.id": 123}, "client.id must be a string, got 123 (int)"),
        ({"bootstrap.servers": "x:1", "compression.type": ["gzip"]},  # was a TypeError: unhashable
         "compression.type must be one of none, gzip, snappy, lz4, zstd; got ['gzip']"),
    ],
)
def test_servers_and_strings_are_checked_naming_the_key_and_value(config: dict, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        ProducerConfig.from_dict(config)


@pytest.mark.parametrize("servers", ["h:1", "h:65535", "host", "a:1, b:2", "[::1]:9092", "[::1]", "::1", "h:09092"])
def test_every_form_of_a_broker_list_librdkafka_takes_is_taken(servers: str) -> None:
    assert ProducerConfig.from_dict({"bootstrap.servers": servers}).bootstrap_servers == servers


# -- issue 42 item 20: librdkafka's ranges, and no fraction for an integer key ----------------------
@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "request.timeout.ms must be an integer in 1..900000, got 0"),  # was taken as 0
        (0.4, "request.timeout.ms must be an integer in 1..900000, got 0.4"),  # was taken as 0
        (2.7, "request.timeout.ms must be an integer in 1..900000, got 2.7"),  # was cut to 2
        ("2.7", "request.timeout.ms must be an integer in 1..900000, got '2.7'"),
        (900_001, "request.timeout.ms must be an integer in 1..900000, got 900001"),
        (True, "request.timeout.ms must be an integer in 1..900000, got True"),
    ],
)
def test_request_timeout_is_an_integer_in_librdkafkas_range(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        ProducerConfig.from_dict({"bootstrap.servers": "x:1", "request.timeout.ms": value})


def numeric_keys() -> set[str]:
    """Every key ProducerConfig reads as a number: numeric defaults, and the two without a default."""
    numeric = {k for k, v in PRODUCER_DEFAULTS.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    return numeric | {"linger.ms", "max.request.size"}


def test_every_numeric_key_has_a_range() -> None:
    assert set(NUMBER_RANGES) == numeric_keys() and set(NUMBER_RANGES) <= set(producer_keys())


def accepted(key: str, value: object) -> ProducerConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # linger.ms alone
        return ProducerConfig.from_dict({"bootstrap.servers": "x:1", key: value})


@pytest.mark.parametrize("key", sorted(NUMBER_RANGES))
def test_each_numeric_key_takes_its_range_and_nothing_else(key: str) -> None:
    rule = NUMBER_RANGES[key]
    kind = "an integer" if rule.integer else "a number of milliseconds"
    off = " (or <= 0: off)" if rule.off else ""
    for value in (rule.low, rule.high, str(rule.high), float(rule.low)):
        accepted(key, value)
    refused: list[object] = [rule.high + 1, f" {rule.high + 1}"]
    if not rule.off:
        refused += [rule.low - 1]
    if rule.integer:
        refused += [rule.low + 0.5, f"{rule.low}.5", 1e300]
    else:
        accepted(key, rule.low + 0.5)
    for value in refused:
        message = f"{key} must be {kind} in {rule.low}..{rule.high}{off}, got {value!r}"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            accepted(key, value)


def test_the_parsed_values_are_the_values_given() -> None:
    cfg = ProducerConfig.from_dict(
        {"bootstrap.servers": "x:1", "request.timeout.ms": 30000.0, "retry.backoff.ms": " 7 ",
         "sticky.partitioning.linger.ms": 0, "transaction.timeout.ms": 1000, "metadata.max.age.ms": "86400000"}
    )  # fmt: skip
    assert (cfg.request_timeout_ms, cfg.retry_backoff_ms, cfg.sticky_linger_ms) == (30000, 7, 0)
    assert (cfg.transaction_timeout_ms, cfg.metadata_max_age_ms) == (1000, 86_400_000)
    assert all(type(v) is int for v in (cfg.request_timeout_ms, cfg.retry_backoff_ms, cfg.sticky_linger_ms))
    # 0 is no limit, as librdkafka's message.timeout.ms: a batch never expires.
    assert ProducerConfig.from_dict({"bootstrap.servers": "x:1", "delivery.timeout.ms": 0}).delivery_timeout_ms == math.inf


# Where NUMBER_RANGES differs from librdkafka, on purpose (config.py's comments say why).
NOT_LIBRDKAFKAS = {"max.request.size", "queue.buffering.max.messages", "broker.linger.ms",
                   "broker.batch.max.partitions", "broker.batch.max.bytes"}  # fmt: skip


def librdkafka_ranges(tmp_path) -> dict[str, tuple[int, int, str]]:
    """{key: (low, high, type)} from the bundled librdkafka's own property table."""
    lib = ctypes.CDLL(librdkafka_path())
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_conf_properties_show.argtypes = [ctypes.c_void_p]
    path = tmp_path / "properties.txt"
    stream = libc.fopen(str(path).encode(), b"w")
    lib.rd_kafka_conf_properties_show(stream)
    libc.fclose(stream)
    out: dict[str, tuple[int, int, str]] = {}
    for line in path.read_text().splitlines():
        row = re.match(r"^(\S+)\s*\|[^|]*\|\s*(-?\d+) \.\. (\d+)\s*\|.*\*Type: (\w+)\*", line)
        if row:
            out[row[1]] = (int(row[2]), int(row[3]), row[4])
    return out


def test_the_ranges_are_librdkafkas(tmp_path) -> None:
    theirs = librdkafka_ranges(tmp_path)
    ours = {
        key: (rule.low, rule.high, "integer" if rule.integer else "float")
        for key, rule in NUMBER_RANGES.items()
        if key not in NOT_LIBRDKAFKAS
    }
    assert ours == {key: theirs[key] for key in ours}
    assert theirs["queue.buffering.max.messages"] == (0, 2**31 - 1, "integer")  # ours starts at 1
    assert "max.request.size" not in theirs
