"""Issue 33 follow-up: `rebalancer._numbers`, the strict decimal parsers shared by every package that
reads numbers typed by a user (librdkafka-style config, URL queries, reader options).

Each parser is checked against a model written independently of it: for integers the grammar
``^[+-]?[0-9]+$`` after dropping surrounding ASCII whitespace; for floats Python's own `float()`
restricted to ASCII, no underscore and no whitespace left once the ASCII whitespace is dropped.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rebalancer import _numbers
from rebalancer._numbers import ASCII_WHITESPACE, parse_float, parse_int

SETTINGS = settings(
    max_examples=500, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)

# What a user may type, and the lookalikes that Python's int()/float()/isdigit() take:
# '_' (int("1_0") == 10), non-ASCII digits ('٣' Arabic-Indic 3, '１' fullwidth 1, '²' superscript,
# which isdigit() calls a digit but int() refuses), Unicode whitespace that int() strips
# (U+2003, U+00A0, U+001C), and the letters of inf/nan/e.
ALPHABET = "0123456789+-._eEinfatyINFATY" + ASCII_WHITESPACE + "٣１²\u2003\xa0\x1c\x00"
TEXT = st.one_of(
    st.text(ALPHABET, max_size=12),
    st.text(max_size=8),
    st.from_regex(r"\A[ \t]?[+-]?[0-9]{1,25}[ \n]?\Z"),
    st.from_regex(r"\A[+-]?([0-9]{1,5}\.?[0-9]{0,5}|\.[0-9]{1,5})([eE][+-]?[0-9]{1,3})?\Z"),
    st.sampled_from(["inf", "-Infinity", "+nan", "NaN", "1e400", "-1e400", "1_0", "٣", "²", "--5"]),
)
INT_MODEL = re.compile(r"[+-]?[0-9]+")


def int_model(text: str) -> int | None:
    body = text.strip(ASCII_WHITESPACE)
    return int(body) if INT_MODEL.fullmatch(body) else None


def float_model(text: str, finite: bool) -> float | None:
    body = text.strip(ASCII_WHITESPACE)
    if not body.isascii() or "_" in body or body != body.strip():
        return None
    try:
        value = float(body)
    except ValueError:
        return None
    return None if finite and not math.isfinite(value) else value


@SETTINGS
@given(TEXT)
@example("1_0")
@example("٣")
@example("²")
@example("--5")
@example("+5")
@example(" \t-0042\r\n")
@example("\u20035")
def test_parse_int_matches_the_model(text: str) -> None:
    expected = int_model(text)
    if expected is None:
        with pytest.raises(ValueError) as info:
            parse_int(text, field="some.key")
        assert str(info.value).startswith("some.key must be an integer, got ")
    else:
        assert parse_int(text, field="some.key") == expected


@SETTINGS
@given(TEXT, st.booleans())
@example("1_5", True)
@example("١٥", True)
@example("nan", True)
@example("nan", False)
@example("-inf", False)
@example("1e400", True)
@example(" 2.5e-3\n", True)
@example("\x1c5", True)
def test_parse_float_matches_the_model(text: str, finite: bool) -> None:
    expected = float_model(text, finite)
    if expected is None:
        with pytest.raises(ValueError) as info:
            parse_float(text, field="some.key", finite=finite)
        assert str(info.value).startswith("some.key must be a ")
    else:
        value = parse_float(text, field="some.key", finite=finite)
        assert value == expected or (math.isnan(value) and math.isnan(expected))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1_0", "n must be an integer, got '1_0'"),
        ("٣", "n must be an integer, got '٣'"),
        ("²", "n must be an integer, got '²'"),
        ("--5", "n must be an integer, got '--5'"),
        ("", "n must be an integer, got ''"),
        ("5ms", "n must be an integer, got '5ms'"),
        ("0x10", "n must be an integer, got '0x10'"),
        ("1e3", "n must be an integer, got '1e3'"),
    ],
)
def test_parse_int_names_the_field_and_the_value(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse_int(text, field="n")


@pytest.mark.parametrize(
    ("text", "finite", "message"),
    [
        ("1_5", True, "x must be a number, got '1_5'"),
        ("nan", True, "x must be a finite number, got 'nan'"),
        ("-inf", True, "x must be a finite number, got '-inf'"),
        ("1e400", True, "x must be a finite number, got '1e400'"),
        ("0x1p3", False, "x must be a number, got '0x1p3'"),
    ],
)
def test_parse_float_names_the_field_and_the_value(text: str, finite: bool, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse_float(text, field="x", finite=finite)


def test_non_strings_are_a_value_error_naming_the_field() -> None:
    for value in (5, 5.0, None, b"5", True):
        with pytest.raises(ValueError, match=r"^n must be an integer, got "):
            parse_int(value, field="n")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"^n must be a number, got "):
            parse_float(value, field="n")  # type: ignore[arg-type]


def test_too_many_digits_is_a_value_error_naming_the_field_with_a_short_value() -> None:
    """int() refuses more than sys.int_info.default_max_str_digits digits without naming anything."""
    text = "1" * (sys.int_info.default_max_str_digits + 1)
    with pytest.raises(ValueError, match=r"^n must be an integer of at most \d+ digits, got '1111") as info:
        parse_int(text, field="n")
    assert len(str(info.value)) < 200


def test_a_secret_value_is_never_shown() -> None:
    for call in (
        lambda: parse_int("hunter2", field="sasl.password", secret=True),
        lambda: parse_float("hunter2", field="sasl.password", secret=True),
        lambda: parse_float("nan", field="sasl.password", secret=True),
    ):
        with pytest.raises(ValueError) as info:
            call()
        assert "hunter2" not in str(info.value) and "nan" not in str(info.value)
        assert str(info.value).startswith("sasl.password must be ")
        assert "hidden" in str(info.value)


def test_long_values_are_shown_bounded() -> None:
    with pytest.raises(ValueError) as info:
        parse_float("x" * 10_000, field="n")
    assert len(str(info.value)) < 200


def test_stdlib_only() -> None:
    """Importable by every package (balance excepted, which imports nothing of ours)."""
    lines = Path(_numbers.__file__).read_text().splitlines()
    imported = {line.split()[1].split(".")[0] for line in lines if line.startswith(("import ", "from "))}
    assert imported <= {"__future__", "math", "numbers", "re", "reprlib", "sys", "typing"}
