"""`rebalancer pipeline generate|run`."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rebalancer._args import finite_float, integer
from rebalancer._args import local_path as local_path_flag
from rebalancer._secrets import masks_errors, shown_location
from rebalancer.pipeline.checks import SECONDS_MAX
from rebalancer.pipeline.generate import GenerateConfig
from rebalancer.pipeline.ingest.contract import FORMATS
from rebalancer.pipeline.kafka.commands import add_produce_parser
from rebalancer.pipeline.outputs.claim import one_group_run_per_output
from rebalancer.pipeline.paths import is_remote, local_path
from rebalancer.pipeline.resolved import field_defaults
from rebalancer.pipeline.run_fields import SETTINGS
from rebalancer.pipeline.sinks.commands import add_postgres_parser
from rebalancer.pipeline.terminal import print_summary, stages

if TYPE_CHECKING:
    from rebalancer.pipeline.ingest.contract import Input
    from rebalancer.pipeline.kafka.telemetry import KafkaInput
    from rebalancer.pipeline.outputs.summary import RunSummary
    from rebalancer.pipeline.resolved import RunRequest

log = logging.getLogger(__name__)

DEFAULT_INPUT = Path("data/telemetry")
DEFAULT_OUTPUT = Path("out")
# Tasks of the demo whatever the cores: at 2 (a laptop's default parallelism) hash placement barely skews.
DEFAULT_PARTITIONS = 16
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl-C
# Spark waits about 80 s for a standalone master that does not answer, and minutes for Spark Connect.
DEFAULT_CONNECT_TIMEOUT_S = 30.0
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
        "--out", "--output", dest="out", required=True, type=local_path_flag, help="directory to write the files into"
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
    gen.add_argument(
        "--overwrite",
        action="store_true",
        help="clear a non-empty --out first (without it, one is refused: older files would be read too)",
    )
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
    defaults = {**field_defaults(), "input": None, "output": DEFAULT_OUTPUT, "partitions": DEFAULT_PARTITIONS}

    def setting(name: str, help: str, **options: Any) -> None:
        """A RunRequest field's flag, by the table: RunRequest checks the value, in the same words."""
        SETTINGS[name].add_to(run, defaults[name], help, **options)

    setting(
        "input",
        f"file or directory of Parquet, CSV or JSON Lines with columns ts, type, entity, value, found by name "
        f"(or a Hadoop filesystem URI: file://, hdfs://, s3a://, gs://, abfs://, passed to Spark as written) "
        f"(or kafka://HOST:PORT/TOPIC[?option=value&...], e.g. ?group=NAME: resume from a consumer group's "
        f"committed offsets and commit them after the outputs; or kafka://embedded/TOPIC: an in-process mock "
        f"cluster fed a sample) "
        f"(see --columns); ts is ISO-8601 or epoch milliseconds, and timestamps without an offset are UTC "
        f"(default: a sample in {DEFAULT_INPUT})",
    )
    setting(
        "columns",
        "the input's own names for the columns, e.g. ts=event_time,type=metric,entity=host,value=v "
        "(unmapped columns keep their names)",
    )
    setting(
        "output",
        "directory for metrics, quarantine, summary.json, plan.json and report.html: a local path or a "
        "Hadoop filesystem URI: file://, hdfs://, s3a://, gs://, abfs://",
    )
    setting("format", "input format (default: by extension)")
    setting("partitioning", "weighted: types placed on tasks by measured load; hash: Spark's hash placement")
    setting(
        "partitions",
        "Spark tasks the work is spread over, hash or weighted; the same on any machine, enough to show skew",
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
    setting("stream", "Structured Streaming over the input directory")
    setting("rebalance_every", "--stream, weighted: re-plan every N micro-batches")
    setting("max_moves", "--stream, weighted: items a re-plan may move")
    setting("max_batches", "--stream: stop after N micro-batches")
    setting("files_per_batch", "--stream over files: input files per micro-batch")
    setting("available_now", "--stream: process what is there, then stop")
    setting("checkpoint", "--stream: a path or URI (default: OUTPUT/_checkpoint)")
    setting(
        "group_cost",
        "a weighted batch run: rows-equivalent cost of one handler call added to every planned item; "
        "0 counts rows only",
    )
    setting(
        "kafka_timeout",
        "a kafka:// input: how long to wait for the brokers' metadata and offsets before failing "
        "(an unreachable server, a missing topic, a refused login); the reader option "
        "metadataTimeoutMs (default: 10)",
    )
    run.add_argument(
        "--connect-timeout",
        type=finite_float(minimum=0, exclusive=True, maximum=SECONDS_MAX),
        default=DEFAULT_CONNECT_TIMEOUT_S,
        metavar="SECONDS",
        help="how long to wait for a spark:// or k8s:// --master or an sc:// --remote to answer before failing",
    )
    setting(
        "mode",
        "an output that already holds a run: error refuses it; overwrite replaces that whole run "
        "(report, plan and checkpoint included); append adds this run to it: a stream resuming from its "
        "checkpoint, a kafka:// ?group= run",
    )
    setting(
        "plan_from",
        "a weighted batch run: start the plan from this plan.json, or a balanced_apply plan store keyed by "
        "one column (the type), or a directory holding either, and keep what it can of it "
        "(default: a fresh plan; a plan left in the output is never read)",
    )
    setting("report", "skip report.html")
    setting(
        "compare_hash",
        "also run the same input under Spark's hash placement and show both walls and the time saved",
    )
    run.add_argument(
        "--quiet",
        action="store_true",
        help="print only the summary (default: the stages as they run, a line each when not on a terminal)",
    )
    setting(
        "report_dir",
        "a local directory for summary.json, plan.json and report.html (default: the output, "
        "through the output's filesystem)",
    )
    run.add_argument(
        "--ship",
        action="store_true",
        help="send the installed rebalancer package to the executors (a zip on their Python path), "
        "for executors whose Python lacks it",
    )
    setting(
        "sink",
        "also upsert metrics and quarantine into PostgreSQL (idempotent; exactly once per stream batch)",
        metavar="postgresql://USER:PASSWORD@HOST:PORT/DB",
    )
    run.add_argument("--sink-schema", default="rebalancer", help="the PostgreSQL schema for --sink's tables")
    run.add_argument(
        "--conf",
        action="append",
        default=None,
        type=spark_conf_pair,
        metavar="KEY=VALUE",
        help="a Spark setting for the session this command starts, as spark-submit --conf takes it; "
        "repeat it for more. An sc:// session takes its settings from its server",
    )
    run.add_argument(
        "--json",
        action="store_true",
        help="print the run's summary (summary.json's content) as JSON on stdout, and nothing else there: "
        "progress and the summary's text go to stderr",
    )
    setting(
        "handlers",
        "a Python file defining a rebalancer.pipeline.Pipeline: your handler per type pattern, each "
        "written to OUTPUT/<handler>/ (default: every type through the built-in aggregation into OUTPUT/metrics/)",
    )
    setting(
        "cost",
        "--handlers: place types on tasks by their rows, or by the seconds their calls took in the last run",
    )
    run.set_defaults(func=cmd_run)

    add_produce_parser(sub, DEFAULT_SAMPLE)
    add_tool_parsers(sub)


def cmd_generate(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rebalancer._console import usable_width
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
    paths = generate(config, args.out, overwrite=args.overwrite)
    Console(markup=False, width=usable_width()).print(f"wrote {config.events:,} events in {len(paths)} {config.format} files to {args.out}")
    return 0


@masks_errors  # a Spark Connect URL's ;token= as ***
def session_master(flag: str | None, remote: str | None = None) -> str | None:
    """--master (or --remote) wins; under spark-submit (the JVM started us) the master is already set;
    else local[*]."""
    if remote:
        from rebalancer.pipeline.session.connect import is_connect_url

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


def _require_extras(master: str | None, sink: str | None) -> None:
    """The extras a run needs besides its input's (RunRequest checks those): one line naming the
    extra before any work, not a traceback, or a failure once Spark has started."""
    from rebalancer._extras import require_extra
    from rebalancer.pipeline.session.build import CONNECT_CLIENT_MODULES
    from rebalancer.pipeline.session.connect import is_connect_url

    if sink is not None:
        require_extra("--sink (the PostgreSQL sink)", "postgres")
    if is_connect_url(master):
        require_extra("Spark Connect (sc://)", "spark", CONNECT_CLIENT_MODULES)


def spark_conf_pair(text: str) -> tuple[str, str]:
    """`--conf KEY=VALUE`, split at the first `=` as spark-submit does; the key must name a setting."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or key != key.strip() or " " in key:
        # Only the key-like start is echoed: a mistyped separator (`key:value`, `key value`) would
        # otherwise show a value that may be a secret (spark.hadoop.fs.s3a.secret.key).
        shown = re.match(r"[A-Za-z0-9_.\-]*", text)[0]  # type: ignore[index]  # matches "" at least
        hidden = " and the rest, not shown" if len(shown) < len(text) else ""
        raise argparse.ArgumentTypeError(
            f"must be KEY=VALUE with a key such as spark.driver.memory, got {shown!r}{hidden}"
        )
    return key, value


@one_group_run_per_output(lambda arguments: (arguments["args"].input, arguments["args"].output))  # before Spark
def cmd_run(args: argparse.Namespace) -> int:
    """Builds a `RunRequest` from the flags (checked there, once) and calls `run`, with the terminal
    around it: a generated sample, the pre-Spark checks, the embedded cluster, progress lines."""
    from rich.console import Console

    from rebalancer._console import usable_width
    from rebalancer.pipeline.ingest.files import parse_columns
    from rebalancer.pipeline.outputs.check import check_output_location, check_writable
    from rebalancer.pipeline.resolved import RunRequest, resolve_input

    master = session_master(args.master, getattr(args, "remote", None))
    from rebalancer.pipeline.session.connect import is_connect_url

    if any(key == "spark.master" for key, _ in getattr(args, "conf", None) or ()):
        # spark-submit lets --master win over a --conf spark.master; silently running on another
        # master than --master says (its default included) would be worse than one line.
        raise ValueError("--conf spark.master: give the master with --master, not --conf")
    if getattr(args, "conf", None) and is_connect_url(master):
        keys = sorted(k for k, _ in args.conf)
        raise ValueError(f"--conf: a Spark Connect session takes its settings from its server, got {keys}")
    _require_extras(master, args.sink)  # before any work; a kafka:// input's, by RunRequest
    handlers = args.handlers
    if isinstance(handlers, Path):
        from rebalancer.pipeline.routing.handler_map import load_handlers

        handlers = load_handlers(handlers)  # first: a bad file fails before any work
    values = {name: s.value(args) for name, s in SETTINGS.items() if name not in ("handlers", "sink", "columns")}
    request = RunRequest(
        **{  # each value is checked by RunRequest, by the same table
            **values,
            "input": args.input if args.input is not None else DEFAULT_INPUT,
            "handlers": handlers,
            "columns": parse_columns(args.columns) if args.columns else None,
        }
    )
    for label, location in (("output", request.output), ("report-dir", request.report_dir),
                            ("checkpoint", request.checkpoint_location)):
        local = local_path(location) if location is not None else None
        if local is None:  # a remote one is the run's to check, through Spark
            continue
        if label == "output" and local.is_file() and args.input is not None:
            continue  # check_output_location names it against the given input ("is the input file"), before Spark
        check_writable(label, local)  # before any work: a sample generated, Spark started
    as_json = getattr(args, "json", False)
    # paths, types and handler names are shown as written: "[x]" is no style. With --json, stdout
    # carries the JSON alone and everything a person reads goes to stderr.
    console = Console(markup=False, stderr=as_json, width=usable_width())
    quiet = getattr(args, "quiet", False)
    if args.input is None and (not DEFAULT_INPUT.exists() or not any(DEFAULT_INPUT.iterdir())):
        from rebalancer.pipeline.generate import generate

        with console.status(f"generating a sample into {DEFAULT_INPUT}"):
            generate(DEFAULT_SAMPLE, DEFAULT_INPUT)
        if not quiet:
            console.print(
                f"generated a sample: {DEFAULT_SAMPLE.events:,} events over {DEFAULT_SAMPLE.types} types "
                f"(Zipf {DEFAULT_SAMPLE.skew:g}) in {DEFAULT_INPUT}/"
            )
    spec: Input | None = None
    if request.is_kafka:
        spec = resolve_input(request)
        if not getattr(spec, "embedded", False):
            from rebalancer.pipeline.kafka.telemetry import check_kafka_input

            check_kafka_input(cast("KafkaInput", spec), streaming=args.stream)  # before Spark: seconds, not a minute
    elif not is_remote(cast("str | Path", request.input)):  # a remote one is checked through Spark's Hadoop FS
        spec = resolve_input(request)
    checkpoint = request.checkpoint_location
    if spec is not None and not is_remote(args.output) and not is_remote(checkpoint):
        # A remote location is checked by the run, through Spark.
        reports = None if is_remote(request.report_dir) else request.report_dir
        check_output_location(args.output, spec, checkpoint, report_dir=reports)
    request.check_output()  # --mode: a local output already holding a run is refused before Spark starts
    from rebalancer.pipeline.sinks import open_sink

    # Before Spark: an unreachable server or a bad login fails fast.
    request = replace(request, sink=open_sink(args.sink, args.sink_schema))

    from pyspark.sql import SparkSession

    from rebalancer.pipeline.session.build import build_session
    from rebalancer.pipeline.session.quiet import interrupt_cancels_jobs, jvm_log_file, spark_python_logs_to

    # Stop the session at the end only if this command started it (not spark-submit's, not a caller's).
    owns_session = SparkSession.getActiveSession() is None and master is not None
    # Only a session this command starts is waited for: an address nothing answers at, or a listener
    # that is no Spark master, fails in --connect-timeout seconds.
    timeout = getattr(args, "connect_timeout", DEFAULT_CONNECT_TIMEOUT_S) if owns_session else None
    flag = "--remote" if getattr(args, "remote", None) else "--master"
    verbose = getattr(args, "verbose", 0)
    # -v is the project's own logs (and Spark's errors); Spark's and the JVM's startup output waits
    # for -vv. Without -v, Spark's logs go to a file, which a failure's one line names.
    log_file = spark_log_path(args.output, args.report_dir) if verbose == 0 and owns_session else None
    if log_file is not None:
        from rebalancer.pipeline.outputs.mode import claim_spark_log

        claim_spark_log(log_file)  # written over from the JVM's start: one no run wrote is refused first
    with console.status("starting Spark"):
        spark = build_session(
            master=master,
            quiet=verbose < 2,
            log_file=log_file,
            connect_timeout=timeout,
            field=flag,
            advice="--connect-timeout sets the wait",
            conf=dict(getattr(args, "conf", None) or []) or None,
        )
    python_logs = ExitStack()
    spark_log = jvm_log_file()
    if spark_log is not None:
        python_logs.enter_context(spark_python_logs_to(spark_log))
    with interrupt_cancels_jobs(spark), python_logs:  # Ctrl-C: jobs cancelled, exit 130, one line
        summary = _run_in_session(console, request, spark, spec, args, owns_session)
    from rebalancer.pipeline.outputs.report import no_rows_accepted

    console.print(summary.plan_line(), highlight=False)
    print_summary(console, summary, args.report_dir, report=not args.no_report)
    warning = no_rows_accepted(summary)
    if warning:
        print(f"rebalancer: warning: {warning}", file=sys.stderr)
    if as_json:
        print(json.dumps(summary.to_json(), indent=2, sort_keys=True))
    if summary.interrupted:
        console.print(f"stopped by Ctrl-C after {summary.batches} micro-batches", highlight=False)
        return EXIT_INTERRUPTED
    return 0


def spark_log_path(output: str | Path, report_dir: str | Path | None) -> Path:
    """Where a quiet run's Spark log goes: OUTPUT/spark.log, else (a remote output) the report
    directory's if it is local, else a new temporary directory's."""
    from rebalancer.pipeline.outputs.manifest import SPARK_LOG

    local = local_path(output)
    if local is None and report_dir is not None:
        local = local_path(report_dir)
    if local is None:
        local = Path(tempfile.mkdtemp(prefix="rebalancer-"))
    return local / SPARK_LOG


def _run_in_session(
    console: Any, request: RunRequest, spark: Any, spec: Input | None, args: argparse.Namespace, owns_session: bool
) -> RunSummary:
    """The run's part that needs the session, which it stops at the end if this command started it."""
    embedded = ExitStack()
    try:
        if getattr(args, "ship", False):
            from rebalancer.pipeline.ship import shipped

            console.print(
                f"shipping rebalancer to the executors: {embedded.enter_context(shipped(spark)).name}"
            )
        if getattr(spec, "embedded", False):
            from rebalancer.pipeline.kafka.telemetry import embedded_input

            topic_spec = cast("KafkaInput", spec)
            with console.status(
                f"starting an embedded Kafka cluster and producing a sample to {topic_spec.topic}"
            ):
                spec = embedded.enter_context(embedded_input(topic_spec, DEFAULT_SAMPLE))
        if spec is not None:
            request = replace(request, input=spec)
        return _run(console, request, spark, args)
    finally:
        embedded.close()
        if owns_session:
            spark.stop()


def _run(console: Any, request: RunRequest, spark: Any, args: argparse.Namespace) -> RunSummary:
    """`run`, with a progress line per stage (a batch) or per micro-batch (a stream)."""
    from rebalancer.pipeline.runner import run

    if not request.stream:
        with stages(console, quiet=getattr(args, "quiet", False)) as step:
            return run(request, spark, progress=step)
    from pyspark.errors import StreamingQueryException

    from rebalancer.pipeline.session.build import spark_error_reason

    try:
        with console.status("streaming (Ctrl-C stops cleanly)"):
            return run(
                request,
                spark,
                on_batch=lambda batch: console.print(batch.line(), highlight=False, soft_wrap=True),
            )
    except StreamingQueryException as exc:  # the query's own failure: its cause, in one line
        shown = request.input.describe() if hasattr(request.input, "describe") else shown_location(request.input)
        raise ValueError(f"stream from {shown} failed: {spark_error_reason(exc)}") from exc


# -- `rebalancer pipeline ship` and `rebalancer pipeline postgres` ---------------------------------
def add_tool_parsers(sub: Any) -> None:
    ship = sub.add_parser(
        "ship",
        help="zip the installed package for spark-submit --py-files",
        description="Write the installed rebalancer package as a zip whose top level is rebalancer/, for "
        "spark-submit --py-files or SparkContext.addPyFile (see docs/pipeline.md, --ship). Prints its path.",
    )
    ship.add_argument("dest", nargs="?", type=local_path_flag, default=Path("."), help="a directory or a .zip path")
    ship.set_defaults(func=cmd_ship)
    add_postgres_parser(sub)


def cmd_ship(args: argparse.Namespace) -> int:
    from rebalancer.pipeline.ship import package_zip

    print(package_zip(args.dest))
    return 0
