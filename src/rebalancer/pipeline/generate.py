"""Synthetic skewed telemetry: Zipf-distributed types, so a few hot types dominate like OAL metrics do."""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from rebalancer.pipeline.checks import EVENTS_MAX, PARTITIONS_MAX, check_int
from rebalancer.pipeline.ingest.contract import FORMATS  # what the generator writes is what a run reads

# What write_frame names its files (and their half-written copies): all --overwrite ever removes.
_GENERATED = re.compile(rf"^\.?part-\d{{5}}\.(?:{'|'.join(FORMATS)})(?:\.tmp)?$")

log = logging.getLogger(__name__)

START = np.datetime64("2026-01-01T00:00:00", "ms")
# Kinds of bad rows the generator plants; each maps to one quarantine reason.
BAD_KINDS = (
    "ts_missing",
    "ts_unparseable",
    "type_empty",
    "entity_missing",
    "value_missing",
    "value_not_numeric",
    "value_not_finite",
)


# (field, minimum, maximum): the events are made in memory; a file per task, as a run's partitions.
GENERATE_BOUNDS = (
    ("events", 0, EVENTS_MAX),
    ("types", 1, 1_000_000),
    ("entities", 1, 1_000_000),
    ("seed", 0, 2**63 - 1),
    ("minutes", 1, 1_000_000),
    ("files", 1, PARTITIONS_MAX),
)


@dataclass(frozen=True)
class GenerateConfig:
    """What `rebalancer pipeline generate` makes."""

    events: int = 300_000
    types: int = 400
    skew: float = 1.1
    entities: int = 200
    bad_rate: float = 0.001
    seed: int = 7
    format: str = "parquet"
    minutes: int = 60
    files: int = 4

    def __post_init__(self) -> None:
        self.validate()  # at construction, as RunRequest's: a bad value never waits for generate()

    def validate(self) -> None:
        """Counts are ints (a float or a bool failed later, inside numpy, naming no field), each
        bounded: the events are made in memory, one array of each, before a file is written. numpy's
        ints are ints too, stored as plain ints."""
        for name, minimum, maximum in GENERATE_BOUNDS:
            object.__setattr__(self, name, check_int(getattr(self, name), name, minimum, maximum))
        if not math.isfinite(self.skew) or self.skew < 0:  # NaN passes `skew < 0`
            raise ValueError(f"skew must be a finite number >= 0, got {self.skew}")
        if not 0 <= self.bad_rate <= 1:
            raise ValueError(f"bad_rate must be in [0, 1], got {self.bad_rate}")
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {self.format!r}")


def type_weights(types: int, skew: float) -> np.ndarray:
    """Zipf weights 1/k^s over ranks 1..types, normalised."""
    ranks = np.arange(1, types + 1, dtype=np.float64)
    weights = ranks**-skew
    return weights / weights.sum()


def make_frame(config: GenerateConfig) -> pd.DataFrame:
    """The events as one frame, sorted by time; bad rows included and marked nowhere but in their values."""
    config.validate()
    rng = np.random.default_rng(config.seed)
    n = config.events
    type_index = rng.choice(config.types, size=n, p=type_weights(config.types, config.skew))
    type_names = np.array([f"metric_{i:04d}" for i in range(config.types)], dtype=object)
    entity_names = np.array([f"svc-{i:05d}" for i in range(config.entities)], dtype=object)
    offsets_ms = np.sort(rng.integers(0, config.minutes * 60_000, size=n))
    ts_ms = START.astype(np.int64) + offsets_ms
    iso = np.datetime_as_string(ts_ms.astype("datetime64[ms]"), unit="ms", timezone="UTC")
    # A fifth of the rows carry epoch milliseconds instead of ISO-8601: both are in the contract.
    ts = iso.astype(object)
    as_epoch = rng.random(n) < 0.2
    ts[as_epoch] = ts_ms[as_epoch].astype(str)
    # Each type has its own scale so percentiles differ per type.
    scale = 1.0 + (np.arange(config.types) % 17) * 3.0
    value = np.round(rng.gamma(2.0, scale[type_index]), 3).astype(object)
    frame = pd.DataFrame(
        {
            "ts": ts,
            "type": type_names[type_index],
            "entity": entity_names[rng.integers(0, config.entities, size=n)],
            "value": value,
        }
    )
    bad = np.flatnonzero(rng.random(n) < config.bad_rate)
    kinds = rng.integers(0, len(BAD_KINDS), size=len(bad))
    text_values = config.format != "parquet"
    for kind_index, kind in enumerate(BAD_KINDS):
        rows = bad[kinds == kind_index]
        if kind == "ts_missing":
            frame.loc[rows, "ts"] = None
        elif kind == "ts_unparseable":
            frame.loc[rows, "ts"] = "not-a-time"
        elif kind == "type_empty":
            frame.loc[rows, "type"] = ""
        elif kind == "entity_missing":
            frame.loc[rows, "entity"] = None
        elif kind == "value_missing":
            frame.loc[rows, "value"] = None
        elif kind == "value_not_numeric":
            # Parquet stores value as double, which cannot hold text (pyarrow writes NaN as null there).
            frame.loc[rows, "value"] = "n/a" if text_values else float("nan")
        elif kind == "value_not_finite":
            frame.loc[rows, "value"] = float("inf")
    if not text_values:
        frame["value"] = frame["value"].astype("float64")
    return frame


def write_frame(frame: pd.DataFrame, out: str | Path, fmt: str, files: int) -> list[Path]:
    """Split into `files` time-ordered files, so a streaming run sees them as successive batches."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if files < 1:
        raise ValueError(f"files must be at least 1, got {files}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, chunk in enumerate(np.array_split(np.arange(len(frame)), files)):
        part = frame.iloc[chunk] if len(frame) else frame
        path = out / f"part-{index:05d}.{fmt}"
        tmp = out / f".{path.name}.tmp"
        if fmt == "parquet":
            part.to_parquet(tmp, index=False)
        elif fmt == "csv":
            part.to_csv(tmp, index=False)
        else:
            part.to_json(tmp, orient="records", lines=True)
        tmp.replace(path)  # a streaming source must never see a half-written file
        paths.append(path)
    return paths


def generate(config: GenerateConfig, out: Path, overwrite: bool = False) -> list[Path]:
    """Generate and write; returns the files written.

    A non-empty `out` is refused unless `overwrite`, which clears it first: files left from an
    earlier, larger generate would otherwise be read by the next run as part of this sample. Only
    what a generate writes is removed (part-NNNNN.FORMAT files): a directory holding anything else
    is refused, as the next run would read that too.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out must be a directory, got a file: {out}")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ValueError(f"out: {out} is not empty; --overwrite clears it first")
        entries = sorted(out.iterdir())
        others = [e.name for e in entries if not (_GENERATED.match(e.name) and e.is_file() and not e.is_symlink())]
        if others:
            shown = ", ".join(others[:3]) + (", …" if len(others) > 3 else "")
            raise ValueError(
                f"out: {out} holds {shown}, which generate did not write: --overwrite replaces only "
                "its own part-NNNNN files; give an empty or new --out"
            )
        for entry in entries:
            entry.unlink()
    frame = make_frame(config)
    paths = write_frame(frame, Path(out), config.format, config.files)
    log.info("wrote %d events in %d %s files to %s", len(frame), len(paths), config.format, out)
    return paths
