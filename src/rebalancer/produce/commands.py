"""`rebalancer produce demo`: the batching producer against a local mock cluster, broker-counted.

The producer, the mock cluster and rich load when the demo runs: its `--help` works without the
'kafka' and 'cli' extras.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from rebalancer._args import finite_float, integer
from rebalancer.produce.parsing import NUMBER_RANGES

if TYPE_CHECKING:
    from rebalancer.testing import MockKafkaCluster


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="produce_command", metavar="COMMAND")
    sub.required = True
    demo = sub.add_parser(
        "demo",
        help="send messages through BatchingProducer to a local mock cluster",
        description="Start librdkafka's mock Kafka cluster on loopback, create a topic, send messages "
        "at a steady rate through BatchingProducer, and print the ProduceRequests the brokers "
        "counted, messages per request and latency. A per-partition producer sends about one "
        "request per partition and linger interval; this one sends one per broker.",
    )
    demo.add_argument("--brokers", type=integer(), default=3, help="mock brokers to start")
    demo.add_argument(
        "--partitions", type=integer(), default=1000, help="partitions of the topic, spread over the brokers"
    )
    demo.add_argument(
        "--messages", type=integer(), default=50_000, help="messages to send, round-robin over the partitions"
    )
    demo.add_argument("--rate", type=finite_float(), default=20_000.0, help="messages per second")
    demo.add_argument(
        "--linger-ms",
        type=finite_float(minimum=0, maximum=NUMBER_RANGES["broker.linger.ms"].high),
        default=500.0,
        help="broker.linger.ms: how long a broker's batch waits",
    )
    demo.add_argument("--value-bytes", type=integer(), default=100, help="bytes per message value")
    demo.set_defaults(func=cmd_demo)


# BatchingProducer.stats() keys the demo shows, as people read them (units in parentheses). Counts
# and means are the counted messages' alone: the warm-up message before them is taken out.
DEMO_METRICS = (
    ("sends", "sends (planned ProduceRequests)"),
    ("partitions_per_send_avg", "partitions per send (mean)"),
    ("msgs_per_request", "messages per ProduceRequest (mean)"),
    ("wait_ms_avg", "linger before a send (ms, mean)"),
    ("latency_ms_p50", "send-to-ack latency p50 (ms)"),
    ("latency_ms_p99", "send-to-ack latency p99 (ms)"),
    ("acked", "acked (messages)"),
    ("failed", "failed (messages)"),
)
WARM_UP = 1  # messages sent and flushed before the count starts: metadata and connections first


def counted(before: Mapping[str, object], after: Mapping[str, object]) -> dict[str, object]:
    """The stats of what was sent between two `stats()` snapshots: counts are differences, and each
    mean is the difference of its totals (mean x count) over the difference of its count. The
    latency percentiles are the producer's histogram's, whose one warm-up message among thousands
    does not move a bucket edge."""

    def number(stats: Mapping[str, object], key: str) -> float:
        value = stats[key]
        assert isinstance(value, int | float)
        return float(value)

    def delta(key: str) -> int:
        return int(number(after, key) - number(before, key))

    def mean(key: str, count: str) -> float:
        n = delta(count)
        total = number(after, key) * number(after, count) - number(before, key) * number(before, count)
        return total / n if n else 0.0

    triggers_before, triggers_after = before["triggers_by_reason"], after["triggers_by_reason"]
    assert isinstance(triggers_before, Mapping) and isinstance(triggers_after, Mapping)
    triggers = {reason: n - triggers_before.get(reason, 0) for reason, n in triggers_after.items()}
    return {
        **after,
        "sends": delta("sends"),
        "requests": delta("requests"),
        "acked": delta("acked"),
        "failed": delta("failed"),
        "produced": delta("produced"),
        "partitions_per_send_avg": mean("partitions_per_send_avg", "sends"),
        "wait_ms_avg": mean("wait_ms_avg", "sends"),
        "msgs_per_request": mean("msgs_per_request", "requests"),
        "triggers_by_reason": {reason: n for reason, n in triggers.items() if n},
    }


def cmd_demo(args: argparse.Namespace) -> int:
    for name in ("brokers", "partitions", "messages", "value_bytes"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.rate <= 0:
        raise ValueError(f"--rate must be > 0, got {args.rate}")
    from rebalancer._console import console as make_console
    from rebalancer._console import print_table
    from rebalancer.produce.producer import BatchingProducer
    from rebalancer.testing import MockKafkaCluster

    value = b"v" * args.value_bytes

    async def run(bootstrap: str, cluster: MockKafkaCluster) -> dict[str, object]:
        producer = BatchingProducer({"bootstrap.servers": bootstrap, "broker.linger.ms": args.linger_ms})
        await producer.start()
        try:
            for _ in range(WARM_UP):
                await producer.send("demo", value, partition=0)
            await producer.flush()
            before = producer.stats()
            cluster.start_request_tracking()
            loop = asyncio.get_running_loop()
            start = loop.time()
            for i in range(args.messages):
                if i % 1000 == 0:
                    ahead = start + i / args.rate - loop.time()
                    if ahead > 0:
                        await asyncio.sleep(ahead)
                await producer.send("demo", value, partition=i % args.partitions)
            await producer.flush()
            return counted(before, producer.stats())
        finally:
            await producer.stop()

    started = time.monotonic()
    with MockKafkaCluster(brokers=args.brokers) as cluster:
        cluster.create_topic("demo", partitions=args.partitions)
        stats = asyncio.run(run(cluster.bootstrap_servers, cluster))
        by_broker = cluster.produce_requests()
    rows = [["ProduceRequests (counted by the brokers)", f"{sum(by_broker.values()):,}"]]
    for key, label in DEMO_METRICS:
        number = stats[key]
        rows.append([label, f"{number:,.1f}" if isinstance(number, float) else f"{number:,}"])
    triggers = stats["triggers_by_reason"]
    assert isinstance(triggers, dict)
    rows.append(["sends by trigger", ", ".join(f"{reason} {n:,}" for reason, n in triggers.items()) or "none"])
    rows.append(["elapsed (s)", f"{time.monotonic() - started:.1f}"])
    title = f"{args.messages:,} messages (+{WARM_UP} warm-up, not counted), {args.partitions} partitions, {args.brokers} brokers"
    print_table(make_console(), title, ["metric", "value"], rows, right=["value"])
    return 0 if stats["failed"] == 0 else 1
