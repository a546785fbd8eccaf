"""The commit loop of one partition table's writer: put the next version if absent, make sure
it is not shadowed by a checkpoint, advance the snapshot without reading the table, step over
other writers' file rearrangements, and reload when anything else came first (FORMAT.md §3).

`DeltaPartitionLog` decides what to commit (appends, leadership, schema upgrades, merges) and
`maintenance_commits` commits what jobs plan; both go through one `LogCommitter`, the only
holder of the writer's snapshot.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from storage_layout.errors import StorageUnavailable
from storage_layout.log import housekeeping, log_commit
from storage_layout.log.checkpoint import WrittenCheckpoint
from storage_layout.log.files import WrittenFile
from storage_layout.log.housekeeping import PreparedMerge
from storage_layout.log.leadership import Outcome
from storage_layout.log.pending_merge import PendingMerge
from storage_layout.log.reader import latest_state
from storage_layout.log.snapshot import (
    DataFile,
    LogSnapshot,
    TailKeeper,
    VersionTaken,
    VisibleAfterReload,
    rearranged,
    snapshot_from_state,
)
from storage_layout.store import Store

# A commit steps over at most this many file rearrangements (small-file merges) committed
# between its snapshot and its version; past that it reloads.
REARRANGEMENT_STEPS_MAX = 100


class LogCommitter:
    """Commits to one partition table and the snapshot they advance. One thread commits; any
    thread may read `snapshot`, which is replaced whole."""

    def __init__(
        self,
        table_uri: str,
        log: Store,
        snapshot: LogSnapshot,
        *,
        fenced: bool,
        latest_known_at: float,
        tail_records_max: int,
        pending: PendingMerge,
    ) -> None:
        self.table_uri = table_uri
        self.log = log
        self.snapshot = snapshot
        # False only in the control runs of the fault tests (see DeltaPartitionLog).
        self.fenced = fenced
        # When this writer last knew its snapshot's version to be the latest (monotonic s):
        # a commit made soon after cannot sit below a checkpoint (see check_not_shadowed).
        self._latest_known_at = latest_known_at
        self.reloads = 0  # how many times the snapshot was rebuilt from the table
        self._tail = TailKeeper(tail_records_max)
        # The small-file merge housekeeping prepared: carried by the next append.
        self.pending = pending

    @property
    def next_version(self) -> int:
        return self.snapshot.table_version + 1

    def reload(self) -> LogSnapshot:
        """Catch up with commits made by others: the commits after the snapshot, or (when
        some may have been trimmed since it was known to be the latest) the newest checkpoint
        and the commits after it. The tail is dropped."""
        started = time.monotonic()
        state = latest_state(self.table_uri, self.log, self.snapshot.state, self._latest_known_at)
        self.snapshot = snapshot_from_state(state, self.table_uri, self.fenced)
        self._latest_known_at = started
        self.reloads += 1
        return self.snapshot

    def catch_up(self) -> bool:
        """Follow the commits made since the snapshot (step_over_rearrangements); True if it
        reloaded. Costs one existence check of the next commit when nothing moved, and a read
        of `_last_checkpoint` when the snapshot was last known to be the latest longer ago
        than half the log grace: the next commit may be missing because it was trimmed (a
        follower idle past the history kept would otherwise stay on its version for good)."""
        started = time.monotonic()
        try:
            if not log_commit.commit_exists(self.log, self.next_version):
                if not self._known_latest_recently() and self.may_be_below_checkpoint(
                    self.snapshot.table_version
                ):
                    self.reload()
                    return True
                self._latest_known_at = started  # no newer version then
                return False
        except OSError as error:
            raise StorageUnavailable(f"Cannot read {self.table_uri}: {error}") from error
        return self.step_over_rearrangements()

    def step_over_rearrangements(self) -> bool:
        """Apply the rearrangements committed after the snapshot; reload if any later commit
        is something else. True if it reloaded."""
        for _ in range(REARRANGEMENT_STEPS_MAX):
            version = self.next_version
            winner = self.read(version)
            if winner is None:
                return False
            change = log_commit.as_rearrangement(winner)
            try:
                if change is None:
                    raise VersionTaken(version)
                self.snapshot = rearranged(self.snapshot, version, change)
            except VersionTaken:
                self.reload()
                return True
        self.reload()
        return True

    # ---- one commit ------------------------------------------------------------------------

    def put(self, version: int, payload: bytes) -> bool:
        """Create commit `version` if absent (log_commit.put_if_absent)."""
        try:
            return log_commit.put_if_absent(self.log, version, payload)
        except OSError as error:
            raise StorageUnavailable(f"Commit to {self.table_uri} failed: {error}") from error

    def read(self, version: int) -> list[dict[str, Any]] | None:
        try:
            return log_commit.read_commit(self.log, version)
        except OSError as error:
            raise StorageUnavailable(f"Cannot read {self.table_uri}: {error}") from error

    def commit_next(self, actions: list[dict[str, Any]]) -> Outcome:
        """Commit `actions` (no data file: txns, metadata) on the version after the snapshot
        and advance the snapshot past it, without a reload (a node taking a thousand
        partitions at start does it a thousand times)."""
        version = self.next_version
        if not self.put(version, log_commit.ndjson(actions)):
            return Outcome.LOST
        if self.may_be_below_checkpoint(version):  # paused past the log grace: look
            self.reload()
            return Outcome.RELOADED
        self.snapshot = committed(self.snapshot, version, actions)
        return Outcome.COMMITTED

    def commit_append(
        self,
        written: WrittenFile,
        table: pa.Table,
        transactions: list[tuple[str, int]],
        now_ms: int,
        *,
        checkpoint: WrittenCheckpoint | None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Commit the data file `written` (records `table`) with `transactions`, and with the
        pending small-file merge if its files are all still live, on the version after the
        snapshot; step over other writers' rearrangements; advance the snapshot past it. The
        tombstones up to `checkpoint` (the last one written) leave memory. `metadata`, when
        given, is committed with it (typed columns widening the schema, FORMAT.md §17).

        Raises:
            VersionTaken: another commit changed records, txns or metadata first.
            VisibleAfterReload: made below a checkpoint, and visible: reloaded with it.
        """
        for _ in range(REARRANGEMENT_STEPS_MAX):
            merge = self.usable_merge()
            rewrite = () if merge is None else merge.actions(now_ms)
            actions = log_commit.append_actions(written.add, transactions, now_ms, rewrite)
            if metadata is not None:
                actions.insert(1, {"metaData": metadata})
            version = self.next_version
            started = time.monotonic()
            if self.put(version, log_commit.ndjson(actions)):
                self.check_not_shadowed(version, written.data_file.path)
                self._latest_known_at = started
                self.pending.taken(merge)
                self._advance(written.data_file, table, actions, merge, checkpoint)
                return
            if not self.fenced:
                self._blind_rebase(version)
                continue
            winner = self.read(version)
            rearrangement = None if winner is None else log_commit.as_rearrangement(winner)
            if rearrangement is None:
                raise VersionTaken(version)
            self.snapshot = rearranged(self.snapshot, version, rearrangement)
        raise VersionTaken(self.next_version)

    def _advance(
        self,
        data_file: DataFile,
        table: pa.Table,
        actions: list[dict[str, Any]],
        merge: PreparedMerge | None,
        checkpoint: WrittenCheckpoint | None,
    ) -> None:
        """The snapshot after our own append: one more version, file and tail chunk, and
        the small-file merge it carried."""
        if not self.fenced:
            self.reload()  # control runs: other writers' files may have come in between
            return
        before = self.snapshot
        files = before.files
        if merge is not None:
            kept = [f for f in files if f.path not in merge.removed_paths]
            files = tuple(sorted([*kept, merge.written.data_file], key=lambda f: f.min_offset))
        after = committed(before, before.table_version + 1, actions)
        if checkpoint is not None and after.state is not None:
            after = dataclasses.replace(
                after, state=after.state.checkpointed(checkpoint.version, checkpoint.names)
            )
        self.snapshot = dataclasses.replace(
            after,
            high_watermark=data_file.max_offset + 1,
            files=(*files, data_file),
            tail=self._tail.extended(before.tail, data_file.min_offset, table),
        )

    def tail_renewed_half_since(self, earlier: LogSnapshot) -> bool:
        """Half the in-memory tail or more was committed after `earlier`."""
        now = self.snapshot
        return self._tail.renewed_half(
            now.table_version - earlier.table_version,
            now.high_watermark - earlier.high_watermark,
        )

    def usable_merge(self) -> PreparedMerge | None:
        """The pending merge, if its files are all live (control runs carry none)."""
        return self.pending.usable(self.snapshot) if self.fenced else None

    def commit_pending_merge(self, now_ms: int) -> int:
        """Commit the pending small-file merge on its own (the writer is idle); the number of
        files it replaced, 0 if there was none or another commit came first (then it is
        dropped and planned again by a later pass)."""
        merge = self.usable_merge()
        if merge is None:
            return 0
        self.pending.taken(merge)
        payload = merge.commit_on_its_own(now_ms)
        version = self.next_version
        if not self.put(version, payload):
            self.pending.discard(merge)
            return 0
        if self.may_be_below_checkpoint(version):  # paused past the log grace
            self.reload()
            return len(merge.removed_paths)
        change = log_commit.as_rearrangement(log_commit.parse_commit(payload))
        self.snapshot = rearranged(self.snapshot, version, change)
        return len(merge.removed_paths)

    def commit_after(
        self, version: int, payload: bytes, removed: set[str], app_ids: Sequence[str]
    ) -> int | None:
        """Create the commit at `version` or after, stepping over commits that keep the files
        `removed` and carry none of `app_ids`; the version, or None on a conflict."""
        while not self.put(version, payload):
            winner = self.read(version)
            if winner is None or not log_commit.keeps_files(winner, removed, app_ids):
                return None
            version += 1  # bounded: only commits that exist are stepped over
        return version

    def _blind_rebase(self, version: int) -> None:
        """Control runs only: move past every taken version, whatever they hold, as a writer
        without the offset CAS does (delta-rs rebases an append over any number of others).
        One version a try would give up after REARRANGEMENT_STEPS_MAX and reload, and a
        survivor commits more often than that during a pause: the control then showed no
        damage (CI: six seeds of T2b without a write anomaly)."""
        try:
            while log_commit.commit_exists(self.log, version + 1):
                version += 1
        except OSError as error:
            raise StorageUnavailable(f"Cannot read {self.table_uri}: {error}") from error
        self.snapshot = dataclasses.replace(self.snapshot, table_version=version)

    # ---- shadowing by a checkpoint ------------------------------------------------------------

    def check_not_shadowed(self, version: int, data_path: str) -> None:
        """A writer paused for longer than the log grace can find its next version free
        because housekeeping trimmed it: its commit would sit below the latest checkpoint,
        where no reader looks. So a commit below the checkpoint counts only if the reloaded
        table shows it (a checkpoint can legitimately follow it within microseconds).

        Raises:
            VisibleAfterReload: it is visible; the snapshot has been reloaded.
            VersionTaken: it is not: nothing was appended (the file is an orphan for vacuum).
        """
        if self._known_latest_recently():
            # The version before ours was the latest within the last few seconds, so ours was
            # absent then; to be trimmed it must have existed for LOG_GRACE_MS: it was not.
            # Saves a read of `_last_checkpoint` per commit (a request on an object store).
            return
        if not self.may_be_below_checkpoint(version):
            return
        self.reload()
        if any(f.path == data_path for f in self.snapshot.files):
            raise VisibleAfterReload()
        raise VersionTaken(version)

    def may_be_below_checkpoint(self, version: int) -> bool:
        return log_commit.may_be_below_checkpoint(self.log, version)

    def _known_latest_recently(self) -> bool:
        """Whether the snapshot was known to be the latest within half the log grace (margin
        for the clocks of the nodes that trim the log): no commit after it can be gone yet."""
        return time.monotonic() - self._latest_known_at < housekeeping.LOG_GRACE_MS / 2000


def committed(snapshot: LogSnapshot, version: int, actions: list[dict]) -> LogSnapshot:
    """`snapshot` at `version`, after our own commit (its `actions`) on top of it."""
    state = snapshot.state
    if state is not None:
        state = state.applied(version, actions)
    return dataclasses.replace(snapshot, table_version=version, state=state)
