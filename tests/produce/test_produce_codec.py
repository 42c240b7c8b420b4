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
