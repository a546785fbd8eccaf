"""Consumer groups: membership, rebalances, partition assignment, committed offsets and dead
letters. Protocol-neutral, as the rest of the core."""
