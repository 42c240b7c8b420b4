"""Configuration of the broker-level batch collector, with librdkafka-style dotted keys.

The seed's rule for the deprecated partition-level `linger.ms` contradicts itself; issue 4 settles
it: only `linger.ms` set keeps the legacy per-partition behaviour (DeprecationWarning); both set,
`broker.linger.ms` wins (warning).

Numbers given as strings follow librdkafka's grammar (`strtol`/`strtod`: surrounding ASCII whitespace,
an optional sign, ASCII digits) through `rebalancer._numbers`: Python's own `int()`/`float()` also take
`1_0`, `٣` and Unicode spaces. Errors name the key and the value, except a secret key's value.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rebalancer._numbers import parse_float, shown
from rebalancer._numbers import parse_int as parse_decimal
from rebalancer._secrets import SECRET_KEY_WORDS
from rebalancer._secrets import is_secret_key as _is_secret_key

__all__ = [
    "COLLECTOR_DEFAULTS",
    "COLLECTOR_KEYS",
    "SECRET_KEY_WORDS",
    "CollectorConfig",
    "check_known_keys",
    "is_secret_key",
    "parse_bool",
    "parse_int",
    "parse_ms",
]

COLLECTOR_DEFAULTS: dict[str, object] = {
    "broker.linger.ms": 5,
    "broker.batch.max.partitions": -1,
    "broker.batch.max.bytes": -1,
    "max.request.size": 1_048_576,
    "max.in.flight.requests.per.connection": 5,
    "broker.adaptive": False,
}
# `linger.ms` is accepted (deprecated) but has no default: its presence changes behaviour.
COLLECTOR_KEYS: tuple[str, ...] = (*COLLECTOR_DEFAULTS, "linger.ms")
# SECRET_KEY_WORDS (rebalancer._secrets) make any key a secret, on top of security.SECRET_KEYS.


def is_secret_key(key: str) -> bool:
    """Whether errors must hide `key`'s value: one of security.SECRET_KEYS, or a secret word in it."""
    # Imported here: security imports this module (parse_bool), so a module-level import is circular.
    from rebalancer.produce import security

    return _is_secret_key(key, security.SECRET_KEYS)  # the package's one rule (the pipeline uses it too)


def _shown(key: str, value: object) -> str:
    """`value` for an error about `key`: its repr, or only its type for a secret key."""
    return shown(value, secret=True) if is_secret_key(key) else repr(value)


def check_known_keys(config: Mapping[str, object], valid: Iterable[str]) -> None:
    valid_set = set(valid)
    unknown = sorted(str(k) for k in config if k not in valid_set)
    if unknown:
        raise ValueError(
            f"unknown config key(s) {', '.join(map(repr, unknown))}; valid keys: {', '.join(sorted(valid_set))}"
        )


def parse_ms(key: str, value: object) -> float:
    """A non-negative, finite number of milliseconds (numeric strings accepted, as librdkafka does)."""
    if isinstance(value, str):
        try:  # not float(): it takes "1_5" as 15.0 and non-ASCII digits
            number = parse_float(value, field=key, finite=False)
        except ValueError:
            raise ValueError(f"{key} must be a number of milliseconds, got {_shown(key, value)}") from None
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an int beyond float range (10**400) is not a finite number either
            raise ValueError(f"{key} must be a finite number >= 0, got {_shown(key, value)}") from None
    else:
        raise ValueError(f"{key} must be a number of milliseconds, got {_shown(key, value)}")
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{key} must be a finite number >= 0, got {_shown(key, value)}")
    return number


def parse_int(key: str, value: object, *, minimum: int, allow_off: bool = False) -> int:
    """An integer >= `minimum`, or -1 (off) when `allow_off`; a string is decimal digits with an
    optional sign (not isdigit(): it is true for '²', and lstrip("-") let '--5' through)."""
    number: int
    if isinstance(value, bool):
        raise ValueError(f"{key} must be an integer, got {_shown(key, value)}")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        number = parse_decimal(value, field=key, secret=is_secret_key(key))
    else:
        raise ValueError(f"{key} must be an integer, got {_shown(key, value)}")
    if allow_off and number == -1:
        return -1
    if number < minimum:
        off = " (or -1 for off)" if allow_off else ""
        raise ValueError(f"{key} must be >= {minimum}{off}, got {_shown(key, value)}")
    return number


def parse_bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"{key} must be true or false, got {_shown(key, value)}")


@dataclass(frozen=True, slots=True)
class CollectorConfig:
    broker_linger_ms: float = 5.0
    batch_max_partitions: int = -1
    batch_max_bytes: int = -1
    max_request_size: int = 1_048_576
    max_in_flight: int = 5
    adaptive: bool = False
    # Set only in legacy mode (`linger.ms` alone): each partition lingers on its own clock.
    legacy_linger_ms: float | None = None

    @property
    def legacy(self) -> bool:
        return self.legacy_linger_ms is not None

    @classmethod
    def from_dict(cls, config: Mapping[str, object] | None, *, stacklevel: int = 3) -> CollectorConfig:
        """Validate collector keys only; unknown keys raise (the producer strips its own first)."""
        config = dict(config or {})
        check_known_keys(config, COLLECTOR_KEYS)
        merged = {**COLLECTOR_DEFAULTS, **config}
        broker_linger = parse_ms("broker.linger.ms", merged["broker.linger.ms"])
        legacy: float | None = None
        if "linger.ms" in config:
            legacy_value = parse_ms("linger.ms", config["linger.ms"])
            if "broker.linger.ms" in config:
                warnings.warn(
                    "both linger.ms and broker.linger.ms are set; broker.linger.ms wins "
                    f"({broker_linger:g} ms) and linger.ms ({legacy_value:g} ms) is ignored",
                    UserWarning,
                    stacklevel=stacklevel,
                )
            else:
                warnings.warn(
                    "linger.ms is deprecated: it keeps the legacy per-partition linger; "
                    "use broker.linger.ms to batch partitions per broker",
                    DeprecationWarning,
                    stacklevel=stacklevel,
                )
                legacy = legacy_value
        return cls(
            broker_linger_ms=broker_linger,
            batch_max_partitions=parse_int(
                "broker.batch.max.partitions",
                merged["broker.batch.max.partitions"],
                minimum=1,
                allow_off=True,
            ),
            batch_max_bytes=parse_int(
                "broker.batch.max.bytes", merged["broker.batch.max.bytes"], minimum=1, allow_off=True
            ),
            max_request_size=parse_int("max.request.size", merged["max.request.size"], minimum=1),
            max_in_flight=parse_int(
                "max.in.flight.requests.per.connection",
                merged["max.in.flight.requests.per.connection"],
                minimum=1,
            ),
            adaptive=parse_bool("broker.adaptive", merged["broker.adaptive"]),
            legacy_linger_ms=legacy,
        )
