"""Parquet files through a `Store`: written whole (one PUT on object stores), read whole."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from storage_layout.store.base import Store


def write_parquet(store: Store, path: str, table: pa.Table, **options) -> int:
    """Write `table` as a new Parquet file at `path`, a fresh name (Store.put_new; zstd
    unless `options`, pyarrow's write_table arguments, say otherwise); its size in bytes."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **({"compression": "zstd"} | options))
    data = sink.getvalue().to_pybytes()
    store.put_new(path, data)
    return len(data)


def read_parquet(store: Store, path: str, columns: list[str]) -> pa.Table:
    """The given columns of a whole file, without dataset discovery (half the cost of
    pq.read_table for the small files read by the dozen)."""
    with store.open_input(path) as handle:
        return pq.ParquetFile(handle).read(columns=columns)
