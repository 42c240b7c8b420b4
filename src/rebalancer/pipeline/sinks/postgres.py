"""PostgresSink: Spark DataFrames into PostgreSQL by COPY and upsert: idempotent, and exactly-once per batch id.

Batch writes (`batch_id=None`): every Spark task COPYs its partition straight into the target in
one transaction; where keys exist already (a re-run), the task rolls back and upserts the same rows
from a temporary table instead, so a re-run leaves the same rows and a failed task leaves nothing.
Stream writes (`batch_id=N`): tasks COPY into their own staging tables, then the driver moves
every table's rows into the targets and records `(query, batch_id)` in `rebalancer_batches`, all
in one transaction; a batch id already recorded is skipped.

The password is kept only in the connection string handed to psycopg; repr, logs and errors show
the URL without it. Masking is by structure (the URL's password component, a `password=` field),
never by searching text for the password, which would blank "p" out of "port". A URL whose user
or password holds an unencoded '/', '?', '#', '@' or a stray '%' is refused: libpq would read part
of the password as a host, a port or a database name and echo it in its errors.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sys
import time
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit

from rebalancer._extras import require_extra
from rebalancer.pipeline.session import spark_error_reason
from rebalancer.pipeline.sinks._copy import (
    DIRECT,
    REPLAY_BYTES,
    RESULT_SCHEMA,
    STAGE,
    CopyTask,
    stage_name,
    upsert_statement,
)

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger(__name__)

SCHEMES = ("postgresql://", "postgres://")
DEFAULT_SCHEMA = "rebalancer"
BATCHES_TABLE = "rebalancer_batches"
MAX_IDENTIFIER = 63  # PostgreSQL's NAMEDATALEN - 1
STAGE_PREFIX = "_rebalancer_stage_"
# Spark's default, 10,000 rows per Arrow batch, spends more on the hand-over to Python than the
# whole COPY costs: 6.1 s of CPU for the 1.29M metric rows of the benchmark against 3.5 s with
# 200,000 (a batch of metrics is then about 25 MB).
ARROW_BATCH_CONF = "spark.sql.execution.arrow.maxRecordsPerBatch"
ARROW_BATCH_ROWS = 200_000
# libpq's connection parameters that hold a secret: masked by name wherever a conninfo is shown.
SECRET_FIELDS = ("password", "sslpassword")
_ENCODE_HINT = "percent-encode it (urllib.parse.quote(password, safe=''))"
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
# A `password=` / `sslpassword=` field of a conninfo or URL query: quoted the way libpq quotes, or up to a space.
_SECRET_FIELD = re.compile(r"\b((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S+)", re.IGNORECASE)
# The password component of any postgresql:// URL in a text (its userinfo ends at the authority's '@').
_URL_PASSWORD = re.compile(r"(postgres(?:ql)?://[^\s:/?#@]*):[^\s/?#@]*@", re.IGNORECASE)


class SinkError(RuntimeError):
    """A write that failed after the sink was set up (the server went away, a task failed)."""


@dataclass
class TableWrite:
    """What one write did to one table."""

    table: str
    rows: int  # rows upserted (every row of the frame)
    changed: int  # of those, rows inserted or whose values changed
    tasks: int
    seconds: float
    skipped: bool = False  # a stream batch id already committed: nothing written this time
    direct: int = 0  # of `changed`, rows COPYed straight into the table (the others went through the upsert)
    refused: int = 0  # tasks whose direct COPY met existing keys: rolled back, their rows upserted instead


@dataclass(frozen=True)
class Output:
    """One frame for one table, with the table's primary key."""

    frame: DataFrame
    table: str
    key: tuple[str, ...]


def pg_type(name: str, data_type: DataType) -> str:
    """The column type for a Spark type, spelled as PostgreSQL's `format_type` spells it."""
    from pyspark.sql import types as T

    if isinstance(data_type, T.DecimalType):
        return f"numeric({data_type.precision},{data_type.scale})"
    simple: tuple[tuple[type, str], ...] = (
        (T.StringType, "text"),
        (T.LongType, "bigint"),
        (T.IntegerType, "integer"),
        (T.ShortType, "smallint"),
        (T.ByteType, "smallint"),
        (T.DoubleType, "double precision"),
        (T.FloatType, "real"),
        (T.BooleanType, "boolean"),
        (T.TimestampNTZType, "timestamp without time zone"),
        (T.TimestampType, "timestamp with time zone"),
        (T.DateType, "date"),
    )
    for spark_type, postgres_type in simple:
        if isinstance(data_type, spark_type):
            return postgres_type
    raise ValueError(
        f"column {name!r} has type {data_type.simpleString()}, which the PostgreSQL sink cannot store"
    )


def table_columns(schema: StructType) -> tuple[tuple[str, str], ...]:
    return tuple((f.name, pg_type(f.name, f.dataType)) for f in schema.fields)


def _check_identifier(what: str, value: str) -> str:
    if not isinstance(value, str) or not value or len(value.encode()) > MAX_IDENTIFIER or "\x00" in value:
        raise ValueError(f"{what} must be 1 to {MAX_IDENTIFIER} bytes without NUL, got {value!r}")
    return value


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


class PostgresSink:
    """Writes frames into tables of one PostgreSQL schema; creates what is missing."""

    def __init__(
        self,
        url: str,
        schema: str = DEFAULT_SCHEMA,
        *,
        connect_timeout: int = 10,
        inject_failure_after_copy: bool = False,
        replay_bytes: int = REPLAY_BYTES,
    ) -> None:
        require_extra("the PostgreSQL sink", "postgres")
        from psycopg.conninfo import make_conninfo

        if not isinstance(url, str) or not url.startswith(SCHEMES):
            raise ValueError(
                f"sink must be a postgresql://user:password@host:port/database URL, got {_scheme_only(url)!r}"
            )
        params, masked_url = _read_url(url)
        if connect_timeout < 1:
            raise ValueError(f"connect_timeout must be >= 1, got {connect_timeout}")
        if replay_bytes < 1:
            raise ValueError(f"replay_bytes must be >= 1, got {replay_bytes}")
        self.schema = _check_identifier("sink schema", schema)
        self._conninfo = make_conninfo(url, connect_timeout=connect_timeout, application_name="rebalancer")
        # The two connection strings this sink holds, each with its display form (password masked).
        self._masks = {url: masked_url, self._conninfo: _masked_conninfo(self._conninfo)}
        self.display_url = _display_url(params)
        self.inject_failure_after_copy = inject_failure_after_copy
        # Per task: the most Arrow bytes kept to replay through the upsert when the direct COPY meets
        # existing keys (the rest of a larger partition goes through the upsert without being kept).
        self.replay_bytes = replay_bytes
        # Tables this sink has created or checked: later writes skip the catalog queries.
        self._prepared: set[tuple[str, tuple[tuple[str, str], ...], tuple[str, ...]]] = set()
        self._batches_table_ready = False

    def __repr__(self) -> str:
        return f"PostgresSink({self.display_url!r}, schema={self.schema!r})"

    def redact(self, text: str) -> str:
        """`text` with this sink's URL and conninfo masked, and any `password=` value or URL password blanked."""
        return _redacted_text(text, self._masks)

    @contextmanager
    def connect(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection that commits on success and rolls back on error; one-line errors without the password."""
        import psycopg

        try:
            conn = psycopg.connect(self._conninfo)
        except psycopg.OperationalError as exc:
            raise ValueError(
                f"sink {self.display_url}: cannot connect: {self.redact(_first_line(exc))}"
            ) from None
        with conn:
            yield conn

    def check(self) -> str:
        """Connect once (reachable server, valid credentials, existing database); returns the server version."""
        with self.connect() as conn:
            version = conn.execute("SHOW server_version").fetchone()
        log.info("sink %s reachable (PostgreSQL %s)", self.display_url, version[0] if version else "?")
        return str(version[0]) if version else ""

    # --- tables -------------------------------------------------------------------------------------

    def ensure_table(self, schema: StructType, table: str, key: Sequence[str]) -> None:
        """Create the table (columns from the Spark schema, primary key `key`) or check the one there."""
        self._ensure(table, table_columns(schema), self._key(schema, table, key))

    def _key(self, schema: StructType, table: str, key: Sequence[str]) -> tuple[str, ...]:
        _check_identifier("table", table)
        key = tuple(key)
        if not key:
            raise ValueError(f"key for table {table!r} must name at least one column, got {list(key)}")
        names = schema.fieldNames()
        for column in key:
            if column not in names:
                raise ValueError(
                    f"key column {column!r} is not a column of the frame for {table!r} ({', '.join(names)})"
                )
        if len(set(key)) != len(key):
            raise ValueError(f"key for table {table!r} repeats a column: {list(key)}")
        return key

    def _ensure(self, table: str, columns: tuple[tuple[str, str], ...], key: tuple[str, ...]) -> None:
        from psycopg import sql

        with self.connect() as conn:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            existing = self._existing_columns(conn, table)
            if existing is None:
                definition = sql.SQL(", ").join(
                    [
                        sql.SQL("{} {} NOT NULL" if name in key else "{} {}").format(
                            sql.Identifier(name), sql.SQL(kind)
                        )
                        for name, kind in columns
                    ]
                    + [sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(sql.Identifier(k) for k in key))]
                )
                conn.execute(
                    sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
                        sql.Identifier(self.schema, table), definition
                    )
                )
                log.info("sink: created table %s.%s, primary key (%s)", self.schema, table, ", ".join(key))
                return
            problem = _incompatibility(existing, self._primary_key(conn, table), columns, key)
            if problem:
                raise ValueError(
                    f"sink table {self.schema}.{table} exists with incompatible columns: {problem}"
                )

    def _existing_columns(
        self, conn: psycopg.Connection[Any], table: str
    ) -> dict[str, tuple[str, bool]] | None:
        """{column: (type, required)} of an existing table, None when there is no table."""
        relation = conn.execute(
            "SELECT c.oid, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s",
            (self.schema, table),
        ).fetchone()
        if relation is None:
            return None
        if relation[1] not in ("r", "p"):
            raise ValueError(
                f"sink table {self.schema}.{table} exists but is not a table (relkind {relation[1]!r})"
            )
        rows = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod), attnotnull AND NOT atthasdef FROM pg_attribute "
            "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (relation[0],),
        ).fetchall()
        return {name: (kind, required) for name, kind, required in rows}

    def _primary_key(self, conn: psycopg.Connection[Any], table: str) -> tuple[str, ...]:
        rows = conn.execute(
            "SELECT a.attname FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
            "WHERE n.nspname = %s AND c.relname = %s AND i.indisprimary ORDER BY k.ord",
            (self.schema, table),
        ).fetchall()
        return tuple(row[0] for row in rows)

    def _ensure_batches_table(self) -> None:
        from psycopg import sql

        if self._batches_table_ready:
            return
        with self.connect() as conn:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (query text NOT NULL, batch_id bigint NOT NULL, "
                    "tables jsonb NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(), "
                    "PRIMARY KEY (query, batch_id))"
                ).format(sql.Identifier(self.schema, BATCHES_TABLE))
            )
        self._batches_table_ready = True

    # --- writes -------------------------------------------------------------------------------------

    def write(
        self,
        frame: DataFrame,
        table: str,
        key: Sequence[str],
        batch_id: int | None = None,
        query: str | None = None,
    ) -> TableWrite:
        """Upsert `frame` into `table` keyed by `key`; with `batch_id`, exactly once per (query, batch_id)."""
        output = Output(frame, table, tuple(key))
        if batch_id is None:
            return self.write_all([output])[0]
        if query is None:
            raise ValueError("query is required with batch_id: it names the stream whose batches are counted")
        return self.write_batch([output], query=query, batch_id=batch_id)[0]

    def prepare(
        self, outputs: Sequence[Output]
    ) -> list[tuple[str, tuple[tuple[str, str], ...], tuple[str, ...]]]:
        """Validate and create or check every table first, so a bad table fails before anything is written."""
        specs = []
        for output in outputs:
            key = self._key(output.frame.schema, output.table, output.key)
            columns = table_columns(output.frame.schema)
            if (output.table, columns, key) not in self._prepared:
                self._ensure(output.table, columns, key)
                self._prepared.add((output.table, columns, key))
            specs.append((output.table, columns, key))
        return specs

    def write_all(self, outputs: Sequence[Output]) -> list[TableWrite]:
        """Batch mode: each table in its own Spark job, each task one transaction.

        A task COPYs straight into the target (a first load: one copy of the rows, all tasks in
        parallel); where that meets existing keys, it upserts through a temporary table instead.
        """
        results = []
        for output, (table, columns, key) in zip(outputs, self.prepare(outputs)):
            started = time.perf_counter()
            task = CopyTask(self._conninfo, self.schema, table, columns, key, DIRECT,
                            fail_after_copy=self.inject_failure_after_copy, replay_bytes=self.replay_bytes)
            reports = self._run_tasks(output.frame, task)
            result = TableWrite(
                table=table,
                rows=sum(r[1] for r in reports),
                changed=sum(r[2] for r in reports),
                tasks=sum(1 for r in reports if r[1]),
                seconds=round(time.perf_counter() - started, 3),
                direct=sum(r[3] for r in reports),
                refused=sum(r[4] for r in reports),
            )
            log.info("sink: %s.%s upserted %d rows (%d changed, %d of them by direct COPY; %d direct COPYs refused) "
                     "from %d tasks in %.2f s", self.schema, table, result.rows, result.changed, result.direct,
                     result.refused, result.tasks, result.seconds)
            results.append(result)
        return results

    @contextmanager
    def _statement_errors(self, table: str) -> Iterator[None]:
        """A failed statement on the driver (a duplicate key in the frame, a lost server) as one SinkError."""
        import psycopg

        try:
            yield
        except psycopg.Error as exc:
            raise SinkError(
                f"sink {self.display_url}: writing {self.schema}.{table} failed: {self.redact(_first_line(exc))}"
            ) from None

    def _move_stages(
        self,
        conn: psycopg.Connection[Any],
        table: str,
        prefix: str,
        names: tuple[str, ...],
        key: tuple[str, ...],
        partitions: list[int],
    ) -> int:
        """Staged rows into the target inside `conn`'s transaction; returns the rows inserted or changed."""
        from psycopg import sql

        if not partitions:
            return 0
        stages = [sql.Identifier(self.schema, stage_name(prefix, p)) for p in partitions]
        columns = sql.SQL(", ").join(sql.Identifier(c) for c in names)
        union = sql.SQL(" UNION ALL ").join(sql.SQL("SELECT {} FROM {}").format(columns, s) for s in stages)
        source = sql.SQL("({}) AS staged ORDER BY {}").format(union, sql.SQL(", ").join(sql.Identifier(k) for k in key))
        changed = conn.execute(upsert_statement(self.schema, table, source, names, key)).rowcount
        for stage in stages:
            conn.execute(sql.SQL("DROP TABLE {}").format(stage))
        return max(changed, 0)

    def write_batch(self, outputs: Sequence[Output], query: str, batch_id: int) -> list[TableWrite]:
        """Stream mode: every table of one micro-batch and its `rebalancer_batches` row commit together."""
        from psycopg import sql

        if not isinstance(query, str) or not query:
            raise ValueError(f"query must be a non-empty string, got {query!r}")
        if not isinstance(batch_id, int) or batch_id < 0:
            raise ValueError(f"batch_id must be an int >= 0, got {batch_id!r}")
        started = time.perf_counter()
        specs = self.prepare(outputs)
        self._ensure_batches_table()
        recorded = self._recorded(query, batch_id)
        if recorded is not None:
            log.info("sink: batch %d of query %s already committed, skipping", batch_id, query)
            return [
                TableWrite(table, int(recorded.get(table, {}).get("rows", 0)), 0, 0, 0.0, skipped=True)
                for table, _, _ in specs
            ]
        prefix = _stage_prefix(query, batch_id)
        self._drop_stages(_stage_prefix(query, None))  # leftovers of an attempt that crashed before its commit
        staged: list[tuple[str, tuple[str, ...], tuple[str, ...], list[int], int, float]] = []
        for index, (output, (table, columns, key)) in enumerate(zip(outputs, specs)):
            table_started = time.perf_counter()
            task = CopyTask(
                self._conninfo,
                self.schema,
                table,
                columns,
                key,
                STAGE,
                f"{prefix}_{index}",
                fail_after_copy=self.inject_failure_after_copy,
            )
            reports = self._run_tasks(output.frame, task)
            partitions = sorted(r[0] for r in reports if r[1])
            staged.append(
                (
                    f"{prefix}_{index}",
                    tuple(c for c, _ in columns),
                    key,
                    partitions,
                    sum(r[1] for r in reports),
                    time.perf_counter() - table_started,
                )
            )
        results: list[TableWrite] = []
        with self._statement_errors(", ".join(t for t, _, _ in specs)), self.connect() as conn:
            claimed = conn.execute(
                sql.SQL(
                    "INSERT INTO {} (query, batch_id, tables) VALUES (%s, %s, '{{}}') "
                    "ON CONFLICT (query, batch_id) DO NOTHING RETURNING 1"
                ).format(sql.Identifier(self.schema, BATCHES_TABLE)),
                (query, batch_id),
            ).fetchone()
            if claimed is None:  # committed by another attempt since we looked
                conn.rollback()
                self._drop_stages(prefix)
                return self.write_batch(outputs, query, batch_id)
            for (table, _, _), (stage_prefix, names, key, partitions, copied, seconds) in zip(specs, staged):
                move_started = time.perf_counter()
                changed = self._move_stages(conn, table, stage_prefix, names, key, partitions)
                results.append(
                    TableWrite(
                        table,
                        copied,
                        changed,
                        len(partitions),
                        round(seconds + time.perf_counter() - move_started, 3),
                    )
                )
            conn.execute(
                sql.SQL("UPDATE {} SET tables = %s WHERE query = %s AND batch_id = %s").format(
                    sql.Identifier(self.schema, BATCHES_TABLE)
                ),
                (
                    json.dumps({r.table: {"rows": r.rows, "changed": r.changed} for r in results}),
                    query,
                    batch_id,
                ),
            )
        log.info(
            "sink: batch %d of query %s committed (%s) in %.2f s",
            batch_id,
            query,
            ", ".join(f"{r.table} {r.rows}" for r in results),
            time.perf_counter() - started,
        )
        return results

    def committed_batches(self, query: str) -> list[int]:
        """Batch ids of `query` committed so far, ascending."""
        from psycopg import sql

        self._ensure_batches_table()
        with self.connect() as conn:
            rows = conn.execute(
                sql.SQL("SELECT batch_id FROM {} WHERE query = %s ORDER BY batch_id").format(
                    sql.Identifier(self.schema, BATCHES_TABLE)
                ),
                (query,),
            ).fetchall()
        return [int(r[0]) for r in rows]

    def _recorded(self, query: str, batch_id: int) -> dict[str, Any] | None:
        from psycopg import sql

        with self.connect() as conn:
            row = conn.execute(
                sql.SQL("SELECT tables FROM {} WHERE query = %s AND batch_id = %s").format(
                    sql.Identifier(self.schema, BATCHES_TABLE)
                ),
                (query, batch_id),
            ).fetchone()
        return None if row is None else dict(row[0])

    def _drop_stages(self, prefix: str) -> None:
        from psycopg import sql

        pattern = prefix.replace("_", r"\_") + "%"
        with self.connect() as conn:
            names = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename LIKE %s",
                (self.schema, pattern),
            ).fetchall()
            for (name,) in names:
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(self.schema, name)))

    def _run_tasks(self, frame: DataFrame, task: CopyTask) -> list[tuple[int, int, int, int, int]]:
        """Run `task` on every partition of `frame`; a failed task fails the write with one redacted line."""
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException

        try:
            with _arrow_batch_rows(frame.sparkSession, ARROW_BATCH_ROWS):
                rows = frame.mapInArrow(task, RESULT_SCHEMA).collect()
        except (PySparkException, Py4JJavaError) as exc:
            raise SinkError(
                f"sink {self.display_url}: writing {self.schema}.{task.table} failed: "
                f"{self.redact(_python_error(exc))[:500]}"  # cut after masking: a cut URL would escape it
            ) from None
        return [
            (int(r["partition"]), int(r["copied"]), int(r["changed"]), int(r["direct"]), int(r["refused"])) for r in rows
        ]


@contextmanager
def _arrow_batch_rows(spark: SparkSession, rows: int) -> Iterator[None]:
    """Spark hands `rows` rows per Arrow batch to the tasks for the duration; the caller's setting after."""
    previous = spark.conf.get(ARROW_BATCH_CONF, None)
    spark.conf.set(ARROW_BATCH_CONF, str(rows))
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(ARROW_BATCH_CONF)
        else:
            spark.conf.set(ARROW_BATCH_CONF, previous)


def _incompatibility(
    existing: dict[str, tuple[str, bool]],
    existing_key: tuple[str, ...],
    columns: tuple[tuple[str, str], ...],
    key: tuple[str, ...],
) -> str | None:
    for name, kind in columns:
        if name not in existing:
            return f"column {name!r} is missing"
        if existing[name][0] != kind:
            return f"column {name!r} is {existing[name][0]}, expected {kind}"
    wanted = {name for name, _ in columns}
    for name, (_, required) in existing.items():
        if required and name not in wanted:
            return f"column {name!r} is NOT NULL without a default and the frame has no such column"
    if set(existing_key) != set(key):
        found = ", ".join(existing_key) or "none"
        return f"primary key is ({found}), expected ({', '.join(key)})"
    return None


def _stage_prefix(query: str, batch_id: int | None) -> str:
    digest = hashlib.sha256(query.encode()).hexdigest()[:10]
    return f"{STAGE_PREFIX}{digest}_" + ("" if batch_id is None else f"{batch_id}")


def _scheme_only(url: object) -> str:
    """What a rejected URL looked like, without anything that may be a password."""
    if not isinstance(url, str):
        return type(url).__name__
    head, sep, _ = url.partition("://")
    return f"{head}://…" if sep else "…"


def _display_url(params: dict[str, Any]) -> str:
    host = params.get("host") or "localhost"
    port = params.get("port")
    user = params.get("user")
    database = params.get("dbname") or ""
    where = f"{host}:{port}" if port else str(host)
    return f"postgresql://{quote(user, safe='') + '@' if user else ''}{where}/{database}"


def _url_error(shown: str, problem: str) -> ValueError:
    return ValueError(f"sink {shown}: {problem}; {_ENCODE_HINT}")


def _read_url(url: str) -> tuple[dict[str, str], str]:
    """libpq's parameters for `url`, and `url` with its password masked.

    libpq ends the userinfo at the first '@' before a '/', the URL standard at the authority's last
    '@' before any of '/', '?', '#': a user or password with one of those unencoded is read
    differently by the two (libpq then takes part of it for a host, port or database and echoes it
    in errors). Such URLs, and malformed percent-encoding, are refused with one line showing no
    character of the user or password; what is accepted, both read alike.
    """
    from psycopg.conninfo import conninfo_to_dict

    scheme = url.partition("://")[0]
    anonymous = f"{scheme}://…"
    if any(c.isspace() or unicodedata.category(c) == "Cc" for c in url):
        raise _url_error(anonymous, "the URL holds a space or control character")  # urlsplit drops some silently
    try:
        parts = urlsplit(url)
    except ValueError:  # its message quotes the authority, password included
        raise _url_error(
            anonymous,
            "the URL's host part cannot be read (an unmatched '[' or ']', or a character that reads as "
            "'/', '?', '#', '@' or ':' once normalized)",
        ) from None
    if "@" in parts.path + parts.query + parts.fragment:
        raise _url_error(
            anonymous,
            "the URL's user or password holds a reserved character ('/', '?', '#' or '@'), "
            "or its database name or parameters hold '@'",
        )
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if "@" in userinfo:
        raise _url_error(anonymous, "the URL's user or password holds '@'")
    shown = f"{anonymous}{at}{hostport}{parts.path}"  # no query: it may hold password=
    if _BAD_PERCENT.search(userinfo):
        raise _url_error(shown, "the URL's user or password holds '%' not followed by two hex digits")
    if "%00" in userinfo:
        raise _url_error(shown, "the URL's user or password holds %00")
    try:
        unquote(userinfo, errors="strict")
    except UnicodeDecodeError:
        raise _url_error(shown, "the URL's user or password is not UTF-8 once percent-decoded") from None
    user, colon, _ = userinfo.partition(":")
    rest = url[len(scheme) + 3 + len(parts.netloc):]
    masked = f"{scheme}://{user}{':***' if colon else ''}{at}{hostport}{rest}"
    try:
        params = conninfo_to_dict(url)
    except Exception as exc:  # psycopg.ProgrammingError: a bad host, port or parameter; libpq quotes the URL
        raise ValueError(f"sink URL cannot be parsed: {_redacted_text(_first_line(exc), {url: masked})}") from None
    return {k: str(v) for k, v in params.items()}, masked


def _masked_conninfo(conninfo: str) -> str:
    """`conninfo` with each secret field's value replaced by ***."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(conninfo)
    return make_conninfo(conninfo, **{k: "***" for k in SECRET_FIELDS if params.get(k) is not None})


def _redacted_text(text: str, masks: Mapping[str, str]) -> str:
    """`text` with each known connection string replaced whole by its masked form, then any secret field
    or URL password blanked: by structure, never by searching for the password itself."""
    for raw, masked in masks.items():
        text = text.replace(raw, masked)
    text = _SECRET_FIELD.sub(r"\1***", text)
    return _URL_PASSWORD.sub(r"\1:***@", text)


def _python_error(exc: BaseException) -> str:
    """A Spark task failure's cause, as `spark_error_reason` finds it, uncut: the caller masks it
    first and cuts it after (a URL cut short would escape the mask)."""
    return spark_error_reason(exc, limit=sys.maxsize)
