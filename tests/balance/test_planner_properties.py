"""Hypothesis properties of plan_lpt and plan_rebalance (issue 3, section 3)."""

from __future__ import annotations

import heapq

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.balance import Plan, lower_bound, plan_lpt, plan_rebalance

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def workloads(draw: st.DrawFn, max_workers: int = 8, max_partitions: int = 60, unowned: bool = True):
    """(throughput, current_owner, workers) with zero-throughput and (optionally) unowned partitions."""
    workers = draw(st.integers(1, max_workers))
    n = draw(st.integers(0, max_partitions))
    value = st.one_of(st.just(0), st.integers(0, 20), st.integers(0, 100_000))
    throughput = draw(st.lists(value, min_size=n, max_size=n))
    low = -1 if unowned else 0
    owner = draw(st.lists(st.integers(low, workers - 1), min_size=n, max_size=n))
    return throughput, owner, workers


@st.composite
def zipf_workloads(draw: st.DrawFn):
    """Stream-like counts: Zipf volumes over shuffled types, at least 8 partitions per worker."""
    workers = draw(st.integers(1, 16))
    n = draw(st.integers(8 * workers, 8 * workers + 300))
    s = draw(st.floats(0.3, 1.5))
    total = draw(st.integers(100 * n, 2_000_000))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, n + 1) ** s
    if draw(st.booleans()):
        throughput = rng.multinomial(total, weights / weights.sum())
    else:
        throughput = weights * total / weights.sum()
    rng.shuffle(throughput)
    owner = rng.integers(-1, workers, n) if draw(st.booleans()) else np.arange(n) % workers
    return throughput, owner, workers


def loads(throughput, owner, workers: int) -> list[float]:
    out = [0.0] * workers
    for value, w in zip(throughput, owner, strict=True):
        if w >= 0:
            out[w] += value
    return out


def keep_current_max(throughput, owner, workers: int) -> float:
    """Max load of the current assignment once unowned partitions are placed greedily."""
    current = loads(throughput, owner, workers)
    heap = [(load, w) for w, load in enumerate(current)]
    heapq.heapify(heap)
    for value in sorted((v for v, w in zip(throughput, owner, strict=True) if w < 0), reverse=True):
        load, w = heap[0]
        heapq.heapreplace(heap, (load + value, w))
    return max(load for load, _ in heap)


def check_plan(plan: Plan, throughput, owner, workers: int) -> None:
    n = len(throughput)
    assert len(plan.owner) == n
    assert all(0 <= w < workers for w in plan.owner), "each partition has exactly one live owner"
    expected_moves = tuple((p, owner[p], plan.owner[p]) for p in range(n) if plan.owner[p] != owner[p])
    assert plan.moves == expected_moves
    for p in range(n):
        if throughput[p] == 0 and owner[p] >= 0:
            assert plan.owner[p] == owner[p], f"idle partition {p} moved"
    assert np.allclose(plan.load_before, loads(throughput, owner, workers))
    assert np.allclose(plan.load_after, loads(throughput, plan.owner, workers))
    assert plan.moved == sum(1 for _, old, _ in plan.moves if old >= 0)
    if plan.skipped is not None:
        assert all(plan.owner[p] == owner[p] for p in range(n) if owner[p] >= 0)


@SETTINGS
@given(workloads(), st.sampled_from([1.0, 1.15, 2.0]))
def test_lpt_plan_is_consistent(case, skip_ratio):
    throughput, owner, workers = case
    plan = plan_lpt(throughput, owner, workers, skip_ratio=skip_ratio)
    check_plan(plan, throughput, owner, workers)


@SETTINGS
@given(workloads(), st.sampled_from([1.0, 1.15, 2.0]))
def test_rebalance_plan_is_consistent_and_never_worse(case, skip_ratio):
    throughput, owner, workers = case
    plan = plan_rebalance(throughput, owner, workers, skip_ratio=skip_ratio)
    check_plan(plan, throughput, owner, workers)
    assert max(plan.load_after, default=0) <= keep_current_max(throughput, owner, workers)
    if all(w >= 0 for w in owner):
        assert max(plan.load_after, default=0) <= max(plan.load_before, default=0)


@SETTINGS
@given(workloads(), st.integers(0, 6))
def test_max_moves_is_respected(case, max_moves):
    throughput, owner, workers = case
    plan = plan_rebalance(throughput, owner, workers, skip_ratio=1.0, max_moves=max_moves)
    check_plan(plan, throughput, owner, workers)
    assert plan.moved <= max_moves
    assert max(plan.load_after, default=0) <= keep_current_max(throughput, owner, workers)


@SETTINGS
@given(workloads(unowned=False))
def test_rebalance_is_at_least_as_good_as_lpt(case):
    throughput, owner, workers = case
    ours = plan_rebalance(throughput, owner, workers, skip_ratio=1.0)
    lpt = plan_lpt(throughput, owner, workers, skip_ratio=1.0)
    slack = 1e-3 * lower_bound(throughput, workers) if throughput else 0
    assert max(ours.load_after, default=0) <= max(lpt.load_after, default=0) + slack


@settings(max_examples=120, deadline=None)
@given(zipf_workloads())
def test_within_one_percent_of_the_bound_at_eight_partitions_per_worker(case):
    throughput, owner, workers = case
    bound = lower_bound(throughput, workers)
    plan = plan_rebalance(throughput, owner, workers, skip_ratio=1.0)
    assert max(plan.load_after) <= 1.01 * bound
    check_plan(plan, list(throughput), list(owner), workers)
