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

The URL's checks and masking live in `_pg_url`, column types and result types in `_pg_types`;
this module re-exports them where they always were.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rebalancer._extras import require_extra
from rebalancer.pipeline.sinks._copy import (
    DIRECT,
    REPLAY_BYTES,
    RESULT_SCHEMA,
    STAGE,
    CopyTask,
    stage_name,
    upsert_statement,
)
from rebalancer.pipeline.sinks._pg_types import (
    ARROW_BATCH_ROWS,
    BATCHES_TABLE,
    DEFAULT_SCHEMA,
    Output,
    SinkError,
    TableWrite,
    _arrow_batch_rows,
    _check_identifier,
    _first_line,
    _incompatibility,
    _stage_prefix,
    table_columns,
)
from rebalancer.pipeline.sinks._pg_url import (
    SCHEMES,
    _display_url,
    _masked_conninfo,
    _python_error,
    _read_url,
    _redacted_text,
    _scheme_only,
)

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)


__all__ = [
    "PostgresSink",
]


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
