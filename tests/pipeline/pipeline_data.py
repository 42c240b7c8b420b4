"""Tiny telemetry for the pipeline tests, with an independent pandas reference."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from rebalancer.pipeline.generate import GenerateConfig, make_frame

# One bad row per reason, written as CSV text so every kind (including "abc") can exist.
BAD_ROWS = [
    # ts, type, entity, value, expected reason
    ("", "metric_0001", "svc-1", "1.0", "ts_missing"),
    ("yesterday", "metric_0001", "svc-1", "1.0", "ts_unparseable"),
    ("2026-01-01T00:00:05Z", "", "svc-1", "1.0", "type_missing"),
    ("2026-01-01T00:00:05Z", "metric_0001", "", "1.0", "entity_missing"),
    ("2026-01-01T00:00:05Z", "metric_0001", "svc-1", "", "value_missing"),
    ("2026-01-01T00:00:05Z", "metric_0001", "svc-1", "abc", "value_not_numeric"),
    ("2026-01-01T00:00:05Z", "metric_0001", "svc-1", "NaN", "value_not_finite"),
    ("2026-01-01T00:00:05Z", "metric_0001", "svc-1", "Infinity", "value_not_finite"),
    ("1767225600000", "metric_0001", "svc-1", "-inf", "value_not_finite"),
]
EXPECTED_REASONS = {
    "ts_missing": 1,
    "ts_unparseable": 1,
    "type_missing": 1,
    "entity_missing": 1,
    "value_missing": 1,
    "value_not_numeric": 1,
    "value_not_finite": 3,
}


def good_frame(events: int = 3000, seed: int = 3) -> pd.DataFrame:
    """Skewed good rows: 12 Zipf types, so the top type (about a third) must be sharded at 4 slots."""
    config = GenerateConfig(events=events, types=12, skew=1.1, entities=6, bad_rate=0.0, seed=seed, minutes=3)
    return make_frame(config)


def write_dataset(root: Path) -> tuple[Path, pd.DataFrame]:
    """A CSV directory: generated good rows plus the hand-made bad rows. Returns (dir, good rows)."""
    root.mkdir(parents=True, exist_ok=True)
    good = good_frame()
    good.astype({"value": "float64"}).to_csv(root / "good.csv", index=False)
    # CSV reads an empty field as null, which is what "missing" means for text input.
    bad = pd.DataFrame([row[:4] for row in BAD_ROWS], columns=["ts", "type", "entity", "value"])
    bad.to_csv(root / "bad.csv", index=False)
    return root, good


def instant(text: str) -> pd.Timestamp:
    """A contract timestamp as a UTC instant: epoch milliseconds, or ISO-8601 (no offset means UTC).

    One string at a time: `pd.to_datetime` over a mix of offset and naive strings wraps some
    around (1677-09-21T00:13 became 2262-04-11T10:02).
    """
    if re.fullmatch(r"-?\d+", text.strip()):
        return pd.Timestamp(int(text), unit="ms", tz="UTC")
    stamp = pd.Timestamp(text)
    return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")


def _exact_key(name: str) -> str:
    return name.encode("utf-8", "surrogatepass").hex()


def reference_metrics(good: pd.DataFrame) -> pd.DataFrame:
    """Independent of the pipeline: pandas parsing and grouping, numpy's default quantiles."""
    parsed = pd.Series([instant(str(text)) for text in good["ts"]], index=good.index, dtype="datetime64[ns, UTC]")
    frame = pd.DataFrame(
        {
            "type": good["type"],
            "entity": good["entity"],
            "minute": parsed.dt.floor("min").dt.tz_localize(None),
            "value": good["value"].astype("float64"),
        }
    )
    # Grouped on the UTF-8 bytes: pandas' own string hashing stops at a NUL ("x" == "x\x00" to it).
    frame["type_key"] = frame["type"].map(_exact_key)
    frame["entity_key"] = frame["entity"].map(_exact_key)
    rows = []
    for _keys, group in frame.groupby(["type_key", "entity_key", "minute"], sort=True):
        values = group["value"].to_numpy()
        rows.append(
            {
                "type": group["type"].iloc[0],
                "entity": group["entity"].iloc[0],
                "minute": group["minute"].iloc[0],
                "count": len(values),
                "sum": values.sum(),
                "min": values.min(),
                "max": values.max(),
                "mean": values.mean(),
                "p50": np.quantile(values, 0.5),
                "p90": np.quantile(values, 0.9),
                "p99": np.quantile(values, 0.99),
            }
        )
    return pd.DataFrame(rows)


def read_metrics(path: Path) -> pd.DataFrame:
    frame = pd.read_parquet(path)
    frame["date"] = frame["date"].astype(str)
    frame["minute"] = pd.to_datetime(frame["minute"]).dt.tz_localize(None) if frame["minute"].dt.tz else frame["minute"]
    return frame.sort_values(["type", "entity", "minute"]).reset_index(drop=True)


