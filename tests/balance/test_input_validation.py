"""Issue 33 item 9: every array input of every public planner goes through one validator, so a bad
value is a ValueError naming the field (and the value or its type), never a TypeError from deep inside."""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.balance import imbalance, lower_bound, plan_lpt, plan_rebalance
from rebalancer.balance.count import count_targets, handoff_lower_bound, is_count_balanced, plan_count_balance

SETTINGS = settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def _generator() -> object:
    return (x for x in [1, 2])


# Not a sequence of numbers at all: the container is wrong.
NOT_SEQUENCES = st.one_of(
    st.none(),
    st.integers(),
    st.floats(allow_nan=True),
    st.booleans(),
    st.complex_numbers(),
    st.text(),
    st.binary(),
    st.dictionaries(st.integers(0, 3), st.integers(0, 3), min_size=1),
    st.sets(st.integers(0, 3), min_size=1),
    st.builds(object),
    st.builds(_generator),
    st.just(np.float64(2.0)),
    st.just(np.array(3)),
)
# One bad element in an otherwise good list of numbers.
BAD_ELEMENTS = st.sampled_from(
    [None, "x", "1", b"1", math.nan, math.inf, -math.inf, -1, -0.5, True, np.True_, 1 + 2j, [1], (1, 2), {}, set(),
     object(), Decimal("1"), 2**64, -(2**64)]
)  # fmt: skip


@st.composite
def bad_arrays(draw: st.DrawFn) -> object:
    """A bad value for an array field: a non-sequence, a list with one bad element, or nested lists."""
    kind = draw(st.sampled_from(["container", "element", "nested"]))
    if kind == "container":
        return draw(NOT_SEQUENCES)
    if kind == "nested":
        return draw(st.lists(st.lists(st.integers(0, 5), min_size=0, max_size=3), min_size=1, max_size=3))
    values: list[object] = [1, 2]
    values.insert(draw(st.integers(0, 2)), draw(BAD_ELEMENTS))
    return values


def _field_calls(bad: object) -> list[tuple[str, Callable[[], object]]]:
    """Every public function, with `bad` in each array field in turn (the other fields valid)."""
    n = len(bad) if isinstance(bad, list) else 3
    good_t, good_o = [1] * n, [0] * n
    calls: list[tuple[str, Callable[[], object]]] = [
        ("throughput", lambda: plan_rebalance(bad, [0, 1, 0], 2)),
        ("throughput", lambda: plan_lpt(bad, [0, 1, 0], 2)),
        ("throughput", lambda: lower_bound(bad, 2)),
        ("loads", lambda: imbalance(bad)),
    ]
    if bad is not None:  # None is how capacity and fixed_load say "absent"
        calls += [
            ("capacity", lambda: plan_rebalance(good_t, good_o, n, capacity=bad)),
            ("capacity", lambda: lower_bound(good_t, n, capacity=bad)),
            ("capacity", lambda: imbalance(good_t, capacity=bad)),
            ("fixed_load", lambda: plan_rebalance(good_t, good_o, n, fixed_load=bad)),
        ]
    return calls


@SETTINGS
@given(bad_arrays())
def test_a_bad_array_is_a_value_error_naming_its_field(bad):
    for field, call in _field_calls(bad):
        with pytest.raises(ValueError) as err:
            call()
        assert str(err.value).startswith(field), (field, bad, str(err.value))


OWNER_ELEMENTS = st.sampled_from(
    [None, "0", 0.0, 1.5, math.nan, True, np.True_, 2, -2, 2**64, -(2**64), [0], object(), Decimal(0)]
)


@st.composite
def bad_owners(draw: st.DrawFn) -> object:
    if draw(st.booleans()):
        return draw(NOT_SEQUENCES)
    values: list[object] = [0, 1]
    values.insert(draw(st.integers(0, 2)), draw(OWNER_ELEMENTS))
    return values


@SETTINGS
@given(bad_owners())
def test_a_bad_current_owner_is_a_value_error_naming_it(bad):
    n = len(bad) if isinstance(bad, list) else 3
    for planner in (plan_rebalance, plan_lpt):
        with pytest.raises(ValueError) as err:
            planner([1] * n, bad, 2)
        assert str(err.value).startswith("current_owner"), (bad, str(err.value))


@SETTINGS
@given(st.one_of(bad_arrays(), st.just([1.5, 2]), st.just([1, 2.0])))
def test_bad_counts_are_a_value_error_naming_them(bad):
    for call in (
        lambda: count_targets(bad, 3),
        lambda: handoff_lower_bound(bad, 3),
        lambda: is_count_balanced(bad),
    ):
        with pytest.raises(ValueError) as err:
            call()
        assert str(err.value).startswith("counts"), (bad, str(err.value))


# 2**64 is a fine float weight (only the int64 planners refuse it)
WEIGHT_ELEMENTS = BAD_ELEMENTS.filter(lambda v: not (isinstance(v, int) and v == 2**64))


@SETTINGS
@given(
    st.one_of(
        NOT_SEQUENCES.filter(lambda v: v is not None and not isinstance(v, dict)),  # None: no weights
        WEIGHT_ELEMENTS.map(lambda v: [1.0, v]),
        WEIGHT_ELEMENTS.map(lambda v: {0: 1.0, 1: v}),
    )
)
def test_bad_weights_are_a_value_error_naming_them(bad):
    with pytest.raises(ValueError) as err:
        plan_count_balance(["a", "b"], ["a", "b"], bad)
    assert str(err.value).startswith("weights"), (bad, str(err.value))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: plan_rebalance(None, [0, 1], 2), "throughput must be a sequence of numbers (list, tuple or numpy array), got None (NoneType)"),
        (lambda: plan_lpt(None, [0, 1], 2), "throughput must be a sequence of numbers (list, tuple or numpy array), got None (NoneType)"),
        (lambda: plan_rebalance(5, [0], 2), "throughput must be a sequence of numbers (list, tuple or numpy array), got 5 (int)"),
        (lambda: plan_lpt("12", [0, 1], 2), "throughput must be a sequence of numbers (list, tuple or numpy array), got '12' (str)"),
        (lambda: plan_rebalance({0: 5, 1: 7}, [0, 1], 2), "throughput must be a sequence of numbers (list, tuple or numpy array), got {0: 5, 1: 7} (dict)"),
        (lambda: plan_rebalance({5, 7}, [0, 1], 2), "throughput must be a sequence of numbers (list, tuple or numpy array), got {5, 7} (set)"),
        (lambda: plan_rebalance([[1, 2], [3]], [0, 1], 2), "throughput must be a one-dimensional sequence of numbers, got [[1, 2], [3]] (list)"),
        (lambda: plan_rebalance([1, None], [0, 1], 2), "throughput[1] must be a number, got None"),
        (lambda: plan_rebalance([Decimal("1.5"), 2], [0, 1], 2), "throughput[0] must be a number, got Decimal('1.5')"),
        (lambda: plan_rebalance([1, 2], None, 2), "current_owner must be a sequence of ints (list, tuple or numpy array), got None (NoneType)"),
        (lambda: plan_rebalance([1, 2], [True, 0], 2), "current_owner[0] must be an int, got True"),
        (lambda: plan_lpt([1, 2], [0, None], 2), "current_owner[1] must be an int, got None"),
        (lambda: plan_rebalance([1, 2], np.array([2**64 - 1, 0], dtype=np.uint64), 2), "current_owner[0] must be in [-1, 2), got 18446744073709551615"),
        (lambda: plan_rebalance([1, 2], [0, 2**64], 2), "current_owner[1] must be in [-1, 2), got 18446744073709551616"),
        (lambda: plan_rebalance([1, 2], [0, 1], 2, capacity=5), "capacity must be a sequence of numbers (list, tuple or numpy array), got 5 (int)"),
        (lambda: plan_rebalance([1, 2], [0, 1], 2, fixed_load="xy"), "fixed_load must be a sequence of numbers (list, tuple or numpy array), got 'xy' (str)"),
        (lambda: imbalance(None), "loads must be a sequence of numbers (list, tuple or numpy array), got None (NoneType)"),
        (lambda: lower_bound(3, 2), "throughput must be a sequence of numbers (list, tuple or numpy array), got 3 (int)"),
        (lambda: count_targets(None, 3), "counts must be a sequence of numbers (list, tuple or numpy array), got None (NoneType)"),
        (lambda: count_targets([1.5], 3), "counts must hold ints, got dtype float64"),
        (lambda: count_targets([True, 2], 3), "counts[0] must be a number, got True"),
        (lambda: count_targets([1], 2.5), "partition_count must be an int, got 2.5"),
        (lambda: count_targets([1], None), "partition_count must be an int, got None"),
        (lambda: plan_count_balance(None, ["a"]), "owner_by_partition must be a mapping or a sequence of owners, got None (NoneType)"),
        (lambda: plan_count_balance("ab", ["a", "b"]), "owner_by_partition must be a mapping or a sequence of owners, got 'ab' (str)"),
        (lambda: plan_count_balance(["a"], None), "flows must be a sequence of flow ids (its order breaks ties), got None (NoneType)"),
        (lambda: plan_count_balance(["a"], "a"), "flows must be a sequence of flow ids (its order breaks ties), got 'a' (str)"),
        (lambda: plan_count_balance(["a"], {"a"}), "flows must be a sequence of flow ids (its order breaks ties), got {'a'} (set)"),
        (lambda: plan_count_balance(["a"], ["a"], [None]), "weights[0] must be a finite number >= 0, got None"),
        (lambda: plan_count_balance(["a"], ["a"], ["1.5"]), "weights[0] must be a finite number >= 0, got '1.5'"),
        (lambda: plan_count_balance(["a"], ["a"], [True]), "weights[0] must be a finite number >= 0, got True"),
        (lambda: plan_count_balance(["a"], ["a"], {0: 10**400}), "weights[0] must be a finite number >= 0, got " + "1" + "0" * 400),
        (lambda: plan_count_balance(["a"], ["a"], 1.0), "weights must be a mapping or a sequence of numbers, got 1.0 (float)"),
    ],
)  # fmt: skip
def test_bad_input_names_the_field_and_the_value(call, message):
    with pytest.raises(ValueError) as err:
        call()
    assert str(err.value) == message


def test_good_inputs_of_every_accepted_shape_still_plan():
    expected = plan_rebalance([5, 3, 2], [0, 0, 0], 2)
    for throughput in ([5, 3, 2], (5, 3, 2), np.array([5, 3, 2]), range(5, 2, -1)):
        plan = plan_rebalance(throughput if not isinstance(throughput, range) else [5, 3, 2], [0, 0, 0], 2)
        assert plan == expected
    assert plan_rebalance(np.array([5, 3, 2]), np.array([0, 0, 0], dtype=np.uint8), 2) == expected
    assert plan_lpt([5.0, 3.0], (0, -1), 2).owner == (0, 1)
    assert plan_count_balance(np.array(["a", "b"]), ("a", "b"), np.array([1.0, 2.0])).lower_bound == 0
    assert (
        count_targets((2, 0), 2) == [1, 1]
        and is_count_balanced([])
        and handoff_lower_bound(np.array([2, 0]), 2) == 1
    )
