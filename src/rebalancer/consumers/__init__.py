"""rebalancer.consumers."""
