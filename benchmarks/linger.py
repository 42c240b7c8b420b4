"""Broker-level linger vs per-partition linger, counted by the brokers (issue 4, the seed's table).

Setup: 1000 partitions on 3 librdkafka mock brokers (real Kafka protocol on loopback), 100-byte
values sent round-robin over the partitions at a controlled rate (20,000 and 50,000 msg/s), linger
500 ms. Rows: confluent-kafka `linger.ms=500` (librdkafka's per-partition linger: the seed's
"before"), aiokafka `linger_ms=500`, and ours (`broker.linger.ms=500`, `broker.batch.max.bytes=10 MB`).

Each row runs in a fresh subprocess with a fresh mock cluster, so rows do not share memory, GC
state or broker logs. ProduceRequests are counted by the mock brokers, never by the clients.
Latency is send() to delivery report on every 10th message, measured the same way for the two
asyncio clients (a done callback on the message's future) and with librdkafka's own per-message
latency (produce() to delivery) for confluent-kafka. "achieved" is messages handed to the client during the window / window length:
a client that cannot keep up falls behind the schedule and shows it here.

A fourth row, `ours-txn`, runs the same 20k msg/s workload through a transactional producer
(`transactional.id` set, one transaction committed every second): `transactions_ok=1` when it
cuts broker-counted ProduceRequests by >= 98% against confluent-kafka (non-transactional).

`--sweep` runs the seed's test plan instead: partitions 100 / 1,000 / 5,000 x rates 5k / 20k /
50k msg/s x `broker.linger.ms` 5 / 100 / 500, ours against confluent-kafka with the same
`linger.ms`, plus one lz4-compressed cell. It prints a Markdown table (docs/produce.md keeps one):
broker-counted requests for both clients, our p50/p99, the achieved rate, and whether
`p99 <= broker.linger.ms + one RTT + 300 ms` held (RTT: the median of five single-message round
trips measured before the window).

    .venv/bin/python benchmarks/linger.py               # 60 s per row
    .venv/bin/python benchmarks/linger.py --seconds 10  # quicker
    .venv/bin/python benchmarks/linger.py --sweep       # the seed's grid, 5 s per cell
    .venv/bin/python benchmarks/linger.py --cluster real  # the 20k row on 3 real Kafka brokers (make kafka)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from rebalancer.testing import MockKafkaCluster

PARTITIONS = 1000
BROKERS = 3
VALUE = b"v" * 100
LINGER_MS = 500
MAX_BYTES = 10_000_000
RATES = (20_000, 50_000)
CLIENTS = ("confluent", "aiokafka", "ours")
TXN_CLIENT = "ours-txn"
TXN_COMMIT_S = 1.0  # the transactional row commits once a second, as a streaming job's checkpoint would
TXN_TARGET_PCT = 98.0
SWEEP_PARTITIONS = (100, 1_000, 5_000)
SWEEP_RATES = (5_000, 20_000, 50_000)
SWEEP_LINGERS = (5, 100, 500)
SWEEP_SECONDS = 5.0
SWEEP_COMPRESSED = ("lz4", 1_000, 20_000, 100)  # codec, partitions, rate, linger
LATENCY_SLACK_MS = 300.0
TOPIC = "bench"
TICK_S = 0.002
MAX_BURST = 2_000  # messages per loop turn before yielding, so acks are not starved
CEILING_SECONDS = 5.0
# --ceiling: each client unthrottled in its own process (1,000 partitions, 100-byte values).
CEILING_CLIENTS = ("ceiling", "ceiling-aiokafka", "ceiling-confluent")
# The seed's open question (sticky partitioning x broker-level linger): keyless messages, sticky
# (librdkafka's consistent_random) against random placement per message, in this cell.
STICKY_CELL_ARGS = (5_000, 20_000, 5)
# Latency is sampled on every 10th message, the same for every client: a per-message callback costs
# a pure-Python client a visible share of its CPU, and 1 in 10 still gives >= 20k samples per row.
SAMPLE_EVERY = 10


# -- one row's setting ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    """One benchmark setting; every row of a table is one client run on one cell."""

    partitions: int = PARTITIONS
    rate: float = RATES[0]
    linger_ms: float = LINGER_MS
    compression: str | None = None

    def label(self) -> str:
        codec = f" {self.compression}" if self.compression else ""
        return f"{self.partitions}p {int(self.rate / 1000)}k {self.linger_ms:g}ms{codec}"


# -- rows (each runs in its own process) -------------------------------------------------------------
def percentiles(latencies_ms: list[float] | np.ndarray) -> tuple[float, float, float]:
    if len(latencies_ms) == 0:
        return (float("nan"),) * 3
    p50, p95, p99 = np.percentile(np.asarray(latencies_ms, dtype=np.float64), [50, 95, 99])
    return float(p50), float(p95), float(p99)


def row_confluent(cluster: MockKafkaCluster, cell: Cell, seconds: float) -> dict[str, object]:
    from confluent_kafka import Producer

    latencies: list[float] = []
    errors = [0]

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            errors[0] += 1
        else:
            latencies.append(msg.latency() * 1000.0)  # librdkafka: produce() to delivery

    config = {"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": cell.linger_ms, "acks": "all"}
    if cell.compression:
        config["compression.type"] = cell.compression
    producer = Producer(config)
    partitions = cell.partitions
    for p in range(partitions):  # warm-up: metadata and connections, before counting starts
        producer.produce(TOPIC, VALUE, partition=p)
    producer.flush(30)
    cluster.start_request_tracking()
    sent = 0
    start = time.monotonic()
    deadline = start + seconds
    while True:
        now = time.monotonic()
        if now >= deadline:
            break
        target = int((now - start) * cell.rate)
        burst = 0
        while sent < target and burst < MAX_BURST:
            try:
                if sent % SAMPLE_EVERY == 0:
                    producer.produce(TOPIC, VALUE, partition=sent % partitions, on_delivery=delivered)
                else:
                    producer.produce(TOPIC, VALUE, partition=sent % partitions)
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
            burst += 1
        producer.poll(0)
        time.sleep(TICK_S)
    producer.flush(120)
    return {"sent": sent, "latencies": latencies, "failed": errors[0]}


async def _paced_async(
    send: Callable, cell: Cell, seconds: float, on_future: Callable, on_tick: Callable | None = None,
    keyless: bool = False,
) -> int:
    loop = asyncio.get_running_loop()
    sent = 0
    start = loop.time()
    deadline = start + seconds
    partitions = cell.partitions
    while True:
        now = loop.time()
        if now >= deadline:
            break
        if on_tick is not None:
            await on_tick(now)
        target = int((now - start) * cell.rate)
        burst = 0
        while sent < target and burst < MAX_BURST:
            fut = await send(TOPIC, VALUE, partition=None if keyless else sent % partitions)
            if sent % SAMPLE_EVERY == 0:
                on_future(fut)
            sent += 1
            burst += 1
        await asyncio.sleep(TICK_S if sent >= target else 0)
    return sent


def _latency_recorder(latencies: list[float], failures: list[int]) -> Callable:
    def on_future(fut: asyncio.Future) -> None:
        started = time.monotonic()

        def done(f: asyncio.Future) -> None:
            if f.cancelled() or f.exception() is not None:
                failures[0] += 1
            else:
                latencies.append((time.monotonic() - started) * 1000.0)

        fut.add_done_callback(done)

    return on_future


def row_aiokafka(cluster: MockKafkaCluster, cell: Cell, seconds: float) -> dict[str, object]:
    from aiokafka import AIOKafkaProducer

    latencies: list[float] = []
    failures = [0]

    async def main() -> int:
        producer = AIOKafkaProducer(
            bootstrap_servers=cluster.bootstrap_servers, linger_ms=cell.linger_ms, acks="all",
            compression_type=cell.compression,
        )  # fmt: skip
        await producer.start()
        try:
            for p in range(cell.partitions):
                await producer.send(TOPIC, VALUE, partition=p)
            await producer.flush()
            cluster.start_request_tracking()
            sent = await _paced_async(producer.send, cell, seconds, _latency_recorder(latencies, failures))
            await producer.flush()
            return sent
        finally:
            await producer.stop()

    sent = asyncio.run(main())
    return {"sent": sent, "latencies": latencies, "failed": failures[0]}


def _ours_config(cluster: MockKafkaCluster, cell: Cell, **extra: object) -> dict[str, object]:
    config: dict[str, object] = {
        "bootstrap.servers": cluster.bootstrap_servers,
        "broker.linger.ms": cell.linger_ms,
        "broker.batch.max.bytes": MAX_BYTES,
        "acks": "all",
        **extra,
    }
    if cell.compression:
        config["compression.type"] = cell.compression
    return config


async def _round_trip_ms(producer: object) -> float:
    """The median of five single-message round trips on an idle producer: our "one RTT"."""
    samples = []
    for _ in range(5):
        started = time.monotonic()
        future = await producer.send(TOPIC, VALUE, partition=0)
        await producer.flush()
        await future
        samples.append((time.monotonic() - started) * 1000.0)
    return float(np.median(samples))


def row_ours(
    cluster: MockKafkaCluster, cell: Cell, seconds: float, *, transactional: bool = False, partitioner: str | None = None
) -> dict[str, object]:
    """Ours on `cell`; with `partitioner`, keyless messages placed by it instead of round-robin partitions."""
    from rebalancer.produce import BatchingProducer

    latencies: list[float] = []
    failures = [0]
    stats: dict[str, object] = {}

    async def main() -> int:
        extra: dict[str, object] = {"transactional.id": "bench-txn"} if transactional else {}
        if partitioner is not None:
            extra["partitioner"] = partitioner
        producer = BatchingProducer(_ours_config(cluster, cell, **extra))
        await producer.start()
        next_commit = [0.0]

        async def commit_on_time(now: float) -> None:
            if now >= next_commit[0]:
                await producer.commit_transaction()
                await producer.begin_transaction()
                next_commit[0] = now + TXN_COMMIT_S

        try:
            if transactional:
                await producer.begin_transaction()
            for p in range(cell.partitions):
                await producer.send(TOPIC, VALUE, partition=p)
            await producer.flush()
            rtt_ms = await _round_trip_ms(producer)
            before = producer.stats()
            cluster.start_request_tracking()
            next_commit[0] = asyncio.get_running_loop().time() + TXN_COMMIT_S
            sent = await _paced_async(
                producer.send, cell, seconds, _latency_recorder(latencies, failures),
                commit_on_time if transactional else None, keyless=partitioner is not None,
            )  # fmt: skip
            if transactional:
                await producer.commit_transaction()
            await producer.flush()
            after = producer.stats()
            stats.update(
                {
                    "own_requests": after["requests"] - before["requests"],
                    "partitions_per_send_avg": after["partitions_per_send_avg"],
                    "msgs_per_own_request": (after["produced"] - before["produced"])
                    / max(1, after["requests"] - before["requests"]),
                    "triggers_by_reason": after["triggers_by_reason"],
                    "window_waits": after["window_waits"],
                    "rtt_ms": rtt_ms,
                    "failed_total": after["failed"],
                }
            )
            return sent
        finally:
            await producer.stop()

    sent = asyncio.run(main())
    return {"sent": sent, "latencies": latencies, "failed": failures[0], "ours": stats}


async def _ceiling_async(make_producer: Callable[[], Any], cell: Cell, seconds: float) -> dict[str, object]:
    """An asyncio producer, unthrottled: sends round-robin for `seconds`, then waits for every ack."""
    producer = make_producer()
    await producer.start()
    try:
        for p in range(cell.partitions):
            await producer.send(TOPIC, VALUE, partition=p)
        await producer.flush()
        start = time.monotonic()
        sent = 0
        while time.monotonic() - start < seconds:
            for _ in range(MAX_BURST):
                await producer.send(TOPIC, VALUE, partition=sent % cell.partitions)
                sent += 1
            await asyncio.sleep(0)
        await producer.flush()
        elapsed = time.monotonic() - start
    finally:
        await producer.stop()
    return {"sent": sent, "elapsed": elapsed, "ceiling": sent / elapsed}


def row_ceiling(cluster: MockKafkaCluster, cell: Cell, seconds: float) -> dict[str, object]:
    """Ours, unthrottled: how many msg/s one Python process sustains end to end (send to ack)."""
    from rebalancer.produce import BatchingProducer

    return asyncio.run(_ceiling_async(lambda: BatchingProducer(_ours_config(cluster, cell)), cell, seconds))


def row_ceiling_aiokafka(cluster: MockKafkaCluster, cell: Cell, seconds: float) -> dict[str, object]:
    """aiokafka's own AIOKafkaProducer, unthrottled, driven as `row_ceiling` drives ours."""
    from aiokafka import AIOKafkaProducer

    def make() -> AIOKafkaProducer:
        return AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=cell.linger_ms, acks="all")

    return asyncio.run(_ceiling_async(make, cell, seconds))


def row_ceiling_confluent(cluster: MockKafkaCluster, cell: Cell, seconds: float) -> dict[str, object]:
    """confluent-kafka unthrottled: produce() until the window ends, then flush; BufferError waits in poll."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": cell.linger_ms, "acks": "all"})
    for p in range(cell.partitions):
        producer.produce(TOPIC, VALUE, partition=p)
    producer.flush(30)
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < seconds:
        for _ in range(MAX_BURST):
            try:
                producer.produce(TOPIC, VALUE, partition=sent % cell.partitions)
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("confluent-kafka did not deliver everything within 120 s")
    elapsed = time.monotonic() - start
    return {"sent": sent, "elapsed": elapsed, "ceiling": sent / elapsed}


CEILING_ROWS: dict[str, Callable[[MockKafkaCluster, Cell, float], dict[str, object]]] = {
    "ceiling": lambda cluster, cell, seconds: row_ceiling(cluster, cell, seconds),
    "ceiling-aiokafka": row_ceiling_aiokafka,
    "ceiling-confluent": row_ceiling_confluent,
}

ROWS: dict[str, Callable[[MockKafkaCluster, Cell, float], dict[str, object]]] = {
    "confluent": row_confluent,
    "aiokafka": row_aiokafka,
    "ours": row_ours,
    TXN_CLIENT: lambda cluster, cell, seconds: row_ours(cluster, cell, seconds, transactional=True),
    "ours-sticky": lambda cluster, cell, seconds: row_ours(cluster, cell, seconds, partitioner="consistent_random"),
    "ours-random": lambda cluster, cell, seconds: row_ours(cluster, cell, seconds, partitioner="random"),
}


def run_row(client: str, cell: Cell, seconds: float) -> dict[str, object]:
    with MockKafkaCluster(brokers=BROKERS) as cluster:
        cluster.create_topic(TOPIC, partitions=cell.partitions)
        if client in CEILING_ROWS:
            return CEILING_ROWS[client](cluster, cell, seconds)
        result = ROWS[client](cluster, cell, seconds)
        requests = cluster.produce_requests()
    return row_summary(client, cell, seconds, result, requests)


def row_summary(
    client: str, cell: Cell, seconds: float, result: dict[str, object], requests: dict[int, int]
) -> dict[str, object]:
    """One row's figures: what the client measured and what the brokers counted."""
    latencies = result.pop("latencies")
    p50, p95, p99 = percentiles(latencies)
    sent = int(result["sent"])
    total_requests = sum(requests.values())
    return {
        **result,
        "client": client,
        "cell": asdict(cell),
        "rate": cell.rate,
        "seconds": seconds,
        "requests": total_requests,
        "requests_by_broker": requests,
        "latency_samples": len(latencies),
        "msgs_per_request": sent / total_requests if total_requests else float("nan"),
        "p50": p50,
        "p95": p95,
        "p99": p99,
        "achieved": sent / seconds,
    }


# -- --cluster real: the headline row on real Apache Kafka brokers ------------------------------------
def headline_real(seconds: float) -> int:
    """The 20k msg/s headline row (1,000 partitions, linger 500 ms) on three real Apache Kafka 4.3.1
    brokers (`rebalancer.testing.KafkaCluster`, `make kafka`), ProduceRequests counted by the brokers.

    One cluster serves the three rows, which run one after the other in this process: a broker JVM
    takes seconds to start where the mock takes none. The topic is replicated as on the mock (factor 1).
    """
    from rebalancer.testing import KafkaCluster
    from rebalancer.testing.kafka_cluster import KafkaNotInstalledError

    cell = Cell()
    started = time.perf_counter()
    try:
        cluster = KafkaCluster(brokers=BROKERS)
    except KafkaNotInstalledError as exc:
        print(f"linger: {exc}", file=sys.stderr)
        return 2
    cluster_start_s = time.perf_counter() - started
    rows: dict[str, dict[str, object]] = {}
    with cluster:
        cluster.create_topic(TOPIC, partitions=cell.partitions)
        print(
            f"broker-level linger on real brokers: Apache Kafka {cluster.version}, {BROKERS} brokers (up in "
            f"{cluster_start_s:.1f} s), {cell.partitions} partitions, {len(VALUE)}-byte values, "
            f"{int(cell.rate):,} msg/s, linger {cell.linger_ms:g} ms, {seconds:g} s per row, {os.cpu_count()} cores"
        )
        header = (
            f"{'client':<10} {'ProduceRequests':>15} {'msgs/request':>12} {'p50 ms':>8} {'p95 ms':>8} "
            f"{'p99 ms':>8} {'achieved':>9} {'failed*':>7}"
        )
        print(header)
        print("-" * len(header))
        for client in CLIENTS:
            result = ROWS[client](cluster, cell, seconds)
            cluster.stop_request_tracking()
            row = row_summary(client, cell, seconds, result, cluster.produce_requests())
            rows[client] = row
            print(
                f"{client:<10} {row['requests']:>15,} {row['msgs_per_request']:>12,.1f} {row['p50']:>8.0f} "
                f"{row['p95']:>8.0f} {row['p99']:>8.0f} {100 * row['achieved'] / cell.rate:>8.1f}% {row['failed']:>7}",
                flush=True,
            )
    print(f"* failures among the latency-sampled messages (every {SAMPLE_EVERY}th)")
    before, ours = rows["confluent"], rows["ours"]
    if not before["requests"] or not ours["requests"]:
        print(f"linger: the brokers counted no ProduceRequests ({before['requests']}, {ours['requests']})", file=sys.stderr)
        return 1
    reduction = 100.0 * (1 - ours["requests"] / before["requests"])
    print(
        f"ours: broker-counted {ours['requests']} vs producer-counted {ours['ours']['own_requests']} requests; "
        f"by broker {ours['requests_by_broker']}"
    )
    print(
        f"RESULT real_requests_before={before['requests']} real_requests_aiokafka={rows['aiokafka']['requests']} "
        f"real_requests_ours={ours['requests']} real_achieved_pct_20k={100 * ours['achieved'] / cell.rate:.1f} "
        f"real_failed={int(ours['ours']['failed_total'])} real_reduction_pct={reduction:.2f} "
        f"real_p99_ms_20k={ours['p99']:.0f} cluster_start_s={cluster_start_s:.1f}"
    )
    return 0


# -- orchestration -----------------------------------------------------------------------------------
def spawn(client: str, cell: Cell, seconds: float) -> dict[str, object]:
    cmd = [sys.executable, os.path.abspath(__file__), "--row", client, "--rate", str(cell.rate),
           "--seconds", str(seconds), "--partitions", str(cell.partitions), "--linger-ms", str(cell.linger_ms)]  # fmt: skip
    if cell.compression:
        cmd += ["--compression", cell.compression]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"row {client}@{cell.label()} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def sweep_cells(
    partitions: Iterable[int] = SWEEP_PARTITIONS,
    rates: Iterable[float] = SWEEP_RATES,
    lingers: Iterable[float] = SWEEP_LINGERS,
    compressed: tuple[str, int, float, float] | None = SWEEP_COMPRESSED,
) -> list[Cell]:
    cells = [Cell(p, r, lg) for p in partitions for r in rates for lg in lingers]
    if compressed is not None:
        codec, p, r, lg = compressed
        cells.append(Cell(p, r, lg, codec))
    return cells


def ceilings(
    seconds: float, runner: Callable[[str, Cell, float], dict[str, object]] = spawn, cell: Cell | None = None
) -> tuple[str, str]:
    """The three unthrottled ceilings (ours, aiokafka's AIOKafkaProducer, confluent-kafka) and their
    ratios, as RESULT fields."""
    cell = cell or Cell()
    found = {client: float(runner(client, cell, seconds)["ceiling"]) for client in CEILING_CLIENTS}
    ours, aiokafka_, confluent = (found[c] for c in CEILING_CLIENTS)
    print(
        f"ceiling, {cell.partitions} partitions, {len(VALUE)}-byte values, linger {cell.linger_ms:g} ms, unthrottled: "
        f"ours {ours:,.0f} msg/s, aiokafka {aiokafka_:,.0f} msg/s, confluent-kafka {confluent:,.0f} msg/s",
        flush=True,
    )
    ratios = f"ceiling_ratio_vs_aiokafka={ours / aiokafka_:.2f} ceiling_ratio_vs_confluent={ours / confluent:.2f}"
    return f"ceiling_ours={ours:.0f} ceiling_aiokafka={aiokafka_:.0f} ceiling_confluent={confluent:.0f}", ratios


def sticky_interaction(
    seconds: float, runner: Callable[[str, Cell, float], dict[str, object]] = spawn, cell: Cell | None = None
) -> float:
    """The seed's open question: keyless messages, sticky vs random placement; returns requests sticky/random."""
    cell = cell or Cell(*STICKY_CELL_ARGS)
    rows = {client: runner(client, cell, seconds) for client in ("ours-sticky", "ours-random")}
    for client, row in rows.items():
        own = row["ours"]
        print(
            f"{client} keyless @{cell.label()}: {row['requests']:,} requests (broker-counted), "
            f"{own['partitions_per_send_avg']:.1f} batches/request, {own['msgs_per_own_request']:.1f} msgs/request, "
            f"p99 {row['p99']:.0f} ms, achieved {100.0 * row['achieved'] / cell.rate:.1f}%",
            flush=True,
        )
    random_requests = rows["ours-random"]["requests"]
    return rows["ours-sticky"]["requests"] / random_requests if random_requests else float("nan")


def sweep(
    cells: list[Cell],
    seconds: float,
    runner: Callable[[str, Cell, float], dict[str, object]] = spawn,
    *,
    ceiling_seconds: float = CEILING_SECONDS,
    ceiling_cell: Cell | None = None,
    sticky_cell: Cell | None = None,
) -> tuple[list[dict[str, object]], str]:
    """Ours and confluent-kafka on every cell, then the ceilings and the sticky interaction;
    returns the table rows and the RESULT line."""
    table: list[dict[str, object]] = []
    for cell in cells:
        before, ours = runner("confluent", cell, seconds), runner("ours", cell, seconds)
        rtt_ms = float(ours["ours"]["rtt_ms"])
        budget = cell.linger_ms + rtt_ms + LATENCY_SLACK_MS
        reduction = 100.0 * (1 - ours["requests"] / before["requests"]) if before["requests"] else float("nan")
        row = {
            "cell": cell,
            "requests_confluent": before["requests"],
            "requests_ours": ours["requests"],
            "reduction_pct": reduction,
            "p50_confluent": before["p50"],
            "p99_confluent": before["p99"],
            "p50": ours["p50"],
            "p99": ours["p99"],
            "rtt_ms": rtt_ms,
            "budget_ms": budget,
            "latency_ok": bool(ours["p99"] <= budget),
            "achieved_pct": 100.0 * ours["achieved"] / cell.rate,
            "achieved_pct_confluent": 100.0 * before["achieved"] / cell.rate,
            "rate_ratio": ours["achieved"] / before["achieved"] if before["achieved"] else float("nan"),
            "failed": int(ours["ours"]["failed_total"]),
        }
        table.append(row)
        print(format_row(row), flush=True)
    held = sum(r["latency_ok"] for r in table)
    kept_rate = [r for r in table if r["achieved_pct"] >= 99.0]
    held_where_kept = sum(r["latency_ok"] for r in kept_rate)
    pays = [r for r in table if r["reduction_pct"] >= 50.0]
    ceiling_fields, ceiling_ratios = ceilings(ceiling_seconds, runner, ceiling_cell)
    sticky_ratio = sticky_interaction(seconds, runner, sticky_cell)
    result = (
        f"RESULT sweep_cells={len(table)} latency_held={held} reduction_ge_50pct={len(pays)} {ceiling_fields} "
        f"min_reduction_pct={min(r['reduction_pct'] for r in table):.1f} "
        f"max_reduction_pct={max(r['reduction_pct'] for r in table):.1f} "
        f"failed={sum(r['failed'] for r in table)} "
        f"min_rate_ratio_vs_confluent={min(r['rate_ratio'] for r in table):.2f} "
        f"latency_held_where_rate_kept={held_where_kept} cells_where_rate_kept={len(kept_rate)} "
        f"{ceiling_ratios} sticky_requests_ratio={sticky_ratio:.2f}"
    )
    return table, result


TABLE_HEADER = (
    "| partitions | rate | linger ms | codec | requests confluent | requests ours | reduction | "
    "p50 / p99 confluent ms | p50 / p99 ours ms | RTT ms | p99 budget ms | held | achieved ours | achieved confluent | "
    "ours / confluent |\n"
    "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|:---:|---:|---:|---:|"
)


def format_row(row: dict[str, object]) -> str:
    cell: Cell = row["cell"]
    return (
        f"| {cell.partitions:,} | {int(cell.rate):,} | {cell.linger_ms:g} | {cell.compression or '-'} | "
        f"{row['requests_confluent']:,} | {row['requests_ours']:,} | {row['reduction_pct']:.1f}% | "
        f"{row['p50_confluent']:.0f} / {row['p99_confluent']:.0f} | {row['p50']:.0f} / {row['p99']:.0f} | "
        f"{row['rtt_ms']:.1f} | {row['budget_ms']:.0f} | {'yes' if row['latency_ok'] else 'NO'} | "
        f"{row['achieved_pct']:.1f}% | {row['achieved_pct_confluent']:.1f}% | {row['rate_ratio']:.2f} |"
    )


def headline(seconds: float) -> int:
    cell = Cell()
    print(
        f"broker-level linger: {PARTITIONS} partitions on {BROKERS} mock brokers, {len(VALUE)}-byte values, "
        f"linger {LINGER_MS} ms, broker.batch.max.bytes={MAX_BYTES}, {seconds:g} s per row, "
        f"{os.cpu_count()} cores"
    )
    header = (
        f"{'rate':>7} {'client':<10} {'ProduceRequests':>15} {'msgs/request':>12} "
        f"{'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'achieved/s':>11} {'achieved':>9} {'failed*':>7}"
    )
    print(header)
    print("-" * len(header))
    rows: dict[tuple[str, float], dict[str, object]] = {}
    plan = [(client, rate) for rate in RATES for client in CLIENTS] + [(TXN_CLIENT, RATES[0])]
    for client, rate in plan:
        row = spawn(client, replace(cell, rate=rate), seconds)
        rows[(client, rate)] = row
        print(
            f"{int(rate):>7} {client:<10} {row['requests']:>15,} {row['msgs_per_request']:>12,.1f} "
            f"{row['p50']:>8.0f} {row['p95']:>8.0f} {row['p99']:>8.0f} {row['achieved']:>11,.0f} "
            f"{100 * row['achieved'] / rate:>8.1f}% {row['failed']:>7}",
            flush=True,
        )
    print(f"* failures among the latency-sampled messages (every {SAMPLE_EVERY}th)")
    for client, rate in [("ours", r) for r in RATES] + [(TXN_CLIENT, RATES[0])]:
        ours = rows[(client, rate)]["ours"]
        print(
            f"{client}@{int(rate)}: broker-counted {rows[(client, rate)]['requests']} vs producer-counted "
            f"{ours['own_requests']} requests; {ours['partitions_per_send_avg']:.0f} partitions/send; "
            f"triggers {ours['triggers_by_reason']}; in-flight window waits {ours['window_waits']}"
        )
    before, after = rows[("confluent", RATES[0])], rows[("ours", RATES[0])]
    reduction = 100.0 * (1 - after["requests"] / before["requests"]) if before["requests"] else float("nan")
    achieved = {rate: 100.0 * rows[("ours", rate)]["achieved"] / rate for rate in RATES}
    p99 = {rate: rows[("ours", rate)]["p99"] for rate in RATES}
    txn = rows[(TXN_CLIENT, RATES[0])]
    txn_reduction = 100.0 * (1 - txn["requests"] / before["requests"]) if before["requests"] else float("nan")
    txn_ok = txn_reduction >= TXN_TARGET_PCT and txn["failed"] == 0 and txn["ours"]["failed_total"] == 0
    budget = LINGER_MS + LATENCY_SLACK_MS
    print(
        f"targets: reduction >= 99% at 20k: {reduction:.2f}%; p99 <= {budget:g} ms: "
        + ", ".join(f"{p99[r]:.0f} ms at {int(r / 1000)}k" for r in RATES)
        + f"; achieved >= 99% at 20k: {achieved[RATES[0]]:.1f}%"
        + f"; transactional (commit every {TXN_COMMIT_S:g} s) reduction >= {TXN_TARGET_PCT:g}%: {txn_reduction:.2f}%"
    )
    if achieved[RATES[1]] < 99.0:
        ceiling = spawn("ceiling", cell, min(seconds, CEILING_SECONDS))
        print(
            f"pure Python cannot sustain {int(RATES[1]):,} msg/s here: our producer's measured ceiling is "
            f"{ceiling['ceiling']:,.0f} msg/s unthrottled (send to ack, one event loop, {os.cpu_count()} cores "
            f"shared with the mock brokers)"
        )
    print(
        f"RESULT requests_before={before['requests']} requests_ours={after['requests']} "
        f"reduction_pct={reduction:.2f} p99_ms_20k={p99[RATES[0]]:.0f} p99_ms_50k={p99[RATES[1]]:.0f} "
        f"achieved_pct_20k={achieved[RATES[0]]:.1f} achieved_pct_50k={achieved[RATES[1]]:.1f} "
        f"requests_txn={txn['requests']} transactions_ok={int(txn_ok)}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=None, help="window per row (default 60; --sweep: 5)")
    parser.add_argument("--sweep", action="store_true", help="the seed's test plan: a grid of partitions, rates, lingers")
    parser.add_argument(
        "--ceiling", action="store_true", help="unthrottled msg/s of ours, aiokafka and confluent-kafka (1,000 partitions)"
    )
    parser.add_argument(
        "--cluster", choices=("mock", "real"), default="mock",
        help="mock: librdkafka's mock brokers (default); real: the 20k msg/s headline row on 3 Apache Kafka brokers",
    )  # fmt: skip
    parser.add_argument("--row", choices=(*ROWS, *CEILING_ROWS), help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=RATES[0], help=argparse.SUPPRESS)
    parser.add_argument("--partitions", type=int, default=PARTITIONS, help=argparse.SUPPRESS)
    parser.add_argument("--linger-ms", type=float, default=LINGER_MS, help=argparse.SUPPRESS)
    parser.add_argument("--compression", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else (SWEEP_SECONDS if args.sweep else 60.0)
    if seconds <= 0:
        parser.error(f"--seconds must be > 0, got {seconds}")
    if args.cluster == "real":
        if args.sweep or args.ceiling or args.row:
            parser.error("--cluster real runs the headline row only: it takes no --sweep, --ceiling or --row")
        return headline_real(seconds)
    if args.row:
        cell = Cell(args.partitions, args.rate, args.linger_ms, args.compression)
        print(json.dumps(run_row(args.row, cell, seconds)), flush=True)
        return 0
    if args.ceiling:
        fields, ratios = ceilings(args.seconds if args.seconds is not None else CEILING_SECONDS)
        print(f"RESULT {fields} {ratios}")
        return 0
    if not args.sweep:
        return headline(seconds)
    cells = sweep_cells()
    print(
        f"sweep: {len(cells)} cells, {seconds:g} s each, ours vs confluent-kafka (same linger), {BROKERS} mock "
        f"brokers, {len(VALUE)}-byte values, {os.cpu_count()} cores; p99 budget = linger + RTT + "
        f"{LATENCY_SLACK_MS:g} ms"
    )
    print(TABLE_HEADER, flush=True)
    _, result = sweep(cells, seconds)
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
