"""DeltaPartitionLog: one topic partition as one Delta table.

Offsets are assigned by the writer from its loaded snapshot, and every append commits a Delta
`txn` action `Transaction("log", last_offset)` built on that same snapshot. delta-rs rejects a
commit whose app id was written by any commit after its snapshot, so two writers can never commit
the same offsets (FORMAT.md, invariant 3). The high watermark is that txn version + 1.

Concurrency contract: one thread at a time calls `append` (the partition's writer); any number of
threads may call `read`, `bounds` and `snapshot` concurrently: they read an immutable
`LogSnapshot` that `append` and `reload` replace atomically.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import time
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties, Transaction
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction

from storage_layout import log_commit, paths
from storage_layout.errors import (
    AppendConflict,
    CorruptPartition,
    LeadershipConflict,
    OffsetOutOfRange,
    StorageUnavailable,
)
from storage_layout.producer_state import CommittedSpan, ProducerStates
from storage_layout.protocol_check import check_protocol
from storage_layout.records import (
    AppendResult,
    AppTransaction,
    FetchResult,
    NewRecord,
    PartitionBounds,
)
from storage_layout.schema import (
    FILE_SCHEMA,
    LEADER_APP_ID,
    LOG_APP_ID,
    LOG_START_APP_ID,
    NODE_IDS,
    PARTITION_COLUMN,
    PARTITION_SCHEMA,
    RECORD_COLUMNS,
    TIMESTAMP_TYPE,
    TIMESTAMP_TYPE_CREATE_TIME,
    TIMESTAMP_TYPE_LOG_APPEND_TIME,
)
from storage_layout.store import (
    Store,
    delta_storage_options,
    open_store,
    read_parquet,
    write_parquet,
)
from storage_layout.topic_config import TopicConfig

# Table properties set at creation. Log retention keeps `_delta_log` small under constant load;
# never set delta.setTransactionRetentionDuration: it would expire the offset CAS (invariant 3).
TABLE_CONFIGURATION = {
    "delta.checkpointInterval": "100",
    "delta.logRetentionDuration": "interval 1 days",
}
# Non-txn conflicts (e.g. a retention DELETE committed under the lease) are retried on a fresh
# snapshot; the failed attempt committed nothing, so offsets may be assigned again.
APPEND_ATTEMPTS_MAX = 3
APPEND_ONCE_ATTEMPTS_MAX = 20
RESERVED_APP_IDS = (LOG_APP_ID, LEADER_APP_ID, LOG_START_APP_ID)
TAIL_COMMITS_MAX = 256
CHECKPOINT_INTERVAL = int(TABLE_CONFIGURATION["delta.checkpointInterval"])
# delta-rs checks for expired log files after every commit by listing all of `_delta_log`,
# which made a commit cost grow with the table's age (7 ms at version 10, 21 ms at 2 000), and
# writes checkpoints inline (a latency spike every 100 commits). Appends skip both; the
# `housekeeping` pass (run by the writer in the background) checkpoints and trims the log.
COMMIT_HOOKS = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
# Log files older than the previous checkpoint are kept this long for readers that pinned a
# version (a Spark batch read plans on one); then they go (see `housekeeping`).
LOG_GRACE_MS = 10_000
# Producer state is rebuilt on open from at most this many newest data files (FORMAT.md §7).
PRODUCER_STATE_FILES_MAX = 100
# A producer continuing a sequence the rebuilt state does not know is looked up in up to this
# many older data files, once per writer (older_producer_states).
PRODUCER_LOOKUP_FILES_MAX = 1_000
_PRODUCER_COLUMNS = ("offset", "timestamp", "producer_id", "producer_epoch", "sequence")

# Per record: (producer_id, producer_epoch, sequence), or None for a non-idempotent record.
ProducerColumns = Sequence[tuple[int, int, int] | None]


@dataclass(frozen=True, slots=True)
class DataFile:
    """One Parquet file of the table with its offset range (from Delta file statistics)."""

    path: str
    segment: int
    min_offset: int
    max_offset: int
    num_records: int
    size_bytes: int
    modification_time_ms: int
    # None when the file's statistics do not say (e.g. written by another tool).
    has_producer_ids: bool | None = None
    # Largest record timestamp, ceiled to whole ms (None when the statistics do not say).
    # Timestamps are not monotonic in offsets (CreateTime), so only this bound lets
    # offset_for_timestamp skip a file.
    max_timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Leadership:
    """Who leads a partition, from the `leader` txn: epochs only grow, one per change."""

    epoch: int
    node_id: int

    @classmethod
    def from_version(cls, version: int | None) -> Leadership | None:
        return None if version is None else cls(version // NODE_IDS, version % NODE_IDS)

    @property
    def version(self) -> int:
        return self.epoch * NODE_IDS + self.node_id


@dataclass(frozen=True, slots=True)
class TailChunk:
    """One recent commit's file, kept in memory so fetches at the head skip Parquet and
    compaction skips re-reading it. `records` has every file column (FILE_SCHEMA)."""

    base_offset: int
    records: pa.Table


@dataclass(frozen=True, slots=True)
class LogSnapshot:
    """What the log looks like at `table_version`. Files are sorted by min_offset."""

    table_version: int
    high_watermark: int
    files: tuple[DataFile, ...]
    tail: tuple[TailChunk, ...] = ()
    # The `log_start` txn (set by retention), or None: then the first stored offset.
    start_offset: int | None = None

    @property
    def log_start_offset(self) -> int:
        """Where the log starts: retention's `log_start` txn if any, else the first offset
        still stored; the high watermark when nothing is stored. Offsets between it and the
        first stored offset were compacted away: reads skip them (Kafka's gaps)."""
        stored = self.files[0].min_offset if self.files else self.high_watermark
        if self.start_offset is None:
            return stored
        return min(self.start_offset, stored)

    @property
    def active_segment(self) -> int | None:
        return max((f.segment for f in self.files), default=None)

    def segment_files(self, segment: int) -> list[DataFile]:
        return [f for f in self.files if f.segment == segment]


class DeltaPartitionLog:
    """The partition log of one topic partition, stored as a Delta table at `table_uri`."""

    def __init__(
        self,
        table_uri: str,
        dt: DeltaTable,
        *,
        tail_records_max: int = 20_000,
        fenced: bool = True,
    ) -> None:
        self.table_uri = table_uri
        self._fenced = fenced  # False only in the control runs of the fault tests
        self._dt = dt
        self._store = open_store(table_uri)
        self._log = self._store.child(log_commit.LOG_DIR)
        # Fenced tables commit appends directly on every store (log_commit.py); `_dt` is then
        # refreshed only by `reload`. The unfenced control runs keep delta-rs: no txn.
        self._direct = fenced
        self._tail_records_max = tail_records_max
        self._snapshot = _load_snapshot(dt, fenced)
        self._held: Leadership | None = None  # leadership this writer asserts in every append
        self._upkeep_dt: DeltaTable | None = None  # housekeeping's own view of the table
        self._checkpointed_version = 0
        # App txns of this writer's own direct commits since `_dt` was loaded (`_dt` lags
        # behind them; any other writer's commit makes this writer reload first).
        self._own_app_versions: dict[str, int] = {}

    # ---- lifecycle -------------------------------------------------------------------------

    @classmethod
    def create(cls, table_uri: str) -> None:
        """Create the empty table (protocol 1/2, partitioned by `segment`). Idempotent."""
        try:
            DeltaTable.create(
                table_uri,
                PARTITION_SCHEMA,
                storage_options=delta_storage_options(),
                mode="ignore",
                partition_by=[PARTITION_COLUMN],
                configuration=TABLE_CONFIGURATION,
            )
        except (OSError, DeltaError) as error:
            raise StorageUnavailable(f"Cannot create table {table_uri}: {error}") from error

    @classmethod
    def open(
        cls, table_uri: str, *, tail_records_max: int = 20_000, fenced: bool = True
    ) -> DeltaPartitionLog:
        """Load the table, check its protocol against the allow-list, build the file index.

        Raises:
            CorruptPartition: no table there, or (local roots) a damaged commit file or
                checkpoint.
            StorageUnavailable: the table could not be read (retriable).
        """
        if paths.is_local(table_uri) and fenced:
            # Local disks only: it reads every commit since the checkpoint, one request each
            # on an object store, where a torn commit cannot happen (whole-object PUTs).
            _check_commit_files(table_uri)
        try:
            dt = _load_table(table_uri)
        except TableNotFoundError as error:
            raise CorruptPartition(f"No Delta table at {table_uri}: {error}") from error
        check_protocol(dt.protocol(), table_uri)
        return cls(table_uri, dt, tail_records_max=tail_records_max, fenced=fenced)

    def reload(self) -> LogSnapshot:
        """Catch up with commits made by others (other nodes, maintenance jobs)."""
        try:
            if self._direct:
                # Direct appends leave `_dt` behind by any number of versions, whose commit
                # files housekeeping may have trimmed: load from the latest checkpoint.
                self._dt = _load_table(self.table_uri)
            else:
                self._dt.update_incremental()
        except (OSError, DeltaError) as error:
            raise StorageUnavailable(f"Cannot refresh {self.table_uri}: {error}") from error
        return self._adopt_loaded_table()

    def _adopt_loaded_table(self) -> LogSnapshot:
        check_protocol(self._dt.protocol(), self.table_uri)
        self._snapshot = _load_snapshot(self._dt, self._fenced)
        self._own_app_versions = {}
        return self._snapshot

    def catch_up(self) -> bool:
        """Reload if another writer committed since the loaded snapshot (a Spark task that
        appended directly); True if it did. Direct mode only stats the next commit file."""
        if self._direct:
            try:
                if not log_commit.commit_exists(self._log, self._snapshot.table_version + 1):
                    return False
            except OSError as error:
                raise StorageUnavailable(f"Cannot read {self.table_uri}: {error}") from error
            self.reload()
            return True
        before = self._dt.version()
        try:
            self._dt.update_incremental()  # lists only the log after `before`
        except (OSError, DeltaError) as error:
            raise StorageUnavailable(f"Cannot refresh {self.table_uri}: {error}") from error
        if self._dt.version() == before:
            return False  # the common case: no file index to rebuild
        self._adopt_loaded_table()
        return True

    # ---- leadership --------------------------------------------------------------------------

    def leader(self) -> Leadership | None:
        """The leader named by the loaded snapshot (call `reload` first for the latest)."""
        return Leadership.from_version(self._dt.transaction_version(LEADER_APP_ID))

    @property
    def held_leadership(self) -> Leadership | None:
        return self._held

    def commit_leadership(
        self, node_id: int, *, expected: Leadership | None, hold: bool
    ) -> Leadership:
        """Name `node_id` leader with the next epoch, if the leader is still `expected`.

        A txn-only commit: the `leader` txn is a compare-and-set like the offsets, so of two
        nodes taking over at once exactly one wins. Every append of the leader carries its
        `leader` txn, so a deposed leader's next append is rejected, even on an empty table.
        With `hold`, this writer asserts the new leadership in its appends (it named itself);
        without, it hands the partition over and stops asserting any.

        Raises:
            LeadershipConflict: the leader is no longer `expected`, or another change won.
        """
        if not 0 <= node_id < NODE_IDS:
            raise ValueError(f"node ids are 0..{NODE_IDS - 1}, got {node_id}")
        self.reload()
        current = self.leader()
        if current != expected:
            raise LeadershipConflict(
                f"{self.table_uri}: leader is {current}, not {expected}; not taking over."
            )
        epoch = 0 if current is None else current.epoch + 1
        new = Leadership(epoch, node_id)
        properties = CommitProperties(app_transactions=[Transaction(LEADER_APP_ID, new.version)])
        try:
            self._dt.create_write_transaction(
                [],
                mode="append",
                schema=PARTITION_SCHEMA,
                partition_by=[PARTITION_COLUMN],
                commit_properties=properties,
            )
        except CommitFailedError as error:
            self.reload()
            raise LeadershipConflict(
                f"{self.table_uri}: another node changed the leader first."
            ) from error
        except (OSError, DeltaError) as error:
            raise StorageUnavailable(f"Commit to {self.table_uri} failed: {error}") from error
        self.reload()
        self._held = new if hold else None
        return new

    # ---- reads -----------------------------------------------------------------------------

    @property
    def snapshot(self) -> LogSnapshot:
        return self._snapshot

    def bounds(self) -> PartitionBounds:
        snapshot = self._snapshot
        return PartitionBounds(snapshot.log_start_offset, snapshot.high_watermark)

    def read(self, *, from_offset: int, records_max: int, bytes_max: int) -> FetchResult:
        """Records from `from_offset` on, at most `records_max`, about `bytes_max` of key+value.

        At least one record is returned when one exists, even if it alone exceeds `bytes_max`
        (as Kafka does, so a large record never blocks a consumer).

        Raises:
            OffsetOutOfRange: `from_offset` is below log_start_offset or above the high watermark.
        """
        snapshot = self._snapshot
        start, end = snapshot.log_start_offset, snapshot.high_watermark
        if from_offset < start or from_offset > end:
            raise OffsetOutOfRange(from_offset, start, end)
        records = _empty_records()
        if from_offset < end and records_max > 0:
            records = self._read_tail(snapshot, from_offset, records_max)
            if records is None:
                records = self._read_files(snapshot, from_offset, records_max, bytes_max)
            records = _limit_bytes(records, bytes_max)
        return FetchResult(records, start, end)

    def _read_tail(self, snapshot: LogSnapshot, from_offset: int, records_max: int):
        if not snapshot.tail or from_offset < snapshot.tail[0].base_offset:
            return None
        chunks, count = [], 0
        for chunk in snapshot.tail:
            last = chunk.base_offset + chunk.records.num_rows - 1
            if last < from_offset:
                continue
            skip = max(0, from_offset - chunk.base_offset)
            part = chunk.records.slice(skip, records_max - count).select(list(RECORD_COLUMNS))
            chunks.append(part)
            count += part.num_rows
            if count >= records_max:
                break
        return pa.concat_tables(chunks) if chunks else _empty_records()

    def _read_files(self, snapshot: LogSnapshot, from_offset: int, records_max: int, bytes_max):
        max_offsets = [f.max_offset for f in snapshot.files]
        index = bisect.bisect_left(max_offsets, from_offset)
        tables, count, size = [], 0, 0
        for data_file in snapshot.files[index:]:
            table = self._read_file(data_file, from_offset)
            table = table.slice(0, records_max - count)
            tables.append(table)
            count += table.num_rows
            size += _payload_bytes(table)
            if count >= records_max or size >= bytes_max:
                break
        return pa.concat_tables(tables) if tables else _empty_records()

    def _read_file(self, data_file: DataFile, from_offset: int) -> pa.Table:
        # Row-group statistics skip the part of a large (optimized) file before `from_offset`.
        filters = [("offset", ">=", from_offset)] if data_file.min_offset < from_offset else None
        try:
            # The schema is given, not inferred: files rewritten by delta-rs store binary_view
            # columns, which the offset filter cannot evaluate before a cast.
            return pq.read_table(
                self._store.open_input(data_file.path),
                columns=list(RECORD_COLUMNS),
                filters=filters,
                schema=_RECORDS_SCHEMA,
            )
        except OSError as error:
            raise StorageUnavailable(
                f"Cannot read {self.table_uri}/{data_file.path}: {error}"
            ) from error

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """Kafka's ListOffsets by timestamp: the earliest offset whose record timestamp is at
        or after `timestamp_ms`, from the loaded snapshot.

        Record timestamps are not monotonic in offsets (CreateTime comes from producers), so
        this scans in offset order rather than searching: files whose statistics put every
        timestamp below `timestamp_ms` are skipped unread, the others are read (offset and
        timestamp columns only) until one holds a match; offsets held by the in-memory tail
        are taken from it.

        Returns:
            The offset, or None when no stored record is that recent (Kafka then answers with
            the high watermark, "latest").

        Raises:
            StorageUnavailable: a data file could not be read.
        """
        snapshot = self._snapshot
        tail = [c for c in snapshot.tail if c.base_offset >= snapshot.log_start_offset]
        tail_start = tail[0].base_offset if tail else snapshot.high_watermark
        for data_file in snapshot.files:
            if data_file.min_offset >= tail_start:
                break
            if data_file.max_timestamp_ms is not None and data_file.max_timestamp_ms < timestamp_ms:
                continue
            try:
                table = self._read_parquet(data_file.path, ["offset", "timestamp"])
            except OSError as error:
                raise StorageUnavailable(
                    f"Cannot read {self.table_uri}/{data_file.path}: {error}"
                ) from error
            found = _first_offset_at_or_after(table, timestamp_ms)
            if found is not None:
                return found
        for chunk in tail:
            found = _first_offset_at_or_after(chunk.records, timestamp_ms)
            if found is not None:
                return found
        return None

    # ---- idempotent producers --------------------------------------------------------------

    def producer_states(self) -> ProducerStates:
        """Producers' last committed spans, rebuilt from the newest PRODUCER_STATE_FILES_MAX
        data files (files whose statistics show no producer id are skipped unread).

        A span is a run of one producer epoch's records with consecutive sequences at
        consecutive offsets; a retried batch inside it is recognised as a duplicate. A producer
        whose records are all older than the bound is unknown (UNKNOWN_PRODUCER_ID unless it
        starts a new epoch at sequence 0).
        """
        files = self._snapshot.files[-PRODUCER_STATE_FILES_MAX:]
        tables = [self._read_producer_rows(f) for f in files if f.has_producer_ids is not False]
        tables = [table for table in tables if table.num_rows]
        if not tables:
            return ProducerStates()
        rows = pa.concat_tables(tables).sort_by("offset").to_pydict()
        return ProducerStates.from_spans(_spans_from_rows(rows))

    def older_producer_states(
        self, producer_ids: Collection[int], *, files_max: int = PRODUCER_LOOKUP_FILES_MAX
    ) -> ProducerStates:
        """The state of `producer_ids` from the data files older than those producer_states
        reads, newest first, until each is found or `files_max` files were read.

        For a producer that paused while others wrote more than PRODUCER_STATE_FILES_MAX
        commits and then met a new leader: its next batch was UNKNOWN_PRODUCER_ID, though
        Kafka would have kept its state (chaos T2 found it).
        """
        wanted = set(producer_ids)
        older = self._snapshot.files[:-PRODUCER_STATE_FILES_MAX][-files_max:]
        tables = []
        for data_file in reversed(older):
            if not wanted:
                break
            if data_file.has_producer_ids is False:
                continue
            table = self._read_producer_rows(data_file)
            ids = table.column("producer_id")
            table = table.filter(pc.is_in(ids, pa.array(sorted(wanted), type=ids.type)))
            if table.num_rows:
                tables.append(table)
                wanted -= set(table.column("producer_id").unique().to_pylist())
        if not tables:
            return ProducerStates()
        rows = pa.concat_tables(tables).sort_by("offset").to_pydict()
        return ProducerStates.from_spans(_spans_from_rows(rows))

    def _read_producer_rows(self, data_file: DataFile) -> pa.Table:
        try:
            table = self._read_parquet(data_file.path, list(_PRODUCER_COLUMNS))
        except OSError as error:
            raise StorageUnavailable(
                f"Cannot read {self.table_uri}/{data_file.path}: {error}"
            ) from error
        return table.filter(pc.is_valid(table.column("producer_id")))

    # ---- append ----------------------------------------------------------------------------

    def append(
        self,
        records: Sequence[NewRecord],
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
            StorageUnavailable: the storage could not be written.
        """
        if not records:
            raise ValueError("append needs at least one record")
        if transaction is not None and transaction.app_id in RESERVED_APP_IDS:
            raise ValueError(f"txn app id {transaction.app_id!r} is reserved by the log")
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        for attempt in range(APPEND_ATTEMPTS_MAX):
            base_offset = self._snapshot.high_watermark
            try:
                return self._append_once(records, config, now_ms, producers, transaction)
            except (CommitFailedError, _VersionTaken) as error:
                self.reload()
                if self._held is not None and self.leader() != self._held:
                    self._held = None
                    raise LeadershipConflict(
                        f"{self.table_uri}: this node was deposed as leader (now "
                        f"{self.leader()}); nothing was appended."
                    ) from error
                if _is_txn_conflict(error) or self._snapshot.high_watermark != base_offset:
                    raise AppendConflict(
                        f"Another writer committed offsets to {self.table_uri} after this "
                        f"writer's snapshot; nothing was appended."
                    ) from error
                if attempt == APPEND_ATTEMPTS_MAX - 1:
                    raise StorageUnavailable(
                        f"Commit to {self.table_uri} failed: {error}"
                    ) from error
        raise AssertionError("unreachable")

    def append_once(
        self,
        records: Sequence[NewRecord],
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

    def app_version(self, app_id: str) -> int | None:
        """The version of txn `app_id` in the loaded snapshot (None: never committed)."""
        own = self._own_app_versions.get(app_id)
        return own if own is not None else self._dt.transaction_version(app_id)

    def _append_once(
        self, records, config: TopicConfig, now_ms: int, producers, transaction
    ) -> AppendResult:
        snapshot = self._snapshot
        base_offset = snapshot.high_watermark
        last_offset = base_offset + len(records) - 1
        segment = _segment_for_append(snapshot, base_offset, config, now_ms)
        table = _records_to_arrow(records, base_offset, now_ms, config.log_append_time, producers)
        data_file, action = self._write_data_file(table, segment, now_ms)
        if self._direct:
            try:
                self._commit_direct(action, last_offset, now_ms, transaction)
                self._advance(self._snapshot, data_file, table)
                if transaction is not None:
                    self._own_app_versions[transaction.app_id] = transaction.version
            except _VisibleAfterReload:
                pass  # the reloaded snapshot holds the commit (without it in the tail)
        else:
            self._commit([action], last_offset, transaction)
            self._after_commit(snapshot, data_file, table)
        return AppendResult(base_offset, last_offset, now_ms, self._snapshot.table_version, segment)

    def _write_data_file(
        self, table: pa.Table, segment: int, now_ms: int, *, data_change: bool = True
    ):
        relative = f"{PARTITION_COLUMN}={segment}/part-{uuid.uuid4().hex}.zstd.parquet"
        try:
            size = write_parquet(self._store, relative, table)
        except OSError as error:
            raise StorageUnavailable(
                f"Cannot write {self.table_uri}/{relative}: {error}"
            ) from error
        offsets = table.column("offset")
        has_ids = table.column("producer_id").null_count < table.num_rows
        max_micros = pc.max(table.column("timestamp").cast(pa.int64())).as_py()
        data_file = DataFile(
            relative,
            segment,
            offsets[0].as_py(),
            offsets[-1].as_py(),
            table.num_rows,
            size,
            now_ms,
            has_ids,
            -(-max_micros // 1000),  # ceiled, as in the file's statistics (_file_stats)
        )
        action = AddAction(
            relative,
            size,
            {PARTITION_COLUMN: str(segment)},
            now_ms,
            data_change,
            _file_stats(table),
        )
        return data_file, action

    def _commit(
        self, actions: list[AddAction], last_offset: int, transaction: AppTransaction | None
    ) -> None:
        transactions = [Transaction(LOG_APP_ID, last_offset)]
        if self._held is not None:
            transactions.append(Transaction(LEADER_APP_ID, self._held.version))
        if transaction is not None:
            transactions.append(Transaction(transaction.app_id, transaction.version))
        if not self._fenced:
            transactions = []
        properties = CommitProperties(app_transactions=transactions or None)
        try:
            self._dt.create_write_transaction(
                actions,
                mode="append",
                schema=PARTITION_SCHEMA,
                partition_by=[PARTITION_COLUMN],
                commit_properties=properties,
                post_commithook_properties=COMMIT_HOOKS,
            )
        except CommitFailedError:
            raise
        except (OSError, DeltaError) as error:
            raise StorageUnavailable(f"Commit to {self.table_uri} failed: {error}") from error

    def _commit_direct(
        self, add: AddAction, last_offset: int, now_ms: int, transaction: AppTransaction | None
    ) -> None:
        """Create the next commit file; step over housekeeping's rearrangements.

        Raises:
            _VersionTaken: another commit changed records, txns or metadata first.
        """
        transactions = [(LOG_APP_ID, last_offset)]
        if self._held is not None:
            transactions.append((LEADER_APP_ID, self._held.version))
        if transaction is not None:
            transactions.append((transaction.app_id, transaction.version))
        action = log_commit.add_action(
            add.path,
            int(add.partition_values[PARTITION_COLUMN]),
            add.size,
            add.modification_time,
            add.stats,
        )
        payload = log_commit.append_commit(action, transactions, now_ms)
        while True:
            version = self._snapshot.table_version + 1
            try:
                if log_commit.put_if_absent(self._log, version, payload):
                    self._check_not_shadowed(version, add.path)
                    return
                winner = log_commit.read_commit(self._log, version)
            except OSError as error:
                raise StorageUnavailable(f"Commit to {self.table_uri} failed: {error}") from error
            rearrangement = None if winner is None else log_commit.as_rearrangement(winner)
            if rearrangement is None:
                raise _VersionTaken(version)
            self._snapshot = _rearranged(self._snapshot, version, rearrangement)

    def _check_not_shadowed(self, version: int, data_path: str) -> None:
        """A writer paused for longer than the log grace can find its next version free
        because housekeeping trimmed it: its commit would sit below the latest checkpoint,
        where no reader looks. So a commit below the checkpoint counts only if the reloaded
        table shows it (a checkpoint can legitimately follow it within microseconds).

        Raises:
            _VisibleAfterReload: it is visible; the snapshot has been reloaded.
            _VersionTaken: it is not: nothing was appended (the file is an orphan for vacuum).
        """
        if not self._may_be_below_checkpoint(version):
            return
        self.reload()
        if any(f.path == data_path for f in self._snapshot.files):
            raise _VisibleAfterReload()
        raise _VersionTaken(version)

    def _may_be_below_checkpoint(self, version: int) -> bool:
        """Whether `_last_checkpoint` names a version after commit `version`, or cannot say.

        Asked after the commit is durable, so an unreadable hint (garbage, torn by a disk
        fault) must not raise: that failed a committed append with a non-retriable 500 (found
        by the T5 disk-fault tests). delta-rs ignores such a hint and lists the log; the
        commit is checked by a reload then, as for a commit below the checkpoint.
        """
        try:
            return log_commit.last_checkpoint_version(self._log) > version
        except (OSError, ValueError, KeyError, TypeError):
            return True

    def _advance(self, before: LogSnapshot, data_file: DataFile, table: pa.Table) -> None:
        """The snapshot after our own direct commit: one more version, file and tail chunk."""
        self._snapshot = dataclasses.replace(
            before,
            table_version=before.table_version + 1,
            high_watermark=data_file.max_offset + 1,
            files=(*before.files, data_file),
            tail=self._next_tail(before.tail, data_file.min_offset, table),
        )

    def _after_commit(self, before: LogSnapshot, data_file: DataFile, table: pa.Table) -> None:
        """Advance the loaded snapshot past our own commit (the next CAS must include it)."""
        try:
            self._dt.update_incremental()
        except (OSError, DeltaError) as error:
            raise StorageUnavailable(f"Cannot refresh {self.table_uri}: {error}") from error
        tail = self._next_tail(before.tail, data_file.min_offset, table)
        if self._dt.version() != before.table_version + 1:
            # Other commits landed too (housekeeping rewrote files; appends of others would
            # have failed our CAS): re-read the file index; the records are unchanged.
            rebuilt = _load_snapshot(self._dt, self._fenced)
            self._snapshot = dataclasses.replace(rebuilt, tail=tail)
            return
        self._snapshot = dataclasses.replace(
            before,
            table_version=before.table_version + 1,
            high_watermark=data_file.max_offset + 1,
            files=(*before.files, data_file),
            tail=tail,
        )

    def housekeeping(self) -> int:
        """Keep the table cheap to commit to: merge small files, checkpoint, trim the log.

        Safe to run in another thread while this log appends: it works on a DeltaTable of its
        own and never touches this log's snapshot (the next append sees its commits as a
        version jump and re-reads the file index). The compaction changes no record
        (`dataChange=false`), so appends do not conflict with it.

        After each checkpoint the commit files and checkpoints older than the *previous*
        checkpoint are deleted once LOG_GRACE_MS old: Delta's own log cleanup with a retention
        bounded by count as well as time, so `_delta_log` does not grow with the commit rate.

        Returns:
            The number of data files merged away.
        """
        if self._direct:
            return self._housekeeping_direct()
        dt = self._upkeep_table()
        try:
            dt.update_incremental()
            merged = self._compact_run(dt, _small_file_run(tuple(_sorted_files(dt))))
            self._checkpoint_and_trim(dt)
        except (OSError, DeltaError):
            self._upkeep_dt = None  # reload from scratch next time
            return 0
        return merged

    def _housekeeping_direct(self) -> int:
        """Housekeeping of a directly committed table: the compaction plans on the writer's
        snapshot and commits directly; delta-rs catches up only to write a checkpoint."""
        snapshot = self._snapshot  # the writer's, read-only here
        try:
            merged = self._compact_direct(snapshot, _small_file_run(snapshot.files))
            if snapshot.table_version - self._checkpointed_version >= CHECKPOINT_INTERVAL:
                dt = self._upkeep_table()
                dt.update_incremental()
                self._checkpoint_and_trim(dt)
        except (OSError, DeltaError):
            self._upkeep_dt = None  # reload from scratch next time
            return 0
        return merged

    def _upkeep_table(self) -> DeltaTable:
        if self._upkeep_dt is None:
            self._upkeep_dt = DeltaTable(self.table_uri, storage_options=delta_storage_options())
        return self._upkeep_dt

    def _compact_run(self, dt: DeltaTable, run: list[DataFile]) -> int:
        if not run:
            return 0
        table = pa.concat_tables([self._read_whole_file(f) for f in run])
        oldest_ms = min(f.modification_time_ms for f in run)
        _, add = self._write_data_file(table, run[0].segment, oldest_ms, data_change=False)
        dt.create_write_transaction(
            [*(_remove_action(f) for f in run), add],
            mode="append",
            schema=PARTITION_SCHEMA,
            partition_by=[PARTITION_COLUMN],
            post_commithook_properties=COMMIT_HOOKS,
        )
        dt.update_incremental()
        return len(run)

    def _compact_direct(self, snapshot: LogSnapshot, run: list[DataFile]) -> int:
        """Rewrite `run` as one file in a direct commit after `snapshot`'s version, stepping
        over appends; gives up (0) if a commit removed any of its files first."""
        if not run:
            return 0
        table = pa.concat_tables(self._run_tables(snapshot, run))
        oldest_ms = min(f.modification_time_ms for f in run)
        merged, add = self._write_data_file(table, run[0].segment, oldest_ms, data_change=False)
        payload = log_commit.rewrite_commit(
            add=log_commit.add_action(
                add.path, run[0].segment, add.size, oldest_ms, add.stats, data_change=False
            ),
            removes=[
                log_commit.remove_action(f.path, f.segment, f.size_bytes, int(time.time() * 1000))
                for f in run
            ],
            timestamp_ms=int(time.time() * 1000),
        )
        removed = {f.path for f in run}
        version = snapshot.table_version + 1
        while not log_commit.put_if_absent(self._log, version, payload):
            winner = log_commit.read_commit(self._log, version)
            held = None if self._held is None else self._held.version
            if winner is None or not log_commit.leaves_files(winner, removed, held):
                self._store.delete(merged.path)
                return 0
            version += 1
        return len(run)

    def _run_tables(self, snapshot: LogSnapshot, run: list[DataFile]) -> list[pa.Table]:
        """The files' records, from the in-memory tail where it still holds a file's commit
        (the small files compaction merges are mostly recent ones), else from the file."""
        chunks = {chunk.base_offset: chunk.records for chunk in snapshot.tail}
        tables = []
        for data_file in run:
            chunk = chunks.get(data_file.min_offset)
            if chunk is not None and chunk.num_rows == data_file.num_records:
                tables.append(chunk)
            else:
                tables.append(self._read_whole_file(data_file))
        return tables

    def _catch_up_direct(self) -> None:
        """Apply the rearrangements committed after this log's snapshot; reload if any later
        commit is something else."""
        while True:
            version = self._snapshot.table_version + 1
            winner = log_commit.read_commit(self._log, version)
            if winner is None:
                return
            change = log_commit.as_rearrangement(winner)
            if change is None:
                self.reload()
                return
            try:
                self._snapshot = _rearranged(self._snapshot, version, change)
            except _VersionTaken:
                self.reload()
                return

    def _checkpoint_and_trim(self, dt: DeltaTable) -> None:
        version = dt.version()
        if version - self._checkpointed_version < CHECKPOINT_INTERVAL:
            return
        dt.create_checkpoint()
        previous, self._checkpointed_version = self._checkpointed_version, version
        if previous > 0:
            self._delete_log_files_before(previous)

    def _delete_log_files_before(self, keep_from_version: int) -> None:
        cutoff_ms = int(time.time() * 1000) - LOG_GRACE_MS
        for stored in self._log.list_temporaries():
            if stored.modified_ms < cutoff_ms:
                self._log.delete(stored.name)  # a direct commit crashed before linking it
        for stored in self._log.list():
            name = stored.name
            head = name.split(".", 1)[0]
            if not (head.isdigit() and (name.endswith(".json") or ".checkpoint." in name)):
                continue
            if int(head) < keep_from_version and stored.modified_ms < cutoff_ms:
                self._log.delete(name)

    # ---- small-file compaction ----------------------------------------------------------------

    # ---- maintenance (retention, key compaction, file optimization) -------------------------

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
            self._write_data_file(table, segment, now_ms, data_change=data_change)
            for segment, table in replacements
            if table.num_rows  # a segment whose records all go leaves no file
        ]
        before = self._snapshot
        if self._direct:
            version = self._commit_maintenance_direct(
                removes, written, operation, data_change, transactions, now_ms
            )
            committed = version is not None and self._maintenance_visible(version, removes, written)
        else:
            version = None
            committed = self._commit_maintenance_delta_rs(
                removes, written, data_change, transactions
            )
        if not committed:
            for data_file, _ in written:
                self._store.delete(data_file.path)
        if committed and version == before.table_version + 1:
            # Nothing came in between: the new snapshot is known without reading the table
            # (a reload costs as much as the whole job on a partition with a long history).
            self._snapshot = _after_maintenance(before, removes, written, transactions)
            for txn in transactions:
                self._own_app_versions[txn.app_id] = txn.version
        elif self._snapshot is before:
            self.reload()
        return committed

    def _maintenance_visible(self, version: int, removes, written) -> bool:
        """As for appends (_check_not_shadowed): a commit created below the latest checkpoint,
        by a job paused past the log grace, counts only if the reloaded table shows it."""
        if not self._may_be_below_checkpoint(version):
            return True
        live = {f.path for f in self.reload().files}
        return all(f.path not in live for f in removes) and all(
            data_file.path in live for data_file, _ in written
        )

    def _commit_maintenance_direct(
        self, removes, written, operation: str, data_change: bool, transactions, now_ms: int
    ) -> int | None:
        """The version committed, or None when a commit in between conflicts."""
        payload = log_commit.maintenance_commit(
            adds=[
                log_commit.add_action(
                    add.path,
                    data_file.segment,
                    add.size,
                    add.modification_time,
                    add.stats,
                    data_change=data_change,
                )
                for data_file, add in written
            ],
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
        removed = {f.path for f in removes}
        app_ids = tuple(t.app_id for t in transactions)
        version = self._snapshot.table_version + 1
        try:
            while not log_commit.put_if_absent(self._log, version, payload):
                winner = log_commit.read_commit(self._log, version)
                if winner is None or not log_commit.keeps_files(winner, removed, app_ids):
                    return None
                version += 1
        except OSError as error:
            raise StorageUnavailable(f"Commit to {self.table_uri} failed: {error}") from error
        return version

    def _commit_maintenance_delta_rs(self, removes, written, data_change, transactions) -> bool:
        txns = [Transaction(t.app_id, t.version) for t in transactions] or None
        try:
            self._dt.create_write_transaction(
                [*(_remove_action(f, data_change) for f in removes), *(a for _, a in written)],
                mode="append",
                schema=PARTITION_SCHEMA,
                partition_by=[PARTITION_COLUMN],
                commit_properties=CommitProperties(app_transactions=txns),
                post_commithook_properties=COMMIT_HOOKS,
            )
        except CommitFailedError:
            return False
        except (OSError, DeltaError) as error:
            raise StorageUnavailable(f"Commit to {self.table_uri} failed: {error}") from error
        return True

    def read_files(self, files: Sequence[DataFile]) -> pa.Table:
        """Every column of `files` (FILE_SCHEMA), in the order given."""
        if not files:
            return FILE_SCHEMA.empty_table()
        # Files rewritten by other engines may store view types: one schema for all.
        return pa.concat_tables([self._read_whole_file(f).cast(FILE_SCHEMA) for f in files])

    def maybe_compact_files(self) -> int:
        """Housekeeping's small-file compaction, run on this log's own table and snapshot
        (for tools and tests that drive a log directly, between their appends). Not safe
        concurrently with `append` or `housekeeping` on the same object: it replaces the
        snapshot.

        Returns:
            The number of files replaced (0 when no run is long enough).
        """
        if self._direct:
            merged = self._compact_direct(self._snapshot, _small_file_run(self._snapshot.files))
            self._catch_up_direct()
            return merged
        try:
            merged = self._compact_run(self._dt, _small_file_run(self._snapshot.files))
        except (OSError, DeltaError):
            self.reload()  # e.g. retention removed these files meanwhile: try again later
            return 0
        if merged:
            tail = self._snapshot.tail
            rebuilt = _load_snapshot(self._dt, self._fenced)
            self._snapshot = dataclasses.replace(rebuilt, tail=tail)
        return merged

    def _read_whole_file(self, data_file: DataFile) -> pa.Table:
        try:
            return self._read_parquet(data_file.path, FILE_SCHEMA.names)
        except OSError as error:
            raise StorageUnavailable(
                f"Cannot read {self.table_uri}/{data_file.path}: {error}"
            ) from error

    def _read_parquet(self, path: str, columns: list[str]) -> pa.Table:
        """A whole file, without dataset discovery (half the cost of pq.read_table for the
        small files that compaction and the producer-state rebuild read by the dozen)."""
        return read_parquet(self._store, path, columns)

    def _next_tail(self, tail, base_offset: int, table: pa.Table) -> tuple[TailChunk, ...]:
        if self._tail_records_max <= 0:
            return ()
        chunks = [*tail, TailChunk(base_offset, table)]
        rows = sum(chunk.records.num_rows for chunk in chunks)
        while len(chunks) > 1 and (
            rows - chunks[0].records.num_rows >= self._tail_records_max
            or len(chunks) > TAIL_COMMITS_MAX
        ):
            rows -= chunks.pop(0).records.num_rows
        return tuple(chunks)


# ---- helpers (pure) --------------------------------------------------------------------------

_RECORDS_SCHEMA = pa.schema([FILE_SCHEMA.field(name) for name in RECORD_COLUMNS])


def _empty_records() -> pa.Table:
    return _RECORDS_SCHEMA.empty_table()


def _is_txn_conflict(error: CommitFailedError) -> bool:
    return "Concurrent transaction" in str(error)


def _first_offset_at_or_after(table: pa.Table, timestamp_ms: int) -> int | None:
    """The smallest offset in `table` whose timestamp is >= `timestamp_ms` (any row order)."""
    threshold = pa.scalar(timestamp_ms * 1000, TIMESTAMP_TYPE)
    matches = pc.greater_equal(table.column("timestamp"), threshold)
    return pc.min(pc.filter(table.column("offset"), matches)).as_py()


def _payload_bytes(table: pa.Table) -> int:
    return table.column("key").nbytes + table.column("value").nbytes


def _limit_bytes(records: pa.Table, bytes_max: int) -> pa.Table:
    """Keep the longest prefix within `bytes_max` of key+value bytes, and at least one record."""
    if records.num_rows <= 1 or _payload_bytes(records) <= bytes_max:
        return records
    sizes = pc.add(
        pc.fill_null(pc.binary_length(records.column("key")), 0),
        pc.fill_null(pc.binary_length(records.column("value")), 0),
    )
    cumulative = pc.cumulative_sum(sizes)
    keep = pc.sum(pc.less_equal(cumulative, bytes_max)).as_py() or 0
    return records.slice(0, max(1, keep))


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


def _records_to_arrow(
    records: Sequence[NewRecord],
    base_offset: int,
    now_ms: int,
    log_append_time: bool,
    producers: ProducerColumns | None = None,
) -> pa.Table:
    count = len(records)
    if log_append_time:
        timestamps = [now_ms * 1000] * count
        timestamp_type = TIMESTAMP_TYPE_LOG_APPEND_TIME
    else:
        timestamps = [
            (r.timestamp_ms if r.timestamp_ms is not None else now_ms) * 1000 for r in records
        ]
        timestamp_type = TIMESTAMP_TYPE_CREATE_TIME
    headers = [
        [{"key": k, "value": v} for k, v in r.headers] if r.headers else None for r in records
    ]
    columns = [
        pa.array(range(base_offset, base_offset + count), pa.int64()),
        pa.array(timestamps, TIMESTAMP_TYPE),
        pa.array([timestamp_type] * count, pa.int8()),
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        pa.array(headers, FILE_SCHEMA.field("headers").type),
        *_producer_arrays(producers, count),
    ]
    return pa.Table.from_arrays(columns, schema=FILE_SCHEMA)


def _producer_arrays(producers: ProducerColumns | None, count: int) -> list[pa.Array]:
    if producers is None or all(p is None for p in producers):
        return [
            pa.nulls(count, pa.int64()),
            pa.nulls(count, pa.int16()),
            pa.nulls(count, pa.int32()),
        ]
    if len(producers) != count:
        raise ValueError("producers needs one entry per record")
    ids, epochs, sequences = zip(*(p or (None, None, None) for p in producers), strict=True)
    return [
        pa.array(ids, pa.int64()),
        pa.array(epochs, pa.int16()),
        pa.array(sequences, pa.int32()),
    ]


def _spans_from_rows(rows: dict[str, list]) -> list[tuple[int, CommittedSpan]]:
    """(producer_id, span) pairs in offset order from rows sorted by offset."""
    open_runs: dict[int, list[int]] = {}  # producer -> [epoch, base_seq, count, base_off, ms]
    closed: list[tuple[int, list[int]]] = []
    for offset, micros, producer, epoch, sequence in zip(
        *(rows[name] for name in _PRODUCER_COLUMNS), strict=True
    ):
        run = open_runs.get(producer)
        if run and run[0] == epoch and sequence == run[1] + run[2] and offset == run[3] + run[2]:
            run[2] += 1
            continue
        if run:
            closed.append((producer, run))
        open_runs[producer] = [epoch, sequence, 1, offset, _micros_to_ms(micros)]
    closed.extend(open_runs.items())
    closed.sort(key=lambda item: item[1][3])
    return [(producer, CommittedSpan(*run)) for producer, run in closed]


def _micros_to_ms(value) -> int:
    if isinstance(value, int):
        return value // 1000
    return int(value.timestamp() * 1000)


def _file_stats(table: pa.Table) -> str:
    """Delta file statistics: offsets exact; timestamps widened to whole milliseconds (Delta
    stores millisecond precision, and a truncated maximum would let readers skip a file)."""
    offsets = table.column("offset")
    micros = table.column("timestamp").cast(pa.int64())
    bounds = pc.min_max(micros)
    min_ms = bounds["min"].as_py() // 1000
    max_ms = -(-bounds["max"].as_py() // 1000)
    stats = {
        "numRecords": table.num_rows,
        "minValues": {"offset": offsets[0].as_py(), "timestamp": _iso_ms(min_ms)},
        "maxValues": {"offset": offsets[-1].as_py(), "timestamp": _iso_ms(max_ms)},
        "nullCount": {"offset": 0, "timestamp": 0, "timestamp_type": 0},
    }
    # producer_id statistics let the producer-state rebuild skip files without idempotent
    # records (nullCount == numRecords).
    producer_ids = table.column("producer_id")
    stats["nullCount"]["producer_id"] = producer_ids.null_count
    if producer_ids.null_count < table.num_rows:
        id_bounds = pc.min_max(producer_ids)
        stats["minValues"]["producer_id"] = id_bounds["min"].as_py()
        stats["maxValues"]["producer_id"] = id_bounds["max"].as_py()
    return json.dumps(stats, separators=(",", ":"))


def _iso_ms(epoch_ms: int) -> str:
    seconds, millis = divmod(epoch_ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def checkpoint_table(table_uri: str) -> None:
    """Write a checkpoint and run Delta's own log cleanup (jobs, for idle partitions)."""
    try:
        table = _load_table(table_uri)
        table.create_checkpoint()
        table.cleanup_metadata()
    except (OSError, DeltaError) as error:
        raise StorageUnavailable(f"Cannot checkpoint {table_uri}: {error}") from error


def vacuum_table(table_uri: str, *, retention_hours: int, dry_run: bool) -> list[str]:
    """Delete (or with `dry_run` list) data files the log removed more than
    `retention_hours` ago. Lite mode: files the log never committed are not candidates, so a
    writer's file that is not committed yet is never deleted. The caller enforces its own
    minimum retention (jobs/plans.py), not delta-rs's 7 days."""
    try:
        return DeltaTable(table_uri, storage_options=delta_storage_options()).vacuum(
            retention_hours=retention_hours,
            dry_run=dry_run,
            enforce_retention_duration=False,
            full=False,
        )
    except (OSError, DeltaError) as error:
        raise StorageUnavailable(f"Cannot vacuum {table_uri}: {error}") from error


def _after_maintenance(
    before: LogSnapshot, removes, written, transactions: Sequence[AppTransaction]
) -> LogSnapshot:
    """The snapshot after a maintenance commit made right on top of `before`."""
    removed = {f.path for f in removes}
    files = [f for f in before.files if f.path not in removed]
    files += [data_file for data_file, _ in written]
    removed_bases = {f.min_offset for f in removes}
    start = next(
        (t.version for t in transactions if t.app_id == LOG_START_APP_ID), before.start_offset
    )
    return dataclasses.replace(
        before,
        table_version=before.table_version + 1,
        files=tuple(sorted(files, key=lambda f: f.min_offset)),
        tail=tuple(chunk for chunk in before.tail if chunk.base_offset not in removed_bases),
        start_offset=start,
    )


def _load_table(table_uri: str, **options) -> DeltaTable:
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
                return _load_table(table_uri, **options)
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


def _check_commit_files(table_uri: str) -> None:
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


def _load_snapshot(dt: DeltaTable, fenced: bool = True) -> LogSnapshot:
    """Build the file index from the table's add actions and check the offset invariants."""
    last_offset = dt.transaction_version(LOG_APP_ID)
    high_watermark = 0 if last_offset is None else last_offset + 1
    files = sorted(_data_files(dt), key=lambda f: f.min_offset)
    if not fenced:  # control runs only: no txn to trust, and overlaps are what they show
        end = max((f.max_offset + 1 for f in files), default=0)
        return LogSnapshot(dt.version(), end, tuple(files))
    for previous, current in zip(files, files[1:], strict=False):
        if current.min_offset <= previous.max_offset:
            raise CorruptPartition(
                f"{dt.table_uri}: files {previous.path} and {current.path} overlap in offsets."
            )
    if files and files[-1].max_offset >= high_watermark:
        raise CorruptPartition(
            f"{dt.table_uri}: stores offset {files[-1].max_offset} but its offset txn says the "
            f"high watermark is {high_watermark}."
        )
    start = dt.transaction_version(LOG_START_APP_ID)
    return LogSnapshot(dt.version(), high_watermark, tuple(files), start_offset=start)


def _sorted_files(dt: DeltaTable) -> list[DataFile]:
    return sorted(_data_files(dt), key=lambda f: f.min_offset)


def _data_files(dt: DeltaTable) -> list[DataFile]:
    actions = pa.table(dt.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return []
    # Only the columns used: converting all ~26 add-action columns to Python was most of the
    # cost of building the index of a table with thousands of files.
    used = [
        "path",
        f"partition.{PARTITION_COLUMN}",
        "min.offset",
        "max.offset",
        "num_records",
        "size_bytes",
        "modification_time",
        "null_count.producer_id",
    ]
    columns = actions.select([name for name in used if name in actions.column_names]).to_pydict()
    modification = [_epoch_ms(value) for value in columns["modification_time"]]
    id_nulls = columns.get("null_count.producer_id", [None] * actions.num_rows)
    max_timestamps_ms = _max_timestamps_ms(actions)
    return [
        DataFile(
            path=columns["path"][i],
            segment=int(columns[f"partition.{PARTITION_COLUMN}"][i]),
            min_offset=columns["min.offset"][i],
            max_offset=columns["max.offset"][i],
            num_records=columns["num_records"][i],
            size_bytes=columns["size_bytes"][i],
            modification_time_ms=modification[i],
            has_producer_ids=None
            if id_nulls[i] is None
            else id_nulls[i] < columns["num_records"][i],
            max_timestamp_ms=max_timestamps_ms[i],
        )
        for i in range(actions.num_rows)
    ]


def _max_timestamps_ms(actions: pa.Table) -> list[int | None]:
    """Each file's `maxValues.timestamp` in ms. Exact integers, not `datetime.timestamp()`
    floats, whose rounding could shave a millisecond and make a reader skip a file it needs."""
    if "max.timestamp" not in actions.column_names:
        return [None] * actions.num_rows
    micros = actions.column("max.timestamp").cast(pa.int64()).to_pylist()
    return [None if value is None else -(-value // 1000) for value in micros]


class _VersionTaken(Exception):
    """A direct commit found its version taken by a commit that is not a rearrangement, or
    landed below the latest checkpoint where no reader sees it."""


class _VisibleAfterReload(Exception):
    """A direct commit below the latest checkpoint turned out visible (the snapshot was
    reloaded with it)."""


def _rearranged(snapshot: LogSnapshot, version: int, change: log_commit.Rearrangement):
    """`snapshot` with another writer's file rearrangement (commit `version`) applied.

    Only a provable rewrite is stepped over: the removed files are all known, no added path is
    already live, and the added files hold exactly the removed offsets (same records, same
    range, no overlap with kept files). Anything else (e.g. a statistics recompute re-adding
    live files) makes the writer reload instead.
    """
    kept = [f for f in snapshot.files if f.path not in change.removed_paths]
    removed = [f for f in snapshot.files if f.path in change.removed_paths]
    if len(removed) != len(change.removed_paths) or not removed:
        raise _VersionTaken(version)
    try:
        added = [_data_file_from_add(add) for add in change.adds]
    except (KeyError, TypeError, ValueError):
        raise _VersionTaken(version) from None  # no usable statistics: reload
    live = {f.path for f in kept}
    if any(f.path in live for f in added) or len({f.path for f in added}) != len(added):
        raise _VersionTaken(version)
    same_records = sum(f.num_records for f in added) == sum(f.num_records for f in removed)
    same_range = added and (
        min(f.min_offset for f in added) == min(f.min_offset for f in removed)
        and max(f.max_offset for f in added) == max(f.max_offset for f in removed)
    )
    if not (same_records and same_range):
        raise _VersionTaken(version)
    files = sorted([*kept, *added], key=lambda f: f.min_offset)
    for previous, current in zip(files, files[1:], strict=False):
        if current.min_offset <= previous.max_offset:
            raise _VersionTaken(version)
    return dataclasses.replace(snapshot, table_version=version, files=tuple(files))


def _data_file_from_add(add: dict) -> DataFile:
    stats = json.loads(add["stats"])
    id_nulls = stats.get("nullCount", {}).get("producer_id")
    max_timestamp = stats.get("maxValues", {}).get("timestamp")
    return DataFile(
        path=add["path"],
        segment=int(add["partitionValues"][PARTITION_COLUMN]),
        min_offset=stats["minValues"]["offset"],
        max_offset=stats["maxValues"]["offset"],
        num_records=stats["numRecords"],
        size_bytes=add["size"],
        modification_time_ms=add["modificationTime"],
        has_producer_ids=None if id_nulls is None else id_nulls < stats["numRecords"],
        max_timestamp_ms=None if max_timestamp is None else _iso_to_ms_ceiled(max_timestamp),
    )


def _iso_to_ms_ceiled(text: str) -> int:
    """An ISO-8601 statistics timestamp (`2024-01-01T00:00:00.123Z`; naive = UTC) in ms,
    ceiled so that a bound with microseconds never drops below the true maximum."""
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return -(-(parsed - _EPOCH) // timedelta(milliseconds=1))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _epoch_ms(value) -> int:
    if isinstance(value, int):
        return value
    return int(value.timestamp() * 1000)


def read_leader(dt: DeltaTable) -> Leadership | None:
    """The leader named by the latest version of a partition table (refreshes `dt`)."""
    try:
        dt.update_incremental()
        return Leadership.from_version(dt.transaction_version(LEADER_APP_ID))
    except (OSError, DeltaError) as error:
        raise StorageUnavailable(f"Cannot refresh {dt.table_uri}: {error}") from error


def load_table(table_uri: str) -> DeltaTable:
    """A DeltaTable for light reads (leader, bounds) without building the file index."""
    try:
        return _load_table(table_uri, without_files=True)
    except TableNotFoundError as error:
        raise CorruptPartition(f"No Delta table at {table_uri}: {error}") from error


# Files below this size are "small"; a run of COMPACT_FILES_MIN of them in one segment is
# rewritten as one file. 32 keeps a partition near 32 + (segments) files whatever its age.
SMALL_FILE_BYTES = 16 * 1024 * 1024
COMPACT_FILES_MIN = 32


def _small_file_run(files: tuple[DataFile, ...]) -> list[DataFile]:
    """The first run of at least COMPACT_FILES_MIN consecutive small files of one segment,
    size-tiered: files at the front holding more records than the rest of the run are left
    out, so a merged file is rewritten again only once as many records arrived after it (each
    record is rewritten O(log n) times, not once per pass). Records, not bytes: a one-record
    Parquet file is mostly footer."""
    for run in _small_file_runs(files):
        while len(run) >= COMPACT_FILES_MIN and run[0].num_records > sum(
            f.num_records for f in run[1:]
        ):
            run = run[1:]
        if len(run) >= COMPACT_FILES_MIN:
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


def _remove_action(data_file: DataFile, data_change: bool = False) -> RemoveAction:
    return RemoveAction(
        data_file.path,
        data_change,
        int(time.time() * 1000),
        data_file.size_bytes,
        {PARTITION_COLUMN: str(data_file.segment)},
    )
