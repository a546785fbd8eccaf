"""Everything under a root's `_meta/`: the small Delta tables (topic catalog, producer ids,
principals, ACLs, consumer offsets), each a `table.MetaTable` committing through the root's
store like a partition table, and the objects that are not tables (the transaction
coordinator's states, the cluster-wide topic defaults)."""
