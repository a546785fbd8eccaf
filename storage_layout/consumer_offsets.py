"""Consumer group offsets: `_meta/consumer_offsets`, Kafka's `__consumer_offsets` as a Delta table.

One row per partition per offset commit; a group's committed offset for a partition is its row
with the highest `commit_sequence` (FORMAT.md §11). Each group has a coordinator, named by the
table's `txn` action with app id `group:<group_id>` (version `epoch * NODE_IDS + node_id`, as
partition leadership): taking a group is a txn-only compare-and-set, and every offset commit
carries the coordinator's txn, so a deposed coordinator, however long it was paused, can never
commit again.

Concurrency contract: every method is safe to call from several threads. One lock serializes
this object's table refreshes and commits (all groups'), so one process makes one offset commit
at a time: about 10 ms each on a local disk, i.e. roughly 100 commits/s per process whatever
the number of groups; coordinators batch a group's queued commits into one call to stay under
that. Reads (`load`, `groups`) and keeping the latest rows read files outside the lock.
Processes and nodes are serialized by the txn compare-and-sets.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import AddAction, RemoveAction

from storage_layout import meta_tables, paths
from storage_layout.errors import LeadershipConflict, StorageError, StorageUnavailable
from storage_layout.log import Leadership
from storage_layout.meta_tables import META_FILES_MAX
from storage_layout.protocol_check import check_protocol
from storage_layout.records import TopicPartition
from storage_layout.schema import NODE_IDS, TIMESTAMP_TYPE
from storage_layout.store import delta_storage_options, open_store, read_parquet, write_parquet

CONSUMER_OFFSETS_TABLE = "consumer_offsets"
# Kafka's generation for commits made outside a group generation (admin resets, simple
# consumers).
GENERATION_NONE = -1
# The latest-rows rewrite's own txn: two rewrites planned on one snapshot cannot both commit (their
# removes are dataChange=false, which delta-rs does not check against each other). Coordinators
# never carry it, so it never fails their commits.
LATEST_ROWS_APP_ID = "compaction"  # the value is part of the table format: never change it
# A commit failing on something other than the group's txn (nothing written) is retried.
COMMIT_ATTEMPTS_MAX = 3
# Short log retention: delta-rs lists `_delta_log` on every commit, so a log kept for days
# would make each offset commit slower as the table ages (2.5 ms at 100 versions, 16 ms at
# 3 000, measured). Every 100 commits a checkpoint lets older commit files go after 10 s.
TABLE_CONFIGURATION = {
    "delta.checkpointInterval": "100",
    "delta.logRetentionDuration": "interval 10 seconds",
}

CONSUMER_OFFSETS_SCHEMA = pa.schema(
    [
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),  # the next offset to read (Kafka's)
        pa.field("metadata", pa.string()),
        pa.field("generation", pa.int32(), nullable=False),
        pa.field("member_id", pa.string()),
        pa.field("committed_at", TIMESTAMP_TYPE, nullable=False),
        pa.field("commit_sequence", pa.int64(), nullable=False),
    ]
)
_OFFSET_COLUMNS = ("topic", "partition", "offset", "metadata", "generation", "member_id")
# A row with this offset deletes the partition's committed offset (Kafka's OffsetDelete and
# DeleteGroups): the latest row wins, as for any commit (FORMAT.md §11).
DELETED_OFFSET = -1
_STATS_COLUMNS = ("group_id", "topic", "partition", "offset", "generation", "commit_sequence")


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    """One partition's offset in a commit request. `offset` is the next offset to read.

    `generation` and `member_id` name who committed it when one Delta commit batches the
    commits of several members (None: the values given to `ConsumerOffsets.commit`)."""

    topic: str
    partition: int
    offset: int
    metadata: str | None = None
    generation: int | None = None
    member_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupCommit:
    """One group's part of a batched Delta commit, asserting the group's coordinator."""

    group_id: str
    held: Leadership
    commits: Sequence[OffsetCommit]
    generation: int = -1
    member_id: str | None = None


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """A group's stored offset for one partition, from its latest commit."""

    offset: int
    metadata: str | None
    generation: int
    member_id: str | None
    committed_at_ms: int


@dataclass(frozen=True, slots=True)
class StoredFile:
    """One data file of the table, with its `group_id` bounds when its statistics have them."""

    path: str
    size_bytes: int
    min_group_id: str | None
    max_group_id: str | None

    def may_hold(self, group_id: str) -> bool:
        if self.min_group_id is None or self.max_group_id is None:
            return True
        return self.min_group_id <= group_id <= self.max_group_id


@dataclass(frozen=True, slots=True)
class LatestRowsPlan:
    """A latest-rows rewrite decided on one snapshot: the files it read and the latest rows
    they hold.

    The commit is built on `_table` (that snapshot), so its txn conflicts with any rewrite
    committed since.
    """

    table_version: int
    rewrite_version: int  # the LATEST_ROWS_APP_ID txn this rewrite commits
    files: tuple[StoredFile, ...]
    rows: pa.Table  # the latest row of each (group_id, topic, partition) in `files`
    rows_dropped: int
    _table: DeltaTable = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class _SequenceCursor:
    """The last commit_sequence this object committed for a group under one coordinator
    version. Any other version (a takeover, a hand-over to us) means: read it again."""

    leadership_version: int
    last_sequence: int


class ConsumerOffsets:
    """Reads and writes `<root>/_meta/consumer_offsets`; creates it if absent."""

    def __init__(self, root: str) -> None:
        self._uri = paths.meta_table_uri(paths.normalize_root(root), CONSUMER_OFFSETS_TABLE)
        self._store = open_store(self._uri)
        self._lock = threading.Lock()  # guards _dt and _sequences
        self._rewriting = threading.Lock()  # at most one rewrite from this object at once
        self._dt = meta_tables.open_or_create(
            self._uri, CONSUMER_OFFSETS_SCHEMA, TABLE_CONFIGURATION
        )
        check_protocol(self._dt.protocol(), self._uri)
        self._sequences: dict[str, _SequenceCursor] = {}

    # ---- coordinators ------------------------------------------------------------------------

    def group_coordinator(self, group_id: str) -> Leadership | None:
        """The group's coordinator as of the latest table version (None: never taken)."""
        with self._lock:
            self._refresh()
            return self._coordinator(group_id)

    def take_group(self, group_id: str, node_id: int, *, expected: Leadership | None) -> Leadership:
        """Name `node_id` coordinator of the group with the next epoch, if it is still
        `expected`: a txn-only commit, a compare-and-set like partition leadership, so of two
        nodes taking a group at once exactly one wins. The caller then holds the result and
        passes it to `commit`; naming another node hands the group over.

        Raises:
            LeadershipConflict: the coordinator is no longer `expected`, or another change won.
            StorageUnavailable: the table could not be read or written.
        """
        if not 0 <= node_id < NODE_IDS:
            raise ValueError(f"node ids are 0..{NODE_IDS - 1}, got {node_id}")
        with self._lock:
            self._refresh()
            current = self._coordinator(group_id)
            if current != expected:
                raise LeadershipConflict(
                    f"Group '{group_id}' is coordinated by {current}, not {expected}; not taken."
                )
            new = Leadership(0 if current is None else current.epoch + 1, node_id)
            transaction = Transaction(_app_id(group_id), new.version)
            try:
                self._dt.create_write_transaction(
                    [],
                    mode="append",
                    schema=CONSUMER_OFFSETS_SCHEMA,
                    commit_properties=CommitProperties(app_transactions=[transaction]),
                )
            except CommitFailedError as error:
                raise LeadershipConflict(
                    f"Group '{group_id}': another node changed its coordinator first."
                ) from error
            except (OSError, DeltaError) as error:
                raise StorageUnavailable(f"Cannot write {self._uri}: {error}") from error
            self._refresh()  # create_write_transaction leaves _dt at the old version
        return new

    def _coordinator(self, group_id: str) -> Leadership | None:
        return Leadership.from_version(self._dt.transaction_version(_app_id(group_id)))

    # ---- commits -----------------------------------------------------------------------------

    def commit(
        self,
        group_id: str,
        held: Leadership,
        commits: Sequence[OffsetCommit],
        *,
        generation: int,
        member_id: str | None,
        now_ms: int | None = None,
    ) -> int:
        """Store `commits` (one row each) in ONE Delta commit that asserts `held`.

        The commit carries `Transaction("group:<group_id>", held.version)`: if another node
        took the group since, nothing is written. Every row gets the group's next
        commit_sequence. May rewrite the table to its latest rows afterwards (outside the
        lock), once it holds more than META_FILES_MAX files.

        Returns:
            The commit_sequence of these rows.

        Raises:
            LeadershipConflict: `held` is no longer the group's coordinator; nothing written.
            StorageUnavailable: the table could not be read or written (the commit may or may
                not have landed; the sequence is read again on the next commit).
            ValueError: no commits, a negative offset or partition, or a partition twice.
        """
        entry = GroupCommit(group_id, held, commits, generation, member_id)
        result = self.commit_many([entry], now_ms=now_ms)
        if isinstance(result[group_id], Exception):
            raise result[group_id]
        return result[group_id]

    def commit_many(
        self, entries: Sequence[GroupCommit], *, now_ms: int | None = None
    ) -> dict[str, int | LeadershipConflict]:
        """Store several groups' commits in ONE Delta commit carrying each group's txn.

        A group whose coordinator changed is left out with its LeadershipConflict (the
        others are still committed): after a txn conflict the table is re-read, which shows
        the taken group, and the rest is tried again.

        Returns:
            Per group id: the commit_sequence of its rows, or its LeadershipConflict.

        Raises:
            StorageUnavailable: the table could not be read or written, or kept conflicting.
            ValueError: a group twice, no commits, a negative offset or partition, or a
                partition twice within a group.
        """
        if len({e.group_id for e in entries}) != len(entries):
            raise ValueError("each group may appear once in a batched commit")
        for entry in entries:
            _check_commits(entry.commits)
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        with self._lock:
            results = self._commit_locked(entries, now_ms)
            files_count = len(self._dt.file_uris())
        if files_count > META_FILES_MAX and not self._rewriting.locked():
            # In the background: a rewrite took 50-160 ms, the p99 of the commits that ran
            # it inline. It is safe next to commits (see `keep_latest`).
            threading.Thread(target=self._maybe_keep_latest, daemon=True).start()
        return results

    def _commit_locked(self, entries, now_ms: int) -> dict[str, int | LeadershipConflict]:
        results: dict[str, int | LeadershipConflict] = {}
        pending = list(entries)
        for _ in range(COMMIT_ATTEMPTS_MAX):
            self._refresh()
            pending = [e for e in pending if not self._taken(e, results)]
            if not pending:
                return results
            outcome = self._append_entries(pending, now_ms, results)
            if outcome == _TXN_CONFLICT and len(pending) > 1:
                # One of the groups was taken, but which one? This node's view may be too
                # stale to show it: commit them one by one, where a conflict names its group.
                for entry in pending:
                    if self._append_entries([entry], now_ms, results) == _TXN_CONFLICT:
                        results[entry.group_id] = self._lost(entry)
                return results
            if outcome == _TXN_CONFLICT:
                results[pending[0].group_id] = self._lost(pending[0])
                return results
            if outcome == _COMMITTED:
                return results
        raise StorageUnavailable(f"Cannot commit to {self._uri}: repeated conflicts.")

    def _lost(self, entry: GroupCommit) -> LeadershipConflict:
        self._sequences.pop(entry.group_id, None)  # read again if the group comes back
        return LeadershipConflict(
            f"Group '{entry.group_id}': another node took it after {entry.held}; nothing written."
        )

    def _taken(self, entry: GroupCommit, results: dict) -> bool:
        try:
            self._check_held(entry.group_id, entry.held)
        except LeadershipConflict as error:
            results[entry.group_id] = error
            return True
        return False

    def _append_entries(self, entries, now_ms: int, results: dict) -> str:
        sequences = {e.group_id: self._next_sequence(e.group_id, e.held) for e in entries}
        rows = pa.concat_tables(
            _rows(e.group_id, e.commits, e.generation, e.member_id, now_ms, sequences[e.group_id])
            for e in entries
        )
        transactions = [Transaction(_app_id(e.group_id), e.held.version) for e in entries]
        outcome = self._try_append(rows, transactions)
        if outcome == _COMMITTED:
            for entry in entries:
                sequence = sequences[entry.group_id]
                self._sequences[entry.group_id] = _SequenceCursor(entry.held.version, sequence)
                results[entry.group_id] = sequence
        return outcome

    def _check_held(self, group_id: str, held: Leadership) -> None:
        current = self._coordinator(group_id)
        if current != held:
            self._sequences.pop(group_id, None)
            raise LeadershipConflict(
                f"Group '{group_id}' is coordinated by {current}, not {held}; nothing written."
            )

    def _next_sequence(self, group_id: str, held: Leadership) -> int:
        """One above the group's last: from memory while we keep committing under `held`,
        else the group's maximum in the table (read once per coordinator change)."""
        cursor = self._sequences.get(group_id)
        if cursor is not None and cursor.leadership_version == held.version:
            return cursor.last_sequence + 1
        stored = self._read_group(self._stored_files(), group_id, ["commit_sequence"])
        last = pc.max(stored.column("commit_sequence")).as_py()
        return 0 if last is None else last + 1

    def _try_append(self, rows: pa.Table, transactions: list[Transaction]) -> str:
        """Append `rows` with the groups' txns: _COMMITTED; _RACE when a commit that carries
        none of them won (nothing written: re-read and try again); _TXN_CONFLICT when a
        commit carrying one of the groups' app ids landed after our snapshot (a takeover,
        decided here and not by a re-read, so a node paused across it fails whatever its
        view of the table)."""
        try:
            write_deltalake(
                self._dt,
                rows,
                mode="append",
                commit_properties=CommitProperties(app_transactions=transactions),
            )
        except CommitFailedError as error:
            return _TXN_CONFLICT if _is_txn_conflict(error) else _RACE
        except (OSError, DeltaError) as error:
            for transaction in transactions:
                self._sequences.pop(transaction.app_id.removeprefix("group:"), None)
            raise StorageUnavailable(f"Cannot write {self._uri}: {error}") from error
        return _COMMITTED

    # ---- reads -------------------------------------------------------------------------------

    def load(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        """The group's committed offsets as of the latest table version: per partition, the
        row with the highest commit_sequence. Reads only files whose statistics may hold the
        group, outside the commit lock.

        Raises:
            StorageUnavailable: the table could not be read.
        """
        with self._lock:
            self._refresh()
            files = self._stored_files()
        columns = [*_OFFSET_COLUMNS, "committed_at", "commit_sequence"]
        latest = _latest_rows(self._read_group(files, group_id, columns), ("topic", "partition"))
        data = latest.to_pydict()
        committed_micros = latest.column("committed_at").cast(pa.int64()).to_pylist()
        offsets = {
            TopicPartition(topic, partition): CommittedOffset(
                offset, metadata, generation, member_id, micros // 1000
            )
            for topic, partition, offset, metadata, generation, member_id, micros in zip(
                *(data[name] for name in _OFFSET_COLUMNS), committed_micros, strict=True
            )
            if offset != DELETED_OFFSET
        }
        return dict(sorted(offsets.items()))

    def groups(self) -> list[str]:
        """Sorted ids of the groups with stored offsets (latest table version): a group whose
        every offset was deleted is gone."""
        with self._lock:
            self._refresh()
            files = self._stored_files()
        columns = ["group_id", "topic", "partition", "offset", "commit_sequence"]
        rows = _latest_rows(self._read_files(files, columns), ("group_id", "topic", "partition"))
        live = rows.filter(pc.not_equal(rows.column("offset"), DELETED_OFFSET))
        return sorted(pc.unique(live.column("group_id")).to_pylist())

    def _read_group(
        self, files: Sequence[StoredFile], group_id: str, columns: list[str]
    ) -> pa.Table:
        candidates = [f for f in files if f.may_hold(group_id)]
        table = self._read_files(candidates, ["group_id", *columns])
        return table.filter(pc.equal(table.column("group_id"), group_id)).select(columns)

    def _read_files(self, files: Sequence[StoredFile], columns: list[str]) -> pa.Table:
        """The given columns of `files`, read as plain Parquet (the protocol check rules out
        deletion vectors and column mapping). Removed files stay on disk until a vacuum, so
        reading a slightly old file list is safe."""
        schema = pa.schema([CONSUMER_OFFSETS_SCHEMA.field(name) for name in columns])
        tables = [schema.empty_table()]
        for stored in files:
            try:
                tables.append(read_parquet(self._store, stored.path, columns).cast(schema))
            except OSError as error:
                raise StorageUnavailable(
                    f"Cannot read {self._uri}/{stored.path}: {error}"
                ) from error
        return pa.concat_tables(tables)

    def _stored_files(self) -> list[StoredFile]:
        """The live files of the loaded snapshot (call with the lock held)."""
        return _files_of(self._dt)

    def _refresh(self) -> None:
        """Catch up with the latest table version (call with the lock held)."""
        try:
            self._dt.update_incremental()
        except (OSError, DeltaError) as error:
            raise StorageUnavailable(f"Cannot read {self._uri}: {error}") from error
        check_protocol(self._dt.protocol(), self._uri)

    # ---- keeping the latest rows ---------------------------------------------------------

    def keep_latest(self) -> int:
        """Rewrite the table keeping only the latest row of each (group, topic, partition).

        Safe while coordinators commit: it removes only the files it read, so a commit that
        lands meanwhile (a new file) survives, and it carries no group txn, so it never fails
        a coordinator's commit. It gives up (returns 0) if another rewrite committed first.

        Returns:
            The number of superseded rows dropped (0 also when it gave up or had nothing to do).

        Raises:
            StorageUnavailable: the table could not be read.
        """
        plan = self.plan_keep_latest()
        return 0 if plan is None else self.commit_keep_latest(plan)

    def plan_keep_latest(self) -> LatestRowsPlan | None:
        """Read the latest snapshot and choose the rows to keep; None when it has fewer than
        two files (a single file holds no superseded row: a commit writes each partition once
        and a rewrite outputs only latest rows)."""
        try:
            table = DeltaTable(
                self._uri, storage_options=delta_storage_options()
            )  # its own snapshot: the commit is built on it
        except (OSError, DeltaError) as error:
            raise StorageUnavailable(f"Cannot read {self._uri}: {error}") from error
        check_protocol(table.protocol(), self._uri)
        files = _files_of(table)
        if len(files) < 2:
            return None
        rows = self._read_files(files, CONSUMER_OFFSETS_SCHEMA.names)
        latest = _latest_rows(rows, ("group_id", "topic", "partition"))
        previous = table.transaction_version(LATEST_ROWS_APP_ID)
        return LatestRowsPlan(
            table_version=table.version(),
            rewrite_version=0 if previous is None else previous + 1,
            files=tuple(files),
            rows=latest,
            rows_dropped=rows.num_rows - latest.num_rows,
            _table=table,
        )

    def commit_keep_latest(self, plan: LatestRowsPlan) -> int:
        """Write the plan's rows as one file and commit remove(its files) + add(that file),
        dataChange=false (it changes no committed offset: streaming readers of the table see
        each commit once and never a rewrite).

        Returns:
            plan.rows_dropped, or 0 when the commit conflicted (the new file is deleted).

        Raises:
            StorageUnavailable: the file or the commit could not be written.
        """
        add = self._write_file(plan.rows)
        now_ms = int(time.time() * 1000)
        removes = [RemoveAction(f.path, False, now_ms, f.size_bytes) for f in plan.files]
        transaction = Transaction(LATEST_ROWS_APP_ID, plan.rewrite_version)
        try:
            plan._table.create_write_transaction(
                [*removes, add],
                mode="append",
                schema=CONSUMER_OFFSETS_SCHEMA,
                commit_properties=CommitProperties(app_transactions=[transaction]),
            )
        except CommitFailedError:
            self._delete_file(add.path)
            return 0
        except (OSError, DeltaError) as error:
            self._delete_file(add.path)
            raise StorageUnavailable(f"Cannot write {self._uri}: {error}") from error
        return plan.rows_dropped

    def _maybe_keep_latest(self) -> None:
        """Keep the latest rows after a commit, unless this object is rewriting already. A
        failure only delays it to a later commit: the commit itself has succeeded."""
        if not self._rewriting.acquire(blocking=False):
            return
        try:
            self.keep_latest()
        except StorageError:
            pass
        finally:
            self._rewriting.release()

    def _write_file(self, rows: pa.Table) -> AddAction:
        relative = f"part-{uuid.uuid4().hex}.zstd.parquet"
        try:
            size = write_parquet(self._store, relative, rows)
        except OSError as error:
            raise StorageUnavailable(f"Cannot write {self._uri}/{relative}: {error}") from error
        return AddAction(relative, size, {}, int(time.time() * 1000), False, _file_stats(rows))

    def _delete_file(self, relative: str) -> None:
        try:
            self._store.delete(relative)
        except OSError:
            pass  # an orphan: never referenced by the log, so a vacuum removes it


# ---- helpers (pure) --------------------------------------------------------------------------


_COMMITTED, _RACE, _TXN_CONFLICT = "committed", "race", "txn-conflict"


def _app_id(group_id: str) -> str:
    return f"group:{group_id}"


def _is_txn_conflict(error: CommitFailedError) -> bool:
    """delta-rs's message when a commit after our snapshot wrote one of our txn app ids."""
    return "Concurrent transaction" in str(error)


def _files_of(table: DeltaTable) -> list[StoredFile]:
    """The live files of `table`'s loaded snapshot, with their group_id statistics."""
    actions = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    count = len(actions["path"])
    mins = actions.get("min.group_id", [None] * count)
    maxes = actions.get("max.group_id", [None] * count)
    return [
        StoredFile(path, size, low, high)
        for path, size, low, high in zip(
            actions["path"], actions["size_bytes"], mins, maxes, strict=True
        )
    ]


def _check_commits(commits: Sequence[OffsetCommit]) -> None:
    if not commits:
        raise ValueError("an offset commit needs at least one partition")
    seen: set[tuple[str, int]] = set()
    for commit in commits:
        if commit.offset < DELETED_OFFSET or commit.partition < 0:
            raise ValueError(f"negative offset or partition in {commit}")
        if (commit.topic, commit.partition) in seen:
            raise ValueError(f"{commit.topic}/{commit.partition} appears twice in one commit")
        seen.add((commit.topic, commit.partition))


def _rows(
    group_id: str,
    commits: Sequence[OffsetCommit],
    generation: int,
    member_id: str | None,
    now_ms: int,
    sequence: int,
) -> pa.Table:
    count = len(commits)
    return pa.table(
        {
            "group_id": [group_id] * count,
            "topic": [c.topic for c in commits],
            "partition": [c.partition for c in commits],
            "offset": [c.offset for c in commits],
            "metadata": [c.metadata for c in commits],
            "generation": [generation if c.generation is None else c.generation for c in commits],
            "member_id": [member_id if c.member_id is None else c.member_id for c in commits],
            "committed_at": [now_ms * 1000] * count,
            "commit_sequence": [sequence] * count,
        },
        schema=CONSUMER_OFFSETS_SCHEMA,
    )


def _latest_rows(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The row with the highest commit_sequence for each distinct value of `keys` (one row
    per key even if a row was stored twice)."""
    if table.num_rows <= 1:
        return table
    ordered = table.sort_by(
        [*((key, "ascending") for key in keys), ("commit_sequence", "descending")]
    )
    count = ordered.num_rows
    changed = None
    for key in keys:
        column = ordered.column(key)
        differs = pc.not_equal(column.slice(1), column.slice(0, count - 1))
        changed = differs if changed is None else pc.or_(changed, differs)
    first = pa.chunked_array([pa.array([True]), *changed.chunks], pa.bool_())
    return ordered.filter(first)


def _file_stats(rows: pa.Table) -> str:
    """Delta statistics of a rewrite's output: exact bounds of the key columns, so readers
    of one group skip files that cannot hold it."""
    stats: dict = {"numRecords": rows.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    for name in _STATS_COLUMNS:
        bounds = pc.min_max(rows.column(name))
        stats["minValues"][name] = bounds["min"].as_py()
        stats["maxValues"][name] = bounds["max"].as_py()
        stats["nullCount"][name] = 0
    return json.dumps(stats, separators=(",", ":"))
