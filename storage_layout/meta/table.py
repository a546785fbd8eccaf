"""One small `_meta` Delta table, committed like a partition table: each commit is the next
`_delta_log/<version>.json` created put-if-absent through the root's `Store` (FORMAT.md §13),
read by replaying the log (storage_layout/log/replay.py), checkpointed from memory.

A commit carries `txn` actions as compare-and-sets, with the rule delta-rs's conflict checker
applies (so tables written by either read and behave the same): a commit that finds its
version taken steps over the winner when the winner leaves the files it removes in place and
carries none of its txn app ids, and fails otherwise (the caller decides again on the state
the failure leaves). One file per change would make each full read slower, so past
META_FILES_MAX files the table is bin-packed (a rewrite, dataChange=false, that no change
conflicts with).

Not thread-safe: each owner (catalog, producer ids, documents, consumer offsets) holds its
own lock around a decision and its commit.
"""

from __future__ import annotations

import enum
import json
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from storage_layout.errors import PartitionTableMissing, StorageUnavailable
from storage_layout.log import housekeeping, log_commit
from storage_layout.log.delta_types import field_json
from storage_layout.log.housekeeping import Housekeeper
from storage_layout.log.reader import TableReader
from storage_layout.log.replay import TableState, file_path
from storage_layout.log.tables import create_delta_table
from storage_layout.store import StoreError, open_store, read_parquet, write_parquet

# Past this many live files a change is followed by a bin-pack into one file.
META_FILES_MAX = 32
# Commits stepped over before a commit gives up (each is another node's change that took the
# version this one wanted); the caller retries then.
STEPS_MAX = 1_000
# delta-rs's default `delta.logRetentionDuration` (30 days): the time travel a `_meta` table
# without the property keeps.
DEFAULT_LOG_RETENTION_MS = 30 * 24 * 3600 * 1000
_INTERVAL = re.compile(r"interval\s+(\d+)\s+(second|minute|hour|day|week)s?", re.IGNORECASE)
_UNIT_MS = {"second": 1000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000}
_UNIT_MS["week"] = 7 * _UNIT_MS["day"]


class Verdict(enum.Enum):
    """What became of a commit (`MetaTable.append`, `replace`)."""

    COMMITTED = "committed"
    # A commit after the state decided on carried one of its txn app ids (delta-rs's
    # "concurrent transaction"): the compare-and-set lost.
    TXN_CONFLICT = "txn-conflict"
    # Nothing committed for another reason (a file it removes is gone, the metadata changed,
    # a commit could not be read): the table is refreshed; decide again.
    RACE = "race"


@dataclass(frozen=True, slots=True)
class MetaFile:
    """One live data file, with the statistics its add action carries (None: unknown)."""

    path: str
    size_bytes: int
    min_values: Mapping[str, Any]
    max_values: Mapping[str, Any]

    def may_hold(self, column: str, value: Any) -> bool:
        """Whether the file's statistics allow a row with `column` == `value`."""
        low, high = self.min_values.get(column), self.max_values.get(column)
        return low is None or high is None or low <= value <= high


class MetaTable:
    """The `_meta` table at `uri`, created empty with `schema` when absent."""

    def __init__(
        self,
        uri: str,
        schema: pa.Schema,
        configuration: Mapping[str, str] | None = None,
        *,
        bin_pack: bool = True,
    ) -> None:
        self.uri = uri
        self.schema = schema
        # False where the owner keeps the table small its own way (consumer offsets keep the
        # latest rows only, off the commit path).
        self._bin_pack = bin_pack
        self._store = open_store(uri)
        self._reader = _open_or_create(uri, schema, dict(configuration or {}))
        # Their files stay until vacuum: a _meta table keeps ~100 versions of history, which on
        # a quiet table spans far longer than its history_ms says (Settling would cut it).
        self._housekeeper = Housekeeper(uri, self._store, self._reader.log, settles=False)
        self._add_missing_columns()

    # ---- reads -------------------------------------------------------------------------------

    @property
    def state(self) -> TableState:
        return self._reader.state

    @property
    def version(self) -> int:
        return self._reader.state.version

    def refresh(self) -> bool:
        """Follow the commits made since; True if there were any."""
        before = self.version
        try:
            self._reader.refresh()
        except StoreError as error:
            raise StorageUnavailable(f"Cannot read {self.uri}: {error}") from error
        return self.version != before

    def transaction_version(self, app_id: str) -> int | None:
        return self._reader.state.transactions.get(app_id)

    def files(self) -> list[MetaFile]:
        """The live data files of the state read (refresh first for the latest)."""
        return [_meta_file(add) for add in self._reader.state.adds.values()]

    def read(
        self, columns: Sequence[str] | None = None, files: Iterable[MetaFile] | None = None
    ) -> pa.Table:
        """`columns` (default: all) of `files` (default: every live file), as plain Parquet:
        the protocol allow-list rules out deletion vectors and column mapping. Removed files
        stay until a vacuum, so reading a slightly old file list is safe."""
        names = list(self.schema.names if columns is None else columns)
        schema = pa.schema([self.schema.field(name) for name in names])
        tables = [schema.empty_table()]
        for meta_file in self.files() if files is None else files:
            try:
                rows = read_parquet(self._store, meta_file.path, names)
                tables.append(_with_nulls_for_missing(rows, schema).cast(schema))
            except OSError as error:
                where = f"{self.uri}/{meta_file.path}"
                raise StorageUnavailable(f"Cannot read {where}: {error}") from error
        return pa.concat_tables(tables)

    # ---- commits -----------------------------------------------------------------------------

    def append(
        self,
        rows: pa.Table | None,
        transactions: Sequence[tuple[str, int]],
        *,
        decided_on: int | None = None,
    ) -> Verdict:
        """Commit `rows` (None: none, a txn-only change) with `transactions`, decided on the
        table at version `decided_on` (default: the state read): every commit after it is
        checked, also those this object read since (a caller that commits several times on
        one decision must pass the version). Unless COMMITTED, nothing is committed and the
        state is refreshed for the caller to decide again.

        Raises:
            StorageUnavailable: the store could not be written or read.
        """
        written = None if rows is None else self.write_file(rows, data_change=True)
        adds = [] if written is None else [written]
        verdict = self._commit(adds, [], transactions, "WRITE", decided_on)
        if verdict is Verdict.COMMITTED and self._bin_pack:
            self._maybe_bin_pack()
        return verdict

    def replace(
        self,
        removes: Sequence[MetaFile],
        rows: pa.Table,
        transactions: Sequence[tuple[str, int]] = (),
        *,
        decided_on: int | None = None,
    ) -> Verdict:
        """Replace the files `removes` by one file of `rows` without changing the table's
        contents (dataChange=false: streaming readers never see it), decided on version
        `decided_on` (default: the state read) as `append`; RACE, with nothing committed,
        when one of `removes` is gone."""
        live = self._reader.state.adds
        if any(meta_file.path not in live for meta_file in removes):
            return Verdict.RACE
        add = self.write_file(rows, data_change=False)
        now_ms = _now_ms()
        remove_actions = [
            log_commit.remove_action(f.path, None, f.size_bytes, now_ms) for f in removes
        ]
        return self._commit([add], remove_actions, transactions, "OPTIMIZE", decided_on)

    def _add_missing_columns(self) -> None:
        """Add the nullable columns of `schema` that the stored table lacks, by a commit of
        its metaData alone (FORMAT.md §1: a later lakelog version adds columns so, and files
        written before read them as null). Of nodes adding them at once, one commit wins and
        the others find them there."""
        for _ in range(STEPS_MAX):
            upgraded = with_fields(self.state.metadata, self.schema)
            if upgraded is None:
                return
            actions = log_commit.metadata_actions(upgraded, _now_ms())
            version = self.version + 1
            started = time.monotonic()
            if self._put(version, log_commit.ndjson(actions)):
                # A commit of a node paused past the log grace may sit below a checkpoint,
                # where no reader looks (_committed reads the table again then): the schema
                # the state shows decides, at the top of the loop.
                self._committed(version, actions, started)
                continue
            self.refresh()
        raise StorageUnavailable(f"Cannot add columns to {self.uri}: other commits kept coming.")

    def write_file(self, rows: pa.Table, *, data_change: bool) -> dict[str, Any]:
        """Write `rows` as a new data file; its add action (with statistics)."""
        path = f"part-{uuid.uuid4().hex}.zstd.parquet"
        rows = rows.cast(self.schema)
        try:
            size = write_parquet(self._store, path, rows)
        except OSError as error:
            raise StorageUnavailable(f"Cannot write {self.uri}/{path}: {error}") from error
        return {
            "path": path,
            "partitionValues": {},
            "size": size,
            "modificationTime": _now_ms(),
            "dataChange": data_change,
            "stats": column_stats(rows),
        }

    def _commit(self, adds, removes, transactions, operation: str, decided_on) -> Verdict:
        parameters = {"mode": "Append"} if operation == "WRITE" else {}
        actions = log_commit.change_actions(
            adds, removes, transactions, operation, parameters, _now_ms()
        )
        payload = log_commit.ndjson(actions)
        removed = {file_path(r) for r in removes}
        app_ids = {app_id for app_id, _ in transactions}
        version = (self.version if decided_on is None else decided_on) + 1
        for _ in range(STEPS_MAX):
            started = time.monotonic()
            # Versions this object has read already are checked, never created again.
            if version > self.version and self._put(version, payload):
                return self._committed(version, actions, started)
            winner = self._read_commit(version)
            verdict = _verdict_on(winner, removed, app_ids)
            if verdict is not None:
                self.refresh()
                self._delete_unless_live(adds)
                return verdict
            if version > self.version:
                self._reader.state = self._reader.state.applied(version, winner)
            version += 1
        raise StorageUnavailable(f"Cannot commit to {self.uri}: other commits kept coming.")

    def _committed(self, version: int, actions: list[dict], started: float) -> Verdict:
        """Take our commit into the state; a commit made by a writer paused past the log
        grace may sit below a checkpoint, where no reader looks: it counts only if a fresh
        read shows it (as for partitions: LogCommitter.check_not_shadowed)."""
        reader = self._reader
        fresh = (started - reader.latest_known_at) * 1000 < housekeeping.LOG_GRACE_MS / 2
        if not fresh and log_commit.may_be_below_checkpoint(reader.log, version):
            self.refresh()
            if _shows(reader.state, actions):
                return Verdict.COMMITTED
            self._delete_unless_live([a["add"] for a in actions if "add" in a])
            return Verdict.RACE
        reader.state = reader.state.applied(version, actions)
        reader.latest_known_at = started
        self._housekeeper.checkpoint_state_if_due(reader.state, self._history_ms())
        if self._housekeeper.written is not None:  # its tombstones need not stay in memory
            written = self._housekeeper.written
            reader.state = reader.state.checkpointed(written.version, written.names)
        return Verdict.COMMITTED

    def _maybe_bin_pack(self) -> None:
        """Rewrite every live file as one when there are more than META_FILES_MAX; a failure
        only delays it to a later change."""
        if len(self._reader.state.adds) <= META_FILES_MAX:
            return
        files = self.files()
        try:
            self.replace(files, self.read(files=files))
        except StorageUnavailable:
            pass

    def _history_ms(self) -> int:
        configured = self._reader.state.metadata.get("configuration") or {}
        match = _INTERVAL.fullmatch(configured.get("delta.logRetentionDuration", "").strip())
        if match is None:
            return DEFAULT_LOG_RETENTION_MS
        return int(match[1]) * _UNIT_MS[match[2].lower()]

    def _put(self, version: int, payload: bytes) -> bool:
        try:
            return log_commit.put_if_absent(self._reader.log, version, payload)
        except OSError as error:
            raise StorageUnavailable(f"Cannot commit to {self.uri}: {error}") from error

    def _read_commit(self, version: int) -> list[dict[str, Any]] | None:
        try:
            return log_commit.read_commit(self._reader.log, version)
        except OSError as error:
            raise StorageUnavailable(f"Cannot read {self.uri}: {error}") from error

    def _delete_unless_live(self, adds: Sequence[dict[str, Any]]) -> None:
        for add in adds:
            if add["path"] not in self._reader.state.adds:
                self._delete(add["path"])

    def _delete(self, path: str) -> None:
        try:
            self._store.delete(path)
        except OSError:
            pass  # an orphan: never referenced by the log, so a vacuum removes it


def column_stats(rows: pa.Table) -> str:
    """Delta statistics of a file of `rows`: the record count, and the bounds and null
    counts of its string and integer columns (readers of one key skip other files)."""
    stats: dict[str, Any] = {
        "numRecords": rows.num_rows,
        "minValues": {},
        "maxValues": {},
        "nullCount": {},
    }
    for field in rows.schema:
        if not (pa.types.is_string(field.type) or pa.types.is_integer(field.type)):
            continue
        column = rows.column(field.name)
        stats["nullCount"][field.name] = column.null_count
        if rows.num_rows > column.null_count:
            bounds = pc.min_max(column)
            stats["minValues"][field.name] = bounds["min"].as_py()
            stats["maxValues"][field.name] = bounds["max"].as_py()
    return json.dumps(stats, separators=(",", ":"))


def with_fields(metadata: Mapping[str, Any], schema: pa.Schema) -> dict[str, Any] | None:
    """`metadata` (a metaData action's body) with the fields of `schema` its stored schema
    lacks added at the end; None when it has them all.

    Raises:
        ValueError: a missing field is not nullable (files written before could not hold it).
    """
    stored = json.loads(metadata["schemaString"])
    names = {field["name"] for field in stored["fields"]}
    missing = [field for field in schema if field.name not in names]
    if not missing:
        return None
    for field in missing:
        if not field.nullable:
            raise ValueError(f"Column '{field.name}' cannot be added: it is not nullable.")
    stored["fields"] = [*stored["fields"], *(field_json(field) for field in missing)]
    return {**metadata, "schemaString": json.dumps(stored, separators=(",", ":"))}


def _with_nulls_for_missing(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """`rows` in `schema`'s column order, a column added since the file was written being
    null (pyarrow reads the columns a file has and skips the others)."""
    if rows.num_columns == len(schema):
        return rows.select(schema.names)
    return pa.table(
        [
            rows.column(f.name) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
            for f in schema
        ],
        schema=schema,
    )


def _open_or_create(uri: str, schema: pa.Schema, configuration: dict[str, str]) -> TableReader:
    """A reader of the table, created first when absent (of nodes creating it at once, one
    commit 0 wins and the others read it)."""
    try:
        return TableReader.read(uri)
    except PartitionTableMissing:
        pass
    create_delta_table(uri, schema, [], configuration)
    return TableReader.read(uri)


def _meta_file(add: Mapping[str, Any]) -> MetaFile:
    try:
        stats = json.loads(add.get("stats") or "{}")
    except ValueError:
        stats = {}
    return MetaFile(
        file_path(add),
        int(add.get("size", 0)),
        stats.get("minValues") or {},
        stats.get("maxValues") or {},
    )


def _verdict_on(
    winner: list[dict[str, Any]] | None, removed: set[str], app_ids: set[str]
) -> Verdict | None:
    """What a commit that took our version means for ours: None when ours can follow it
    (delta-rs's rule: it carries none of our txn app ids, leaves the files we remove, and
    changes neither metadata nor protocol)."""
    if winner is None:
        return Verdict.RACE  # trimmed since (or vanished): refresh and decide again
    for action in winner:
        ((kind, body),) = action.items()
        if kind == "txn" and body.get("appId") in app_ids:
            return Verdict.TXN_CONFLICT
    return None if log_commit.keeps_files(winner, removed, ()) else Verdict.RACE


def _shows(state: TableState, actions: list[dict[str, Any]]) -> bool:
    """Whether `state` holds the commit of `actions`: its files (unique paths), live or removed
    since; a commit without files by its txns at exactly their versions (a greater version may
    be another node's change made while ours was not there)."""
    adds = [a["add"]["path"] for a in actions if "add" in a]
    if adds:
        return all(path in state.adds or path in state.tombstones for path in adds)
    txns = [a["txn"] for a in actions if "txn" in a]
    return all(state.transactions.get(t["appId"]) == t["version"] for t in txns)


def _now_ms() -> int:
    return int(time.time() * 1000)
