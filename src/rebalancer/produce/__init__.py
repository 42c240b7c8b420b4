"""rebalancer.produce."""
