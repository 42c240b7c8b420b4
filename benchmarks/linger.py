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

    .venv/bin/python benchmarks/linger.py               # 60 s per row
    .venv/bin/python benchmarks/linger.py --seconds 10  # quicker
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

import numpy as np

from rebalancer.testing import MockKafkaCluster

PARTITIONS = 1000
BROKERS = 3
VALUE = b"v" * 100
LINGER_MS = 500
MAX_BYTES = 10_000_000
RATES = (20_000, 50_000)
CLIENTS = ("confluent", "aiokafka", "ours")
TOPIC = "bench"
TICK_S = 0.002
MAX_BURST = 2_000  # messages per loop turn before yielding, so acks are not starved
CEILING_SECONDS = 5.0
# Latency is sampled on every 10th message, the same for every client: a per-message callback costs
# a pure-Python client a visible share of its CPU, and 1 in 10 still gives >= 20k samples per row.
SAMPLE_EVERY = 10


# -- rows (each runs in its own process) -------------------------------------------------------------
def percentiles(latencies_ms: list[float] | np.ndarray) -> tuple[float, float, float]:
    if len(latencies_ms) == 0:
        return (float("nan"),) * 3
    p50, p95, p99 = np.percentile(np.asarray(latencies_ms, dtype=np.float64), [50, 95, 99])
    return float(p50), float(p95), float(p99)


def row_confluent(cluster: MockKafkaCluster, rate: float, seconds: float) -> dict[str, object]:
    from confluent_kafka import Producer

    latencies: list[float] = []
    errors = [0]

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            errors[0] += 1
        else:
            latencies.append(msg.latency() * 1000.0)  # librdkafka: produce() to delivery

    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": LINGER_MS, "acks": "all"})
    for p in range(PARTITIONS):  # warm-up: metadata and connections, before counting starts
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
        target = int((now - start) * rate)
        burst = 0
        while sent < target and burst < MAX_BURST:
            try:
                if sent % SAMPLE_EVERY == 0:
                    producer.produce(TOPIC, VALUE, partition=sent % PARTITIONS, on_delivery=delivered)
                else:
                    producer.produce(TOPIC, VALUE, partition=sent % PARTITIONS)
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
            burst += 1
        producer.poll(0)
        time.sleep(TICK_S)
    producer.flush(120)
    return {"sent": sent, "latencies": latencies, "failed": errors[0]}


async def _paced_async(send: object, rate: float, seconds: float, on_future: object) -> int:
    loop = asyncio.get_running_loop()
    sent = 0
    start = loop.time()
    deadline = start + seconds
    while True:
        now = loop.time()
        if now >= deadline:
            break
        target = int((now - start) * rate)
        burst = 0
        while sent < target and burst < MAX_BURST:
            fut = await send(TOPIC, VALUE, partition=sent % PARTITIONS)
            if sent % SAMPLE_EVERY == 0:
                on_future(fut)
            sent += 1
            burst += 1
        await asyncio.sleep(TICK_S if sent >= target else 0)
    return sent


def _latency_recorder(latencies: list[float], failures: list[int]) -> object:
    def on_future(fut: asyncio.Future) -> None:
        started = time.monotonic()

        def done(f: asyncio.Future) -> None:
            if f.cancelled() or f.exception() is not None:
                failures[0] += 1
            else:
                latencies.append((time.monotonic() - started) * 1000.0)

        fut.add_done_callback(done)

    return on_future


def row_aiokafka(cluster: MockKafkaCluster, rate: float, seconds: float) -> dict[str, object]:
    from aiokafka import AIOKafkaProducer

    latencies: list[float] = []
    failures = [0]

    async def main() -> int:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=LINGER_MS, acks="all")
        await producer.start()
        try:
            for p in range(PARTITIONS):
                await producer.send(TOPIC, VALUE, partition=p)
            await producer.flush()
            cluster.start_request_tracking()
            sent = await _paced_async(producer.send, rate, seconds, _latency_recorder(latencies, failures))
            await producer.flush()
            return sent
        finally:
            await producer.stop()

    sent = asyncio.run(main())
    return {"sent": sent, "latencies": latencies, "failed": failures[0]}


def row_ours(cluster: MockKafkaCluster, rate: float, seconds: float) -> dict[str, object]:
    from rebalancer.produce import BatchingProducer

    latencies: list[float] = []
    failures = [0]
    stats: dict[str, object] = {}

    async def main() -> int:
        producer = BatchingProducer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "broker.linger.ms": LINGER_MS,
                "broker.batch.max.bytes": MAX_BYTES,
                "acks": "all",
            }
        )
        await producer.start()
        try:
            for p in range(PARTITIONS):
                await producer.send(TOPIC, VALUE, partition=p)
            await producer.flush()
            before = producer.stats()
            cluster.start_request_tracking()
            sent = await _paced_async(producer.send, rate, seconds, _latency_recorder(latencies, failures))
            await producer.flush()
            after = producer.stats()
            stats.update(
                {
                    "own_requests": after["requests"] - before["requests"],
                    "partitions_per_send_avg": after["partitions_per_send_avg"],
                    "triggers_by_reason": after["triggers_by_reason"],
                    "window_waits": after["window_waits"],
                }
            )
            return sent
        finally:
            await producer.stop()

    sent = asyncio.run(main())
    return {"sent": sent, "latencies": latencies, "failed": failures[0], "ours": stats}


def row_ceiling(cluster: MockKafkaCluster, seconds: float) -> dict[str, object]:
    """Ours, unthrottled: how many msg/s one Python process sustains end to end (send to ack)."""
    from rebalancer.produce import BatchingProducer

    async def main() -> tuple[int, float]:
        producer = BatchingProducer(
            {"bootstrap.servers": cluster.bootstrap_servers, "broker.linger.ms": LINGER_MS, "broker.batch.max.bytes": MAX_BYTES}
        )
        await producer.start()
        try:
            for p in range(PARTITIONS):
                await producer.send(TOPIC, VALUE, partition=p)
            await producer.flush()
            start = time.monotonic()
            sent = 0
            while time.monotonic() - start < seconds:
                for _ in range(MAX_BURST):
                    await producer.send(TOPIC, VALUE, partition=sent % PARTITIONS)
                    sent += 1
                await asyncio.sleep(0)
            await producer.flush()
            return sent, time.monotonic() - start
        finally:
            await producer.stop()

    sent, elapsed = asyncio.run(main())
    return {"sent": sent, "elapsed": elapsed, "ceiling": sent / elapsed}


def run_row(client: str, rate: float, seconds: float) -> dict[str, object]:
    with MockKafkaCluster(brokers=BROKERS) as cluster:
        cluster.create_topic(TOPIC, partitions=PARTITIONS)
        if client == "ceiling":
            return row_ceiling(cluster, seconds)
        runner = {"confluent": row_confluent, "aiokafka": row_aiokafka, "ours": row_ours}[client]
        result = runner(cluster, rate, seconds)
        requests = cluster.produce_requests()
    latencies = result.pop("latencies")
    p50, p95, p99 = percentiles(latencies)
    sent = int(result["sent"])
    total_requests = sum(requests.values())
    return {
        **result,
        "client": client,
        "rate": rate,
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


# -- orchestration -----------------------------------------------------------------------------------
def spawn(client: str, rate: float, seconds: float) -> dict[str, object]:
    cmd = [sys.executable, os.path.abspath(__file__), "--row", client, "--rate", str(rate), "--seconds", str(seconds)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"row {client}@{rate} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each row's window (default 60)")
    parser.add_argument("--row", choices=(*CLIENTS, "ceiling"), help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=RATES[0], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error(f"--seconds must be > 0, got {args.seconds}")
    if args.row:
        print(json.dumps(run_row(args.row, args.rate, args.seconds)), flush=True)
        return 0

    print(
        f"broker-level linger: {PARTITIONS} partitions on {BROKERS} mock brokers, {len(VALUE)}-byte values, "
        f"linger {LINGER_MS} ms, broker.batch.max.bytes={MAX_BYTES}, {args.seconds:g} s per row, "
        f"{os.cpu_count()} cores"
    )
    header = (
        f"{'rate':>7} {'client':<10} {'ProduceRequests':>15} {'msgs/request':>12} "
        f"{'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'achieved/s':>11} {'achieved':>9} {'failed*':>7}"
    )
    print(header)
    print("-" * len(header))
    rows: dict[tuple[str, float], dict[str, object]] = {}
    for rate in RATES:
        for client in CLIENTS:
            row = spawn(client, rate, args.seconds)
            rows[(client, rate)] = row
            print(
                f"{int(rate):>7} {client:<10} {row['requests']:>15,} {row['msgs_per_request']:>12,.1f} "
                f"{row['p50']:>8.0f} {row['p95']:>8.0f} {row['p99']:>8.0f} {row['achieved']:>11,.0f} "
                f"{100 * row['achieved'] / rate:>8.1f}% {row['failed']:>7}",
                flush=True,
            )
    print(f"* failures among the latency-sampled messages (every {SAMPLE_EVERY}th)")
    for rate in RATES:
        ours = rows[("ours", rate)]["ours"]
        print(
            f"ours@{int(rate)}: broker-counted {rows[('ours', rate)]['requests']} vs producer-counted "
            f"{ours['own_requests']} requests; {ours['partitions_per_send_avg']:.0f} partitions/send; "
            f"triggers {ours['triggers_by_reason']}; in-flight window waits {ours['window_waits']}"
        )
    before, after = rows[("confluent", RATES[0])], rows[("ours", RATES[0])]
    reduction = 100.0 * (1 - after["requests"] / before["requests"]) if before["requests"] else float("nan")
    achieved = {rate: 100.0 * rows[("ours", rate)]["achieved"] / rate for rate in RATES}
    p99 = {rate: rows[("ours", rate)]["p99"] for rate in RATES}
    budget = LINGER_MS + 300
    print(
        f"targets: reduction >= 99% at 20k: {reduction:.2f}%; p99 <= {budget} ms: "
        + ", ".join(f"{p99[r]:.0f} ms at {int(r / 1000)}k" for r in RATES)
        + f"; achieved >= 99% at 20k: {achieved[RATES[0]]:.1f}%"
    )
    if achieved[RATES[1]] < 99.0:
        ceiling = spawn("ceiling", 0, min(args.seconds, CEILING_SECONDS))
        print(
            f"pure Python cannot sustain {int(RATES[1]):,} msg/s here: our producer's measured ceiling is "
            f"{ceiling['ceiling']:,.0f} msg/s unthrottled (send to ack, one event loop, {os.cpu_count()} cores "
            f"shared with the mock brokers)"
        )
    print(
        f"RESULT requests_before={before['requests']} requests_ours={after['requests']} "
        f"reduction_pct={reduction:.2f} p99_ms_20k={p99[RATES[0]]:.0f} p99_ms_50k={p99[RATES[1]]:.0f} "
        f"achieved_pct_20k={achieved[RATES[0]]:.1f} achieved_pct_50k={achieved[RATES[1]]:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
