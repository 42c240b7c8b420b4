"""`rebalancer pipeline generate|run`."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rebalancer._args import finite_float, integer
from rebalancer.pipeline.generate import GenerateConfig
from rebalancer.pipeline.ingest import FORMATS
from rebalancer.pipeline.paths import is_remote, join, local_path, location_argument

if TYPE_CHECKING:
    from rebalancer.pipeline.ingest import InputSpec
    from rebalancer.pipeline.kafka.telemetry import KafkaInput

log = logging.getLogger(__name__)

DEFAULT_INPUT = Path("data/telemetry")
DEFAULT_OUTPUT = Path("out")
# Tasks of the demo whatever the cores: at 2 (a laptop's default parallelism) hash placement barely skews.
DEFAULT_PARTITIONS = 16
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl-C
# `make run` without --input: big enough to show the skew, small enough to finish in seconds.
DEFAULT_SAMPLE = GenerateConfig(events=300_000, types=400, skew=1.1, entities=200, bad_rate=0.001, files=4)


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="pipeline_command", metavar="COMMAND")
    sub.required = True

    gen = sub.add_parser(
        "generate",
        help="write synthetic skewed telemetry",
        description="Write synthetic telemetry rows (ts, type, entity, value) whose per-type volumes "
        "follow a Zipf law, so that a few types hold most rows: the skew that leaves Spark's hash "
        "partitioning with straggler tasks. A small share of rows is deliberately bad, to exercise "
        "the quarantine. Reproducible: the same --seed writes the same files.",
    )
    gen.add_argument(
        "--out", "--output", dest="out", required=True, type=Path, help="directory to write the files into"
    )
    gen.add_argument("--events", type=integer(), default=GenerateConfig.events, help="rows to write")
    gen.add_argument(
        "--types", type=integer(), default=GenerateConfig.types, help="distinct values of the type column"
    )
    gen.add_argument("--skew", type=finite_float(), default=GenerateConfig.skew, help="Zipf exponent of type volumes")
    gen.add_argument(
        "--entities", type=integer(), default=GenerateConfig.entities, help="distinct entities per type"
    )
    gen.add_argument("--bad-rate", type=finite_float(), default=GenerateConfig.bad_rate, help="share of bad rows")
    gen.add_argument("--seed", type=integer(minimum=0), default=GenerateConfig.seed, help="random seed")
    gen.add_argument("--format", choices=FORMATS, default=GenerateConfig.format, help="file format to write")
    gen.add_argument("--minutes", type=integer(), default=GenerateConfig.minutes, help="time span of the events")
    gen.add_argument("--files", type=integer(), default=GenerateConfig.files, help="files to split the events into")
    gen.set_defaults(func=cmd_generate)

    run = sub.add_parser(
        "run",
        help="run the pipeline (batch, or --stream)",
        description="Read telemetry rows with the columns ts (ISO-8601 or epoch milliseconds), type, "
        "entity and value from Parquet, CSV or JSON Lines; send bad rows to OUTPUT/quarantine/ with a "
        "reason; compute count, sum, min, max, mean and percentiles per type, entity and minute into "
        "OUTPUT/metrics/, with one pandas handler per type. Weighted partitioning assigns types to "
        "Spark tasks by their measured row counts (and splits hot types); hash is Spark's own "
        "placement. Writes OUTPUT/summary.json, OUTPUT/plan.json and OUTPUT/report.html. Without "
        "--input it generates a sample first. See docs/pipeline.md.",
    )
    run.add_argument(
        "--input",
        type=_input_argument,
        default=None,
        help=f"file or directory of Parquet, CSV or JSON Lines with columns ts, type, entity, value, found by name "
        f"(or a Hadoop filesystem URI: file://, hdfs://, s3a://, gs://, abfs://, passed to Spark as written) "
        f"(or kafka://HOST:PORT/TOPIC[?option=value&...], e.g. ?group=NAME: resume from a consumer group's "
        f"committed offsets and commit them after the outputs; or kafka://embedded/TOPIC: an in-process mock "
        f"cluster fed a sample) "
        f"(see --columns); ts is ISO-8601 or epoch milliseconds, and timestamps without an offset are UTC "
        f"(default: a sample in {DEFAULT_INPUT})",
    )
    run.add_argument(
        "--columns",
        default=None,
        metavar="NAME=SOURCE,...",
        help="the input's own names for the columns, e.g. ts=event_time,type=metric,entity=host,value=v "
        "(unmapped columns keep their names)",
    )
    run.add_argument(
        "--out",
        "--output",
        dest="output",
        type=location_argument,
        default=DEFAULT_OUTPUT,
        help="directory for metrics, quarantine, summary.json, plan.json and report.html: a local path or a "
        "Hadoop filesystem URI (file://, hdfs://, s3a://, gs://, abfs://)",
    )
    run.add_argument("--format", choices=FORMATS, default=None, help="input format (default: by extension)")
    run.add_argument(
        "--partitioning",
        choices=("weighted", "hash"),
        default="weighted",
        help="weighted: types placed on tasks by measured load; hash: Spark's hash placement",
    )
    run.add_argument(
        "--partitions",
        type=integer(),
        default=DEFAULT_PARTITIONS,
        help="Spark tasks the work is spread over, hash or weighted (the same on any machine, enough to show skew)",
    )
    run.add_argument(
        "--master",
        default=None,
        help="Spark master URL, or sc://HOST:PORT for Spark Connect (default: local[*], or spark-submit's)",
    )
    run.add_argument(
        "--remote",
        default=None,
        metavar="sc://HOST:PORT",
        help="a Spark Connect server, as pyspark spells it (the same as --master sc://…)",
    )
    run.add_argument("--stream", action="store_true", help="Structured Streaming over the input directory")
    run.add_argument("--rebalance-every", type=integer(), default=5, help="re-plan every N micro-batches")
    run.add_argument("--max-moves", type=integer(minimum=0), default=None, help="items a streaming re-plan may move")
    run.add_argument("--max-batches", type=integer(minimum=1), default=None, help="stop after N micro-batches")
    run.add_argument("--files-per-batch", type=integer(minimum=1), default=1, help="input files per micro-batch")
    run.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    run.add_argument(
        "--checkpoint",
        type=location_argument,
        default=None,
        help="a path or URI (default: OUTPUT/_checkpoint)",
    )
    run.add_argument(
        "--group-cost",
        type=integer(minimum=0),
        default=0,
        help="weighted: rows-equivalent cost of one handler call added to every planned item (default 0: rows only)",
    )
    run.add_argument(
        "--kafka-timeout",
        type=finite_float(minimum=0, exclusive=True),
        default=None,
        metavar="SECONDS",
        help="a kafka:// input: how long to wait for the brokers' metadata and offsets before failing "
        "(an unreachable server, a missing topic, a refused login); the reader option "
        "metadataTimeoutMs (default 10)",
    )
    run.add_argument("--no-report", action="store_true", help="skip report.html")
    run.add_argument(
        "--report-dir",
        type=Path,
        default=None,
        help="a local directory for summary.json, plan.json and report.html (default: the output, "
        "through the output's filesystem)",
    )
    run.add_argument(
        "--ship",
        action="store_true",
        help="send the installed rebalancer package to the executors (a zip on their Python path), "
        "for executors whose Python lacks it",
    )
    run.add_argument(
        "--sink",
        default=None,
        metavar="postgresql://USER:PASSWORD@HOST:PORT/DB",
        help="also upsert metrics and quarantine into PostgreSQL (idempotent; exactly once per stream batch)",
    )
    run.add_argument("--sink-schema", default="rebalancer", help="the PostgreSQL schema for --sink's tables")
    run.add_argument(
        "--handlers",
        type=Path,
        default=None,
        metavar="FILE.py",
        help="a Python file defining a rebalancer.pipeline.Pipeline: your handler per type pattern, each "
        "written to OUTPUT/<handler>/ (default: every type through the built-in aggregation into OUTPUT/metrics/)",
    )
    run.add_argument(
        "--cost",
        choices=("rows", "seconds"),
        default="rows",
        help="--handlers: place types on tasks by their rows, or by the seconds their calls took in the last run",
    )
    run.set_defaults(func=cmd_run)

    from rebalancer.pipeline.kafka.telemetry import add_produce_parser

    add_produce_parser(sub, DEFAULT_SAMPLE)


def _input_argument(text: str) -> Path | str:
    """A path, or a kafka:// URL or filesystem URI kept as written (a Path would fold its //)."""
    return location_argument(text)


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
    Console(markup=False).print(f"wrote {config.events:,} events in {len(paths)} {config.format} files to {args.out}")
    return 0


def session_master(flag: str | None, remote: str | None = None) -> str | None:
    """--master (or --remote) wins; under spark-submit (the JVM started us) the master is already set;
    else local[*]."""
    if remote:
        from rebalancer.pipeline.session import is_connect_url

        if not is_connect_url(remote):
            raise ValueError(f"remote must be a Spark Connect URL sc://HOST:PORT, got {remote!r}")
        if flag and flag != remote:
            raise ValueError(f"remote: give --master or --remote, not both (got {flag!r} and {remote!r})")
        return remote
    if flag:
        return flag
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        return None
    return "local[*]"


@contextmanager
def _stages(console: Any) -> Iterator[Callable[[str], None]]:
    """A progress line per stage: the current one spins, finished ones show their time."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    # Transient: the summary lists every stage's seconds, labelled, once the run is over.
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        current: list[Any] = []

        def step(stage: str) -> None:
            log.info("stage: %s", stage)
            if current:
                bar.update(current[-1], completed=1)
                bar.stop_task(current[-1])
            current.append(bar.add_task(stage, total=1))

        yield step
        if current:
            bar.update(current[-1], completed=1)
            bar.stop_task(current[-1])


REPORT_FILES = ("summary.json", "plan.json", "report.html")


def _written(
    summary: dict[str, Any], names: tuple[str, ...], report_dir: Path | None, report: bool
) -> list[str]:
    """The outputs among `names`, as the user would open them. A remote output is listed, not looked
    at: the session that could reach it has stopped."""
    found = []
    for name in names:
        in_reports = name in REPORT_FILES
        if in_reports and name == "report.html" and (not report or "batches" in summary):
            continue  # --no-report, or a stream (it writes no report)
        base: str | Path = report_dir if report_dir is not None and in_reports else summary["output"]
        shown = str(join(base, name))
        local = local_path(base)
        if local is None:
            found.append(shown + ("" if in_reports else "/"))
        elif (local / name).exists():
            found.append(shown + ("/" if (local / name).is_dir() else ""))
    return found


def _print_summary(
    console: Any, summary: dict[str, Any], report_dir: Path | None = None, report: bool = True
) -> None:
    """This run against Spark's hash placement, the files written, and where the report is."""
    from rich.table import Table

    from rebalancer.pipeline.report import format_skew

    table = Table(title="rebalancer pipeline", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    quarantined = f"{summary['quarantined']:,}"
    if summary["quarantined"]:
        quarantined += "  (" + ", ".join(f"{k} {v:,}" for k, v in summary["quarantine_reasons"].items()) + ")"
    rows = [
        ("input", summary["input"]),
        ("partitioning", f"{summary['partitioning']} over {summary['partitions']} tasks"),
        ("rows ingested", f"{summary['ingested']:,}"),
        ("accepted", f"{summary['accepted']:,}"),
        ("quarantined", quarantined),
        ("types", str(summary["types"])),
    ]
    if "batches" in summary:
        rows.insert(2, ("micro-batches", str(summary["batches"])))
    if summary.get("hash_load"):
        ours = f"this run ({summary['partitioning']})"
        rows += [
            (
                "skew, max/median task rows",
                f"{format_skew(summary['skew_ratio'])} {ours}, {format_skew(summary['hash_skew_ratio'])} with Spark's hash",
            ),
            (
                "largest task, rows",
                f"{max(summary['planned_load']):,} planned, {max(summary['hash_load']):,} with Spark's hash",
            ),
        ]
    else:
        rows.append(("skew, max/median task rows", format_skew(summary.get("skew_ratio"))))
    stages = ", ".join(
        f"{name.replace('_', ' ')} {sec:.1f}" for name, sec in summary.get("stage_seconds", {}).items()
    )
    rows.append(("elapsed", f"{summary['elapsed_s']:.1f} s" + (f"  ({stages})" if stages else "")))
    handler_lines = _handler_lines(summary)
    if handler_lines:
        rows.append(("handlers", "\n".join(handler_lines)))
    names = (
        "metrics",
        *[h for h in summary.get("handlers", {}) if h != "metrics"],
        "quarantine",
        "summary.json",
        "plan.json",
        "report.html",
    )
    files = _written(summary, names, report_dir, report)
    rows.append(("files written", "\n".join(files)))
    if summary.get("sink"):
        from rebalancer.pipeline.sinks.outputs import describe

        rows.append(("database", describe(summary["sink"])))
    for what, value in rows:
        table.add_row(what, value)
    console.print(table)
    page = next((file for file in files if file.endswith("report.html")), None)
    if page is not None:
        console.print(f"report: {page}  (open it in a browser)", highlight=False)


def _handler_lines(summary: dict[str, Any]) -> list[str]:
    """One line per handler (types, rows, calls, task-seconds skew) and the unhandled rows, if any."""
    from rebalancer.pipeline.report import format_skew

    handlers = summary.get("handlers", {})
    if set(handlers) <= {"metrics"} and not summary.get("unhandled"):
        return []
    lines = []
    for name, section in handlers.items():
        calls = section.get("calls")
        line = f"{name}: {section['types']} types, {section['rows']:,} rows"
        if calls is not None:
            line += f", {calls:,} calls"
        if "seconds_skew_ratio" in section:
            line += f", skew {format_skew(section['seconds_skew_ratio'])} (max/median task seconds)"
        lines.append(line)
    if summary.get("unhandled"):
        lines.append(f"unhandled: {summary['unhandled']:,} rows of {len(summary['unhandled_types'])} types")
    return lines


def _check_report_dir(report_dir: Path) -> None:
    """--report-dir is written at the run's very end: a file in its way is refused before any work."""
    if report_dir.exists() and not report_dir.is_dir():
        raise ValueError(f"report-dir must be a directory, got a file: {report_dir}")
    existing = report_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise ValueError(f"report-dir: cannot create {report_dir}: {existing} is not a directory")


def cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rebalancer.pipeline.ingest import check_output, inspect_input, parse_columns

    if args.partitions is not None and args.partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {args.partitions}")
    if args.rebalance_every < 1:
        raise ValueError(f"rebalance-every must be >= 1, got {args.rebalance_every}")
    if args.report_dir is not None:
        _check_report_dir(args.report_dir)
    master = session_master(args.master, getattr(args, "remote", None))
    handlers = None
    if args.handlers is not None:
        from rebalancer.pipeline.framework import load_handlers

        handlers = load_handlers(args.handlers)  # first: a bad file fails before any work
    console = Console(markup=False)  # paths, types and handler names are shown as written: "[x]" is no style
    if args.input is None:
        input_path = DEFAULT_INPUT
        if not input_path.exists() or not any(input_path.iterdir()):
            from rebalancer.pipeline.generate import generate

            with console.status(f"generating a sample into {input_path}"):
                generate(DEFAULT_SAMPLE, input_path)
            console.print(
                f"generated a sample: {DEFAULT_SAMPLE.events:,} events over {DEFAULT_SAMPLE.types} types "
                f"(Zipf {DEFAULT_SAMPLE.skew:g}) in {input_path}/"
            )
    else:
        input_path = args.input
    if isinstance(input_path, str) and input_path.lower().startswith("kafka://"):
        from rebalancer.pipeline.kafka.telemetry import parse_kafka_url

        if args.format is not None:
            raise ValueError(
                f"format: a kafka:// input holds JSON values, --format {args.format} is for files"
            )
        spec = parse_kafka_url(input_path, parse_columns(args.columns) if args.columns else None)
        spec = spec.with_timeout(getattr(args, "kafka_timeout", None))
        if not spec.embedded:
            from rebalancer.pipeline.kafka.telemetry import check_kafka_input

            check_kafka_input(spec, streaming=args.stream)  # before Spark: seconds, not a minute
    elif getattr(args, "kafka_timeout", None) is not None:
        raise ValueError("kafka-timeout: is for a kafka:// input")
    elif is_remote(input_path):
        spec = None  # checked through Spark's Hadoop FileSystem once the session is up
    else:
        spec = inspect_input(input_path, args.format, parse_columns(args.columns) if args.columns else None)
    checkpoint = (args.checkpoint or join(args.output, "_checkpoint")) if args.stream else None
    if spec is not None and not is_remote(args.output) and not is_remote(checkpoint):
        check_output(args.output, spec, checkpoint)  # a remote output is checked by the run, through Spark
    from rebalancer.pipeline.sinks import open_sink, prepare_sink

    sink = open_sink(
        args.sink, args.sink_schema
    )  # before Spark: an unreachable server or a bad login fails fast

    from pyspark.sql import SparkSession

    from rebalancer.pipeline.session import build_session

    # Stop the session at the end only if this command started it (not spark-submit's, not a caller's).
    owns_session = SparkSession.getActiveSession() is None and master is not None
    with console.status("starting Spark"):
        # -v is the project's own logs; Spark's and the JVM's startup output waits for -vv.
        spark = build_session(master=master, quiet=getattr(args, "verbose", 0) < 2)
    embedded = ExitStack()
    try:
        if spec is None:
            spec = inspect_input(
                input_path, args.format, parse_columns(args.columns) if args.columns else None, spark=spark
            )
        if getattr(args, "ship", False):
            from rebalancer.pipeline.ship import shipped

            console.print(
                f"shipping rebalancer to the executors: {embedded.enter_context(shipped(spark)).name}"
            )
        if getattr(spec, "embedded", False):
            from rebalancer.pipeline.kafka.telemetry import embedded_input

            # a KafkaInput has every field the run reads from an InputSpec (duck-typed through the run)
            topic_spec = cast("KafkaInput", spec)
            with console.status(
                f"starting an embedded Kafka cluster and producing a sample to {topic_spec.topic}"
            ):
                spec = cast("InputSpec", embedded.enter_context(embedded_input(topic_spec, DEFAULT_SAMPLE)))
        if sink is not None:
            # A table with other columns fails here, before any work.
            # A kafka input with a group keys its tables by batch, as a stream does.
            grouped = any(k.lower() == "group" for k in getattr(spec, "options", None) or {})
            prepare_sink(sink, spark, stream=args.stream or grouped, handlers=handlers)
        if args.stream:
            from rebalancer.pipeline.stream import StreamConfig, run_stream

            config = StreamConfig(
                partitions=args.partitions,
                partitioning=args.partitioning,
                rebalance_every=args.rebalance_every,
                max_moves=args.max_moves,
                max_batches=args.max_batches,
                files_per_batch=args.files_per_batch,
                available_now=args.available_now,
                checkpoint=args.checkpoint,
            )
            from pyspark.errors import StreamingQueryException

            from rebalancer.pipeline.ingest import input_name
            from rebalancer.pipeline.session import spark_error_reason

            try:
                with console.status("streaming (Ctrl-C stops cleanly)"):
                    summary = run_stream(
                        spark,
                        spec,
                        args.output,
                        config,
                        sink=sink,
                        handlers=handlers,
                        cost=args.cost,
                        report_dir=args.report_dir,
                        on_batch=lambda batch: console.print(batch.line(), highlight=False, soft_wrap=True),
                    )
            except StreamingQueryException as exc:  # the query's own failure: its cause, in one line
                raise ValueError(f"stream from {input_name(spec)} failed: {spark_error_reason(exc)}") from exc
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
                    sink=sink,
                    handlers=handlers,
                    cost=args.cost,
                    report_dir=args.report_dir,
                )
    finally:
        embedded.close()
        if owns_session:
            spark.stop()
    _print_summary(console, summary, args.report_dir, report=not args.no_report)
    if summary.get("interrupted"):
        console.print(f"stopped by Ctrl-C after {summary['batches']} micro-batches", highlight=False)
        return EXIT_INTERRUPTED
    return 0
