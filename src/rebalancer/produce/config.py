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
from typing import TYPE_CHECKING

from rebalancer._numbers import ASCII_WHITESPACE, is_int, is_number, parse_float, shown
from rebalancer._numbers import parse_int as parse_decimal
from rebalancer._secrets import SECRET_KEY_WORDS, refuse_servers_login
from rebalancer._secrets import is_secret_key as _is_secret_key

__all__ = [
    "COLLECTOR_DEFAULTS",
    "COLLECTOR_KEYS",
    "NUMBER_RANGES",
    "PARTITIONERS",
    "PRODUCER_DEFAULTS",
    "SECRET_KEY_WORDS",
    "CollectorConfig",
    "NumberRange",
    "ProducerConfig",
    "check_known_keys",
    "check_servers",
    "int_setting",
    "is_secret_key",
    "ms_setting",
    "parse_bool",
    "parse_int",
    "parse_ms",
    "producer_keys",
    "shown_setting",
]

# The one defaults table of every producer key (security keys: SecuritySettings, which this
# module's ProducerConfig calls). librdkafka's keys with librdkafka's defaults, except where
# docs/produce.md's "Defaults against librdkafka" table gives the reason for another value.
PRODUCER_DEFAULTS: dict[str, object] = {
    "bootstrap.servers": None,  # required
    "client.id": "rebalancer-producer",
    "acks": "all",
    "enable.idempotence": False,
    "transactional.id": None,
    "transaction.timeout.ms": 60_000,
    "request.timeout.ms": 30_000,
    "retry.backoff.ms": 100,
    "delivery.timeout.ms": 300_000,
    "batch.size": 1_000_000,
    "compression.type": None,
    "metadata.max.age.ms": 900_000,
    "queue.buffering.max.messages": 100_000,
    "partitioner": "consistent_random",
    "sticky.partitioning.linger.ms": 10,
    "broker.linger.ms": 5,
    "broker.batch.max.partitions": -1,
    "broker.batch.max.bytes": -1,
    "message.max.bytes": 1_000_000,
    "max.in.flight.requests.per.connection": 5,
    "broker.adaptive": False,
}
_COLLECTOR_NAMES = (
    "broker.linger.ms",
    "broker.batch.max.partitions",
    "broker.batch.max.bytes",
    "message.max.bytes",
    "max.in.flight.requests.per.connection",
    "broker.adaptive",
)
COLLECTOR_DEFAULTS: dict[str, object] = {key: PRODUCER_DEFAULTS[key] for key in _COLLECTOR_NAMES}  # a view
# `linger.ms` is accepted (deprecated) but has no default: its presence changes behaviour.
# `max.request.size` is the Java client's name for librdkafka's `message.max.bytes`: accepted as an alias.
COLLECTOR_KEYS: tuple[str, ...] = (*COLLECTOR_DEFAULTS, "linger.ms", "max.request.size")
# SECRET_KEY_WORDS (rebalancer._secrets) make any key a secret, on top of security.SECRET_KEYS.


def is_secret_key(key: str) -> bool:
    """Whether errors must hide `key`'s value: one of security.SECRET_KEYS, or a secret word in it."""
    # Imported here: security imports this module (parse_bool), so a module-level import is circular.
    from rebalancer.produce import security

    return _is_secret_key(key, security.SECRET_KEYS)  # the package's one rule (the pipeline uses it too)


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


def _request_size(config: Mapping[str, object]) -> int:
    """`message.max.bytes`, or the Java client's `max.request.size` for it; errors name the key given."""
    if "message.max.bytes" in config and "max.request.size" in config:
        raise ValueError(
            "message.max.bytes and max.request.size (the Java client's name for it) are both set; "
            f"set one, got {config['message.max.bytes']!r} and {config['max.request.size']!r}"
        )
    key = "max.request.size" if "max.request.size" in config else "message.max.bytes"
    return int_setting(key, config.get(key, PRODUCER_DEFAULTS["message.max.bytes"]))


@dataclass(frozen=True, slots=True)
class CollectorConfig:
    broker_linger_ms: float = 5.0
    batch_max_partitions: int = -1
    batch_max_bytes: int = -1
    max_request_size: int = 1_000_000  # message.max.bytes (alias max.request.size)
    max_in_flight: int = 5
    adaptive: bool = False
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


# name -> (aiokafka codec id, the package that provides it); availability: aiokafka_adapter.has_codec
_COMPRESSION: dict[object, tuple[int, str | None]] = {
    None: (0, None),
    "none": (0, None),
    "gzip": (1, None),
    "snappy": (2, "cramjam"),
    "lz4": (3, "cramjam"),
    "zstd": (4, "cramjam"),
}
_ACKS = {"all": -1, "-1": -1, -1: -1, 1: 1, "1": 1, 0: 0, "0": 0}
# librdkafka's names. `*_random` and `consistent_random`: keyless messages go to a sticky partition.
PARTITIONERS: tuple[str, ...] = ("consistent_random", "consistent", "murmur2_random", "murmur2", "random")


def check_servers(value: object, *, field: str = "bootstrap.servers") -> str:
    """`value` if it is a broker list as librdkafka takes it: one string, HOST[:PORT] entries by
    commas (an IPv6 host in brackets), each host non-empty and each port ASCII digits in 1..65535;
    else ValueError naming `field` and the value. Split by aiokafka's parser (the producer connects
    with it), which alone took 'h:99999', 'h:0' and a port of '٣'. A host holding '@' is refused
    first, its user info masked: a broker list takes no login (sasl.username/sasl.password do), and
    'u:PW@h:9092' was taken, its password then shown by the config's repr and every error."""
    from rebalancer.produce.aiokafka_adapter import broker_address  # it imports this module

    wanted = f"{field} must be HOST:PORT[,HOST:PORT...] with ports in 1..65535"
    if value is None:
        raise ValueError(f"{field} is required (HOST:PORT[,HOST:PORT...])")
    if not isinstance(value, str) or not value.strip(ASCII_WHITESPACE):
        raise ValueError(f"{wanted}, got {shown(value)}")
    refuse_servers_login(value, field)
    for entry in value.split(","):
        entry = entry.strip(ASCII_WHITESPACE)
        try:
            host, port = broker_address(entry)
        except ValueError:  # 'h:x', '[::1' ...
            raise ValueError(f"{wanted}, got {shown(value)}") from None
        digits = entry.rsplit(":", 1)[1] if entry not in (host, f"[{host}]") else "9092"  # no port: the default
        if not host or not (digits.isascii() and digits.isdigit()) or not 1 <= port <= 65535:
            raise ValueError(f"{wanted}, got {shown(value)} (entry {entry!r})")
    return value


def _parse_acks(value: object) -> int:
    # bool and float compare equal to 1 and 0; neither is an acks setting.
    if is_int(value):
        value = int(value)  # np.int64(1) is acks=1
    if isinstance(value, bool) or not isinstance(value, int | str) or value not in _ACKS:
        raise ValueError(f"acks must be one of all, -1, 1, 0; got {value!r}")
    return _ACKS[value]


def _parse_compression(value: object) -> int:
    from rebalancer.produce.aiokafka_adapter import has_codec  # the adapter imports this module

    name = value.lower() if isinstance(value, str) else value
    if not (name is None or isinstance(name, str)) or name not in _COMPRESSION:  # a list is unhashable
        raise ValueError(f"compression.type must be one of none, gzip, snappy, lz4, zstd; got {value!r}")
    codec_id, package = _COMPRESSION[name]
    if package is not None and isinstance(name, str) and not has_codec(name):
        raise ValueError(
            f"compression.type={name} needs the {package} package: pip install {package} "
            "(rebalancer's 'kafka' extra brings it)"
        )
    return codec_id


def _parse_partitioner(value: object) -> str:
    if not isinstance(value, str) or value not in PARTITIONERS:
        raise ValueError(f"partitioner must be one of {', '.join(PARTITIONERS)}; got {value!r}")
    return value


if TYPE_CHECKING:
    from rebalancer.produce.security import SecuritySettings


@dataclass(frozen=True)
class ProducerConfig:
    """Every producer key, parsed and validated once (the producer and the pipeline's writer use it).

    repr never shows a secret: `security` masks its passwords.
    """

    bootstrap_servers: str
    client_id: str
    acks: int
    idempotent: bool
    transactional_id: str | None
    transaction_timeout_ms: int
    request_timeout_ms: int
    retry_backoff_ms: int
    delivery_timeout_ms: float  # inf for delivery.timeout.ms=0 (no limit, as in librdkafka)
    metadata_max_age_ms: int
    max_outstanding: int  # queue.buffering.max.messages
    compression: int  # aiokafka's codec id
    batch_size: int  # capped at the request size
    partitioner: str
    sticky_linger_ms: int
    collector: CollectorConfig
    security: SecuritySettings

    @classmethod
    def from_dict(cls, config: Mapping[str, object], *, stacklevel: int = 3) -> ProducerConfig:
        """Unknown keys raise listing the valid ones; bad values raise naming the key and value."""
        from rebalancer.produce.security import SECURITY_KEYS, SecuritySettings  # it imports parse_bool

        config = dict(config)
        check_known_keys(config, producer_keys())
        merged = {**PRODUCER_DEFAULTS, **config}
        servers = check_servers(merged["bootstrap.servers"])  # librdkafka's form: one str, real ports
        if not isinstance(merged["client.id"], str):  # str(123) was taken; librdkafka's is a string
            raise ValueError(f"client.id must be a string, got {shown(merged['client.id'])}")
        transactional_id = merged["transactional.id"]
        if transactional_id is not None and (not isinstance(transactional_id, str) or not transactional_id):
            raise ValueError(f"transactional.id must be a non-empty string, got {transactional_id!r}")
        idempotent = parse_bool("enable.idempotence", merged["enable.idempotence"])
        if transactional_id is not None:
            if "enable.idempotence" in config and not idempotent:
                raise ValueError("transactional.id needs enable.idempotence=true, got enable.idempotence=false")
            idempotent = True  # as in Kafka: a transactional producer is idempotent
        acks = _parse_acks(merged["acks"])
        if idempotent and acks != -1:
            why = "transactional.id is set" if transactional_id is not None else "enable.idempotence is true"
            raise ValueError(f"acks must be all when {why}, got {merged['acks']!r}")
        collector = CollectorConfig.from_dict(
            {k: v for k, v in config.items() if k in COLLECTOR_KEYS}, stacklevel=stacklevel + 1
        )
        return cls(
            bootstrap_servers=servers,
            client_id=merged["client.id"],
            acks=acks,
            idempotent=idempotent,
            transactional_id=transactional_id,
            transaction_timeout_ms=int_setting("transaction.timeout.ms", merged["transaction.timeout.ms"]),
            request_timeout_ms=int_setting("request.timeout.ms", merged["request.timeout.ms"]),
            retry_backoff_ms=int_setting("retry.backoff.ms", merged["retry.backoff.ms"]),
            delivery_timeout_ms=int_setting("delivery.timeout.ms", merged["delivery.timeout.ms"]) or math.inf,
            metadata_max_age_ms=int_setting("metadata.max.age.ms", merged["metadata.max.age.ms"]),
            max_outstanding=int_setting("queue.buffering.max.messages", merged["queue.buffering.max.messages"]),
            compression=_parse_compression(merged["compression.type"]),
            batch_size=min(int_setting("batch.size", merged["batch.size"]), collector.max_request_size),
            partitioner=_parse_partitioner(merged["partitioner"]),
            sticky_linger_ms=int_setting("sticky.partitioning.linger.ms", merged["sticky.partitioning.linger.ms"]),
            collector=collector,
            security=SecuritySettings.from_dict({k: v for k, v in config.items() if k in SECURITY_KEYS}),
        )


def producer_keys() -> tuple[str, ...]:
    """Every key `ProducerConfig` takes."""
    from rebalancer.produce.security import SECURITY_KEYS

    return (*PRODUCER_DEFAULTS, *(k for k in COLLECTOR_KEYS if k not in PRODUCER_DEFAULTS), *SECURITY_KEYS)
