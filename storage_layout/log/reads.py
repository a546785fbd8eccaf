"""Reads from a partition snapshot: records by offset (tail from memory, older ranges from
Parquet found through the file index) and offsets by timestamp. Pure functions of a snapshot and
its store, so any number of threads read while the writer appends."""

from __future__ import annotations

import bisect
import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Sequence
from operator import attrgetter

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage_layout.errors import OffsetOutOfRange, StorageUnavailable
from storage_layout.log.arrow_records import (
    PLAIN_READ_SCHEMA,
    READ_SCHEMA,
    first_offset_at_or_after,
    limit_bytes,
    payload_bytes,
)
from storage_layout.log.files import read_columns, read_whole_file
from storage_layout.log.snapshot import DataFile, LogSnapshot, in_memory
from storage_layout.log.transaction_index import (
    INDEX_COLUMNS,
    TransactionIndex,
    aborted_mask,
    transactional_rows,
)
from storage_layout.records import FetchResult, Isolation
from storage_layout.schema import FILE_SCHEMA, TRANSACTIONAL_RECORD_COLUMNS
from storage_layout.store import Store

_READ_COLUMNS = list(TRANSACTIONAL_RECORD_COLUMNS)
# Tables are immutable: one empty table per read schema serves every read that finds nothing.
_EMPTY_READ = READ_SCHEMA.empty_table()
_EMPTY_PLAIN_READ = PLAIN_READ_SCHEMA.empty_table()


def read_records(store: Store, snapshot: LogSnapshot, **read) -> FetchResult:
    """_read_records (its arguments and errors), with the txns of the version read (where
    Kafka's fetch finds its leader epochs)."""
    result = _read_records(store, snapshot, **read)
    return dataclasses.replace(result, transactions=snapshot.transactions)


def _read_records(
    store: Store,
    snapshot: LogSnapshot,
    *,
    from_offset: int,
    records_max: int,
    bytes_max: int,
    isolation: Isolation = Isolation.PLAIN,
    transactions: TransactionIndex | None = None,
) -> FetchResult:
    """Records from `from_offset` on, at most `records_max`, about `bytes_max` of key+value,
    as `isolation` says (COMMITTED needs `transactions`, the snapshot's index).

    At least one record is returned when one exists, even if it alone exceeds `bytes_max`
    (as Kafka does, so a large record never blocks a consumer).

    Raises:
        OffsetOutOfRange: `from_offset` is below log_start_offset or above the high watermark.
        StorageUnavailable: a data file could not be read.
    """
    start, end = snapshot.log_start_offset, snapshot.high_watermark
    if from_offset < start or from_offset > end:
        raise OffsetOutOfRange(from_offset, start, end)
    # PLAIN reads need only `control` of the transaction columns (to leave markers out): the
    # producer columns are not decoded from the files of the common HTTP and Spark-less reads.
    schema = PLAIN_READ_SCHEMA if isolation is Isolation.PLAIN else READ_SCHEMA
    records = _empty(schema)
    if from_offset < end and records_max > 0:
        records = _read_tail(snapshot, from_offset, records_max, schema)
        if records is None:
            records = _read_files(store, snapshot, from_offset, records_max, bytes_max, schema)
        records = limit_bytes(records, bytes_max)
    if isolation is Isolation.PLAIN:
        return FetchResult(_without_markers(records), start, end, next_offset=_after(records))
    if isolation is Isolation.UNCOMMITTED:
        return FetchResult(records, start, end, end, next_offset=_after(records))
    committed = _committed(records, start, end, from_offset, transactions)
    if isolation is Isolation.COMMITTED:
        return committed
    return _committed_data(committed)


def _after(records: pa.Table) -> int | None:
    return records.column("offset")[-1].as_py() + 1 if records.num_rows else None


def _without_markers(records: pa.Table) -> pa.Table:
    control = records.column("control")
    if control.null_count != records.num_rows:
        records = records.filter(pc.is_null(control))
    return records.select(list(Isolation.PLAIN.columns))


def _committed(records, start, end, from_offset, index: TransactionIndex) -> FetchResult:
    """Records below the last stable offset, and the aborted transactions among them."""
    stable = index.last_stable_offset(end, start)
    if records.num_rows and records.column("offset")[-1].as_py() >= stable:
        records = records.filter(pc.less(records.column("offset"), stable))
    read_to = _after(records) or from_offset
    aborted = tuple(index.aborted_between(from_offset, read_to))
    return FetchResult(records, start, end, stable, aborted, _after(records))


def _committed_data(committed: FetchResult) -> FetchResult:
    """A COMMITTED read with the aborted records and the markers taken out here."""
    records = committed.records
    if committed.aborted:
        records = records.filter(pc.invert(aborted_mask(records, committed.aborted)))
    return FetchResult(
        _without_markers(records),
        committed.log_start_offset,
        committed.high_watermark,
        committed.last_stable_offset,
        next_offset=committed.next_offset,
    )


def advanced_index(
    store: Store, snapshot: LogSnapshot, index: TransactionIndex
) -> TransactionIndex:
    """`index` extended to `snapshot`'s high watermark with the rows of newer files only
    (FORMAT.md §14)."""
    if index.indexed_to >= snapshot.high_watermark:
        return index
    rows = transactional_rows_from(store, snapshot, index.indexed_to)
    return index.advanced(rows, snapshot.high_watermark)


def read_files(
    store: Store, files: Sequence[DataFile], file_schema: pa.Schema = FILE_SCHEMA
) -> pa.Table:
    """Every column of `files` as `file_schema` (the table's), in the order given."""
    if not files:
        return file_schema.empty_table()
    # Files rewritten by other engines may store view types: one schema for all.
    return pa.concat_tables(
        [read_whole_file(store, f, file_schema).cast(file_schema) for f in files]
    )


def transactional_rows_from(store: Store, snapshot: LogSnapshot, from_offset: int) -> pa.Table:
    """The INDEX_COLUMNS of transactional rows at or above `from_offset`, offset order: the
    tail from memory, other files (those whose statistics allow transactions) read."""
    first = bisect.bisect_left(snapshot.files, from_offset, key=attrgetter("max_offset"))
    newer = snapshot.files[first:]
    candidates = [f for f in newer if _may_hold_transactions(f)]
    if not candidates:  # a read_committed fetch asks after every commit: no tail dict then
        return transactional_rows(_EMPTY_READ, from_offset)
    chunks = snapshot.tail_records()
    tables = []
    for data_file in candidates:
        # Not just the chunk at the file's first offset: a merged file holds several commits.
        table = in_memory(chunks, data_file)
        if table is None:
            table = read_columns(store, data_file, list(INDEX_COLUMNS))
        tables.append(transactional_rows(table, from_offset))
    return pa.concat_tables(tables)


def _may_hold_transactions(data_file: DataFile) -> bool:
    if data_file.has_transactions is not None:
        return data_file.has_transactions
    # Statistics from before the transaction columns: only a file with producer ids could.
    return data_file.has_producer_ids is not False


def _read_tail(
    snapshot: LogSnapshot, from_offset: int, records_max: int, schema: pa.Schema
) -> pa.Table | None:
    if not snapshot.tail or from_offset < snapshot.tail[0].base_offset:
        return None
    chunks, count = [], 0
    for chunk in snapshot.tail:
        last = chunk.base_offset + chunk.records.num_rows - 1
        if last < from_offset:
            continue
        skip = max(0, from_offset - chunk.base_offset)
        part = chunk.records.slice(skip, records_max - count).select(schema.names)
        chunks.append(part)
        count += part.num_rows
        if count >= records_max:
            break
    return pa.concat_tables(chunks) if chunks else _empty(schema)


def _read_files(
    store: Store,
    snapshot: LogSnapshot,
    from_offset: int,
    records_max: int,
    bytes_max: int,
    schema: pa.Schema,
) -> pa.Table:
    max_offsets = [f.max_offset for f in snapshot.files]
    index = bisect.bisect_left(max_offsets, from_offset)
    tables, count, size = [], 0, 0
    for data_file in snapshot.files[index:]:
        table = _read_file(store, data_file, from_offset, schema).slice(0, records_max - count)
        tables.append(table)
        count += table.num_rows
        size += payload_bytes(table)
        if count >= records_max or size >= bytes_max:
            break
    return pa.concat_tables(tables) if tables else _empty(schema)


def _read_file(store: Store, data_file: DataFile, from_offset: int, schema: pa.Schema) -> pa.Table:
    if store.kind not in LOCAL_KINDS:
        cached = _cached_records(store, data_file)  # every read column: shared by all reads
        return cached.filter(pc.greater_equal(pc.field("offset"), from_offset)).select(schema.names)
    # Row-group statistics skip the part of a large (optimized) file before `from_offset`.
    filters = [("offset", ">=", from_offset)] if data_file.min_offset < from_offset else None
    try:
        # The schema is given, not inferred: files rewritten by delta-rs store binary_view
        # columns, which the offset filter cannot evaluate before a cast.
        return pq.read_table(
            store.open_input(data_file.path),
            columns=schema.names,
            filters=filters,
            schema=schema,
        )
    except OSError as error:
        raise StorageUnavailable(f"Cannot read {store.uri}/{data_file.path}: {error}") from error


# Object stores: a consumer reading a partition from its start fetches a megabyte at a time
# from files of up to tens of megabytes (merged, optimized); each fetch downloaded its file
# whole again (18 MB of GETs per MB fetched). Data files never change once written (new
# names for every rewrite), so their records are kept, least recently used first out.
FILE_CACHE_BYTES = 256 * 1024 * 1024
LOCAL_KINDS = ("local", "local-exclusive-create")


class _FileCache:
    """Decoded record columns of recently read data files, bounded by bytes. Thread-safe."""

    def __init__(self, bytes_max: int) -> None:
        self._bytes_max = bytes_max
        self._tables: OrderedDict[tuple[str, str], pa.Table] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> pa.Table | None:
        with self._lock:
            table = self._tables.get(key)
            if table is not None:
                self._tables.move_to_end(key)
            return table

    def put(self, key: tuple[str, str], table: pa.Table) -> None:
        with self._lock:
            if key in self._tables or table.nbytes > self._bytes_max:
                return
            self._tables[key] = table
            self._bytes += table.nbytes
            while self._bytes > self._bytes_max:
                _, dropped = self._tables.popitem(last=False)
                self._bytes -= dropped.nbytes


_FILE_CACHE = _FileCache(FILE_CACHE_BYTES)


def _cached_records(store: Store, data_file: DataFile) -> pa.Table:
    key = (store.uri, data_file.path)
    table = _FILE_CACHE.get(key)
    if table is None:
        try:
            table = pq.read_table(
                store.open_input(data_file.path),
                columns=_READ_COLUMNS,
                schema=READ_SCHEMA,
            )
        except OSError as error:
            raise StorageUnavailable(
                f"Cannot read {store.uri}/{data_file.path}: {error}"
            ) from error
        _FILE_CACHE.put(key, table)
    return table


def offset_for_timestamp(store: Store, snapshot: LogSnapshot, timestamp_ms: int) -> int | None:
    """Kafka's ListOffsets by timestamp: the earliest offset whose record timestamp is at or
    after `timestamp_ms`, among the offsets from the log start on (files keep the records a
    DeleteRecords put below it until retention rewrites them).

    Record timestamps are not monotonic in offsets (CreateTime comes from producers), so this
    scans in offset order rather than searching: files whose statistics put every timestamp
    below `timestamp_ms` are skipped unread, the others are read (offset and timestamp columns
    only) until one holds a match; offsets held by the in-memory tail are taken from it.

    Returns:
        The offset, or None when no stored record is that recent (Kafka then answers with the
        high watermark, "latest").

    Raises:
        StorageUnavailable: a data file could not be read.
    """
    tail = [c for c in snapshot.tail if c.base_offset >= snapshot.log_start_offset]
    tail_start = tail[0].base_offset if tail else snapshot.high_watermark
    for data_file in snapshot.files:
        if data_file.min_offset >= tail_start:
            break
        if data_file.max_offset < snapshot.log_start_offset:
            continue
        if data_file.max_timestamp_ms is not None and data_file.max_timestamp_ms < timestamp_ms:
            continue
        table = read_columns(store, data_file, ["offset", "timestamp"])
        found = first_offset_at_or_after(table, timestamp_ms, snapshot.log_start_offset)
        if found is not None:
            return found
    for chunk in tail:
        found = first_offset_at_or_after(chunk.records, timestamp_ms)
        if found is not None:
            return found
    return None


def offset_of_max_timestamp(store: Store, snapshot: LogSnapshot) -> tuple[int, int] | None:
    """Kafka's ListOffsets MAX_TIMESTAMP (KIP-734): the first offset from the log start whose
    record has the largest timestamp, with that timestamp in ms. Only the files whose
    statistics reach the largest bound are read (and those without statistics), beside the
    in-memory tail.

    Returns:
        (offset, timestamp_ms), or None for a partition with no records from the log start.

    Raises:
        StorageUnavailable: a data file could not be read.
    """
    start = snapshot.log_start_offset
    tail = [c for c in snapshot.tail if c.base_offset >= start]
    tail_start = tail[0].base_offset if tail else snapshot.high_watermark
    files = [f for f in snapshot.files if f.max_offset >= start and f.min_offset < tail_start]
    bounds = [f.max_timestamp_ms for f in files if f.max_timestamp_ms is not None]
    largest = max(bounds, default=None)
    wanted = [f for f in files if f.max_timestamp_ms is None or f.max_timestamp_ms == largest]
    tables = [read_columns(store, f, ["offset", "timestamp"]) for f in wanted]
    tables += [c.records.select(["offset", "timestamp"]) for c in tail]
    if not tables:
        return None
    table = pa.concat_tables(tables)
    table = table.filter(pc.greater_equal(table.column("offset"), start))
    if not table.num_rows:
        return None
    top = pc.max(table.column("timestamp"))
    offset = pc.min(table.filter(pc.equal(table.column("timestamp"), top)).column("offset"))
    return offset.as_py(), top.value // 1000


def _empty(schema: pa.Schema) -> pa.Table:
    return _EMPTY_PLAIN_READ if schema is PLAIN_READ_SCHEMA else _EMPTY_READ
