"""Consumer groups: membership, rebalances, partition assignment and committed offsets."""
