"""argparse types shared by every component's commands: numbers that are finite and in range, and
local paths that are no URI.

`float("inf")`, `float("nan")` and `float("1e999")` all parse, and `nan` slips through every
`value < minimum` check, so each numeric flag goes through one of these instead of `float`/`int`.
The text is read by `rebalancer._numbers`, the grammar the library reads config values and options
by (`int()`/`float()` would also take `1_0`, `٣` and Unicode spaces): one grammar for numbers in the
CLI and in the library. The error names the value as typed; argparse adds the flag (`argument
--seconds: must be a finite number >= 0, got 'inf'`). Standard library only: `rebalancer --help`
runs on a core install.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from pathlib import Path

from rebalancer._numbers import parse_float, parse_int
from rebalancer._secrets import masked_url

__all__ = ["finite_float", "integer", "local_path"]

# `scheme://…`: a URI, which Path() would take for a relative path (`./file:/u:PW@/x`).
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]+://")


def _bound(minimum: float | None, exclusive: bool) -> str:
    if minimum is None:
        return ""
    return f" {'>' if exclusive else '>='} {minimum:g}"


def finite_float(
    minimum: float | None = None, *, exclusive: bool = False, maximum: float | None = None
) -> Callable[[str], float]:
    """An argparse `type` for a finite float, at least `minimum` (above it when `exclusive`) and at
    most `maximum` (a wait's bound: `socket.settimeout(1e12)` is an OverflowError)."""
    for name, bound in (("minimum", minimum), ("maximum", maximum)):
        if bound is not None and not math.isfinite(bound):
            raise ValueError(f"{name} must be a finite number, got {bound!r}")
    wanted = f"a finite number{_bound(minimum, exclusive)}"
    if maximum is not None:
        wanted += f"{' and' if minimum is not None else ''} <= {maximum:g}"

    def parse(text: str) -> float:
        try:
            value = parse_float(text, field="value", finite=False)  # non-finite: refused below, as out of range
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        below = minimum is not None and (value <= minimum if exclusive else value < minimum)
        above = maximum is not None and value > maximum
        if not math.isfinite(value) or below or above:
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
        return value

    parse.__name__ = "finite_float"
    return parse


def integer(minimum: int | None = None) -> Callable[[str], int]:
    """An argparse `type` for an integer, at least `minimum`; `inf`, `nan` and `1.5` are refused."""
    wanted = f"an integer{_bound(minimum, False)}"

    def parse(text: str) -> int:
        try:
            value = parse_int(text, field="value")
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}") from None
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
        return value

    parse.__name__ = "integer"
    return parse


def local_path(text: str) -> Path:
    """An argparse `type` for a flag that takes a local path only: a URI is refused (its password
    as ***), not made a relative directory named after it."""
    if _URI.match(text):
        raise argparse.ArgumentTypeError(f"takes a local path, got the URI {masked_url(text)!r}")
    return Path(text)
