"""Issue 33 follow-up: numbers the pipeline reads from text take `rebalancer._numbers`' grammar.

Python's `int()` takes `1_0` (10) and non-ASCII digits (`int("٣") == 3`); `str.isdigit()` calls
`'²'` a digit, which `int()` then refuses with a message naming nothing. Every number a user types
into the pipeline (reader options, Kafka offsets JSON, `kafka://embedded` settings, the master's
thread count, Spark's parallelism settings) is refused the same way, naming the setting. And the
generator's float settings refuse NaN and infinities, which pass every `x < 0` check. No Spark.
"""

from __future__ import annotations

import json
import math
import os

import pytest

import rebalancer.pipeline.session.build as session
from rebalancer.pipeline.generate import GenerateConfig
from rebalancer.pipeline.kafka._options import parse_options
from rebalancer.pipeline.kafka.telemetry import parse_kafka_url
from rebalancer.testing import postgres as postgres_server

BASE = {"bootstrap.servers": "h:1", "topic": "t"}
# What int() takes or isdigit() passes, and a strict parser must not.
LOOKALIKES = ["1_0", "٣", "²", "１", "\u20035"]


@pytest.mark.parametrize("text", LOOKALIKES)
@pytest.mark.parametrize("option", ["maxRecordsPerTask", "minPartitions", "pollTimeoutMs"])
def test_reader_options_refuse_what_int_would_take(option, text):
    with pytest.raises(ValueError) as info:
        parse_options({**BASE, option: text})
    assert str(info.value) == f"{option} must be a positive integer, got {text!r}"


@pytest.mark.parametrize(
    ("option", "text", "maximum"),
    [
        ("minPartitions", "10001", 10_000),  # tasks, as a run's --partitions
        ("pollTimeoutMs", "86400001", 86_400_000),  # a day
        ("metadataTimeoutMs", "1" + "0" * 30, 86_400_000),
        ("maxRecordsPerTask", "1000000001", 10**9),
        ("maxOffsetsPerTrigger", "1" + "0" * 30, 10**9),
    ],
)
def test_reader_options_have_upper_bounds(option: str, text: str, maximum: int) -> None:
    """10**30 was taken and reached the reader: every numeric option is bounded, as the run's settings are."""
    with pytest.raises(ValueError) as info:
        parse_options({**BASE, option: text}, streaming=True if option == "maxOffsetsPerTrigger" else None)
    assert str(info.value) == f"{option} must be at most {maximum}, got {text!r}"
    assert parse_options({**BASE, option: str(maximum)}, streaming=None) is not None


def test_reader_options_still_take_surrounding_ascii_whitespace_and_a_plus():
    options = parse_options({**BASE, "maxRecordsPerTask": " 10\t", "minPartitions": "+3"})
    assert (options.max_records_per_task, options.min_partitions) == (10, 3)


@pytest.mark.parametrize("key", ["٣", "1_0", "²", ""])
def test_offsets_json_refuses_a_partition_that_is_not_ascii_digits(key):
    text = json.dumps({"t": {key: 4}})
    with pytest.raises(ValueError) as info:
        parse_options({**BASE, "startingOffsets": text})
    assert str(info.value) == f"startingOffsets: partition {key!r} is not a number, in {text!r}"


@pytest.mark.parametrize("text", ['{"t": {"0": 5, "00": 7}}', '{"t": {"1": 5, "+1": 7}}'])
def test_offsets_json_refuses_one_partition_under_two_keys(text):
    """Both keys are the same partition: one offset would silently overwrite the other."""
    with pytest.raises(ValueError) as info:
        parse_options({**BASE, "startingOffsets": text})
    assert "is given twice" in str(info.value) and "startingOffsets" in str(info.value), info.value


def test_offsets_json_refuses_a_key_written_twice():
    """json.loads keeps the last of two equal keys: the first offset would be lost without a word."""
    text = '{"t": {"0": 5, "0": 7}}'
    with pytest.raises(ValueError) as info:
        parse_options({**BASE, "endingOffsets": text})
    assert str(info.value) == f"endingOffsets: the key '0' is given twice, in {text!r}"
    assert parse_options({**BASE, "endingOffsets": '{"t": {"0": 5, "1": 7}}'}).ending == {0: 5, 1: 7}


@pytest.mark.parametrize(("key", "lowest"), [("events", "non-negative"), ("partitions", "positive")])
@pytest.mark.parametrize("text", LOOKALIKES)
def test_embedded_settings_refuse_what_isdigit_would_pass(key, lowest, text):
    with pytest.raises(ValueError) as info:
        parse_kafka_url(f"kafka://embedded/t?{key}={text}")
    assert str(info.value) == f"input: {key} must be a {lowest} integer, got {text!r}"


def test_embedded_settings_take_plain_numbers():
    spec = parse_kafka_url("kafka://embedded/t?events=0&partitions=3")
    assert (spec.embedded_events, spec.embedded_partitions) == (0, 3)


@pytest.mark.parametrize("inside", ["²", "٣", "x", "1_0"])
def test_a_local_master_with_a_thread_count_that_is_not_a_number_is_refused_naming_it(inside):
    master = f"local[{inside}]"
    with pytest.raises(ValueError) as info:
        session._local_cores(master)
    assert str(info.value) == f"master: the thread count in {master!r} must be an integer or *, got {inside!r}"


def test_local_masters_still_give_their_cores():
    assert session._local_cores("local[3]") == 3
    assert session._local_cores("local[ 2 , 4]") == 2  # local[N,F]: N threads, F retries
    assert session._local_cores("local[*]") == session._local_cores("local[*, 2]") == (os.cpu_count() or 1)
    assert session._local_cores("local") == 1


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class _ConnectSession:
    """Shaped like pyspark's Connect session: only `conf` is read."""

    def __init__(self, values: dict[str, str]) -> None:
        self.conf = _Conf(values)


_ConnectSession.__module__ = "pyspark.sql.connect.session"


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"spark.default.parallelism": "٣"}, "spark.default.parallelism"),
        ({"spark.default.parallelism": "1_0"}, "spark.default.parallelism"),
        ({"spark.sql.shuffle.partitions": "٣"}, "spark.sql.shuffle.partitions"),
        ({"spark.sql.shuffle.partitions": "8 tasks"}, "spark.sql.shuffle.partitions"),
    ],
)
def test_connect_parallelism_settings_are_read_strictly_naming_the_setting(values, key):
    with pytest.raises(ValueError) as info:
        session.default_parallelism(_ConnectSession(values))  # type: ignore[arg-type]
    assert str(info.value) == f"{key} must be an integer, got {values[key]!r}"
    assert session.default_parallelism(_ConnectSession({"spark.default.parallelism": " 6 "})) == 6  # type: ignore[arg-type]


def test_the_newest_postgresql_is_found_by_ascii_version_numbers(monkeypatch):
    """`isdigit()` passed '²' (then int() raised, naming nothing) and read '١٧' as 17."""
    found = [f"/usr/lib/postgresql/{v}/bin/initdb" for v in ("9", "16", "١٧", "²", "latest")]
    monkeypatch.setattr(postgres_server.glob, "glob", lambda pattern: list(found))
    assert postgres_server.server_bindir() == postgres_server.Path("/usr/lib/postgresql/16/bin")


@pytest.mark.parametrize("skew", [math.nan, math.inf, -math.inf])
def test_generate_refuses_a_non_finite_skew_naming_it(skew):
    with pytest.raises(ValueError) as info:
        GenerateConfig(skew=skew).validate()
    assert str(info.value) == f"skew must be a finite number >= 0, got {skew}"


@pytest.mark.parametrize("bad_rate", [math.nan, math.inf])
def test_generate_refuses_a_non_finite_bad_rate_naming_it(bad_rate):
    with pytest.raises(ValueError, match=rf"^bad_rate must be in \[0, 1\], got {bad_rate}$"):
        GenerateConfig(bad_rate=bad_rate).validate()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"events": True}, "events must be an int in 0..100000000, got True"),
        ({"files": 0}, "files must be an int in 1..10000, got 0"),
        ({"format": "xml"}, "format must be one of parquet, csv, jsonl, got 'xml'"),
    ],
)
def test_a_generate_config_is_refused_when_made_not_when_used(fields: dict[str, object], message: str) -> None:
    """The third attack: GenerateConfig(events=True) was accepted, and refused only by generate()."""
    from rebalancer.pipeline.generate import GenerateConfig

    with pytest.raises(ValueError) as caught:
        GenerateConfig(**fields)  # type: ignore[arg-type]
    assert str(caught.value) == message
