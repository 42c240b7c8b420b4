"""Broker-level linger: the batch collector and the batching Kafka producer (issues 4 and 16).

The public names load on first use: `rebalancer produce demo --help` reads the `commands` module's
flags on an install without the 'kafka' extra (the check below is deferred for it, see
`rebalancer._extras.deferred_extras`).
"""

from typing import TYPE_CHECKING

from rebalancer._extras import require_extra
from rebalancer._lazy import lazy_exports

require_extra("rebalancer.produce", "kafka", ("aiokafka",))

if TYPE_CHECKING:
    from aiokafka.structs import TopicPartition

    from rebalancer.produce.collector import BrokerBatchCollector, Send
    from rebalancer.produce.collector_config import CollectorConfig
    from rebalancer.produce.config import ProducerConfig
    from rebalancer.produce.errors import ProducerStoppedError, TransactionAbortedError
    from rebalancer.produce.producer import BatchingProducer

_PUBLIC = {
    "BatchingProducer": "rebalancer.produce.producer",
    "BrokerBatchCollector": "rebalancer.produce.collector",
    "CollectorConfig": "rebalancer.produce.collector_config",
    "ProducerConfig": "rebalancer.produce.config",
    "ProducerStoppedError": "rebalancer.produce.errors",
    "Send": "rebalancer.produce.collector",
    "TopicPartition": "aiokafka.structs",
    "TransactionAbortedError": "rebalancer.produce.errors",
}
__all__ = [
    "BatchingProducer",
    "BrokerBatchCollector",
    "CollectorConfig",
    "ProducerConfig",
    "ProducerStoppedError",
    "Send",
    "TopicPartition",
    "TransactionAbortedError",
]

__getattr__, __dir__ = lazy_exports("rebalancer.produce", _PUBLIC)
