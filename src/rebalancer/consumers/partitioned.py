"""The partitioned-queue coordinator: which consumer flow owns which partition, and how that changes.

A pure model of Solace's partitioned queues (holddown, graceful one-at-a-time handoff, statuses) with
exact minimal movement from `rebalancer.balance.count`. Time only moves when the caller passes `now`;
a simulation passes virtual seconds, a live system passes `time.monotonic()`. Timers that fall due
between two calls are processed at their own instants, so the outcome does not depend on how often
the caller polls.

Not thread-safe: a caller that shares one instance between threads serialises every call.
"""

from __future__ import annotations

import math
from bisect import insort
from collections import deque
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rebalancer.balance.checks import as_1d, describe, is_real, is_sequence
from rebalancer.balance.count import Move, plan_count_balance
from rebalancer.consumers.events import (
    AccessTypeChanged,
    Event,
    FlowChangeUpdate,
    FlowStandby,
    FlowUnbound,
    HandoffAborted,
    HandoffCompleted,
    HandoffStarted,
    PartitionsAssigned,
    PartitionsRemoved,
    RebalancePlanned,
    ScaleStatusChanged,
    StatusChanged,
)

FlowId = Hashable

READY = "ready"
HOLDDOWN = "holddown"
REBALANCING = "rebalancing"
SCALING_UP = "scaling-up"
SCALING_DOWN = "scaling-down"
ACCESS_TYPES = ("exclusive", "non-exclusive")


@dataclass(frozen=True, slots=True)
class Handoff:
    """The one handoff in flight: `partition` is paused until its unacked count is 0 or `deadline`."""

    partition: int
    from_flow: FlowId
    to_flow: FlowId
    started_at: float
    deadline: float


class PartitionedQueue:
    """Partitions 0..N-1 balanced over bound consumer flows, each holding the same count ±1."""

    def __init__(
        self,
        partition_count: int,
        rebalance_delay_s: float = 5.0,
        max_handoff_time_s: float = 3.0,
        exclusive: bool = False,
        weights: Mapping[int, float] | Sequence[float] | None = None,
        *,
        sliding_holddown: bool = False,
    ) -> None:
        _check_count("partition_count", partition_count)
        if not isinstance(exclusive, bool):
            raise ValueError(f"exclusive must be a bool, got {exclusive!r}")
        if not isinstance(sliding_holddown, bool):
            raise ValueError(f"sliding_holddown must be a bool, got {sliding_holddown!r}")
        _check_duration("rebalance_delay_s", rebalance_delay_s)
        # math.inf is allowed: a handoff then never completes by force (no two flows ever overlap).
        _check_duration("max_handoff_time_s", max_handoff_time_s, allow_inf=True)
        self.rebalance_delay_s = float(rebalance_delay_s)
        self.max_handoff_time_s = float(max_handoff_time_s)
        self.exclusive = exclusive
        # Solace: the delay is the longest time from the first to the last change. Sliding restarts it
        # on every change instead, which steady churn can postpone forever; kept as an option only.
        self.sliding_holddown = sliding_holddown
        self._count = partition_count
        self._target_count = partition_count
        self._owner: list[FlowId | None] = [None] * partition_count
        self._unacked: list[int] = [0] * partition_count
        self._prev_owner: dict[int, FlowId] = {}
        self._members: dict[FlowId, set[int]] = {}
        self._standby: list[tuple[int, FlowId]] = []
        self._seq: dict[FlowId, int] = {}
        self._next_seq = 0
        self._status = READY
        self._scale_status = READY
        self._holddown_until = -math.inf
        self._need_plan = False
        self._moves: deque[Move] = deque()
        self._handoff: Handoff | None = None
        self._draining: dict[int, float] = {}
        self._events: list[Event] = []
        self._handoff_count = 0
        self._removed_unacked_total = 0
        self._weights: dict[int, float] | None = None
        self._now = -math.inf
        if weights is not None:
            self.set_weights(weights)

    # ----- membership and scaling -------------------------------------------------------------------

    def bind(self, flow: FlowId, now: float) -> None:
        """A consumer flow binds: a member while there are fewer flows than partitions, else standby."""
        self._advance(now)
        _check_flow(flow)
        if flow in self._seq:
            raise ValueError(f"flow {flow!r} is already bound")
        self._seq[flow] = self._next_seq
        self._next_seq += 1
        if len(self._members) < self._capacity():
            self._members[flow] = set()
            # A flow back within the holddown takes its partitions back: no handoff was needed.
            back = sorted(p for p, f in self._prev_owner.items() if f == flow)
            if back:
                self._assign(flow, back)
            self._membership_changed()
        else:
            insort(self._standby, (self._seq[flow], flow), key=lambda sf: sf[0])
            self._emit(FlowStandby(flow, True, self._now))
        self._settle()

    def unbind(self, flow: FlowId, now: float) -> None:
        """A flow unbinds or disconnects (the same thing). The first standby flow takes over at once."""
        self._advance(now)
        _check_flow(flow)
        if flow not in self._seq:
            raise ValueError(f"unknown flow {flow!r}: it is not bound")
        del self._seq[flow]
        if flow not in self._members:
            self._standby = [sf for sf in self._standby if sf[1] != flow]
            self._settle()
            return
        parts = self._members.pop(flow)
        redelivered = {p: self._unacked[p] for p in sorted(parts) if self._unacked[p] > 0}
        for p in redelivered:
            self._unacked[p] = 0
        h = self._handoff
        if h is not None and h.from_flow == flow:
            # Nothing left to wait for: the old flow is gone and its messages are redelivered.
            parts.discard(h.partition)
            self._owner[h.partition] = None
            self._finish_handoff(forced=False, unacked=0, lost_flow_gone=True)
        elif h is not None and h.to_flow == flow:
            self._abort_handoff(f"flow {flow!r} unbound")
            if self._standby:
                self._moves.appendleft(Move(h.partition, h.from_flow, self._standby[0][1]))
        for p in parts:
            self._owner[p] = None
        self._emit(FlowUnbound(flow, tuple(sorted(parts)), redelivered, self._now))
        # A member slot opened (never during a switch to exclusive, while members exceed the slots).
        if self._standby and len(self._members) < self._capacity():
            _, successor = self._standby.pop(0)
            self._members[successor] = set()
            self._emit(FlowStandby(successor, False, self._now))
            if parts:
                self._assign(successor, sorted(parts))
            # The successor stands in for the departed flow in the rest of the plan, on either side.
            stand_in = lambda f: successor if f == flow else f  # noqa: E731
            self._moves = deque(
                Move(m.partition, stand_in(m.from_flow), stand_in(m.to_flow)) for m in self._moves
            )
        else:
            for p in parts:
                self._prev_owner[p] = flow
            self._membership_changed()
        self._settle()

    def set_partition_count(self, partition_count: int, now: float) -> None:
        """Scale to `partition_count`; a decrease removes the highest-numbered partitions first.

        Partitions being removed are paused until they have no unacked messages (or max_handoff_time_s
        passes); what is still unacked then is reported in `PartitionsRemoved`. Once scaling has
        finished the rebalance starts at once, without a holddown.
        """
        self._advance(now)
        _check_count("partition_count", partition_count)
        if partition_count == self._target_count:
            self._settle()
            return
        self._target_count = partition_count
        for p in [p for p in self._draining if p < partition_count]:
            del self._draining[p]
        if partition_count > self._count:
            grow = partition_count - self._count
            self._owner.extend([None] * grow)
            self._unacked.extend([0] * grow)
            self._count = partition_count
        for p in range(partition_count, self._count):
            self._draining.setdefault(p, self._now + self.max_handoff_time_s)
        h = self._handoff
        if h is not None and h.partition >= partition_count:
            self._abort_handoff(f"partition {h.partition} is being removed")
        self._moves.clear()
        self._set_scale_status(SCALING_DOWN if self._draining else SCALING_UP)
        self._settle()

    def set_weights(self, weights: Mapping[int, float] | Sequence[float], now: float | None = None) -> None:
        """Per-partition throughput used to choose which partitions move (never how many).

        Changing weights does not start a rebalance by itself; a partition without a weight counts
        as the mean of the known ones. Each weight is a finite int or float >= 0 (numpy's too), as
        in `plan_count_balance`: a str, a bool or None raises ValueError naming it.
        """
        if now is not None:
            self._advance(now)
        items: Iterable[tuple[object, float]]
        if isinstance(weights, Mapping):
            items = weights.items()
        elif is_sequence(weights):  # a str would be enumerated character by character
            if isinstance(weights, np.ndarray):
                as_1d("weights", weights)  # a 0-d or 2-d array is named, not indexed into
            items = enumerate(weights)
        else:
            raise ValueError(f"weights must be a mapping or a sequence of numbers, got {describe(weights)}")
        table: dict[int, float] = {}
        for p, v in items:
            if not isinstance(p, int) or isinstance(p, bool) or p < 0:
                raise ValueError(f"weights keys must be partitions (ints >= 0), got {p!r}")
            if not is_real(v) or v < 0:  # float(v) used to take "1.5" and True, and raise on None
                raise ValueError(f"weights[{p}] must be a finite number >= 0, got {v!r}")
            table[p] = float(v)
        self._weights = table
        if now is not None:
            self._settle()

    def rebalance_now(self, now: float) -> None:
        """End a holddown early (an operator's "go"), e.g. once every initial consumer has bound."""
        self._advance(now)
        if self._status == HOLDDOWN:
            self._holddown_until = self._now
        self._settle()

    def set_access_type(self, access_type: str, now: float) -> None:
        """Switch between "exclusive" (one member flow holds every partition) and "non-exclusive".

        The seed counts this as a change of the operating partition count: the scale status goes to
        scaling-up (to non-exclusive) or scaling-down (to exclusive) until a handoff in flight has
        finished, then the rebalance starts at once, with no holddown. To non-exclusive, standby flows
        become members and share the partitions; to exclusive, the earliest-bound member takes every
        partition, one graceful handoff at a time, and each flow it empties goes back to standby.
        """
        self._advance(now)
        if access_type not in ACCESS_TYPES:
            raise ValueError(f"access_type must be one of {ACCESS_TYPES}, got {access_type!r}")
        exclusive = access_type == "exclusive"
        if exclusive == self.exclusive:
            self._settle()
            return
        old = self.access_type
        self.exclusive = exclusive
        self._emit(AccessTypeChanged(old, access_type, self._now))
        self._moves.clear()
        self._need_plan = False
        if self._scale_status == READY:
            self._set_scale_status(SCALING_DOWN if exclusive else SCALING_UP)
        self._settle()

    @property
    def access_type(self) -> str:
        return "exclusive" if self.exclusive else "non-exclusive"

    def assign(self, flow: FlowId, partitions: Sequence[int], now: float) -> None:
        """Give unowned partitions to member `flow` at once, for callers that place partitions
        themselves (a BatchQueue adopting its existing workers); no handoff, no rebalance."""
        self._advance(now)
        _check_flow(flow)
        if flow not in self._members:
            raise ValueError(f"flow {flow!r} is not a member flow (bound and not standby)")
        for p in partitions:
            self._check_partition(p)
            if self._owner[p] is not None:
                raise ValueError(f"partition {p} is owned by {self._owner[p]!r}; use move() to change owners")
        if partitions:
            self._assign(flow, sorted(partitions))
        self._settle()

    def move(self, partition: int, to_flow: FlowId, now: float) -> None:
        """Record a move the caller has already handed off safely itself (throughput rebalancing on
        top of count balance). Counted as a completed handoff; it does not start a rebalance."""
        self._advance(now)
        self._check_partition(partition)
        _check_flow(to_flow, "to_flow")
        if to_flow not in self._members:
            raise ValueError(f"to_flow {to_flow!r} is not a member flow (bound and not standby)")
        old = self._owner[partition]
        if old is None:
            raise ValueError(f"partition {partition} has no owner; use assign() for unowned partitions")
        if partition in self.paused:
            raise ValueError(f"partition {partition} is paused; it cannot be moved now")
        if old == to_flow:
            return
        self._members[old].discard(partition)
        first = not self._members[to_flow]
        self._members[to_flow].add(partition)
        self._owner[partition] = to_flow
        self._handoff_count += 1
        self._emit(HandoffCompleted(partition, old, to_flow, self._now, False, 0))
        if not self._members[old]:
            self._emit(FlowChangeUpdate(old, False, self._now))
        if first:
            self._emit(FlowChangeUpdate(to_flow, True, self._now))
        self._settle()

    # ----- messages ---------------------------------------------------------------------------------

    def delivered(self, partition: int, n: int = 1, now: float | None = None) -> None:
        """`n` messages of `partition` went to its owner and are unacked until `acked`."""
        if now is not None:
            self._advance(now)
        self._check_partition(partition)
        _check_count("n", n, minimum=0)
        if partition in self._draining:
            raise ValueError(f"partition {partition} is being removed; nothing may be delivered from it")
        h = self._handoff
        if h is not None and h.partition == partition:
            raise ValueError(
                f"partition {partition} is paused (handoff {h.from_flow!r} -> {h.to_flow!r});"
                " nothing may be delivered from it"
            )
        if self._owner[partition] is None:
            raise ValueError(f"partition {partition} has no owner; nothing may be delivered from it")
        self._unacked[partition] += n
        if now is not None:
            self._settle()

    def acked(self, partition: int, n: int = 1, now: float | None = None) -> None:
        """`n` messages of `partition` were acked. Without `now`, the ack happens at the last time seen."""
        if now is not None:
            self._advance(now)
        self._check_partition(partition)
        _check_count("n", n, minimum=0)
        if n > self._unacked[partition]:
            raise ValueError(
                f"n={n} exceeds the {self._unacked[partition]} unacked messages of partition {partition}"
            )
        self._unacked[partition] -= n
        self._settle()

    def poll(self, now: float) -> list[Event]:
        """Advance the timers to `now` and return the events since the previous poll."""
        self._advance(now)
        self._settle()
        events, self._events = self._events, []
        return events

    # ----- views ------------------------------------------------------------------------------------

    @property
    def status(self) -> str:
        return self._status

    @property
    def scale_status(self) -> str:
        return self._scale_status

    @property
    def assignment(self) -> dict[FlowId, list[int]]:
        """{flow: sorted partitions} for every member flow (not standby), in bind order; [] is allowed."""
        return {f: sorted(self._members[f]) for f in self.flows}

    @property
    def flows(self) -> list[FlowId]:
        """Member flows (bound, not standby) in bind order."""
        return sorted(self._members, key=self._seq.__getitem__)

    @property
    def standby(self) -> list[FlowId]:
        return [f for _, f in self._standby]

    @property
    def handoff_count(self) -> int:
        return self._handoff_count

    @property
    def handoff(self) -> Handoff | None:
        return self._handoff

    @property
    def paused(self) -> list[int]:
        """Partitions nothing may be delivered from: the one being handed off, and those being removed."""
        out = set(self._draining)
        if self._handoff is not None:
            out.add(self._handoff.partition)
        return sorted(out)

    @property
    def partition_count(self) -> int:
        """Partitions that exist now, including any still being removed by a scale-down."""
        return self._count

    @property
    def target_partition_count(self) -> int:
        return self._target_count

    @property
    def removed_unacked_total(self) -> int:
        """Messages still unacked on partitions when a scale-down removed them (each also in an event)."""
        return self._removed_unacked_total

    @property
    def now(self) -> float:
        """The last time seen (-inf before the first call)."""
        return self._now

    @property
    def holddown_until(self) -> float | None:
        return self._holddown_until if self._status == HOLDDOWN else None

    def owner(self, partition: int) -> FlowId | None:
        self._check_partition(partition)
        return self._owner[partition]

    def partitions_of(self, flow: FlowId) -> list[int]:
        """Sorted partitions `flow` owns (paused ones included); [] for standby flows."""
        _check_flow(flow)
        if flow not in self._seq:
            raise ValueError(f"unknown flow {flow!r}: it is not bound")
        return sorted(self._members.get(flow, ()))

    def deliverable(self, flow: FlowId) -> list[int]:
        """Sorted partitions `flow` may take new messages from now: owned and not paused."""
        paused = set(self.paused)
        return [p for p in self.partitions_of(flow) if p not in paused]

    def unacked(self, partition: int) -> int:
        self._check_partition(partition)
        return self._unacked[partition]

    def partition_status(self, partition: int) -> str:
        """ "unassigned" | "ready" | "paused" (handed off or being removed) | "unbound" (its flow left)."""
        self._check_partition(partition)
        h = self._handoff
        if partition in self._draining or (h is not None and h.partition == partition):
            return "paused"
        if self._owner[partition] is None:
            return "unbound" if partition in self._prev_owner else "unassigned"
        return "ready"

    # ----- the engine -------------------------------------------------------------------------------

    def _capacity(self) -> int:
        return 1 if self.exclusive else self._target_count

    def _advance(self, now: float) -> None:
        """Move time to `now`, processing every timer that falls due on the way at its own instant."""
        if not isinstance(now, int | float) or isinstance(now, bool) or math.isnan(now):
            raise ValueError(f"now must be a number of seconds, got {now!r}")
        if now < self._now:
            raise ValueError(f"now must not go backwards: got {now}, after {self._now}")
        while True:
            due = self._next_timer()
            if due is None or due > now:
                break
            self._now = max(self._now, due)
            self._settle()
        self._now = float(now)

    def _next_timer(self) -> float | None:
        times: list[float] = []
        if self._status == HOLDDOWN:
            times.append(self._holddown_until)
        if self._handoff is not None:
            times.append(self._handoff.deadline)
        elif self._scale_status == SCALING_DOWN:
            # Scaling finishes only when every removed partition is drained or out of time.
            waits = [d for p, d in self._draining.items() if self._unacked[p] > 0]
            if waits:
                times.append(max(waits))
        return min(times) if times else None

    def _settle(self) -> None:
        while self._step():
            pass

    def _step(self) -> bool:
        """Do one thing that is due at the current time; False when nothing is."""
        h = self._handoff
        if h is not None:
            left = self._unacked[h.partition]
            if left == 0 or self._now >= h.deadline:
                self._finish_handoff(forced=left > 0, unacked=left)
                return True
        if self._scale_status != READY and h is None and self._drained():
            self._finish_scaling()
            return True
        if self._status == HOLDDOWN and self._now >= self._holddown_until:
            self._set_status(REBALANCING)
            self._need_plan = True
            self._moves.clear()
            return True
        if self._status == REBALANCING and h is None and self._scale_status == READY:
            if self._need_plan:
                self._need_plan = False
                self._plan()
                return True
            if self._moves:
                m = self._moves.popleft()
                if self._owner[m.partition] == m.from_flow and m.to_flow in self._members:
                    self._start_handoff(m)
                else:  # the plan went stale: plan again rather than stop unbalanced
                    self._need_plan = True
                return True
            self._set_status(READY)
            return True
        return False

    def _drained(self) -> bool:
        return all(self._unacked[p] == 0 or self._now >= d for p, d in self._draining.items())

    def _plan(self) -> None:
        flows = self.flows
        if not flows:
            return
        if len(flows) > self._capacity():
            self._plan_to_keepers(flows[: self._capacity()], flows[self._capacity() :])
            return
        plan = plan_count_balance(self._owner, flows, self._plan_weights())
        self._emit(
            RebalancePlanned(tuple(flows), self._count, len(plan.handoffs), len(plan.assignments), self._now)
        )
        by_flow: dict[FlowId, list[int]] = {}
        for m in plan.assignments:
            by_flow.setdefault(m.to_flow, []).append(m.partition)
        for f in flows:
            if f in by_flow:
                self._assign(f, by_flow[f])
        self._moves = deque(plan.handoffs)

    def _plan_to_keepers(self, keepers: list[FlowId], excess: list[FlowId]) -> None:
        """More members than slots (a switch to exclusive): everything goes to the kept members.

        Ownerless partitions are mapped at once; the excess members hand theirs off one at a time and
        go to standby when they hold nothing (`_finish_handoff`).
        """
        orphans = [p for p, o in enumerate(self._owner) if o is None or o not in self._members]
        sources = [(f, p) for f in excess for p in sorted(self._members[f])]
        self._emit(RebalancePlanned(tuple(keepers), self._count, len(sources), len(orphans), self._now))
        if orphans:
            self._assign(keepers[0], orphans)
        self._moves = deque(Move(p, f, keepers[i % len(keepers)]) for i, (f, p) in enumerate(sources))
        self._fit_members()

    def _plan_weights(self) -> list[float] | None:
        if self._weights is None:
            return None
        known = [self._weights[p] for p in range(self._count) if p in self._weights]
        default = sum(known) / len(known) if known else 1.0
        return [self._weights.get(p, default) for p in range(self._count)]

    def _assign(self, flow: FlowId, partitions: list[int]) -> None:
        held = self._members[flow]
        was_active = bool(held)
        for p in partitions:
            self._owner[p] = flow
            held.add(p)
            self._prev_owner.pop(p, None)
        self._emit(PartitionsAssigned(flow, tuple(partitions), self._now))
        if not was_active:
            self._emit(FlowChangeUpdate(flow, True, self._now))

    def _start_handoff(self, m: Move) -> None:
        self._handoff = Handoff(
            m.partition, m.from_flow, m.to_flow, self._now, self._now + self.max_handoff_time_s
        )
        self._emit(HandoffStarted(m.partition, m.from_flow, m.to_flow, self._now))

    def _finish_handoff(self, forced: bool, unacked: int, lost_flow_gone: bool = False) -> None:
        h = self._handoff
        assert h is not None
        self._handoff = None
        p = h.partition
        if not lost_flow_gone:
            self._members[h.from_flow].discard(p)
        self._owner[p] = h.to_flow
        gained = self._members[h.to_flow]
        first = not gained
        gained.add(p)
        self._handoff_count += 1
        self._emit(HandoffCompleted(p, h.from_flow, h.to_flow, self._now, forced, unacked))
        if not lost_flow_gone and not self._members[h.from_flow]:
            self._emit(FlowChangeUpdate(h.from_flow, False, self._now))
        if first:
            self._emit(FlowChangeUpdate(h.to_flow, True, self._now))
        if len(self._members) > self._capacity():
            self._fit_members()  # a flow emptied by a switch to exclusive goes back to standby

    def _abort_handoff(self, reason: str) -> None:
        h = self._handoff
        assert h is not None
        self._handoff = None
        self._emit(HandoffAborted(h.partition, h.from_flow, h.to_flow, self._now, reason))

    def _finish_scaling(self) -> None:
        removed = list(range(self._target_count, self._count))
        if removed:
            left = {p: self._unacked[p] for p in removed if self._unacked[p] > 0}
            for p in removed:
                o = self._owner[p]
                if o is not None:
                    held = self._members[o]
                    held.discard(p)
                    if not held:
                        self._emit(FlowChangeUpdate(o, False, self._now))
                self._prev_owner.pop(p, None)
            del self._owner[self._target_count :]
            del self._unacked[self._target_count :]
            self._draining.clear()
            self._count = self._target_count
            self._removed_unacked_total += sum(left.values())
            self._emit(PartitionsRemoved(tuple(removed), left, self._now))
        self._set_scale_status(READY)
        self._fit_members()
        # The rebalance after a change of partition count starts at once: no holddown.
        self._set_status(REBALANCING)
        self._need_plan = True
        self._moves.clear()

    def _fit_members(self) -> None:
        """Promote standby flows into free member slots; demote empty, latest-bound members beyond them."""
        cap = self._capacity()
        while len(self._members) < cap and self._standby:
            _, f = self._standby.pop(0)
            self._members[f] = set()
            self._emit(FlowStandby(f, False, self._now))
        if len(self._members) > cap:
            empty = sorted((f for f, ps in self._members.items() if not ps), key=self._seq.__getitem__)
            for f in reversed(empty[-(len(self._members) - cap) :]):
                del self._members[f]
                insort(self._standby, (self._seq[f], f), key=lambda sf: sf[0])
                self._emit(FlowStandby(f, True, self._now))

    def _membership_changed(self) -> None:
        """A member joined or left: start the holddown; pending handoffs wait for a fresh plan.

        A holddown already running keeps its end, `first change + rebalance_delay_s` (Solace's "maximum
        delay between the first and last consumer instance change"), unless `sliding_holddown`.
        """
        self._moves.clear()
        self._need_plan = False
        if self._status != HOLDDOWN or self.sliding_holddown:
            self._holddown_until = self._now + self.rebalance_delay_s
        self._set_status(HOLDDOWN)

    def _set_status(self, new: str) -> None:
        if new != self._status:
            self._emit(StatusChanged(self._status, new, self._now))
            self._status = new

    def _set_scale_status(self, new: str) -> None:
        if new != self._scale_status:
            self._emit(ScaleStatusChanged(self._scale_status, new, self._now))
            self._scale_status = new

    def _emit(self, event: Event) -> None:
        self._events.append(event)

    def _check_partition(self, partition: int) -> None:
        if not isinstance(partition, int) or isinstance(partition, bool) or not 0 <= partition < self._count:
            raise ValueError(f"partition must be in [0, {self._count}), got {partition!r}")


def _check_flow(flow: object, name: str = "flow") -> None:
    """A flow id is a dict key here: None means ownerless, and an unhashable id cannot be one."""
    if flow is None:
        raise ValueError(f"{name} must not be None")
    try:
        hash(flow)
    except TypeError:
        raise ValueError(f"{name} must be hashable, got {flow!r}") from None


def _check_count(name: str, value: int, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def _check_duration(name: str, value: float, allow_inf: bool = False) -> None:
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and not math.isnan(value)
        and value >= 0
    )
    if not ok or (math.isinf(value) and not allow_inf):
        what = "a number of seconds >= 0 (inf allowed)" if allow_inf else "a finite number of seconds >= 0"
        raise ValueError(f"{name} must be {what}, got {value!r}")
