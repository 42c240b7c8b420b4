"""rebalancer.queue."""
