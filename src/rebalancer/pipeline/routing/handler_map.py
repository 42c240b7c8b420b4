"""The handler map: the pipeline runs a user's per-type handlers, as SkyWalking's queue does.

A user's module builds a `Pipeline`, registers a handler per type pattern, and may name a default
for the types no pattern matches (`"metrics"`, the built-in aggregation) or none (those types are
counted as unhandled, never dropped silently). `rebalancer pipeline run --handlers FILE` loads it.
Each handler runs through `balanced_apply` with the type as its key, so its types (and, with
`split_by`, its hot types' shards) are placed on tasks by measured cost.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import logging
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rebalancer._secrets import shown_location
from rebalancer.balance.metrics import max_over_median
from rebalancer.pipeline.ingest.contract import SKEW_DIGITS
from rebalancer.pipeline.session.build import spark_error_reason

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

BUILTIN = "metrics"  # the built-in aggregation's name, and its output directory
# Names a handler cannot take: they are the run's other outputs (a manifest, a log and a scratch too).
RESERVED = frozenset(
    {"quarantine", "summary.json", "plan.json", "report.html", "_checkpoint", "_plans", "_manifest.json",
     "spark.log", "_compare_hash"}
)
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Handler:
    """One registered handler: its name (the output directory), what it matches and how it runs."""

    name: str
    patterns: tuple[str, ...]
    func: Callable[..., pd.DataFrame]
    schema: str
    split_by: str | None = None
    combine: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    key: tuple[str, ...] | None = None

    def matches(self, type_name: str) -> bool:
        return any(_match(pattern, type_name) for pattern in self.patterns)

    def table_key(self, schema: StructType) -> tuple[str, ...]:
        """The primary key of this handler's table in a database sink: `key` as registered, or
        else every string, date and timestamp column of its output (the dimensions, not measures)."""
        from pyspark.sql.types import DateType, StringType, TimestampNTZType, TimestampType

        names = schema.fieldNames()
        if self.key is not None:
            missing = [name for name in self.key if name not in names]
            if missing:
                raise ValueError(
                    f"handler {self.name!r}: key column(s) {', '.join(missing)} not in its schema"
                )
            return self.key
        dimensions = (StringType, DateType, TimestampType, TimestampNTZType)
        key = tuple(f.name for f in schema.fields if isinstance(f.dataType, dimensions))
        if not key:
            raise ValueError(f"handler {self.name!r}: no key for its table; register it with key=[...]")
        return key


def _match(pattern: str, type_name: str) -> bool:
    """An exact type name, or an fnmatch glob (case-sensitive: types are data, not file names)."""
    return pattern == type_name or fnmatch.fnmatchcase(type_name, pattern)


@dataclass
class Pipeline:
    """A map from type patterns to handlers; the first registered pattern that matches wins."""

    handlers: list[Handler] = field(default_factory=list)
    default_handler: str | None = None

    def handler(
        self,
        pattern: str | tuple[str, ...] | list[str],
        *,
        schema: str,
        split_by: str | None = None,
        combine: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
        name: str | None = None,
        key: list[str] | tuple[str, ...] | None = None,
    ) -> Callable[[Callable[..., pd.DataFrame]], Callable[..., pd.DataFrame]]:
        """Register the decorated function for the types matching `pattern` (or any of several).

        It is called with a pandas DataFrame of one type's rows (ts, type, entity, value, minute),
        or of one `split_by` shard of a hot type, and returns rows of `schema`. `key` is its
        table's primary key in a database sink (default: its string, date and timestamp columns).
        """
        from rebalancer.pipeline.apply import check_one_argument, func_form

        patterns = (pattern,) if isinstance(pattern, str) else tuple(pattern)
        if not patterns or not all(isinstance(p, str) and p for p in patterns):
            raise ValueError(f"pattern must be a non-empty string or strings, got {pattern!r}")
        if not isinstance(schema, str) or not schema.strip():
            raise ValueError(f"schema must be a DDL string such as 'entity string, n long', got {schema!r}")
        if split_by is not None and split_by not in HANDLER_COLUMNS:
            raise ValueError(f"split_by must be one of {', '.join(HANDLER_COLUMNS)}, got {split_by!r}")
        if combine is not None:  # refused here, as balanced_apply refuses it, not when the run gets to it
            check_one_argument(combine, "combine", "the partial rows of a split type")
        if key is not None and (isinstance(key, str) or not key or not all(isinstance(k, str) for k in key)):
            raise ValueError(f"key must be a list of column names, got {key!r}")

        def register(func: Callable[..., pd.DataFrame]) -> Callable[..., pd.DataFrame]:
            func_form(func, "handler")  # what applyInPandas (and so balanced_apply) refuses
            handler_name = str(name or getattr(func, "__name__", ""))
            _check_name(handler_name)
            if any(h.name == handler_name for h in self.handlers):
                raise ValueError(f"handler name {handler_name!r} is registered twice")
            table_key = tuple(key) if key is not None else None
            self.handlers.append(Handler(handler_name, patterns, func, schema, split_by, combine, table_key))
            return func

        return register

    def default(self, name: str | None) -> None:
        """What runs the types no pattern matches: "metrics" (built in), a handler's name, or None."""
        if name is not None and name != BUILTIN and not any(h.name == name for h in self.handlers):
            raise ValueError(
                f"default must be {BUILTIN!r}, a registered handler's name or None, got {name!r}"
            )
        self.default_handler = name

    def route(self, type_names: list[str]) -> tuple[dict[str, list[str]], list[str]]:
        """({handler name: its types}, unhandled types): first match, then the default."""
        routed: dict[str, list[str]] = {}
        unhandled: list[str] = []
        for type_name in sorted(type_names):
            target = next((h.name for h in self.handlers if h.matches(type_name)), self.default_handler)
            if target is None:
                unhandled.append(type_name)
            else:
                routed.setdefault(target, []).append(type_name)
        return routed, unhandled

    def table_keys(self, spark: Any) -> dict[str, tuple[str, ...]]:
        """Each handler's table key in a database sink."""
        return {
            h.name: h.table_key(with_date(spark.createDataFrame([], h.schema))[0].schema)
            for h in self.handlers
        }

    def get(self, name: str) -> Handler:
        for handler in self.handlers:
            if handler.name == name:
                return handler
        raise KeyError(name)


def builtin_pipeline() -> Pipeline:
    """What runs without --handlers: every type through the built-in aggregation."""
    pipeline = Pipeline()
    pipeline.default(BUILTIN)
    return pipeline


# Columns a handler's frame has (see handler_rows).
HANDLER_COLUMNS = ("ts", "type", "entity", "value", "minute")


def _check_name(name: str) -> None:
    if not name or not _NAME.match(name):
        raise ValueError(f"handler name must be letters, digits, '_', '.' or '-', got {name!r}")
    if name == BUILTIN or name in RESERVED:
        raise ValueError(f"handler name {name!r} is taken by the run's own outputs")


def load_handlers(path: str | Path) -> Pipeline:
    """The `Pipeline` defined by the Python file at `path` (ValueError if there is none, or two)."""
    file = Path(path)
    if file.is_dir():
        raise ValueError(f"handlers: {file} is a directory, not a Python file")
    if not file.is_file():
        raise ValueError(f"handlers: no such file: {file}")
    module_name = f"rebalancer_user_handlers_{abs(hash(str(file.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ValueError(f"handlers: cannot load {file} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look their module up by name
    from pyspark import cloudpickle

    # Executors cannot import the user's file: its functions travel by value, not by reference.
    cloudpickle.register_pickle_by_value(module)
    try:
        spec.loader.exec_module(module)
    except ValueError as exc:
        raise ValueError(f"handlers: {file}: {exc}") from None
    except SystemExit as exc:  # not an Exception: it would end the run with the module's own text
        code = "" if exc.code is None else repr(exc.code)
        raise ValueError(f"handlers: {file}: the module called sys.exit({code}) while being imported") from None
    except KeyboardInterrupt:
        raise  # Ctrl-C during the import: the command's interrupt, not the module's failure
    except BaseException as exc:  # a user's module: any failure is one line naming the file
        raise ValueError(f"handlers: {file} failed to import: {type(exc).__name__}: {exc}") from None
    found = [value for value in vars(module).values() if isinstance(value, Pipeline)]
    if not found:
        raise ValueError(f"handlers: {file} defines no rebalancer.pipeline.Pipeline")
    if len(found) > 1:
        raise ValueError(f"handlers: {file} defines {len(found)} Pipelines; keep one")
    return found[0]


def handler_rows(classified: DataFrame) -> DataFrame:
    """Accepted rows as handlers see them: ts and minute (UTC timestamps), type, entity, value."""
    from pyspark.sql import functions as F

    minute = F.timestamp_seconds(F.floor(F.unix_micros(F.col("ts_parsed")) / F.lit(60_000_000)) * 60)
    return classified.filter(F.col("reason").isNull()).select(
        F.col("ts_parsed").alias("ts"),
        F.col("type").cast("string").alias("type"),
        F.col("entity").cast("string").alias("entity"),
        F.col("value_num").alias("value"),
        minute.alias("minute"),
    )


def with_date(frame: DataFrame) -> tuple[DataFrame, list[str]]:
    """The frame and its partition columns: `date` as it is, or derived from `minute` (UTC days)."""
    from pyspark.sql import functions as F

    if "date" in frame.columns:
        return frame, ["date"]
    if "minute" in frame.columns:
        return frame.withColumn("date", F.date_format(F.col("minute"), "yyyy-MM-dd")), ["date"]
    return frame, []


@dataclass
class HandlerTotals:
    """One handler's part of a run, as summary.json's `handlers` holds it: the built-in aggregation's,
    a user handler's (its output, split types and planned rows; its tasks' figures, or why there are
    none), or a stream's running totals (the types it has seen). What a kind has not is None, and
    left out of summary.json (`outputs.summary.handler_json`)."""

    types: int = 0
    rows: int = 0
    output: str | None = None
    split_types: list[str] | None = None
    planned_rows: list[int] | None = None
    calls: int | None = None
    task_rows: list[int] | None = None
    task_seconds: list[float] | None = None
    skew_ratio: float | None = None
    seconds_skew_ratio: float | None = None
    task_stats: str | None = None  # why there are no task figures (Spark Connect)
    seen_types: list[str] | None = None

    @classmethod
    def measured(
        cls, types: int, rows: int, calls: int | None, task_rows: list[int], task_seconds: list[float],
        output: str | None = None, split_types: list[str] | None = None, planned_rows: list[int] | None = None,
    ) -> HandlerTotals:
        """A section with its tasks' rows and seconds, and their skews."""
        skews = max_over_median(task_rows, SKEW_DIGITS), max_over_median(task_seconds, SKEW_DIGITS)
        return cls(types, rows, output, split_types, planned_rows, calls, task_rows, task_seconds, *skews)


@dataclass
class RoutingTotals:
    """summary.json's reconciliation (accepted == handled + unhandled) and its per-handler sections."""

    handled: int = 0
    unhandled: int = 0
    unhandled_types: dict[str, int] = field(default_factory=dict)
    handlers: dict[str, HandlerTotals] = field(default_factory=dict)

    def user_handlers(self) -> dict[str, HandlerTotals]:
        """The sections of a run with a handler map (not the built-in aggregation alone); else none."""
        return self.handlers if set(self.handlers) - {BUILTIN} or self.unhandled else {}


@dataclass
class HandlerRun:
    """One handler's part of a run: its types, rows and how its tasks went."""

    name: str
    types: list[str]
    rows: int
    output: str
    result: Any = None  # BalancedApply, for the task stats after the write

    def section(self) -> HandlerTotals:
        output = shown_location(self.output)
        if self.result is None:
            return HandlerTotals(len(self.types), self.rows, output=output)
        plan = self.result.plan
        split_types = sorted(str(key[0]) for key in plan.split)
        if not self.result.stats_available:
            return HandlerTotals(
                len(self.types), self.rows, output=output, split_types=split_types, planned_rows=plan.rows,
                task_stats="unavailable (Spark Connect has no accumulators)",
            )
        stats = self.result.task_stats()
        return HandlerTotals.measured(
            len(self.types), self.rows, sum(stats.calls), stats.rows, stats.seconds,
            output=output, split_types=split_types, planned_rows=plan.rows,
        )


def run_handler(
    rows: DataFrame,
    handler: Handler,
    types: list[str],
    type_counts: Mapping[str, int],
    partitions: int,
    cost: str,
    store: Any,
) -> HandlerRun:
    """The handler's lazy output over its types' rows, placed by `balanced_apply`."""
    from pyspark.sql import functions as F

    from rebalancer.pipeline.apply import balanced_apply

    subset = rows.filter(F.col("type").isin(types))
    result = balanced_apply(
        subset,
        "type",
        handler.func,
        handler.schema,
        partitions=partitions,
        split_by=handler.split_by,
        combine=handler.combine,
        split_safe=handler.combine is None,  # Pipeline.handler's contract: a handler may get one shard of a type
        cost=cost,
        store=store,
    )
    return HandlerRun(
        name=handler.name,
        types=list(types),
        rows=sum(int(type_counts.get(t, 0)) for t in types),
        output="",
        result=result,
    )


def handler_failure(name: str, exc: BaseException) -> ValueError:
    """A handler's failure inside Spark as one line: what the handler did wrong, not Py4J's stack.

    `spark_error_reason`, as every Spark failure the pipeline reports: the exception at the end of
    the task's traceback, all of its lines (a last-matching-line guess kept only the first of a
    multi-line message, and took a SQL excerpt for an analysis error's reason).
    """
    return ValueError(f"handler {name!r} failed: {spark_error_reason(exc, limit=400)}")


@dataclass
class Routing:
    """Which handler runs which types in one run, and the counts each part is planned from."""

    pipeline: Pipeline
    counts: Any  # core.InputCounts of every accepted row
    builtin_counts: Any  # the same, restricted to the types the built-in aggregation runs
    builtin_types: list[str] | None  # None: every type (no handler map, or it sends all to metrics)
    handlers: dict[str, list[str]]
    unhandled: dict[str, int]

    def builtin_rows(self, accepted: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        if self.builtin_types is None:
            return accepted
        return accepted.filter(F.col("type").isin(self.builtin_types))

    def summary(
        self,
        task_rows: list[int],
        task_seconds: list[float],
        builtin_calls: int | None,
        sections: Mapping[str, HandlerTotals],
    ) -> RoutingTotals:
        """summary.json's reconciliation (accepted == handled + unhandled) and per-handler sections."""
        unhandled_rows = sum(self.unhandled.values())
        handlers: dict[str, HandlerTotals] = {}
        builtin_types = self.builtin_counts.type_counts
        if builtin_types:
            handlers[BUILTIN] = HandlerTotals.measured(
                len(builtin_types), sum(builtin_types.values()), builtin_calls, task_rows, task_seconds
            )
        handlers.update(sections)
        return RoutingTotals(
            handled=self.counts.accepted - unhandled_rows,
            unhandled=unhandled_rows,
            unhandled_types=dict(sorted(self.unhandled.items(), key=lambda kv: (-kv[1], kv[0]))),
            handlers=handlers,
        )


def route_types(pipeline: Pipeline | None, counts: Any) -> Routing:
    """Route every counted type: to a handler, to the built-in aggregation, or to `unhandled`."""
    from dataclasses import replace

    pipeline = pipeline or builtin_pipeline()
    routed, unhandled = pipeline.route(list(counts.type_counts))
    builtin = routed.pop(BUILTIN, [])
    if not routed and not unhandled:
        return Routing(pipeline, counts, counts, None, {}, {})
    keep = set(builtin)
    builtin_counts = replace(
        counts,
        accepted=sum(counts.type_counts[t] for t in builtin),
        type_counts={t: c for t, c in counts.type_counts.items() if t in keep},
        bucket_counts={k: c for k, c in counts.bucket_counts.items() if k[0] in keep},
        hash_slots={t: s for t, s in counts.hash_slots.items() if t in keep},
    )
    return Routing(
        pipeline,
        counts,
        builtin_counts,
        builtin,
        routed,
        {t: int(counts.type_counts[t]) for t in unhandled},
    )


def run_handlers(
    routing: Routing,
    classified: DataFrame,
    out: Any,
    stores: Any,
    partitions: int,
    cost: str,
    step: Callable[[str], None],
    batch_id: int | None = None,
    keep: dict[str, DataFrame] | None = None,
) -> dict[str, HandlerTotals]:
    """Run and write each user handler's output to OUT/<handler>/ (a stream's to
    OUT/<handler>/batch_id=N/); their summary sections. Each handler's PlanStore (its sticky plan
    and the seconds for cost="seconds") is STORES/_plans/<handler>/ when STORES is local (a path or
    a file: URI).
    With `keep`, each handler's written frame is persisted and kept there (for a database sink);
    the caller unpersists it.

    A handler whose output does not match its schema, or that raises, fails the run with one line
    naming the handler (and the key, for an exception inside it).
    """
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    from rebalancer.pipeline.apply import PlanStore

    sections: dict[str, HandlerTotals] = {}
    if not routing.handlers:
        return sections
    rows = handler_rows(classified)
    # A file: URI's stores are on its local path; a remote filesystem's are not kept (yet).
    store_root = stores if isinstance(stores, Path) else getattr(stores, "local", None)
    if store_root is None and cost == "seconds":
        log.warning(
            "--cost seconds: no plan store on %s (not a local path), so each run plans by rows",
            shown_location(str(stores)),
        )
    for name, types in routing.handlers.items():
        step(f"handler {name}")
        handler = routing.pipeline.get(name)
        store = PlanStore(store_root / "_plans" / name) if store_root is not None else None
        try:
            run = run_handler(rows, handler, types, routing.counts.type_counts, partitions, cost, store)
        except ValueError as exc:
            raise ValueError(f"handler {name!r}: {exc}") from None
        frame, partition_by = with_date(run.result.frame)
        if keep is not None:
            from pyspark import StorageLevel

            frame = frame.persist(StorageLevel.MEMORY_AND_DISK)  # the sink reads it again
            keep[name] = frame
        target = str(out / name if batch_id is None else out / name / f"batch_id={batch_id}")
        writer = frame.write.mode("overwrite")
        if partition_by:
            writer = writer.option("partitionOverwriteMode", "dynamic").partitionBy(*partition_by)
        try:
            writer.parquet(target)
        except (PySparkException, Py4JJavaError) as exc:
            raise handler_failure(name, exc) from None
        run.output = target
        sections[name] = run.section()
    return sections
