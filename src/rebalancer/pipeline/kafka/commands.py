"""`rebalancer pipeline produce`: generated telemetry to a Kafka topic, for `pipeline run --input kafka://`."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from rebalancer._args import finite_float, integer
from rebalancer.pipeline.kafka.telemetry import DEFAULT_KAFKA_TIMEOUT_S, WRITER_LINGER_MS

if TYPE_CHECKING:
    from rebalancer.pipeline.generate import GenerateConfig

# The producer's ranges for the keys these flags set (produce.config.NUMBER_RANGES, which needs the
# 'kafka' extra to import; a test holds them equal): the flag is refused by its own name, in its own
# unit, not by the key's (`request.timeout.ms 1..900000` for `--kafka-timeout 1e12`).
REQUEST_TIMEOUT_MAX_S = 900.0  # request.timeout.ms: 1..900000
LINGER_MAX_MS = 900_000.0  # broker.linger.ms: 0..900000


def add_produce_parser(sub: Any, defaults: GenerateConfig) -> None:
    produce = sub.add_parser(
        "produce",
        help="send generated telemetry to a Kafka topic through BatchingProducer",
        description="Generate telemetry as `generate` does and send each event as a JSON value (key: "
        "its type) through BatchingProducer, whose linger is per broker. Bad rows stay bad, for the "
        "pipeline's quarantine. Prints the producer's stats. Read it back with "
        "`rebalancer pipeline run --input kafka://HOST:PORT/TOPIC`.",
    )
    produce.add_argument("--bootstrap", required=True, help="HOST:PORT[,HOST:PORT] of the brokers")
    produce.add_argument("--topic", required=True, help="topic to send to")
    produce.add_argument("--events", type=integer(), default=defaults.events, help="events to send")
    produce.add_argument("--types", type=integer(), default=defaults.types, help="distinct values of the type column")
    produce.add_argument("--skew", type=finite_float(), default=defaults.skew, help="Zipf exponent of type volumes")
    produce.add_argument("--entities", type=integer(), default=defaults.entities, help="distinct entities per type")
    produce.add_argument("--bad-rate", type=finite_float(), default=defaults.bad_rate, help="share of bad rows")
    produce.add_argument("--seed", type=integer(minimum=0), default=defaults.seed, help="random seed")
    produce.add_argument("--rate", type=finite_float(), default=0, help="events per second; 0: as fast as possible")
    produce.add_argument(
        "--linger-ms", type=finite_float(minimum=0, maximum=LINGER_MAX_MS), default=WRITER_LINGER_MS, help="broker.linger.ms"
    )
    produce.add_argument(
        "--kafka-timeout",
        type=finite_float(minimum=0, exclusive=True, maximum=REQUEST_TIMEOUT_MAX_S),
        default=DEFAULT_KAFKA_TIMEOUT_S,
        metavar="SECONDS",
        help="how long a connection or a metadata request may take before the command fails: the "
        "producer's request.timeout.ms, in seconds",
    )
    produce.set_defaults(func=cmd_produce)


def connect_reason(servers: str, timeout_s: float) -> str:
    """Why the first server refuses a TCP connection (` (127.0.0.1:9: Connection refused)`), which
    aiokafka's error leaves out; empty if it accepts one (the failure was past the connection)."""
    import socket

    first = servers.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=min(timeout_s, 5.0)):
            return ""
    except (OSError, ValueError) as exc:
        return f" ({first}: {exc.strerror or exc})" if isinstance(exc, OSError) else ""


def cmd_produce(args: argparse.Namespace) -> int:
    from rebalancer._extras import require_extra

    require_extra("rebalancer pipeline produce", "kafka", ("aiokafka",))  # one line, not a traceback
    from aiokafka.errors import KafkaConnectionError, KafkaError
    from rich.console import Console
    from rich.table import Table

    from rebalancer._console import usable_width
    from rebalancer._kafka_names import check_topic_name
    from rebalancer.pipeline.generate import GenerateConfig, make_frame
    from rebalancer.pipeline.kafka._options import shown_topic
    from rebalancer.pipeline.kafka.telemetry import DeliveryError, encode_events, produce_events
    from rebalancer.produce.config import check_servers  # the producer's rule, which it then applies

    check_servers(args.bootstrap, field="bootstrap")  # before the events are generated
    check_topic_name(args.topic, field="topic", show=shown_topic, internal=False)  # before the events are generated
    if args.rate < 0:
        raise ValueError(f"rate must be >= 0 events/s, got {args.rate}")
    config = GenerateConfig(
        events=args.events, types=args.types, skew=args.skew, entities=args.entities,
        bad_rate=args.bad_rate, seed=args.seed, format="jsonl",
    )
    config.validate()
    keys, values = encode_events(make_frame(config))

    started = time.perf_counter()
    try:
        stats = produce_events(
            args.bootstrap,
            args.topic,
            keys,
            values,
            rate=args.rate or None,
            config={"broker.linger.ms": args.linger_ms, "request.timeout.ms": max(1, round(args.kafka_timeout * 1000))},
        )
    except KafkaConnectionError:  # aiokafka names no reason; -v shows its log line per attempt
        raise ValueError(
            f"bootstrap: cannot connect to any Kafka broker at {args.bootstrap}"
            f"{connect_reason(args.bootstrap, args.kafka_timeout)} (-v shows each attempt)"
        ) from None
    except KafkaError as exc:  # its text starts with its class name
        raise ValueError(f"Kafka at {args.bootstrap}, topic {args.topic!r}: {exc}") from None
    except DeliveryError as exc:  # the brokers refused messages: counted, with the errors by name
        raise ValueError(
            f"Kafka at {args.bootstrap}, topic {args.topic!r}: {exc.failed} of {exc.total} message(s) failed: "
            + ", ".join(f"{name} x{count}" for name, count in sorted(exc.errors.items()))
        ) from None
    elapsed = time.perf_counter() - started
    table = Table(title=f"produced {len(values):,} events to {args.topic} in {elapsed:.2f} s", show_header=False)
    table.add_column("stat", style="bold")
    table.add_column("value")
    for name in ("acked", "failed", "requests", "msgs_per_request", "sends", "partitions_per_send_avg",
                 "latency_ms_p50", "latency_ms_p99", "retries", "errors"):
        value = stats[name]
        table.add_row(name, f"{value:.2f}" if isinstance(value, float) else str(value))
    Console(markup=False, width=usable_width()).print(table)
    return 0
