"""The partition log's view of its table: the file index, snapshots and how commits change them.

A `LogSnapshot` is immutable; the writer replaces it atomically, so readers never lock.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow as pa

from storage_layout.errors import CorruptPartition
from storage_layout.log import log_commit
from storage_layout.log.delta_types import arrow_type
from storage_layout.log.replay import TableState, file_path
from storage_layout.records import AppTransaction
from storage_layout.schema import FILE_SCHEMA, LOG_APP_ID, LOG_START_APP_ID, PARTITION_COLUMN
from storage_layout.schemas.typed_columns import TYPED_COLUMNS

# The tail keeps at most this many commits' records in memory.
TAIL_COMMITS_MAX = 256


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
    # Whether it holds transactional records or markers (None: the statistics do not say,
    # e.g. a file from before the transaction columns).
    has_transactions: bool | None = None


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
    # The Delta actions of the table at `table_version` (a checkpoint's content), kept in step
    # with every commit the writer makes or follows.
    state: TableState | None = None

    @property
    def transactions(self) -> Mapping[str, int]:
        return {} if self.state is None else self.state.transactions

    @property
    def log_start_offset(self) -> int:
        """Where the log starts: the `log_start` txn if any (set by retention, and by Kafka's
        DeleteRecords, which may move it past stored records), else the first offset still
        stored; the high watermark when nothing is stored. Offsets between it and the first
        stored offset were compacted away: reads skip them (Kafka's gaps)."""
        if self.start_offset is not None:
            return self.start_offset
        return self.files[0].min_offset if self.files else self.high_watermark

    @property
    def active_segment(self) -> int | None:
        # Files are in offset order and a segment starts at an offset: the last is the newest.
        return self.files[-1].segment if self.files else None

    def tail_records(self) -> dict[int, pa.Table]:
        """The in-memory records of the tail's commits, by base offset. A file's records are
        the chunks from its min_offset to its max_offset (`in_memory`): one for an append's
        file, several for a merged one."""
        return {chunk.base_offset: chunk.records for chunk in self.tail}

    def segment_files(self, segment: int) -> list[DataFile]:
        """The files of `segment`: a run of the files in offset order (searched from the
        newest end, where the active segment is: an append asks on every commit)."""
        files = self.files
        end = len(files)
        while end and files[end - 1].segment > segment:
            end -= 1
        start = end
        while start and files[start - 1].segment == segment:
            start -= 1
        return list(files[start:end])

    @property
    def typed_types(self) -> Mapping[str, pa.DataType]:
        """The table's typed columns (FORMAT.md §17) by name; empty when it has none."""
        return {} if self.state is None else typed_types_of(self.state.metadata)

    @property
    def file_schema(self) -> pa.Schema:
        """What the table's data files hold: FILE_SCHEMA and its typed columns."""
        typed = self.typed_types
        if not typed:
            return FILE_SCHEMA
        return pa.schema([*FILE_SCHEMA, *(pa.field(n, t) for n, t in typed.items())])


@functools.lru_cache(maxsize=256)
def _typed_types_of_schema(schema_string: str) -> tuple[tuple[str, pa.DataType], ...]:
    fields = json.loads(schema_string)["fields"]
    return tuple((f["name"], arrow_type(f["type"])) for f in fields if f["name"] in TYPED_COLUMNS)


def typed_types_of(metadata: Mapping[str, object]) -> dict[str, pa.DataType]:
    """The typed columns of a table's metadata (a metaData action's body), by name."""
    schema_string = metadata.get("schemaString") if metadata else None
    if not isinstance(schema_string, str):
        return {}
    return dict(_typed_types_of_schema(schema_string))


class VersionTaken(Exception):
    """A direct commit found its version taken by a commit that is not a rearrangement, or
    landed below the latest checkpoint where no reader sees it."""


class VisibleAfterReload(Exception):
    """A direct commit below the latest checkpoint turned out visible (the snapshot was
    reloaded with it)."""


def in_memory(chunks: Mapping[int, pa.Table], data_file: DataFile) -> pa.Table | None:
    """`data_file`'s records from the tail's chunks (LogSnapshot.tail_records): the chunk
    at its first offset, or the consecutive chunks a merged file was made of; None when the
    tail does not hold all of them (a file older than the tail), or the file's offsets have
    gaps (a compacted file: not the commits' records). A chunk's offsets are dense, so the
    chunks from the file's first offset to its last are its records."""
    span = data_file.max_offset - data_file.min_offset + 1
    if span != data_file.num_records:
        return None
    parts, rows = [], 0
    while rows < span:
        chunk = chunks.get(data_file.min_offset + rows)
        if chunk is None:
            return None
        parts.append(chunk)
        rows += chunk.num_rows
    schema = parts[0].schema
    if rows != span or any(part.schema != schema for part in parts):
        return None  # (chunks from before and after a typed column came: read the file)
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


def snapshot_from_state(state: TableState, table_uri: str, fenced: bool = True) -> LogSnapshot:
    """Build the file index from the table's add actions and check the offset invariants."""
    last_offset = state.transactions.get(LOG_APP_ID)
    high_watermark = 0 if last_offset is None else last_offset + 1
    files = sorted(
        (data_file_from_add(add) for add in state.adds.values()), key=lambda f: f.min_offset
    )
    if not fenced:  # control runs only: no txn to trust, and overlaps are what they show
        end = max((f.max_offset + 1 for f in files), default=0)
        return LogSnapshot(state.version, end, tuple(files), state=state)
    for previous, current in zip(files, files[1:], strict=False):
        if current.min_offset <= previous.max_offset:
            raise CorruptPartition(
                f"{table_uri}: files {previous.path} and {current.path} overlap in offsets."
            )
    if files and files[-1].max_offset >= high_watermark:
        raise CorruptPartition(
            f"{table_uri}: stores offset {files[-1].max_offset} but its offset txn says the "
            f"high watermark is {high_watermark}."
        )
    start = state.transactions.get(LOG_START_APP_ID)
    return LogSnapshot(state.version, high_watermark, tuple(files), start_offset=start, state=state)


def rearranged(snapshot: LogSnapshot, version: int, change: log_commit.Rearrangement):
    """`snapshot` with another writer's file rearrangement (commit `version`) applied.

    Only a provable rewrite is stepped over: the removed files are all known, no added path is
    already live, and the added files hold exactly the removed offsets (same records, same
    range, no overlap with kept files). Anything else (e.g. a statistics recompute re-adding
    live files) makes the writer reload instead.
    """
    kept = [f for f in snapshot.files if f.path not in change.removed_paths]
    removed = [f for f in snapshot.files if f.path in change.removed_paths]
    if len(removed) != len(change.removed_paths) or not removed:
        raise VersionTaken(version)
    try:
        added = [data_file_from_add(add) for add in change.adds]
    except (KeyError, TypeError, ValueError):
        raise VersionTaken(version) from None  # no usable statistics: reload
    live = {f.path for f in kept}
    if any(f.path in live for f in added) or len({f.path for f in added}) != len(added):
        raise VersionTaken(version)
    same_records = sum(f.num_records for f in added) == sum(f.num_records for f in removed)
    same_range = added and (
        min(f.min_offset for f in added) == min(f.min_offset for f in removed)
        and max(f.max_offset for f in added) == max(f.max_offset for f in removed)
    )
    if not (same_records and same_range):
        raise VersionTaken(version)
    files = sorted([*kept, *added], key=lambda f: f.min_offset)
    for previous, current in zip(files, files[1:], strict=False):
        if current.min_offset <= previous.max_offset:
            raise VersionTaken(version)
    return dataclasses.replace(
        snapshot,
        table_version=version,
        files=tuple(files),
        state=_applied(snapshot.state, version, change.actions),
    )


def after_maintenance(
    before: LogSnapshot,
    removes: Sequence[DataFile],
    added: Sequence[DataFile],
    transactions: Sequence[AppTransaction],
    actions: Sequence[dict],
) -> LogSnapshot:
    """The snapshot after a maintenance commit (`actions`) made right on top of `before`."""
    removed = {f.path for f in removes}
    files = [f for f in before.files if f.path not in removed]
    files += added
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
        state=_applied(before.state, before.table_version + 1, actions),
    )


def _applied(state: TableState | None, version: int, actions: Sequence[dict]):
    return None if state is None else state.applied(version, actions)


def data_file_from_add(add: dict) -> DataFile:
    stats = json.loads(add["stats"])
    id_nulls = stats.get("nullCount", {}).get("producer_id")
    transactional_nulls = stats.get("nullCount", {}).get("transactional")
    max_timestamp = stats.get("maxValues", {}).get("timestamp")
    return DataFile(
        path=file_path(add),
        segment=int(add["partitionValues"][PARTITION_COLUMN]),
        min_offset=stats["minValues"]["offset"],
        max_offset=stats["maxValues"]["offset"],
        num_records=stats["numRecords"],
        size_bytes=add["size"],
        modification_time_ms=add["modificationTime"],
        has_producer_ids=None if id_nulls is None else id_nulls < stats["numRecords"],
        has_transactions=(
            None if transactional_nulls is None else transactional_nulls < stats["numRecords"]
        ),
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


class TailKeeper:
    """Extends a snapshot's tail with each new commit's records and trims it to at most
    `records_max` records (but the newest chunk) and TAIL_COMMITS_MAX chunks. One writer."""

    def __init__(self, records_max: int) -> None:
        self._records_max = records_max
        self._known: tuple[tuple[TailChunk, ...], int] = ((), 0)  # (a tail, its rows)

    def renewed_half(self, commits: int, records: int) -> bool:
        """Whether `commits` commits of `records` records replaced half of the tail or more:
        a small-file merge planned now still finds its files' records in memory."""
        if self._records_max <= 0:
            return False
        return commits * 2 >= TAIL_COMMITS_MAX or records * 2 >= self._records_max

    def extended(
        self, tail: tuple[TailChunk, ...], base_offset: int, table: pa.Table
    ) -> tuple[TailChunk, ...]:
        if self._records_max <= 0:
            return ()
        chunks = [*tail, TailChunk(base_offset, table)]
        # The row count of `tail` is remembered from the last call (summing up to 256 chunks
        # on every commit was a twentieth of a commit's CPU).
        known_tail, known_rows = self._known
        rows = known_rows if known_tail is tail else sum(c.records.num_rows for c in tail)
        rows += table.num_rows
        while len(chunks) > 1 and (
            rows - chunks[0].records.num_rows >= self._records_max or len(chunks) > TAIL_COMMITS_MAX
        ):
            rows -= chunks.pop(0).records.num_rows
        result = tuple(chunks)
        self._known = (result, rows)
        return result
