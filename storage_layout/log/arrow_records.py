"""Records as Arrow tables: building a commit's file, Delta file statistics, byte limits."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from storage_layout.records import RecordColumns, Records, records_size_bytes
from storage_layout.schema import (
    ADDED_COLUMNS,
    COMPRESSION_COLUMN,
    FILE_SCHEMA,
    HEADERS_TYPE,
    NEW_RECORDS_SCHEMA,
    RECORD_COLUMNS,
    TIMESTAMP_TYPE,
    TIMESTAMP_TYPE_CREATE_TIME,
    TIMESTAMP_TYPE_LOG_APPEND_TIME,
    TRANSACTION_COLUMNS,
    TRANSACTIONAL_RECORD_COLUMNS,
)
from storage_layout.schemas.typed_columns import concat_typed, conform_table

# Per record: (producer_id, producer_epoch, sequence) or (..., transactional), or None for a
# record of no idempotent producer.
ProducerColumns = Sequence[tuple[int, int, int] | tuple[int, int, int, bool] | None]


RECORDS_SCHEMA = pa.schema([FILE_SCHEMA.field(name) for name in RECORD_COLUMNS])
# What reads read: the records and the transaction columns (Isolation decides what is kept).
READ_SCHEMA = pa.schema([FILE_SCHEMA.field(name) for name in TRANSACTIONAL_RECORD_COLUMNS])
# What reads without transactions need (HTTP, Kafka read_uncommitted data, Spark): the records
# and `control`, which tells transaction markers apart (they are not records). Older files lack
# `control`; a scan reads it as null.
PLAIN_READ_COLUMNS = (*RECORD_COLUMNS, "control")
PLAIN_READ_SCHEMA = pa.schema([FILE_SCHEMA.field(name) for name in PLAIN_READ_COLUMNS])


_EMPTY_RECORDS = RECORDS_SCHEMA.empty_table()
# Above this many chunks one compute call sums a column's lengths faster than Python does.
_BINARY_BYTES_CHUNKS_MAX = 8
_RANGE = pa.array(range(65_536), pa.int64())  # _offsets slices it
_TIMESTAMP_TYPES = {
    kind: pa.scalar(kind, pa.int8())
    for kind in (TIMESTAMP_TYPE_CREATE_TIME, TIMESTAMP_TYPE_LOG_APPEND_TIME)
}


def empty_records() -> pa.Table:
    """No records (one shared immutable table: a long poll's empty answers are frequent)."""
    return _EMPTY_RECORDS


def first_offset_at_or_after(table: pa.Table, timestamp_ms: int, offset_min: int = 0) -> int | None:
    """The smallest offset >= `offset_min` in `table` whose timestamp is >= `timestamp_ms` (any
    row order)."""
    threshold = pa.scalar(timestamp_ms * 1000, TIMESTAMP_TYPE)
    matches = pc.and_(
        pc.greater_equal(table.column("timestamp"), threshold),
        pc.greater_equal(table.column("offset"), offset_min),
    )
    return pc.min(pc.filter(table.column("offset"), matches)).as_py()


def payload_bytes(table: pa.Table) -> int:
    """Key and value bytes, as Kafka counts a record's size (nulls count nothing)."""
    return _binary_bytes(table.column("key")) + _binary_bytes(table.column("value"))


def _binary_bytes(column: pa.ChunkedArray) -> int:
    # The offsets buffer's ends, not `nbytes`: that costs ~3 us a chunk, and a fetch from the
    # in-memory tail concatenates a chunk per commit (0.7 ms for 200 of them). Int32 offsets
    # only: another engine's files may hold large or view binary columns.
    if column.type != pa.binary() or column.num_chunks > _BINARY_BYTES_CHUNKS_MAX:
        lengths = pc.binary_length(column.cast(pa.large_binary()))  # (no kernel for views)
        return pc.sum(lengths).as_py() or 0
    total = 0
    for chunk in column.chunks:
        if len(chunk):
            offsets = memoryview(chunk.buffers()[1]).cast("i")
            total += offsets[chunk.offset + len(chunk)] - offsets[chunk.offset]
    return total


def limit_bytes(records: pa.Table, bytes_max: int) -> pa.Table:
    """Keep the longest prefix within `bytes_max` of key+value bytes, and at least one record."""
    if records.num_rows <= 1 or payload_bytes(records) <= bytes_max:
        return records
    sizes = pc.add(
        pc.fill_null(pc.binary_length(records.column("key")), 0),
        pc.fill_null(pc.binary_length(records.column("value")), 0),
    )
    cumulative = pc.cumulative_sum(sizes)
    keep = pc.sum(pc.less_equal(cumulative, bytes_max)).as_py() or 0
    return records.slice(0, max(1, keep))


def new_records_table(records: Records) -> pa.Table:
    """`records` as columns of schema.NEW_RECORDS_SCHEMA."""
    if isinstance(records, RecordColumns):
        return records.table
    headers = [
        [{"key": k, "value": v} for k, v in r.headers] if r.headers else None for r in records
    ]
    columns = [
        pa.array([r.timestamp_ms for r in records], pa.int64()),
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        pa.array(headers, HEADERS_TYPE),
    ]
    return pa.Table.from_arrays(columns, schema=NEW_RECORDS_SCHEMA)


def concat_records(parts: Sequence[Records]) -> Records:
    """One group commit's records, in order: a list while every part is one, else columns
    (with the parts' typed columns, merged)."""
    if not any(isinstance(part, RecordColumns) for part in parts):
        return [record for part in parts for record in part]
    tables = [new_records_table(part) for part in parts]
    size_bytes = sum(records_size_bytes(part) for part in parts)
    typed = concat_typed(
        [part.typed if isinstance(part, RecordColumns) else None for part in parts],
        [len(part) for part in parts],
    )
    compressions = [compression_of(part) for part in parts]
    compression = None
    if any(c.null_count < len(c) for c in compressions):
        compression = pa.concat_arrays(compressions)
    return RecordColumns(pa.concat_tables(tables), size_bytes, typed, compression)


def typed_of(records: Records) -> pa.Table | None:
    return records.typed if isinstance(records, RecordColumns) else None


def compressed_with(records: Records, codec_id: int) -> RecordColumns:
    """`records` noted as having come in a Kafka batch compressed with codec `codec_id`."""
    table = new_records_table(records)
    codec = pc.fill_null(pa.nulls(table.num_rows, pa.int8()), pa.scalar(codec_id, pa.int8()))
    typed = records.typed if isinstance(records, RecordColumns) else None
    named = records.named if isinstance(records, RecordColumns) else None
    return RecordColumns(table, records_size_bytes(records), typed, codec, named)


def compression_of(records: Records) -> pa.Array:
    """The codec each record came compressed with (FORMAT.md §18; null: none)."""
    if isinstance(records, RecordColumns) and records.compression is not None:
        return records.compression
    return pa.nulls(len(records), pa.int8())


def records_to_arrow(
    records: Records,
    base_offset: int,
    now_ms: int,
    log_append_time: bool,
    producers: ProducerColumns | None = None,
    typed_targets: Mapping[str, pa.DataType] | None = None,
) -> pa.Table:
    """The file columns of `records` at offsets from `base_offset`, and the table's typed
    columns `typed_targets` (FORMAT.md §17; null for records without them); a record without
    a timestamp (or every record, with LogAppendTime) gets `now_ms`."""
    new = new_records_table(records)
    count = new.num_rows
    if log_append_time:
        timestamps_ms = pa.nulls(count, pa.int64())
        timestamp_type = TIMESTAMP_TYPE_LOG_APPEND_TIME
    else:
        timestamps_ms = new.column("timestamp_ms")
        timestamp_type = TIMESTAMP_TYPE_CREATE_TIME
    if timestamps_ms.null_count:  # (a compute call costs ~10 us: one commit makes dozens)
        timestamps_ms = pc.fill_null(timestamps_ms, now_ms)
    columns = [
        _offsets(base_offset, count),
        _timestamps(timestamps_ms),
        pa.repeat(_TIMESTAMP_TYPES[timestamp_type], count),
        new.column("key"),
        new.column("value"),
        new.column("headers"),
        *_producer_arrays(producers, count),
        compression_of(records),
    ]
    table = pa.Table.from_arrays(columns, schema=FILE_SCHEMA)
    if not typed_targets:
        return table
    typed = typed_of(records)
    typed = conform_table(typed if typed is not None else table.select([]), dict(typed_targets))
    for field, column in zip(typed.schema, typed.columns, strict=True):
        table = table.append_column(field, column)
    return table


def _timestamps(timestamps_ms: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Milliseconds as TIMESTAMP_TYPE: the microseconds' int64 buffer viewed as the
    timestamp type (no cast call)."""
    micros = pc.multiply_checked(timestamps_ms, 1000)
    if isinstance(micros, pa.ChunkedArray):
        micros = micros.combine_chunks()
    return micros.view(TIMESTAMP_TYPE)


def _offsets(base_offset: int, count: int) -> pa.Array:
    """base_offset, base_offset + 1, ... (count of them): one compute call on a slice of a
    prepared range instead of an Arrow array built from a Python range (a third of the cost
    of building a commit's columns)."""
    if count > len(_RANGE):
        return pa.array(range(base_offset, base_offset + count), pa.int64())
    return pc.add_checked(_RANGE.slice(0, count), pa.scalar(base_offset, pa.int64()))


def _producer_arrays(producers: ProducerColumns | None, count: int) -> list[pa.Array]:
    """producer_id, producer_epoch, sequence, transactional and control (null: data)."""
    control = pa.nulls(count, pa.int8())
    if producers is None or all(p is None for p in producers):
        return [
            pa.nulls(count, pa.int64()),
            pa.nulls(count, pa.int16()),
            pa.nulls(count, pa.int32()),
            pa.nulls(count, pa.bool_()),
            control,
        ]
    if len(producers) != count:
        raise ValueError("producers needs one entry per record")
    ids, epochs, sequences, transactional = zip(*(_four(p) for p in producers), strict=True)
    return [
        pa.array(ids, pa.int64()),
        pa.array(epochs, pa.int16()),
        pa.array(sequences, pa.int32()),
        pa.array(transactional, pa.bool_()),
        control,
    ]


def _four(producer) -> tuple:
    if producer is None:
        return None, None, None, None
    if len(producer) == 3:
        return (*producer, None)
    producer_id, epoch, sequence, transactional = producer
    return producer_id, epoch, sequence, True if transactional else None


def marker_table(offset: int, producer_id: int, epoch: int, control: int, now_ms: int) -> pa.Table:
    """A transaction marker (FORMAT.md §14): one control row of every file column."""
    columns = {
        "offset": pa.array([offset], pa.int64()),
        "timestamp": pa.array([now_ms * 1000], TIMESTAMP_TYPE),
        "timestamp_type": pa.array([TIMESTAMP_TYPE_LOG_APPEND_TIME], pa.int8()),
        "key": pa.nulls(1, pa.binary()),
        "value": pa.nulls(1, pa.binary()),
        "headers": pa.nulls(1, HEADERS_TYPE),
        "producer_id": pa.array([producer_id], pa.int64()),
        "producer_epoch": pa.array([epoch], pa.int16()),
        "sequence": pa.nulls(1, pa.int32()),
        "transactional": pa.array([True], pa.bool_()),
        "control": pa.array([control], pa.int8()),
        COMPRESSION_COLUMN: pa.nulls(1, pa.int8()),
    }
    return pa.Table.from_pydict(columns, schema=FILE_SCHEMA)


def with_added_columns(table: pa.Table) -> pa.Table:
    """`table` with the columns added after the first tables (the transaction columns,
    FORMAT.md §14; `compression`, §18), as nulls when a file from before them lacks them."""
    for name in ADDED_COLUMNS:
        if name not in table.column_names:
            table = table.append_column(
                FILE_SCHEMA.field(name), pa.nulls(table.num_rows, FILE_SCHEMA.field(name).type)
            )
    return table


@dataclass(frozen=True, slots=True)
class FileStats:
    """A data file's Delta statistics (the add action's `stats`), and its largest timestamp
    as they state it (DataFile.max_timestamp_ms)."""

    stats: str
    max_timestamp_ms: int


def file_stats(table: pa.Table) -> FileStats:
    """Delta file statistics: offsets exact; timestamps widened to whole milliseconds (Delta
    stores millisecond precision, and a truncated maximum would let readers skip a file)."""
    offsets = table.column("offset")
    bounds = pc.min_max(table.column("timestamp"))
    min_ms = bounds["min"].value // 1000  # (the scalar's microseconds, as an int)
    max_ms = -(-bounds["max"].value // 1000)
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
    # ...and these let the transaction index rebuild read only files with transactions.
    for name in TRANSACTION_COLUMNS:
        stats["nullCount"][name] = table.column(name).null_count
    if producer_ids.null_count < table.num_rows:
        id_bounds = pc.min_max(producer_ids)
        stats["minValues"]["producer_id"] = id_bounds["min"].as_py()
        stats["maxValues"]["producer_id"] = id_bounds["max"].as_py()
    return FileStats(json.dumps(stats, separators=(",", ":")), max_ms)


def _iso_ms(epoch_ms: int) -> str:
    seconds, millis = divmod(epoch_ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"
