"""Delta tables created (commit 0, through the store), and partition tables as delta-rs sees
them: load (with damage explained), checkpoint, vacuum, the light reads that need no file
index."""

from __future__ import annotations

import time

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from storage_layout import paths
from storage_layout.errors import CorruptPartition, PartitionTableMissing, StorageUnavailable
from storage_layout.log import log_commit
from storage_layout.log.delta_types import delta_schema_string
from storage_layout.schema import PARTITION_COLUMN, PARTITION_SCHEMA
from storage_layout.store import Store, delta_storage_options, open_store

# Table properties set at creation. Log retention keeps `_delta_log` small under constant load;
# never set delta.setTransactionRetentionDuration: it would expire the offset CAS (invariant 3).
TABLE_CONFIGURATION = {
    "delta.checkpointInterval": "100",
    "delta.logRetentionDuration": "interval 1 days",
}


def checkpoint_table(table_uri: str) -> None:
    """Write a checkpoint and run Delta's own log cleanup (jobs, for idle partitions)."""
    try:
        table = load_table_explained(table_uri)
        table.create_checkpoint()
        table.cleanup_metadata()
    except (OSError, DeltaError) as error:
        raise StorageUnavailable(f"Cannot checkpoint {table_uri}: {error}") from error


def vacuum_table(table_uri: str, *, retention_hours: int, dry_run: bool) -> list[str]:
    """Delete (or with `dry_run` list) data files the log removed more than
    `retention_hours` ago. Lite mode: files the log never committed are not candidates, so a
    writer's file that is not committed yet is never deleted. The caller enforces its own
    minimum retention (storage_layout/maintenance/plans.py), not delta-rs's 7 days."""
    try:
        return DeltaTable(table_uri, storage_options=delta_storage_options()).vacuum(
            retention_hours=retention_hours,
            dry_run=dry_run,
            enforce_retention_duration=False,
            full=False,
        )
    except (OSError, DeltaError) as error:
        raise StorageUnavailable(f"Cannot vacuum {table_uri}: {error}") from error


def load_table_explained(table_uri: str, **options) -> DeltaTable:
    """`DeltaTable(table_uri)`, with a failure to load it explained.

    deltalake raises OSError for storage I/O failures (retriable) and DeltaError for what it
    cannot make sense of. Only the latter is looked into, on local roots: a present but
    unreadable newest checkpoint (a torn or zeroed file, bit rot) fails every load until an
    operator acts, so it is CorruptPartition with what to do, not a 503 retried forever; a
    `_last_checkpoint` naming a missing checkpoint is dropped and the load retried once.

    Raises:
        TableNotFoundError: no table there.
        CorruptPartition: its newest checkpoint is damaged.
        StorageUnavailable: any other failure.
    """
    try:
        return DeltaTable(table_uri, storage_options=delta_storage_options(), **options)
    except TableNotFoundError:
        raise
    except (OSError, DeltaError) as error:
        failure = error
    if isinstance(failure, DeltaError):
        log = open_store(table_uri).child(log_commit.LOG_DIR)
        try:
            damage = log_commit.damaged_checkpoint(log, str(failure))
            if damage is not None:
                message = _checkpoint_damage_message(table_uri, log, *damage)
                raise CorruptPartition(message) from failure
            if log_commit.drop_dangling_checkpoint_hint(log):
                return load_table_explained(table_uri, **options)
        except OSError as error:
            raise StorageUnavailable(f"Cannot read the log of {table_uri}: {error}") from error
    raise StorageUnavailable(f"Cannot load table {table_uri}: {failure}") from failure


def _checkpoint_damage_message(table_uri: str, log: Store, version: int, damaged) -> str:
    hint = paths.join(log.uri, log_commit.LAST_CHECKPOINT)
    if log_commit.commits_replace_checkpoint(log, version):
        advice = (
            f"Every commit up to it is still in {log.uri}: delete the damaged checkpoint "
            f"file(s) and {hint}, and the table is read from its JSON commits (and any older "
            f"checkpoint); no record is lost."
        )
    else:
        advice = (
            f"Commits up to version {version} were already cleaned up, so the table cannot "
            f"be read without it: restore the checkpoint file(s) from a backup."
        )
    return (
        f"{table_uri}: checkpoint {version} is damaged ({'; '.join(damaged)}); the partition "
        f"is not served rather than served from it. {advice}"
    )


def check_commit_files(table_uri: str) -> None:
    log = open_store(table_uri).child(log_commit.LOG_DIR)
    try:
        damaged = log_commit.unreadable_commits(log)
    except FileNotFoundError:
        return  # no table: loading it says so
    except OSError as error:
        raise StorageUnavailable(f"Cannot read the log of {table_uri}: {error}") from error
    if damaged:
        raise CorruptPartition(
            f"{table_uri}: damaged commit files ({'; '.join(damaged)}); the partition is not "
            f"served rather than served without them. Restore them from a backup."
        )


def load_table(table_uri: str) -> DeltaTable:
    """A DeltaTable for light reads (leader, bounds) without building the file index."""
    try:
        return load_table_explained(table_uri, without_files=True)
    except TableNotFoundError as error:
        raise PartitionTableMissing(f"No Delta table at {table_uri}: {error}") from error


def create_table(table_uri: str) -> None:
    """Create the empty partition table (protocol 1/2, partitioned by `segment`). Idempotent.

    Raises:
        StorageUnavailable: the store could not be written.
    """
    create_delta_table(table_uri, PARTITION_SCHEMA, [PARTITION_COLUMN], TABLE_CONFIGURATION)


def create_delta_table(
    table_uri: str,
    schema: pa.Schema,
    partition_columns: list[str],
    configuration: dict[str, str],
) -> bool:
    """Create an empty table: its commit 0 (protocol 1/2, the metadata), put if absent
    through the root's store, as every other commit (so a file system without hard links
    serves it). Idempotent: True if this call created it, False if a table was there.

    Raises:
        StorageUnavailable: the store could not be read or written.
    """
    log = open_store(table_uri).child(log_commit.LOG_DIR)
    actions = log_commit.create_actions(
        delta_schema_string(schema), partition_columns, configuration, _now_ms()
    )
    try:
        if log_commit.commit_exists(log, 0) or _has_log_entries(log):
            return False  # a table whose commit 0 was trimmed since
        return log_commit.put_if_absent(log, 0, log_commit.ndjson(actions))
    except OSError as error:
        raise StorageUnavailable(f"Cannot create table {table_uri}: {error}") from error


def _has_log_entries(log: Store) -> bool:
    """Whether the log holds any commit or checkpoint (listed only when commit 0 is absent:
    a new table's log is empty)."""
    return any(
        stored.name == log_commit.LAST_CHECKPOINT or log_commit.is_log_entry(stored.name)
        for stored in log.list()
    )


def _now_ms() -> int:
    return int(time.time() * 1000)
