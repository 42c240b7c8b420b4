"""Seed 003's partitioned-queue rules on real Kafka consumer groups (aiokafka, classic protocol).

`FlowAssignor` is a partition assignor: the group leader plans each topic with the same planners as
`PartitionedQueue` (`rebalancer.balance`), so partitions are balanced to ±1 with exactly the fewest
owner changes, or by load when `weights` is given. `GracefulHandoff` is a rebalance listener: on
revoke it lets in-flight work finish, commits it, then lets the partitions go, within max_handoff_s.

Rules, in the order they apply:
1. The previous owners travel in the member metadata as the last plan a member received, tagged with
   its round (the leader numbers its plans; aiokafka does not hand assignors Kafka's generation id).
   The newest round wins, so a member that missed a rebalance cannot resurrect an old owner.
2. A member is known by `instance_id` when it has one (static membership), else by its member id, so
   a static member that restarts gets its partitions back even when it was the leader.
3. Members are ordered by the round they joined in: the earliest are members, the latest beyond the
   partition count are standby, and a standby takes a departed owner's partitions whole.
4. Weights that are not finite numbers >= 0 for every partition never crash the group: that topic is
   balanced by count instead, with one warning naming the partition and the value. A topic whose
   loads are all 0 (a caught-up group's lag) is balanced by count too, without a warning: a load plan
   of nothing would give one member every partition. Otherwise a partition weighs at least
   ZERO_LOAD_SHARE of the mean partition's load: a caught-up partition still has a consumer to
   keep, and with five loads of 0 and one of 1 a new member would get nothing, moving no 0 being
   worth a move.
5. Each instance keeps its own state; two assignors in one process share nothing.

`GracefulHandoff`'s rules:
6. A record runs only while its partition is held and only once per owner: one below the offset the
   group has committed (read on assignment) or this member processed is skipped and counted.
7. A commit never passes a record still running or one whose handler raised: that record holds its
   partition's commit until a retry of it succeeds. Later records still run; if the partition moves
   first, the next owner starts from the failed record and runs them again (at least once).
8. The revoke ends within max_handoff_s: in-flight work gets nine tenths of it and the commit the
   rest; past it the release goes ahead and the event says cut_short.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from rebalancer.balance.checks import describe, is_real
from rebalancer.balance.count import plan_count_balance
from rebalancer.balance.metrics import max_over_mean
from rebalancer.balance.rebalance import plan_rebalance
from rebalancer.consumers.aiokafka_adapter import (
    AbstractPartitionAssignor,
    ClusterMetadata,
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from rebalancer.consumers.events import (
    Event,
    FlowStandby,
    HandoffStarted,
    PartitionsAssigned,
    PartitionsReleased,
    PartitionsResumed,
    RebalancePlanned,
)

log = logging.getLogger(__name__)

__all__ = ["FlowAssignor", "FlowPlan", "GracefulHandoff", "LagWeights", "TopicPlan"]

WeightsFn = Callable[[Sequence[TopicPartition]], Mapping[TopicPartition, float]]
EventSink = Callable[[Event], object]
CommitFn = Callable[[dict[TopicPartition, int]], Awaitable[None] | None]

ZERO_LOAD_SHARE = 0.01  # rule 4: a partition's least weight, as a share of the mean partition load
_FORMAT = 1  # the user_data layout below; a member that sends another one claims nothing


@dataclass(frozen=True)
class TopicPlan:
    """One topic's plan: who owns what, what moved, and the fewest moves possible."""

    topic: str
    assignment: dict[str, tuple[int, ...]]
    moves: tuple[tuple[int, str, str], ...]
    assigned: tuple[tuple[int, str], ...]
    lower_bound: int
    standby: tuple[str, ...]
    weighted: bool
    fallback: str | None = None
    load_ratio: float | None = None

    @property
    def moved(self) -> int:
        """Partitions taken from a live owner: what the consumers hand off."""
        return len(self.moves)


@dataclass(frozen=True)
class FlowPlan:
    """The leader's plan for one rebalance, per topic. Members are named by their key (rule 2)."""

    round: int
    topics: dict[str, TopicPlan]
    members: tuple[str, ...]
    standby: tuple[str, ...]  # members given no partition of any topic (a TopicPlan's: of that topic)
    at: float

    @property
    def moved(self) -> int:
        return sum(t.moved for t in self.topics.values())

    @property
    def lower_bound(self) -> int:
        """For count balance, the fewest moves any ±1 plan needs; `moved` equals it."""
        return sum(t.lower_bound for t in self.topics.values())


@dataclass
class _Table:
    """The last plan a member received: the round, every member's key and join round, and owners."""

    round: int = 0
    keys: list[str] = field(default_factory=list)
    since: list[int] = field(default_factory=list)
    owners: dict[str, list[int]] = field(default_factory=dict)  # topic -> key index per partition, -1 none

    def to_json(self) -> dict[str, Any]:
        return {"round": self.round, "keys": self.keys, "since": self.since, "owners": self.owners}

    @classmethod
    def from_json(cls, data: object) -> _Table | None:
        """None for anything malformed: a bad claim is ignored, never trusted."""
        if not isinstance(data, dict):
            return None
        rnd, keys, since, owners = (data.get(k) for k in ("round", "keys", "since", "owners"))
        if not (isinstance(rnd, int) and isinstance(keys, list) and isinstance(since, list)):
            return None
        if not (all(isinstance(k, str) for k in keys) and len(since) == len(keys)):
            return None
        if not (all(isinstance(s, int) for s in since) and isinstance(owners, dict)):
            return None
        clean: dict[str, list[int]] = {}
        for topic, idx in owners.items():
            if not (isinstance(idx, list) and all(isinstance(i, int) and -1 <= i < len(keys) for i in idx)):
                return None
            clean[str(topic)] = idx
        return cls(rnd, keys, since, clean)


def _decode(user_data: bytes) -> dict[str, Any]:
    if not user_data:
        return {}
    try:
        data = json.loads(user_data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("format") == _FORMAT else {}


class FlowAssignor(AbstractPartitionAssignor):
    """An aiokafka assignor that keeps every partition it can with its owner and balances the rest.

    Pass one instance per consumer (`partition_assignment_strategy=(FlowAssignor(),)`). `weights`, when
    given, is called on the leader with a topic's partitions and returns each one's load (lag, bytes
    per second...); the topic is then balanced by load with the fewest moves that reach the best max
    load. `on_event` receives the `rebalancer.consumers` events of each plan this member makes as
    leader. `instance_id` should equal the consumer's `group_instance_id` when it has one (rule 2).
    """

    name = "rebalancer-flow"
    version = 0

    def __init__(
        self,
        weights: WeightsFn | None = None,
        on_event: EventSink | None = None,
        *,
        instance_id: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if weights is not None and not callable(weights):
            raise ValueError(
                f"weights must be None or a callable giving {{TopicPartition: load}}, got {describe(weights)}"
            )
        if on_event is not None and not callable(on_event):
            raise ValueError(f"on_event must be None or a callable, got {describe(on_event)}")
        if instance_id is not None and (not isinstance(instance_id, str) or not instance_id):
            raise ValueError(f"instance_id must be None or a non-empty str, got {instance_id!r}")
        if not callable(clock):
            raise ValueError(f"clock must be a callable returning seconds, got {describe(clock)}")
        self._weights = weights
        self._on_event = on_event
        self._instance_id = instance_id
        self._clock = clock
        self._lock = threading.Lock()  # aiokafka calls from its loop; a user may read from another thread
        self._table = _Table()
        self._last_plan: FlowPlan | None = None
        self._assigned: tuple[TopicPartition, ...] = ()

    def __repr__(self) -> str:
        weighted = "by load" if self._weights is not None else "by count"
        return f"FlowAssignor({weighted}, instance_id={self._instance_id!r}, round={self._table.round})"

    @property
    def last_plan(self) -> FlowPlan | None:
        """The plan this member made the last time it led a rebalance (None if it never led)."""
        with self._lock:
            return self._last_plan

    @property
    def assigned(self) -> tuple[TopicPartition, ...]:
        """What the last rebalance gave this member."""
        with self._lock:
            return self._assigned

    @property
    def round(self) -> int:
        """The round of the last plan this member received (0 before its first)."""
        with self._lock:
            return self._table.round

    # ----- the protocol: aiokafka calls these -------------------------------------------------------

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        with self._lock:
            claim = {"format": _FORMAT, "me": self._instance_id, "table": self._table.to_json()}
        return ConsumerProtocolMemberMetadata(self.version, sorted(topics), json.dumps(claim).encode())

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        table = _Table.from_json(_decode(assignment.user_data).get("table"))
        with self._lock:
            if table is not None:
                self._table = table
            self._assigned = tuple(sorted(assignment.partitions()))

    def assign(
        self,
        cluster: ClusterMetadata,
        members: Mapping[str, ConsumerProtocolMemberMetadata],
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        now = self._clock()
        keys, newest = self._member_keys(members)
        round_ = newest.round + 1
        old_index = {k: i for i, k in enumerate(newest.keys)}
        since = {k: newest.since[old_index[k]] if k in old_index else round_ for k in keys.values()}
        order = sorted(keys, key=lambda m: (since[keys[m]], keys[m]))
        topics = sorted({t for md in members.values() for t in md.subscription})
        plans: dict[str, TopicPlan] = {}
        owners_out: dict[str, list[str | None]] = {}
        for topic in topics:
            flows = [keys[m] for m in order if topic in members[m].subscription]
            partitions = cluster.partitions_for_topic(topic)
            if not partitions:
                log.warning("topic %r has no partition metadata: nothing of it is assigned this round", topic)
                continue
            count = max(partitions) + 1
            prev = self._previous_owners(newest, topic, count, set(flows))
            topic_plan, owners = self._plan_topic(topic, sorted(partitions), count, prev, flows)
            plans[topic] = topic_plan
            owners_out[topic] = owners
        held = {k for owners in owners_out.values() for k in owners if k is not None}
        standby = tuple(keys[m] for m in order if keys[m] not in held)
        key_list = [keys[m] for m in order]
        table = _Table(
            round=round_,
            keys=key_list,
            since=[since[k] for k in key_list],
            owners={
                t: [key_list.index(o) if o is not None else -1 for o in owners] for t, owners in owners_out.items()
            },
        )
        user_data = json.dumps({"format": _FORMAT, "table": table.to_json()}).encode()
        result: dict[str, ConsumerProtocolMemberAssignment] = {}
        for member_id in members:
            mine = [
                (t, [p for p, o in enumerate(owners) if o == keys[member_id]]) for t, owners in owners_out.items()
            ]
            result[member_id] = ConsumerProtocolMemberAssignment(
                self.version, [(t, ps) for t, ps in mine if ps], user_data
            )
        plan = FlowPlan(round_, plans, tuple(key_list), standby, now)
        was_standby = self._was_standby(newest)
        with self._lock:
            self._last_plan = plan
        self._report(plan, was_standby)
        log.info(
            "round %d: %d members (%d standby), %d partitions moved (lower bound %d)",
            round_,
            len(key_list),
            len(standby),
            plan.moved,
            plan.lower_bound,
        )
        return result

    # ----- planning ---------------------------------------------------------------------------------

    def _member_keys(self, members: Mapping[str, ConsumerProtocolMemberMetadata]) -> tuple[dict[str, str], _Table]:
        """Each member's key (rule 2) and the newest table any member carries (rule 1)."""
        keys: dict[str, str] = {}
        taken: set[str] = set()
        newest = _Table()
        for member_id in sorted(members):
            claim = _decode(members[member_id].user_data)
            me = claim.get("me")
            key = me if isinstance(me, str) and me and me not in taken else member_id
            if key in taken:  # a member id equal to another member's instance id: keep both apart
                key = f"{member_id}#{len(taken)}"
            if isinstance(me, str) and me and key != me:
                log.warning("two members claim instance_id %r: %s is planned by its member id", me, member_id)
            keys[member_id] = key
            taken.add(key)
            table = _Table.from_json(claim.get("table"))
            if table is not None and table.round > newest.round:
                newest = table
        return keys, newest

    @staticmethod
    def _previous_owners(newest: _Table, topic: str, count: int, live: set[str]) -> list[str | None]:
        idx = newest.owners.get(topic, [])
        prev: list[str | None] = [None] * count
        for p in range(min(count, len(idx))):
            key = newest.keys[idx[p]] if idx[p] >= 0 else None
            prev[p] = key if key in live else None
        return prev

    @staticmethod
    def _was_standby(newest: _Table) -> set[str]:
        held = {newest.keys[i] for idx in newest.owners.values() for i in idx if i >= 0}
        return {k for k in newest.keys if k not in held}

    def _plan_topic(
        self, topic: str, partitions: list[int], count: int, prev: list[str | None], flows: list[str]
    ) -> tuple[TopicPlan, list[str | None]]:
        owners: list[str | None] = [None] * count
        if not flows:
            return TopicPlan(topic, {}, (), (), 0, (), False), owners
        load, fallback = self._topic_weights(topic, partitions)
        current = {p: prev[p] for p in partitions}
        counted = plan_count_balance(current, flows)
        lower_bound = counted.lower_bound
        if load is None:
            for p in partitions:
                owners[p] = prev[p]
            for m in (*counted.assignments, *counted.handoffs):
                owners[m.partition] = str(m.to_flow)
        else:
            index = {f: i for i, f in enumerate(flows)}
            try:
                floor = ZERO_LOAD_SHARE * sum(load.values()) / len(partitions)  # rule 4
                by_load = plan_rebalance(
                    [max(load[p], floor) for p in partitions],
                    [index[prev[p]] if prev[p] is not None else -1 for p in partitions],  # type: ignore[index]
                    len(flows),
                )
            except (ValueError, OverflowError, ArithmeticError) as exc:  # loads too large or small to sum
                _, fallback = self._fallback(topic, f"weights could not be planned: {exc}")
                return self._plan_topic_by_count(topic, partitions, prev, flows, counted, lower_bound, fallback)
            for p, w in zip(partitions, by_load.owner):
                owners[p] = flows[w]
        moves = tuple((p, str(prev[p]), str(owners[p])) for p in partitions if prev[p] not in (None, owners[p]))
        assigned = tuple((p, str(owners[p])) for p in partitions if prev[p] is None)
        assignment = {f: tuple(p for p in partitions if owners[p] == f) for f in flows}
        ratio = None
        if load is not None:
            ratio = max_over_mean([sum(load[p] for p in ps) for ps in assignment.values()])
        plan = TopicPlan(
            topic,
            assignment,
            moves,
            assigned,
            lower_bound,
            tuple(f for f in flows if not assignment[f]),
            load is not None,
            fallback,
            ratio,
        )
        return plan, owners

    def _plan_topic_by_count(
        self, topic: str, partitions: list[int], prev: list[str | None], flows: list[str],
        counted: Any, lower_bound: int, fallback: str | None,
    ) -> tuple[TopicPlan, list[str | None]]:
        """The count plan, for a topic whose loads could not be planned (rule 4)."""
        owners: list[str | None] = list(prev)
        for m in (*counted.assignments, *counted.handoffs):
            owners[m.partition] = str(m.to_flow)
        moves = tuple((p, str(prev[p]), str(owners[p])) for p in partitions if prev[p] not in (None, owners[p]))
        assigned = tuple((p, str(owners[p])) for p in partitions if prev[p] is None)
        assignment = {f: tuple(p for p in partitions if owners[p] == f) for f in flows}
        standby = tuple(f for f in flows if not assignment[f])
        return TopicPlan(topic, assignment, moves, assigned, lower_bound, standby, False, fallback), owners

    def _topic_weights(self, topic: str, partitions: list[int]) -> tuple[dict[int, float] | None, str | None]:
        """Rule 4: each partition's load, or None (count balance) with the reason, never an exception."""
        if self._weights is None:
            return None, None
        tps = [TopicPartition(topic, p) for p in partitions]
        try:
            given = self._weights(tps)
        except Exception as exc:  # the user's callable: its failure must not fail the group
            return self._fallback(topic, f"weights raised {type(exc).__name__}: {exc}")
        if not isinstance(given, Mapping):
            return self._fallback(topic, f"weights returned a {type(given).__name__}, not a mapping")
        out: dict[int, float] = {}
        for tp in tps:
            try:
                if tp not in given:
                    return self._fallback(topic, f"weights gave no load for partition {tp.partition}")
                v = given[tp]
            except Exception as exc:  # a mapping whose lookup raises: the same as a callable that raises
                return self._fallback(topic, f"weights raised {type(exc).__name__}: {exc}")
            if not is_real(v) or v < 0 or not math.isfinite(float(v)):
                return self._fallback(topic, f"weights[{tp.partition}] must be a finite number >= 0, got {v!r}")
            out[tp.partition] = float(v)
        if not any(out.values()):  # rule 4: nothing to weigh; count balance is the even plan
            log.info("topic %r balanced by count this round: every partition's load is 0", topic)
            return None, "every partition's load is 0"
        return out, None

    @staticmethod
    def _fallback(topic: str, why: str) -> tuple[None, str]:
        log.warning("topic %r balanced by count this round: %s", topic, why)
        return None, why

    def _report(self, plan: FlowPlan, was_standby: set[str]) -> None:
        if self._on_event is None:
            return
        now = plan.at
        events: list[Event] = []
        for t in plan.topics.values():
            events.append(
                RebalancePlanned(tuple(t.assignment), sum(len(ps) for ps in t.assignment.values()),
                                 t.moved, len(t.assigned), now, t.topic)
            )
            by_flow: dict[str, list[int]] = {}
            for p, f in t.assigned:
                by_flow.setdefault(f, []).append(p)
            events.extend(PartitionsAssigned(f, tuple(ps), now, t.topic) for f, ps in by_flow.items())
            events.extend(HandoffStarted(p, a, b, now, t.topic) for p, a, b in t.moves)
        standby = set(plan.standby)
        events.extend(FlowStandby(k, True, now) for k in plan.standby if k not in was_standby)
        events.extend(FlowStandby(k, False, now) for k in plan.members if k in was_standby and k not in standby)
        for event in events:
            try:
                self._on_event(event)
            except Exception as exc:  # the user's callback runs inside aiokafka's join: it must not fail it
                log.warning("on_event raised %s: %s (the plan stands)", type(exc).__name__, exc)


class LagWeights:
    """Each partition's lag (end offset minus committed offset) as `FlowAssignor` weights.

    The assignor calls its weights inside aiokafka's join, where nothing may await; so the lag is
    fetched ahead by `await refresh(consumer, topics)` (call it before `subscribe` and then every few
    seconds) and the call only reads the last figures. A partition never refreshed is missing, and the
    assignor then balances that topic by count (rule 4).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lag: dict[TopicPartition, int] = {}

    def __repr__(self) -> str:
        return f"LagWeights({len(self._lag)} partitions)"

    async def refresh(self, consumer: Any, topics: Iterable[str]) -> dict[TopicPartition, int]:
        """Fetch the lag of every partition of `topics` (a list of names) and keep it for the assignor."""
        if isinstance(topics, str | bytes):
            raise ValueError(f"topics must be a list of topic names, not one name, got {topics!r}")
        tps: list[TopicPartition] = []
        for topic in sorted(set(topics)):
            partitions = consumer.partitions_for_topic(topic)
            if partitions is None:
                await consumer.topics()  # loads the cluster's metadata
                partitions = consumer.partitions_for_topic(topic)
            tps.extend(TopicPartition(topic, p) for p in sorted(partitions or ()))
        if not tps:
            return {}
        ends = await consumer.end_offsets(tps)
        starts = await consumer.beginning_offsets(tps)
        lag: dict[TopicPartition, int] = {}
        for tp in tps:
            committed = await consumer.committed(tp)
            lag[tp] = max(0, ends[tp] - (starts[tp] if committed is None else committed))
        with self._lock:
            self._lag.update(lag)
        return lag

    def __call__(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, float]:
        with self._lock:
            return {tp: float(self._lag[tp]) for tp in partitions if tp in self._lag}


# ----- the handoff -----------------------------------------------------------------------------------


# Rule 8: the share of max_handoff_s in-flight work may use; the commit gets the rest.
DRAIN_SHARE = 0.9


@dataclass
class _Partition:
    """One held partition: records running now, and the next offset safe to commit."""

    in_flight: set[int] = field(default_factory=set)
    done_to: int | None = None  # one past the highest offset processed
    committed: int | None = None
    releasing: bool = False
    failed: set[int] = field(default_factory=set)  # offsets whose handler raised, not yet retried
    # Reading the group's committed offset, started by the first record after the assignment; every
    # record of the partition waits for it, also those processed concurrently with the first.
    group_read: asyncio.Task[None] | None = None


class GracefulHandoff(ConsumerRebalanceListener):
    """Revoke = let in-flight work finish, commit it, release; within `max_handoff_s` (seed 003).

    Process every record through `await handoff.process(record, handler)`: it runs the handler only
    while the record's partition is held, tracks it as in flight, and records its offset as done.
    aiokafka's classic protocol revokes every partition on every rebalance; a partition that keeps its
    owner resumes from the offset committed here, so nothing is processed twice. Past `max_handoff_s`
    the release goes ahead, the in-flight offsets are not committed (the next owner gets them again),
    and the event says `cut_short`. Keep `max_handoff_s` below the consumer's `max_poll_interval_ms`.

    `commit` receives `{TopicPartition: next offset}` and stores it; the default commits to Kafka with
    the consumer (`enable_auto_commit=False` on the consumer, so that only processed offsets commit)
    and, on assignment, reads the group's committed offset, so that a record this member fetched
    before the partition went away and came back is not processed again (rules 6 to 8 of the module).
    """

    def __init__(
        self,
        consumer: Any,
        commit: CommitFn | None = None,
        max_handoff_s: float = 10.0,
        on_event: EventSink | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (is_real(max_handoff_s) and 0 < float(max_handoff_s) < math.inf):
            raise ValueError(f"max_handoff_s must be a finite number of seconds > 0, got {max_handoff_s!r}")
        if commit is not None and not callable(commit):
            raise ValueError(f"commit must be None or a callable, got {describe(commit)}")
        if on_event is not None and not callable(on_event):
            raise ValueError(f"on_event must be None or a callable, got {describe(on_event)}")
        if not callable(clock):
            raise ValueError(f"clock must be a callable returning seconds, got {describe(clock)}")
        if commit is None and not callable(getattr(consumer, "commit", None)):
            raise ValueError(
                f"consumer must be an aiokafka consumer (with commit=None, offsets are committed through "
                f"it), got {describe(consumer)}"
            )
        self._consumer = consumer
        self._commit_fn = commit
        self.max_handoff_s = float(max_handoff_s)
        self._on_event = on_event
        self._clock = clock
        self._held: dict[TopicPartition, _Partition] = {}
        # What this member last committed per partition, kept across revokes: a partition that comes
        # back skips any record below it (one fetched before the rebalance and handed over late).
        self._last_commit: dict[TopicPartition, int] = {}
        self._changed: asyncio.Condition | None = None  # made in the consumer's loop, on first use
        self.processed = 0
        self.skipped = 0
        self.cut_short = 0
        self.commit_failures = 0
        self.failed = 0

    def __repr__(self) -> str:
        return (
            f"GracefulHandoff(max_handoff_s={self.max_handoff_s}, held={len(self._held)}, "
            f"processed={self.processed}, skipped={self.skipped}, failed={self.failed}, cut_short={self.cut_short})"
        )

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    @property
    def held(self) -> frozenset[TopicPartition]:
        """Partitions this member holds now and processes records of."""
        return frozenset(tp for tp, st in self._held.items() if not st.releasing)

    async def process(self, record: Any, handler: Callable[[Any], Any]) -> bool:
        """Run `handler(record)` (a function or a coroutine function) unless the record must be skipped.

        Skipped, returning False: a record of a partition not held (revoked while the record was in the
        user's hands), or one at an offset already processed here or by the group. Both are counted in
        `skipped`. A handler that raises: the exception reaches the caller, `failed` counts it, and the
        partition's commit stops below that record until a retry of it succeeds (rule 7).
        """
        tp = TopicPartition(record.topic, record.partition)
        state = self._held.get(tp)
        if state is not None and state.group_read is None:
            state.group_read = asyncio.ensure_future(self._read_group_offset(tp, state))
        if state is not None and state.group_read is not None and not state.group_read.done():
            await state.group_read
            state = self._held.get(tp)  # the read awaited: a revoke may have come in meanwhile
        done = state is not None and state.done_to is not None and record.offset < state.done_to
        if state is None or state.releasing or (done and record.offset not in state.failed):
            self.skipped += 1
            return False
        if record.offset in state.in_flight:
            self.skipped += 1
            return False
        state.in_flight.add(record.offset)  # no await before this line: a revoke cannot slip in
        try:
            result = handler(record)
            if inspect.isawaitable(result):
                await result
        except BaseException:
            state.in_flight.discard(record.offset)
            state.failed.add(record.offset)
            self.failed += 1
            await self._notify()
            raise
        state.in_flight.discard(record.offset)
        state.failed.discard(record.offset)
        state.done_to = max(state.done_to or 0, record.offset + 1)
        self.processed += 1
        await self._notify()
        return True

    async def _notify(self) -> None:
        cond = self._condition()
        async with cond:
            cond.notify_all()

    def _safe_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The next offset to commit per partition: below every record still running or failed."""
        out: dict[TopicPartition, int] = {}
        for tp in partitions:
            st = self._held.get(tp)
            if st is None or st.done_to is None:
                continue
            offset = min([*st.in_flight, *st.failed, st.done_to])
            if st.committed is None or offset > st.committed:
                out[tp] = offset
        return out

    async def commit(self) -> dict[TopicPartition, int]:
        """Commit what has been processed on the held partitions; returns what was committed."""
        offsets = self._safe_offsets(self.held)
        if offsets:
            await self._store(offsets)
        return offsets

    async def _store(self, offsets: dict[TopicPartition, int]) -> None:
        if self._commit_fn is None:
            await self._consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()})
        else:
            result = self._commit_fn(dict(offsets))
            if inspect.isawaitable(result):
                await result
        for tp, o in offsets.items():
            self._last_commit[tp] = o
            if tp in self._held:
                self._held[tp].committed = o

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        mine = sorted(tp for tp in revoked if tp in self._held)
        if not mine:
            return
        start = self._clock()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_handoff_s  # rule 8: the budget, on the loop's own clock
        for tp in mine:
            self._held[tp].releasing = True
        cond = self._condition()

        def drained() -> bool:
            return not any(self._held[tp].in_flight for tp in mine)

        cut = False
        async with cond:
            try:
                await asyncio.wait_for(cond.wait_for(drained), timeout=self.max_handoff_s * DRAIN_SHARE)
            except TimeoutError:
                cut = True
        left = sum(len(self._held[tp].in_flight) for tp in mine)
        offsets = self._safe_offsets(mine)
        error = None
        if offsets:
            budget = max(deadline - loop.time(), 0.0)
            try:
                await asyncio.wait_for(self._store(offsets), timeout=budget)
            except TimeoutError:
                cut = True
                error = f"TimeoutError: the commit did not finish within max_handoff_s ({self.max_handoff_s:g} s)"
            except Exception as exc:  # a commit refused by the group: redelivered later, and said so
                error = f"{type(exc).__name__}: {exc}"
            if error is not None:
                self.commit_failures += 1
                log.warning("commit on revoke failed for %d partitions: %s", len(offsets), error)
        waited = self._clock() - start
        cut = cut or waited > self.max_handoff_s  # a commit that blocked the loop overran the budget
        if cut:
            self.cut_short += 1
            log.warning(
                "handoff cut short after %.1f s (max_handoff_s %g): %d records still in flight",
                waited, self.max_handoff_s, left,
            )
        for tp in mine:
            del self._held[tp]
        self._emit(
            PartitionsReleased(
                tuple((tp.topic, tp.partition) for tp in mine),
                {(tp.topic, tp.partition): o for tp, o in offsets.items()} if error is None else {},
                left,
                cut,
                round(waited, 6),
                self._clock(),
                error,
            )
        )

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        fresh = sorted(tp for tp in assigned if tp not in self._held)
        for tp in fresh:
            last = self._last_commit.get(tp)
            self._held[tp] = _Partition(done_to=last, committed=last)
        if fresh:
            self._emit(PartitionsResumed(tuple((tp.topic, tp.partition) for tp in fresh), self._clock()))

    async def _read_group_offset(self, tp: TopicPartition, state: _Partition) -> None:
        """Rule 6: the group's committed offset for `tp`, read once per assignment before its first
        record (in the consumer's loop, never inside the rebalance, which a remote call would hold
        up). Another owner may have gone further while the partition was away. A custom `commit`
        keeps its own store; a read that fails or outlasts max_handoff_s is logged, and only what this
        member committed itself counts."""
        committed = getattr(self._consumer, "committed", None)
        if self._commit_fn is not None or not callable(committed):
            return
        try:
            offset = await asyncio.wait_for(committed(tp), timeout=self.max_handoff_s)
        except Exception as exc:  # the partition resumes from Kafka's position all the same
            log.warning("reading the committed offset of %s-%d failed: %s: %s", tp.topic, tp.partition,
                        type(exc).__name__, exc)
            return
        if isinstance(offset, int) and offset >= 0 and (state.done_to is None or offset > state.done_to):
            state.done_to = offset
            state.committed = offset

    def _emit(self, event: Event) -> None:
        if self._on_event is not None:
            self._on_event(event)


def keys_of(plan: FlowPlan) -> dict[str, dict[str, tuple[int, ...]]]:
    """{member key: {topic: partitions}}: a plan as a table, for printing and tests."""
    out: dict[str, dict[str, tuple[int, ...]]] = {k: {} for k in plan.members}
    for t in plan.topics.values():
        for k, ps in t.assignment.items():
            if ps:
                out[k][t.topic] = ps
    return out

