"""`rebalancer pipeline generate|run`."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rebalancer.pipeline.generate import FORMATS, GenerateConfig

DEFAULT_INPUT = Path("data/telemetry")
DEFAULT_OUTPUT = Path("out")
# `make run` without --input: big enough to show the skew, small enough to finish in seconds.
DEFAULT_SAMPLE = GenerateConfig(events=300_000, types=400, skew=1.1, entities=200, bad_rate=0.001, files=4)


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="pipeline_command", metavar="COMMAND")
    sub.required = True

    gen = sub.add_parser("generate", help="write synthetic skewed telemetry")
    gen.add_argument("--out", required=True, type=Path, help="directory to write the files into")
    gen.add_argument("--events", type=int, default=GenerateConfig.events)
    gen.add_argument("--types", type=int, default=GenerateConfig.types)
    gen.add_argument("--skew", type=float, default=GenerateConfig.skew, help="Zipf exponent of type volumes")
    gen.add_argument("--entities", type=int, default=GenerateConfig.entities)
    gen.add_argument("--bad-rate", type=float, default=GenerateConfig.bad_rate, help="share of bad rows")
    gen.add_argument("--seed", type=int, default=GenerateConfig.seed)
    gen.add_argument("--format", choices=FORMATS, default=GenerateConfig.format)
    gen.add_argument("--minutes", type=int, default=GenerateConfig.minutes, help="time span of the events")
    gen.add_argument("--files", type=int, default=GenerateConfig.files, help="files to split the events into")
    gen.set_defaults(func=cmd_generate)

    run = sub.add_parser("run", help="run the pipeline (batch, or --stream)")
    run.add_argument("--input", type=Path, default=None, help=f"file or directory (default: a sample in {DEFAULT_INPUT})")
    run.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    run.add_argument("--format", choices=FORMATS, default=None, help="input format (default: by extension)")
    run.add_argument("--partitioning", choices=("weighted", "hash"), default="weighted")
    run.add_argument("--partitions", type=int, default=None, help="dispatch tasks (default: Spark's cores)")
    run.add_argument("--master", default=None, help="Spark master URL (default: local[*], or spark-submit's)")
    run.add_argument("--stream", action="store_true", help="Structured Streaming over the input directory")
    run.add_argument("--rebalance-every", type=int, default=5, help="re-plan every N micro-batches")
    run.add_argument("--max-moves", type=int, default=None, help="items a streaming re-plan may move")
    run.add_argument("--max-batches", type=int, default=None, help="stop after N micro-batches")
    run.add_argument("--files-per-batch", type=int, default=1, help="input files per micro-batch")
    run.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    run.add_argument("--checkpoint", type=Path, default=None, help="default: OUTPUT/_checkpoint")
    run.add_argument(
        "--group-cost", type=int, default=0,
        help="weighted: rows-equivalent cost of one handler call added to every planned item (default 0: rows only)",
    )
    run.add_argument("--no-report", action="store_true", help="skip report.html")
    run.set_defaults(func=cmd_run)


def cmd_generate(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rebalancer.pipeline.generate import generate

    config = GenerateConfig(
        events=args.events,
        types=args.types,
        skew=args.skew,
        entities=args.entities,
        bad_rate=args.bad_rate,
        seed=args.seed,
        format=args.format,
        minutes=args.minutes,
        files=args.files,
    )
    config.validate()
    paths = generate(config, args.out)
    Console().print(f"wrote {config.events:,} events in {len(paths)} {config.format} files to {args.out}")
    return 0


def session_master(flag: str | None) -> str | None:
    """--master wins; under spark-submit (the JVM started us) the master is already set; else local[*]."""
    if flag:
        return flag
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        return None
    return "local[*]"


@contextmanager
def _stages(console: Any) -> Iterator[Callable[[str], None]]:
    """A progress line per stage: the current one spins, finished ones show their time."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as bar:
        current: list[Any] = []

        def step(stage: str) -> None:
            if current:
                bar.update(current[-1], completed=1)
                bar.stop_task(current[-1])
            current.append(bar.add_task(stage, total=1))

        yield step
        if current:
            bar.update(current[-1], completed=1)
            bar.stop_task(current[-1])


def _print_summary(console: Any, summary: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title="rebalancer pipeline", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    rows = [
        ("partitioning", f"{summary['partitioning']} over {summary['partitions']} tasks"),
        ("ingested", f"{summary['ingested']:,}"),
        ("accepted", f"{summary['accepted']:,}"),
        ("quarantined", f"{summary['quarantined']:,}" + (f"  {summary['quarantine_reasons']}" if summary["quarantined"] else "")),
        ("types", str(summary["types"])),
        ("skew (max/median task rows)", str(summary.get("skew_ratio"))),
        ("elapsed", f"{summary['elapsed_s']:.2f} s"),
        ("output", summary["output"]),
    ]
    if "batches" in summary:
        rows.insert(1, ("micro-batches", str(summary["batches"])))
    for what, value in rows:
        table.add_row(what, value)
    console.print(table)


def cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rebalancer.pipeline.ingest import inspect_input

    if args.partitions is not None and args.partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {args.partitions}")
    if args.rebalance_every < 1:
        raise ValueError(f"rebalance-every must be >= 1, got {args.rebalance_every}")
    console = Console()
    if args.input is None:
        input_path = DEFAULT_INPUT
        if not input_path.exists() or not any(input_path.iterdir()):
            from rebalancer.pipeline.generate import generate

            with console.status(f"generating a sample into {input_path}"):
                generate(DEFAULT_SAMPLE, input_path)
    else:
        input_path = args.input
    spec = inspect_input(input_path, args.format)

    from pyspark.sql import SparkSession

    from rebalancer.pipeline.session import build_session

    # Stop the session at the end only if this command started it (not spark-submit's, not a caller's).
    owns_session = SparkSession.getActiveSession() is None and session_master(args.master) is not None
    with console.status("starting Spark"):
        spark = build_session(master=session_master(args.master))
    try:
        if args.stream:
            from rebalancer.pipeline.stream import StreamConfig, run_stream

            config = StreamConfig(
                partitions=args.partitions or spark.sparkContext.defaultParallelism,
                partitioning=args.partitioning,
                rebalance_every=args.rebalance_every,
                max_moves=args.max_moves,
                max_batches=args.max_batches,
                files_per_batch=args.files_per_batch,
                available_now=args.available_now,
                checkpoint=args.checkpoint,
            )
            with console.status("streaming (Ctrl-C stops cleanly)"):
                summary = run_stream(spark, spec, args.output, config)
        else:
            from rebalancer.pipeline.batch import run_batch

            with _stages(console) as step:
                summary = run_batch(
                    spark,
                    spec,
                    args.output,
                    partitioning=args.partitioning,
                    partitions=args.partitions,
                    progress=step,
                    report=not args.no_report,
                    group_cost=args.group_cost,
                )
    finally:
        if owns_session:
            spark.stop()
    _print_summary(console, summary)
    return 0
