"""Strict parsing of decimal numbers typed by a user: config values, URL queries, reader options.

Python's `int()` and `float()` are too lenient for that: they take `1_0` (10), non-ASCII digits
(`int("٣") == 3`) and surrounding Unicode whitespace, and `float()` takes `nan` and `inf`, which then
pass every `x < minimum` check. `str.isdigit()` is no guard either: it is true for `'²'`, which
`int()` refuses with a message that names no setting.

Surrounding ASCII whitespace (space, \\t, \\n, \\r, \\v, \\f: C's `isspace`) is dropped, as librdkafka's
`strtol`/`strtod` skip it and Kafka's Java client trims; any other whitespace is refused.

Stdlib only and nothing else of ours, so that any package may import it (`balance` does not: it
imports nothing of ours).
"""

from __future__ import annotations

import math
import re
import reprlib
import sys

__all__ = ["ASCII_WHITESPACE", "parse_float", "parse_int", "shown"]

ASCII_WHITESPACE = " \t\n\r\v\f"
_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
# Python's float grammar without underscores; re.ASCII keeps IGNORECASE from matching non-ASCII letters.
_FLOAT = re.compile(
    r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?|inf|infinity|nan)", re.ASCII | re.IGNORECASE
)

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


def shown(value: object, *, secret: bool = False) -> str:
    """`value` for an error message: a bounded repr (and its type unless a str), never a secret."""
    if secret:
        return f"<{type(value).__name__}, hidden>"
    text = _REPR.repr(value)
    return text if isinstance(value, str) else f"{text} ({type(value).__name__})"


def parse_int(text: str, *, field: str, secret: bool = False) -> int:
    """An optional sign and ASCII digits, nothing else; ValueError naming `field` and the text."""
    if isinstance(text, str):
        body = text.strip(ASCII_WHITESPACE)
        if _INT.fullmatch(body):
            try:
                return int(body)
            except ValueError:  # beyond sys.get_int_max_str_digits()
                limit = sys.get_int_max_str_digits()
                raise ValueError(
                    f"{field} must be an integer of at most {limit} digits, got {shown(text, secret=secret)}"
                ) from None
    raise ValueError(f"{field} must be an integer, got {shown(text, secret=secret)}")


def parse_float(text: str, *, field: str, finite: bool = True, secret: bool = False) -> float:
    """Python's float grammar minus underscores and non-ASCII digits; with `finite`, NaN, ±inf and
    what overflows to them (`1e400`) are refused too. ValueError naming `field` and the text."""
    if not isinstance(text, str) or not _FLOAT.fullmatch(body := text.strip(ASCII_WHITESPACE)):
        raise ValueError(f"{field} must be a number, got {shown(text, secret=secret)}")
    value = float(body)
    if finite and not math.isfinite(value):
        raise ValueError(f"{field} must be a finite number, got {shown(text, secret=secret)}")
    return value
