"""Test peers users need too: a real Kafka-protocol mock cluster, real Kafka brokers, and a private
PostgreSQL server."""

from rebalancer._extras import require_extra

require_extra("rebalancer.testing", "kafka", ("confluent_kafka",))

from rebalancer.testing.kafka_cluster import KafkaCluster
from rebalancer.testing.mock_cluster import MockKafkaCluster
from rebalancer.testing.postgres import LocalPostgres

__all__ = ["KafkaCluster", "LocalPostgres", "MockKafkaCluster"]
