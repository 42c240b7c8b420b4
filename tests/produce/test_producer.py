"""BatchingProducer against librdkafka's mock brokers: delivery, flush/stop, faults, request counts."""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter, defaultdict

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError, KafkaTimeoutError

from rebalancer.produce import BatchingProducer, ProducerStoppedError
from rebalancer.testing import MockKafkaCluster

pytestmark = pytest.mark.kafka

STAT_KEYS = {
    "sends", "partitions_per_send_avg", "partitions_per_send_max", "msgs_per_request", "wait_ms_avg",
    "wait_ms_p99", "triggers_by_reason", "in_flight", "latency_ms_p50", "latency_ms_p95", "latency_ms_p99",
    "acked", "failed", "produced",
}  # fmt: skip


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def offsets_by_partition(results) -> dict[int, list[int]]:
    by_partition: dict[int, list[int]] = defaultdict(list)
    for partition, offset in results:
        by_partition[partition].append(offset)
    return by_partition


async def read_all(bootstrap: str, topic: str) -> list[bytes]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = consumer.assignment()
        while not partitions:
            await asyncio.sleep(0.05)
            partitions = consumer.assignment()
        end = await consumer.end_offsets(list(partitions))
        values: list[bytes] = []
        while True:
            positions = {tp: await consumer.position(tp) for tp in partitions}
            if all(positions[tp] >= end[tp] for tp in partitions):
                break
            for records in (await consumer.getmany(timeout_ms=200)).values():
                values.extend(r.value for r in records)
        return values
    finally:
        await consumer.stop()


# -- configuration -------------------------------------------------------------------------------
def test_unknown_key_raises_listing_valid_keys():
    with pytest.raises(ValueError, match=r"unknown config key\(s\) 'linger'.*valid keys: .*bootstrap.servers.*broker.linger.ms"):
        BatchingProducer({"bootstrap.servers": "x:1", "linger": 5})


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"broker.linger.ms": "half a second"}, "broker.linger.ms must be a number of milliseconds"),
        ({"broker.batch.max.bytes": "-10x"}, "broker.batch.max.bytes must be an integer in 1..2147483647 (or <= 0: off), got '-10x'"),
        ({"message.max.bytes": 0}, "message.max.bytes must be an integer in 1000..1000000000, got 0"),
        ({"message.max.bytes": 5000, "max.request.size": 5000}, "message.max.bytes and max.request.size"),
        ({"max.request.size": -1}, "max.request.size must be an integer in 1..2147483647"),
        ({"batch.size": 0}, "batch.size must be an integer in 1..2147483647"),
        ({"queue.buffering.max.messages": -1}, "queue.buffering.max.messages must be an integer in 1..2147483647, got -1"),
        ({"acks": 2}, "acks must be one of"),
        ({"enable.idempotence": True, "acks": 1}, "acks must be all when enable.idempotence is true"),
    ],
)
def test_bad_values_raise(config, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        BatchingProducer({"bootstrap.servers": "x:1", **config})


def test_bootstrap_servers_is_required():
    with pytest.raises(ValueError, match=r"bootstrap\.servers is required"):
        BatchingProducer({"broker.linger.ms": 5})


def test_legacy_linger_ms_warns():
    with pytest.warns(DeprecationWarning, match="linger.ms is deprecated"):
        p = BatchingProducer({"bootstrap.servers": "x:1", "linger.ms": 5})
    assert p.collector_config.legacy


# -- delivery ------------------------------------------------------------------------------------
def test_every_message_is_acked_with_its_offset(cluster: MockKafkaCluster, new_topic):
    topic = new_topic(60)

    async def main():
        p = BatchingProducer({"bootstrap.servers": cluster.bootstrap_servers, "broker.linger.ms": 50})
        await p.start()
        futures = [await p.send(topic, f"m{i}".encode(), partition=i % 60) for i in range(3000)]
        await p.flush()
        assert all(f.done() for f in futures)
        results = [f.result() for f in futures]
        stats = p.stats()
        await p.stop()
        return results, stats

    results, stats = run(main())
    by_partition = offsets_by_partition(results)
    assert sorted(by_partition) == list(range(60))
    for offsets in by_partition.values():
        assert offsets == list(range(50))  # per-partition order kept, no gaps, no duplicates
    assert STAT_KEYS <= set(stats)
    assert (stats["produced"], stats["acked"], stats["failed"]) == (3000, 3000, 0)
    assert stats["in_flight"] == 0 and stats["latency_ms_p99"] > 0


def test_keys_pick_stable_partitions_and_keyless_messages_stick(cluster: MockKafkaCluster, new_topic):
    topic = new_topic(12)

    async def main(config):
        async with BatchingProducer({"bootstrap.servers": cluster.bootstrap_servers, **config}) as p:
            keyed = [await p.send(topic, b"v", key=b"user-42") for _ in range(20)]
            keyless = [await p.send(topic, b"v") for _ in range(600)]
            await p.flush()
            with pytest.raises(ValueError, match="partition must be one of"):
                await p.send(topic, b"v", partition=12)
            with pytest.raises(ValueError, match="a message needs a key or a value"):
                await p.send(topic, None)
        return [f.result()[0] for f in keyed], [f.result()[0] for f in keyless]

    # Nothing is sent before flush() and the sticky linger never passes: one partition takes all.
    quiet = {"broker.linger.ms": 600_000, "sticky.partitioning.linger.ms": 600_000}
    keyed, keyless = run(main(quiet))
    assert set(keyed) == {7}  # zlib.crc32(b"user-42") % 12, librdkafka's consistent_random
    assert len(set(keyless)) == 1
    _, spread = run(main({**quiet, "partitioner": "random"}))
    assert set(spread) == set(range(12))


def test_flush_sends_now_not_at_linger(cluster: MockKafkaCluster, new_topic):
    topic = new_topic(30)

    async def main():
        p = BatchingProducer({"bootstrap.servers": cluster.bootstrap_servers, "broker.linger.ms": 600_000})
        await p.start()
        futures = [await p.send(topic, b"x", partition=i % 30) for i in range(300)]
        await asyncio.sleep(0.2)
        assert not any(f.done() for f in futures)  # ten minutes of linger: nothing left yet
        await asyncio.wait_for(p.flush(), timeout=10)
        assert all(f.done() and f.exception() is None for f in futures)
        stats = p.stats()
        await p.stop()
        return stats

    stats = run(main())
    assert stats["triggers_by_reason"]["flush"] >= 3 and stats["triggers_by_reason"]["broker_linger"] == 0
    assert stats["acked"] == stats["produced"] == 300


def test_stop_flushes_and_later_sends_raise(cluster: MockKafkaCluster, new_topic):
    topic = new_topic(9)

    async def main():
        p = BatchingProducer({"bootstrap.servers": cluster.bootstrap_servers, "broker.linger.ms": 600_000})
        with pytest.raises(RuntimeError, match="before start"):
            await p.send(topic, b"x")
        await p.start()
        futures = [await p.send(topic, b"x", partition=i % 9) for i in range(90)]
        await asyncio.wait_for(p.stop(), timeout=10)
        assert all(f.done() and f.exception() is None for f in futures)
        with pytest.raises(ProducerStoppedError, match="stopped"):
            await p.send(topic, b"late")
        await p.stop()  # idempotent
        return p.stats()

    stats = run(main())
    assert stats["acked"] == stats["produced"] == 90 and stats["failed"] == 0


def test_long_linger_many_partitions_few_broker_counted_requests(cluster: MockKafkaCluster, new_topic):
    topic = new_topic(300)

    async def main():
        p = BatchingProducer({"bootstrap.servers": cluster.bootstrap_servers, "broker.linger.ms": 1000})
        await p.start()
        await p.send(topic, b"warm-up", partition=0)  # metadata and connections first
        await p.flush()
        cluster.start_request_tracking()
        futures = [await p.send(topic, b"x" * 100, partition=i % 300) for i in range(6000)]
        await asyncio.gather(*futures)
        stats = p.stats()
        await p.stop()
        return stats

    stats = run(main())
    counted = cluster.produce_requests()
    partitions_with_data = 300
    assert sum(counted.values()) <= 2 * 3, counted  # one window: about one request per broker
    assert sum(counted.values()) * 50 < partitions_with_data
    assert set(counted) == {1, 2, 3}
    assert stats["triggers_by_reason"]["broker_linger"] >= 3
    assert stats["msgs_per_request"] >= 1000


# -- faults --------------------------------------------------------------------------------------
async def _produce_through_outage(cluster: MockKafkaCluster, topic: str, config: dict, *, down_s: float):
    p = BatchingProducer({"bootstrap.servers": cluster.bootstrap_servers, "broker.linger.ms": 20, **config})
    await p.start()
    futures: list[asyncio.Future] = []
    payloads: list[bytes] = []
    partitions: list[int] = []

    async def feed(seconds: float) -> None:
        end = asyncio.get_running_loop().time() + seconds
        while asyncio.get_running_loop().time() < end:
            for _ in range(50):
                payload = f"m{len(payloads)}".encode()
                payloads.append(payload)
                partitions.append(len(payloads) % 12)
                futures.append(await p.send(topic, payload, partition=partitions[-1]))
            await asyncio.sleep(0.01)

    try:
        await feed(0.3)
        cluster.set_down(2)
        await feed(down_s)
        cluster.set_up(2)
        await feed(0.3)
        await asyncio.wait_for(p.flush(), timeout=40)
    finally:
        cluster.set_up(2)
    stats = p.stats()
    on_broker_2 = {q for q in range(12) if p.partition_leader(topic, q) == 2}
    await p.stop()
    return futures, payloads, partitions, on_broker_2, stats


def test_broker_down_then_up_idempotent_every_message_acked_once(cluster: MockKafkaCluster, new_topic):
    topic = new_topic(12)

    async def main():
        futures, payloads, _, on_broker_2, stats = await _produce_through_outage(
            cluster, topic, {"enable.idempotence": True, "retry.backoff.ms": 50}, down_s=1.0
        )
        stored = await read_all(cluster.bootstrap_servers, topic)
        return futures, payloads, on_broker_2, stats, stored

    futures, payloads, on_broker_2, stats, stored = run(main())
    assert on_broker_2 and stats["retries"] > 0  # the outage really hit some requests
    assert all(f.done() for f in futures)
    assert stats["acked"] + stats["failed"] == stats["produced"] == len(payloads)
    assert stats["failed"] == 0 and stats["acked"] == len(payloads)  # idempotent: retried until the broker is back
    assert sorted(stored) == sorted(payloads)  # every message stored exactly once
    for offsets in offsets_by_partition(f.result() for f in futures).values():
        assert len(offsets) == len(set(offsets))


def test_broker_down_beyond_delivery_timeout_fails_with_errors(cluster: MockKafkaCluster, new_topic):
    topic = new_topic(12)

    async def main():
        return await _produce_through_outage(
            cluster, topic, {"delivery.timeout.ms": 300, "retry.backoff.ms": 50}, down_s=1.2
        )

    futures, payloads, partitions, on_broker_2, stats = run(main())
    assert all(f.done() for f in futures)
    failed = [i for i, f in enumerate(futures) if f.exception() is not None]
    acked = [i for i, f in enumerate(futures) if f.exception() is None]
    assert stats["acked"] + stats["failed"] == stats["produced"] == len(payloads)
    assert len(failed) == stats["failed"] > 0 and len(acked) == stats["acked"] > 0
    assert all(isinstance(futures[i].exception(), KafkaError) for i in failed)  # each failure carries its error
    assert sum(stats["errors"].values()) == stats["failed"]
    assert {partitions[i] for i in failed} <= on_broker_2  # only the downed broker's partitions fail
    assert {futures[i].result()[0] for i in acked} == set(range(12))


def test_buffer_limit_applies_backpressure_without_losing_messages(cluster: MockKafkaCluster, new_topic):
    topic = new_topic(6)

    async def main():
        p = BatchingProducer(
            {"bootstrap.servers": cluster.bootstrap_servers, "broker.linger.ms": 60_000, "queue.buffering.max.messages": 50}
        )
        await p.start()
        outstanding_max = 0
        futures = []
        for i in range(400):
            futures.append(await p.send(topic, b"x", partition=i % 6))
            stats = p.stats()
            outstanding_max = max(outstanding_max, stats["produced"] - stats["acked"] - stats["failed"])
        await p.stop()
        return futures, outstanding_max, p.stats()

    futures, outstanding_max, stats = run(main())
    assert outstanding_max <= 50  # never more unresolved messages than the limit
    assert stats["backpressure_waits"] >= 1
    assert stats["acked"] == stats["produced"] == 400 and all(f.exception() is None for f in futures)
    by_partition = offsets_by_partition(f.result() for f in futures)
    assert all(offsets == list(range(len(offsets))) for offsets in by_partition.values())


# -- issue 16: bad values, codecs ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"broker.linger.ms": 10**400}, "broker.linger.ms must be a number of milliseconds in 0..900000"),
        ({"acks": True}, "acks must be one of all, -1, 1, 0; got True"),
        ({"acks": 1.0}, r"acks must be one of all, -1, 1, 0; got 1\.0"),
        ({"acks": False}, "acks must be one of all, -1, 1, 0; got False"),
        ({"compression.type": "brotli"}, "compression.type must be one of none, gzip, snappy, lz4, zstd; got 'brotli'"),
    ],
)
def test_bad_values_raise_value_error_naming_the_key(config, message):
    with pytest.raises(ValueError, match=message):
        BatchingProducer({"bootstrap.servers": "x:1", **config})


@pytest.mark.parametrize("name", ["snappy", "lz4", "zstd"])
def test_missing_codec_fails_at_construction_naming_the_package(monkeypatch, name):
    from aiokafka import codec

    monkeypatch.setattr(codec, f"has_{name}", lambda: False)
    with pytest.raises(ValueError, match=f"compression.type={name} needs the cramjam package: pip install cramjam"):
        BatchingProducer({"bootstrap.servers": "x:1", "compression.type": name})


@pytest.mark.parametrize("name", ["lz4", "zstd"])
def test_compressed_messages_round_trip(cluster: MockKafkaCluster, new_topic, name):
    topic = new_topic(6)

    async def main():
        async with BatchingProducer({"bootstrap.servers": cluster.bootstrap_servers, "compression.type": name}) as p:
            futures = [await p.send(topic, f"m{i}".encode() * 20, partition=i % 6) for i in range(300)]
            await p.flush()
        return futures, await read_all(cluster.bootstrap_servers, topic)

    futures, stored = run(main())
    assert all(f.exception() is None for f in futures)
    assert sorted(stored) == sorted(f"m{i}".encode() * 20 for i in range(300))


# -- issue 16: stop() always resolves every future exactly once ------------------------------------
async def _outage_then_stop(cluster: MockKafkaCluster, topic: str, idempotent: bool, stop):
    p = BatchingProducer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "broker.linger.ms": 5,
            "enable.idempotence": idempotent,
            "retry.backoff.ms": 20,
        }
    )
    await p.start()
    for q in range(3):  # metadata and connections first
        await p.send(topic, b"warm-up", partition=q)
    await p.flush()
    down = p.partition_leader(topic, 0)
    resolutions: list[int] = [0] * 300
    futures = []
    try:
        cluster.set_down(down)
        for i in range(300):
            future = await p.send(topic, f"m{i}".encode(), partition=i % 3)
            future.add_done_callback(lambda _f, i=i: resolutions.__setitem__(i, resolutions[i] + 1))
            futures.append(future)
        await stop(p)
    finally:
        cluster.set_up(down)
    await asyncio.sleep(0.3)  # the broker is back: nothing may resolve a second time
    on_down = [i for i in range(300) if p.partition_leader(topic, i % 3) == down]
    return p, futures, resolutions, on_down


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_cancelled_stop_resolves_every_future_exactly_once(cluster: MockKafkaCluster, new_topic, idempotent):
    topic = new_topic(3)

    async def cancelled_stop(p: BatchingProducer) -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(p.stop(), 0.5)  # cut off while the broker is down

    async def main():
        return await _outage_then_stop(cluster, topic, idempotent, cancelled_stop)

    p, futures, resolutions, on_down = run(main())
    stats = p.stats()
    assert resolutions == [1] * 300  # every future resolved, exactly once
    assert stats["acked"] + stats["failed"] == stats["produced"] == 303
    assert on_down and all(isinstance(futures[i].exception(), ProducerStoppedError) for i in on_down)
    assert stats["failed_at_stop"] == stats["failed"] >= len(on_down)
    with pytest.raises(ProducerStoppedError):
        run(p.send(topic, b"late"))


def test_stop_with_timeout_bounds_an_idempotent_outage(cluster: MockKafkaCluster, new_topic):
    topic = new_topic(3)

    async def bounded_stop(p: BatchingProducer) -> None:
        await p.stop(timeout=0.5)  # idempotence retries forever; the timeout ends it

    async def main():
        return await _outage_then_stop(cluster, topic, True, bounded_stop)

    p, futures, resolutions, on_down = run(main())
    stats = p.stats()
    assert resolutions == [1] * 300
    assert stats["acked"] + stats["failed"] == stats["produced"] == 303
    assert on_down and all(isinstance(futures[i].exception(), KafkaTimeoutError) for i in on_down)
    assert "stop(timeout=0.5) expired" in str(futures[on_down[0]].exception())
    assert stats["errors"].get("KafkaTimeoutError", 0) == stats["failed"]


def test_stop_timeout_must_be_a_non_negative_number():
    async def main():
        p = BatchingProducer({"bootstrap.servers": "x:1"})
        with pytest.raises(ValueError, match="timeout must be a number of seconds >= 0 or None, got -1"):
            await p.stop(timeout=-1)

    run(main())


# -- issue 16: per-broker stats and the debug line -------------------------------------------------
SEND_LINE = re.compile(
    r"sending batch to broker (\d+): (\d+) partitions, (\d+) bytes, oldest ([\d.]+) ms, reason=(\w+)$"
)


def test_per_broker_stats_sum_to_totals_and_match_the_logged_reasons(cluster: MockKafkaCluster, new_topic, caplog):
    topic = new_topic(30)

    async def main():
        p = BatchingProducer(
            {"bootstrap.servers": cluster.bootstrap_servers, "broker.linger.ms": 20, "broker.batch.max.partitions": 8}
        )
        await p.start()
        for round_ in range(6):
            for i in range(300):
                await p.send(topic, b"x" * 50, partition=(i * 7 + round_) % 30)
            await asyncio.sleep(0.05)
            for q in range(3):  # a few partitions only: these go when the 20 ms window expires
                await p.send(topic, b"y" * 50, partition=q)
            await asyncio.sleep(0.05)
        await p.flush()
        stats = p.stats()
        await p.stop()
        return stats

    with caplog.at_level(logging.DEBUG, logger="rebalancer.produce.collector"):
        stats = run(main())
    logged = [SEND_LINE.match(r.getMessage()) for r in caplog.records if r.name == "rebalancer.produce.collector"]
    assert logged and all(logged)
    brokers = stats["brokers"]
    assert set(brokers) == {1, 2, 3}
    per_broker = lambda key: sum(b[key] for b in brokers.values())  # noqa: E731
    assert per_broker("batch_collector_sends") == stats["sends"] == len(logged)
    assert per_broker("batch_collector_partitions_sent") == round(stats["partitions_per_send_avg"] * stats["sends"])
    reasons = stats["triggers_by_reason"]
    assert per_broker("batch_collector_trigger_partition_threshold") == reasons["max_partitions"] > 0
    assert per_broker("batch_collector_trigger_size_threshold") == reasons["max_bytes"] == 0
    assert per_broker("batch_collector_trigger_time_threshold") == reasons["broker_linger"] > 0
    assert per_broker("batch_collector_trigger_flush") == reasons["flush"]
    assert per_broker("batch_collector_inflight_waits") == stats["window_waits"]
    # Each broker's counters match the reasons its sends logged.
    seed_name = {"max_partitions": "batch_collector_trigger_partition_threshold",
                 "max_bytes": "batch_collector_trigger_size_threshold",
                 "broker_linger": "batch_collector_trigger_time_threshold", "flush": "batch_collector_trigger_flush"}  # fmt: skip
    counted = Counter((int(m[1]), seed_name[m[5]]) for m in logged)
    for broker, b in brokers.items():
        for name in seed_name.values():
            assert b[name] == counted[(broker, name)], (broker, name)
        lines = [m for m in logged if int(m[1]) == broker]
        assert b["batch_collector_sends"] == len(lines)
        assert b["batch_collector_partitions_avg"] == pytest.approx(sum(int(m[2]) for m in lines) / len(lines))
        assert all(int(m[2]) >= 8 for m in lines if m[5] == "max_partitions")  # the trigger fired at 8
        assert b["batch_collector_wait_ms_avg"] >= 0 and b["batch_collector_effective_linger_ms"] == 20
    weighted = sum(b["batch_collector_wait_ms_avg"] * b["batch_collector_sends"] for b in brokers.values())
    assert weighted / stats["sends"] == pytest.approx(stats["wait_ms_avg"])


# -- issue 16: aiokafka's error semantics, kept ----------------------------------------------------
NOT_LEADER_OR_FOLLOWER, OUT_OF_ORDER_SEQUENCE_NUMBER = 6, 45


async def _answer_with_errors(cluster: MockKafkaCluster, topic: str, codes: list[int], **config: object):
    """An idempotent producer whose next ProduceRequests get `codes`; 120 messages sent and flushed."""
    from rebalancer.testing.mock_cluster import API_KEYS

    p = BatchingProducer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True, **config})
    await p.start()
    await p.send(topic, b"warm-up", partition=0)
    await p.flush()
    cluster.push_request_errors(API_KEYS["Produce"], codes)
    futures = [await p.send(topic, f"m{i}".encode(), partition=i % 6) for i in range(120)]
    await p.flush()
    cluster.clear_request_errors(API_KEYS["Produce"])
    return p, futures


def test_retriable_errors_retry_and_every_future_resolves_once(cluster: MockKafkaCluster, new_topic):
    topic = new_topic(6)

    async def main():
        p, futures = await _answer_with_errors(
            cluster, topic, [NOT_LEADER_OR_FOLLOWER] * 2, **{"retry.backoff.ms": 10}
        )
        stats = p.stats()
        await p.stop()
        return futures, stats, await read_all(cluster.bootstrap_servers, topic)

    futures, stats, stored = run(main())
    assert stats["retries"] >= 1 and stats["failed"] == 0 and stats["acked"] == 121
    assert all(f.exception() is None for f in futures)
    assert sorted(v for v in stored if v != b"warm-up") == sorted(f"m{i}".encode() for i in range(120))


def test_out_of_order_sequence_is_re_raised_and_ends_an_idempotent_producer(cluster: MockKafkaCluster, new_topic):
    from aiokafka.errors import OutOfOrderSequenceNumber

    topic = new_topic(6)

    async def main():
        p, futures = await _answer_with_errors(
            cluster, topic, [OUT_OF_ORDER_SEQUENCE_NUMBER] * 3, **{"broker.linger.ms": 60_000}
        )
        with pytest.raises(OutOfOrderSequenceNumber):
            await p.send(topic, b"after", partition=0)
        stats = p.stats()
        await p.stop()
        return futures, stats

    futures, stats = run(main())
    assert all(isinstance(f.exception(), OutOfOrderSequenceNumber) for f in futures)
    assert stats["errors"] == {"OutOfOrderSequenceNumber": 120} and stats["acked"] == 1
