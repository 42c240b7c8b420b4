"""Argument checks shared by the pipeline's entry points (imports nothing else of ours)."""

from __future__ import annotations


def check_partitions(value: object, field: str = "partitions") -> int:
    """`value` as a task count: an int >= 1 (not a bool); ValueError naming `field` and the value.

    One check for `balanced_apply` and a pipeline run, so both refuse the same values alike."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{field} must be an int >= 1, got {value!r}")
    return value
