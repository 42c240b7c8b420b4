"""`ProduceHandler`: acks resolve in one pass, every partition with an error goes to aiokafka's handler.

Checked on every ProduceResponse layout aiokafka decodes (v0..v8): the ack path reads only the
partition, the error code and the offset, which every version places first.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import MessageSizeTooLargeError, NotLeaderForPartitionError
from aiokafka.protocol import produce as produce_protocol
from aiokafka.structs import TopicPartition

from rebalancer.produce.aiokafka_adapter import Batch, ProduceHandler, new_builder
from rebalancer.produce.stats import DeliveryCounters

VERSIONS = [v for v in range(32) if hasattr(produce_protocol, f"ProduceResponse_v{v}")]


class FakeClient:
    def __init__(self) -> None:
        self.metadata_updates = 0

    def force_metadata_update(self) -> None:
        self.metadata_updates += 1


class FakeSender:
    """What SendProduceReqHandler reads of a sender when it handles a response."""

    _txn_manager = None
    _retry_backoff = 0.1

    def __init__(self) -> None:
        self.client = FakeClient()


def partition_info(version: int, partition: int, error_code: int, offset: int) -> tuple:
    """One partition's entry in a ProduceResponse of `version`, as aiokafka decodes it."""
    extra = {0: (), 1: ()}.get(version, (0,) if version <= 4 else (0, 0) if version <= 7 else (0, 0, [], None))
    return (partition, error_code, offset, *extra)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_handler_acks_in_one_pass_and_leaves_errors_to_aiokafka(version: int):
    async def main():
        loop = asyncio.get_running_loop()
        counters = DeliveryCounters()
        tps = [TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0), TopicPartition("b", 7)]
        plan = {tp: Batch(tp, new_builder(1000, 0, False), 10.0, counters, loop, None, set()) for tp in tps}
        deliveries = {tp: [plan[tp].add(None, b"v", 1.0) for _ in range(2)] for tp in tps}
        response_type = getattr(produce_protocol, f"ProduceResponse_v{version}")
        tail = [0] * (len(response_type.SCHEMA.fields) - 1)
        response = response_type([
            ("a", [partition_info(version, 0, 0, 10), partition_info(version, 1, NotLeaderForPartitionError.errno, -1)]),
            ("b", [partition_info(version, 0, MessageSizeTooLargeError.errno, -1), partition_info(version, 7, 0, 20),
                   partition_info(version, 9, 0, 5)]),  # partition 9 is not in the request: ignored
        ], *tail)  # fmt: skip
        sender = FakeSender()
        handler = ProduceHandler(sender, plan)
        handler.handle_response(response)
        assert [d.result() for d in deliveries[tps[0]]] == [(0, 10), (0, 11)]
        assert [d.result() for d in deliveries[tps[3]]] == [(7, 20), (7, 21)]
        assert not any(d.done() for d in deliveries[tps[1]])  # retriable: aiokafka queues a retry
        assert handler._to_reenqueue == [plan[tps[1]]]
        assert sender.client.metadata_updates == 1  # not leader: aiokafka asks for new metadata
        assert all(isinstance(d.exception(), MessageSizeTooLargeError) for d in deliveries[tps[2]])
        assert counters.acked == 4 and counters.failed == 2

    asyncio.run(main())
