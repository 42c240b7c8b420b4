"""`rebalancer consumers demo --kafka BOOTSTRAP|embedded`: the seed's example on real brokers.

The same story as the in-process demo, told by a real consumer group: N consumers (processes) join a
new topic and split it ±1; one more joins and exactly the fewest partitions change owner; one leaves
and only its partitions move. Each step prints the leader's plan in the in-process demo's words.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from contextlib import ExitStack

from rebalancer._extras import require_extra
from rebalancer.consumers.kafka_group import (
    GroupState,
    GroupStuckError,
    LiveGroup,
    lower_bound_between,
    moves_between,
)

log = logging.getLogger(__name__)

_MEMBER_ID_TAIL = re.compile(r"-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_BOOTSTRAP = re.compile(r"^[A-Za-z0-9_.\[\]:-]+:\d{1,5}(,[A-Za-z0-9_.\[\]:-]+:\d{1,5})*$")


def _short(text: str) -> str:
    """aiokafka's member ids are `client_id-uuid`; the client id is the consumer's name."""
    return _MEMBER_ID_TAIL.sub("", text)


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        admin.list_topics(timeout=10)
    except KafkaException:
        raise ValueError(f"--kafka {bootstrap}: no broker answered within 10 s") from None
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(
            timeout=30
        )
    except KafkaException as exc:
        raise ValueError(f"--kafka {bootstrap}: cannot create a topic there: {exc.args[0]}") from None
    except TimeoutError:
        raise ValueError(f"--kafka {bootstrap}: no broker answered within 30 s") from None


def _delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        admin.delete_topics([topic])[topic].result(timeout=30)
    except Exception as exc:  # the demo's own topic: a failed removal is said, not raised
        log.warning("could not delete the demo topic %s: %s", topic, exc)


# Kafka's own default for group.initial.rebalance.delay.ms.
INITIAL_DELAY_MS = 3000


def run_live_demo(kafka: str, partitions: int, flows: int, max_handoff_s: float) -> int:
    """The live demo; a group that does not settle is one error line, like bad input."""
    try:
        return _run(kafka, partitions, flows, max_handoff_s)
    except GroupStuckError as exc:
        raise ValueError(f"consumers demo --kafka {kafka}: {exc}") from None


def _run(kafka: str, partitions: int, flows: int, max_handoff_s: float) -> int:
    from rebalancer._console import console as make_console
    from rebalancer._console import print_items, print_wrapped

    if kafka != "embedded" and not _BOOTSTRAP.match(kafka):
        # A user:password@ prefix is a secret, not part of a bootstrap list: shown masked.
        shown = re.sub(r"[^,@]*@", "***@", kafka)
        raise ValueError(f"--kafka must be 'embedded' or host:port[,host:port...], got {shown!r}")
    if kafka != "embedded":
        for address in kafka.split(","):
            port = int(address.rsplit(":", 1)[1])
            if not 1 <= port <= 65535:
                raise ValueError(f"--kafka: port must be 1..65535, got {port} in {address!r}")
    if flows < 2:
        raise ValueError(f"--flows must be >= 2 for the live demo (one of them leaves), got {flows}")
    if not (0 < max_handoff_s < 60):
        raise ValueError(f"--max-handoff-time must be > 0 and < 60 s for the live demo, got {max_handoff_s:g}")
    require_extra("consumers demo --kafka", "kafka")
    console = make_console()
    with ExitStack() as stack:
        if kafka == "embedded":
            from rebalancer.testing import KafkaCluster

            print_wrapped(console, "starting a one-broker Apache Kafka cluster on loopback ...", hang="  ")
            # The broker's default initial delay (KafkaCluster sets 0 for fast tests): the first
            # consumers, started one after another, then bind in one rebalance instead of three.
            cluster = stack.enter_context(
                KafkaCluster(brokers=1, broker_config={"group.initial.rebalance.delay.ms": INITIAL_DELAY_MS})
            )
            bootstrap = cluster.bootstrap_servers
            print_wrapped(console, f"Kafka {cluster.version} up in {cluster.startup_s:.1f} s at {bootstrap}", hang="  ")
        else:
            bootstrap = kafka
        topic = f"rebalancer-demo-{uuid.uuid4().hex[:8]}"
        _create_topic(bootstrap, topic, partitions)
        stack.callback(_delete_topic, bootstrap, topic)
        group = stack.enter_context(
            LiveGroup(bootstrap, topic, f"{topic}-group", partitions, max_handoff_s=max_handoff_s)
        )
        print_wrapped(
            console,
            f"topic {topic}: {partitions} partitions; consumer group of processes using FlowAssignor "
            f"and GracefulHandoff",
            hang="  ",
        )
        start = time.monotonic()
        indent = " " * 10
        seen = 0
        total_moves = total_bound = 0

        def show(action: str, state: GroupState, before: GroupState | None) -> None:
            nonlocal seen, total_moves, total_bound
            console.print()
            print_wrapped(console, f"{state.at - start:>6.1f} s  {action}", hang=indent, style="bold")
            for event in group.events[seen:]:
                line = event.get("line")
                if not line:
                    continue
                if event.get("kind") in ("PartitionsReleased", "PartitionsResumed"):
                    line = f"{event['member']} {line}"  # a member's own report; the rest is the leader's plan
                print_wrapped(console, _short(str(line)), indent=indent, hang=indent + "  ")
            seen = len(group.events)
            if before is not None:
                moved, bound = moves_between(before, state), lower_bound_between(before, state, partitions)
                total_moves += moved
                total_bound += bound
                print_wrapped(
                    console, f"partitions that changed owner: {moved} (lower bound {bound})", indent=indent
                )
            owners = [f"{m} {list(ps)}" for m, ps in sorted(state.assignment.items())]
            print_items(console, f"generation {state.generation}: ", owners, indent, style="dim")

        names = [f"c{i + 1}" for i in range(flows)]
        for name in names:
            group.join(name)
        state = group.wait_stable()
        show(f"{', '.join(names)} join", state, None)
        newcomer = f"c{flows + 1}"
        group.join(newcomer)
        after = group.wait_stable(after=state.generation + 1)
        show(f"{newcomer} joins", after, state)
        group.leave("c2")
        last = group.wait_stable(after=after.generation + 1)
        show("c2 leaves", last, after)
        counts = sorted((len(ps) for ps in last.assignment.values()), reverse=True)
        console.print()
        print_wrapped(
            console,
            f"balanced: {'/'.join(map(str, counts))} partitions per consumer; partitions that changed "
            f"owner in all: {total_moves} (lower bound {total_bound})",
            hang="  ",
        )
    return 0
