"""DeltaPartitionLog: one topic partition as one Delta table.

Offsets are assigned by the writer from its loaded snapshot, and every append commits a Delta
`txn` action `Transaction("log", last_offset)` with the next log version created put-if-absent
on top of that same snapshot (log_commit.py), so two writers can never commit the same offsets
(FORMAT.md §3). The high watermark is that txn version + 1.

Concurrency contract: one thread at a time calls `append` (the partition's writer), and one
may run `housekeeping` beside it; any number of threads may call `read`, `bounds` and
`snapshot`: they read an immutable `LogSnapshot` that `append` and `reload` replace atomically.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake.exceptions import DeltaError

from storage_layout.errors import (
    AppendConflict,
    LeadershipConflict,
    OffsetOutOfRange,
    StorageError,
    StorageUnavailable,
)
from storage_layout.log import housekeeping, log_commit, producer_scan, reads, replay
from storage_layout.log.arrow_records import ProducerColumns, marker_table, records_to_arrow
from storage_layout.log.files import (
    APPEND_CODEC,
    WrittenFile,
    delete_uncommitted,
    read_whole_file,
    write_data_file,
)
from storage_layout.log.housekeeping import Housekeeper, PreparedMerge
from storage_layout.log.reader import TableReader, latest_state
from storage_layout.log.snapshot import (
    DataFile,
    Leadership,
    LogSnapshot,
    TailChunk,
    VersionTaken,
    VisibleAfterReload,
    after_maintenance,
    rearranged,
    snapshot_from_state,
)
from storage_layout.log.tables import create_table
from storage_layout.log.transaction_index import TransactionIndex
from storage_layout.producer_state import ProducerStates
from storage_layout.records import (
    AppendResult,
    AppTransaction,
    FetchResult,
    Isolation,
    PartitionBounds,
    Records,
)
from storage_layout.schema import (
    FILE_SCHEMA,
    LEADER_APP_ID,
    LOG_APP_ID,
    LOG_START_APP_ID,
    NODE_IDS,
)
from storage_layout.store import open_store
from storage_layout.topic_config import TopicConfig

# A commit that lost its version to another writer's commit is planned again on a fresh
# snapshot (nothing of it is visible), this many times at most.
APPEND_ATTEMPTS_MAX = 3
APPEND_ONCE_ATTEMPTS_MAX = 20
LEADERSHIP_ATTEMPTS_MAX = 5
LOG_START_ATTEMPTS_MAX = 5  # DeleteRecords commits racing retention's log-start commits
# A commit steps over at most this many file rearrangements (small-file merges) committed
# between its snapshot and its version; past that it reloads.
REARRANGEMENT_STEPS_MAX = 100
RESERVED_APP_IDS = (LOG_APP_ID, LEADER_APP_ID, LOG_START_APP_ID)
TAIL_COMMITS_MAX = 256


@dataclass(frozen=True, slots=True)
class StagedAppend:
    """An append whose data file is written and not committed yet (`stage_append`)."""

    written: WrittenFile
    table: pa.Table  # its records, every file column: the tail chunk once committed
    base_offset: int
    last_offset: int
    now_ms: int


class DeltaPartitionLog:
    """The partition log of one topic partition, stored as a Delta table at `table_uri`."""

    def __init__(
        self,
        table_uri: str,
        state: replay.TableState,
        *,
        tail_records_max: int = 20_000,
        fenced: bool = True,
        loaded_at: float | None = None,
    ) -> None:
        self.table_uri = table_uri
        # False only in the control runs of the fault tests: appends carry no txn and take
        # the next free version whatever it holds, as a writer without the fence would.
        self._fenced = fenced
        self._store = open_store(table_uri)
        self._log = self._store.child(log_commit.LOG_DIR)
        self._tail_records_max = tail_records_max
        self._tail_rows: tuple[tuple[TailChunk, ...], int] = ((), 0)  # (a tail, its rows)
        # Every commit this writer makes or follows advances the snapshot and its TableState
        # (the Delta actions a checkpoint holds): the table is read again only by `reload`.
        self._snapshot = snapshot_from_state(state, table_uri, fenced)
        self._held: Leadership | None = None  # leadership this writer asserts in every append
        self._housekeeper = Housekeeper(table_uri, self._store, self._log)
        # A small-file merge housekeeping wrote, for the writer to commit with its next
        # append (or alone when idle: commit_pending_merge). Set by the housekeeping thread,
        # taken by the writer's.
        self._merge: PreparedMerge | None = None
        # When this writer last knew its snapshot's version to be the latest (monotonic s):
        # a commit made soon after cannot sit below a checkpoint (see _check_not_shadowed).
        self._latest_known_at = time.monotonic() if loaded_at is None else loaded_at
        self._reloads = 0  # how many times the snapshot was rebuilt from the table
        # Open and aborted transactions, extended to each new snapshot when a reader asks.
        self._transactions = TransactionIndex()
        # From the schema loaded (tables made since FORMAT.md §14 have them): appends of
        # idempotent producers then never look at their producer tuples for it.
        self._has_transaction_columns = log_commit.has_transaction_fields(state.metadata)

    # ---- lifecycle -------------------------------------------------------------------------

    @classmethod
    def create(cls, table_uri: str) -> None:
        """Create the empty table (protocol 1/2, partitioned by `segment`). Idempotent."""
        create_table(table_uri)

    @classmethod
    def open(
        cls,
        table_uri: str,
        *,
        tail_records_max: int = 20_000,
        fenced: bool = True,
        loaded: TableReader | None = None,
    ) -> DeltaPartitionLog:
        """Read the table (or take `loaded`, a reader of it the caller just brought up to
        date), check its protocol against the allow-list, build the file index.

        Raises:
            CorruptPartition: no table there, a damaged commit file or checkpoint.
            StorageUnavailable: the table could not be read (retriable).
        """
        reader = loaded if loaded is not None else TableReader.read(table_uri)
        return cls(
            table_uri,
            reader.state,
            tail_records_max=tail_records_max,
            fenced=fenced,
            loaded_at=reader.latest_known_at,
        )

    def reload(self) -> LogSnapshot:
        """Catch up with commits made by others (other nodes, maintenance jobs): the commits
        after the snapshot, or (when some may have been trimmed since it was known to be the
        latest) the newest checkpoint and the commits after it. The tail is dropped."""
        started = time.monotonic()
        state = latest_state(self.table_uri, self._log, self._snapshot.state, self._latest_known_at)
        self._snapshot = snapshot_from_state(state, self.table_uri, self._fenced)
        self._latest_known_at = started
        self._reloads += 1
        return self._snapshot

    def catch_up(self) -> bool:
        """Follow commits made since the loaded snapshot: file rearrangements (this node's
        small-file merges) are applied to it, anything else (a Spark task that appended
        directly, a retention or compaction job) reloads it. True if records changed (a
        reload). Costs one existence check of the next commit when nothing moved."""
        try:
            if not log_commit.commit_exists(self._log, self._snapshot.table_version + 1):
                return False
        except OSError as error:
            raise StorageUnavailable(f"Cannot read {self.table_uri}: {error}") from error
        return self._step_over_rearrangements()

    # ---- leadership --------------------------------------------------------------------------

    def leader(self) -> Leadership | None:
        """The leader named by the loaded snapshot (call `reload` first for the latest).
        Reads no storage, so housekeeping may ask from its thread."""
        return Leadership.from_version(self._snapshot.transactions.get(LEADER_APP_ID))

    @property
    def held_leadership(self) -> Leadership | None:
        return self._held

    def commit_leadership(
        self, node_id: int, *, expected: Leadership | None, hold: bool
    ) -> Leadership:
        """Name `node_id` leader with the next epoch, if the leader is still `expected`.

        A txn-only commit, created put-if-absent on the version after the latest: of two
        nodes taking over at once exactly one wins. Every append of the leader carries its
        `leader` txn, so a deposed leader's next append is rejected, even on an empty table.
        With `hold`, this writer asserts the new leadership in its appends (it named itself);
        without, it hands the partition over and stops asserting any.

        Raises:
            LeadershipConflict: the leader is no longer `expected`, or another change won.
        """
        if not 0 <= node_id < NODE_IDS:
            raise ValueError(f"node ids are 0..{NODE_IDS - 1}, got {node_id}")
        for attempt in range(LEADERSHIP_ATTEMPTS_MAX):
            if attempt:
                self.reload()
            else:
                self.catch_up()  # one existence check when nothing moved since the snapshot
            current = self.leader()
            if current != expected:
                raise LeadershipConflict(
                    f"{self.table_uri}: leader is {current}, not {expected}; not taking over."
                )
            new = Leadership(0 if current is None else current.epoch + 1, node_id)
            if self._commit_leader(new):
                self._held = new if hold else None
                return new
        raise LeadershipConflict(f"{self.table_uri}: other commits kept coming first.")

    def _commit_leader(self, new: Leadership) -> bool:
        """Create the next version holding only the `leader` txn; advance the snapshot past it
        (no reload: a node taking a thousand partitions at start does it a thousand times)."""
        version = self._snapshot.table_version + 1
        actions = log_commit.transactions_actions(
            [(LEADER_APP_ID, new.version)], int(time.time() * 1000)
        )
        payload = log_commit.ndjson(actions)
        if not self._put_commit(version, payload):
            return False
        if self._may_be_below_checkpoint(version):  # paused past the log grace: see appends
            self.reload()
            if self.leader() != new:
                raise LeadershipConflict(f"{self.table_uri}: the leader commit was shadowed.")
            return True
        self._snapshot = _committed(self._snapshot, version, actions)
        return True

    # ---- reads -----------------------------------------------------------------------------

    @property
    def snapshot(self) -> LogSnapshot:
        return self._snapshot

    def bounds(self) -> PartitionBounds:
        snapshot = self._snapshot
        return PartitionBounds(snapshot.log_start_offset, snapshot.high_watermark)

    def stable_bounds(self) -> PartitionBounds:
        """bounds() with the last stable offset (may read files newer than the index)."""
        snapshot = self._snapshot
        stable = self.last_stable_offset(snapshot)
        return PartitionBounds(snapshot.log_start_offset, snapshot.high_watermark, stable)

    def size_bytes(self) -> int:
        """The Parquet bytes of the partition's live data files (no I/O)."""
        return sum(f.size_bytes for f in self._snapshot.files)

    def last_stable_offset(self, snapshot: LogSnapshot | None = None) -> int:
        """Where read_committed readers of `snapshot` (default: the loaded one) end."""
        snapshot = self._snapshot if snapshot is None else snapshot
        index = self.transaction_index(snapshot)
        return index.last_stable_offset(snapshot.high_watermark, snapshot.log_start_offset)

    def read(
        self,
        *,
        from_offset: int,
        records_max: int,
        bytes_max: int,
        isolation: Isolation = Isolation.PLAIN,
    ) -> FetchResult:
        """Records from `from_offset` on (reads.read_records on the loaded snapshot)."""
        snapshot = self._snapshot
        index = self.transaction_index(snapshot) if isolation.needs_index else None
        return reads.read_records(
            self._store,
            snapshot,
            from_offset=from_offset,
            records_max=records_max,
            bytes_max=bytes_max,
            isolation=isolation,
            transactions=index,
        )

    def transaction_index(self, snapshot: LogSnapshot | None = None) -> TransactionIndex:
        """The open and aborted transactions of `snapshot` (default: the loaded one), built
        on from the last index with the rows of newer files only (FORMAT.md §14)."""
        snapshot = self._snapshot if snapshot is None else snapshot
        index = self._transactions
        if index.indexed_to >= snapshot.high_watermark:
            return index
        rows = reads.transactional_rows_from(self._store, snapshot, index.indexed_to)
        index = index.advanced(rows, snapshot.high_watermark)
        self._transactions = index
        return index

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """Kafka's ListOffsets by timestamp on the loaded snapshot (reads.offset_for_timestamp)."""
        return reads.offset_for_timestamp(self._store, self._snapshot, timestamp_ms)

    def read_files(self, files: Sequence[DataFile]) -> pa.Table:
        """Every column of `files` (FILE_SCHEMA), in the order given."""
        if not files:
            return FILE_SCHEMA.empty_table()
        # Files rewritten by other engines may store view types: one schema for all.
        return pa.concat_tables([read_whole_file(self._store, f).cast(FILE_SCHEMA) for f in files])

    def producer_states(self) -> ProducerStates:
        """Producers' last committed spans (producer_scan.producer_states)."""
        return producer_scan.producer_states(self._store, self._snapshot.files)

    def older_producer_states(self, producer_ids: Collection[int], **limits) -> ProducerStates:
        """The state of producers unknown to `producer_states`, from older files."""
        return producer_scan.older_producer_states(
            self._store, self._snapshot.files, producer_ids, **limits
        )

    def app_version(self, app_id: str) -> int | None:
        """The version of txn `app_id` in the loaded snapshot (None: never committed)."""
        return self._snapshot.transactions.get(app_id)

    # ---- append ----------------------------------------------------------------------------

    def append(
        self,
        records: Records,
        *,
        config: TopicConfig,
        now_ms: int | None = None,
        producers: ProducerColumns | None = None,
        transaction: AppTransaction | None = None,
    ) -> AppendResult:
        """Append `records` in one Delta commit with the offset CAS; dense offsets from the HW.

        `producers` (one entry per record) fills the producer_id/producer_epoch/sequence
        columns, so idempotent producers' state is committed atomically with their records.
        `transaction` is committed with the records too (see `append_once`).

        Raises:
            AppendConflict: another writer committed offsets after this log's snapshot; nothing
                was committed and the snapshot has been reloaded.
            LeadershipConflict: this writer was deposed; nothing was committed.
            StorageUnavailable: the storage could not be written.
        """
        if transaction is not None and transaction.app_id in RESERVED_APP_IDS:
            raise ValueError(f"txn app id {transaction.app_id!r} is reserved by the log")
        if not self._has_transaction_columns and _any_transactional(producers):
            self.ensure_transaction_columns()
        staged = self.stage_append(records, config=config, now_ms=now_ms, producers=producers)
        return self.commit_staged(staged, transaction=transaction)

    def stage_append(
        self,
        records: Records,
        *,
        config: TopicConfig,
        now_ms: int | None = None,
        producers: ProducerColumns | None = None,
        after: StagedAppend | None = None,
    ) -> StagedAppend:
        """Write `records`' data file, offsets from the high watermark (or, with `after`, from
        the end of that staged append, which commits first), for `commit_staged`.

        Safe in another thread while `commit_staged` of `after` runs: the writer then writes
        one group's file while the previous group's commit is in flight (two store requests
        in a row per commit become one on the critical path)."""
        if not records:
            raise ValueError("append needs at least one record")

        def build(base_offset: int, now_ms: int) -> pa.Table:
            log_append_time = config.log_append_time
            return records_to_arrow(records, base_offset, now_ms, log_append_time, producers)

        return self._stage(build, config=config, now_ms=now_ms, after=after)

    def append_marker(
        self, producer_id: int, epoch: int, control: int, *, config: TopicConfig
    ) -> AppendResult:
        """Append a transaction marker (FORMAT.md §14: `control` CONTROL_COMMIT or
        CONTROL_ABORT for the producer's open transaction) in a commit of its own."""

        def build(base_offset: int, now_ms: int) -> pa.Table:
            return marker_table(base_offset, producer_id, epoch, control, now_ms)

        self.ensure_transaction_columns()
        return self.commit_staged(self._stage(build, config=config, now_ms=None, after=None))

    def ensure_transaction_columns(self) -> bool:
        """Add FORMAT.md §14's columns to the Delta schema of a table created before them, in
        a commit of its own (True), before the first transactional row is written: files
        with columns the schema lacks would lose them in Spark's maintenance rewrites, and
        plain Delta readers would not see them. False when the schema has them.

        Raises:
            AppendConflict: other commits kept coming first (retry).
            StorageUnavailable: the storage could not be written or read.
        """
        if self._has_transaction_columns:
            return False
        for attempt in range(LEADERSHIP_ATTEMPTS_MAX):
            if attempt or self._snapshot.state is None:
                self.reload()
            state = self._snapshot.state
            if state is None:
                raise StorageUnavailable(f"{self.table_uri}: the table's metadata is not loaded.")
            upgraded = log_commit.with_transaction_fields(dict(state.metadata))
            if upgraded is None:
                self._has_transaction_columns = True
                return False
            version = self._snapshot.table_version + 1
            actions = log_commit.metadata_actions(upgraded, _now_ms())
            if not self._put_commit(version, log_commit.ndjson(actions)):
                continue
            if self._may_be_below_checkpoint(version):  # paused past the log grace: look
                continue  # reloaded on the next attempt, which finds the columns or adds them
            self._snapshot = _committed(self._snapshot, version, actions)
            self._has_transaction_columns = True
            return True
        raise AppendConflict(f"{self.table_uri}: other commits kept coming before its upgrade.")

    def _stage(self, build, *, config: TopicConfig, now_ms: int | None, after) -> StagedAppend:
        """Write the data file `build(base_offset, now_ms)` makes, at the high watermark (or
        after `after`), in the segment the append belongs to."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        snapshot = self._snapshot
        if after is not None and snapshot.high_watermark <= after.last_offset:
            # `after` is not in the snapshot yet: plan as if it were.
            snapshot = dataclasses.replace(
                snapshot,
                high_watermark=after.last_offset + 1,
                files=(*snapshot.files, after.written.data_file),
            )
        base_offset = snapshot.high_watermark
        segment = _segment_for_append(snapshot, base_offset, config, now_ms)
        table = build(base_offset, now_ms)
        written = write_data_file(self._store, table, segment, now_ms, codec=APPEND_CODEC)
        return StagedAppend(written, table, base_offset, base_offset + table.num_rows - 1, now_ms)

    def discard_staged(self, staged: StagedAppend) -> None:
        """Delete the data file of a staged append that will not be committed."""
        delete_uncommitted(self._store, [staged.written])

    def commit_staged(
        self, staged: StagedAppend, *, transaction: AppTransaction | None = None
    ) -> AppendResult:
        """Commit a staged append (with `transaction`, if given) with the offset CAS: the
        commit is created put-if-absent on the version after the snapshot, whose high
        watermark must be the staged base offset.

        Raises:
            AppendConflict: the high watermark is not the staged base offset (another writer
                committed offsets, or the append staged before this one failed); nothing was
                committed, the staged file is deleted.
            LeadershipConflict: this writer was deposed; nothing was committed.
            StorageUnavailable: the storage could not be written.
        """
        for _ in range(APPEND_ATTEMPTS_MAX):
            if self._snapshot.high_watermark != staged.base_offset:
                delete_uncommitted(self._store, [staged.written])
                raise AppendConflict(
                    f"Another writer committed offsets to {self.table_uri} after this "
                    f"writer's snapshot; nothing was appended."
                )
            try:
                actions, merge = self._commit_append(
                    staged.written, staged.last_offset, staged.now_ms, transaction
                )
                self._advance(
                    self._snapshot, staged.written.data_file, staged.table, actions, merge
                )
            except VisibleAfterReload:
                self._forget_merge_if_committed()  # the reloaded snapshot holds the commit
            except VersionTaken as error:
                self.reload()
                self._check_still_leader(error)
                continue  # the same file, on the next version, if the offsets are still free
            return AppendResult(
                staged.base_offset,
                staged.last_offset,
                staged.now_ms,
                self._snapshot.table_version,
                staged.written.data_file.segment,
            )
        raise StorageUnavailable(
            f"Commit to {self.table_uri} failed: other commits (not appends) took its version "
            f"{APPEND_ATTEMPTS_MAX} times."
        )

    def _check_still_leader(self, cause: Exception) -> None:
        if self._held is not None and self.leader() != self._held:
            self._held = None
            raise LeadershipConflict(
                f"{self.table_uri}: this node was deposed as leader (now {self.leader()}); "
                f"nothing was appended."
            ) from cause

    def append_once(
        self,
        records: Records,
        *,
        config: TopicConfig,
        transaction: AppTransaction,
        now_ms: int | None = None,
    ) -> AppendResult | None:
        """Append `records` unless this table already holds `transaction` (its app id at its
        version or above): then return None, nothing is appended. The txn is committed with
        the records, so a writer that retries after any failure (a lost answer, a task retry,
        a restart from a checkpoint) appends them exactly once.

        Raises:
            AppendConflict: other writers kept winning the offset CAS.
            StorageUnavailable: the storage could not be written.
        """
        for _ in range(APPEND_ONCE_ATTEMPTS_MAX):
            done = self.app_version(transaction.app_id)
            if done is not None and done >= transaction.version:
                return None
            try:
                return self.append(records, config=config, now_ms=now_ms, transaction=transaction)
            except AppendConflict:
                continue  # reloaded: check the txn again, then assign offsets afresh
        raise AppendConflict(
            f"Other writers committed to {self.table_uri} before each of "
            f"{APPEND_ONCE_ATTEMPTS_MAX} attempts; nothing was appended."
        )

    def _commit_append(
        self, written: WrittenFile, last_offset: int, now_ms: int, transaction
    ) -> tuple[list[dict], PreparedMerge | None]:
        """Create the next commit file, with the pending small-file merge if its files are
        all still live; step over other writers' rearrangements. Returns its actions and the
        merge it carried.

        Raises:
            VersionTaken: another commit changed records, txns or metadata first.
        """
        transactions = [(LOG_APP_ID, last_offset)]
        if self._held is not None:
            transactions.append((LEADER_APP_ID, self._held.version))
        if transaction is not None:
            transactions.append((transaction.app_id, transaction.version))
        if not self._fenced:
            transactions = []
        for _ in range(REARRANGEMENT_STEPS_MAX):
            merge = self._usable_merge()
            rewrite = () if merge is None else merge.actions()
            actions = log_commit.append_actions(written.add, transactions, now_ms, rewrite)
            payload = log_commit.ndjson(actions)
            version = self._snapshot.table_version + 1
            started = time.monotonic()
            if self._put_commit(version, payload):
                self._check_not_shadowed(version, written.data_file.path)
                self._latest_known_at = started
                return actions, merge
            if not self._fenced:
                self._blind_rebase(version)
                continue
            winner = self._read_commit(version)
            rearrangement = None if winner is None else log_commit.as_rearrangement(winner)
            if rearrangement is None:
                raise VersionTaken(version)
            self._snapshot = rearranged(self._snapshot, version, rearrangement)
        raise VersionTaken(self._snapshot.table_version + 1)

    def _blind_rebase(self, version: int) -> None:
        """Control runs only: take the next version whatever the taken one holds, as a writer
        without the offset CAS does (delta-rs rebases such appends silently)."""
        self._snapshot = dataclasses.replace(self._snapshot, table_version=version)

    def _put_commit(self, version: int, payload: bytes) -> bool:
        try:
            return log_commit.put_if_absent(self._log, version, payload)
        except OSError as error:
            raise StorageUnavailable(f"Commit to {self.table_uri} failed: {error}") from error

    def _read_commit(self, version: int) -> list[dict[str, Any]] | None:
        try:
            return log_commit.read_commit(self._log, version)
        except OSError as error:
            raise StorageUnavailable(f"Cannot read {self.table_uri}: {error}") from error

    def _check_not_shadowed(self, version: int, data_path: str) -> None:
        """A writer paused for longer than the log grace can find its next version free
        because housekeeping trimmed it: its commit would sit below the latest checkpoint,
        where no reader looks. So a commit below the checkpoint counts only if the reloaded
        table shows it (a checkpoint can legitimately follow it within microseconds).

        Raises:
            VisibleAfterReload: it is visible; the snapshot has been reloaded.
            VersionTaken: it is not: nothing was appended (the file is an orphan for vacuum).
        """
        # Half the log grace: margin for the clocks of the nodes that trim the log.
        if time.monotonic() - self._latest_known_at < housekeeping.LOG_GRACE_MS / 2000:
            # The version before ours was the latest within the last few seconds, so ours was
            # absent then; to be trimmed it must have existed for LOG_GRACE_MS: it was not.
            # Saves a read of `_last_checkpoint` per commit (a request on an object store).
            return
        if not self._may_be_below_checkpoint(version):
            return
        self.reload()
        if any(f.path == data_path for f in self._snapshot.files):
            raise VisibleAfterReload()
        raise VersionTaken(version)

    def _may_be_below_checkpoint(self, version: int) -> bool:
        """Whether `_last_checkpoint` names a version after commit `version`, or cannot say.

        Asked after the commit is durable, so an unreadable hint (garbage, torn by a disk
        fault) must not raise: a committed append must never turn into an error a client
        retries (a duplicate). delta-rs ignores such a hint and lists the log; the commit is
        checked by a reload then, as for a commit below the checkpoint.
        """
        try:
            return log_commit.last_checkpoint_version(self._log) > version
        except (OSError, ValueError, KeyError, TypeError):
            return True

    def _advance(
        self,
        before: LogSnapshot,
        data_file: DataFile,
        table: pa.Table,
        actions: list[dict],
        merge: PreparedMerge | None = None,
    ) -> None:
        """The snapshot after our own commit: one more version, file and tail chunk (and the
        small-file merge it carried)."""
        if not self._fenced:
            self.reload()  # control runs: other writers' files may have come in between
            return
        files = before.files
        if merge is not None:
            if self._merge is merge:
                self._merge = None
            kept = [f for f in files if f.path not in merge.removed_paths]
            files = tuple(sorted([*kept, merge.written.data_file], key=lambda f: f.min_offset))
        after = _committed(before, before.table_version + 1, actions)
        written = self._housekeeper.written  # tombstones up to it need not stay in memory
        if written is not None and after.state is not None:
            after = dataclasses.replace(after, state=after.state.checkpointed(*written))
        self._snapshot = dataclasses.replace(
            after,
            high_watermark=data_file.max_offset + 1,
            files=(*files, data_file),
            tail=self._next_tail(before.tail, data_file.min_offset, table),
        )

    def _next_tail(self, tail, base_offset: int, table: pa.Table) -> tuple[TailChunk, ...]:
        if self._tail_records_max <= 0:
            return ()
        chunks = [*tail, TailChunk(base_offset, table)]
        # The row count of `tail` is remembered from the last call (summing up to 256 chunks
        # on every commit was a twentieth of a commit's CPU).
        known_tail, known_rows = self._tail_rows
        rows = known_rows if known_tail is tail else sum(c.records.num_rows for c in tail)
        rows += table.num_rows
        while len(chunks) > 1 and (
            rows - chunks[0].records.num_rows >= self._tail_records_max
            or len(chunks) > TAIL_COMMITS_MAX
        ):
            rows -= chunks.pop(0).records.num_rows
        result = tuple(chunks)
        self._tail_rows = (result, rows)
        return result

    # ---- housekeeping ----------------------------------------------------------------------

    def housekeeping(self, history_ms: int = 0) -> int:
        """Keep the table cheap to commit to: checkpoint and trim the log, and write the
        merged file of the first run of small files (housekeeping.Housekeeper), which the
        writer commits with its next append, or alone when idle (`commit_pending_merge`):
        committing it here would race the appends for every version. The log keeps
        `history_ms` of versions for Delta time travel (topic config delta.log.retention.ms).
        Safe in another thread while this log appends: it reads the writer's snapshot and
        never replaces it.

        Returns:
            The number of data files whose merge is now pending.
        """
        if not self._fenced:
            return 0  # control runs: the table shows exactly what unfenced writers did
        snapshot = self._snapshot
        self._housekeeper.checkpoint_if_due(snapshot, history_ms)
        if self._merge is not None:
            return 0
        try:
            merge = self._housekeeper.prepare_merge(snapshot)
        except (OSError, StorageError):
            return 0  # retried on the next pass
        if merge is None:
            return 0
        self._merge = merge
        return len(merge.removed_paths)

    @property
    def merge_pending(self) -> bool:
        return self._merge is not None

    def commit_pending_merge(self) -> int:
        """Commit the pending small-file merge on its own (the writer is idle); the number
        of files it replaced, 0 if there was none or another commit came first (then it is
        dropped and planned again by a later pass). Writer thread only."""
        merge = self._usable_merge()
        if merge is None:
            return 0
        self._merge = None
        payload = log_commit.rewrite_commit(
            add=merge.written.add, removes=list(merge.removes), timestamp_ms=_now_ms()
        )
        version = self._snapshot.table_version + 1
        if not self._put_commit(version, payload):
            delete_uncommitted(self._store, [merge.written])
            return 0
        if self._may_be_below_checkpoint(version):  # paused past the log grace
            self.reload()
            return len(merge.removed_paths)
        change = log_commit.as_rearrangement(log_commit.parse_commit(payload))
        self._snapshot = rearranged(self._snapshot, version, change)
        return len(merge.removed_paths)

    def _usable_merge(self) -> PreparedMerge | None:
        """The pending merge if its files are all still live (retention or compaction may
        have removed some since: then it is dropped and its file deleted)."""
        merge = self._merge
        if merge is None or not self._fenced:
            return None
        live = {f.path for f in self._snapshot.files}
        if merge.removed_paths <= live:
            return merge
        if self._merge is merge:
            self._merge = None
        delete_uncommitted(self._store, [merge.written])
        return None

    def _forget_merge_if_committed(self) -> None:
        merge = self._merge
        if merge is not None and any(
            f.path == merge.written.data_file.path for f in self._snapshot.files
        ):
            self._merge = None

    def maybe_merge_small_files(self) -> int:
        """Housekeeping's small-file merge, run on this log's own snapshot and applied to it
        (for tools and tests that drive a log directly, between their appends). Not safe
        concurrently with `append` or `housekeeping` on the same object.

        Returns:
            The number of files replaced (0 when no run is long enough).
        """
        try:
            merged = self._housekeeper.merge_small_files(self._snapshot, self._held)
        except (OSError, DeltaError):
            self.reload()  # e.g. retention removed these files meanwhile: try again later
            return 0
        self._step_over_rearrangements()
        return merged

    def _step_over_rearrangements(self) -> bool:
        """Apply the rearrangements committed after this log's snapshot; reload if any later
        commit is something else. True if it reloaded."""
        for _ in range(REARRANGEMENT_STEPS_MAX):
            version = self._snapshot.table_version + 1
            winner = self._read_commit(version)
            if winner is None:
                return False
            change = log_commit.as_rearrangement(winner)
            try:
                if change is None:
                    raise VersionTaken(version)
                self._snapshot = rearranged(self._snapshot, version, change)
            except VersionTaken:
                self.reload()
                return True
        self.reload()
        return True

    # ---- maintenance (retention, key compaction, file optimization) -------------------------

    def advance_log_start(self, offset: int) -> int:
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
            bounds = self.bounds()
            if offset > bounds.high_watermark:
                raise OffsetOutOfRange(offset, bounds.log_start_offset, bounds.high_watermark)
            if offset <= bounds.log_start_offset:
                return bounds.log_start_offset
            start = AppTransaction(LOG_START_APP_ID, offset)
            if self.commit_maintenance(
                removes=(), operation="DELETE RECORDS", data_change=False, transactions=[start]
            ):
                return offset
            self.reload()
        raise AppendConflict(f"The log start of {self.table_uri} kept moving; retry.")

    def commit_maintenance(
        self,
        *,
        removes: Sequence[DataFile],
        replacements: Sequence[tuple[int, pa.Table]] = (),
        operation: str,
        data_change: bool,
        transactions: Sequence[AppTransaction] = (),
    ) -> bool:
        """Replace the files `removes` by `replacements` ((segment, records with every file
        column), one new file each) in one commit after the loaded snapshot.

        Appends go on meanwhile: the commit steps over commits that leave `removes` in place
        (maintenance never touches the active segment, where appends go). `data_change` says
        whether records go (retention, key compaction) or only move (file merges). The
        snapshot is reloaded afterwards.

        Returns:
            False, with nothing committed, when a commit in between removed one of the files
            or carried one of `transactions`' app ids (another job did the work first): plan
            again.
        """
        now_ms = int(time.time() * 1000)
        written = [
            write_data_file(self._store, table, segment, now_ms, data_change=data_change)
            for segment, table in replacements
            if table.num_rows  # a segment whose records all go leaves no file
        ]
        before = self._snapshot
        payload = _maintenance_payload(
            removes, written, operation, data_change, transactions, now_ms
        )
        version = self._commit_after(before.table_version + 1, payload, removes, transactions)
        committed = version is not None and self._maintenance_visible(version, removes, written)
        if not committed:
            delete_uncommitted(self._store, written)
        if committed and version == before.table_version + 1:
            # Nothing came in between: the new snapshot is known without reading the table
            # (a reload costs as much as the whole job on a partition with a long history).
            added = [item.data_file for item in written]
            actions = log_commit.parse_commit(payload)
            self._snapshot = after_maintenance(before, removes, added, transactions, actions)
        elif self._snapshot is before:
            self.reload()
        return committed

    def _commit_after(self, version: int, payload: bytes, removes, transactions) -> int | None:
        """Create the commit at `version` or after, stepping over commits that keep `removes`
        and carry none of `transactions`' app ids; the version, or None on a conflict."""
        removed = {f.path for f in removes}
        app_ids = tuple(t.app_id for t in transactions)
        while not self._put_commit(version, payload):
            winner = self._read_commit(version)
            if winner is None or not log_commit.keeps_files(winner, removed, app_ids):
                return None
            version += 1  # bounded: only commits that exist are stepped over
        return version

    def _maintenance_visible(self, version: int, removes, written) -> bool:
        """As for appends (_check_not_shadowed): a commit created below the latest checkpoint,
        by a job paused past the log grace, counts only if the reloaded table shows it."""
        if not self._may_be_below_checkpoint(version):
            return True
        live = {f.path for f in self.reload().files}
        return all(f.path not in live for f in removes) and all(
            item.data_file.path in live for item in written
        )


def _any_transactional(producers: ProducerColumns | None) -> bool:
    return producers is not None and any(p is not None and len(p) > 3 and p[3] for p in producers)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _committed(snapshot: LogSnapshot, version: int, actions: list[dict]) -> LogSnapshot:
    """`snapshot` at `version`, after our own commit (its `actions`) on top of it."""
    state = snapshot.state
    if state is not None:
        state = state.applied(version, actions)
    return dataclasses.replace(snapshot, table_version=version, state=state)


def _maintenance_payload(
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


def _segment_for_append(
    snapshot: LogSnapshot, base_offset: int, config: TopicConfig, now_ms: int
) -> int:
    """The active segment, or a new one (base = this append's first offset) when it is full
    (`segment.bytes`) or old (`segment.ms`, measured from its first file's append time)."""
    active = snapshot.active_segment
    if active is None:
        return base_offset
    files = snapshot.segment_files(active)
    size_bytes = sum(f.size_bytes for f in files)
    created_ms = min(f.modification_time_ms for f in files)
    if size_bytes >= config.segment_bytes or now_ms - created_ms >= config.segment_ms:
        return base_offset
    return active
