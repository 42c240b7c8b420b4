"""One imbalance vocabulary (`balance.metrics`): each figure by its name, and one lower bound."""

from __future__ import annotations

import numpy as np
import pytest

from rebalancer.balance import lower_bound, max_over_mean, max_over_median, plan_rebalance, spread


def test_each_figure_by_its_name() -> None:
    loads = [1, 2, 3, 10]
    assert max_over_mean(loads) == 10 * 4 / 16
    assert max_over_median(loads) == 10 / 2.5
    assert max_over_median([3, 1, 2], ndigits=2) == 1.5
    assert max_over_median([1, 1, 3], ndigits=4) == 3.0
    assert spread(loads) == 9.0


def test_no_load_and_an_idle_median_worker() -> None:
    assert max_over_mean([]) == 1.0 and max_over_mean([0, 0]) == 1.0
    assert max_over_median([]) is None
    assert max_over_median([0, 0, 5]) is None  # the median worker is idle: no finite ratio
    assert spread([]) == 0.0 and spread([4]) == 0.0


@pytest.mark.parametrize("metric", [max_over_mean, max_over_median, spread])
def test_bad_loads_are_refused_naming_them(metric) -> None:
    with pytest.raises(ValueError, match=r"^loads\[1\] must be >= 0, got -1"):
        metric([1, -1])


def test_the_lower_bound_with_speeds_and_fixed_load() -> None:
    # fluid split: (4 + 2 + 2) / (1 + 2) = 8/3; the largest (4) ends soonest on the fast worker:
    # (0 + 4) / 2 = 2; the fixed load alone: 2 / 1 = 2.
    assert lower_bound([4, 2], 2, capacity=[1, 2], fixed_load=[2, 0]) == pytest.approx(8 / 3)
    # the largest where it ends soonest wins: worker 1 holds 9 already, so 10 ends soonest on worker 0.
    assert lower_bound([10, 1], 2, fixed_load=[0, 9]) == 10.0
    assert lower_bound([3, 3, 3], 3) == 3  # exact: an int
    with pytest.raises(ValueError, match=r"fixed_load must have one entry per worker \(2\), got 3"):
        lower_bound([1], 2, fixed_load=[0, 0, 0])


def test_the_planner_never_beats_the_bound_it_shares() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        throughput = rng.integers(1, 100, size=12).tolist()
        capacity = rng.integers(1, 4, size=3).tolist()
        fixed = rng.integers(0, 50, size=3).tolist()
        plan = plan_rebalance(throughput, [-1] * 12, 3, capacity=capacity, fixed_load=fixed)
        loads = [fixed[w] + sum(t for t, o in zip(throughput, plan.owner) if o == w) for w in range(3)]
        finish = max(load / c for load, c in zip(loads, capacity))
        assert finish >= lower_bound(throughput, 3, capacity=capacity, fixed_load=fixed) - 1e-9
