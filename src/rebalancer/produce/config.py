"""Configuration of the broker-level batch collector, with librdkafka-style dotted keys.

The seed's rule for the deprecated partition-level `linger.ms` contradicts itself; issue 4 settles
it: only `linger.ms` set keeps the legacy per-partition behaviour (DeprecationWarning); both set,
`broker.linger.ms` wins (warning).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "COLLECTOR_DEFAULTS",
    "COLLECTOR_KEYS",
    "CollectorConfig",
    "check_known_keys",
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


def check_known_keys(config: Mapping[str, object], valid: Iterable[str]) -> None:
    valid_set = set(valid)
    unknown = sorted(str(k) for k in config if k not in valid_set)
    if unknown:
        raise ValueError(
            f"unknown config key(s) {', '.join(map(repr, unknown))}; valid keys: {', '.join(sorted(valid_set))}"
        )


def parse_ms(key: str, value: object) -> float:
    """A non-negative, finite number of milliseconds (numeric strings accepted, as librdkafka does)."""
    if isinstance(value, bool):
        raise ValueError(f"{key} must be a number of milliseconds, got {value!r}")
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"{key} must be a number of milliseconds, got {value!r}") from None
    elif isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # an int beyond float range (10**400) is not a finite number either
            raise ValueError(f"{key} must be a finite number >= 0, got {value!r}") from None
    else:
        raise ValueError(f"{key} must be a number of milliseconds, got {value!r}")
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{key} must be a finite number >= 0, got {value!r}")
    return number


def parse_int(key: str, value: object, *, minimum: int, allow_off: bool = False) -> int:
    """An integer >= `minimum`, or -1 (off) when `allow_off`."""
    number: int
    if isinstance(value, bool):
        raise ValueError(f"{key} must be an integer, got {value!r}")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
        number = int(value)
    else:
        raise ValueError(f"{key} must be an integer, got {value!r}")
    if allow_off and number == -1:
        return -1
    if number < minimum:
        off = " (or -1 for off)" if allow_off else ""
        raise ValueError(f"{key} must be >= {minimum}{off}, got {value!r}")
    return number


def parse_bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"{key} must be true or false, got {value!r}")


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
