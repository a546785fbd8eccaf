"""Keeping a partition table cheap to commit to and to load (FORMAT.md §6b): small files merged,
checkpoints written, old log entries trimmed.

A commit's cost grows with the files in the table, and every commit is a file in `_delta_log`;
on an object store each is also a request. So the writer's background pass writes the merged
file of a run of small files (`dataChange=false`, no record changes; the writer commits it with
its next append: PreparedMerge), checkpoints from memory when one is due (checkpoint_due_after),
and deletes log entries older than the previous checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from storage_layout.errors import StorageError
from storage_layout.log import log_commit
from storage_layout.log.checkpoint import (
    REMOVED_FILE_GRACE_MS,
    Settling,
    WrittenCheckpoint,
    write_checkpoint,
)
from storage_layout.log.files import WrittenFile, as_file_schema, read_whole_file, write_data_file
from storage_layout.log.leadership import Leadership
from storage_layout.log.replay import TableState, UnreadableLog
from storage_layout.log.snapshot import DataFile, LogSnapshot, in_memory
from storage_layout.log.tables import TABLE_CONFIGURATION
from storage_layout.store import Store

CHECKPOINT_INTERVAL = int(TABLE_CONFIGURATION["delta.checkpointInterval"])
# A checkpoint carries a tombstone per small file merged within the history kept (Settling),
# and data-changing removes' for a week: at a high commit rate its cost grows with the
# partition's recent history. The next one is due after CHECKPOINT_INTERVAL versions,
# or one version per this many rows of the last one if that is longer, but never later than
# CHECKPOINT_INTERVAL_MAX versions (a reader replays the commits after the newest checkpoint,
# and the writer keeps the tombstones since it in memory): the checkpoints' cost per commit
# stays ~0.05 ms up to 50,000 tombstones, and grows past that (FORMAT.md §6b).
CHECKPOINT_ROWS_PER_VERSION = 50
CHECKPOINT_INTERVAL_MAX = 1_000
# Log files older than the previous checkpoint are kept this long for readers that pinned a
# version (a Spark batch read plans on one); then they go.
LOG_GRACE_MS = 10_000
# Files below this size are "small"; a run of MERGE_FILES_MIN of them in one segment is
# rewritten as one file. 32 keeps a partition near 32 + (segments) files whatever its age.
SMALL_FILE_BYTES = 16 * 1024 * 1024
MERGE_FILES_MIN = 32
# A merged file is merged again only once the files after it in its run hold this many times
# its records: each record is rewritten log_5(16 MiB / its first merged file) times (about
# twice) instead of log_2 (four or five times at a high rate), for up to four files a tier.
MERGE_TIER_FACTOR = 4
# A merge steps over the appends committed while it wrote its file, at most this many; then
# it gives up (its file is deleted) and the next pass plans again.
MERGE_STEPS_MAX = 1_000


@dataclass(frozen=True, slots=True)
class PreparedMerge:
    """A small-file merge whose file is written and not committed: the writer commits its
    actions with its next append (one commit, no race with the appends for a version)."""

    written: WrittenFile  # the merged file; its add has dataChange=false
    replaced: tuple[DataFile, ...]  # the files it replaces
    removed_paths: frozenset[str] = field(init=False)  # theirs, for membership tests

    def __post_init__(self) -> None:
        object.__setattr__(self, "removed_paths", frozenset(f.path for f in self.replaced))

    def removes_at(self, now_ms: int) -> list[dict]:
        """The replaced files' remove actions, stamped with the commit's time: settling counts
        a replaced file's grace from when the table stopped listing it."""
        return [
            log_commit.remove_action(f.path, f.segment, f.size_bytes, now_ms) for f in self.replaced
        ]

    def actions(self, now_ms: int) -> list[dict]:
        """Its actions, to ride on an append's commit."""
        return [*({"remove": r} for r in self.removes_at(now_ms)), {"add": self.written.add}]

    def commit_on_its_own(self, now_ms: int) -> bytes:
        """A commit of the merge alone (no append to ride on)."""
        return log_commit.rewrite_commit(
            add=self.written.add, removes=self.removes_at(now_ms), timestamp_ms=now_ms
        )


class Housekeeper:
    """The background housekeeping of one partition table. Runs in a thread beside the writer: it
    reads the writer's snapshot and never replaces it (the writer sees a merge as a
    rearrangement it steps over). Not thread-safe itself: one pass at a time."""

    def __init__(self, table_uri: str, store: Store, log: Store, *, settles: bool = True) -> None:
        self._table_uri = table_uri
        self._store = store
        self._log = log
        self._settles = settles  # deletes rearranged files after the history kept (Settling)
        self._checkpointed_version = 0
        self._checkpoints: list[tuple[int, int]] = []  # (version, written ms) written here
        self._trimmed_below = 0  # log entries below this version are gone
        # The last checkpoint written here: the writer drops the tombstones it holds
        # (TableState.checkpointed), and its rows say when the next is due. Replaced whole, so
        # another thread may read it.
        self.written: WrittenCheckpoint | None = None

    def checkpoint_if_due(self, snapshot: LogSnapshot, history_ms: int = 0) -> None:
        """Checkpoint `snapshot` and trim the log when a checkpoint is due (checkpoint_due_after
        versions since the last one), keeping `history_ms` of versions for time travel; a
        failure is retried on the next pass."""
        if snapshot.state is not None:
            self.checkpoint_state_if_due(snapshot.state, history_ms)

    def checkpoint_state_if_due(self, state: TableState, history_ms: int = 0) -> None:
        """checkpoint_if_due for a table's state (the `_meta` tables keep no snapshot)."""
        last_rows = 0 if self.written is None else self.written.rows
        if state.version - self._checkpointed_version < checkpoint_due_after(last_rows):
            return
        try:
            self._checkpoint_and_trim(state, history_ms)
        except (OSError, StorageError, UnreadableLog):
            pass

    def prepare_merge(self, snapshot: LogSnapshot) -> PreparedMerge | None:
        """Write the merged file of the first run of small files, for the writer to commit
        with its next append (DeltaPartitionLog.housekeeping); None if no run is long enough.
        The inputs are read from the in-memory tail where it still holds them."""
        run = small_file_run(snapshot.files)
        if not run:
            return None
        table = pa.concat_tables(self._run_tables(snapshot, run))
        oldest_ms = min(f.modification_time_ms for f in run)
        merged = write_data_file(self._store, table, run[0].segment, oldest_ms, data_change=False)
        return PreparedMerge(merged, tuple(run))

    def merge_small_files(
        self, snapshot: LogSnapshot, held: Leadership | None, head: Head = None
    ) -> int:
        """Rewrite the first run of small files as one file, committed after `snapshot`'s
        version, stepping over appends; gives up (0) if a commit removed one of its files or
        changed the leader (a deposed leader's merge must not land).

        `head()` is the writer's newest snapshot when every commit after `snapshot` up to it
        is known to keep files and leader (the writer's own appends), else None: the merge
        then goes straight past them instead of reading each one (two requests a step on an
        object store, while the writer keeps appending)."""
        prepared = self.prepare_merge(snapshot)
        if prepared is None:
            return 0
        merged, removed = prepared.written, set(prepared.removed_paths)
        payload = prepared.commit_on_its_own(int(time.time() * 1000))
        version = snapshot.table_version + 1
        for _ in range(MERGE_STEPS_MAX):
            version = _past_the_head(version, removed, head)
            if log_commit.put_if_absent(self._log, version, payload):
                return len(removed)
            winner = log_commit.read_commit(self._log, version)
            leader = None if held is None else held.version
            if winner is None or not log_commit.leaves_files(winner, removed, leader):
                break
            version += 1
        self._store.delete(merged.data_file.path)
        return 0

    def _run_tables(self, snapshot: LogSnapshot, run: list[DataFile]) -> list[pa.Table]:
        """The files' records, from the in-memory tail where it still holds a file's commit
        (the small files a merge takes are mostly recent ones), else from the file."""
        chunks = snapshot.tail_records()
        file_schema = snapshot.file_schema
        tables = []
        for data_file in run:
            chunk = in_memory(chunks, data_file)
            if chunk is None:
                tables.append(read_whole_file(self._store, data_file, file_schema))
            else:
                tables.append(as_file_schema(chunk, file_schema))
        return tables

    def _checkpoint_and_trim(self, state: TableState, history_ms: int) -> None:
        """Checkpoint the writer's state from memory (no read of the log: on an object
        store, delta-rs's checkpoint read every commit since the previous one four times),
        deleting the files rearrangements replaced longer ago than the history kept (and
        dropping their tombstones: Settling), then trim the log below the previous checkpoint."""
        version = state.version
        if self.written is not None:  # the writer may not have rebased on it yet
            state = state.checkpointed(self.written.version, self.written.names)
        # Rearranged files are kept for the history kept for time travel, then deleted.
        settling = None
        if self._settles:
            settling = Settling(max(REMOVED_FILE_GRACE_MS, history_ms), self._store.delete_many)
        self.written = write_checkpoint(self._log, state, settling=settling)
        self._checkpoints.append((version, int(time.time() * 1000)))
        previous, self._checkpointed_version = self._checkpointed_version, version
        if previous > 0:
            self._delete_log_entries_before(previous, history_ms)

    def _delete_log_entries_before(self, keep_from_version: int, history_ms: int = 0) -> None:
        """Delta's own log cleanup, bounded by count as well as time: commits and checkpoints
        below the previous checkpoint and below the newest checkpoint older than the history
        kept (max(LOG_GRACE_MS, history_ms)): every version younger than that can still be
        read (time travel) from that checkpoint and the commits after it. Also leftover
        temporaries."""
        cutoff_ms = int(time.time() * 1000) - max(LOG_GRACE_MS, history_ms)
        # Temporaries: commits that crashed before they were linked (local stores only).
        doomed = [t.name for t in self._log.list_temporaries() if t.modified_ms < cutoff_ms]
        old = [version for version, written_ms in self._checkpoints if written_ms < cutoff_ms]
        floor = min(keep_from_version, max(old, default=0))
        self._checkpoints = [c for c in self._checkpoints if c[0] >= floor]
        if floor > self._trimmed_below:
            # Listed from the oldest entry and only up to the floor: with an hour of history
            # kept, the directory can hold hundreds of thousands of commits.
            below = self._log.list_below(log_commit.commit_name(floor))
            doomed += [stored.name for stored in below if log_commit.is_log_entry(stored.name)]
            self._trimmed_below = floor
        self._log.delete_many(doomed)


Head = Callable[[], LogSnapshot | None] | None


def checkpoint_due_after(last_rows: int) -> int:
    """Versions after a checkpoint of `last_rows` rows (actions) until the next is due."""
    by_rows = last_rows // CHECKPOINT_ROWS_PER_VERSION
    return min(max(CHECKPOINT_INTERVAL, by_rows), CHECKPOINT_INTERVAL_MAX)


def _past_the_head(version: int, removed: set[str], head: Head) -> int:
    """`version`, or the version after the writer's head when that keeps all of `removed`."""
    latest = None if head is None else head()
    if latest is None or latest.table_version < version:
        return version
    live = {f.path for f in latest.files}
    return latest.table_version + 1 if removed <= live else version


def small_file_run(files: tuple[DataFile, ...]) -> list[DataFile]:
    """The first run of at least MERGE_FILES_MIN consecutive small files of one segment,
    size-tiered: a file at the front is left out while the rest of the run holds fewer than
    MERGE_TIER_FACTOR times its records, so a merged file is rewritten again only once that
    many records arrived after it (each record is rewritten O(log n) times, not once per
    pass). Records, not bytes: a one-record Parquet file is mostly footer."""
    for run in _small_file_runs(files):
        while len(run) >= MERGE_FILES_MIN and run[0].num_records * MERGE_TIER_FACTOR > sum(
            f.num_records for f in run[1:]
        ):
            run = run[1:]
        if len(run) >= MERGE_FILES_MIN:
            return run
    return []


def _small_file_runs(files: tuple[DataFile, ...]) -> list[list[DataFile]]:
    """Maximal runs of consecutive small files within one segment, in offset order."""
    runs: list[list[DataFile]] = []
    for data_file in files:
        if data_file.size_bytes >= SMALL_FILE_BYTES:
            runs.append([])
        elif runs and runs[-1] and runs[-1][-1].segment == data_file.segment:
            runs[-1].append(data_file)
        else:
            runs.append([data_file])
    return [run for run in runs if run]
