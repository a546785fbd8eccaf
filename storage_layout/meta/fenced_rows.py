"""A `_meta` Delta table of rows kept per key, each group of keys written by one fenced holder at
a time: the form of the consumer offsets (FORMAT.md §11, holders are groups) and of the share
states (§19, holders are topic partitions).

Each holder is named by the table's `txn` action with app id `<prefix><holder>` (version `epoch
* NODE_IDS + node_id`, as partition leadership): taking a holder is a txn-only compare-and-set,
and every commit of its rows carries its txn, so a deposed holder, however long it was paused,
can never commit again. Each row carries a sequence, strictly increasing per holder across
commits; a key's value is its row with the highest sequence (never the newest time: clocks
may disagree). Past META_FILES_MAX files, a rewrite keeps only each key's latest row.

Concurrency contract: every method is safe to call from several threads. One lock serializes
this object's table refreshes and commits, so one process makes one commit at a time: callers
batch several holders' rows into one commit to stay under that. Reads and the latest-rows
rewrite read files outside the lock. Processes and nodes are serialized by the txn
compare-and-sets.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from storage_layout.errors import LeadershipConflict, StorageError, StorageUnavailable
from storage_layout.log import leadership
from storage_layout.log.leadership import Leadership, Outcome
from storage_layout.meta.table import META_FILES_MAX, MetaFile, MetaTable, Verdict

# The latest-rows rewrite's own txn: two rewrites planned on one snapshot cannot both commit (their
# removes are dataChange=false, which delta-rs does not check against each other). Holders
# never carry it, so it never fails their commits.
LATEST_ROWS_APP_ID = "compaction"  # the value is part of the table format: never change it
# A commit failing on something other than a holder's txn (nothing written) is retried.
COMMIT_ATTEMPTS_MAX = 3

Holder = tuple  # the values of the holder columns, e.g. (group_id,) or (topic, partition)


@dataclass(frozen=True, slots=True)
class HolderRows:
    """One holder's part of a batched commit: the rows it writes, given their sequence."""

    holder: Holder
    held: Leadership
    rows: Callable[[int], pa.Table]


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
    rows: pa.Table  # the latest row of each key in `files`
    rows_dropped: int


@dataclass(frozen=True, slots=True)
class Layout:
    """What a fenced-rows table is made of: its columns and which of them mean what."""

    schema: pa.Schema
    configuration: Mapping[str, str]
    app_prefix: str  # a holder's txn app id is this + its values joined by "/"
    holder_columns: tuple[str, ...]
    key_columns: tuple[str, ...]  # a key's latest row is its value (holder columns included)
    sequence_column: str
    holder_name: Callable[[Holder], str]  # for messages, e.g. "Group 'g'"
    # A latest row whose `deleted_column` holds `deleted_value` deletes its key.
    deleted_column: str
    deleted_value: object


@dataclass(frozen=True, slots=True)
class _SequenceCursor:
    """The last sequence this object committed for a holder under one holder version. Any
    other version (a takeover, a hand-over to us) means: read it again."""

    leadership_version: int
    last_sequence: int


class FencedRows:
    """Reads and writes the table at `uri`; creates it if absent."""

    def __init__(self, uri: str, layout: Layout) -> None:
        self._uri = uri
        self._layout = layout
        self._lock = threading.Lock()  # guards _table and _sequences
        self._rewriting = threading.Lock()  # at most one rewrite from this object at once
        self._table = MetaTable(uri, layout.schema, layout.configuration, bin_pack=False)
        self._sequences: dict[Holder, _SequenceCursor] = {}

    # ---- holders -----------------------------------------------------------------------------

    def holder_of(self, holder: Holder) -> Leadership | None:
        """The holder's leadership as of the latest table version (None: never taken)."""
        with self._lock:
            self._refresh()
            return self._fence(holder)

    def take(self, holder: Holder, node_id: int, *, expected: Leadership | None) -> Leadership:
        """Name `node_id` the holder's writer with the next epoch, if it is still `expected`:
        a txn-only commit (leadership.take), so of two nodes taking at once exactly one wins.
        The caller then passes the result to `commit_rows`; naming another node hands over.

        Raises:
            LeadershipConflict: the holder is no longer `expected`, or another change won.
            StorageUnavailable: the table could not be read or written.
        """
        with self._lock:
            return leadership.take(_Election(self, holder), node_id, expected=expected)

    def _fence(self, holder: Holder) -> Leadership | None:
        return Leadership.from_version(self._table.transaction_version(self._app_id(holder)))

    def _app_id(self, holder: Holder) -> str:
        return self._layout.app_prefix + "/".join(str(value) for value in holder)

    # ---- commits -----------------------------------------------------------------------------

    def commit_rows(self, entries: Sequence[HolderRows]) -> dict[Holder, int | LeadershipConflict]:
        """Store several holders' rows in ONE Delta commit carrying each holder's txn.

        A holder whose leadership changed is left out with its LeadershipConflict (the others
        are still committed): after a txn conflict the table is re-read, which shows the
        taken holder, and the rest is tried again. May rewrite the table to its latest rows
        afterwards (in the background), once it holds more than META_FILES_MAX files.

        Returns:
            Per holder: the sequence of its rows, or its LeadershipConflict.

        Raises:
            StorageUnavailable: the table could not be read or written, or kept conflicting.
            ValueError: a holder twice.
        """
        if len({e.holder for e in entries}) != len(entries):
            raise ValueError("each holder may appear once in a batched commit")
        with self._lock:
            results = self._commit_locked(entries)
            files_count = len(self._table.state.adds)
        if files_count > META_FILES_MAX and not self._rewriting.locked():
            # In the background: a rewrite took 50-160 ms, the p99 of the commits that ran
            # it inline. It is safe next to commits (see `keep_latest`).
            threading.Thread(target=self._maybe_keep_latest, daemon=True).start()
        return results

    def _commit_locked(self, entries: Sequence[HolderRows]) -> dict:
        results: dict[Holder, int | LeadershipConflict] = {}
        for _ in range(COMMIT_ATTEMPTS_MAX):
            self._refresh()
            decided_on = self._table.version
            pending = [e for e in entries if e.holder not in results]
            pending = [e for e in pending if not self._taken(e, results)]
            if not pending:
                return results
            outcome = self._append_entries(pending, results, decided_on)
            if outcome == _COMMITTED:
                return results
            if outcome == _TXN_CONFLICT:
                # One of the holders was taken, but which one? This node's view may be too
                # stale to show it: commit them one by one, each checked against every commit
                # since the same decision, where a conflict names its holder. Those that met
                # something else go round again.
                for entry in pending:
                    outcome = self._append_entries([entry], results, decided_on)
                    if outcome == _TXN_CONFLICT:
                        results[entry.holder] = self._lost(entry)
        if all(e.holder in results for e in entries):
            return results
        raise StorageUnavailable(f"Cannot commit to {self._uri}: repeated conflicts.")

    def _lost(self, entry: HolderRows) -> LeadershipConflict:
        self._sequences.pop(entry.holder, None)  # read again if the holder comes back
        name = self._layout.holder_name(entry.holder)
        return LeadershipConflict(
            f"{name}: another node took it after {entry.held}; nothing written."
        )

    def _taken(self, entry: HolderRows, results: dict) -> bool:
        current = self._fence(entry.holder)
        if current == entry.held:
            return False
        self._sequences.pop(entry.holder, None)
        name = self._layout.holder_name(entry.holder)
        results[entry.holder] = LeadershipConflict(
            f"{name} is held by {current}, not {entry.held}; nothing written."
        )
        return True

    def _append_entries(self, entries, results: dict, decided_on: int) -> str:
        sequences = {e.holder: self._next_sequence(e.holder, e.held) for e in entries}
        rows = pa.concat_tables(e.rows(sequences[e.holder]) for e in entries)
        outcome = self._try_append(rows, entries, decided_on)
        if outcome == _COMMITTED:
            for entry in entries:
                sequence = sequences[entry.holder]
                self._sequences[entry.holder] = _SequenceCursor(entry.held.version, sequence)
                results[entry.holder] = sequence
        return outcome

    def _next_sequence(self, holder: Holder, held: Leadership) -> int:
        """One above the holder's last: from memory while we keep committing under `held`,
        else the holder's maximum in the table (read once per leadership change)."""
        cursor = self._sequences.get(holder)
        if cursor is not None and cursor.leadership_version == held.version:
            return cursor.last_sequence + 1
        column = self._layout.sequence_column
        stored = self.read_holder(self._stored_files(), holder, [column])
        last = pc.max(stored.column(column)).as_py()
        return 0 if last is None else last + 1

    def _try_append(self, rows: pa.Table, entries: Sequence[HolderRows], decided_on: int) -> str:
        """Append `rows` with the holders' txns: _COMMITTED; _TXN_CONFLICT when a commit
        carrying one of their app ids landed after version `decided_on` (a takeover, decided
        here and not by a re-read, so a node paused across it fails whatever its view of the
        table); _RACE when something else did (nothing written: decide again). Commits
        carrying none of them are stepped over (MetaTable.append)."""
        transactions = [(self._app_id(e.holder), e.held.version) for e in entries]
        try:
            verdict = self._table.append(rows, transactions, decided_on=decided_on)
        except StorageError:
            for entry in entries:  # the outcome is unknown: read their sequences again
                self._sequences.pop(entry.holder, None)
            raise
        return _OUTCOMES[verdict]

    # ---- reads -------------------------------------------------------------------------------

    def latest_files(self) -> list[MetaFile]:
        """The live files of the latest table version (read them outside the lock)."""
        with self._lock:
            self._refresh()
            return self._stored_files()

    def read_holder(
        self, files: Sequence[MetaFile], holder: Holder, columns: list[str]
    ) -> pa.Table:
        """`columns` of the holder's rows in `files` (every row, not only the latest): only
        files whose statistics may hold the holder are read."""
        names = self._layout.holder_columns
        candidates = [
            f for f in files if all(f.may_hold(n, v) for n, v in zip(names, holder, strict=True))
        ]
        table = self.read_files(candidates, list(dict.fromkeys([*names, *columns])))
        for name, value in zip(names, holder, strict=True):
            table = table.filter(pc.equal(table.column(name), value))
        return table.select(columns)

    def read_files(self, files: Sequence[MetaFile], columns: list[str]) -> pa.Table:
        """The given columns of `files` (safe outside the lock: MetaTable.read)."""
        return self._table.read(columns, files)

    def latest_rows(self, table: pa.Table, keys: Sequence[str] | None = None) -> pa.Table:
        """The row with the highest sequence for each distinct value of `keys` (default: the
        key columns); one row per key even if a row was stored twice."""
        return _latest_rows(table, keys or self._layout.key_columns, self._layout.sequence_column)

    def live_values(self, column: str) -> list:
        """Sorted distinct values of `column` among the keys not deleted (latest version)."""
        layout = self._layout
        columns = list(dict.fromkeys([*layout.key_columns, column, layout.deleted_column]))
        rows = self.latest_rows(
            self.read_files(self.latest_files(), [*columns, layout.sequence_column])
        )
        live = rows.filter(pc.not_equal(rows.column(layout.deleted_column), layout.deleted_value))
        return sorted(pc.unique(live.column(column)).to_pylist())

    def _stored_files(self) -> list[MetaFile]:
        """The live files of the state read (call with the lock held)."""
        return self._table.files()

    def _refresh(self) -> None:
        """Catch up with the latest table version (call with the lock held)."""
        self._table.refresh()

    # ---- keeping the latest rows -------------------------------------------------------------

    def keep_latest(self) -> int:
        """Rewrite the table keeping only the latest row of each key.

        Safe while holders commit: it removes only the files it read, so a commit that lands
        meanwhile (a new file) survives, and it carries no holder's txn, so it never fails a
        holder's commit. It gives up (returns 0) if another rewrite committed first.

        Returns:
            The number of superseded rows dropped (0 also when it gave up or had nothing to do).

        Raises:
            StorageUnavailable: the table could not be read.
        """
        plan = self.plan_keep_latest()
        return 0 if plan is None else self.commit_keep_latest(plan)

    def plan_keep_latest(self) -> LatestRowsPlan | None:
        """Read the latest state and choose the rows to keep; None when it has fewer than two
        files (a single file holds no superseded row: a commit writes each key once and a
        rewrite outputs only latest rows). The files are read outside the lock."""
        with self._lock:
            self._refresh()
            files = self._stored_files()
            version = self._table.version
            previous = self._table.transaction_version(LATEST_ROWS_APP_ID)
        if len(files) < 2:
            return None
        rows = self.read_files(files, self._layout.schema.names)
        latest = self.latest_rows(rows)
        return LatestRowsPlan(
            table_version=version,
            rewrite_version=0 if previous is None else previous + 1,
            files=tuple(files),
            rows=latest,
            rows_dropped=rows.num_rows - latest.num_rows,
        )

    def commit_keep_latest(self, plan: LatestRowsPlan) -> int:
        """Commit the plan: one file of its rows replaces its files, dataChange=false (it
        changes no key's value: streaming readers of the table see each commit once and
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


def _latest_rows(table: pa.Table, keys: Sequence[str], sequence_column: str) -> pa.Table:
    if table.num_rows <= 1:
        return table
    ordered = table.sort_by(
        [*((key, "ascending") for key in keys), (sequence_column, "descending")]
    )
    count = ordered.num_rows
    changed = None
    for key in keys:
        column = ordered.column(key)
        differs = pc.not_equal(column.slice(1), column.slice(0, count - 1))
        changed = differs if changed is None else pc.or_(changed, differs)
    first = pa.chunked_array([pa.array([True]), *changed.chunks], pa.bool_())
    return ordered.filter(first)


class _Election:
    """A holder as leadership.take sees it: its txn in the table."""

    def __init__(self, table: FencedRows, holder: Holder) -> None:
        self.name = table._layout.holder_name(holder)
        self._table = table
        self._holder = holder

    def current(self, *, fresh: bool) -> Leadership | None:
        self._table._refresh()  # a few small reads: the holder's txn may be anywhere
        return self._table._fence(self._holder)

    def commit_txn(self, new: Leadership) -> Outcome:
        transaction = (self._table._app_id(self._holder), new.version)
        verdict = self._table._table.append(None, [transaction])
        return Outcome.COMMITTED if verdict is Verdict.COMMITTED else Outcome.LOST
