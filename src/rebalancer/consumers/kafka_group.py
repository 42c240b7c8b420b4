"""A consumer group on real brokers, one process per member, driven from one controller.

Each member is a child process (`python -m rebalancer.consumers.kafka_group`), so that "kill" is a
real SIGKILL: no LeaveGroup, no last commit, exactly what a crashed consumer does. A member speaks
JSON lines on stdout (what it was assigned, every record it processed, its leader's plans); the
controller reads them on one thread per member and keeps the group's state behind one Condition,
which every reader notifies. The CLI's live demo, the benchmark and the tests drive groups with it.

Assignors: "flow" is `FlowAssignor` with `GracefulHandoff` (manual commits of processed offsets);
"range", "roundrobin" and "sticky" are aiokafka's own, run the way aiokafka documents them (auto
commit, no listener), which is what a user of those assignors has.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

log = logging.getLogger(__name__)

ASSIGNORS = ("flow", "range", "roundrobin", "sticky")


@dataclass(frozen=True)
class GroupState:
    """One stable assignment: every live member holds its partitions under one generation."""

    generation: int
    assignment: dict[str, tuple[int, ...]]
    at: float

    def owner_of(self) -> dict[int, str]:
        return {p: m for m, ps in self.assignment.items() for p in ps}

    def counts(self) -> dict[str, int]:
        return {m: len(ps) for m, ps in self.assignment.items()}


@dataclass
class _Member:
    name: str
    process: subprocess.Popen[str]
    instance_id: str | None
    generation: int = -1
    parts: tuple[int, ...] | None = None  # None while revoked / not yet assigned
    alive: bool = True
    ready: bool = False
    lines: list[str] = field(default_factory=list)  # its stderr, for error messages
    thread: threading.Thread | None = None


class GroupStuckError(RuntimeError):
    """The group did not settle in time; the message says what each member last reported."""


class LiveGroup:
    """Members of one consumer group on one topic, started, stopped and killed on request."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group: str,
        partitions: int,
        *,
        assignor: str = "flow",
        session_timeout_ms: int = 6000,
        heartbeat_interval_ms: int = 300,
        max_handoff_s: float = 5.0,
        handler_delay_s: float = 0.0,
        lag_weights: bool = False,
        hold: bool = False,
    ) -> None:
        if assignor not in ASSIGNORS:
            raise ValueError(f"assignor must be one of {', '.join(ASSIGNORS)}, got {assignor!r}")
        if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
            raise ValueError(f"partitions must be an int >= 1, got {partitions!r}")
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = group
        self.partitions = partitions
        self.assignor = assignor
        self._settings = {
            "session_timeout_ms": session_timeout_ms,
            "heartbeat_interval_ms": heartbeat_interval_ms,
            "max_handoff_s": max_handoff_s,
            "handler_delay_s": handler_delay_s,
            "lag_weights": lag_weights,
            "hold": hold,
        }
        self._changed = threading.Condition()
        self._members: dict[str, _Member] = {}
        self.processed: Counter[tuple[int, int]] = Counter()  # (partition, offset) -> times processed
        self.processed_by: dict[str, int] = {}
        self.first_by: dict[tuple[int, int], str] = {}  # (partition, offset) -> who processed it first
        self.committed_by: dict[str, dict[int, int]] = {}  # member -> partition -> next offset committed
        self.duplicates: list[tuple[int, int, str, str]] = []  # (partition, offset, first, again)
        self.events: list[dict[str, Any]] = []  # the leaders' plan reports, in arrival order
        self.last_state: GroupState | None = None
        self.leader: str | None = None  # the member whose assignor made the last plan ("flow" only)

    # ----- membership -------------------------------------------------------------------------------

    def join(self, name: str, instance_id: str | None = None) -> None:
        """Start member `name` (a new process); returns once it has started its consumer."""
        with self._changed:
            old = self._members.get(name)
            if old is not None and old.alive:
                raise ValueError(f"member {name!r} is already running")
        cmd = [
            sys.executable,
            "-m",
            "rebalancer.consumers.kafka_group",
            json.dumps(
                {
                    "bootstrap": self.bootstrap,
                    "topic": self.topic,
                    "group": self.group,
                    "name": name,
                    "assignor": self.assignor,
                    "instance_id": instance_id,
                    **self._settings,
                }
            ),
        ]
        process = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        member = _Member(name, process, instance_id)
        member.thread = threading.Thread(target=self._read, args=(member,), name=f"group-{name}", daemon=True)
        threading.Thread(target=self._read_stderr, args=(member,), daemon=True).start()
        with self._changed:
            self._members[name] = member
        member.thread.start()
        self._wait(lambda: member.ready or not member.alive, 60.0, f"member {name} to start")
        if not member.alive:
            raise GroupStuckError(f"member {name} exited at start: {' | '.join(member.lines[-5:])}")

    def leave(self, name: str, timeout_s: float = 60.0) -> None:
        """A graceful stop: the member commits, leaves the group and exits."""
        member = self._live(name)
        self._send(member, "stop")
        try:
            member.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._kill_process(member)
            raise GroupStuckError(f"member {name} did not stop within {timeout_s:.0f} s") from None
        self._mark_gone(member)

    def kill(self, name: str) -> int:
        """SIGKILL: the broker notices only when the member's session times out. Returns how many
        records it had processed beyond its last commit (known for "flow" members, which report their
        commits; 0 otherwise): at-least-once redelivers exactly those."""
        member = self._live(name)
        self._kill_process(member)
        self._mark_gone(member)
        with self._changed:
            committed = self.committed_by.get(name, {})
            return sum(1 for (p, o), who in self.first_by.items() if who == name and o >= committed.get(p, 0))

    def wait_progress(self, name: str, more_than: int, timeout_s: float = 120.0) -> None:
        """Block until member `name` has processed more than `more_than` records in all."""
        self._wait(lambda: self.processed_by.get(name, 0) > more_than, timeout_s, f"{name} to process records")

    def go(self) -> None:
        """Members started with `hold=True` start processing records now."""
        with self._changed:
            live = [m for m in self._members.values() if m.alive]
        for member in live:
            self._send(member, "go")

    @property
    def live(self) -> list[str]:
        with self._changed:
            return [m.name for m in self._members.values() if m.alive]

    def wait_stable(self, after: int = -1, timeout_s: float = 120.0) -> GroupState:
        """Block until every live member holds an assignment of one generation >= `after` (equal when
        nothing rebalances, as for a static member's restart), covering every partition exactly once.
        Pass the generation seen before a change plus one to wait for the rebalance it starts."""

        def stable() -> bool:
            live = [m for m in self._members.values() if m.alive]
            if not live or any(m.parts is None for m in live):
                return False
            gens = {m.generation for m in live}
            if len(gens) != 1 or next(iter(gens)) < after:
                return False
            held = [p for m in live for p in (m.parts or ())]
            return len(held) == len(set(held)) == self.partitions

        self._wait(stable, timeout_s, "the group to settle")
        with self._changed:
            live = [m for m in self._members.values() if m.alive]
            state = GroupState(live[0].generation, {m.name: m.parts or () for m in live}, time.monotonic())
            self.last_state = state
            return state

    def wait_processed(self, total: int, timeout_s: float = 120.0) -> None:
        """Block until `total` distinct records have been processed."""
        self._wait(lambda: len(self.processed) >= total, timeout_s, f"{total} records to be processed")

    def wait_caught_up(self, ends: Mapping[int, int], timeout_s: float = 300.0) -> int:
        """Block until the last record of every partition (`ends`: partition -> end offset) has been
        processed; returns the records below those that never were (lost: at-most-once). A record a
        killed member took but never processed, with its offset committed, is never redelivered."""
        last = {p: e - 1 for p, e in ends.items() if e > 0}
        self._wait(
            lambda: all((p, o) in self.processed for p, o in last.items()), timeout_s, "every partition's last record"
        )
        with self._changed:
            return sum(ends.values()) - len(self.processed)

    def close(self) -> None:
        """Stop every member still running (gracefully, then by SIGKILL)."""
        for name in self.live:
            try:
                self.leave(name, timeout_s=20.0)
            except GroupStuckError:
                pass
        with self._changed:
            members = list(self._members.values())
        for member in members:
            self._kill_process(member)

    def __enter__(self) -> LiveGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- plumbing ---------------------------------------------------------------------------------

    def _live(self, name: str) -> _Member:
        with self._changed:
            member = self._members.get(name)
        if member is None or not member.alive:
            raise ValueError(f"no running member {name!r}; running: {', '.join(self.live) or 'none'}")
        return member

    def _send(self, member: _Member, line: str) -> None:
        stdin = member.process.stdin
        if stdin is None:
            return
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            stdin.write(line + "\n")
            stdin.flush()

    def _kill_process(self, member: _Member) -> None:
        if member.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(member.process.pid, signal.SIGKILL)
            member.process.wait()

    def _mark_gone(self, member: _Member) -> None:
        if member.thread is not None:
            member.thread.join(timeout=10.0)
        with self._changed:
            member.alive = False
            member.parts = None
            self._changed.notify_all()

    def _wait(self, predicate: Any, timeout_s: float, what: str) -> None:
        with self._changed:
            if not self._changed.wait_for(predicate, timeout=timeout_s):
                report = "; ".join(
                    f"{m.name}: gen {m.generation} parts {list(m.parts) if m.parts is not None else 'none'}"
                    for m in self._members.values()
                    if m.alive
                )
                raise GroupStuckError(f"timed out after {timeout_s:.0f} s waiting for {what} ({report})")

    def _read_stderr(self, member: _Member) -> None:
        stream = member.process.stderr
        assert stream is not None
        for line in stream:
            with self._changed:
                member.lines.append(line.rstrip())
                del member.lines[:-50]

    def _read(self, member: _Member) -> None:
        stream = member.process.stdout
        assert stream is not None
        for line in stream:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            with self._changed:
                self._apply(member, msg)
                self._changed.notify_all()
        with self._changed:  # end of its stdout: the process is gone
            member.alive = False
            member.parts = None
            self._changed.notify_all()

    def _apply(self, member: _Member, msg: dict[str, Any]) -> None:
        kind = msg.get("e")
        if kind == "ready":
            member.ready = True
        elif kind == "assigned":
            member.generation = int(msg["gen"])
            member.parts = tuple(sorted(msg["parts"]))
        elif kind == "revoked":
            member.parts = None
        elif kind == "did":
            for p, o in msg["r"]:
                self.processed[(p, o)] += 1
                first = self.first_by.setdefault((p, o), member.name)
                if self.processed[(p, o)] > 1:
                    self.duplicates.append((p, o, first, member.name))
            self.processed_by[member.name] = self.processed_by.get(member.name, 0) + len(msg["r"])
        elif kind == "committed":
            mine = self.committed_by.setdefault(member.name, {})
            for p, o in msg["o"]:
                mine[p] = max(mine.get(p, 0), o)
        elif kind == "event":
            self.events.append({**msg, "member": member.name})
            if msg.get("kind") == "RebalancePlanned":
                self.leader = member.name


def moves_between(before: GroupState, after: GroupState) -> int:
    """Partitions whose owner changed while that owner is still a member: the handoffs."""
    old, new = before.owner_of(), after.owner_of()
    return sum(1 for p, o in old.items() if o in after.assignment and new.get(p) not in (None, o))


def lower_bound_between(before: GroupState, after: GroupState, partitions: int) -> int:
    """The fewest handoffs any ±1 plan needs from `before`'s owners to `after`'s members."""
    from rebalancer.balance.count import handoff_lower_bound

    counts = [len(before.assignment.get(m, ())) for m in after.assignment]
    return handoff_lower_bound(counts, partitions) if counts else 0


# ----- the member process ------------------------------------------------------------------------------


def _emit(out: IO[str], lock: threading.Lock, msg: Mapping[str, Any]) -> None:
    with lock:
        out.write(json.dumps(msg) + "\n")
        out.flush()


async def _member(cfg: dict[str, Any]) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.abc import ConsumerRebalanceListener

    from rebalancer.consumers.aiokafka_adapter import (
        RangePartitionAssignor,
        RoundRobinPartitionAssignor,
        StickyPartitionAssignor,
        group_generation,
    )
    from rebalancer.consumers.events import PartitionsReleased, describe_event
    from rebalancer.consumers.kafka import FlowAssignor, GracefulHandoff, LagWeights

    out, lock = sys.stdout, threading.Lock()
    loop = asyncio.get_running_loop()
    ours = cfg["assignor"] == "flow"
    weights = LagWeights() if cfg.get("lag_weights") else None

    def report(event: Any) -> None:
        _emit(out, lock, {"e": "event", "kind": type(event).__name__, "line": describe_event(event)})
        if isinstance(event, PartitionsReleased) and event.committed:
            _emit(out, lock, {"e": "committed", "o": [[p, o] for (_, p), o in event.committed.items()]})

    strategy: Any
    if ours:
        strategy = FlowAssignor(weights=weights, on_event=report, instance_id=cfg.get("instance_id"))
    else:
        strategy = {
            "range": RangePartitionAssignor,
            "roundrobin": RoundRobinPartitionAssignor,
            "sticky": StickyPartitionAssignor,
        }[cfg["assignor"]]
    consumer = AIOKafkaConsumer(
        bootstrap_servers=cfg["bootstrap"],
        group_id=cfg["group"],
        client_id=cfg["name"],
        group_instance_id=cfg.get("instance_id"),
        enable_auto_commit=not ours,
        auto_commit_interval_ms=1000,
        auto_offset_reset="earliest",
        session_timeout_ms=cfg["session_timeout_ms"],
        heartbeat_interval_ms=cfg["heartbeat_interval_ms"],
        max_poll_interval_ms=max(30_000, int(cfg["max_handoff_s"] * 3000)),
        partition_assignment_strategy=(strategy,),
    )
    await consumer.start()

    def generation() -> int:
        return group_generation(consumer)

    handoff = GracefulHandoff(consumer, max_handoff_s=cfg["max_handoff_s"], on_event=report) if ours else None

    class Reporter(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked: Any) -> None:
            if handoff is not None:
                await handoff.on_partitions_revoked(revoked)
            _emit(out, lock, {"e": "revoked"})

        async def on_partitions_assigned(self, assigned: Any) -> None:
            if handoff is not None:
                await handoff.on_partitions_assigned(assigned)
            _emit(out, lock, {"e": "assigned", "gen": generation(), "parts": sorted(tp.partition for tp in assigned)})

    if weights is not None:
        await weights.refresh(consumer, [cfg["topic"]])
    consumer.subscribe([cfg["topic"]], listener=Reporter())
    go = asyncio.Event()
    stop = asyncio.Event()
    if not cfg.get("hold"):
        go.set()

    def read_commands() -> None:
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "go":
                loop.call_soon_threadsafe(go.set)
            elif cmd == "stop":
                loop.call_soon_threadsafe(stop.set)
                return
        loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=read_commands, daemon=True).start()
    _emit(out, lock, {"e": "ready"})
    delay = float(cfg["handler_delay_s"])

    async def handle(record: Any) -> None:
        if delay:
            await asyncio.sleep(delay)
        # Reported as soon as it is done, so that a kill shows exactly what was processed and not committed.
        _emit(out, lock, {"e": "did", "r": [[record.partition, record.offset]]})

    async def refresh_weights() -> None:
        while weights is not None and not stop.is_set():
            with contextlib.suppress(Exception):
                await weights.refresh(consumer, [cfg["topic"]])
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)

    refresher = asyncio.create_task(refresh_weights())
    try:
        # A held member is in the group (aiokafka heartbeats in the background) but takes no record.
        await asyncio.wait(
            {asyncio.create_task(go.wait()), asyncio.create_task(stop.wait())}, return_when=asyncio.FIRST_COMPLETED
        )
        while not stop.is_set():
            records = await consumer.getmany(timeout_ms=200, max_records=200)
            for tp_records in records.values():
                for record in tp_records:
                    if handoff is not None:
                        await handoff.process(record, handle)
                    else:
                        await handle(record)
            if handoff is not None:
                with contextlib.suppress(Exception):
                    done = await handoff.commit()
                    if done:
                        _emit(out, lock, {"e": "committed", "o": [[tp.partition, o] for tp, o in done.items()]})
    finally:
        refresher.cancel()
        if handoff is not None:
            with contextlib.suppress(Exception):
                await handoff.commit()
        await consumer.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rebalancer.consumers.kafka_group")
    parser.add_argument("config", help="the member's settings, as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
    asyncio.run(_member(json.loads(args.config)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
