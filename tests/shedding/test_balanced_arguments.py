"""Issue 33 follow-up: every `BalancedShedder` argument is checked (type, finite, range) with a
ValueError naming it. `low_hits=nan` used to be accepted (`nan < 1` is false) and `low_hits='3'` gave
a TypeError from the comparison."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.shedding import BalancedShedder

SETTINGS = settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
# Count arguments: name -> smallest int allowed. Amounts: name -> (bound, whether it is exclusive).
INTS = {
    "low_hits": 1,
    "high_hits": 1,
    "no_return_cycles": 1,
    "in_flight_timeout_cycles": 1,
    "max_moves_per_cycle": 0,
}
NUMBERS = {"stop_gap": (0.0, False), "tolerance": (0.0, False), "resolution": (0.0, True)}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"low_hits": math.nan}, "low_hits must be an int >= 1, got nan (float)"),
        ({"low_hits": "3"}, "low_hits must be an int >= 1, got '3' (str)"),
        ({"low_hits": 0}, "low_hits must be an int >= 1, got 0 (int)"),
        ({"low_hits": True}, "low_hits must be an int >= 1, got True (bool)"),
        ({"low_hits": 2.5}, "low_hits must be an int >= 1, got 2.5 (float)"),
        ({"high_hits": None}, "high_hits must be an int >= 1, got None (NoneType)"),
        ({"high_hits": math.inf}, "high_hits must be an int >= 1, got inf (float)"),
        ({"no_return_cycles": "120"}, "no_return_cycles must be an int >= 1, got '120' (str)"),
        (
            {"in_flight_timeout_cycles": math.nan},
            "in_flight_timeout_cycles must be an int >= 1, got nan (float)",
        ),
        ({"max_moves_per_cycle": -1}, "max_moves_per_cycle must be an int >= 0, got -1 (int)"),
        ({"max_moves_per_cycle": math.nan}, "max_moves_per_cycle must be an int >= 0, got nan (float)"),
        ({"stop_gap": math.nan}, "stop_gap must be a finite number >= 0, got nan (float)"),
        ({"stop_gap": "6"}, "stop_gap must be a finite number >= 0, got '6' (str)"),
        ({"stop_gap": math.inf}, "stop_gap must be a finite number >= 0, got inf (float)"),
        ({"tolerance": -0.5}, "tolerance must be a finite number >= 0, got -0.5 (float)"),
        ({"tolerance": False}, "tolerance must be a finite number >= 0, got False (bool)"),
        ({"tolerance": math.nan}, "tolerance must be a finite number >= 0, got nan (float)"),
        ({"resolution": 0}, "resolution must be a finite number > 0, got 0 (int)"),
        ({"resolution": "2"}, "resolution must be a finite number > 0, got '2' (str)"),
        ({"resolution": math.nan}, "resolution must be a finite number > 0, got nan (float)"),
        ({"resolution": 10**400}, "resolution must be a finite number > 0, got 1000"),
        ({"seed": "7"}, "seed must be an int or None, got '7' (str)"),
        ({"seed": 1.5}, "seed must be an int or None, got 1.5 (float)"),
        ({"seed": True}, "seed must be an int or None, got True (bool)"),
    ],
)
def test_a_bad_argument_is_a_value_error_naming_it(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        BalancedShedder(**kwargs)  # type: ignore[arg-type]


def test_numpy_numbers_are_taken_as_python_numbers() -> None:
    shedder = BalancedShedder(
        np.int64(3),
        low_hits=np.int64(4),
        stop_gap=np.float64(2.5),
        resolution=np.int32(1),  # type: ignore[arg-type]
    )
    assert (shedder.low_hits, shedder.stop_gap, shedder.resolution) == (4, 2.5, 1.0)
    assert (
        type(shedder.low_hits) is int
        and type(shedder.stop_gap) is float
        and type(shedder.resolution) is float
    )


def test_the_defaults_are_valid() -> None:
    shedder = BalancedShedder()
    assert (shedder.low_hits, shedder.high_hits, shedder.stop_gap, shedder.resolution) == (5, 2, 6.0, 2.0)


ANY = st.one_of(
    st.integers(min_value=-3, max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
)


@SETTINGS
@given(st.sampled_from(sorted(INTS) + sorted(NUMBERS)), ANY)
def test_each_argument_is_taken_iff_valid(name: str, value: object) -> None:
    if name in INTS:
        ok = type(value) is int and value >= INTS[name]
    else:
        low, exclusive = NUMBERS[name]
        ok = (
            type(value) in (int, float)
            and math.isfinite(value)  # type: ignore[arg-type]
            and (value > low if exclusive else value >= low)  # type: ignore[operator]
        )
    if ok:
        assert getattr(BalancedShedder(**{name: value}), name) == value  # type: ignore[arg-type]
    else:
        with pytest.raises(ValueError, match=rf"^{name} must be "):
            BalancedShedder(**{name: value})  # type: ignore[arg-type]
