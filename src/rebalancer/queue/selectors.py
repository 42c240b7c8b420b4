"""Partition selectors: which partition an item goes to.

`type_hash()` (the default with per-type handlers) sends every item of one type to one partition,
so a drain pass needs no per-item grouping and a hot type can be moved between workers as a unit.
`round_robin()` (the default for a single consumer) spreads items over every partition, so N drain
workers share one homogeneous stream. Any callable `(item, partition_count) -> int` works too.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any


class PartitionSelector:
    """A named selection rule; build one with `type_hash()`, `round_robin()` or `of(callable)`."""

    __slots__ = ("function", "kind")

    def __init__(self, kind: str, function: Callable[[Any, int], int] | None = None) -> None:
        if kind not in ("type_hash", "round_robin", "custom"):
            raise ValueError(f"selector kind must be type_hash, round_robin or custom, got {kind!r}")
        if kind == "custom" and not callable(function):
            raise ValueError(f"selector must be callable, got {function!r}")
        self.kind = kind
        self.function = function

    @classmethod
    def type_hash(cls) -> PartitionSelector:
        """Every item of a type to one partition. A type with a handler gets an empty partition while
        one is left (fewer collisions than a bare hash); other types a stable hash of their name."""
        return cls("type_hash")

    @classmethod
    def round_robin(cls) -> PartitionSelector:
        """Item i to partition i mod N: every drain worker gets an equal share."""
        return cls("round_robin")

    @classmethod
    def of(cls, function: Callable[[Any, int], int]) -> PartitionSelector:
        """A custom rule `(item, partition_count) -> partition`; any integral result is accepted."""
        return cls("custom", function)

    @property
    def pins_types(self) -> bool:
        return self.kind == "type_hash"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, PartitionSelector) and self.kind == other.kind
                and self.function is other.function)

    def __hash__(self) -> int:
        return hash((self.kind, id(self.function)))

    def __repr__(self) -> str:
        if self.kind == "custom":
            return f"PartitionSelector.of({self.function!r})"
        return f"PartitionSelector.{self.kind}()"


def as_partition(value: object, count: int, item: object) -> int:
    """A selector's result as a partition number: any integral value in range (numpy ints too)."""
    if isinstance(value, bool):
        raise ValueError(f"selector returned {value!r} for {type(item).__name__}; expected an int in 0..{count - 1}")
    try:
        p = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(
            f"selector returned {value!r} for {type(item).__name__}; expected an int in 0..{count - 1}"
        ) from None
    if not 0 <= p < count:
        raise ValueError(f"selector returned partition {p} for {type(item).__name__}; expected 0..{count - 1}")
    return p
