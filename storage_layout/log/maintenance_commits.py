"""Commits to a partition table other than appends and leadership: retention's and key
compaction's file replacements, file optimization, DeleteRecords' log-start moves (FORMAT.md
§6, §6b) and the schema upgrade that adds the transaction columns (§14).

They commit beside the appends of the partition's writer: a maintenance commit steps over
commits that leave its files in place (maintenance never touches the active segment, where
appends go) and is planned again when one does not.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import pyarrow as pa

from storage_layout.errors import AppendConflict, OffsetOutOfRange, StorageUnavailable
from storage_layout.log import log_commit
from storage_layout.log.committer import LogCommitter
from storage_layout.log.files import WrittenFile, delete_uncommitted, write_data_file
from storage_layout.log.leadership import Outcome
from storage_layout.log.snapshot import DataFile, after_maintenance
from storage_layout.records import AppTransaction
from storage_layout.schema import LOG_START_APP_ID
from storage_layout.store import Store

LOG_START_ATTEMPTS_MAX = 5  # DeleteRecords commits racing retention's log-start commits
SCHEMA_UPGRADE_ATTEMPTS_MAX = 5


def advance_log_start(committer: LogCommitter, store: Store, offset: int) -> int:
    """Kafka's DeleteRecords: move the log start to `offset` (at most the high watermark)
    with a commit of the `log_start` txn alone; records below it are no longer read, and
    retention removes the segments wholly below it. A start already past it stays.

    Returns:
        The log start afterwards.

    Raises:
        OffsetOutOfRange: `offset` is above the high watermark.
        AppendConflict: other `log_start` commits kept winning (retry later).
    """
    for _ in range(LOG_START_ATTEMPTS_MAX):
        snapshot = committer.snapshot
        start_offset, high_watermark = snapshot.log_start_offset, snapshot.high_watermark
        if offset > high_watermark:
            raise OffsetOutOfRange(offset, start_offset, high_watermark)
        if offset <= start_offset:
            return start_offset
        start = AppTransaction(LOG_START_APP_ID, offset)
        if commit_maintenance(
            committer,
            store,
            removes=(),
            operation="DELETE RECORDS",
            data_change=False,
            transactions=[start],
        ):
            return offset
        committer.reload()
    raise AppendConflict(f"The log start of {committer.table_uri} kept moving; retry.")


def commit_maintenance(
    committer: LogCommitter,
    store: Store,
    *,
    removes: Sequence[DataFile],
    replacements: Sequence[tuple[int, pa.Table]] = (),
    operation: str,
    data_change: bool,
    transactions: Sequence[AppTransaction] = (),
) -> bool:
    """Replace the files `removes` by `replacements` ((segment, records with every file
    column), one new file each) in one commit after the committer's snapshot.

    Appends go on meanwhile: the commit steps over commits that leave `removes` in place.
    `data_change` says whether records go (retention, key compaction) or only move (file
    merges). The snapshot is reloaded afterwards.

    Returns:
        False, with nothing committed, when a commit in between removed one of the files or
        carried one of `transactions`' app ids (another job did the work first): plan again.
    """
    now_ms = int(time.time() * 1000)
    written = [
        write_data_file(store, table, segment, now_ms, data_change=data_change)
        for segment, table in replacements
        if table.num_rows  # a segment whose records all go leaves no file
    ]
    before = committer.snapshot
    payload = _payload(removes, written, operation, data_change, transactions, now_ms)
    removed = {f.path for f in removes}
    app_ids = tuple(t.app_id for t in transactions)
    version = committer.commit_after(before.table_version + 1, payload, removed, app_ids)
    done = version is not None and _visible(committer, version, removes, written)
    if not done:
        delete_uncommitted(store, written)
    if done and version == before.table_version + 1:
        # Nothing came in between: the new snapshot is known without reading the table
        # (a reload costs as much as the whole job on a partition with a long history).
        added = [item.data_file for item in written]
        actions = log_commit.parse_commit(payload)
        committer.snapshot = after_maintenance(before, removes, added, transactions, actions)
    elif committer.snapshot is before:
        committer.reload()
    return done


def _visible(committer: LogCommitter, version: int, removes, written) -> bool:
    """As for appends (LogCommitter.check_not_shadowed): a commit created below the latest
    checkpoint, by a job paused past the log grace, counts only if the reloaded table
    shows it."""
    if not committer.may_be_below_checkpoint(version):
        return True
    live = {f.path for f in committer.reload().files}
    return all(f.path not in live for f in removes) and all(
        item.data_file.path in live for item in written
    )


def _payload(
    removes: Sequence[DataFile],
    written: Sequence[WrittenFile],
    operation: str,
    data_change: bool,
    transactions: Sequence[AppTransaction],
    now_ms: int,
) -> bytes:
    return log_commit.maintenance_commit(
        adds=[item.add for item in written],
        removes=[
            log_commit.remove_action(
                f.path, f.segment, f.size_bytes, now_ms, data_change=data_change
            )
            for f in removes
        ],
        timestamp_ms=now_ms,
        operation=operation,
        parameters={"files": str(len(removes))},
        transactions=[(t.app_id, t.version) for t in transactions],
    )


def add_added_columns(committer: LogCommitter) -> bool:
    """Add the columns added after the first tables (FORMAT.md §14's transaction columns,
    §18's `compression`) to the Delta schema of a table created before them, in a commit of
    its own (True), before the first row that needs one is written: files with columns the
    schema lacks would lose them in Spark's maintenance rewrites, and plain Delta readers
    would not see them. False when the schema has them.

    Raises:
        AppendConflict: other commits kept coming first (retry).
        StorageUnavailable: the storage could not be written or read.
    """
    for attempt in range(SCHEMA_UPGRADE_ATTEMPTS_MAX):
        if attempt or committer.snapshot.state is None:
            committer.reload()
        state = committer.snapshot.state
        if state is None:
            raise StorageUnavailable(f"{committer.table_uri}: the table's metadata is not loaded.")
        upgraded = log_commit.with_added_fields(dict(state.metadata))
        if upgraded is None:
            return False
        actions = log_commit.metadata_actions(upgraded, int(time.time() * 1000))
        if committer.commit_next(actions) is Outcome.COMMITTED:
            return True
        # Lost, or maybe shadowed by a checkpoint: the next attempt reloads, and finds the
        # columns or adds them.
    raise AppendConflict(f"{committer.table_uri}: other commits kept coming before its upgrade.")
