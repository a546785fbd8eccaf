"""Input partitions of a topic read, batch and stream alike: the driver plans them from each
partition's Delta log (plan_splits, about RECORDS_PER_SPLIT records each), executors read them
with pyarrow from the Parquet files they name (read_split), with nothing else from the driver.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.datasource import InputPartition

from pipeline.options import EARLIEST, LATEST, resolve_range, timestamp_option
from storage_layout import store
from storage_layout.log import DeltaPartitionLog, LogSnapshot
from storage_layout.log.arrow_records import PLAIN_READ_COLUMNS, PLAIN_READ_SCHEMA
from storage_layout.log.transaction_index import (
    AbortedTransaction,
    TransactionIndex,
    aborted_mask,
)
from storage_layout.schema import FILE_SCHEMA
from storage_layout.schemas.typed_columns import conform_table

RECORDS_PER_SPLIT = 1_000_000


@dataclass(frozen=True, slots=True)
class FileSlice:
    """One Parquet file of a partition table (relative path) and the offsets wanted from it."""

    path: str
    start: int  # inclusive
    end: int  # exclusive


@dataclass(frozen=True)
class OffsetSplit(InputPartition):
    """Records [start, end) of one topic partition, in `files` of the table at `table_uri`."""

    topic: str
    partition: int
    table_uri: str
    files: tuple[FileSlice, ...]
    # The driver's explicit storage options (credentials from variables reach executors
    # through their environment; these would not).
    storage_options: tuple[tuple[str, str], ...] = ()
    # read_committed: the aborted transactions with records in this split, which executors
    # leave out (the driver knows them from the partition's transaction index).
    aborted: tuple[AbortedTransaction, ...] = ()


# ---- planning (driver) --------------------------------------------------------------------


def by_timestamp(options, log: DeltaPartitionLog, topic: str, partition: int, *, start, end):
    """Spark's timestamp options, which take precedence over the offsets options:
    `startingTimestamp` (all partitions), else `startingOffsetsByTimestamp` (JSON, per
    partition); `endingTimestamp`, else `endingOffsetsByTimestamp`. A start with no record at or
    after its timestamp is an error (Spark's default strategy); such an end is the latest."""
    start_ms = timestamp_option(
        options, "startingTimestamp", "startingOffsetsByTimestamp", topic, partition
    )
    if start_ms is not None:
        start = log.offset_for_timestamp(start_ms)
        if start is None:
            raise ValueError(
                f"No record of {topic}-{partition} has a timestamp at or after {start_ms} "
                f"(startingTimestamp / startingOffsetsByTimestamp)."
            )
    end_ms = timestamp_option(
        options, "endingTimestamp", "endingOffsetsByTimestamp", topic, partition
    )
    if end_ms is not None:
        found = log.offset_for_timestamp(end_ms)
        end = LATEST if found is None else found
    return start, end


def partition_splits(
    log: DeltaPartitionLog,
    *,
    topic: str,
    partition: int,
    table_uri: str,
    start: int,
    end: int,
    fail_on_data_loss: bool,
    committed: bool,
) -> list[OffsetSplit]:
    low = log.snapshot.log_start_offset
    if 0 <= start < low:
        if fail_on_data_loss:
            raise ValueError(
                f"startingOffsets for {topic}-{partition} is {start}, below log_start_offset "
                f"{low}: those records were deleted by retention. Set failOnDataLoss=false to "
                f"start at {low}."
            )
        start = low
    snapshot = log.snapshot
    transactions = None
    if committed:
        transactions = log.transaction_index(snapshot)
        stable = log.last_stable_offset(snapshot)
        if end == LATEST or end > stable:  # past it: records of a transaction still open
            # ...but never before the start: a start past the last stable offset reads
            # nothing yet (not an error, as Spark's Kafka source waits there).
            end = max(stable, snapshot.log_start_offset if start == EARLIEST else start)
    wanted = resolve_range(log, partition=partition, start=start, end=end, topic=topic)
    return plan_splits(
        snapshot,
        topic=topic,
        partition=partition,
        table_uri=table_uri,
        first=wanted.start,
        last=wanted.end,
        transactions=transactions,
    )


def plan_splits(
    snapshot: LogSnapshot,
    *,
    topic: str,
    partition: int,
    table_uri: str,
    first: int,
    last: int,
    transactions: TransactionIndex | None = None,
) -> list[OffsetSplit]:
    """Input partitions for offsets [first, last) of one topic partition, from `snapshot`'s
    files holding them, about RECORDS_PER_SPLIT offsets each (batch and stream reads). With
    `transactions` (read_committed), each split names the aborted transactions in its range.

    The files of one snapshot never overlap in offsets and each slice is cut by offset, so every
    offset in range is read exactly once, however compaction or file optimization rewrote the
    files before; offsets a compacted topic no longer stores are simply not there.
    """
    splits, files, records = [], [], 0

    def cut() -> None:
        aborted = ()
        if transactions is not None:
            aborted = tuple(transactions.aborted_between(files[0].start, files[-1].end))
        splits.append(_split(topic, partition, table_uri, files, aborted))

    for data_file in snapshot.files:
        if data_file.max_offset < first or data_file.min_offset >= last:
            continue
        piece = FileSlice(data_file.path, max(first, data_file.min_offset), last)
        files.append(piece)
        records += min(last, data_file.max_offset + 1) - piece.start
        if records >= RECORDS_PER_SPLIT:
            cut()
            files, records = [], 0
    if files:
        cut()
    return splits


def _split(
    topic: str, partition: int, table_uri: str, files: list[FileSlice], aborted: tuple
) -> OffsetSplit:
    options = tuple(sorted(store.storage_options().items()))
    return OffsetSplit(topic, partition, table_uri, tuple(files), options, aborted)


# ---- reading (executors) ---------------------------------------------------------------------


# The records and `control` (transaction markers are not records to Spark's Kafka source
# either, FORMAT.md §14); read_committed splits with aborted transactions also need to tell
# whose records they are.
_COMMITTED_COLUMNS = [*PLAIN_READ_COLUMNS, "producer_id", "transactional"]
_COMMITTED_SCHEMA = pa.schema([FILE_SCHEMA.field(name) for name in _COMMITTED_COLUMNS])


def read_split(
    split: OffsetSplit, *, include_headers: bool, typed: Mapping[str, pa.DataType] | None = None
) -> Iterator[pa.RecordBatch]:
    """The records of `split` as Arrow batches in Spark's Kafka schema, read from its Parquet
    files with pyarrow, and with `typed` (FORMAT.md §17) those typed columns, as those types
    (null where a file has none). Needs nothing but the split (no driver state), so it runs on
    executors."""
    if not isinstance(split, OffsetSplit):
        return  # no split at all (nothing in range): Spark still runs one empty task
    store.adopt(dict(split.storage_options))
    table_store = store.open_store(split.table_uri)
    columns, schema = list(PLAIN_READ_COLUMNS), PLAIN_READ_SCHEMA  # pyarrow takes lists
    if split.aborted:
        columns, schema = _COMMITTED_COLUMNS, _COMMITTED_SCHEMA
    typed = dict(typed or {})
    for piece in split.files:
        table = pq.read_table(
            table_store.open_input(piece.path),
            columns=columns,
            filters=(
                (pc.field("offset") >= piece.start)
                & (pc.field("offset") < piece.end)
                & pc.field("control").is_null()
            ),
            # Files rewritten by delta-rs (DELETE, OPTIMIZE) store binary_view/string_view,
            # which pyarrow cannot filter: the scan casts them to the table's types first.
            schema=schema,
        )
        if split.aborted and table.num_rows:
            table = table.filter(pc.invert(aborted_mask(table, split.aborted)))
        if table.num_rows:
            rows = _kafka_rows(table, split, include_headers)
            if typed:
                rows = _with_typed(rows, table_store, piece, typed)
            yield from rows.to_batches()


def _with_typed(rows: pa.Table, table_store, piece: FileSlice, typed: dict) -> pa.Table:
    """`rows` (offset order) with the typed columns of their file, conformed to `typed`."""
    source = pq.ParquetFile(table_store.open_input(piece.path))
    present = [name for name in typed if name in source.schema_arrow.names]
    stored = source.read(columns=["offset", *present]) if present else None
    if stored is not None:
        wanted = pc.is_in(stored.column("offset"), value_set=rows.column("offset"))
        stored = stored.filter(wanted).sort_by("offset")
    fitted = conform_table(stored if stored is not None else rows.select([]), typed)
    for field, column in zip(fitted.schema, fitted.columns, strict=True):
        rows = rows.append_column(field, column)
    return rows


def _kafka_rows(table: pa.Table, split: OffsetSplit, include_headers: bool) -> pa.Table:
    count = table.num_rows
    columns = {
        "key": table.column("key"),
        "value": table.column("value"),
        "topic": pa.array([split.topic] * count, pa.string()),
        "partition": pa.array([split.partition] * count, pa.int32()),
        "offset": table.column("offset"),
        "timestamp": table.column("timestamp"),
        "timestampType": table.column("timestamp_type").cast(pa.int32()),
    }
    if include_headers:
        headers = table.column("headers")
        empty = pc.equal(pc.list_value_length(headers), 0)
        columns["headers"] = pc.if_else(
            pc.fill_null(empty, False), pa.nulls(count, headers.type), headers
        )
    return pa.table(columns).sort_by("offset")
