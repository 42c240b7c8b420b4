"""`rebalancer consumers demo`: Solace's seven-partition example, replayed on a timeline.

Three consumer flows share a seven-partition queue; a fourth binds. The holddown lets membership
settle, then exactly one partition is handed off, paused until its old owner has acked what it holds.
Every call passes virtual seconds, so the timeline is the same on every run and every machine.
"""

from __future__ import annotations

import argparse
from collections.abc import Hashable
from dataclasses import dataclass

from rebalancer._args import finite_float, integer
from rebalancer.consumers import (
    Event,
    PartitionedQueue,
)
from rebalancer.consumers.events import describe_event


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """The seed's example by default: 7 partitions, 3 flows, then a 4th."""

    partitions: int = 7
    flows: int = 3
    rebalance_delay_s: float = 5.0
    max_handoff_time_s: float = 3.0
    unacked: int = 2
    ack_after_s: float = 1.0

    def validate(self) -> None:
        for flag, value, minimum in (
            ("partitions", self.partitions, 1),
            ("flows", self.flows, 1),
            ("unacked", self.unacked, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"--{flag} must be an integer >= {minimum}, got {value!r}")
        for flag, seconds in (
            ("rebalance-delay", self.rebalance_delay_s),
            ("max-handoff-time", self.max_handoff_time_s),
            ("ack-after", self.ack_after_s),
        ):
            if not seconds >= 0 or seconds == float("inf"):
                raise ValueError(f"--{flag} must be a finite number of seconds >= 0, got {seconds!r}")


@dataclass(frozen=True, slots=True)
class Step:
    """One thing the caller did at `at`, the events it caused, and the state afterwards."""

    at: float
    action: str
    events: tuple[Event, ...]
    status: str
    assignment: dict[Hashable, list[int]]


def replay(config: DemoConfig | None = None) -> tuple[list[Step], PartitionedQueue]:
    """Run the example; every partition holds `unacked` messages when the new flow binds."""
    config = config or DemoConfig()
    config.validate()
    pq = PartitionedQueue(config.partitions, config.rebalance_delay_s, config.max_handoff_time_s)
    steps: list[Step] = []

    def record(at: float, action: str) -> None:
        events = tuple(pq.poll(at))
        steps.append(Step(at, action, events, pq.status, pq.assignment))

    first = [f"c{i + 1}" for i in range(config.flows)]
    for flow in first:
        pq.bind(flow, now=0.0)
    record(0.0, f"{', '.join(first)} bind")
    now = config.rebalance_delay_s
    record(now, "the rebalance delay passes")
    now += 1.0
    for partition in range(config.partitions):
        if pq.owner(partition) is not None and config.unacked:
            pq.delivered(partition, config.unacked, now=now)
    if config.unacked:
        record(now, f"each owner receives {config.unacked} messages per partition, not yet acked")
    now += 1.0
    newcomer = f"c{config.flows + 1}"
    pq.bind(newcomer, now=now)
    record(now, f"{newcomer} binds")
    now += config.rebalance_delay_s
    record(now, "the rebalance delay passes")
    while (handoff := pq.handoff) is not None:
        held = pq.unacked(handoff.partition)
        ack_at = max(now, handoff.started_at + config.ack_after_s)
        if held and ack_at > handoff.deadline:
            now = handoff.deadline
            record(
                now,
                f"{handoff.from_flow} has not acked partition {handoff.partition} within max-handoff-time",
            )
            continue
        now = ack_at
        if held:
            pq.acked(handoff.partition, held, now=now)
        record(now, f"{handoff.from_flow} acks the {held} messages it holds of partition {handoff.partition}")
    return steps, pq


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="consumers_command", metavar="COMMAND", required=True)
    demo = sub.add_parser(
        "demo",
        help="replay Solace's seven-partition example on a timeline",
        description=(
            "Replay the example of Solace's partition rebalancing documentation with "
            "rebalancer.consumers.PartitionedQueue: three consumer flows bind to a seven-partition "
            "queue and get 3/2/2 partitions after the rebalance delay; a fourth binds, and after "
            "another delay exactly one partition is handed off, paused until its old owner has "
            "acked the messages it holds, to reach 2/2/2/1. Time is virtual, so every run prints "
            "the same timeline."
        ),
    )
    defaults = DemoConfig()
    demo.add_argument("--partitions", type=integer(), default=defaults.partitions, help="partitions in the queue")
    demo.add_argument(
        "--flows", type=integer(), default=defaults.flows, help="flows that bind first; one more binds later"
    )
    demo.add_argument(
        "--rebalance-delay",
        type=finite_float(),
        default=defaults.rebalance_delay_s,
        help="holddown in seconds before a rebalance starts",
    )
    demo.add_argument(
        "--max-handoff-time",
        type=finite_float(),
        default=defaults.max_handoff_time_s,
        help="seconds a handoff waits for acks before it completes by force",
    )
    demo.add_argument(
        "--unacked",
        type=integer(),
        default=defaults.unacked,
        help="unacked messages each partition holds when the new flow binds",
    )
    demo.add_argument(
        "--ack-after",
        type=finite_float(),
        default=defaults.ack_after_s,
        help="seconds the old owner takes to ack; above --max-handoff-time the handoff is forced",
    )
    demo.add_argument(
        "--kafka",
        metavar="BOOTSTRAP",
        help="run the example live on real brokers instead: a consumer group of processes using "
        "rebalancer.consumers.kafka.FlowAssignor on a new 7-partition topic (removed afterwards); "
        "'embedded' starts a one-broker KafkaCluster (needs Java 17 and `make kafka`). Needs the "
        "kafka extra",
    )
    demo.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from rebalancer._console import console as make_console
    from rebalancer._console import print_items, print_wrapped

    if args.kafka is not None:
        from rebalancer.consumers.live_demo import run_live_demo

        return run_live_demo(args.kafka, args.partitions, args.flows, args.max_handoff_time)

    config = DemoConfig(
        args.partitions, args.flows, args.rebalance_delay, args.max_handoff_time, args.unacked, args.ack_after
    )
    steps, pq = replay(config)
    console = make_console()
    # Lines wrap at the console's width at spaces, each continuation indented under its own line.
    print_wrapped(
        console,
        f"{config.partitions} partitions, {config.flows} consumer flows, then one more "
        f"(rebalance delay {config.rebalance_delay_s:g} s, max handoff time {config.max_handoff_time_s:g} s)",
        hang="  ",
    )
    indent = " " * 10
    for step in steps:
        console.print()
        print_wrapped(console, f"{step.at:>6g} s  {step.action}", hang=indent, style="bold")
        for event in step.events:
            at = "" if event.at == step.at else f"(at {event.at:g} s) "
            print_wrapped(console, f"{at}{describe_event(event)}", indent=indent, hang=indent + "  ")
        owners = [f"{flow} {parts}" for flow, parts in step.assignment.items()]
        print_items(console, f"now {step.status}: ", owners, indent, style="dim")
    counts = sorted((len(parts) for parts in pq.assignment.values()), reverse=True)
    plural = "s" if pq.handoff_count != 1 else ""
    console.print()
    print_wrapped(
        console,
        f"balanced: {'/'.join(map(str, counts))} partitions per flow after {pq.handoff_count} "
        f"handoff{plural}; standby flows: {', '.join(map(str, pq.standby)) or 'none'}",
        hang="  ",
    )
    return 0
