"""One topic partition as one Delta table, split by concern:

- `partition_log`: DeltaPartitionLog, the facade: what to commit (appends, markers, leadership);
- `committer`: the commit loop (put if absent, shadow check, advance, step over, reload);
- `leadership`: the leader txn and its compare-and-set (also the offsets table's coordinators);
- `staging`: an append's offsets, segment and data file, written before its commit;
- `maintenance_commits`: jobs' file replacements, DeleteRecords, the schema upgrade;
- `pending_merge`: the small-file merge written by housekeeping, committed by the writer;
- `reads`: records by offset and offsets by timestamp from a snapshot;
- `producer_scan`: idempotent producers' state rebuilt from the data files;
- `housekeeping`: small-file merges, checkpoints, log trimming;
- `snapshot`: the file index and how commits change it;
- `files`, `arrow_records`: data files and the Arrow records in them;
- `replay`, `reader`: a table's state read from its log (checkpoint + commits), kept up to date;
- `checkpoint`: checkpoints written from that state, without reading the log;
- `tables`: what delta-rs does for us (create, load, checkpoint, vacuum).

Every commit goes through `storage_layout.log.log_commit` and the root's `Store` (put-if-absent).
"""

from storage_layout.log.housekeeping import (
    CHECKPOINT_INTERVAL,
    LOG_GRACE_MS,
    MERGE_FILES_MIN,
    SMALL_FILE_BYTES,
)
from storage_layout.log.leadership import Leadership
from storage_layout.log.partition_log import DeltaPartitionLog
from storage_layout.log.reader import TableReader
from storage_layout.log.snapshot import DataFile, LogSnapshot, TailChunk
from storage_layout.log.tables import (
    TABLE_CONFIGURATION,
    checkpoint_table,
    load_table,
    vacuum_table,
)

__all__ = [
    "CHECKPOINT_INTERVAL",
    "MERGE_FILES_MIN",
    "LOG_GRACE_MS",
    "SMALL_FILE_BYTES",
    "TABLE_CONFIGURATION",
    "DataFile",
    "DeltaPartitionLog",
    "Leadership",
    "LogSnapshot",
    "TailChunk",
    "checkpoint_table",
    "TableReader",
    "load_table",
    "vacuum_table",
]
