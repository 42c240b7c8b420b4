"""The adapter's one-pass ProduceRequest/ProduceResponse codec against aiokafka's own, every version.

The bytes on the wire and the decoded responses must be exactly aiokafka's: the handler that reads
them (per-partition errors, retry or fail) is aiokafka's.
"""

from __future__ import annotations

import io
import random

import pytest
from aiokafka.protocol import produce as produce_protocol
from aiokafka.protocol.produce import ProduceRequest

from rebalancer.produce.aiokafka_adapter import FAST_PRODUCE_STRUCTS, FastProduceRequest

VERSIONS = [v for v in range(32) if hasattr(produce_protocol, f"ProduceRequest_v{v}")]


def base(version: int) -> type:
    return getattr(produce_protocol, f"ProduceRequest_v{version}")


def test_every_version_aiokafka_negotiates_has_the_fast_codec():
    # v0..v7: the versions ProduceRequest builds; v8's response has nested record errors: aiokafka's codec.
    fast = sorted(cls.API_VERSION for cls in FAST_PRODUCE_STRUCTS)
    assert fast == [v for v in VERSIONS if v <= 7]
    for slow, quick in FAST_PRODUCE_STRUCTS.items():
        assert issubclass(quick, slow) and quick.API_VERSION == slow.API_VERSION
        assert issubclass(quick.RESPONSE_TYPE, slow.RESPONSE_TYPE)


def random_topics(rng: random.Random) -> list[tuple[str, list[tuple[int, bytes | None]]]]:
    topics = []
    for t in range(rng.randint(0, 4)):
        name = rng.choice(["t", "topic-ü", "x" * 300]) + str(t)
        parts = [(rng.randint(0, 2**31 - 1), None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 200)))
                 for _ in range(rng.randint(0, 30))]  # fmt: skip
        topics.append((name, parts))
    return topics


@pytest.mark.parametrize("version", [v for v in VERSIONS if v <= 7])
def test_requests_encode_to_aiokafkas_bytes(version: int):
    rng = random.Random(version)
    slow, quick = base(version), FAST_PRODUCE_STRUCTS[base(version)]
    for _ in range(50):
        txn = rng.choice([None, "txn-1", "é" * 3]) if version >= 3 else None
        args = (rng.choice([-1, 0, 1]), rng.randint(0, 2**31 - 1), random_topics(rng))
        args = ((txn, *args) if version >= 3 else args)
        assert quick(*args).encode() == slow(*args).encode()
    assert quick(*((None,) if version >= 3 else ()), 1, 5, None).encode() == slow(
        *((None,) if version >= 3 else ()), 1, 5, None
    ).encode()


@pytest.mark.parametrize("version", [v for v in VERSIONS if v <= 7])
def test_responses_decode_as_aiokafka_decodes_them(version: int):
    rng = random.Random(100 + version)
    slow = base(version).RESPONSE_TYPE
    quick = FAST_PRODUCE_STRUCTS[base(version)].RESPONSE_TYPE
    width = len(slow.SCHEMA.fields[0].array_of.fields[1].array_of.fields)
    limits = [(-(2**31), 2**31 - 1), (-(2**15), 2**15 - 1)] + [(-(2**63), 2**63 - 1)] * (width - 2)
    for _ in range(50):
        topics = [
            (rng.choice(["t", "ü-topic", None]),
             [tuple(rng.randint(lo, hi) for lo, hi in limits) for _ in range(rng.randint(0, 40))])
            for _ in range(rng.randint(0, 4))
        ]  # fmt: skip
        tail = [rng.randint(0, 1000) for _ in slow.SCHEMA.fields[1:]]
        raw = slow.SCHEMA.encode([topics, *tail])
        theirs, ours = slow.decode(io.BytesIO(raw)), quick.decode(io.BytesIO(raw))
        assert ours == theirs and ours.topics == topics and isinstance(ours, slow)
        assert quick.decode(raw) == theirs
    null_topics = slow.SCHEMA.encode([None, *tail])
    assert quick.decode(io.BytesIO(null_topics)).topics is None
    with pytest.raises(ValueError):
        quick.decode(io.BytesIO(raw[:-1] if len(raw) > 4 else b"\x00\x00\x00\x01"))


def test_the_request_negotiates_as_aiokafkas_and_builds_the_fast_struct():
    request = FastProduceRequest(transactional_id=None, required_acks=-1, timeout=100, topics=[("t", [(0, b"x")])])
    assert isinstance(request, ProduceRequest)
    struct = request.prepare({0: (0, 7)})
    assert type(struct) is FAST_PRODUCE_STRUCTS[base(7)]
    plain = ProduceRequest(transactional_id=None, required_acks=-1, timeout=100, topics=[("t", [(0, b"x")])])
    assert struct.encode() == plain.prepare({0: (0, 7)}).encode()
    assert type(request.prepare({0: (0, 2)})).API_VERSION == 2


class FakeClient:
    def __init__(self) -> None:
        self.metadata_updates = 0

    def force_metadata_update(self) -> None:
        self.metadata_updates += 1


class FakeSender:
    """What SendProduceReqHandler and ProduceHandler read of a sender."""

    def __init__(self) -> None:
        self.client = FakeClient()

    _txn_manager = None
    _retry_backoff = 0.1
    transactional_id = None
    acks = -1
    request_timeout_ms = 1000


@pytest.mark.parametrize("version", [0, 2, 5, 7])
def test_the_handler_acks_in_one_pass_and_leaves_errors_to_aiokafka(version: int):
    import asyncio

    from aiokafka.errors import MessageSizeTooLargeError, NotLeaderForPartitionError
    from aiokafka.structs import TopicPartition

    from rebalancer.produce.aiokafka_adapter import Batch, ProduceHandler, new_builder
    from rebalancer.produce.stats import DeliveryCounters

    async def main():
        loop = asyncio.get_running_loop()
        counters = DeliveryCounters()
        tps = [TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0), TopicPartition("b", 7)]
        plan = {tp: Batch(tp, new_builder(1000, 0, False), 10.0, counters, loop, None, set()) for tp in tps}
        futures = {tp: [plan[tp].add(None, b"v", 1.0) for _ in range(2)] for tp in tps}
        extra = (0,) * {0: 0, 2: 1, 5: 2, 7: 2}[version]  # timestamp, log_start_offset
        response_type = FAST_PRODUCE_STRUCTS[base(version)].RESPONSE_TYPE
        tail = [0] * (len(response_type.SCHEMA.fields) - 1)
        response = response_type([
            ("a", [(0, 0, 10, *extra), (1, NotLeaderForPartitionError.errno, -1, *extra)]),
            ("b", [(0, MessageSizeTooLargeError.errno, -1, *extra), (7, 0, 20, *extra), (9, 0, 5, *extra)]),
        ], *tail)  # fmt: skip
        sender = FakeSender()
        handler = ProduceHandler(sender, plan)
        handler.handle_response(response)
        assert [f.result() for f in futures[tps[0]]] == [(0, 10), (0, 11)]
        assert [f.result() for f in futures[tps[3]]] == [(7, 20), (7, 21)]
        assert not any(f.done() for f in futures[tps[1]])  # retriable: aiokafka queues a retry
        assert handler._to_reenqueue == [plan[tps[1]]]
        assert all(isinstance(f.exception(), MessageSizeTooLargeError) for f in futures[tps[2]])
        assert counters.acked == 4 and counters.failed == 2
        assert sender.client.metadata_updates == 1  # not leader: aiokafka asks for new metadata

    asyncio.run(main())
