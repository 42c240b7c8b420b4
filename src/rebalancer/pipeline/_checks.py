"""Argument checks shared by the pipeline's entry points (imports nothing else of ours)."""

from __future__ import annotations


def check_int(value: object, field: str, minimum: int) -> int:
    """`value` as an int >= `minimum` (not a bool, not a float however round); ValueError naming
    `field` and the value."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{field} must be an int >= {minimum}, got {value!r}")
    return value


def check_partitions(value: object, field: str = "partitions") -> int:
    """`value` as a task count: an int >= 1 (not a bool); ValueError naming `field` and the value.

    One check for `balanced_apply` and a pipeline run, so both refuse the same values alike."""
    return check_int(value, field, 1)
