"""rebalancer.testing."""
