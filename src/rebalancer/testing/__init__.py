"""Test peers users need too: a real Kafka-protocol mock cluster, and real Kafka brokers."""

from rebalancer._extras import require_extra

require_extra("rebalancer.testing", "kafka", ("confluent_kafka",))

from rebalancer.testing.kafka_cluster import KafkaCluster
from rebalancer.testing.mock_cluster import MockKafkaCluster

__all__ = ["KafkaCluster", "MockKafkaCluster"]
