"""DeltaPartitionLog: one topic partition as one Delta table.

Offsets are assigned by the writer from its loaded snapshot, and every append commits a Delta
`txn` action `Transaction("log", last_offset)` with the next log version created put-if-absent
on top of that same snapshot (committer.py), so two writers can never commit the same offsets
(FORMAT.md §3). The high watermark is that txn version + 1.

This class decides what to commit; the rooms beside it do the rest: `committer` (the commit
loop and the snapshot), `leadership` (the leader CAS), `staging` (an append's data file),
`maintenance_commits` (jobs' and DeleteRecords' commits, the schema upgrade), `pending_merge`
and `housekeeping` (small-file merges, checkpoints), `reads` (records from a snapshot).

Concurrency contract: one thread at a time calls `append` (the partition's writer), and one
may run `housekeeping` beside it; any number of threads may call `read`, `bounds` and
`snapshot`: they read an immutable `LogSnapshot` that `append` and `reload` replace atomically.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Collection, Sequence

import pyarrow as pa
from deltalake.exceptions import DeltaError

from storage_layout.errors import (
    AppendConflict,
    LeadershipConflict,
    StorageUnavailable,
)
from storage_layout.leader_epochs import LeaderEpochs, epoch_app_id
from storage_layout.log import (
    leadership,
    log_commit,
    maintenance_commits,
    producer_scan,
    reads,
    replay,
)
from storage_layout.log.arrow_records import (
    ProducerColumns,
    compression_of,
    marker_table,
    records_to_arrow,
    typed_of,
)
from storage_layout.log.committer import LogCommitter
from storage_layout.log.files import (
    APPEND_CODEC,
    as_file_schema,
    delete_uncommitted,
    write_data_file,
)
from storage_layout.log.housekeeping import Housekeeper
from storage_layout.log.leadership import Leadership, Outcome
from storage_layout.log.pending_merge import PendingMerge
from storage_layout.log.reader import TableReader
from storage_layout.log.snapshot import (
    DataFile,
    LogSnapshot,
    VersionTaken,
    VisibleAfterReload,
    snapshot_from_state,
)
from storage_layout.log.staging import StagedAppend, stage
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
    LEADER_EPOCH_APP_ID_PREFIX,
    LOG_APP_ID,
    LOG_START_APP_ID,
)
from storage_layout.schemas.typed_columns import TYPED_COLUMNS, merge_types
from storage_layout.store import open_store
from storage_layout.topic_config import TopicConfig

logger = logging.getLogger("lakelog.storage")

# A commit that lost its version to another writer's commit is planned again on a fresh
# snapshot (nothing of it is visible), this many times at most.
APPEND_ATTEMPTS_MAX = 3
APPEND_ONCE_ATTEMPTS_MAX = 20
RESERVED_APP_IDS = (LOG_APP_ID, LEADER_APP_ID, LOG_START_APP_ID)

__all__ = ["DeltaPartitionLog", "StagedAppend"]


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
        log = self._store.child(log_commit.LOG_DIR)
        self._pending = PendingMerge(self._store)
        # Every commit this writer makes or follows advances the snapshot and its TableState
        # (the Delta actions a checkpoint holds): the table is read again only by `reload`.
        self._committer = LogCommitter(
            table_uri,
            log,
            snapshot_from_state(state, table_uri, fenced),
            fenced=fenced,
            latest_known_at=time.monotonic() if loaded_at is None else loaded_at,
            tail_records_max=tail_records_max,
            pending=self._pending,
        )
        self._held: Leadership | None = None  # leadership this writer asserts in every append
        self._housekeeper = Housekeeper(table_uri, self._store, log)
        self._housekept: LogSnapshot | None = None  # the snapshot the last pass began from
        # Open and aborted transactions, extended to each new snapshot when a reader asks.
        self._transactions = TransactionIndex()
        # From the schema loaded (tables made since FORMAT.md §14 have them): appends of
        # idempotent producers then never look at their producer tuples for it.
        self._has_added_columns = log_commit.has_added_fields(state.metadata)

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
        """Catch up with commits made by others (LogCommitter.reload). The tail is dropped."""
        return self._committer.reload()

    def catch_up(self) -> bool:
        """Follow commits made since the loaded snapshot: file rearrangements (this node's
        small-file merges) are applied to it, anything else (a Spark task that appended
        directly, a retention or compaction job) reloads it. True if records changed (a
        reload). Costs one existence check of the next commit when nothing moved."""
        return self._committer.catch_up()

    # ---- leadership --------------------------------------------------------------------------

    def leader(self) -> Leadership | None:
        """The leader named by the loaded snapshot (call `reload` first for the latest).
        Reads no storage, so housekeeping may ask from its thread."""
        return Leadership.from_version(self._committer.snapshot.transactions.get(LEADER_APP_ID))

    def leader_epochs(self) -> LeaderEpochs:
        """Where each recorded leader epoch began, as of the loaded snapshot (no I/O)."""
        return LeaderEpochs.from_transactions(self._committer.snapshot.transactions)

    @property
    def held_leadership(self) -> Leadership | None:
        return self._held

    def superseded(self) -> bool:
        """Whether this log holds a leadership that the loaded snapshot names no more (its
        next append would be refused): another node took the partition, or handed it back to
        this node under a newer epoch while this one was paused. No I/O. Unfenced logs
        (control runs) are never superseded."""
        return self._fenced and self._held is not None and self.leader() != self._held

    def commit_leadership(
        self, node_id: int, *, expected: Leadership | None, hold: bool
    ) -> Leadership:
        """Name `node_id` leader with the next epoch, if the leader is still `expected`
        (leadership.take: a txn-only commit on the version after the latest). Every append
        of the leader carries its `leader` txn, so a deposed leader's next append is
        rejected, even on an empty table. With `hold`, this writer asserts the new leadership
        in its appends (it named itself); without, it hands the partition over.

        Raises:
            LeadershipConflict: the leader is no longer `expected`, or another change won.
        """
        new = leadership.take(_Elected(self), node_id, expected=expected)
        self._held = new if hold else None
        return new

    # ---- reads -----------------------------------------------------------------------------

    @property
    def snapshot(self) -> LogSnapshot:
        return self._committer.snapshot

    def bounds(self) -> PartitionBounds:
        snapshot = self._committer.snapshot
        return PartitionBounds(snapshot.log_start_offset, snapshot.high_watermark)

    def stable_bounds(self) -> PartitionBounds:
        """bounds() with the last stable offset (may read files newer than the index)."""
        snapshot = self._committer.snapshot
        stable = self.last_stable_offset(snapshot)
        return PartitionBounds(snapshot.log_start_offset, snapshot.high_watermark, stable)

    def size_bytes(self) -> int:
        """The Parquet bytes of the partition's live data files (no I/O)."""
        return sum(f.size_bytes for f in self._committer.snapshot.files)

    def last_stable_offset(self, snapshot: LogSnapshot | None = None) -> int:
        """Where read_committed readers of `snapshot` (default: the loaded one) end."""
        snapshot = self._committer.snapshot if snapshot is None else snapshot
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
        snapshot = self._committer.snapshot
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
        """The open and aborted transactions of `snapshot` (default: the loaded one),
        built on from the last index (reads.advanced_index)."""
        snapshot = self._committer.snapshot if snapshot is None else snapshot
        self._transactions = reads.advanced_index(self._store, snapshot, self._transactions)
        return self._transactions

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """Kafka's ListOffsets by timestamp on the loaded snapshot (reads.offset_for_timestamp)."""
        return reads.offset_for_timestamp(self._store, self._committer.snapshot, timestamp_ms)

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """ListOffsets MAX_TIMESTAMP on the loaded snapshot (reads.offset_of_max_timestamp)."""
        return reads.offset_of_max_timestamp(self._store, self._committer.snapshot)

    def read_files(self, files: Sequence[DataFile]) -> pa.Table:
        """Every column of `files` (FILE_SCHEMA), in the order given."""
        return reads.read_files(self._store, files, self._committer.snapshot.file_schema)

    def producer_states(self) -> ProducerStates:
        """Producers' last committed spans (producer_scan.producer_states)."""
        return producer_scan.producer_states(self._store, self._committer.snapshot.files)

    def older_producer_states(self, producer_ids: Collection[int], **limits) -> ProducerStates:
        """The state of producers unknown to `producer_states`, from older files."""
        return producer_scan.older_producer_states(
            self._store, self._committer.snapshot.files, producer_ids, **limits
        )

    def app_version(self, app_id: str) -> int | None:
        """The version of txn `app_id` in the loaded snapshot (None: never committed)."""
        return self._committer.snapshot.transactions.get(app_id)

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
        if transaction is not None and _reserved(transaction.app_id):
            raise ValueError(f"txn app id {transaction.app_id!r} is reserved by the log")
        if not self._has_added_columns and (
            _any_transactional(producers) or compression_of(records).null_count < len(records)
        ):
            self.ensure_added_columns()
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
        the end of that staged append, which commits first), for `commit_staged`. Safe in
        another thread while `commit_staged` of `after` runs (staging.py)."""
        if not records:
            raise ValueError("append needs at least one record")
        targets = self._typed_targets(records)

        def build(base_offset: int, now_ms: int) -> pa.Table:
            log_append_time = config.log_append_time
            return records_to_arrow(
                records, base_offset, now_ms, log_append_time, producers, targets
            )

        return self._stage(build, config=config, now_ms=now_ms, after=after)

    def append_marker(
        self, producer_id: int, epoch: int, control: int, *, config: TopicConfig
    ) -> AppendResult:
        """Append a transaction marker (FORMAT.md §14: `control` CONTROL_COMMIT or
        CONTROL_ABORT for the producer's open transaction) in a commit of its own."""

        def build(base_offset: int, now_ms: int) -> pa.Table:
            return marker_table(base_offset, producer_id, epoch, control, now_ms)

        self.ensure_added_columns()
        return self.commit_staged(self._stage(build, config=config, now_ms=None, after=None))

    def ensure_added_columns(self) -> bool:
        """Add the columns added after the first tables (FORMAT.md §14, §18) to a table
        created before them (maintenance_commits.add_added_columns); False when it has them."""
        if self._has_added_columns:
            return False
        added = maintenance_commits.add_added_columns(self._committer)
        self._has_added_columns = True
        return added

    def _stage(self, build, *, config: TopicConfig, now_ms: int | None, after) -> StagedAppend:
        now_ms = _now_ms() if now_ms is None else now_ms
        snapshot = self._committer.snapshot
        return stage(self._store, snapshot, build, config=config, now_ms=now_ms, after=after)

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
            if self._committer.snapshot.high_watermark != staged.base_offset:
                delete_uncommitted(self._store, [staged.written])
                raise AppendConflict(
                    f"Another writer committed offsets to {self.table_uri} after this "
                    f"writer's snapshot; nothing was appended."
                )
            staged, metadata = self._typed_schema_change(staged)
            try:
                self._commit_append(staged, transaction, metadata)
            except VisibleAfterReload:
                self._pending.forget_if_committed(self._committer.snapshot)
            except VersionTaken as error:
                self.reload()
                self._check_still_leader(error)
                continue  # the same file, on the next version, if the offsets are still free
            return AppendResult(
                staged.base_offset,
                staged.last_offset,
                staged.now_ms,
                self._committer.snapshot.table_version,
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

    def _typed_targets(self, records: Records) -> dict[str, pa.DataType]:
        """The typed columns (FORMAT.md §17) an append of `records` writes: the table's,
        widened by the records' own. A field whose type conflicts keeps the table's (the
        records store null there) and is logged."""
        current = dict(self._committer.snapshot.typed_types)
        typed = typed_of(records)
        if typed is None:
            return current
        for field in typed.schema:
            merged = merge_types(current.get(field.name), field.type)
            for conflict in merged.conflicts:
                logger.warning("%s %s: %s; stored as null", self.table_uri, field.name, conflict)
            current[field.name] = merged.type
        return current

    def _typed_schema_change(self, staged: StagedAppend) -> tuple[StagedAppend, dict | None]:
        """The staged append fitted to the table's typed columns as they are now, and the
        metadata to commit with it when its columns widen the table's. Staged while an
        earlier append was in flight, its file may hold a type that append made conflict:
        then it is written again, conformed (rare: two new versions of one field at once)."""
        file_types = {f.name: f.type for f in staged.table.schema if f.name in TYPED_COLUMNS}
        if not file_types:
            return staged, None
        state = self._committer.snapshot.state
        current = dict(self._committer.snapshot.typed_types)
        conflicted = False
        for name, kind in file_types.items():
            merged = merge_types(current.get(name), kind)
            conflicted = conflicted or bool(merged.conflicts)
            current[name] = merged.type
        if conflicted:
            staged = self._restaged(staged, current)
        metadata = None if state is None else log_commit.with_typed_fields(state.metadata, current)
        return staged, metadata

    def _restaged(self, staged: StagedAppend, targets: dict[str, pa.DataType]) -> StagedAppend:
        schema = pa.schema([*FILE_SCHEMA, *(pa.field(n, t) for n, t in targets.items())])
        table = as_file_schema(staged.table, schema)
        written = write_data_file(
            self._store,
            table,
            staged.written.data_file.segment,
            staged.now_ms,
            codec=APPEND_CODEC,
        )
        delete_uncommitted(self._store, [staged.written])
        return dataclasses.replace(staged, written=written, table=table)

    def _commit_append(
        self,
        staged: StagedAppend,
        transaction: AppTransaction | None,
        metadata: dict | None = None,
    ) -> None:
        """Commit the staged file with the offset CAS, the writer's leadership,
        `transaction` and `metadata` (LogCommitter.commit_append)."""
        transactions = [(LOG_APP_ID, staged.last_offset)]
        if self._held is not None:
            transactions.append((LEADER_APP_ID, self._held.version))
        if transaction is not None:
            transactions.append((transaction.app_id, transaction.version))
        self._committer.commit_append(
            staged.written,
            staged.table,
            transactions if self._fenced else [],
            staged.now_ms,
            checkpoint=self._housekeeper.written,
            metadata=metadata,
        )

    # ---- housekeeping ----------------------------------------------------------------------

    def housekeeping(self, history_ms: int = 0) -> int:
        """Keep the table cheap to commit to: checkpoint and trim the log (keeping
        `history_ms` of versions for Delta time travel: topic config delta.log.retention.ms),
        and write the merged file of the first run of small files, which the writer commits
        with its next append, or alone when idle (`commit_pending_merge`). Safe in another
        thread while this log appends: it reads the writer's snapshot, never replaces it.

        Returns:
            The number of data files whose merge is now pending.
        """
        if not self._fenced:
            return 0  # control runs: the table shows exactly what unfenced writers did
        snapshot = self._committer.snapshot
        self._housekept = snapshot
        self._housekeeper.checkpoint_if_due(snapshot, history_ms)
        return self._pending.prepare(self._housekeeper, snapshot)

    def housekeeping_overdue(self) -> bool:
        """Half the in-memory tail or more was committed since the last housekeeping pass
        began: a pass now merges small files from memory; later, it would read them back
        from the store (a file a commit at a high commit rate)."""
        earlier = self._housekept
        return earlier is not None and self._committer.tail_renewed_half_since(earlier)

    @property
    def merge_pending(self) -> bool:
        return self._pending.merge is not None

    def commit_pending_merge(self) -> int:
        """Commit the pending small-file merge alone (the writer is idle): the number of
        files it replaced (LogCommitter.commit_pending_merge). Writer thread only."""
        return self._committer.commit_pending_merge(_now_ms())

    def maybe_merge_small_files(self) -> int:
        """Housekeeping's small-file merge, run on this log's own snapshot and applied to it
        (for tools and tests that drive a log directly, between their appends). Not safe
        concurrently with `append` or `housekeeping` on the same object.

        Returns:
            The number of files replaced (0 when no run is long enough).
        """
        try:
            merged = self._housekeeper.merge_small_files(self._committer.snapshot, self._held)
        except (OSError, DeltaError):
            self.reload()  # e.g. retention removed these files meanwhile: try again later
            return 0
        self._committer.step_over_rearrangements()
        return merged

    # ---- maintenance (retention, key compaction, file optimization) -------------------------

    def advance_log_start(self, offset: int) -> int:
        """Kafka's DeleteRecords (maintenance_commits.advance_log_start)."""
        return maintenance_commits.advance_log_start(self._committer, self._store, offset)

    def commit_maintenance(
        self,
        *,
        removes: Sequence[DataFile],
        replacements: Sequence[tuple[int, pa.Table]] = (),
        operation: str,
        data_change: bool,
        transactions: Sequence[AppTransaction] = (),
    ) -> bool:
        """Replace the files `removes` by `replacements` in one commit after the loaded
        snapshot (maintenance_commits.commit_maintenance); False when another job did the
        work first (plan again)."""
        return maintenance_commits.commit_maintenance(
            self._committer,
            self._store,
            removes=removes,
            replacements=replacements,
            operation=operation,
            data_change=data_change,
            transactions=transactions,
        )


class _Elected:
    """A partition log as leadership.take sees it: the `leader` txn of its table."""

    def __init__(self, log: DeltaPartitionLog) -> None:
        self.name = log.table_uri
        self._log = log
        self._committer = log._committer

    def current(self, *, fresh: bool) -> Leadership | None:
        if fresh:
            self._committer.reload()
        else:
            self._committer.catch_up()  # one existence check when nothing moved
        return self._log.leader()

    def commit_txn(self, new: Leadership) -> Outcome:
        # The new epoch starts where the next record goes: the high watermark of the version
        # this commit is built on (a commit in between takes that version: this one is lost).
        start = self._committer.snapshot.high_watermark
        transactions = [(LEADER_APP_ID, new.version), (epoch_app_id(new.epoch), start)]
        actions = log_commit.transactions_actions(transactions, _now_ms())
        return self._committer.commit_next(actions)


def _reserved(app_id: str) -> bool:
    return app_id in RESERVED_APP_IDS or app_id.startswith(LEADER_EPOCH_APP_ID_PREFIX)


def _any_transactional(producers: ProducerColumns | None) -> bool:
    return producers is not None and any(p is not None and len(p) > 3 and p[3] for p in producers)


def _now_ms() -> int:
    return int(time.time() * 1000)
