"""The count-balance planner: ±1 counts, handoffs equal to the exact lower bound, weights pick which move."""

from __future__ import annotations

import random
from itertools import combinations, product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rebalancer.balance.count import (
    count_targets,
    handoff_lower_bound,
    is_count_balanced,
    plan_count_balance,
)


def brute_force_min_handoffs(counts: list[int], partition_count: int) -> int:
    """The fewest handoffs over every balanced final state: try every choice of ceil-target flows."""
    flows = len(counts)
    base, extra = divmod(partition_count, flows)
    best = None
    for ceil_flows in combinations(range(flows), extra):
        targets = [base + (1 if i in ceil_flows else 0) for i in range(flows)]
        moved = sum(max(0, c - t) for c, t in zip(counts, targets))
        best = moved if best is None else min(best, moved)
    return best


def apply(owner: dict[int, object], plan) -> dict[int, object]:
    out = dict(owner)
    for m in plan.assignments:
        assert m.from_flow is None
        out[m.partition] = m.to_flow
    for m in plan.handoffs:
        assert out[m.partition] == m.from_flow
        out[m.partition] = m.to_flow
    return out


def spread(out: dict[int, object], weights: list[float], flows: list[str]) -> float:
    loads = [sum(weights[p] for p, o in out.items() if o == f) for f in flows]
    return max(loads) - min(loads)


def test_seed_example_seven_partitions_four_flows_one_handoff():
    owner = {0: "c1", 1: "c1", 2: "c1", 3: "c2", 4: "c2", 5: "c3", 6: "c3"}
    plan = plan_count_balance(owner, ["c1", "c2", "c3", "c4"])
    assert plan.targets == {"c1": 2, "c2": 2, "c3": 2, "c4": 1}
    assert plan.lower_bound == 1
    assert [(m.partition, m.from_flow, m.to_flow) for m in plan.handoffs] == [(2, "c1", "c4")]
    assert plan.assignments == ()


def test_ceil_targets_go_to_the_largest_holders():
    # 9 partitions over 4 flows: one flow gets 3. It must be the one already holding 4, not flow 0.
    assert count_targets([1, 4, 2, 2], 9) == [2, 3, 2, 2]
    assert handoff_lower_bound([1, 4, 2, 2], 9) == 1
    # Ties go to the earlier flow.
    assert count_targets([3, 3, 0], 7) == [3, 2, 2]


def test_orphans_are_assigned_not_handed_off_and_go_to_the_fewest():
    owner = {0: "a", 1: "a", 2: None, 3: "gone", 4: "b"}
    plan = plan_count_balance(owner, ["a", "b", "c"])
    assert plan.lower_bound == 0 and plan.handoffs == ()
    assert sorted((m.partition, m.to_flow) for m in plan.assignments) == [(2, "c"), (3, "b")]


def test_sequence_input_and_single_flow():
    plan = plan_count_balance([None, "x", None], ["x"])
    assert plan.handoffs == () and [m.partition for m in plan.assignments] == [0, 2]


def test_unweighted_execution_order_is_max_to_min():
    owner = {p: "a" for p in range(10)}
    owner.update({10 + p: "b" for p in range(4)})
    plan = plan_count_balance(owner, ["a", "b", "c", "d"])
    counts = {"a": 10, "b": 4, "c": 0, "d": 0}
    for m in plan.handoffs:
        assert counts[m.from_flow] == max(counts.values())
        assert counts[m.to_flow] == min(counts.values())
        counts[m.from_flow] -= 1
        counts[m.to_flow] += 1
    assert sorted(counts.values()) == [3, 3, 4, 4]
    assert len(plan.handoffs) == plan.lower_bound == 6


def test_weights_choose_which_partitions_move():
    owner = {0: "a", 1: "a", 2: "a", 3: "a"}
    weights = [10.0, 10.0, 1.0, 1.0]
    plain = apply(owner, plan_count_balance(owner, ["a", "b"]))
    weighted_plan = plan_count_balance(owner, ["a", "b"], weights)
    weighted = apply(owner, weighted_plan)
    load = lambda out, f: sum(weights[p] for p, o in out.items() if o == f)  # noqa: E731
    assert (load(plain, "a"), load(plain, "b")) == (20.0, 2.0)
    assert (load(weighted, "a"), load(weighted, "b")) == (11.0, 11.0)
    assert len(weighted_plan.handoffs) == weighted_plan.lower_bound == 2


def test_weights_even_out_load_across_many_random_cases():
    rng = random.Random(7)
    spread_plain = spread_weighted = 0.0
    for _ in range(150):
        flows = [f"f{i}" for i in range(rng.randint(2, 6))]
        parts = rng.randint(len(flows), 30)
        owner = {p: rng.choice([*flows, None]) for p in range(parts)}
        weights = [rng.expovariate(1.0) for _ in range(parts)]
        for plan_weights, acc in ((None, "plain"), (weights, "weighted")):
            plan = plan_count_balance(owner, flows, plan_weights)
            out = apply(owner, plan)
            loads = [sum(weights[p] for p, o in out.items() if o == f) for f in flows]
            if acc == "plain":
                spread_plain += max(loads) - min(loads)
            else:
                spread_weighted += max(loads) - min(loads)
                assert len(plan.handoffs) == plan.lower_bound
    assert spread_weighted < 0.7 * spread_plain


def test_weighted_plans_come_close_to_the_exhaustive_optimum():
    """Over small cases, compare with the best spread any minimal-handoff balanced state reaches."""
    rng = random.Random(3)
    ours = best_total = 0.0
    for _ in range(60):
        flows = [f"f{i}" for i in range(rng.randint(2, 3))]
        parts = rng.randint(len(flows), 8)
        owner = {p: rng.choice([*flows, None]) for p in range(parts)}
        weights = [rng.expovariate(1.0) for _ in range(parts)]
        plan = plan_count_balance(owner, flows, weights)
        ours += spread(apply(owner, plan), weights, flows)
        best = None
        for combo in product(flows, repeat=parts):
            counts = [combo.count(f) for f in flows]
            moved = sum(1 for p in range(parts) if owner[p] in flows and combo[p] != owner[p])
            if max(counts) - min(counts) <= 1 and moved == plan.lower_bound:
                s = spread(dict(enumerate(combo)), weights, flows)
                best = s if best is None else min(best, s)
        best_total += best
    assert best_total <= ours <= 1.15 * best_total


owner_cases = st.integers(1, 7).flatmap(
    lambda flows: st.tuples(
        st.just(flows),
        st.lists(st.one_of(st.none(), st.integers(0, flows)), min_size=0, max_size=30),
        st.booleans(),
        st.lists(st.floats(0, 100, allow_nan=False), min_size=30, max_size=30),
    )
)


@settings(max_examples=300, deadline=None)
@given(owner_cases)
def test_plan_properties(case):
    flow_count, owners, use_weights, weights = case
    flows = [f"f{i}" for i in range(flow_count)]
    # Index flow_count stands for a flow that has left.
    owner = {
        p: (None if o is None else ("gone" if o == flow_count else flows[o])) for p, o in enumerate(owners)
    }
    plan = plan_count_balance(owner, flows, weights if use_weights else None)
    counts = [sum(1 for o in owner.values() if o == f) for f in flows]
    assert plan.lower_bound == brute_force_min_handoffs(counts, len(owner))
    assert len(plan.handoffs) == plan.lower_bound
    moved = [m.partition for m in plan.assignments + plan.handoffs]
    assert len(moved) == len(set(moved)), "no partition moves twice"
    assert {m.partition for m in plan.assignments} == {p for p, o in owner.items() if o not in flows}
    out = apply(owner, plan)
    final = [sum(1 for o in out.values() if o == f) for f in flows]
    assert all(o in flows for o in out.values())
    assert is_count_balanced(final)
    assert final == [plan.targets[f] for f in flows]
    # Execution order: every handoff leaves a flow holding the most partitions at that moment.
    cur = {f: 0 for f in flows}
    for o in owner.values():
        if o in cur:
            cur[o] += 1
    for m in plan.assignments:
        cur[m.to_flow] += 1
    for m in plan.handoffs:
        assert cur[m.from_flow] == max(cur.values())
        if not use_weights:
            assert cur[m.to_flow] == min(cur.values())
        cur[m.from_flow] -= 1
        cur[m.to_flow] += 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (({0: "a"}, []), "flows must name at least one flow, got []"),
        (({0: "a"}, ["a", "a"]), "flows must be unique, got 'a' twice"),
        (({0: "a"}, ["a", None]), "flows must not contain None"),
        (({-1: "a"}, ["a"]), "owner_by_partition keys must be partitions (ints >= 0), got -1"),
        (({0: "a", 1: "a"}, ["a"], [1.0]), "weights must cover every partition, got 1 for partition 1"),
        (({0: "a"}, ["a"], {1: 1.0}), "weights must cover every partition, partition 0 is missing"),
        (({0: "a"}, ["a"], [-2.0]), "weights[0] must be a finite number >= 0, got -2.0"),
    ],
)
def test_bad_input_names_field_and_value(args, message):
    with pytest.raises(ValueError) as err:
        plan_count_balance(*args)
    assert message in str(err.value)


def test_count_targets_rejects_negative_counts():
    with pytest.raises(ValueError, match=r"counts\[1\] must be >= 0, got -3"):
        count_targets([1, -3], 4)
    with pytest.raises(ValueError, match="partition_count must be >= 0, got -1"):
        count_targets([1], -1)
