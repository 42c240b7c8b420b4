"""Argument checks shared by the pipeline's entry points (imports nothing else of ours but `_numbers`).

Every count has an upper bound as well as a lower one, checked before Spark starts: without one,
`partitions=10**30` reached the JVM as a Py4J error, `partitions=10**6` over 200 rows scheduled a
million empty tasks (9 minutes), and a `group_cost` of 1e47 failed only in the planner's int64s.
"""

from __future__ import annotations

import math

from rebalancer.balance.checks import is_int, is_number

__all__ = [
    "COUNT_MAX",
    "EVENTS_MAX",
    "PARTITIONS_MAX",
    "SECONDS_MAX",
    "check_int",
    "check_partitions",
    "check_seconds",
]

# Tasks of one stage: Spark schedules every partition even when it is empty (~0.5 ms each here).
PARTITIONS_MAX = 10_000
# Any other count (batches, files per batch, moves, a group's rows-equivalent cost): far beyond
# a real run, and small enough that a plan's sums of them stay exact in int64 and float64.
COUNT_MAX = 10**9
# Sample events made in memory before any is written (`generate`, kafka://embedded/?events=): some GB.
EVENTS_MAX = 100_000_000
# A wait, in seconds: a day (a client's timeouts are int milliseconds).
SECONDS_MAX = 86_400


def check_int(value: object, field: str, minimum: int, maximum: int) -> int:
    """`value` as a plain int in minimum..maximum (numpy's ints too; not a bool, not a float however
    round); ValueError naming `field` and the value."""
    if not is_int(value) or not minimum <= value <= maximum:
        raise ValueError(f"{field} must be an int in {minimum}..{maximum}, got {value!r}")
    return int(value)


def check_partitions(value: object, field: str = "partitions") -> int:
    """`value` as a task count: an int in 1..PARTITIONS_MAX (not a bool); ValueError naming `field`
    and the value.

    One check for `balanced_apply` and a pipeline run, so both refuse the same values alike."""
    return check_int(value, field, 1, PARTITIONS_MAX)


def check_seconds(value: object, field: str) -> float:
    """`value` as a wait in seconds, above 0 and at most SECONDS_MAX (a finite int or float, not a
    bool); ValueError naming `field` and the value. Unbounded, 1e12 s reached `socket.settimeout`
    as an OverflowError."""
    if not is_number(value) or not math.isfinite(value) or not 0 < value <= SECONDS_MAX:
        raise ValueError(f"{field} must be a number of seconds > 0 and at most {SECONDS_MAX}, got {value!r}")
    return float(value)
