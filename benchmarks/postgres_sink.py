"""The PostgreSQL sink against Spark's own `df.write.jdbc`, on the metrics of a 2M-event run.

Both write the same cached metrics frame into a fresh table of the same shape (the sink's columns
and primary key `(type, entity, minute)`) of a private PostgreSQL server (default durability
settings) started for the run:
- baseline: `df.write.jdbc(url, table, mode="append")` with Debian's JDBC driver and `batchsize`
  rows per batch, the best of three: the driver's defaults (one INSERT per row, batched), and with
  `reWriteBatchedInserts=true` (multi-row INSERTs, its fastest setting) both appending into the
  keyed table (the index maintained row by row) and appending into a bare table, then adding the
  primary key (the index built once);
- ours: `PostgresSink.write` (the table is empty: each task COPYs its partition straight into it,
  in binary, in one transaction), timed after a 1-row write has started Spark's Python workers, as
  they are in a pipeline run where the sink follows the grouped map.
Then ours runs again on the same frame: the row count and every value must be unchanged
(`idempotent=1`). Last, a streaming run is killed (SIGKILL-equivalent `os._exit`) right after a
micro-batch's database commit and before Spark's commit, then restarted: every row must be in
PostgreSQL exactly once, equal to the Parquet output (`exactly_once=1`).

Wall times follow the machine's load (printed with each figure); so each writer's CPU seconds are
printed too, for Spark (its JVM and Python workers) and for the server, counted from /proc.

Needs /usr/share/java/postgresql.jar: `scripts/ensure-postgres.sh --jdbc` (make bench does it).

Last line: RESULT rows=… rows_per_s_ours=… rows_per_s_jdbc=… speedup_vs_jdbc=… idempotent=… exactly_once=…
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JDBC_JAR = Path("/usr/share/java/postgresql.jar")
SCHEMA = "bench"
KILL_EXIT = 9
SINK_URL_ENV = "REBALANCER_BENCH_SINK_URL"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
WARM_UP_ROWS = 100_000
# (table suffix, reWriteBatchedInserts, primary key added after the append)
JDBC_VARIANTS = (("defaults", False, False), ("keyed", True, False), ("key_after", True, True))


def tree_cpu(root: int, exclude: int | None = None) -> float:
    """CPU seconds of `root` and its descendants, the exited ones its processes have reaped included."""
    parents: dict[int, int] = {}
    own: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
        own[int(entry)] = sum(int(x) for x in fields[11:15]) / CLOCK_TICKS  # utime stime cutime cstime
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        if pid != exclude:
            total += own.get(pid, 0.0)
            stack.extend(children.get(pid, []))
    return total


class Meter:
    """Wall seconds, and CPU seconds of Spark (this process's tree) and of the server, for one write."""

    def __init__(self, postmaster: int) -> None:
        self.postmaster = postmaster

    def sample(self) -> tuple[float, float, float]:
        return time.perf_counter(), tree_cpu(os.getpid(), exclude=self.postmaster), tree_cpu(self.postmaster)

    def since(self, start: tuple[float, float, float]) -> str:
        _, spark, server = (b - a for a, b in zip(start, self.sample()))
        return f"CPU Spark {spark:.1f} s + server {server:.1f} s = {spark + server:.1f} s, load {os.getloadavg()[0]:.1f}"


def fingerprint(conn, table: str) -> tuple[int, int]:
    """Row count and an order-independent hash of every row's text."""
    row = conn.execute(f"SELECT count(*), coalesce(sum(hashtext(t::text)::bigint), 0) FROM {SCHEMA}.{table} t").fetchone()
    return int(row[0]), int(row[1])


def fresh_table(metrics, pg, table: str, key_after: bool = False) -> None:
    """`table` as the sink creates it, without its primary key for `key_after`. Autovacuum is off for
    every measured table: otherwise it works on one writer's table while the next writer is timed."""
    import psycopg

    from rebalancer.pipeline.sinks import METRICS_KEY, PostgresSink

    PostgresSink(pg.url, schema=SCHEMA).ensure_table(metrics.schema, table, METRICS_KEY)
    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {SCHEMA}.{table} SET (autovacuum_enabled = false)")
        if key_after:
            conn.execute(f"ALTER TABLE {SCHEMA}.{table} DROP CONSTRAINT {table}_pkey")


def jdbc_write(
    metrics, pg, table: str, batchsize: int, key_after: bool, meter: Meter, rewrite: bool = True
) -> tuple[float, str]:
    """Seconds for Spark's writer to fill `table`, which has the sink's shape; `key_after`: into a
    bare table (the key dropped first), then the primary key added back, timed as part of the write;
    `rewrite`: pgjdbc's reWriteBatchedInserts (off by default in the driver)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    from rebalancer.pipeline.sinks import METRICS_KEY

    fresh_table(metrics, pg, table, key_after)
    params = conninfo_to_dict(pg.url)
    properties = {
        "user": str(params["user"]),
        "password": str(params["password"]),
        "driver": "org.postgresql.Driver",
        "batchsize": str(batchsize),
        "reWriteBatchedInserts": str(rewrite).lower(),
    }
    url = f"jdbc:postgresql://127.0.0.1:{pg.port}/{pg.database}"
    start = meter.sample()
    metrics.write.jdbc(url, f"{SCHEMA}.{table}", mode="append", properties=properties)
    if key_after:
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute(f"ALTER TABLE {SCHEMA}.{table} ADD CONSTRAINT {table}_pkey PRIMARY KEY ({', '.join(METRICS_KEY)})")
    return time.perf_counter() - start[0], meter.since(start)


def stream_child(input_dir: Path, out: Path, kill_after: int) -> int:
    """A streaming run that dies right after batch `kill_after` commits in PostgreSQL, before Spark commits it."""
    from rebalancer.pipeline.ingest.inspect import inspect_input
    from rebalancer.pipeline.session.build import build_session
    from rebalancer.pipeline.sinks import PostgresSink
    from rebalancer.pipeline.stream.driver import run_stream
    from rebalancer.pipeline.stream.state import StreamConfig

    original = PostgresSink.write_batch

    def write_then_die(self, outputs, query, batch_id):
        result = original(self, outputs, query, batch_id)
        if batch_id == kill_after:
            os._exit(KILL_EXIT)  # no cleanup, no Spark commit: as a kill -9 would leave it
        return result

    PostgresSink.write_batch = write_then_die  # type: ignore[method-assign]
    spark = build_session("local[2]", app_name="postgres-sink-stream")
    sink = PostgresSink(os.environ[SINK_URL_ENV], schema=SCHEMA)
    run_stream(spark, inspect_input(input_dir), out, StreamConfig(partitions=2, available_now=True), sink=sink)
    return 0


def exactly_once(spark, pg, work: Path, events: int) -> tuple[bool, str]:
    """Kill a stream after batch 1's database commit, restart it, and compare PostgreSQL with the Parquet output."""
    import pandas as pd
    import psycopg

    from rebalancer.pipeline.generate import GenerateConfig, generate
    from rebalancer.pipeline.ingest.inspect import inspect_input
    from rebalancer.pipeline.sinks import PostgresSink
    from rebalancer.pipeline.stream.driver import run_stream
    from rebalancer.pipeline.stream.state import StreamConfig

    input_dir = work / "stream-input"
    generate(GenerateConfig(events=events, files=4, entities=200, bad_rate=0.001, seed=5), input_dir)
    out = work / "stream-out"
    child = subprocess.run(
        [sys.executable, __file__, "--stream-child", str(input_dir), str(out)],
        env={**os.environ, SINK_URL_ENV: pg.url},
        capture_output=True,
        text=True,
        check=False,
    )
    if child.returncode != KILL_EXIT:
        return False, f"the killed stream exited {child.returncode}: {child.stderr.strip()[-500:]}"
    sink = PostgresSink(pg.url, schema=SCHEMA)
    summary = run_stream(spark, inspect_input(input_dir), out, StreamConfig(partitions=2, available_now=True), sink=sink)
    keys = ["batch_id", "type", "entity", "minute"]
    parquet = pd.read_parquet(out / "metrics")
    parquet["batch_id"] = parquet["batch_id"].astype("int64")
    parquet["minute"] = pd.to_datetime(parquet["minute"], utc=True)
    with psycopg.connect(pg.url) as conn:
        rows = conn.execute(f"SELECT batch_id, type, entity, minute, count, sum FROM {SCHEMA}.metrics").fetchall()
        batches = [r[0] for r in conn.execute(f"SELECT batch_id FROM {SCHEMA}.rebalancer_batches ORDER BY 1")]
    database = pd.DataFrame(rows, columns=[*keys, "count", "sum"])
    database["minute"] = pd.to_datetime(database["minute"], utc=True)
    left = parquet[[*keys, "count", "sum"]].sort_values(keys).reset_index(drop=True)
    right = database.sort_values(keys).reset_index(drop=True)
    checks = {
        "4 batches committed once each": batches == [0, 1, 2, 3],
        "the replayed batch was skipped": summary["sink"]["skipped_batches"] == 1,
        "database rows == Parquet rows": len(right) == len(left) and left.equals(right.astype(left.dtypes.to_dict())),
        "counted once in summary.json": summary["sink"]["tables"]["metrics"]["rows"] == len(right),
        "every accepted event once": int(right["count"].sum()) == summary["accepted"] == events - summary["quarantined"],
    }
    failed = [name for name, ok in checks.items() if not ok]
    return not failed, ", ".join(failed) or f"{len(right):,} stream rows, batch {batches}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--entities", type=int, default=1000, help="with 400 types and 60 minutes: ~1M metric rows")
    parser.add_argument("--batchsize", type=int, default=10_000, help="JDBC rows per batched INSERT")
    parser.add_argument("--stream-events", type=int, default=100_000)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--data", type=Path, default=None, help="where to cache the generated input")
    parser.add_argument("--stream-child", nargs=2, type=Path, metavar=("INPUT", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.stream_child:
        return stream_child(*args.stream_child, kill_after=1)
    if not JDBC_JAR.exists():
        print(f"needs Debian's JDBC driver {JDBC_JAR}: run scripts/ensure-postgres.sh --jdbc", file=sys.stderr)
        return 2
    # The driver must be on the JVM's class path before it starts (driver and local executors alike).
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--jars {JDBC_JAR} pyspark-shell"

    import psycopg
    from pyspark import StorageLevel

    from rebalancer.pipeline.batch import run_batch
    from rebalancer.pipeline.generate import GenerateConfig, generate
    from rebalancer.pipeline.ingest.inspect import inspect_input
    from rebalancer.pipeline.session.build import build_session
    from rebalancer.pipeline.sinks import METRICS_KEY, PostgresSink
    from rebalancer.testing.postgres import LocalPostgres

    work = Path(tempfile.mkdtemp(prefix="rebalancer-bench-pg-", dir="/tmp"))
    work.chmod(0o711)  # the server runs as `postgres` under root and must reach work/pg
    data = args.data or work / "input"
    config = GenerateConfig(events=args.events, entities=args.entities, seed=7)
    if not data.exists() or not any(data.iterdir()):
        generate(config, data)
    try:
        with LocalPostgres(work / "pg") as pg:
            spark = build_session(args.master, app_name="postgres-sink-bench")
            summary = run_batch(spark, inspect_input(data), work / "out", report=False)
            metrics = spark.read.parquet(str(work / "out" / "metrics")).persist(StorageLevel.MEMORY_AND_DISK)
            rows = metrics.count()
            partitions = metrics.rdd.getNumPartitions()
            print(f"{summary['ingested']:,} events -> {rows:,} metric rows in {partitions} partitions")
            with psycopg.connect(pg.url, autocommit=True) as conn:
                conn.execute(f"CREATE SCHEMA {SCHEMA}")

            # Python workers idle for a minute are stopped; in a pipeline run the sink follows the grouped
            # map, so its workers are running and the JVM has compiled its Arrow path. Warm both writers
            # up the same way here, outside the timing, with WARM_UP_ROWS rows into scratch tables.
            meter = Meter(int((pg.data_dir / "postmaster.pid").read_text().split()[0]))
            sink = PostgresSink(pg.url, schema=SCHEMA)
            sink.write(metrics.limit(WARM_UP_ROWS), "warm_up", METRICS_KEY)
            jdbc_write(metrics.limit(WARM_UP_ROWS), pg, "warm_up_jdbc", args.batchsize, False, meter)
            fresh_table(metrics, pg, "metrics_ours")
            start = meter.sample()
            first = sink.write(metrics, "metrics_ours", METRICS_KEY)
            ours_seconds = time.perf_counter() - start[0]
            print(f"  ours (binary COPY straight into the empty table, {first.tasks} tasks, {first.direct:,} rows direct): "
                  f"{ours_seconds:.2f} s, {rows / ours_seconds:,.0f} rows/s; {meter.since(start)}")
            jdbc = {}
            for name, rewrite, key_after in JDBC_VARIANTS:
                jdbc[name], cpu = jdbc_write(
                    metrics, pg, f"metrics_jdbc_{name}", args.batchsize, key_after, meter, rewrite
                )
                how = "into a bare table, then ADD PRIMARY KEY" if key_after else "into the keyed table"
                print(f"  jdbc batchsize={args.batchsize} reWriteBatchedInserts={str(rewrite).lower()}, {how}: "
                      f"{jdbc[name]:.2f} s, {rows / jdbc[name]:,.0f} rows/s; {cpu}")
            jdbc_seconds = min(jdbc.values())  # the fastest JDBC variant is the baseline

            with psycopg.connect(pg.url) as conn:
                before = fingerprint(conn, "metrics_ours")
                jdbc_rows = {fingerprint(conn, f"metrics_jdbc_{name}") for name, _, _ in JDBC_VARIANTS}
            start = meter.sample()
            again = sink.write(metrics, "metrics_ours", METRICS_KEY)
            print(f"  ours again (every key exists: each task finds its first key and upserts): {again.seconds:.2f} s, "
                  f"{again.changed} rows changed, {again.direct} direct, {again.refused} refused; {meter.since(start)}")
            with psycopg.connect(pg.url) as conn:
                after = fingerprint(conn, "metrics_ours")
            print(f"  the same rows and values as Spark's writer stored: {'yes' if jdbc_rows == {before} else 'NO'}")
            idempotent = (before == after and {count for count, _ in jdbc_rows} == {rows} == {before[0], first.rows}
                          and again.changed == 0 and first.direct == rows)
            metrics.unpersist()

            once, detail = exactly_once(spark, pg, work, args.stream_events)
            print(f"  stream killed after batch 1's commit, restarted: {'ok' if once else 'FAILED'} ({detail})")
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"RESULT rows={rows} rows_per_s_ours={rows / ours_seconds:.0f} rows_per_s_jdbc={rows / jdbc_seconds:.0f} "
        f"speedup_vs_jdbc={jdbc_seconds / ours_seconds:.2f} idempotent={int(idempotent)} exactly_once={int(once)}"
    )
    return 0 if idempotent and once else 1


if __name__ == "__main__":
    sys.exit(main())
