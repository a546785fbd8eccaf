"""A partition table's data files through its store: one Parquet file per commit (or per merge),
read whole or by columns. Failures become StorageUnavailable (retriable)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from storage_layout.errors import StorageUnavailable
from storage_layout.log import log_commit
from storage_layout.log.arrow_records import file_stats, with_added_columns
from storage_layout.log.snapshot import DataFile
from storage_layout.schema import FILE_SCHEMA, PARTITION_COLUMN
from storage_layout.schemas.typed_columns import TYPED_COLUMNS, conform_table
from storage_layout.store import Store, read_parquet, write_parquet

# An append writes one file per commit, on the produce path: Snappy costs a third of zstd's
# fixed cost per file (0.12 against 0.31 ms for one record, 0.2 against 0.53 for 1 000). Merges
# and maintenance rewrite the data into zstd, its long-lived form. Both are read everywhere.
APPEND_CODEC = "snappy"
STORED_CODEC = "zstd"
# Dictionaries only where values repeat; a random value column only pays for one that fails.
_DICTIONARY_COLUMNS = (
    "timestamp_type",
    "key",
    "producer_id",
    "producer_epoch",
    "headers.list.element.key",
)
# Parquet statistics for what readers filter row groups on; Delta's own file statistics
# (file_stats) serve data skipping and the producer scan.
_STATISTICS_COLUMNS = ("offset", "timestamp")
# An append's file is encoded by lakelog's Rust writer (store.write_parquet `native`) up to
# this many records, when it has only FILE_SCHEMA's columns (typed columns: pyarrow, which
# every type of a registered schema has been tested with); above, pyarrow is as fast.
NATIVE_RECORDS_MAX = 8_192


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """A data file just written (not yet committed) and the Delta `add` action naming it."""

    data_file: DataFile
    add: dict[str, Any]


def write_data_file(
    store: Store,
    table: pa.Table,
    segment: int,
    now_ms: int,
    *,
    data_change: bool = True,
    codec: str = STORED_CODEC,
) -> WrittenFile:
    """Write `table` (every file column, offsets ascending) as a new file of `segment`.

    Raises:
        StorageUnavailable: the store could not be written.
    """
    relative = f"{PARTITION_COLUMN}={segment}/part-{uuid.uuid4().hex}.{codec}.parquet"
    try:
        size = write_parquet(
            store,
            relative,
            table,
            compression=codec,
            use_dictionary=list(_DICTIONARY_COLUMNS),
            write_statistics=list(_STATISTICS_COLUMNS),
            native=_native(table, codec),
        )
    except OSError as error:
        raise StorageUnavailable(f"Cannot write {store.uri}/{relative}: {error}") from error
    offsets = table.column("offset")
    stats = file_stats(table)
    data_file = DataFile(
        relative,
        segment,
        offsets[0].as_py(),
        offsets[-1].as_py(),
        table.num_rows,
        size,
        now_ms,
        table.column("producer_id").null_count < table.num_rows,
        stats.max_timestamp_ms,
        table.column("transactional").null_count < table.num_rows,
    )
    add = log_commit.add_action(
        relative, segment, size, now_ms, stats.stats, data_change=data_change
    )
    return WrittenFile(data_file, add)


def _native(table: pa.Table, codec: str) -> bool:
    return (
        codec == APPEND_CODEC
        and table.num_rows <= NATIVE_RECORDS_MAX
        and table.schema == FILE_SCHEMA
    )


def read_columns(store: Store, data_file: DataFile, columns: list[str]) -> pa.Table:
    """The given columns of a whole file.

    Raises:
        StorageUnavailable: it could not be read.
    """
    try:
        table = read_parquet(store, data_file.path, columns)
    except OSError as error:
        raise StorageUnavailable(f"Cannot read {store.uri}/{data_file.path}: {error}") from error
    if table.num_columns == len(columns):
        return table
    # A file from before the added columns lacks them (pyarrow leaves them out).
    return with_added_columns(table).select(columns)


def read_whole_file(
    store: Store, data_file: DataFile, file_schema: pa.Schema = FILE_SCHEMA
) -> pa.Table:
    """Every column of one file as `file_schema` (the table's: LogSnapshot.file_schema). A
    file from before the table's typed columns, or before they widened, reads them as null
    where it lacks them (FORMAT.md §17)."""
    typed = [name for name in file_schema.names if name in TYPED_COLUMNS]
    if not typed:
        return read_columns(store, data_file, FILE_SCHEMA.names)
    try:
        table = read_parquet(store, data_file.path, file_schema.names)
    except OSError as error:
        raise StorageUnavailable(f"Cannot read {store.uri}/{data_file.path}: {error}") from error
    return as_file_schema(with_added_columns(table), file_schema)


def as_file_schema(table: pa.Table, file_schema: pa.Schema) -> pa.Table:
    """`table` (a file's columns, or a tail chunk) with every column of `file_schema`: the
    typed columns it lacks as null, the ones it has widened to the table's types."""
    if table.schema == file_schema:
        return table
    targets = {
        name: file_schema.field(name).type for name in file_schema.names if name in TYPED_COLUMNS
    }
    typed = conform_table(table.select([n for n in table.column_names if n in targets]), targets)
    base = table.select(FILE_SCHEMA.names).cast(FILE_SCHEMA)
    for field, column in zip(typed.schema, typed.columns, strict=True):
        base = base.append_column(field, column)
    return base


def delete_uncommitted(store: Store, written: list[WrittenFile]) -> None:
    """Delete files whose commit lost (best effort: an orphan is vacuum's to remove)."""
    for item in written:
        try:
            store.delete(item.data_file.path)
        except OSError:
            pass
