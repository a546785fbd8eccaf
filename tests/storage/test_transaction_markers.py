"""Transactions in a partition table (FORMAT.md §14): transactional records and their
markers as rows, read back with the columns a plain Delta reader needs; files from before the
transaction columns read as nulls."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from storage_layout.log import DeltaPartitionLog
from storage_layout.log.files import read_columns
from storage_layout.log.snapshot import DataFile
from storage_layout.records import NewRecord
from storage_layout.schema import CONTROL_ABORT, CONTROL_COMMIT, FILE_SCHEMA
from storage_layout.store import open_store, write_parquet
from storage_layout.topic_config import TopicConfig

CONFIG = TopicConfig()
PRODUCER, EPOCH = 7, 2


def transactional(sequence: int, count: int) -> list[tuple[int, int, int, bool]]:
    return [(PRODUCER, EPOCH, sequence + i, True) for i in range(count)]


def values(*names: str) -> list[NewRecord]:
    return [NewRecord(None, name.encode()) for name in names]


@pytest.fixture
def log(tmp_path) -> DeltaPartitionLog:
    uri = str(tmp_path / "t" / "0")
    DeltaPartitionLog.create(uri)
    return DeltaPartitionLog.open(uri)


def stored(log: DeltaPartitionLog) -> list[dict]:
    columns = ["offset", "value", "producer_id", "transactional", "control"]
    table = DeltaTable(log.table_uri).to_pyarrow_table(columns=columns).sort_by("offset")
    return table.to_pylist()


def test_markers_take_offsets_after_the_transactions_records(log):
    log.append(values("a", "b"), config=CONFIG, producers=transactional(0, 2))
    log.append(values("plain"), config=CONFIG)
    marker = log.append_marker(PRODUCER, EPOCH, CONTROL_COMMIT, config=CONFIG)
    log.append(values("c"), config=CONFIG, producers=transactional(2, 1))
    log.append_marker(PRODUCER, EPOCH, CONTROL_ABORT, config=CONFIG)
    assert (marker.base_offset, marker.last_offset) == (3, 3)
    assert [(r["offset"], r["value"], r["transactional"], r["control"]) for r in stored(log)] == [
        (0, b"a", True, None),
        (1, b"b", True, None),
        (2, b"plain", None, None),
        (3, None, True, CONTROL_COMMIT),
        (4, b"c", True, None),
        (5, None, True, CONTROL_ABORT),
    ]
    assert log.snapshot.high_watermark == 6


def test_idempotent_records_are_not_transactional(log):
    log.append(values("x"), config=CONFIG, producers=[(PRODUCER, 0, 0)])
    (row,) = stored(log)
    assert (row["producer_id"], row["transactional"], row["control"]) == (PRODUCER, None, None)


def test_a_file_from_before_the_transaction_columns_reads_them_as_null(tmp_path):
    store = open_store(str(tmp_path))
    old_columns = [name for name in FILE_SCHEMA.names if name not in ("transactional", "control")]
    old = pa.table(
        {name: pa.nulls(2, FILE_SCHEMA.field(name).type) for name in old_columns}
    ).set_column(0, "offset", pa.array([0, 1], pa.int64()))
    size = write_parquet(store, "old.parquet", old)
    data_file = DataFile("old.parquet", 0, 0, 1, 2, size, 0)
    table = read_columns(store, data_file, ["offset", "transactional", "control"])
    assert table.schema.types == [FILE_SCHEMA.field(n).type for n in table.column_names]
    assert table.to_pylist() == [
        {"offset": 0, "transactional": None, "control": None},
        {"offset": 1, "transactional": None, "control": None},
    ]
