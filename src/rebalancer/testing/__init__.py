"""Test peers users need too: a real Kafka-protocol mock cluster."""

from rebalancer.testing.mock_cluster import MockKafkaCluster

__all__ = ["MockKafkaCluster"]
