"""Hash vs throughput-weighted partitioning of the grouped-map stage, on skewed telemetry.

Settings, each run with both partitionings on the same input and the same SparkSession:
- `--partitions 16`: the skew ratios (max/median task rows);
- partitions == Spark's cores: the wall-clock ratio, where one straggler decides the run (the
  fastest of `--wall-repeat` runs per mode, 5 by default, the modes' runs interleaved);
- partitions == 64: the measured task seconds, list-scheduled onto 64 cores, project a cluster's
  makespan (on this machine 64 tasks queue on few cores, which hides the straggler).

`--master spark://HOST:PORT` runs it on a standalone cluster (`--ship` sends the package to executors
whose Python lacks it); the settings follow the cluster's cores.

Last line: RESULT events_per_s_weighted=… wall_ratio_weighted_vs_hash=… skew_ratio_hash=…
skew_ratio_weighted=… projected_makespan_ratio_64=…
"""

from __future__ import annotations

import argparse
import heapq
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

from rebalancer.pipeline.batch import run_batch
from rebalancer.pipeline.generate import GenerateConfig, generate
from rebalancer.pipeline.ingest.inspect import inspect_input
from rebalancer.pipeline.session.build import build_session
from rebalancer.pipeline.ship import shipped

PROJECTED_CORES = 64


def list_schedule(task_seconds: list[float], cores: int) -> float:
    """Makespan of tasks handed, in order, to whichever core frees up first (Spark's scheduler)."""
    free_at = [0.0] * cores
    for seconds in task_seconds:
        start = heapq.heappop(free_at)
        heapq.heappush(free_at, start + seconds)
    return max(free_at)


def ratio(values: list[float]) -> float:
    median = statistics.median(values)
    return max(values) / median if median > 0 else float("inf")


def interleaved(modes: tuple[str, ...], rounds: int) -> Iterator[tuple[int, str]]:
    """(round, mode) for `rounds` rounds of every mode, each round starting with the next mode, so
    a drift in the machine's speed reaches all of them and none always runs first."""
    for attempt in range(rounds):
        shift = attempt % len(modes)
        for mode in modes[shift:] + modes[:shift]:
            yield attempt, mode


def measure(
    spark, spec, modes: tuple[str, ...], partitions: int, work: Path, repeat: int, group_cost: int
) -> dict[str, dict]:
    """Best-of-`repeat` wall time per mode, the modes' runs interleaved (each round starts with the
    next mode) so a drift in the machine's speed reaches all of them; task stats from the fastest."""
    best: dict[str, dict] = {}
    for attempt, partitioning in interleaved(modes, repeat):
        out = work / f"{partitioning}-{partitions}-{attempt}"
        started = time.perf_counter()
        summary = run_batch(spark, spec, out, partitioning, partitions, report=False, group_cost=group_cost)
        wall = time.perf_counter() - started
        shutil.rmtree(out, ignore_errors=True)
        if repeat > 1:
            print(f"  {partitioning:>8} p={partitions:<3} run {attempt + 1}  {wall:7.2f} s", flush=True)
        if partitioning not in best or wall < best[partitioning]["wall"]:
            best[partitioning] = {"wall": wall, "summary": summary}
    return {partitioning: _row(partitioning, partitions, run["wall"], run["summary"]) for partitioning, run in best.items()}


def _row(partitioning: str, partitions: int, wall: float, summary: dict) -> dict:
    rows, seconds = summary["task_rows"], summary["task_seconds"]
    return {
        "partitioning": partitioning,
        "partitions": partitions,
        "wall": wall,
        "events_per_s": summary["ingested"] / wall,
        "rows_max": max(rows),
        "rows_median": statistics.median(rows),
        "rows_ratio": ratio(rows),
        "sec_max": max(seconds),
        "sec_median": statistics.median(seconds),
        "sec_ratio": ratio(seconds),
        "task_seconds": seconds,
        "makespan_64": list_schedule(seconds, PROJECTED_CORES),
        "sharded": summary["sharded_types"],
        "stages": summary["stage_seconds"],
    }


def show(row: dict) -> None:
    print(
        f"  {row['partitioning']:>8} p={row['partitions']:<3} wall {row['wall']:7.2f} s  "
        f"{row['events_per_s']:>10,.0f} ev/s  rows max/median {row['rows_max']:>9,}/{row['rows_median']:>11,.1f} "
        f"= {row['rows_ratio']:5.2f}  sec max/median {row['sec_max']:6.2f}/{row['sec_median']:6.2f} "
        f"= {row['sec_ratio']:5.2f}  makespan@64 {row['makespan_64']:6.2f} s  stages {row['stages']}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5_000_000)
    parser.add_argument("--types", type=int, default=400)
    parser.add_argument("--skew", type=float, default=1.1)
    parser.add_argument("--entities", type=int, default=100)
    parser.add_argument("--minutes", type=int, default=60, help="time span of the events")
    parser.add_argument("--partitions", type=int, default=16, help="the skew setting")
    parser.add_argument("--repeat", type=int, default=1, help="runs per mode and setting (best wall counts)")
    parser.add_argument(
        "--wall-repeat", type=int, default=5, help="runs per mode at partitions == cores, interleaved (best counts)"
    )
    parser.add_argument("--master", default="local[*]", help="any Spark master, e.g. spark://127.0.0.1:7077")
    parser.add_argument("--ship", action="store_true", help="ship the rebalancer package to the executors")
    parser.add_argument("--group-cost", type=int, default=0, help="weighted plan: rows-equivalent per handler call")
    parser.add_argument("--data", type=Path, default=None, help="where to cache the generated input")
    args = parser.parse_args(argv)

    data = args.data or Path(tempfile.gettempdir()) / (
        f"rebalancer-bench-{args.events}-{args.types}-{args.skew}-{args.entities}-{args.minutes}"
    )
    if not (data.exists() and any(data.glob("*.parquet"))):
        print(f"generating {args.events:,} events over {args.types} types (Zipf s={args.skew}) into {data}", flush=True)
        config = GenerateConfig(
            events=args.events, types=args.types, skew=args.skew, entities=args.entities,
            bad_rate=0.0005, seed=1, minutes=args.minutes, files=8,
        )
        shutil.rmtree(data, ignore_errors=True)
        generate(config, data)
    spec = inspect_input(data)
    spark = build_session(master=args.master, app_name="rebalancer-bench")
    cores = spark.sparkContext.defaultParallelism
    print(f"master {spark.sparkContext.master}, {cores} cores", flush=True)
    work = Path(tempfile.mkdtemp(prefix="rebalancer-bench-out-"))
    stack = ExitStack()
    try:
        if args.ship:
            stack.enter_context(shipped(spark))
        # Warm-up: JIT, Python workers, file cache; not measured.
        run_batch(spark, spec, work / "warmup", "hash", cores, report=False)
        results: dict[tuple[str, int], dict] = {}
        settings = (("skew", args.partitions), ("wall", cores), ("projection", PROJECTED_CORES))
        for index, (label, partitions) in enumerate(settings):
            print(f"{label}: partitions={partitions} (Spark cores={cores})", flush=True)
            # Alternate which mode runs first, so neither always inherits the other's warm state.
            order = ("hash", "weighted") if index % 2 == 0 else ("weighted", "hash")
            repeat = args.wall_repeat if label == "wall" else args.repeat
            for partitioning, row in measure(spark, spec, order, partitions, work, repeat, args.group_cost).items():
                results[(partitioning, partitions)] = row
                show(row)
    finally:
        stack.close()
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()

    skew_hash = results[("hash", args.partitions)]["rows_ratio"]
    skew_weighted = results[("weighted", args.partitions)]["rows_ratio"]
    wall_ratio = results[("weighted", cores)]["wall"] / results[("hash", cores)]["wall"]
    makespan_ratio = (
        results[("weighted", PROJECTED_CORES)]["makespan_64"] / results[("hash", PROJECTED_CORES)]["makespan_64"]
    )
    events_per_s = results[("weighted", cores)]["events_per_s"]
    print(
        f"projected makespan on {PROJECTED_CORES} cores: hash "
        f"{results[('hash', PROJECTED_CORES)]['makespan_64']:.2f} s, weighted "
        f"{results[('weighted', PROJECTED_CORES)]['makespan_64']:.2f} s; sharded types (p={args.partitions}): "
        f"{', '.join(results[('weighted', args.partitions)]['sharded']) or 'none'}"
    )
    print(
        f"RESULT events_per_s_weighted={events_per_s:.0f} wall_ratio_weighted_vs_hash={wall_ratio:.3f} "
        f"skew_ratio_hash={skew_hash:.3f} skew_ratio_weighted={skew_weighted:.3f} "
        f"projected_makespan_ratio_64={makespan_ratio:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
