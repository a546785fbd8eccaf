"""Spark maintenance jobs over the partition tables (retention, compaction, file optimization).

Planned with pure functions and executed with Spark under the partition's write lease; see
storage_layout/FORMAT.md §7 for who may commit to a partition table.
"""
