"""Transactions in a partition table (FORMAT.md §14): transactional records and their
markers as rows, read back with the columns a plain Delta reader needs; files from before the
transaction columns read as nulls."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from storage_layout.log import DeltaPartitionLog
from storage_layout.log.files import read_columns
from storage_layout.log.housekeeping import MERGE_FILES_MIN
from storage_layout.log.snapshot import DataFile
from storage_layout.log.transaction_index import AbortedTransaction
from storage_layout.records import Isolation, NewRecord
from storage_layout.schema import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    FILE_SCHEMA,
    PARTITION_SCHEMA,
    TRANSACTION_COLUMNS,
)
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


def mixed_partition(log: DeltaPartitionLog) -> None:
    """0 plain | 1-2 producer 1's transaction | 3 producer 2's | 4 ABORT of 2 | 5 producer 3's,
    left open | 6 COMMIT of 1 | 7 plain."""

    def txn(producer: int, sequence: int, *names: str) -> None:
        producers = [(producer, 0, sequence + i, True) for i in range(len(names))]
        log.append(values(*names), config=CONFIG, producers=producers)

    log.append(values("plain-0"), config=CONFIG)
    txn(1, 0, "p1-a", "p1-b")
    txn(2, 0, "p2")
    log.append_marker(2, 0, CONTROL_ABORT, config=CONFIG)
    txn(3, 0, "p3-open")
    log.append_marker(1, 0, CONTROL_COMMIT, config=CONFIG)
    log.append(values("plain-7"), config=CONFIG)


def read(log: DeltaPartitionLog, isolation: Isolation, from_offset: int = 0):
    return log.read(from_offset=from_offset, records_max=100, bytes_max=10**6, isolation=isolation)


def test_each_isolation_reads_what_it_promises(log):
    mixed_partition(log)
    plain = read(log, Isolation.PLAIN)
    assert plain.records.column("offset").to_pylist() == [0, 1, 2, 3, 5, 7]  # no markers
    assert plain.records.column_names == list(Isolation.PLAIN.columns)
    uncommitted = read(log, Isolation.UNCOMMITTED)
    assert uncommitted.records.column("offset").to_pylist() == list(range(8))
    assert uncommitted.records.column("control").to_pylist()[4:7] == [0, None, 1]
    committed = read(log, Isolation.COMMITTED)
    assert committed.last_stable_offset == 5  # producer 3's open transaction
    assert committed.records.column("offset").to_pylist() == [0, 1, 2, 3, 4]
    assert committed.aborted == (AbortedTransaction(2, 3, 4),)
    assert read(log, Isolation.COMMITTED, from_offset=5).aborted == ()
    data = read(log, Isolation.COMMITTED_DATA)
    assert data.records.column("offset").to_pylist() == [0, 1, 2]  # 3 aborted, 4 its marker
    assert data.records.column_names == list(Isolation.PLAIN.columns)
    assert (data.last_stable_offset, data.next_offset) == (5, 5)


def test_a_read_of_only_hidden_rows_still_moves_the_reader_on(log):
    mixed_partition(log)
    hidden = log.read(
        from_offset=3, records_max=2, bytes_max=10**6, isolation=Isolation.COMMITTED_DATA
    )
    assert hidden.records.num_rows == 0  # the aborted record and its marker
    assert hidden.next_offset == 5
    assert read(log, Isolation.PLAIN, from_offset=8).next_offset is None  # nothing to read


def test_isolation_level_names_map_to_data_reads():
    assert Isolation.for_data_readers("read_uncommitted") is Isolation.PLAIN
    assert Isolation.for_data_readers("read_committed") is Isolation.COMMITTED_DATA
    with pytest.raises(ValueError, match="read_uncommitted .* or read_committed"):
        Isolation.for_data_readers("serializable")


def test_the_index_rebuilt_from_the_files_matches_the_one_kept_while_appending(log):
    log.append(values("x"), config=CONFIG, producers=transactional(0, 1))
    kept_early = log.transaction_index()
    assert kept_early.last_stable_offset(log.snapshot.high_watermark) == 0
    mixed_partition(log)
    kept = log.transaction_index()
    rebuilt = DeltaPartitionLog.open(log.table_uri).transaction_index()
    assert rebuilt == kept
    # Producer 7's transaction (offset 0) and producer 3's are open; 2's was aborted.
    assert dict(kept.open_first_offsets) == {PRODUCER: 0, 3: 6}
    assert kept.aborted == (AbortedTransaction(2, 4, 5),)


def test_markers_are_not_producer_batches_when_the_state_is_rebuilt(log):
    log.append(values("a"), config=CONFIG, producers=transactional(0, 1))
    log.append_marker(PRODUCER, EPOCH, CONTROL_COMMIT, config=CONFIG)
    reopened = DeltaPartitionLog.open(log.table_uri)
    entry = reopened.producer_states().entry(PRODUCER)
    assert (entry.epoch, entry.last_sequence) == (EPOCH, 0)


def old_table(tmp_path) -> str:
    """A partition table created before the transaction columns, with one plain record."""
    uri = str(tmp_path / "old" / "0")
    old_schema = pa.schema([f for f in PARTITION_SCHEMA if f.name not in TRANSACTION_COLUMNS])
    DeltaTable.create(uri, old_schema, partition_by=["segment"])
    DeltaPartitionLog.open(uri).append(values("before"), config=CONFIG)
    return uri


def delta_columns(uri: str) -> list[str]:
    return [field.name for field in DeltaTable(uri).schema().fields]


@pytest.mark.parametrize("first_write", ["transactional records", "a marker"])
def test_the_first_transactional_write_adds_the_columns_to_an_old_table(tmp_path, first_write):
    uri = old_table(tmp_path)
    assert "transactional" not in delta_columns(uri)
    log = DeltaPartitionLog.open(uri)
    log.append(values("plain"), config=CONFIG, producers=[(PRODUCER, 0, 0)])
    assert "transactional" not in delta_columns(uri)  # idempotent records need no upgrade
    if first_write == "a marker":
        log.append_marker(PRODUCER, 0, CONTROL_ABORT, config=CONFIG)
    else:
        log.append(values("in-txn"), config=CONFIG, producers=transactional(1, 1))
    columns = delta_columns(uri)
    assert columns.index("transactional") < columns.index("control") < columns.index("segment")
    assert not log.ensure_added_columns()  # once
    reopened = DeltaPartitionLog.open(uri)
    assert reopened.snapshot.high_watermark == 3
    table = DeltaTable(uri).to_pyarrow_table(columns=["offset", "transactional"])
    assert sorted(table.to_pylist(), key=lambda row: row["offset"])[2]["transactional"] is True


def test_the_index_reads_a_merged_file_whole_not_the_commit_it_starts_with(log):
    """A small-file merge leaves one file starting where the first merged commit did, while
    the tail still holds that commit alone: the index read only that commit's rows, missed
    the markers after it, and held the last stable offset there for good (franz-go's
    TestGroupETL with TestTxnEtl left read_committed consumers stalled)."""
    for sequence in range(MERGE_FILES_MIN):
        log.append(values(f"v{sequence}"), config=CONFIG, producers=transactional(sequence, 1))
        log.append_marker(PRODUCER, 0, CONTROL_COMMIT, config=CONFIG)
    assert log.maybe_merge_small_files() > 0
    merged = log.snapshot.files[0]
    assert merged.num_records > 1 and log.snapshot.tail[0].base_offset == merged.min_offset
    index = log.transaction_index()
    assert index.open_first_offsets == {}
    assert index.last_stable_offset(log.snapshot.high_watermark) == log.snapshot.high_watermark
