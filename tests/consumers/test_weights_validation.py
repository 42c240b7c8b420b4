"""Issue 33 follow-up: `PartitionedQueue` weights are finite numbers >= 0 (docs/consumers.md:
"per-partition throughput (a sequence or a `{partition: weight}` mapping)"), as in
`plan_count_balance`. `float(v)` used to take "1.5" and True, and None gave a TypeError."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.consumers import PartitionedQueue

SETTINGS = settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        (["1.5"], "weights[0] must be a finite number >= 0, got '1.5'"),
        ([1.0, True], "weights[1] must be a finite number >= 0, got True"),
        ([None], "weights[0] must be a finite number >= 0, got None"),
        ({3: "2"}, "weights[3] must be a finite number >= 0, got '2'"),
        ({0: False}, "weights[0] must be a finite number >= 0, got False"),
        ([10**400], "weights[0] must be a finite number >= 0, got 1000000000"),  # float() overflowed
        ([1.0, 1 + 2j], "weights[1] must be a finite number >= 0, got (1+2j)"),
        ([math.nan], "weights[0] must be a finite number >= 0, got nan"),
        ([-math.inf], "weights[0] must be a finite number >= 0, got -inf"),
        ([np.bool_(True)], "weights[0] must be a finite number >= 0, got np.True_"),
        # Not a sequence of numbers: a str was enumerated character by character ("12" -> [1.0, 2.0]).
        ("12", "weights must be a mapping or a sequence of numbers, got '12' (str)"),
        (None, "weights must be a mapping or a sequence of numbers, got None (NoneType)"),
        (5, "weights must be a mapping or a sequence of numbers, got 5 (int)"),
        ({1.0, 2.0}, "weights must be a mapping or a sequence of numbers, got {1.0, 2.0} (set)"),
        (np.ones((2, 2)), "weights must be one-dimensional, got shape (2, 2)"),
    ],
)
def test_set_weights_refuses_with_a_value_error_naming_the_field(weights: object, message: str) -> None:
    pq = PartitionedQueue(partition_count=4)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        pq.set_weights(weights)  # type: ignore[arg-type]


def test_the_constructor_checks_weights_the_same_way() -> None:
    with pytest.raises(ValueError, match=r"^weights\[0\] must be a finite number >= 0, got '1'$"):
        PartitionedQueue(partition_count=2, weights=["1", 1])  # type: ignore[list-item]


def test_a_refused_call_keeps_the_weights_it_had() -> None:
    pq = PartitionedQueue(partition_count=2, weights=[1.0, 2.0])
    with pytest.raises(ValueError):
        pq.set_weights([3.0, "4"])  # type: ignore[list-item]
    assert pq._plan_weights() == [1.0, 2.0]


@pytest.mark.parametrize(
    "weights",
    [
        [1, 2.5, 0],
        (0.0, 3),
        {0: 1, 2: 7.5},
        np.array([1.0, 2.0]),
        np.array([1, 2], dtype=np.int32),
        [np.float32(1.5), np.int64(2)],
        range(3),
    ],
)
def test_numbers_of_every_kind_are_taken_as_floats(weights: object) -> None:
    pq = PartitionedQueue(partition_count=3)
    pq.set_weights(weights)  # type: ignore[arg-type]
    plan = pq._plan_weights()
    assert plan is not None and all(type(w) is float for w in plan)


ELEMENT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**1100), max_value=2**1100),
    st.booleans(),
    st.none(),
    st.text(max_size=4),
    st.from_regex(r"\A[0-9]{1,3}(\.[0-9])?\Z"),
    st.complex_numbers(max_magnitude=10),
)


@SETTINGS
@given(st.lists(ELEMENT, min_size=1, max_size=5))
def test_weights_are_taken_iff_every_one_is_a_finite_real_number_at_least_zero(values: list[object]) -> None:
    def ok(v: object) -> bool:
        if isinstance(v, bool) or not isinstance(v, int | float):
            return False
        return (v < 2**1024 if isinstance(v, int) else math.isfinite(v)) and v >= 0

    pq = PartitionedQueue(partition_count=len(values))
    bad = [i for i, v in enumerate(values) if not ok(v)]
    if bad:
        with pytest.raises(ValueError, match=rf"^weights\[{bad[0]}\] must be a finite number >= 0, got "):
            pq.set_weights(values)  # type: ignore[arg-type]
    else:
        pq.set_weights(values)  # type: ignore[arg-type]
        assert pq._plan_weights() == [float(v) for v in values]  # type: ignore[arg-type]
