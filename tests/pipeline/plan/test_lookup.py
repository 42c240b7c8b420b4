"""Spark's hash() in Python, the perfect-hash lookup, and the slot keys built on it."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.pipeline.plan.lookup import PerfectHash, murmur3_text
from rebalancer.pipeline.plan.slots import Item, SlotPlan, partition_keys, with_slot_key

EDGE_TEXTS = [
    "",
    "a",
    "ab",
    "abc",
    "abcd",
    "abcde",
    "metric_0001",
    "é",
    "日本語",
    "\x00",
    "x\x00",
    "😀",
    "a😀b",
]


def _colliding_pair() -> tuple[str, str]:
    """Two strings with the same Spark hash(), by a birthday search (about 2**16 hashes)."""
    seen: dict[int, str] = {}
    for number in itertools.count():
        text = f"type-{number}"
        value = murmur3_text(text)
        if value in seen:
            return seen[value], text
        seen[value] = text
    raise AssertionError("unreachable")


def test_a_lookup_finds_every_key_and_nothing_else():
    for size in (0, 1, 2, 3, 100, 5000):
        mapping = {f"k{i}": i * 7 - 3 for i in range(size)}
        table = PerfectHash.build(mapping)
        assert {key: table.get(key) for key in mapping} == mapping
        assert [table.get(f"k{i}") for i in range(size, size + 200)] == [None] * 200
        assert table.get("") is None
        # Cells stay linear in the keys, and the same input gives the same arrays.
        assert len(table.names) <= 4 * max(1, len(table.offsets))
        assert PerfectHash.build(mapping) == table


def test_keys_sharing_a_hash_are_told_apart_by_name():
    first, second = _colliding_pair()
    assert first != second and murmur3_text(first) == murmur3_text(second)
    table = PerfectHash.build({first: 1, second: 2, "other": 3})
    assert table.extra == ((second, 2),)
    assert (table.get(first), table.get(second), table.get("other"), table.get("missing")) == (1, 2, 3, None)


@pytest.mark.spark
def test_murmur3_text_matches_spark_hash_on_edge_strings(spark):
    from pyspark.sql import functions as F

    frame = spark.createDataFrame([(text,) for text in EDGE_TEXTS], "t string")
    rows = frame.select("t", F.hash("t").alias("h")).collect()
    assert {text: h for text, h in rows} == {text: murmur3_text(text) for text in EDGE_TEXTS}


@pytest.mark.spark
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(st.characters(exclude_categories=["Cs"]), max_size=40), min_size=1, max_size=60))
def test_murmur3_text_matches_spark_hash_on_any_text(spark, texts):
    from pyspark.sql import functions as F

    rows = spark.createDataFrame([(text,) for text in texts], "t string").select(F.hash("t")).collect()
    assert [row[0] for row in rows] == [murmur3_text(text) for text in texts]


@pytest.mark.spark
def test_the_spark_lookup_agrees_with_python_with_no_join(spark):
    first, second = _colliding_pair()
    mapping = {f"type {i} é": i for i in range(300)} | {first: 1001, second: 1002, "": 1003, "😀": 1004}
    table = PerfectHash.build(mapping)
    probes = [*mapping, "missing", "type 300 é", None]
    frame = spark.createDataFrame([(key,) for key in probes], "key string")
    looked_up = table.lookup(frame, "key", "value")
    assert looked_up.columns == ["key", "value"]
    got = {key: value for key, value in looked_up.collect()}
    assert got == {**mapping, "missing": None, "type 300 é": None, None: None}
    plan = looked_up._jdf.queryExecution().executedPlan().toString()
    assert "Join" not in plan and "Exchange" not in plan, plan


@pytest.mark.spark
def test_slot_keys_follow_the_plan_and_fall_back_to_the_type_hash(spark):
    """Whole types, a split type (one of its buckets unplanned) and an unseen type."""
    from pyspark.sql import functions as F

    partitions = 4
    keys = partition_keys(partitions)
    plan = SlotPlan(
        partitions=partitions,
        owner={Item("cold"): 3, Item("warm"): 0, Item("hot", 0): 1, Item("hot", 1): 2},
        counts={},
        load_before=[],
        load_after=[],
        sharded=["hot"],
        shard_of={"hot": {b: b % 2 for b in range(64) if b != 5}},
    )
    entities = [f"e{i}" for i in range(200)]
    frame = spark.createDataFrame(
        [(t, e) for t in ("cold", "warm", "hot", "new") for e in entities], "type string, entity string"
    )
    rows = (
        with_slot_key(frame, plan, "slot_key")
        .select("type", "entity", "slot_key", F.pmod(F.hash("entity"), F.lit(64)).alias("bucket"))
        .collect()
    )
    hashed = {
        t: h % partitions
        for t, h in spark.createDataFrame([(t,) for t in ("hot", "new")], "t string")
        .select("t", F.hash("t"))
        .collect()
    }
    buckets_seen = set()
    unplanned = 0
    for type_name, _entity, slot_key, bucket in rows:
        if type_name == "cold":
            want = keys[3]
        elif type_name == "warm":
            want = keys[0]
        elif type_name == "hot" and bucket != 5:
            want = keys[1 + bucket % 2]
            buckets_seen.add(bucket)
        else:  # an unseen type, or a bucket of a split type the plan lacks
            unplanned += type_name == "hot"
            want = keys[hashed[type_name]]
        assert slot_key == want, (type_name, bucket)
    assert unplanned > 0 and len(buckets_seen) > 40  # the split type's rows really spread over many buckets
    assert len(rows) == 4 * len(entities)
