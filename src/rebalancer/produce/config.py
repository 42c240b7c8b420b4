"""Every producer key, parsed and validated once: `ProducerConfig`, which the producer and the
pipeline's writer build.

The pieces it is built from have their own modules, each importing only those below it (no circle):
`defaults` (PRODUCER_DEFAULTS, the one defaults table), `parsing` (librdkafka's number grammar,
NUMBER_RANGES, the masking of secret values), `collector_config` (CollectorConfig), `codecs`
(compression.type) and `security` (TLS and SASL). This module's `__all__` keeps naming the public
ones, as the docs do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from rebalancer._numbers import ASCII_WHITESPACE, shown
from rebalancer._secrets import SECRET_KEY_WORDS, refuse_servers_login
from rebalancer.balance.checks import is_int
from rebalancer.produce.aiokafka_adapter import broker_address
from rebalancer.produce.codecs import parse_compression
from rebalancer.produce.collector_config import CollectorConfig
from rebalancer.produce.defaults import COLLECTOR_DEFAULTS, COLLECTOR_KEYS, PRODUCER_DEFAULTS
from rebalancer.produce.parsing import (
    NUMBER_RANGES,
    NumberRange,
    check_known_keys,
    int_setting,
    is_secret_key,
    ms_setting,
    parse_bool,
    parse_int,
    parse_ms,
    shown_setting,
)
from rebalancer.produce.security import SECURITY_KEYS, SecuritySettings

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


def _parse_partitioner(value: object) -> str:
    if not isinstance(value, str) or value not in PARTITIONERS:
        raise ValueError(f"partitioner must be one of {', '.join(PARTITIONERS)}; got {value!r}")
    return value


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
            compression=parse_compression(merged["compression.type"]),
            batch_size=min(int_setting("batch.size", merged["batch.size"]), collector.max_request_size),
            partitioner=_parse_partitioner(merged["partitioner"]),
            sticky_linger_ms=int_setting("sticky.partitioning.linger.ms", merged["sticky.partitioning.linger.ms"]),
            collector=collector,
            security=SecuritySettings.from_dict({k: v for k, v in config.items() if k in SECURITY_KEYS}),
        )


def producer_keys() -> tuple[str, ...]:
    """Every key `ProducerConfig` takes."""
    return (*PRODUCER_DEFAULTS, *(k for k in COLLECTOR_KEYS if k not in PRODUCER_DEFAULTS), *SECURITY_KEYS)
