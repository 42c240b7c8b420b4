"""Broker-level linger: the batch collector and the batching Kafka producer (issue 4)."""

from rebalancer.produce.collector import BrokerBatchCollector, Send
from rebalancer.produce.config import CollectorConfig
from rebalancer.produce.producer import BatchingProducer, ProducerStoppedError

__all__ = ["BatchingProducer", "BrokerBatchCollector", "CollectorConfig", "ProducerStoppedError", "Send"]
