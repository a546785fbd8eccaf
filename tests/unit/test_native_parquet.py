"""Data files encoded by lakelog's Rust Parquet writer (native/src/parquet_file.rs): what an
append writes, read back by pyarrow and delta-rs as the records it was given, with the
codec, dictionaries and statistics lakelog asks for."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from storage_layout.log import DeltaPartitionLog
from storage_layout.log import files as data_files
from storage_layout.log.arrow_records import records_to_arrow
from storage_layout.records import NewRecord
from storage_layout.store import open_store
from storage_layout.store import parquet as store_parquet
from storage_layout.topic_config import TopicConfig

RECORDS = [
    NewRecord(b"k1", b"v1", 1_700_000_000_123, (("trace", b"t"), ("é", None))),
    NewRecord(None, None, 1_700_000_000_001),
    NewRecord(b"", b"x" * 300, None, ()),
]


def test_the_writer_is_built():
    assert store_parquet.lakelog_native is not None


@pytest.mark.parametrize("codec", ["snappy", "zstd"])
def test_a_file_reads_back_as_the_records_it_was_given(codec):
    table = records_to_arrow(RECORDS, 40, 1_700_000_000_555, False)
    data = store_parquet._native_bytes(
        table,
        compression=codec,
        use_dictionary=list(data_files._DICTIONARY_COLUMNS),
        write_statistics=list(data_files._STATISTICS_COLUMNS),
    )
    assert pq.read_table(io.BytesIO(data)).equals(table)
    metadata = pq.ParquetFile(io.BytesIO(data)).metadata
    columns = [metadata.row_group(0).column(i) for i in range(metadata.num_columns)]
    assert {c.compression.lower() for c in columns} == {codec}
    with_statistics = {c.path_in_schema for c in columns if c.statistics is not None}
    assert with_statistics == set(data_files._STATISTICS_COLUMNS)
    offsets = columns[0].statistics
    assert (offsets.min, offsets.max) == (40, 42)
    dictionary = {c.path_in_schema for c in columns if "RLE_DICTIONARY" in c.encodings}
    assert dictionary <= set(data_files._DICTIONARY_COLUMNS) and "key" in dictionary


def test_appends_write_native_files_that_delta_rs_reads(tmp_path):
    uri = str(tmp_path / "t" / "0")
    DeltaPartitionLog.create(uri)
    log = DeltaPartitionLog.open(uri)
    for _ in range(3):
        log.append(RECORDS, config=TopicConfig())
    path = log.snapshot.files[0].path
    assert pq.ParquetFile(f"{uri}/{path}").metadata.created_by.startswith("parquet-rs")
    table = DeltaTable(uri).to_pyarrow_table(columns=["offset", "key", "value", "headers"])
    rows = sorted(table.to_pylist(), key=lambda row: row["offset"])
    assert [row["offset"] for row in rows] == list(range(9))
    assert rows[0]["headers"] == [{"key": "trace", "value": b"t"}, {"key": "é", "value": None}]
    assert rows[5]["value"] == b"x" * 300 and rows[4]["key"] is None


def test_large_files_and_typed_columns_are_left_to_pyarrow():
    table = records_to_arrow(RECORDS, 0, 0, False)
    assert data_files._native(table, data_files.APPEND_CODEC)
    assert not data_files._native(table, data_files.STORED_CODEC)  # a merge's file
    typed = table.append_column(
        "value_fields", pa.array([None] * 3, pa.struct([("a", pa.int32())]))
    )
    assert not data_files._native(typed, data_files.APPEND_CODEC)
    big = pa.concat_tables([table] * (data_files.NATIVE_RECORDS_MAX // 3 + 1))
    assert not data_files._native(big, data_files.APPEND_CODEC)


def test_a_table_the_native_writer_refuses_is_written_by_pyarrow(tmp_path):
    """A refusal of the Rust writer (here: a codec it does not offer) is a missed saving, not
    a failed append: pyarrow writes the file."""
    store = open_store(str(tmp_path))
    table = records_to_arrow(RECORDS, 0, 0, False)
    size = store_parquet.write_parquet(
        store,
        "f.parquet",
        table,
        native=True,
        compression="brotli",
        use_dictionary=["key"],
        write_statistics=["offset"],
    )
    written = pq.ParquetFile(tmp_path / "f.parquet")
    assert size > 0 and not written.metadata.created_by.startswith("parquet-rs")
    assert written.read().equals(table)
