"""rebalancer.balance."""
