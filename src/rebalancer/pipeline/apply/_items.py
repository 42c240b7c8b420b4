"""What the planner places (a key, or one shard of a split key), the columns added for the
grouped map, and keys as JSON, the form the plan store keeps them in."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from rebalancer.pipeline.plan.slots import WHOLE

COSTS = ("rows", "seconds")
# Columns added for the grouped map; a user's frame may not use names with this prefix.
RESERVED_PREFIX = "__rebalancer_"
SLOT_COLUMN = "__rebalancer_slot"
ITEM_COLUMN = "__rebalancer_item"
COMBINE_COLUMN = "__rebalancer_combine"
# Every module of the package logs as the package: one name for users to configure.
LOGGER = "rebalancer.pipeline.apply"

Key = tuple[Any, ...]


class ApplyItem(NamedTuple):
    """What the planner places: a whole key (shard WHOLE) or one `split_by` shard of a heavy key."""

    key: Key
    shard: int = WHOLE


def shard_json(shard: int) -> int | None:
    return None if shard == WHOLE else shard


def _encode_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    if isinstance(value, bytes | bytearray):
        return {"bytes": bytes(value).hex()}
    raise TypeError(f"a key of type {type(value).__name__} cannot be stored")


_DECODERS: dict[str, Callable[[str], Any]] = {
    "float": float,
    "datetime": dt.datetime.fromisoformat,
    "date": dt.date.fromisoformat,
    "decimal": decimal.Decimal,
    "bytes": bytes.fromhex,
}


def _decode_value(value: Any) -> Any:
    """A key value as `_encode_value` stored it; ValueError for anything it never writes."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError(f"not a stored key value: {value!r}")
    ((tag, text),) = value.items()
    decoder = _DECODERS.get(tag)
    if decoder is None:
        raise ValueError(f"unknown value tag {tag!r} in {value!r}")
    if not isinstance(text, str):
        raise ValueError(f"a {tag} value is stored as text, got {value!r}")
    try:
        return decoder(text)
    except (ValueError, decimal.InvalidOperation) as exc:
        raise ValueError(f"cannot read {value!r}: {exc}") from None


def encode_key(key: Key) -> list[Any]:
    return [_encode_value(value) for value in key]


def decode_key(values: Sequence[Any]) -> Key:
    return tuple(_decode_value(value) for value in values)


def storable(key: Key) -> bool:
    try:
        encode_key(key)
    except TypeError:
        return False
    return True
