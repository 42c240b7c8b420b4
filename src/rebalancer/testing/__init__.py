"""Test peers users need too: a real Kafka-protocol mock cluster, real Kafka brokers, a real Pulsar
cluster, and a private PostgreSQL server."""

from rebalancer._extras import require_extra

require_extra("rebalancer.testing", "kafka", ("confluent_kafka",))

from rebalancer.testing.kafka_cluster import KafkaCluster
from rebalancer.testing.mock_cluster import MockKafkaCluster
from rebalancer.testing.postgres import LocalPostgres
from rebalancer.testing.pulsar_cluster import PulsarCluster

__all__ = ["KafkaCluster", "LocalPostgres", "MockKafkaCluster", "PulsarCluster"]
