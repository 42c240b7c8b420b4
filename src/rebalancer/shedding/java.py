"""Java's rules that Pulsar's decisions depend on, in one module: numbers, parsers, hash-map order.

* **Numbers.** The ports compute as Pulsar's Java does: the ``(int)`` cast of a double saturates,
  int arithmetic wraps, a double division by zero is an infinity or NaN, ``Math.max`` lets NaN win,
  ``Math.round`` rounds halves up.
* **Parsers.** ``Integer.valueOf``, ``Long.valueOf``, ``Double.valueOf`` and ``Boolean.valueOf`` as
  Pulsar's ``FieldParser`` applies them to a broker.conf value (``ShedderConfig.from_properties``).
* **Iteration order.** Pulsar's strategies read brokers and bundles out of ``ConcurrentHashMap``s and
  ``HashMap``s, and wherever they keep "the first" of equals (a stable sort, a strict ``>`` scan) the
  winner is the one that map iterates first. That order is a function of Java's ``String.hashCode``,
  the table's capacity and, within a bin, of insertion and resizing history, all of which is
  reproduced here for keys inserted once, in a given order, into a fresh map (the harness in
  conformance/pulsar fills Pulsar's maps that way, in report order).

  One case is not reproduced: a ``java.util.HashMap`` bin that turns into a red-black tree (nine keys
  in one bin of a table of 64 or more). Its order depends on the tree's shape; such a bin keeps
  insertion order here. Java's own documentation puts the chance of a bin that full at about 6e-8
  for well-spread keys.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from functools import lru_cache

# --- Java's numbers ---------------------------------------------------------------------------------

INT_MAX = 2**31 - 1
INT_MIN = -(2**31)


def java_int(x: float) -> int:
    """Java's ``(int)`` cast of a double: truncation, saturating at the int range, NaN to 0."""
    if math.isnan(x):
        return 0
    if x >= INT_MAX:
        return INT_MAX
    if x <= INT_MIN:
        return INT_MIN
    return int(x)


def wrap_int(x: int) -> int:
    """Java int arithmetic wraps around."""
    return (x - INT_MIN) % 2**32 + INT_MIN


def jdiv(a: float, b: float) -> float:
    """Java's double division: x/0 is an infinity and 0/0 is NaN."""
    if b != 0:
        return a / b
    if a == 0 or math.isnan(a):
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def jsqrt(x: float) -> float:
    """``Math.sqrt``: NaN below zero, not an error."""
    return math.sqrt(x) if x >= 0 else math.nan


def jmax(a: float, b: float) -> float:
    """``Math.max``: NaN wins."""
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


def java_round(x: float) -> int:
    """``Math.round(double)``: the nearest long, halves up, NaN to 0."""
    if math.isnan(x):
        return 0
    if x >= 2.0**63:
        return 2**63 - 1
    if x <= -(2.0**63):
        return -(2**63)
    floor = math.floor(x)
    return floor + 1 if x - floor >= 0.5 else floor


INTEGER_BITS = {"int": 32, "long": 64}  # Java's int and long

# --- Java's parsers, as Pulsar's FieldParser applies them to a broker.conf value ---------------------
#
# FieldParser skips a blank value (commons-lang StringUtils.isBlank: every char Character.isWhitespace),
# trims the rest with String.trim (every char <= U+0020 at either end), then calls Integer.valueOf,
# Long.valueOf, Double.valueOf or Boolean.valueOf.

JAVA_TRIM = "".join(chr(c) for c in range(0x21))
# Character.isWhitespace: the Unicode space separators except the no-break ones, plus these controls.
_JAVA_WHITESPACE_CONTROLS = frozenset("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f")
_NO_BREAK_SPACES = frozenset("\xa0\u2007\u202f")
# Integer.parseInt: an optional sign, then chars Character.digit reads in radix 10 (any Unicode Nd
# digit; `\d` below, checked to be one UTF-16 unit, as Java sees a supplementary char as surrogates).
_INTEGER = re.compile(r"[+-]?(\d+)")
# Double.valueOf (FloatingDecimal): ASCII digits only, no `_`; NaN and Infinity are case-sensitive and
# take no suffix; a hex float needs its binary exponent; an optional d/D/f/F suffix ends a number.
_DECIMAL = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)", re.ASCII
)
_HEX = re.compile(
    r"([+-]?0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?", re.ASCII
)


def java_blank(text: str) -> bool:
    """StringUtils.isBlank over Character.isWhitespace: Pulsar treats such a value as not set."""
    return all(
        c in _JAVA_WHITESPACE_CONTROLS
        or (unicodedata.category(c) in ("Zs", "Zl", "Zp") and c not in _NO_BREAK_SPACES)
        for c in text
    )


class JavaRangeError(ValueError):
    """An integer Java's grammar reads, out of its type's range (a message can then say which range)."""


def parse_java_int(text: str, bits: int = 32) -> int:
    """``Integer.valueOf`` (bits=32) or ``Long.valueOf`` (bits=64) of a trimmed property value.

    Accepts what Java accepts: an optional sign and decimal digits, including other scripts' digits
    (Java's ``Character.digit`` reads them, for chars up to U+FFFF); no ``_``, no ``.``, nothing
    out of the type's range. Raises ValueError otherwise.
    """
    body = text.strip(JAVA_TRIM)
    match = _INTEGER.fullmatch(body)
    if match is None or any(ord(c) > 0xFFFF for c in match.group(1)):
        raise ValueError(f"not a Java integer: {text!r}")
    limit = 2 ** (bits - 1)
    magnitude = 0
    for c in match.group(1):  # by hand: int() has a 4300-digit cap, and Java has none for leading zeros
        magnitude = magnitude * 10 + unicodedata.decimal(c)
        if magnitude > limit:
            raise JavaRangeError(f"out of the {bits}-bit range: {text!r}")
    value = -magnitude if body[0] == "-" else magnitude
    if not -limit <= value < limit:
        raise JavaRangeError(f"out of the {bits}-bit range: {text!r}")
    return value


def parse_java_double(text: str) -> float:
    """``Double.valueOf`` of a trimmed property value: NaN and infinities come back as floats."""
    body = text.strip(JAVA_TRIM)
    if _DECIMAL.fullmatch(body):
        return float(body.rstrip("fFdD"))  # the grammar matched is a subset of Python's
    hex_match = _HEX.fullmatch(body)
    if hex_match is None:
        raise ValueError(f"not a Java double: {text!r}")
    try:
        return float.fromhex(hex_match.group(1))
    except OverflowError:  # Java rounds a huge hex float to infinity
        return -math.inf if body[0] == "-" else math.inf


def parse_java_boolean(text: str) -> bool:
    """``true`` or ``false`` in any case, trimmed. Java's ``Boolean.valueOf`` reads anything but
    "true" as false; a typo such as ``yes`` would then silently disable a setting, so it is refused."""
    body = text.strip(JAVA_TRIM)
    if body.isascii() and body.lower() in ("true", "false"):
        return body.lower() == "true"
    raise ValueError(f"not true or false: {text!r}")


# --- the order Java's hash maps iterate ------------------------------------------------------------

_TREEIFY = 8  # a bin that already holds 8 keys turns into a tree when the 9th arrives
_MIN_TREEIFY_CAPACITY = 64
_UNTREEIFY = 6
_MAX_CAPACITY = 1 << 30


@lru_cache(maxsize=1 << 16)
def string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as an unsigned 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def _spread(key: str) -> int:
    """``HashMap.hash`` / ``ConcurrentHashMap.spread``: the high half folded into the low half."""
    h = string_hash(key)
    return (h ^ (h >> 16)) & 0x7FFFFFFF


def _table_size_for(c: int) -> int:
    n = 1
    while n < c:
        n <<= 1
    return min(max(n, 1), _MAX_CAPACITY)


def hash_map_order(keys: Iterable[str], capacity: int = 16) -> tuple[list[str], int]:
    """Iteration order of a ``java.util.HashMap``/``HashSet`` filled with ``keys`` in order.

    ``capacity`` is the table size at the first insertion (16 for ``new HashMap<>()``; a map that was
    cleared keeps its table). Returns the order and the table size afterwards. Within a bin a HashMap
    keeps insertion order, through resizes too, so only the final capacity matters; it is simulated
    because a crowded bin also doubles a small table.
    Memoised: the strategies ask for the same maps every cycle.
    """
    order, cap = _hash_map_order(tuple(keys), capacity)
    return list(order), cap


@lru_cache(maxsize=512)
def _hash_map_order(keys: tuple[str, ...], capacity: int) -> tuple[tuple[str, ...], int]:
    """The simulation behind ``hash_map_order``."""
    cap = _table_size_for(capacity)
    threshold = int(cap * 0.75)
    bins: dict[int, int] = {}
    ordered: list[str] = []
    seen: set[str] = set()
    hashes: list[int] = []
    for key in keys:
        if key in seen:
            continue
        seen.add(key)
        h = _spread(key)
        ordered.append(key)
        hashes.append(h)
        index = h & (cap - 1)
        bins[index] = bins.get(index, 0) + 1
        if bins[index] > _TREEIFY and cap < _MIN_TREEIFY_CAPACITY:
            cap, threshold = cap * 2, threshold * 2
            bins = _count_bins(hashes, cap)
        if len(ordered) > threshold:
            cap, threshold = cap * 2, threshold * 2
            bins = _count_bins(hashes, cap)
    mask = cap - 1
    order = sorted(range(len(ordered)), key=lambda i: hashes[i] & mask)
    return tuple(ordered[i] for i in order), cap


def _count_bins(hashes: Sequence[int], cap: int) -> dict[int, int]:
    counts: dict[int, int] = {}
    for h in hashes:
        counts[h & (cap - 1)] = counts.get(h & (cap - 1), 0) + 1
    return counts


class _ConcurrentTable:
    """A ``ConcurrentHashMap``'s bins, as a single thread fills it."""

    def __init__(self) -> None:
        self.n = 16
        self.size_ctl = 12
        self.bins: list[list[tuple[int, str]]] = [[] for _ in range(self.n)]
        self.tree: list[bool] = [False] * self.n
        self.count = 0

    def put(self, key: str) -> None:
        h = _spread(key)
        i = h & (self.n - 1)
        bin_ = self.bins[i]
        if self.tree[i]:
            bin_.insert(0, (h, key))  # TreeBin.putTreeVal links the new node in first
        else:
            existing = len(bin_)
            bin_.append((h, key))
            if existing >= _TREEIFY:
                if self.n < _MIN_TREEIFY_CAPACITY:
                    self._presize(self.n << 1)
                else:
                    self.tree[i] = True
        self.count += 1
        while self.count >= self.size_ctl and self.n < _MAX_CAPACITY:
            self._transfer()

    def _presize(self, size: int) -> None:
        c = _MAX_CAPACITY if size >= _MAX_CAPACITY >> 1 else _table_size_for(size + (size >> 1) + 1)
        while not (c <= self.size_ctl or self.n >= _MAX_CAPACITY):
            self._transfer()

    def _transfer(self) -> None:
        n = self.n
        bins: list[list[tuple[int, str]]] = [[] for _ in range(2 * n)]
        tree = [False] * (2 * n)
        for i, nodes in enumerate(self.bins):
            if not nodes:
                continue
            if self.tree[i]:
                lo = [node for node in nodes if not node[0] & n]
                hi = [node for node in nodes if node[0] & n]
                bins[i], bins[i + n] = lo, hi
                tree[i], tree[i + n] = len(lo) > _UNTREEIFY, len(hi) > _UNTREEIFY
                continue
            run_bit, last_run = nodes[0][0] & n, 0
            for j in range(1, len(nodes)):
                bit = nodes[j][0] & n
                if bit != run_bit:
                    run_bit, last_run = bit, j
            low: list[tuple[int, str]] = nodes[last_run:] if run_bit == 0 else []
            high: list[tuple[int, str]] = nodes[last_run:] if run_bit != 0 else []
            for node in nodes[:last_run]:  # each is linked in ahead of the list built so far
                if node[0] & n:
                    high = [node, *high]
                else:
                    low = [node, *low]
            bins[i], bins[i + n] = low, high
        self.bins, self.tree, self.n = bins, tree, 2 * n
        self.size_ctl = (n << 1) - (n >> 1)

    def keys(self) -> list[str]:
        return [key for nodes in self.bins for _, key in nodes]


def concurrent_hash_map_order(keys: Iterable[str]) -> list[str]:
    """Iteration order of a fresh ``ConcurrentHashMap`` filled with ``keys`` in order."""
    return list(_concurrent_hash_map_order(tuple(keys)))


@lru_cache(maxsize=512)
def _concurrent_hash_map_order(keys: tuple[str, ...]) -> tuple[str, ...]:
    table = _ConcurrentTable()
    seen: set[str] = set()
    for key in keys:
        if key not in seen:
            seen.add(key)
            table.put(key)
    return tuple(table.keys())


def hash_set_order(keys: Iterable[str]) -> list[str]:
    """The order of a ``new HashSet<>()`` filled with ``keys`` in order."""
    return hash_map_order(keys)[0]


def sorted_descending(items: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """Java's ``List.sort`` by descending value: stable, so equals keep the order given (a map's)."""
    return sorted(items, key=lambda item: -item[1])
