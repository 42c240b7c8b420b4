"""rebalancer.shedding."""
