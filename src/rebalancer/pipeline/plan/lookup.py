"""Spark's `hash()` in Python, and an exact string -> int lookup that Spark evaluates per row
with no join.

The weighted dispatch needs each row's slot key from its type (and, for a split type, its entity
bucket). A broadcast hash join did that, and it was most of what the weighted plan added to the
map side of its shuffle: on 5M rows that stage took 0.3 to 0.4 s longer than hash's.
`PerfectHash` turns the lookup into integer arithmetic on Spark's own `hash()` of the string,
reads of constant arrays, and one string comparison that keeps it exact: FKS two-level perfect
hashing (Fredman, Komlós and Szemerédi, 1984), built in Python because Python computes the same
`hash()` Spark does. `balanced_apply` finds a row's plan item the same way when its key is one
string column.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

SEED = 42  # Spark's Murmur3Hash seed for hash() and HashPartitioning
_MASK = 0xFFFFFFFF
# Multiply-shift hashing (Dietzfelbinger et al.) of a hash's 32 bits: the top `bits` of the low 32
# bits of hash * factor, for a random odd factor. Factors below 2**30 keep the product under 2**62,
# so Spark's long arithmetic never overflows (and never fails, in ANSI mode), with no division.
_MAX_FACTOR = 1 << 30
_TRIES = 10_000  # a random factor fails with probability below 1/2: never reached in practice


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def _mix_k1(k1: int) -> int:
    k1 = k1 * 0xCC9E2D51 & _MASK
    return _rotl(k1, 15) * 0x1B873593 & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    return (_rotl(h1, 13) * 5 + 0xE6546B64) & _MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def murmur3_int(value: int, seed: int = SEED) -> int:
    """Spark's Murmur3_x86_32.hashInt, as a signed 32-bit int: `hash()` of an int column."""
    return _fmix(_mix_h1(seed, _mix_k1(value & _MASK)), 4)


def murmur3_text(text: str, seed: int = SEED) -> int:
    """Spark's `hash()` of a string: Murmur3_x86_32.hashUnsafeBytes of its UTF-8 bytes, which
    mixes the tail bytes one at a time, each a signed byte (not the reference algorithm's tail)."""
    data = text.encode("utf-8", "surrogatepass")
    h1 = seed
    aligned = len(data) - len(data) % 4
    for start in range(0, aligned, 4):
        h1 = _mix_h1(h1, _mix_k1(int.from_bytes(data[start : start + 4], "little")))
    for byte in data[aligned:]:
        h1 = _mix_h1(h1, _mix_k1((byte - 256 if byte >= 128 else byte) & _MASK))
    return _fmix(h1, len(data))


def _position(unsigned: int, factor: int, bits: int) -> int:
    """A cell among 2**bits for a hash's 32 bits, as the Spark expression computes it."""
    return ((unsigned * factor) & _MASK) >> (32 - bits)


def _bits(count: int) -> int:
    """The fewest bits that number `count` cells."""
    return max(0, count - 1).bit_length()


def _random_factor(rng: random.Random) -> int:
    return rng.randrange(1, _MAX_FACTOR, 2)


def constant_array(values: Sequence[int | str | None], kind: str) -> Column:
    """A constant array column. `from_json` of a literal is folded once by the optimizer, where
    `array(lit, lit, ...)` puts one expression per element into the plan (slow to plan when long)."""
    from pyspark.sql import functions as F

    return F.from_json(F.lit(json.dumps(list(values))), f"array<{kind}>")


@dataclass(frozen=True)
class PerfectHash:
    """An exact map from strings to ints as a Spark expression: a few integer operations (no
    division), five array reads and one string comparison per row, whatever the number of keys.

    Level one sends a key's hash to one of 2**bits buckets; bucket i's k keys sit in at least k*k
    cells from offsets[i], at a position its own factor makes distinct. The cell's name is compared
    with the row's string, so a string the map lacks gives null. Keys whose 32-bit hash another key
    already has (a map of 400 keys has such a pair with odds of about 1 in 50,000) are matched by
    name in `extra`.
    """

    factor: int
    bits: int
    offsets: tuple[int, ...]
    factors: tuple[int, ...]
    cell_bits: tuple[int, ...]
    names: tuple[str | None, ...]
    values: tuple[int, ...]
    extra: tuple[tuple[str, int], ...]

    @classmethod
    def build(cls, mapping: Mapping[str, int], seed: int = 0) -> PerfectHash:
        """The lookup for `mapping`; the same mapping and seed always give the same arrays."""
        by_hash: dict[int, str] = {}
        extra: list[tuple[str, int]] = []
        for name in sorted(mapping):
            unsigned = murmur3_text(name) & _MASK
            if unsigned in by_hash:
                extra.append((name, int(mapping[name])))
            else:
                by_hash[unsigned] = name
        rng = random.Random(seed)
        bits = _bits(len(by_hash))
        for _ in range(_TRIES):  # expected cells below 2 * buckets: at most 4 * buckets, within a few tries
            factor = _random_factor(rng)
            buckets: list[list[int]] = [[] for _ in range(1 << bits)]
            for unsigned in by_hash:
                buckets[_position(unsigned, factor, bits)].append(unsigned)
            if sum(len(bucket) ** 2 for bucket in buckets) <= 4 << bits:
                break
        else:
            raise RuntimeError(f"no first-level factor spreads {len(by_hash)} keys")
        offsets, factors, cell_bits = [], [], []
        names: list[str | None] = []
        values: list[int] = []
        for bucket in buckets:
            inner_bits = _bits(len(bucket) ** 2)
            inner = _separate(bucket, inner_bits, rng)
            offsets.append(len(names))
            factors.append(inner)
            cell_bits.append(inner_bits)
            placed: list[str | None] = [None] * (1 << inner_bits)
            placed_values = [0] * (1 << inner_bits)
            for unsigned in bucket:
                cell = _position(unsigned, inner, inner_bits)
                placed[cell] = by_hash[unsigned]
                placed_values[cell] = int(mapping[by_hash[unsigned]])
            names.extend(placed)
            values.extend(placed_values)
        return cls(
            factor,
            bits,
            tuple(offsets),
            tuple(factors),
            tuple(cell_bits),
            tuple(names),
            tuple(values),
            tuple(extra),
        )

    def get(self, key: str) -> int | None:
        """What `lookup` gives for `key`, computed in Python."""
        for name, value in self.extra:
            if name == key:
                return value
        unsigned = murmur3_text(key) & _MASK
        bucket = _position(unsigned, self.factor, self.bits)
        cell = self.offsets[bucket] + _position(unsigned, self.factors[bucket], self.cell_bits[bucket])
        return self.values[cell] if self.names[cell] == key else None

    def lookup(self, frame: DataFrame, key: str, out: str, key_hash: str | None = None) -> DataFrame:
        """`frame` plus an int column `out`: the value of string column `key`, or null.

        `key_hash` names a column of `frame` holding `hash(key)`, if the caller has one. The hash,
        bucket and cell are columns of their own (dropped at the end): nested, Spark would compute
        them once per reference.
        """
        from pyspark.sql import functions as F

        hashed, bucket, cell = key_hash or f"{out}__hash", f"{out}__bucket", f"{out}__cell"
        if key_hash is None:
            frame = frame.withColumn(hashed, F.hash(F.col(key)))
        unsigned = F.col(hashed).cast("long").bitwiseAND(F.lit(_MASK))

        def position(factor: Column, bits: Column) -> Column:
            return F.call_function(
                "shiftright", (unsigned * factor).bitwiseAND(F.lit(_MASK)), F.lit(32) - bits
            )

        def at(values: Column, index: str) -> Column:
            return F.element_at(values, F.col(index) + 1)

        frame = frame.withColumn(bucket, position(F.lit(self.factor), F.lit(self.bits)).cast("int"))
        frame = frame.withColumn(
            cell,
            (
                at(constant_array(self.offsets, "int"), bucket)
                + position(
                    at(constant_array(self.factors, "int"), bucket),
                    at(constant_array(self.cell_bits, "int"), bucket),
                )
            ).cast("int"),
        )
        found = F.when(
            at(constant_array(self.names, "string"), cell) == F.col(key),
            at(constant_array(self.values, "int"), cell),
        )
        for name, value in self.extra:
            found = F.when(F.col(key) == F.lit(name), F.lit(value)).otherwise(found)
        helpers = [bucket, cell] if key_hash is not None else [hashed, bucket, cell]
        return frame.withColumn(out, found.cast("int")).drop(*helpers)


def lookup_by_bucket(
    frame: DataFrame,
    key: str,
    key_hash: str,
    out: str,
    whole: Mapping[str | None, int],
    split: Mapping[str | None, Sequence[int | None]],
    bucket: Column,
) -> tuple[DataFrame, Column]:
    """`frame` with a helper int column `out`, and the value for each row: `whole[key]` (>= 0), or
    for a split key `split[key][bucket]` (`bucket` a per-row int within the key's list); null for a
    key in neither, or a None entry. The caller drops `out` once it has used the value.

    The perfect hash maps a whole key to its value and a split key to -1 - s: its values start at s
    in one constant array of all split keys' lists. A null key, which no hash holds, is matched apart.
    """
    from pyspark.sql import functions as F

    entries: dict[str | None, int] = dict(whole)
    flat: list[int | None] = []
    for name in sorted(split, key=repr):
        entries[name] = -1 - len(flat)
        flat.extend(split[name])
    null_entry = entries.pop(None, None)
    keyed = PerfectHash.build({name: value for name, value in entries.items() if name is not None}).lookup(
        frame, key, out, key_hash
    )
    found = F.col(out)
    if null_entry is not None:
        found = F.when(F.col(key).isNull(), F.lit(null_entry)).otherwise(found)
    if flat:
        in_split = F.element_at(constant_array(flat, "int"), (-found + bucket).cast("int"))
        found = F.when(found >= 0, found).otherwise(in_split)
    return keyed, found


def _separate(bucket: list[int], bits: int, rng: random.Random) -> int:
    """A factor that gives each hash of `bucket` its own cell among 2**bits."""
    if len(bucket) <= 1:
        return 1
    for _ in range(_TRIES):  # 2**bits >= keys**2: a random factor separates them with probability > 1/2
        factor = _random_factor(rng)
        if len({_position(unsigned, factor, bits) for unsigned in bucket}) == len(bucket):
            return factor
    raise RuntimeError(f"no factor separates a bucket of {len(bucket)} keys")
