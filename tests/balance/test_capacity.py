"""plan_rebalance for workers of unequal speed (`capacity=`) and with fixed load, and the numeric edges."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.balance import imbalance, lower_bound, plan_lpt, plan_rebalance

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def finish(loads, capacity, fixed=None):
    fixed = [0] * len(loads) if fixed is None else fixed
    return max((x + f) / c for x, f, c in zip(loads, fixed, capacity, strict=True))


def test_a_worker_twice_as_fast_takes_twice_the_load():
    plan = plan_rebalance([6] * 6, [0] * 6, 2, capacity=[1.0, 2.0])
    assert plan.load_after == (12, 24) and plan.skipped is None
    assert finish(plan.load_after, [1.0, 2.0]) == 12.0 == lower_bound([6] * 6, 2, capacity=[1.0, 2.0])
    assert plan.moved == 4 and len(plan.moves) == 4


def test_equal_capacities_give_the_identical_workers_plan():
    rng = np.random.default_rng(4)
    t = rng.integers(0, 1000, 200)
    owner = rng.integers(0, 5, 200)
    assert plan_rebalance(t, owner, 5, capacity=[3.0] * 5) == plan_rebalance(t, owner, 5)


def test_fixed_load_counts_in_every_finish_time():
    # Worker 0 already runs 10 units of someone else's work: the 10 movable units go to worker 1.
    plan = plan_rebalance([5, 5], [0, 0], 2, fixed_load=[10, 0])
    assert plan.load_after == (0, 10)
    assert plan.moves == ((0, 0, 1), (1, 0, 1))


def test_a_balanced_heterogeneous_assignment_is_left_alone():
    plan = plan_rebalance([4, 4, 4], [0, 1, 1], 2, capacity=[1.0, 2.0], skip_ratio=1.0)
    assert plan.moves == () and "within 0.1% of the lower bound" in plan.skipped


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("s", [0.6, 1.0, 1.3])
def test_within_one_percent_of_the_generalised_bound_on_zipf_inputs(seed, s):
    rng = np.random.default_rng(seed)
    workers = int(rng.integers(2, 17))
    n = 8 * workers + int(rng.integers(0, 200))
    weights = 1.0 / np.arange(1, n + 1) ** s
    t = rng.multinomial(5_000_000, weights / weights.sum())
    rng.shuffle(t)
    capacity = rng.uniform(0.5, 2.0, workers)
    plan = plan_rebalance(t, np.arange(n) % workers, workers, capacity=capacity, skip_ratio=1.0)
    bound = lower_bound(t, workers, capacity=capacity)
    assert finish(plan.load_after, capacity) <= 1.01 * bound


@st.composite
def heterogeneous(draw: st.DrawFn):
    workers = draw(st.integers(1, 6))
    n = draw(st.integers(0, 40))
    t = draw(st.lists(st.integers(0, 10_000), min_size=n, max_size=n))
    owner = draw(st.lists(st.integers(-1, workers - 1), min_size=n, max_size=n))
    capacity = draw(st.lists(st.floats(0.25, 4.0), min_size=workers, max_size=workers))
    fixed = draw(st.one_of(st.none(), st.lists(st.integers(0, 5_000), min_size=workers, max_size=workers)))
    max_moves = draw(st.one_of(st.none(), st.integers(0, 5)))
    return t, owner, workers, capacity, fixed, max_moves


@SETTINGS
@given(heterogeneous())
def test_every_guarantee_holds_with_capacities(case):
    t, owner, workers, capacity, fixed, max_moves = case
    plan = plan_rebalance(
        t, owner, workers, capacity=capacity, fixed_load=fixed, max_moves=max_moves, skip_ratio=1.0
    )
    # moves are exactly the changed owners, and only max_moves of them leave a live owner
    changed = [(p, o, n) for p, (o, n) in enumerate(zip(owner, plan.owner, strict=True)) if o != n]
    assert list(plan.moves) == changed
    assert all(0 <= w < workers for w in plan.owner)
    if max_moves is not None:
        assert plan.moved <= max_moves
    # loads are exact integer sums
    after = [0] * workers
    for value, w in zip(t, plan.owner, strict=True):
        after[w] += value
    assert list(plan.load_after) == after and all(type(x) is int for x in plan.load_after)
    # never worse than keeping the live owners (unowned partitions placed by earliest finish)
    keep = [0] * workers
    for value, w in zip(t, owner, strict=True):
        if w >= 0:
            keep[w] += value
    if all(w >= 0 for w in owner):
        assert finish(plan.load_after, capacity, fixed) <= finish(keep, capacity, fixed) * (1 + 1e-12)
    bound = lower_bound(t, workers, capacity=capacity) if fixed is None else 0
    assert finish(plan.load_after, capacity, fixed) >= bound * (1 - 1e-12)


@pytest.mark.parametrize("planner", [plan_lpt, plan_rebalance])
def test_integer_loads_that_overflow_int64_are_refused(planner):
    with pytest.raises(
        ValueError, match=r"throughput must sum to at most 2\*\*63 - 1 \(int64\), got 13835058055282163712"
    ):
        planner([2**62] * 3, [0, 0, 0], 2)
    with pytest.raises(ValueError, match=r"throughput\[0\] must fit in int64, got 18446744073709551615"):
        planner(np.array([2**64 - 1], dtype=np.uint64), [0], 2)
    with pytest.raises(ValueError, match=r"throughput\[1\] must fit in int64, got 36893488147419103232"):
        planner([1, 2**65], [0, 0], 2)


@pytest.mark.parametrize("planner", [plan_lpt, plan_rebalance])
def test_integer_loads_above_2_53_stay_exact(planner):
    big = 2**53
    t = [big + 1, big + 3, 1, 1]
    plan = planner(t, [0, 0, 0, 0], 2, skip_ratio=1.0)
    assert plan.load_before == (2 * big + 6, 0)
    exact = [sum(v for v, w in zip(t, plan.owner, strict=True) if w == k) for k in (0, 1)]
    assert list(plan.load_after) == exact and sorted(exact) == [big + 3, big + 3]
    assert all(type(x) is int for x in plan.load_after)


@pytest.mark.parametrize("planner", [plan_lpt, plan_rebalance])
def test_a_float_sum_that_overflows_is_refused(planner):
    with pytest.raises(ValueError, match="throughput must have a finite sum, got inf"):
        planner([1e308] * 3, [0, 0, 0], 2)


@pytest.mark.parametrize("planner", [plan_lpt, plan_rebalance])
@pytest.mark.parametrize(
    ("throughput", "message"),
    [
        ([1.0, float("inf")], "throughput[1] must be finite, got inf"),
        ([float("-inf"), 1.0], "throughput[0] must be finite, got -inf"),
        ([1, True], "throughput[1] must be a number, got True"),
        ([np.True_, 2.5], "throughput[0] must be a number, got np.True_"),
        (np.array([True, False]), "throughput must hold numbers, got dtype bool"),
        ([1 + 2j, 1], "throughput must hold real numbers, got dtype complex128"),
    ],
)
def test_non_finite_bool_and_complex_loads_are_refused(planner, throughput, message):
    with pytest.raises(ValueError) as err:
        planner(throughput, [0, 0], 2)
    assert str(err.value) == message


@pytest.mark.parametrize("skip_ratio", [1 + 2j, np.complex128(2.0), True, "2", float("inf")])
def test_a_skip_ratio_that_is_not_a_finite_real_is_refused(skip_ratio):
    with pytest.raises(ValueError, match="skip_ratio must be"):
        plan_rebalance([1, 2], [0, 0], 2, skip_ratio=skip_ratio)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"capacity": [1.0]}, "capacity must have one entry per worker (2), got 1"),
        ({"capacity": [1.0, 0.0]}, "capacity[1] must be > 0, got 0.0"),
        ({"capacity": [1.0, float("nan")]}, "capacity[1] must be finite, got nan"),
        ({"capacity": [True, 1.0]}, "capacity[0] must be a number, got True"),
        ({"fixed_load": [1.0, -1.0]}, "fixed_load[1] must be >= 0, got -1.0"),
    ],
)
def test_bad_capacity_and_fixed_load_name_the_field(kwargs, message):
    with pytest.raises(ValueError) as err:
        plan_rebalance([1, 2], [0, 0], 2, **kwargs)
    assert str(err.value) == message


def test_lower_bound_and_imbalance_validate_like_the_planners():
    assert lower_bound([6, 6, 6], 2, capacity=[1.0, 2.0]) == 6.0
    assert lower_bound([12, 1], 2, capacity=[1.0, 2.0]) == 6.0  # 12 / 2 beats 13 / 3
    assert lower_bound([2**60 + 1, 0], 2) == 2**60 + 1
    assert imbalance([10, 20], capacity=[1.0, 2.0]) == 1.0
    assert imbalance([20, 10], capacity=[1.0, 2.0]) == pytest.approx(20 * 3 / 30)
    for call, message in [
        (lambda: lower_bound([1, float("nan")], 2), "throughput[1] must be finite, got nan"),
        (lambda: lower_bound([True], 2), "throughput[0] must be a number, got True"),
        (lambda: lower_bound([1], True), "workers must be an int, got True"),
        (lambda: lower_bound([1], 2, capacity=[1.0]), "capacity must have one entry per worker (2), got 1"),
        (lambda: imbalance([1.0, float("inf")]), "loads[1] must be finite, got inf"),
        (lambda: imbalance([-1, 2]), "loads[0] must be >= 0, got -1"),
        (lambda: imbalance([[1]]), "loads must be one-dimensional, got shape (1, 1)"),
        (lambda: imbalance([1, 2], capacity=[0.0, 1.0]), "capacity[0] must be > 0, got 0.0"),
    ]:
        with pytest.raises(ValueError) as err:
            call()
        assert str(err.value) == message
