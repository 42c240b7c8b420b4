"""Plain `groupBy(key).applyInPandas` vs `balanced_apply` by rows and by measured seconds.

A per-key workload where rows are not cost: 2,000 keys with Zipf 1.1 volumes (4,000,000 rows), each
with one entity per 1,000 rows (2 to 50, as a service's instances grow with its traffic), and a
per-key function with a real fixed cost per call and a per-row one (per entity: a 5-minute rolling
p99, averaged per minute, then a least-squares trend with `np.polyfit`), split-safe by `entity`.
Task seconds are measured the same way in every mode: from a task's start (its Python worker
receiving the function) to its last call's end, less the time the worker waited for a CPU
(`own_clock`), so the skew shown is the work's, not the shared machine's. Three modes, each measured on its
second run (the first run of `cost="seconds"` records the seconds its second run plans with):
- plain: Spark's `df.groupBy("key").applyInPandas(func, schema)`, its calls timed by a wrapper;
- rows: `balanced_apply(..., split_by="entity", split_safe=True, cost="rows")`;
- seconds: `balanced_apply(..., split_by="entity", split_safe=True, cost="seconds", store=PlanStore(tmp))`.

Settings, as benchmarks/pipeline.py: `--partitions 16` (max/median task seconds), partitions ==
Spark's cores (wall clock: the fastest of `--wall-repeat` runs per mode, 5 by default, the modes'
runs interleaved), and 64 partitions, whose measured task seconds are list-scheduled onto 64
cores for a projected cluster makespan. Then the combine check: a sum-like function with hot keys
split and `combine` merging the partial sums must equal the plain result exactly.

The session lifts Spark 4's byte cap on Arrow batches (`spark.sql.execution.arrow.maxBytesPerBatch`),
for every mode, as docs/pipeline.md advises for narrow rows: with the cap, Spark measures the batch
after every row, which `mapInArrow` (balanced_apply's grouped map) pays and Spark's own
`applyInPandas` does not. `--spark-arrow-cap` keeps Spark's default cap instead.

Last line: RESULT seconds_skew_plain=… seconds_skew_rows=… seconds_skew_seconds=…
projected_makespan_ratio_64=… wall_ratio_vs_plain=… combine_ok=…
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

# benchmarks/ is the script's directory, so its sibling is importable: one scheduler for both benchmarks.
from pipeline import PROJECTED_CORES, interleaved, list_schedule, ratio
from rebalancer.pipeline.apply import PlanStore, balanced_apply
from rebalancer.pipeline.clock import TaskClock, own_clock
from rebalancer.pipeline.handler.builtin import TaskStatsParam, task_stats
from rebalancer.pipeline.session.build import ARROW_BYTES_UNCAPPED, build_session

START = np.datetime64("2026-01-01T00:00:00", "us")
TREND_SCHEMA = "key string, entity string, rows long, slope double"
SUM_SCHEMA = "key string, n long, total double"
MODES = ("plain", "rows", "seconds")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def volumes(rows: int, keys: int, skew: float) -> np.ndarray:
    """Rows per key, Zipf(`skew`) by rank, summing exactly to `rows` (largest remainders)."""
    weights = 1.0 / np.arange(1, keys + 1, dtype=np.float64) ** skew
    exact = rows * weights / weights.sum()
    counts = np.floor(exact).astype(np.int64)
    counts[np.argsort(counts - exact, kind="stable")[: rows - int(counts.sum())]] += 1
    return counts


def entities_per_key(counts: np.ndarray, most: int, rows_per_entity: int) -> np.ndarray:
    """A key's entities grow with its volume, as a service's instances do: one per
    `rows_per_entity` rows, at least 2 and at most `most`."""
    return np.clip(-(-counts // rows_per_entity), 2, max(2, most))


def generate_input(
    path: Path, rows: int, keys: int, skew: float, entities: int, minutes: int, rows_per_entity: int
) -> None:
    """Parquet files of (key, entity, ts, value), rows shuffled; values are whole numbers so sums are exact."""
    rng = np.random.default_rng(12)
    counts = volumes(rows, keys, skew)
    key_index = np.repeat(np.arange(keys), counts)
    rng.shuffle(key_index)
    key_names = np.array([f"k{i:04d}" for i in range(keys)], dtype=object)
    entity_names = np.array([f"e{i:03d}" for i in range(max(2, entities))], dtype=object)
    # Each row draws one of its own key's entities.
    entity_index = (rng.random(rows) * entities_per_key(counts, entities, rows_per_entity)[key_index]).astype(
        np.int64
    )
    table = pa.table(
        {
            "key": pa.array(key_names[key_index], pa.string()),
            "entity": pa.array(entity_names[entity_index], pa.string()),
            "ts": pa.array(START + rng.integers(0, minutes * 60_000_000, rows).astype("timedelta64[us]")),
            "value": pa.array(rng.integers(0, 1000, rows).astype(np.float64)),
        }
    )
    path.mkdir(parents=True, exist_ok=True)
    files = 8
    for index in range(files):
        chunk = table.slice(index * rows // files, (index + 1) * rows // files - index * rows // files)
        pq.write_table(chunk, path / f"part-{index}.parquet")


def trend(frame: pd.DataFrame) -> pd.DataFrame:
    """Per entity: its rows, and the trend (a linear fit's slope) of its 5-minute rolling p99,
    averaged per minute: a latency percentile's drift. The rolling window costs per row, the
    fits per call and entity.

    Split-safe by entity: every output row depends on one entity's rows only.
    """
    frame = frame.sort_values(["entity", "ts"], kind="stable")
    p99 = frame.groupby("entity", sort=True).rolling("5min", on="ts")["value"].quantile(0.99)
    minute = frame["ts"].dt.floor("1min")
    by_minute = pd.MultiIndex.from_arrays([frame["entity"].to_numpy(), minute.to_numpy()])
    per_minute = pd.Series(p99.to_numpy(), index=by_minute).groupby(level=[0, 1], sort=True).mean()
    counts = frame.groupby("entity", sort=True).size()
    slopes = []
    for _entity, series in per_minute.groupby(level=0, sort=True):
        x = series.index.get_level_values(1).asi8 / 60e9
        slopes.append(float(np.polyfit(x - x[0], series.to_numpy(), 1)[0]) if len(series) > 1 else 0.0)
    return pd.DataFrame(
        {"key": frame["key"].iloc[0], "entity": counts.index, "rows": counts.to_numpy(), "slope": slopes}
    )


def partial_sums(frame: pd.DataFrame) -> pd.DataFrame:
    """A sum-like per-key function: decomposable, so a split key's partials merge exactly."""
    return pd.DataFrame({"key": [frame["key"].iloc[0]], "n": [len(frame)], "total": [frame["value"].sum()]})


def merge_sums(partials: pd.DataFrame) -> pd.DataFrame:
    return partials.groupby("key", sort=False, dropna=False, as_index=False)[["n", "total"]].sum()


def timed(func: Callable[[pd.DataFrame], pd.DataFrame], stats: Any) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """`func`, reporting rows, start, end and calls per task to `stats` (a TaskStatsParam accumulator),
    as `balanced_apply`'s task stats do: on its clock (wall less the time spent waiting for a CPU),
    and from the task's start (its worker receiving the function, which restarts `TaskClock`)."""
    from pyspark import TaskContext

    clock = TaskClock()

    def call(frame: pd.DataFrame) -> pd.DataFrame:
        started = own_clock()
        out = func(frame)
        ended = own_clock()
        context = TaskContext.get()
        pid = context.partitionId() if context else -1
        begun = clock.begin(pid, started)
        stats.add({pid: [len(frame), started if begun is None else begun, ended, ended - started, 1]})
        return out

    return call


@dataclass
class Run:
    mode: str
    partitions: int
    wall: float
    rows: list[int]
    seconds: list[float]
    calls: list[int]
    split: list[Any] = field(default_factory=list)
    planned: list[float] = field(default_factory=list)  # the plan's load per slot, in its cost unit

    @property
    def makespan_64(self) -> float:
        return list_schedule(self.seconds, PROJECTED_CORES)

    def show(self) -> None:
        log(
            f"  {self.mode:>7} p={self.partitions:<3} wall {self.wall:7.2f} s  rows max/median "
            f"{max(self.rows):>9,}/{statistics.median(self.rows):>11,.1f}  sec max/median "
            f"{max(self.seconds):6.2f}/{statistics.median(self.seconds):6.2f} = {ratio(self.seconds):5.2f}  "
            f"calls {sum(self.calls):,}  makespan@64 {self.makespan_64:6.2f} s  split {len(self.split)}"
            + (f"  planned max/median {ratio(self.planned):5.2f}" if self.planned else "")
        )


def run_plain(spark: Any, df: Any, partitions: int) -> Run:
    stats = spark.sparkContext.accumulator({}, TaskStatsParam())
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    started = time.perf_counter()
    df.groupBy("key").applyInPandas(timed(trend, stats), TREND_SCHEMA).write.format("noop").mode(
        "overwrite"
    ).save()
    wall = time.perf_counter() - started
    rows, seconds = task_stats(stats.value, partitions)
    calls = [0] * partitions
    for pid, values in stats.value.items():
        calls[pid] = int(values[4])
    return Run("plain", partitions, wall, rows, seconds, calls)


def run_balanced(df: Any, partitions: int, cost: str, store: Any) -> Run:
    started = time.perf_counter()
    result = balanced_apply(
        df, "key", trend, TREND_SCHEMA, partitions=partitions, split_by="entity", split_safe=True, cost=cost,
        store=store,
    )
    result.frame.write.format("noop").mode("overwrite").save()
    wall = time.perf_counter() - started
    stats = result.task_stats()
    return Run(
        cost,
        partitions,
        wall,
        list(stats.rows),
        list(stats.seconds),
        list(stats.calls),
        list(result.plan.split),
        list(result.plan.load),
    )


def measure(
    spark: Any, df: Any, modes: tuple[str, ...], partitions: int, work: Path, repeat: int
) -> dict[str, Run]:
    """The fastest of `repeat` runs per mode after a first round, which warms up and, for
    cost="seconds", records the seconds the next plan uses (every run records again). The modes'
    runs are interleaved, each round starting with the next mode, so a drift in the machine's speed
    reaches all of them."""
    stores = {mode: PlanStore(work / f"store-{mode}-{partitions}") for mode in modes}
    best: dict[str, Run] = {}
    for attempt, mode in interleaved(modes, 1 + repeat):
        if mode == "plain":
            run = run_plain(spark, df, partitions)
        else:
            run = run_balanced(df, partitions, mode, stores[mode])
        if attempt == 0:
            log(f"  {mode:>7} p={partitions:<3} first run {run.wall:7.2f} s (not measured)")
            continue
        if repeat > 1:
            log(f"  {mode:>7} p={partitions:<3} run {attempt}     {run.wall:7.2f} s")
        if mode not in best or run.wall < best[mode].wall:
            best[mode] = run
    return {mode: best[mode] for mode in modes}


def combine_check(spark: Any, df: Any, partitions: int) -> tuple[bool, int]:
    """Hot keys split by entity, partial sums merged by `combine`: equal to the plain sums?"""
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    plain = df.groupBy("key").applyInPandas(partial_sums, SUM_SCHEMA).toPandas()
    result = balanced_apply(
        df, "key", partial_sums, SUM_SCHEMA, partitions=partitions, split_by="entity", combine=merge_sums
    )
    merged = result.frame.toPandas()
    plain = plain.sort_values("key", ignore_index=True)
    merged = merged.sort_values("key", ignore_index=True)
    split = len(result.plan.split)
    equal = split > 0 and plain.equals(merged)
    log(f"combine: {split} keys split, {len(merged)} merged rows, equal to plain: {plain.equals(merged)}")
    return equal, split


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--keys", type=int, default=2_000)
    parser.add_argument("--skew", type=float, default=1.1)
    parser.add_argument("--entities", type=int, default=50, help="most entities a key has")
    parser.add_argument(
        "--rows-per-entity", type=int, default=1000, help="a key has one entity per this many rows (at least 2)"
    )
    parser.add_argument("--minutes", type=int, default=60, help="time span of the rows")
    parser.add_argument("--partitions", type=int, default=16, help="the skew setting")
    parser.add_argument(
        "--repeat", type=int, default=1, help="measured runs per mode and setting (fastest counts)"
    )
    parser.add_argument(
        "--wall-repeat", type=int, default=5, help="measured runs per mode at partitions == cores, interleaved"
    )
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--spark-arrow-cap",
        action="store_true",
        help="keep Spark's default spark.sql.execution.arrow.maxBytesPerBatch (default: lifted, in every mode)",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: 200,000 rows over 200 keys")
    parser.add_argument("--data", type=Path, default=None, help="where to cache the generated input")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.keys = 200_000, 200

    data = args.data or Path(tempfile.gettempdir()) / (
        f"rebalancer-bench-apply-{args.rows}-{args.keys}-{args.skew}-{args.entities}-{args.rows_per_entity}"
        f"-{args.minutes}"
    )
    if not (data.exists() and any(data.glob("*.parquet"))):
        log(f"generating {args.rows:,} rows over {args.keys} keys (Zipf s={args.skew}) into {data}")
        shutil.rmtree(data, ignore_errors=True)
        generate_input(
            data, args.rows, args.keys, args.skew, args.entities, args.minutes, args.rows_per_entity
        )
    spark = build_session(master=args.master, app_name="rebalancer-bench-apply")
    # Equal task counts in every mode: AQE would coalesce the plain run's small shuffle partitions.
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
    if not args.spark_arrow_cap:
        spark.conf.set("spark.sql.execution.arrow.maxBytesPerBatch", ARROW_BYTES_UNCAPPED)
    log(
        "spark.sql.execution.arrow.maxBytesPerBatch="
        + str(spark.conf.get("spark.sql.execution.arrow.maxBytesPerBatch"))
        + (" (Spark's default)" if args.spark_arrow_cap else " (lifted, every mode)")
    )
    cores = spark.sparkContext.defaultParallelism
    work = Path(tempfile.mkdtemp(prefix="rebalancer-bench-apply-"))
    df = spark.read.parquet(str(data))
    results: dict[tuple[str, int], Run] = {}
    try:
        settings = (("skew", args.partitions), ("wall", cores), ("projection", PROJECTED_CORES))
        for index, (label, partitions) in enumerate(settings):
            log(f"{label}: partitions={partitions} (Spark cores={cores})")
            # Rotate which mode runs first, so none always inherits the others' warm state.
            order = MODES[index % 3 :] + MODES[: index % 3]
            repeat = args.wall_repeat if label == "wall" else args.repeat
            for mode, run in measure(spark, df, order, partitions, work, repeat).items():
                results[(mode, partitions)] = run
                run.show()
        combine_ok, _split = combine_check(spark, df, args.partitions)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()

    skew = {mode: ratio(results[(mode, args.partitions)].seconds) for mode in MODES}
    makespan = {mode: results[(mode, PROJECTED_CORES)].makespan_64 for mode in MODES}
    wall_ratio = results[("seconds", cores)].wall / results[("plain", cores)].wall
    log(
        f"projected makespan on {PROJECTED_CORES} cores: "
        + ", ".join(f"{mode} {makespan[mode]:.2f} s" for mode in MODES)
        + f"; wall at p={cores}: "
        + ", ".join(f"{mode} {results[(mode, cores)].wall:.2f} s" for mode in MODES)
    )
    print(
        f"RESULT seconds_skew_plain={skew['plain']:.3f} seconds_skew_rows={skew['rows']:.3f} "
        f"seconds_skew_seconds={skew['seconds']:.3f} "
        f"projected_makespan_ratio_64={makespan['seconds'] / makespan['plain']:.3f} "
        f"wall_ratio_vs_plain={wall_ratio:.3f} combine_ok={int(combine_ok)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
