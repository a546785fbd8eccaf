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

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from storage_layout import paths
from storage_layout.errors import LeadershipConflict, StorageError, StorageUnavailable
from storage_layout.log import leadership
from storage_layout.log.leadership import Leadership, Outcome
from storage_layout.meta.table import META_FILES_MAX, MetaFile, MetaTable, Verdict
from storage_layout.records import TopicPartition
from storage_layout.schema import TIMESTAMP_TYPE

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
        # Added later (FORMAT.md §1): null in files written before, and for "not given".
        pa.field("leader_epoch", pa.int32()),
    ]
)
_OFFSET_COLUMNS = (
    "topic",
    "partition",
    "offset",
    "metadata",
    "generation",
    "member_id",
    "leader_epoch",
)
# Kafka's "no leader epoch" in requests and answers; stored as null.
NO_LEADER_EPOCH = -1
# A row with this offset deletes the partition's committed offset (Kafka's OffsetDelete and
# DeleteGroups): the latest row wins, as for any commit (FORMAT.md §11).
DELETED_OFFSET = -1


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    """One partition's offset in a commit request. `offset` is the next offset to read.

    `generation` and `member_id` name who committed it when one Delta commit batches the
    commits of several members (None: the values given to `ConsumerOffsets.commit`).
    `leader_epoch` is the epoch of the record before `offset` as the consumer saw it (Kafka's
    committed leader epoch: a restarted consumer validates its position with it)."""

    topic: str
    partition: int
    offset: int
    metadata: str | None = None
    generation: int | None = None
    member_id: str | None = None
    leader_epoch: int = NO_LEADER_EPOCH


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
    leader_epoch: int = NO_LEADER_EPOCH


@dataclass(frozen=True, slots=True)
class LatestRowsPlan:
    """A latest-rows rewrite decided on one snapshot: the files it read and the latest rows
    they hold.

    Its commit carries the LATEST_ROWS_APP_ID txn at `rewrite_version`, so it fails when
    another rewrite committed since (or removed one of `files`).
    """

    table_version: int
    rewrite_version: int  # the LATEST_ROWS_APP_ID txn this rewrite commits
    files: tuple[MetaFile, ...]
    rows: pa.Table  # the latest row of each (group_id, topic, partition) in `files`
    rows_dropped: int


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
        self._lock = threading.Lock()  # guards _table and _sequences
        self._rewriting = threading.Lock()  # at most one rewrite from this object at once
        self._table = MetaTable(
            self._uri, CONSUMER_OFFSETS_SCHEMA, TABLE_CONFIGURATION, bin_pack=False
        )
        self._sequences: dict[str, _SequenceCursor] = {}

    # ---- coordinators ------------------------------------------------------------------------

    def group_coordinator(self, group_id: str) -> Leadership | None:
        """The group's coordinator as of the latest table version (None: never taken)."""
        with self._lock:
            self._refresh()
            return self._coordinator(group_id)

    def take_group(self, group_id: str, node_id: int, *, expected: Leadership | None) -> Leadership:
        """Name `node_id` coordinator of the group with the next epoch, if it is still
        `expected`: a txn-only commit, the compare-and-set of partition leadership
        (leadership.take), so of two nodes taking a group at once exactly one wins. The
        caller then holds the result and passes it to `commit`; naming another node hands
        the group over.

        Raises:
            LeadershipConflict: the coordinator is no longer `expected`, or another change won.
            StorageUnavailable: the table could not be read or written.
        """
        with self._lock:
            return leadership.take(_GroupElection(self, group_id), node_id, expected=expected)

    def _coordinator(self, group_id: str) -> Leadership | None:
        return Leadership.from_version(self._table.transaction_version(_app_id(group_id)))

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
            files_count = len(self._table.state.adds)
        if files_count > META_FILES_MAX and not self._rewriting.locked():
            # In the background: a rewrite took 50-160 ms, the p99 of the commits that ran
            # it inline. It is safe next to commits (see `keep_latest`).
            threading.Thread(target=self._maybe_keep_latest, daemon=True).start()
        return results

    def _commit_locked(self, entries, now_ms: int) -> dict[str, int | LeadershipConflict]:
        results: dict[str, int | LeadershipConflict] = {}
        for _ in range(COMMIT_ATTEMPTS_MAX):
            self._refresh()
            decided_on = self._table.version
            pending = [e for e in entries if e.group_id not in results]
            pending = [e for e in pending if not self._taken(e, results)]
            if not pending:
                return results
            outcome = self._append_entries(pending, now_ms, results, decided_on)
            if outcome == _COMMITTED:
                return results
            if outcome == _TXN_CONFLICT:
                # One of the groups was taken, but which one? This node's view may be too
                # stale to show it: commit them one by one, each checked against every commit
                # since the same decision, where a conflict names its group. Those that met
                # something else go round again.
                for entry in pending:
                    outcome = self._append_entries([entry], now_ms, results, decided_on)
                    if outcome == _TXN_CONFLICT:
                        results[entry.group_id] = self._lost(entry)
        if all(e.group_id in results for e in entries):
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

    def _append_entries(self, entries, now_ms: int, results: dict, decided_on: int) -> str:
        sequences = {e.group_id: self._next_sequence(e.group_id, e.held) for e in entries}
        rows = pa.concat_tables(
            _rows(e.group_id, e.commits, e.generation, e.member_id, now_ms, sequences[e.group_id])
            for e in entries
        )
        transactions = [(_app_id(e.group_id), e.held.version) for e in entries]
        outcome = self._try_append(rows, transactions, decided_on)
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

    def _try_append(
        self, rows: pa.Table, transactions: list[tuple[str, int]], decided_on: int
    ) -> str:
        """Append `rows` with the groups' txns: _COMMITTED; _TXN_CONFLICT when a commit
        carrying one of the groups' app ids landed after version `decided_on` (a takeover,
        decided here and not by a re-read, so a node paused across it fails whatever its view
        of the table); _RACE when something else did (nothing written: decide again).
        Commits carrying none of them are stepped over (MetaTable.append)."""
        try:
            verdict = self._table.append(rows, transactions, decided_on=decided_on)
        except StorageError:
            for app_id, _ in transactions:
                self._sequences.pop(app_id.removeprefix("group:"), None)
            raise
        return _OUTCOMES[verdict]

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
                offset,
                metadata,
                generation,
                member_id,
                micros // 1000,
                NO_LEADER_EPOCH if epoch is None else epoch,
            )
            for topic, partition, offset, metadata, generation, member_id, epoch, micros in zip(
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

    def _read_group(self, files: Sequence[MetaFile], group_id: str, columns: list[str]) -> pa.Table:
        candidates = [f for f in files if f.may_hold("group_id", group_id)]
        table = self._read_files(candidates, ["group_id", *columns])
        return table.filter(pc.equal(table.column("group_id"), group_id)).select(columns)

    def _read_files(self, files: Sequence[MetaFile], columns: list[str]) -> pa.Table:
        """The given columns of `files` (safe outside the lock: MetaTable.read)."""
        return self._table.read(columns, files)

    def _stored_files(self) -> list[MetaFile]:
        """The live files of the state read (call with the lock held)."""
        return self._table.files()

    def _refresh(self) -> None:
        """Catch up with the latest table version (call with the lock held)."""
        self._table.refresh()

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
        """Read the latest state and choose the rows to keep; None when it has fewer than two
        files (a single file holds no superseded row: a commit writes each partition once and
        a rewrite outputs only latest rows). The files are read outside the lock."""
        with self._lock:
            self._refresh()
            files = self._stored_files()
            version = self._table.version
            previous = self._table.transaction_version(LATEST_ROWS_APP_ID)
        if len(files) < 2:
            return None
        rows = self._read_files(files, CONSUMER_OFFSETS_SCHEMA.names)
        latest = _latest_rows(rows, ("group_id", "topic", "partition"))
        return LatestRowsPlan(
            table_version=version,
            rewrite_version=0 if previous is None else previous + 1,
            files=tuple(files),
            rows=latest,
            rows_dropped=rows.num_rows - latest.num_rows,
        )

    def commit_keep_latest(self, plan: LatestRowsPlan) -> int:
        """Commit the plan: one file of its rows replaces its files, dataChange=false (it
        changes no committed offset: streaming readers of the table see each commit once and
        never a rewrite), with the LATEST_ROWS_APP_ID txn.

        Returns:
            plan.rows_dropped, or 0 when another rewrite came first (nothing committed).

        Raises:
            StorageUnavailable: the file or the commit could not be written.
        """
        transaction = (LATEST_ROWS_APP_ID, plan.rewrite_version)
        with self._lock:
            # Checked against every commit since the plan's version: another rewrite carries
            # the same app id, and removes the same files.
            verdict = self._table.replace(
                plan.files, plan.rows, [transaction], decided_on=plan.table_version
            )
        return plan.rows_dropped if verdict is Verdict.COMMITTED else 0

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


# ---- helpers (pure) --------------------------------------------------------------------------


_COMMITTED, _RACE, _TXN_CONFLICT = "committed", "race", "txn-conflict"
_OUTCOMES = {
    Verdict.COMMITTED: _COMMITTED,
    Verdict.RACE: _RACE,
    Verdict.TXN_CONFLICT: _TXN_CONFLICT,
}


def _app_id(group_id: str) -> str:
    return f"group:{group_id}"


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
            "leader_epoch": [None if c.leader_epoch < 0 else c.leader_epoch for c in commits],
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


class _GroupElection:
    """A group's coordinator as leadership.take sees it: txn `group:<id>` of the table."""

    def __init__(self, offsets: ConsumerOffsets, group_id: str) -> None:
        self.name = f"Group '{group_id}'"
        self._offsets = offsets
        self._group_id = group_id

    def current(self, *, fresh: bool) -> Leadership | None:
        self._offsets._refresh()  # a few small reads: the group's txn may be anywhere
        return self._offsets._coordinator(self._group_id)

    def commit_txn(self, new: Leadership) -> Outcome:
        transaction = (_app_id(self._group_id), new.version)
        verdict = self._offsets._table.append(None, [transaction])
        return Outcome.COMMITTED if verdict is Verdict.COMMITTED else Outcome.LOST
