"""rebalancer.shedding.java against what OpenJDK 17 prints for the same keys.

The expected orders were printed by java.util.HashMap and ConcurrentHashMap filled in the order given
(and by a HashMap copied from the ConcurrentHashMap, as Pulsar's getBundleDataForLoadShedding copies
its bundle map). The conformance tests (tests/conformance) check the same orders through Pulsar's
decisions on thousands of snapshots.
"""

from __future__ import annotations

import pytest

from rebalancer.shedding.java import concurrent_hash_map_order, hash_map_order, string_hash


@pytest.mark.parametrize(
    ("text", "java"),
    [
        ("", 0),
        ("hello", 99162322),
        ("broker-1:8080", -909699571),
        ("tenant/ns/0x00000000_0xffffffff", -1501888358),
        ("é€😀", 16752006),  # UTF-16 code units, a surrogate pair included
    ],
)
def test_string_hash_is_javas(text: str, java: int):
    assert string_hash(text) == java % 2**32


BROKERS = [f"broker-{i}:8080" for i in range(13)]  # 13 keys: a HashMap of 16 resizes to 32


def test_thirteen_brokers_in_javas_order():
    java = [f"broker-{i}:8080" for i in (12, 7, 6, 9, 11, 1, 4, 5, 2, 3, 0, 10, 8)]
    assert hash_map_order(BROKERS) == (java, 32)
    assert concurrent_hash_map_order(BROKERS) == java


def test_colliding_keys_and_a_concurrent_resize_that_reverses_a_bin():
    keys = "Aa,BB,C#,b,a,Ab,BC,zz,Zz,q,aaaaaaaaaaaa,bundle-1,bundle-10,bundle-2".split(",")
    hash_map = "Aa,BB,C#,zz,Zz,a,Ab,BC,b,bundle-10,q,aaaaaaaaaaaa,bundle-2,bundle-1".split(",")
    # ConcurrentHashMap's resize relinks the nodes ahead of a bin's last run in reverse: a, Ab, BC.
    concurrent = "Aa,BB,C#,zz,Zz,BC,Ab,a,b,bundle-10,q,aaaaaaaaaaaa,bundle-2,bundle-1".split(",")
    assert hash_map_order(keys)[0] == hash_map
    assert concurrent_hash_map_order(keys) == concurrent
    assert hash_map_order(concurrent)[0] == concurrent


def test_a_cleared_hash_map_keeps_its_capacity():
    order, capacity = hash_map_order(BROKERS)
    again, kept = hash_map_order(BROKERS[:3], capacity)
    assert kept == 32 and again == [b for b in order if b in BROKERS[:3]]
    assert hash_map_order(BROKERS[:3])[1] == 16
