"""The broker-level batch collector's settings, from librdkafka-style dotted keys.

The seed's rule for the deprecated partition-level `linger.ms` contradicts itself; issue 4 settles
it: only `linger.ms` set keeps the legacy per-partition behaviour (DeprecationWarning); both set,
`broker.linger.ms` wins (warning).

Its own module because the collector needs it and the aiokafka adapter needs the collector, while
`ProducerConfig` (config.py) needs the adapter: here it stands below all three.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from rebalancer.produce.defaults import COLLECTOR_DEFAULTS, COLLECTOR_KEYS, PRODUCER_DEFAULTS
from rebalancer.produce.parsing import check_known_keys, int_setting, ms_setting, parse_bool

__all__ = ["CollectorConfig"]

T = TypeVar("T")


def _request_size(config: Mapping[str, object]) -> int:
    """`message.max.bytes`, or the Java client's `max.request.size` for it; errors name the key given."""
    if "message.max.bytes" in config and "max.request.size" in config:
        raise ValueError(
            "message.max.bytes and max.request.size (the Java client's name for it) are both set; "
            f"set one, got {config['message.max.bytes']!r} and {config['max.request.size']!r}"
        )
    key = "max.request.size" if "max.request.size" in config else "message.max.bytes"
    return int_setting(key, config.get(key, PRODUCER_DEFAULTS["message.max.bytes"]))


def _default(parse: Callable[[str, object], T], key: str) -> T:
    """PRODUCER_DEFAULTS[key] as `parse` reads a value given for `key`."""
    return parse(key, PRODUCER_DEFAULTS[key])


@dataclass(frozen=True, slots=True)
class CollectorConfig:
    """The collector's keys, validated. Each default is PRODUCER_DEFAULTS's entry, read by the rule
    a given value meets, so `CollectorConfig()` equals `CollectorConfig.from_dict({})`."""

    broker_linger_ms: float = _default(ms_setting, "broker.linger.ms")
    batch_max_partitions: int = _default(int_setting, "broker.batch.max.partitions")
    batch_max_bytes: int = _default(int_setting, "broker.batch.max.bytes")
    max_request_size: int = _default(int_setting, "message.max.bytes")  # alias max.request.size
    max_in_flight: int = _default(int_setting, "max.in.flight.requests.per.connection")
    adaptive: bool = _default(parse_bool, "broker.adaptive")
    # Set only in legacy mode (`linger.ms` alone): each partition lingers on its own clock.
    legacy_linger_ms: float | None = None
    request_size_key: str = "message.max.bytes"  # or max.request.size, where errors should name that

    @property
    def legacy(self) -> bool:
        return self.legacy_linger_ms is not None

    @classmethod
    def from_dict(cls, config: Mapping[str, object] | None, *, stacklevel: int = 3) -> CollectorConfig:
        """Validate collector keys only; unknown keys raise (the producer strips its own first)."""
        config = dict(config or {})
        check_known_keys(config, COLLECTOR_KEYS)
        merged = {**COLLECTOR_DEFAULTS, **config}
        broker_linger = ms_setting("broker.linger.ms", merged["broker.linger.ms"])
        legacy: float | None = None
        if "linger.ms" in config:
            legacy_value = ms_setting("linger.ms", config["linger.ms"])
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
            batch_max_partitions=int_setting("broker.batch.max.partitions", merged["broker.batch.max.partitions"]),
            batch_max_bytes=int_setting("broker.batch.max.bytes", merged["broker.batch.max.bytes"]),
            max_request_size=_request_size(config),
            max_in_flight=int_setting(
                "max.in.flight.requests.per.connection", merged["max.in.flight.requests.per.connection"]
            ),
            adaptive=parse_bool("broker.adaptive", merged["broker.adaptive"]),
            legacy_linger_ms=legacy,
            request_size_key="max.request.size" if "max.request.size" in config else "message.max.bytes",
        )
