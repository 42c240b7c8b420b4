"""librdkafka's partitioners by name (C29): hashes checked against librdkafka itself, sticky keyless placement."""

from __future__ import annotations

import ctypes
import random

import pytest
from aiokafka.structs import TopicPartition

from rebalancer.produce import ProducerConfig
from rebalancer.produce.partitioner import Partitioner
from rebalancer.testing.mock_cluster import librdkafka_path

KEYS = [b"user-42", b"a", b"\x00\xff", b"x" * 100, "ключ".encode(), b"order-1", b"order-2", b"z"]


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def librdkafka_partitioner(name: str):
    """librdkafka's own partitioner function (bundled in confluent-kafka); these ignore the topic handle."""
    fn = getattr(ctypes.CDLL(librdkafka_path()), f"rd_kafka_msg_partitioner_{name}")
    fn.restype = ctypes.c_int32
    fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p]
    return lambda key, count: fn(None, key, len(key), count, None, None)


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [("consistent_random", "consistent"), ("consistent", "consistent"), ("murmur2_random", "murmur2"), ("murmur2", "murmur2")],
)
@pytest.mark.parametrize("count", [1, 7, 1000])
def test_keyed_partitions_are_librdkafkas(ours, theirs, count):
    reference = librdkafka_partitioner(theirs)
    p = Partitioner(ours, 10)
    assert [p("t", key, count) for key in KEYS] == [reference(key, count) for key in KEYS]


def test_keyless_messages_stick_until_the_sticky_linger_passes():
    clock = FakeClock()
    p = Partitioner("consistent_random", 10, clock=clock, rng=random.Random(7))
    first = [p("t", None, 1000) for _ in range(50)]
    assert len(set(first)) == 1 and p.switches == 1
    clock.now += 0.009  # 9 ms: still inside sticky.partitioning.linger.ms=10
    assert p("t", None, 1000) == first[0]
    clock.now += 0.001  # 10 ms since the choice: a new partition (librdkafka's rd_interval)
    second = p("t", None, 1000)
    assert p.switches == 2
    assert [p("t", None, 1000) for _ in range(20)] == [second] * 20
    # each topic has its own sticky partition
    assert p("other", None, 1000) in range(1000) and p.switches == 3


def test_a_sent_batch_of_the_sticky_partition_moves_keyless_messages_on():
    clock = FakeClock()
    p = Partitioner("murmur2_random", 10_000, clock=clock, rng=random.Random(3))
    before = p("t", None, 1000)
    p.batch_sent(TopicPartition("t", (before + 1) % 1000))  # another partition's batch: no switch
    assert p("t", None, 1000) == before and p.switches == 1
    p.batch_sent(TopicPartition("t", before))
    after = p("t", None, 1000)
    assert p.switches == 2
    assert [p("t", None, 1000) for _ in range(10)] == [after] * 10


def test_random_places_every_message_on_its_own():
    p = Partitioner("random", 10_000, clock=FakeClock(), rng=random.Random(1))
    placed = [p("t", None, 12) for _ in range(600)]
    assert set(placed) == set(range(12))
    keyed = [p("t", b"same-key", 12) for _ in range(600)]
    assert len(set(keyed)) > 1  # random ignores the key, as librdkafka's `random` does


def test_empty_key_is_sticky_under_consistent_random_and_hashed_under_consistent():
    clock = FakeClock()
    sticky = Partitioner("consistent_random", 10_000, clock=clock, rng=random.Random(5))
    assert len({sticky("t", b"", 1000) for _ in range(30)}) == 1 and sticky.switches == 1
    hashed = Partitioner("consistent", 10_000, clock=clock, rng=random.Random(5))
    assert hashed("t", b"", 1000) == librdkafka_partitioner("consistent")(b"", 1000) == 0
    assert hashed.switches == 0
    java = Partitioner("murmur2_random", 10_000, clock=clock, rng=random.Random(5))
    assert java("t", b"", 1000) == librdkafka_partitioner("murmur2")(b"", 1000)


def test_the_sticky_partition_skips_partitions_without_a_leader():
    leaders = [None] * 999 + [2]
    p = Partitioner("consistent_random", 10_000, clock=FakeClock(), rng=random.Random(11))
    assert {p("t", None, 1000, leaders) for _ in range(20)} == {999}
    leaders[999] = -1
    leaders[5] = 1
    assert p("t", None, 1000, leaders) == 5  # the old one lost its leader: chosen again at once


def test_partitioner_names_are_librdkafkas_and_default_is_consistent_random():
    assert ProducerConfig.from_dict({"bootstrap.servers": "x:1"}).partitioner == "consistent_random"
    with pytest.raises(ValueError, match=r"^partitioner must be one of consistent_random, .*; got 'fnv2'$"):
        ProducerConfig.from_dict({"bootstrap.servers": "x:1", "partitioner": "fnv2"})
    with pytest.raises(ValueError, match=r"^sticky.partitioning.linger.ms must be an integer in 0..900000, got -1$"):
        ProducerConfig.from_dict({"bootstrap.servers": "x:1", "sticky.partitioning.linger.ms": -1})
