"""How a producer key's value is read and checked: librdkafka's number grammar, each numeric key's
range, booleans, and the masking of a secret key's value in every error.

Numbers given as strings follow librdkafka's grammar (`strtol`/`strtod`: surrounding ASCII whitespace,
an optional sign, ASCII digits) through `rebalancer._numbers`: Python's own `int()`/`float()` also take
`1_0`, `٣` and Unicode spaces. Errors name the key and the value, except a secret key's value.

A leaf of the package (it imports no other module of `produce`): `security`, the collector's and the
producer's settings all read their values through it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rebalancer._numbers import parse_float, shown
from rebalancer._numbers import parse_int as parse_decimal
from rebalancer._secrets import SECRET_KEYS as _LIBRDKAFKA_SECRET_KEYS
from rebalancer._secrets import is_secret_key as _is_secret_key
from rebalancer.balance.checks import is_int, is_number

__all__ = [
    "INT32_MAX",
    "NUMBER_RANGES",
    "SECRET_KEYS",
    "NumberRange",
    "check_known_keys",
    "int_setting",
    "is_secret_key",
    "ms_setting",
    "parse_bool",
    "parse_int",
    "parse_ms",
    "shown_setting",
]

# The keys whose values `produce` never shows, whatever their name says (security.py names them too):
# librdkafka's sensitive ones, shared with the pipeline, which masks them in URLs.
SECRET_KEYS: frozenset[str] = _LIBRDKAFKA_SECRET_KEYS


def is_secret_key(key: str) -> bool:
    """Whether errors must hide `key`'s value: one of SECRET_KEYS, or a secret word in it (the
    package's one rule, `rebalancer._secrets.is_secret_key`; the pipeline uses it too)."""
    return _is_secret_key(key, SECRET_KEYS)


def shown_setting(key: str, value: object) -> str:
    """`value` for an error about `key`: its repr, or only its type for a secret key (every message
    of `produce` that quotes a value goes through here: the key's name decides, not the message)."""
    return shown(value, secret=True) if is_secret_key(key) else repr(value)


def check_known_keys(config: Mapping[str, object], valid: Iterable[str]) -> None:
    valid_set = set(valid)
    unknown = sorted(str(k) for k in config if k not in valid_set)
    if unknown:
        raise ValueError(
            f"unknown config key(s) {', '.join(map(repr, unknown))}; valid keys: {', '.join(sorted(valid_set))}"
        )


INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class NumberRange:
    """The values a numeric key takes: an integer (no fraction) or a number of milliseconds, in low..high."""

    low: int
    high: int
    integer: bool = True
    off: bool = False  # any value <= 0 turns it off (-1): the seed applies its thresholds "if > 0"


# Every numeric key ProducerConfig takes, with its range. librdkafka's keys have librdkafka's range
# and type (2.16.0's CONFIGURATION.md; tests/produce/test_producer_config.py compares this table
# with the bundled library's own), except where the comment says why not.
NUMBER_RANGES: dict[str, NumberRange] = {
    "transaction.timeout.ms": NumberRange(1000, INT32_MAX),
    "request.timeout.ms": NumberRange(1, 900_000),
    "retry.backoff.ms": NumberRange(1, 300_000),
    "delivery.timeout.ms": NumberRange(0, INT32_MAX),  # 0: no limit, as librdkafka's message.timeout.ms
    "metadata.max.age.ms": NumberRange(1, 86_400_000),
    # librdkafka: 0..; its 0 lifts the limit, which here is the only bound on memory (no .kbytes)
    "queue.buffering.max.messages": NumberRange(1, INT32_MAX),
    "batch.size": NumberRange(1, INT32_MAX),
    "message.max.bytes": NumberRange(1000, 1_000_000_000),
    "max.request.size": NumberRange(1, INT32_MAX),  # the Java client's key: an int, and 0 holds nothing
    "max.in.flight.requests.per.connection": NumberRange(1, 1_000_000),
    "sticky.partitioning.linger.ms": NumberRange(0, 900_000),
    "linger.ms": NumberRange(0, 900_000, integer=False),
    # Ours: the per-broker linger takes linger.ms's range; the thresholds are int32 sizes.
    "broker.linger.ms": NumberRange(0, 900_000, integer=False),
    "broker.batch.max.partitions": NumberRange(1, INT32_MAX, off=True),
    "broker.batch.max.bytes": NumberRange(1, INT32_MAX, off=True),
}
def parse_ms(key: str, value: object, *, maximum: float = math.inf) -> float:
    """A number of milliseconds in 0..`maximum` (numeric strings accepted, as librdkafka does)."""
    if math.isfinite(maximum):
        problem = f"{key} must be a number of milliseconds in 0..{maximum:g}, got {shown_setting(key, value)}"
    else:
        problem = f"{key} must be a finite number of milliseconds >= 0, got {shown_setting(key, value)}"
    if isinstance(value, str):
        try:  # not float(): it takes "1_5" as 15.0 and non-ASCII digits
            number = parse_float(value, field=key, finite=False)
        except ValueError:
            raise ValueError(problem) from None
    elif is_number(value):  # numpy's numbers too
        try:
            number = float(value)
        except OverflowError:  # an int beyond float range (10**400) is not a finite number either
            raise ValueError(problem) from None
    else:
        raise ValueError(problem)
    if not math.isfinite(number) or not 0 <= number <= maximum:
        raise ValueError(problem)
    return number


def parse_int(key: str, value: object, *, minimum: int, maximum: int = INT32_MAX, allow_off: bool = False) -> int:
    """An integer in `minimum`..`maximum` (a float only without a fraction: 2.7 is refused, not cut to
    2), or -1 (off) for any value <= 0 when `allow_off`. A string is decimal digits with an optional
    sign (not isdigit(): it is true for '²', and lstrip("-") let '--5' through)."""
    off = " (or <= 0: off)" if allow_off else ""
    problem = f"{key} must be an integer in {minimum}..{maximum}{off}, got {shown_setting(key, value)}"
    number: int
    if isinstance(value, bool):
        raise ValueError(problem)
    if is_int(value):  # numpy's ints too
        number = int(value)
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        try:
            number = parse_decimal(value, field=key, secret=is_secret_key(key))
        except ValueError:
            raise ValueError(problem) from None
    else:
        raise ValueError(problem)
    if allow_off and number <= 0:
        return -1
    if not minimum <= number <= maximum:
        raise ValueError(problem)
    return number


def int_setting(key: str, value: object) -> int:
    """`value` of the integer key `key`, checked against NUMBER_RANGES."""
    rule = NUMBER_RANGES[key]
    assert rule.integer, key
    return parse_int(key, value, minimum=rule.low, maximum=rule.high, allow_off=rule.off)


def ms_setting(key: str, value: object) -> float:
    """`value` of the milliseconds key `key` (fractions allowed), checked against NUMBER_RANGES."""
    rule = NUMBER_RANGES[key]
    assert not rule.integer and rule.low == 0, key
    return parse_ms(key, value, maximum=rule.high)


def parse_bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"{key} must be true or false, got {shown_setting(key, value)}")
