"""Broker-level linger: the batch collector and the batching Kafka producer (issues 4 and 16)."""

from rebalancer._extras import require_extra

require_extra("rebalancer.produce", "kafka", ("aiokafka",))

from aiokafka.structs import TopicPartition

from rebalancer.produce.collector import BrokerBatchCollector, Send
from rebalancer.produce.collector_config import CollectorConfig
from rebalancer.produce.config import ProducerConfig
from rebalancer.produce.errors import ProducerStoppedError, TransactionAbortedError
from rebalancer.produce.producer import BatchingProducer

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
