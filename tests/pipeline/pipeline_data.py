"""Tiny telemetry for the pipeline tests, with an independent pandas reference."""

from __future__ import annotations

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


def reference_metrics(good: pd.DataFrame) -> pd.DataFrame:
    """Independent of the pipeline: pandas parsing and grouping, numpy's default quantiles."""
    ts = good["ts"].astype(str)
    is_epoch = ts.str.fullmatch(r"-?\d+")
    parsed = pd.Series(pd.NaT, index=good.index, dtype="datetime64[ns, UTC]")
    parsed[is_epoch] = pd.to_datetime(ts[is_epoch].astype("int64"), unit="ms", utc=True)
    parsed[~is_epoch] = pd.to_datetime(ts[~is_epoch], utc=True, format="ISO8601")
    frame = pd.DataFrame(
        {
            "type": good["type"],
            "entity": good["entity"],
            "minute": parsed.dt.floor("min").dt.tz_localize(None),
            "value": good["value"].astype("float64"),
        }
    )
    rows = []
    for (type_name, entity, minute), group in frame.groupby(["type", "entity", "minute"], sort=True):
        values = group["value"].to_numpy()
        rows.append(
            {
                "type": type_name,
                "entity": entity,
                "minute": minute,
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


