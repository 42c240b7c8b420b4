"""Property: for random valid inputs the metrics equal an independent pandas reference, and nothing is lost.

Random column order (per file), extra columns, a `columns` mapping, type and entity names from a wide
alphabet (with `#`, `/`, NUL and empty-looking strings), timestamps up to the edges of the valid range
in every accepted spelling, and a few out-of-range ones, over every input format. Each example is a
whole `run_batch` on the shared session, so the examples are few.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from pipeline_data import reference_metrics

from rebalancer.pipeline.batch import run_batch
from rebalancer.pipeline.ingest.contract import REQUIRED_COLUMNS
from rebalancer.pipeline.ingest.files import TS_MAX_MICROS, TS_MAX_MS, TS_MIN_MICROS, TS_MIN_MS
from rebalancer.pipeline.ingest.inspect import inspect_input

pytestmark = pytest.mark.spark

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# CSV is read line by line, so line breaks are outside its contract; everything else is in.
ALPHABET = st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\n\r")
# Names that once collided with shard names, and strings that look empty but are not.
SPECIAL_NAMES = ["x", "x#0", "x#1", "x/1", "x\x00", "#", "/", "\u200b", "\u00a0", "\t", " x ", '"', ",", "null", "é"]
EXTRA_COLUMNS = ["note", "extra_1"]


def _valid_name(name: str) -> bool:
    return name.strip(" ") != ""  # the contract: a type is missing when empty or only spaces


NAMES = st.one_of(st.sampled_from(SPECIAL_NAMES), st.text(ALPHABET, min_size=1, max_size=6).filter(_valid_name))


def _iso(micros: int, offset_minutes: int | None) -> str:
    """ISO-8601 with `Z`, with an offset, or (offset None) with none at all, which means UTC."""
    moment = EPOCH + timedelta(microseconds=micros)
    if offset_minutes is None:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")
    if offset_minutes == 0:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    local = moment + timedelta(minutes=offset_minutes)
    sign = "+" if offset_minutes > 0 else "-"
    hours, minutes = divmod(abs(offset_minutes), 60)
    return local.strftime("%Y-%m-%dT%H:%M:%S.%f") + f"{sign}{hours:02d}:{minutes:02d}"


@st.composite
def timestamps(draw: st.DrawFn, in_range: bool) -> str:
    if draw(st.booleans()):
        edges = [TS_MIN_MS, TS_MAX_MS] if in_range else [TS_MIN_MS - 1, TS_MAX_MS + 1, 10**19, -(10**16)]
        low, high = (TS_MIN_MS, TS_MAX_MS) if in_range else (TS_MAX_MS + 1, 10**15)
        return str(draw(st.one_of(st.sampled_from(edges), st.integers(low, high))))
    edges = [TS_MIN_MICROS, TS_MAX_MICROS] if in_range else [TS_MIN_MICROS - 1, TS_MAX_MICROS + 1]
    low, high = (TS_MIN_MICROS, TS_MAX_MICROS) if in_range else (TS_MAX_MICROS + 1, 2 * TS_MAX_MICROS)
    micros = draw(st.one_of(st.sampled_from(edges), st.integers(low, high)))
    offset = draw(st.one_of(st.none(), st.just(0), st.integers(-14 * 4, 14 * 4).map(lambda q: q * 15)))
    return _iso(micros, offset)


@dataclass
class Case:
    fmt: str
    files: list[tuple[list[str], list[dict[str, object]]]]  # (column order, rows) per file
    bad_ts: list[str] = field(default_factory=list)
    mapping: dict[str, str] | None = None
    partitions: int = 2
    partitioning: str = "weighted"


@st.composite
def cases(draw: st.DrawFn) -> Case:
    fmt = draw(st.sampled_from(["csv", "jsonl", "parquet"]))
    types = draw(st.lists(NAMES, min_size=1, max_size=5, unique=True))
    entities = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    # The first type takes about half the rows, so the weighted plan splits it into shards.
    type_of = st.one_of(st.just(types[0]), st.sampled_from(types))
    good = draw(st.lists(
        st.fixed_dictionaries({
            "ts": timestamps(in_range=True),
            "type": type_of,
            "entity": st.sampled_from(entities),
            "value": st.one_of(st.floats(-1e9, 1e9, allow_nan=False), st.integers(-1000, 1000).map(float)),
        }),
        min_size=1, max_size=40,
    ))
    bad_ts = draw(st.lists(timestamps(in_range=False), max_size=3))
    rows = good + [{"ts": ts, "type": types[0], "entity": entities[0], "value": 1.0} for ts in bad_ts]
    rows = draw(st.permutations(rows))
    split = draw(st.integers(0, len(rows)))
    files = []
    for chunk in (rows[:split], rows[split:]):
        if chunk:  # an empty file has no column types (pyarrow's null), so files would disagree
            order = list(draw(st.permutations(REQUIRED_COLUMNS)))
            for extra in draw(st.lists(st.sampled_from(EXTRA_COLUMNS), unique=True, max_size=2)):
                order.insert(draw(st.integers(0, len(order))), extra)
            files.append((order, chunk))
    mapping = {name: f"src {name}" for name in REQUIRED_COLUMNS} if draw(st.booleans()) else None
    return Case(fmt, files, bad_ts, mapping, draw(st.integers(1, 4)), draw(st.sampled_from(["weighted", "hash"])))


def _write(case: Case, root: Path) -> None:
    rename = case.mapping or {}
    for index, (order, rows) in enumerate(case.files):
        frame = pd.DataFrame(rows, columns=list(REQUIRED_COLUMNS)).assign(note="n", extra_1="9.5")
        frame = frame[order].rename(columns=rename)
        path = root / f"part-{index}.{case.fmt}"
        if case.fmt == "csv":
            # Values as repr() text, so the file holds exactly the floats the reference uses.
            frame.astype({rename.get("value", "value"): str}).to_csv(path, index=False)
        elif case.fmt == "jsonl":
            path.write_text("".join(json.dumps(record) + "\n" for record in frame.to_dict("records")))
        else:
            frame.astype({rename.get("value", "value"): "float64"}).to_parquet(path, index=False)


COLLISIONS = Case(
    "csv",
    [
        (["entity", "ts", "type", "value"],
         [{"ts": "2026-01-01T00:00:00Z", "type": "x", "entity": f"e{i}", "value": float(i)} for i in range(12)]),
        (["value", "note", "type", "entity", "ts"],
         [{"ts": str(TS_MAX_MS), "type": name, "entity": "e0", "value": 2.5} for name in ("x#1", "x/1", "x\x00")]
         + [{"ts": _iso(TS_MIN_MICROS, None), "type": "x#0", "entity": "\u200b", "value": -1.0}]),
    ],
    bad_ts=[str(TS_MIN_MS - 1)],
    partitions=2,
)
COLLISIONS.files[1][1].append({"ts": str(TS_MIN_MS - 1), "type": "x", "entity": "e0", "value": 1.0})


# No shrinking: every step is a Spark run, and an unshrunk failing case is already small.
@settings(max_examples=6, deadline=None, database=None, phases=(Phase.explicit, Phase.generate),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@example(case=COLLISIONS)
@given(case=cases())
def test_metrics_equal_a_pandas_reference_and_rows_reconcile(spark, case: Case):
    with tempfile.TemporaryDirectory(prefix="rebalancer-prop-") as tmp:
        root = Path(tmp)
        data = root / "input"
        data.mkdir()
        _write(case, data)
        out = root / "out"
        summary = run_batch(spark, inspect_input(data, columns=case.mapping), out, case.partitioning,
                            case.partitions, report=False)
        rows = [row for _order, chunk in case.files for row in chunk]
        good = pd.DataFrame([row for row in rows if row["ts"] not in case.bad_ts], columns=list(REQUIRED_COLUMNS))

        assert summary["ingested"] == len(rows) == summary["accepted"] + summary["quarantined"]
        assert summary["accepted"] == len(good)
        assert summary["quarantine_reasons"] == ({"ts_out_of_range": len(rows) - len(good)} if len(rows) > len(good) else {})
        assert sum(summary["task_rows"]) == len(good)
        plan = json.loads((out / "plan.json").read_text())
        assert sum(item["rows"] for item in plan["items"]) == len(good)
        assert sorted(plan["types"]) == sorted(set(good["type"]))
        if case.partitioning == "weighted":
            assert summary["task_rows"] == plan["load"]

        key = ["type", "entity", "minute"]
        got = pd.read_parquet(out / "metrics")
        got["minute"] = got["minute"].dt.tz_convert("UTC").astype("int64")
        want = reference_metrics(good)
        want["minute"] = want["minute"].astype("datetime64[us]").astype("int64")
        got = got.sort_values(key).reset_index(drop=True)
        want = want.sort_values(key).reset_index(drop=True)
        for column in ("type", "entity", "minute", "count", "min", "max", "p50", "p90", "p99"):
            assert got[column].tolist() == want[column].tolist(), column
        for column in ("sum", "mean"):
            np.testing.assert_allclose(got[column].to_numpy(), want[column].to_numpy(), rtol=1e-9, atol=1e-6)
