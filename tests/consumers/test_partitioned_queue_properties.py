"""Properties of PartitionedQueue over random sequences of bind, unbind, scale, deliver, ack and poll."""

from __future__ import annotations

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from rebalancer.consumers import (
    FlowUnbound,
    HandoffAborted,
    HandoffCompleted,
    HandoffStarted,
    PartitionedQueue,
    PartitionsAssigned,
    PartitionsRemoved,
    RebalancePlanned,
    StatusChanged,
)

FLOW_IDS = [f"f{i}" for i in range(8)]

ops = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "bind",
                "bind",
                "bind",
                "unbind",
                "unbind",
                "scale",
                "deliver",
                "deliver_all",
                "ack",
                "ack",
                "poll",
            ]
        ),
        st.integers(0, 10_000),
        st.sampled_from([0.0, 0.0, 0.5, 1.0, 2.5, 7.0]),
    ),
    min_size=5,
    max_size=60,
)
configs = st.tuples(
    st.one_of(st.integers(1, 4), st.integers(1, 9)),  # partitions: small ones exercise standby
    st.sampled_from([0.0, 1.0, 3.0]),  # rebalance delay
    st.sampled_from([0.0, 1.5, 4.0]),  # max handoff time
    st.booleans(),  # exclusive
    st.booleans(),  # weights
)


def min_handoffs(counts: list[int], partition_count: int) -> int:
    """Independent of the planner: the best over every choice of which flows get the ceil target."""
    base, extra = divmod(partition_count, len(counts))
    return min(
        sum(max(0, c - (base + (i in ceil))) for i, c in enumerate(counts))
        for ceil in map(set, combinations(range(len(counts)), extra))
    )


class Replay:
    """Rebuilds ownership from events alone, and checks every rebalance against the lower bound."""

    def __init__(self) -> None:
        self.owner: dict[int, str] = {}
        self.plan: RebalancePlanned | None = None
        self.done = 0
        self.plans_checked = 0

    def apply(self, events) -> None:
        for e in events:
            if isinstance(e, RebalancePlanned):
                counts = [sum(1 for o in self.owner.values() if o == f) for f in e.flows]
                ownerless = [p for p in range(e.partition_count) if self.owner.get(p) not in e.flows]
                assert e.assigned == len(ownerless)
                assert e.handoffs == min_handoffs(counts, e.partition_count)
                self.plan, self.done = e, 0
                self.plans_checked += 1
            elif isinstance(e, PartitionsAssigned):
                for p in e.partitions:
                    assert p not in self.owner
                    self.owner[p] = e.flow
            elif isinstance(e, HandoffStarted):
                assert self.owner[e.partition] == e.from_flow
            elif isinstance(e, HandoffCompleted):
                assert self.owner[e.partition] == e.from_flow
                self.owner[e.partition] = e.to_flow
                self.done += 1
            elif isinstance(e, HandoffAborted):
                self.plan = None  # interrupted: its count no longer has to be met
            elif isinstance(e, FlowUnbound):
                for p in e.partitions:
                    assert self.owner.pop(p) == e.flow
                assert e.flow not in self.owner.values()
            elif isinstance(e, PartitionsRemoved):
                for p in e.partitions:
                    self.owner.pop(p, None)
            elif isinstance(e, StatusChanged):
                if e.old == "rebalancing" and e.new == "ready" and self.plan is not None:
                    assert self.done == self.plan.handoffs, "a finished rebalance did exactly its lower bound"
                if e.new != "rebalancing":
                    self.plan = None


def check_invariants(pq: PartitionedQueue) -> None:
    assignment = pq.assignment
    seen: dict[int, str] = {}
    for f, ps in assignment.items():
        for p in ps:
            assert p not in seen, f"partition {p} owned twice"
            seen[p] = f
    paused = set(pq.paused)
    h = pq.handoff
    for p in range(pq.partition_count):
        status = pq.partition_status(p)
        assert (status == "paused") == (p in paused)
        if p in seen:
            assert status in ("ready", "paused") and pq.owner(p) == seen[p]
        else:
            assert pq.owner(p) is None and status in ("unassigned", "unbound", "paused")
    if h is not None:
        assert seen[h.partition] == h.from_flow and h.to_flow in assignment
    cap = 1 if pq.exclusive else pq.target_partition_count
    if pq.scale_status == "ready":
        # Standby flows exist only when every member slot is taken.
        assert len(assignment) <= cap
        if pq.standby:
            assert len(assignment) == cap
    if pq.status == "ready" and pq.scale_status == "ready" and assignment:
        # Quiet: every partition owned, counts within ±1.
        assert len(seen) == pq.partition_count
        sizes = [len(ps) for ps in assignment.values()]
        assert max(sizes) - min(sizes) <= 1
        if pq.exclusive:
            assert len(assignment) == 1


def run(config, steps, extra_polls: bool):
    """Drive one queue through `steps`. Every call carries its own time, so polls in between are no-ops."""
    partitions, delay, max_handoff, exclusive, weighted = config
    weights = [float((p * 7) % 5 + 1) for p in range(16)] if weighted else None
    pq = PartitionedQueue(partitions, delay, max_handoff, exclusive=exclusive, weights=weights)
    replay = Replay()
    events = []
    unbound: list[str] = []
    t = 0.0

    def collect():
        batch = pq.poll(now=t)
        replay.apply(batch)
        events.extend(batch)

    for kind, pick, dt in steps:
        if extra_polls and dt > 0:
            pq_t = t + dt / 2
            batch = pq.poll(now=pq_t)
            replay.apply(batch)
            events.extend(batch)
        t += dt
        if kind in ("deliver", "deliver_all", "ack"):
            collect()  # choose from the state at t: a timer may have fired on the way
        bound = pq.flows + pq.standby
        if kind == "bind":
            free = [f for f in FLOW_IDS if f not in bound]
            if free:
                pq.bind(free[pick % len(free)], now=t)
        elif kind == "unbind" and bound:
            f = bound[pick % len(bound)]
            pq.unbind(f, now=t)
            unbound.append(f)
        elif kind == "scale":
            pq.set_partition_count(1 + pick % 12, now=t)
        elif kind == "deliver":
            open_ = [p for f in pq.flows for p in pq.deliverable(f)]
            if open_:
                pq.delivered(open_[pick % len(open_)], n=1 + pick % 3, now=t)
        elif kind == "deliver_all":
            for p in [p for f in pq.flows for p in pq.deliverable(f)]:
                pq.delivered(p, n=1 + pick % 2, now=t)
        elif kind == "ack":
            owed = [p for p in range(pq.partition_count) if pq.unacked(p)]
            if owed:
                p = owed[pick % len(owed)]
                pq.acked(p, n=1 + pick % pq.unacked(p), now=t)
        collect()
        check_invariants(pq)
        assert replay.owner == {p: pq.owner(p) for p in range(pq.partition_count) if pq.owner(p) is not None}
    # Quiescence: long enough for the holddown, every forced handoff and any scale-down.
    t += delay + (pq.partition_count + 2) * (max_handoff + 1) + 1
    collect()
    check_invariants(pq)
    assert pq.status == "ready" and pq.scale_status == "ready" and pq.handoff is None
    if pq.flows:
        sizes = [len(ps) for ps in pq.assignment.values()]
        assert max(sizes) - min(sizes) <= 1
        assert sum(sizes) == pq.partition_count
    handoffs = sum(1 for e in events if isinstance(e, HandoffCompleted))
    assert handoffs == pq.handoff_count
    return events, replay


@settings(max_examples=250, deadline=None)
@given(configs, ops)
def test_random_sequences_keep_every_invariant(config, steps):
    run(config, steps, extra_polls=False)


@settings(max_examples=100, deadline=None)
@given(configs, ops)
def test_outcome_does_not_depend_on_how_often_the_caller_polls(config, steps):
    coarse, _ = run(config, steps, extra_polls=False)
    fine, _ = run(config, steps, extra_polls=True)
    assert coarse == fine


def test_the_lower_bound_check_sees_real_rebalances():
    """Guard against a vacuous property: a plain churn sequence must plan handoffs and check them."""
    steps = [("bind", i, 0.0) for i in range(3)] + [("poll", 0, 4.0), ("bind", 0, 1.0), ("poll", 0, 4.0)]
    events, replay = run((7, 3.0, 1.5, False, False), steps, extra_polls=False)
    assert replay.plans_checked == 2
    assert sum(isinstance(e, HandoffCompleted) for e in events) == 1
