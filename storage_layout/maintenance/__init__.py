"""Maintenance belongs to storage, as Kafka keeps its log cleaner beside the log: retention,
key compaction, file optimization and vacuum, planned from a partition's snapshot (plans.py,
pure) and executed with pyarrow and delta-rs (execute.py), by name (jobs.py). No Spark here:
jobs/ runs them as Spark tasks or in-process, and a node schedules them (api/core)."""
