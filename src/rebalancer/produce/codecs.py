"""`compression.type`: librdkafka's codec names, aiokafka's codec id for each, and the package a
codec needs (whether this install has it is the adapter's `has_codec`: aiokafka's codec module is
not its public surface)."""

from __future__ import annotations

from rebalancer.produce.aiokafka_adapter import has_codec

__all__ = ["CODECS", "parse_compression"]

# name -> (aiokafka codec id, the package that provides it)
CODECS: dict[object, tuple[int, str | None]] = {
    None: (0, None),
    "none": (0, None),
    "gzip": (1, None),
    "snappy": (2, "cramjam"),
    "lz4": (3, "cramjam"),
    "zstd": (4, "cramjam"),
}


def parse_compression(value: object) -> int:
    """aiokafka's codec id for `compression.type` `value` (case-insensitive); ValueError for an
    unknown name, or for a codec whose package is not installed (at construction, not at a send)."""
    name = value.lower() if isinstance(value, str) else value
    if not (name is None or isinstance(name, str)) or name not in CODECS:  # a list is unhashable
        raise ValueError(f"compression.type must be one of none, gzip, snappy, lz4, zstd; got {value!r}")
    codec_id, package = CODECS[name]
    if package is not None and isinstance(name, str) and not has_codec(name):
        raise ValueError(
            f"compression.type={name} needs the {package} package: pip install {package} "
            "(rebalancer's 'kafka' extra brings it)"
        )
    return codec_id
