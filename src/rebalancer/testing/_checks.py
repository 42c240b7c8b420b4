"""Argument checks shared by `MockKafkaCluster` and `KafkaCluster`: one rule per argument, the real broker's.

The two clusters stand in for each other in tests (tests/conftest.py runs a test on each), so a call
one refuses the other must refuse too, with the same message; and what a real broker refuses
(a topic name with a space, 250 characters) the mock must refuse, not create. Each check raises
ValueError naming the argument and the value, before anything reaches librdkafka's C API (where a
float or a str became a ctypes error) or a JVM.
"""

from __future__ import annotations

import math

from rebalancer._kafka_names import TOPIC_NAME_MAX, TOPIC_PARTITIONS_MAX, check_topic_name
from rebalancer._numbers import shown
from rebalancer.balance.checks import is_int, is_number

__all__ = [
    "API_KEY_MAX",
    "BROKERS_MAX",
    "INT32_MAX",
    "SECONDS_MAX",
    "TOPIC_NAME_MAX",
    "TOPIC_PARTITIONS_MAX",
    "check_api_key",
    "check_broker_id",
    "check_brokers",
    "check_int",
    "check_seconds",
    "check_topic",
    "check_topic_name",
]

INT32_MAX = 2**31 - 1  # Kafka's broker ids are int32
# A test cluster's size. librdkafka's mock opens a listening socket per broker and, when it cannot
# (the process's file limit: ~1010 brokers under `ulimit -n 1024`), aborts the whole process in
# rd_kafka_mock_cluster_destroy; a real one starts a JVM per broker. 100 stays far from both.
BROKERS_MAX = 100
# A wait's limit, in seconds: a day. librdkafka and threading take timeouts as int milliseconds
# or C doubles; 1e300 overflowed them (an OverflowError or a wrapped, negative timeout).
SECONDS_MAX = 86400.0
API_KEY_MAX = 2**15 - 1  # the protocol's ApiKey is an int16; ctypes wrapped a larger one silently
# The topic-name rule (TOPIC_NAME_MAX, check_topic_name) lives in rebalancer/_kafka_names.py: the
# pipeline checks its kafka:// inputs by it too, and must not import `testing`.


def check_int(field: str, value: object, low: int, high: int | None = None) -> int:
    """A plain int in low..high (or >= low): numpy's ints too, not a bool, a float or a str."""
    wanted = f"an int >= {low}" if high is None else f"an int in {low}..{high}"
    if not is_int(value) or value < low or (high is not None and value > high):
        raise ValueError(f"{field} must be {wanted}, got {shown(value)}")
    return int(value)


def check_seconds(field: str, value: object, *, zero: bool = False) -> float:
    """A number of seconds > 0 (>= 0 with `zero`) and at most SECONDS_MAX: NaN passed every `<= 0`
    check before."""
    if (
        not is_number(value)
        or not math.isfinite(value)
        or not (0 <= value if zero else 0 < value)
        or value > SECONDS_MAX
    ):
        low = ">= 0" if zero else "> 0"
        raise ValueError(f"{field} must be a number of seconds {low} and at most {SECONDS_MAX:g}, got {shown(value)}")
    return float(value)


def check_brokers(brokers: object) -> int:
    return check_int("brokers", brokers, 1, BROKERS_MAX)


def check_api_key(api_key: object) -> int:
    """A Kafka protocol ApiKey (Produce 0, Fetch 1...): an int16 >= 0, checked before ctypes cuts it."""
    return check_int("api_key", api_key, 0, API_KEY_MAX)


def check_broker_id(broker_id: object, brokers: int, *, allow_all: bool = False) -> int:
    """A broker id of the cluster, 1..brokers; -1 (every broker) where the mock takes it."""
    if is_int(broker_id) and (1 <= broker_id <= brokers or (allow_all and broker_id == -1)):
        return int(broker_id)
    every = " (or -1 for all)" if allow_all else ""
    raise ValueError(f"broker_id must be in 1..{brokers}{every}, got {shown(broker_id)}")


def check_topic(name: object, partitions: object, replication_factor: object, brokers: int) -> tuple[int, int]:
    """create_topic's arguments, on either cluster: a user topic (not one of Kafka's own), and at
    most as many partitions as a real controller creates in one request; the counts as plain ints."""
    check_topic_name(name, internal=False)
    return (
        check_int("partitions", partitions, 1, TOPIC_PARTITIONS_MAX),
        check_int("replication_factor", replication_factor, 1, brokers),
    )
