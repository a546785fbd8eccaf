"""DeltaPartitionLog on real Delta tables in a temp dir: offsets, the CAS fence, segments, reads."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
from collections import Counter

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from storage_layout.errors import (
    AppendConflict,
    CorruptPartition,
    OffsetOutOfRange,
    StorageUnavailable,
    UnsupportedTableFeatures,
)
from storage_layout.log import MERGE_FILES_MIN, DataFile, DeltaPartitionLog, housekeeping
from storage_layout.records import NewRecord
from storage_layout.schema import PARTITION_SCHEMA
from storage_layout.store import open_store
from storage_layout.topic_config import TopicConfig

CONFIG = TopicConfig()


def records(count: int, prefix: str = "v") -> list[NewRecord]:
    return [NewRecord(f"k{i}".encode(), f"{prefix}{i}".encode()) for i in range(count)]


def all_offsets(uri: str) -> list[int]:
    return sorted(DeltaTable(uri).to_pyarrow_table(columns=["offset"]).column("offset").to_pylist())


@pytest.fixture
def table_uri(tmp_path) -> str:
    uri = str(tmp_path / "topic" / "0")
    DeltaPartitionLog.create(uri)
    return uri


def test_offsets_are_dense_from_zero_and_read_back(table_uri):
    """Appends get offsets 0.. with no gap; reads return the exact records in order."""
    log = DeltaPartitionLog.open(table_uri)
    first = log.append(records(3), config=CONFIG)
    second = log.append(records(2, "w"), config=CONFIG)
    assert (first.base_offset, first.last_offset) == (0, 2)
    assert (second.base_offset, second.last_offset) == (3, 4)
    fetched = DeltaPartitionLog.open(table_uri).read(from_offset=0, records_max=10, bytes_max=10**6)
    assert fetched.records.column("offset").to_pylist() == [0, 1, 2, 3, 4]
    assert fetched.records.column("value").to_pylist() == [b"v0", b"v1", b"v2", b"w0", b"w1"]
    assert all_offsets(table_uri) == [0, 1, 2, 3, 4]


def test_high_watermark_comes_from_the_txn_version(table_uri):
    """The high watermark is txn('log') + 1 after a reopen (no scan of the data)."""
    DeltaPartitionLog.open(table_uri).append(records(7), config=CONFIG)
    assert DeltaTable(table_uri).transaction_version("log") == 6
    assert DeltaPartitionLog.open(table_uri).bounds().high_watermark == 7


def test_two_writers_on_one_stale_snapshot_only_one_commits(table_uri):
    """Invariant 3: a second writer on the same snapshot is rejected; no offset assigned twice."""
    writer_a = DeltaPartitionLog.open(table_uri)
    writer_b = DeltaPartitionLog.open(table_uri)
    writer_a.append(records(5, "a"), config=CONFIG)
    with pytest.raises(AppendConflict):
        writer_b.append(records(5, "b"), config=CONFIG)
    assert all_offsets(table_uri) == [0, 1, 2, 3, 4]
    values = DeltaTable(table_uri).to_pyarrow_table(columns=["value"]).column("value").to_pylist()
    assert set(values) == {b"a0", b"a1", b"a2", b"a3", b"a4"}
    # The loser reloaded on the conflict, so its next append continues the log densely.
    assert writer_b.append(records(1, "b"), config=CONFIG).base_offset == 5


def test_control_plain_append_without_txn_is_not_fenced(table_uri):
    """Control for the fence: a stale writer without the txn action is silently rebased, which
    is why every offset-assigning writer must carry the CAS (it would duplicate offsets)."""
    stale = DeltaTable(table_uri)
    DeltaPartitionLog.open(table_uri).append(records(2), config=CONFIG)
    duplicate = pa.table(
        {
            "offset": pa.array([0, 1], pa.int64()),
            "timestamp": pa.array([0, 0], PARTITION_SCHEMA.field("timestamp").type),
            "timestamp_type": pa.array([0, 0], pa.int8()),
            "key": pa.array([None, None], pa.binary()),
            "value": pa.array([b"x", b"y"], pa.binary()),
            "headers": pa.nulls(2, PARTITION_SCHEMA.field("headers").type),
            "producer_id": pa.nulls(2, pa.int64()),
            "producer_epoch": pa.nulls(2, pa.int16()),
            "sequence": pa.nulls(2, pa.int32()),
            "transactional": pa.nulls(2, pa.bool_()),
            "control": pa.nulls(2, pa.int8()),
            "compression": pa.nulls(2, pa.int8()),
            "segment": pa.array([0, 0], pa.int64()),
        },
        schema=PARTITION_SCHEMA,
    )
    write_deltalake(stale, duplicate, mode="append", partition_by=["segment"])
    assert Counter(all_offsets(table_uri)) == Counter({0: 2, 1: 2})


def _append_with_retries(uri: str, rounds: int, tag: str) -> None:
    log = DeltaPartitionLog.open(uri)
    done = 0
    while done < rounds:
        try:
            log.append(records(3, tag), config=CONFIG)
            done += 1
        except AppendConflict:
            continue  # reloaded: assign offsets again from the new snapshot


def test_competing_processes_never_assign_an_offset_twice(table_uri):
    """Two OS processes appending to one table: offsets stay dense and unique."""
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=_append_with_retries, args=(table_uri, 15, tag)) for tag in "ab"
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    assert all_offsets(table_uri) == list(range(90))


def test_segments_roll_by_bytes_with_base_offset_values(table_uri):
    """segment.bytes: once the active segment is full, the next append opens a segment whose
    value is that append's first offset."""
    config = TopicConfig.from_mapping({"segment.bytes": "100"})
    log = DeltaPartitionLog.open(table_uri)
    segments = [log.append(records(4), config=config).segment for _ in range(3)]
    assert segments == [0, 4, 8]


def test_segments_roll_by_age(table_uri):
    """segment.ms: an append after the active segment's age limit opens a new segment."""
    config = TopicConfig.from_mapping({"segment.ms": "1000"})
    log = DeltaPartitionLog.open(table_uri)
    assert log.append(records(2), config=config, now_ms=10_000).segment == 0
    assert log.append(records(2), config=config, now_ms=10_500).segment == 0
    assert log.append(records(2), config=config, now_ms=11_000).segment == 4
    assert DeltaPartitionLog.open(table_uri).snapshot.active_segment == 4


def test_log_start_offset_follows_deleted_segments(table_uri):
    """log_start_offset comes from file stats: deleting a closed segment advances it, and a
    read below it is out of range with both bounds in the error."""
    config = TopicConfig.from_mapping({"segment.bytes": "100"})
    log = DeltaPartitionLog.open(table_uri)
    for _ in range(3):
        log.append(records(4), config=config)
    DeltaTable(table_uri).delete("segment = 0")
    reopened = DeltaPartitionLog.open(table_uri)
    assert (reopened.bounds().log_start_offset, reopened.bounds().high_watermark) == (4, 12)
    with pytest.raises(OffsetOutOfRange, match="4 .* 12"):
        reopened.read(from_offset=3, records_max=10, bytes_max=10**6)
    with pytest.raises(OffsetOutOfRange):
        reopened.read(from_offset=13, records_max=10, bytes_max=10**6)


def test_reads_from_files_and_tail_agree(table_uri):
    """The in-memory tail and Parquet files return the same records for the same offsets."""
    writer = DeltaPartitionLog.open(table_uri)
    for batch in range(5):
        writer.append(records(10, f"b{batch}-"), config=CONFIG)
    cold = DeltaPartitionLog.open(table_uri)  # no tail: reads Parquet
    for start in (0, 9, 10, 25, 49):
        hot = writer.read(from_offset=start, records_max=20, bytes_max=10**6).records
        from_files = cold.read(from_offset=start, records_max=20, bytes_max=10**6).records
        assert hot.equals(from_files), start


def test_bytes_max_limits_but_returns_at_least_one_record(table_uri):
    """bytes_max bounds a read, yet one record is returned even if it alone is larger."""
    log = DeltaPartitionLog.open(table_uri)
    log.append([NewRecord(None, b"x" * 1000) for _ in range(5)], config=CONFIG)
    assert log.read(from_offset=0, records_max=10, bytes_max=10).records.num_rows == 1
    assert log.read(from_offset=0, records_max=10, bytes_max=2500).records.num_rows == 2
    assert log.read(from_offset=0, records_max=3, bytes_max=10**6).records.num_rows == 3
    assert log.read(from_offset=5, records_max=10, bytes_max=10**6).records.num_rows == 0


def test_bytes_max_counts_keys_and_values_across_many_commits(table_uri):
    """A read from the in-memory tail spanning many commits (a chunk each, more than the
    Python sum takes) and a cold read of the same offsets stop at the same record: the one
    whose key and value bytes (nulls count nothing) pass bytes_max."""
    writer = DeltaPartitionLog.open(table_uri)
    key, value = b"k" * 10, b"v" * 20
    for _ in range(30):  # each commit: 10 + 0 bytes, then 0 + 20, then 10 + 20
        writer.append(
            [NewRecord(key, None), NewRecord(None, value), NewRecord(key, value)], config=CONFIG
        )
    cold = DeltaPartitionLog.open(table_uri)
    for log in (writer, cold):
        # 60 bytes a commit: 1 000 bytes hold 16 commits and the next one's 10 + 20 bytes.
        read = log.read(from_offset=0, records_max=1000, bytes_max=1000).records
        assert read.num_rows == 16 * 3 + 2
        assert log.read(from_offset=4, records_max=1000, bytes_max=50).records.num_rows == 2


def test_headers_timestamps_and_log_append_time(table_uri):
    """Headers (null when absent), CreateTime from the producer, LogAppendTime by config."""
    log = DeltaPartitionLog.open(table_uri)
    log.append(
        [
            NewRecord(b"k", b"v", 1_700_000_000_123, (("h", b"1"), ("n", None))),
            NewRecord(None, None),
        ],
        config=CONFIG,
        now_ms=1_800_000_000_000,
    )
    append_time = TopicConfig.from_mapping({"message.timestamp.type": "LogAppendTime"})
    log.append([NewRecord(None, b"z", 5)], config=append_time, now_ms=1_800_000_000_999)
    rows = DeltaPartitionLog.open(table_uri).read(from_offset=0, records_max=9, bytes_max=10**6)
    rows = rows.records.to_pylist()
    assert rows[0]["headers"] == [{"key": "h", "value": b"1"}, {"key": "n", "value": None}]
    assert rows[1]["headers"] is None and rows[1]["value"] is None
    assert int(rows[0]["timestamp"].timestamp() * 1000) == 1_700_000_000_123
    assert (rows[0]["timestamp_type"], rows[2]["timestamp_type"]) == (0, 1)
    assert int(rows[2]["timestamp"].timestamp() * 1000) == 1_800_000_000_999


def test_tables_with_unsupported_features_are_refused(tmp_path):
    """The protocol allow-list: a table with deletion vectors fails loudly on load."""
    uri = str(tmp_path / "dv")
    DeltaTable.create(
        uri,
        PARTITION_SCHEMA,
        partition_by=["segment"],
        configuration={"delta.enableDeletionVectors": "true"},
    )
    with pytest.raises(UnsupportedTableFeatures, match="deletionVectors"):
        DeltaPartitionLog.open(uri)


def test_offsets_beyond_the_txn_are_corruption(table_uri):
    """A file holding offsets the txn never assigned (a writer without the CAS) is refused."""
    DeltaPartitionLog.open(table_uri).append(records(1), config=CONFIG)
    rogue = DeltaTable(table_uri).to_pyarrow_table()
    rogue = rogue.set_column(0, "offset", pa.array([9], pa.int64()))
    write_deltalake(table_uri, rogue, mode="append", partition_by=["segment"])
    with pytest.raises(CorruptPartition, match="high watermark"):
        DeltaPartitionLog.open(table_uri)


def test_missing_table_is_reported(tmp_path):
    """Opening a partition whose table does not exist is a clear CorruptPartition."""
    with pytest.raises(CorruptPartition, match="No Delta table"):
        DeltaPartitionLog.open(str(tmp_path / "nothing"))


def test_small_files_are_compacted_in_offset_order(table_uri):
    """A run of small files becomes one file with the same records in offset order; the
    rewrite is dataChange=false and reads before and after it agree."""
    log = DeltaPartitionLog.open(table_uri)
    for index in range(MERGE_FILES_MIN + 3):
        log.append([NewRecord(None, f"v{index}".encode())], config=CONFIG)
    before = log.read(from_offset=0, records_max=100, bytes_max=10**6).records
    assert log.maybe_merge_small_files() == MERGE_FILES_MIN + 3
    assert len(log.snapshot.files) == 1
    reopened = DeltaPartitionLog.open(table_uri)
    assert len(reopened.snapshot.files) == 1
    after = reopened.read(from_offset=0, records_max=100, bytes_max=10**6).records
    assert after.equals(before)
    assert log.append(records(1), config=CONFIG).base_offset == MERGE_FILES_MIN + 3


def test_compaction_leaves_short_runs_alone(table_uri):
    """Fewer small files than the threshold are not rewritten."""
    log = DeltaPartitionLog.open(table_uri)
    for _ in range(3):
        log.append(records(1), config=CONFIG)
    assert log.maybe_merge_small_files() == 0
    assert len(log.snapshot.files) == 3


def test_housekeeping_bounds_the_log_and_the_files(table_uri, monkeypatch):
    """Housekeeping (run by the writer in the background) checkpoints, deletes log files older
    than the previous checkpoint, and merges small files; the table stays whole and readable,
    and the writer's next append sees its commits."""
    monkeypatch.setattr(housekeeping, "LOG_GRACE_MS", 0)
    log = DeltaPartitionLog.open(table_uri)
    total = 3 * housekeeping.CHECKPOINT_INTERVAL + 5
    for index in range(total):
        log.append(records(1), config=CONFIG)
        if index % 10 == 9:
            log.housekeeping()
    log.housekeeping()
    versions = sorted(
        int(name.split(".")[0])
        for name in os.listdir(os.path.join(table_uri, "_delta_log"))
        if name.endswith(".json")
    )
    assert versions[0] >= housekeeping.CHECKPOINT_INTERVAL
    assert len(DeltaPartitionLog.open(table_uri).snapshot.files) < MERGE_FILES_MIN + 10
    assert log.append(records(1), config=CONFIG).base_offset == total
    assert DeltaPartitionLog.open(table_uri).bounds().high_watermark == total + 1
    assert DeltaTable(table_uri).to_pyarrow_table().num_rows == total + 1
    fetched = log.read(from_offset=0, records_max=total + 1, bytes_max=10**9).records
    assert fetched.column("offset").to_pylist() == list(range(total + 1))


def _files(records: list[int], segment: int = 0, first_offset: int = 0) -> tuple:
    files, offset = [], first_offset
    for index, count in enumerate(records):
        path = f"f{first_offset + index}"
        files.append(DataFile(path, segment, offset, offset + count - 1, count, 3000, 0))
        offset += count
    return tuple(files)


def test_compaction_is_size_tiered():
    """A merged file is merged again only once the files after it hold MERGE_TIER_FACTOR
    times its records, so records are not rewritten on every pass; runs never cross segments
    or large files."""
    run = housekeeping.small_file_run(_files([1000] + [1] * MERGE_FILES_MIN))
    assert [f.path for f in run] == [f"f{i}" for i in range(1, MERGE_FILES_MIN + 1)]
    factor = housekeeping.MERGE_TIER_FACTOR
    not_yet = _files([MERGE_FILES_MIN + 1] + [factor] * MERGE_FILES_MIN)
    assert housekeeping.small_file_run(not_yet)[0].path == "f1"
    outweighed = _files([MERGE_FILES_MIN] + [factor] * MERGE_FILES_MIN)
    assert housekeeping.small_file_run(outweighed)[0].path == "f0"
    split = _files([1] * 20, segment=0) + _files([1] * 20, segment=1, first_offset=20)
    assert housekeeping.small_file_run(split) == []
    large = dataclasses.replace(
        _files([1], first_offset=20)[0], size_bytes=housekeeping.SMALL_FILE_BYTES
    )
    broken = _files([1] * 20) + (large,) + _files([1] * MERGE_FILES_MIN, first_offset=21)
    assert housekeeping.small_file_run(broken)[0].path == "f21"


# ---- offsets for timestamps (ListOffsets by time) --------------------------------------------

# CreateTime timestamps of three appends, out of order within and across files.
_TIMESTAMP_BATCHES = [[100, 300, 200], [150, 400, 50], [500, 250]]


def _append_timestamps(log: DeltaPartitionLog, batches: list[list[int]]) -> list[int]:
    for batch in batches:
        log.append([NewRecord(None, b"v", ms) for ms in batch], config=CONFIG)
    return [ms for batch in batches for ms in batch]


def _first_at_or_after(timestamps: list[int], target_ms: int) -> int | None:
    return next((offset for offset, ms in enumerate(timestamps) if ms >= target_ms), None)


def test_offset_for_timestamp_with_out_of_order_create_times(table_uri):
    """The earliest offset with timestamp >= T, not a binary search: the same answers from
    the writer (in-memory tail) and a reopened log (files only), before the first record, on
    exact matches, between records, and None after the last."""
    writer = DeltaPartitionLog.open(table_uri)
    timestamps = _append_timestamps(writer, _TIMESTAMP_BATCHES)
    reopened = DeltaPartitionLog.open(table_uri)
    assert len(reopened.snapshot.files) == 3 and not reopened.snapshot.tail
    targets = {0: 0, 100: 0, 101: 1, 300: 1, 301: 4, 401: 6, 500: 6, 501: None}
    for target, expected in targets.items():
        assert _first_at_or_after(timestamps, target) == expected  # the oracle agrees
        assert writer.offset_for_timestamp(target) == expected, target
        assert reopened.offset_for_timestamp(target) == expected, target
    for target in range(0, 520, 7):
        assert reopened.offset_for_timestamp(target) == _first_at_or_after(timestamps, target)


def test_offset_for_timestamp_skips_files_by_their_max_timestamp(table_uri):
    """Files whose statistics put every record before T are not read: with their Parquet
    gone, a later T still answers, while a T that needs them fails loudly."""
    writer = DeltaPartitionLog.open(table_uri)
    _append_timestamps(writer, [[10, 30], [20, 40], [1000, 900]])
    reopened = DeltaPartitionLog.open(table_uri)
    assert [f.max_timestamp_ms for f in reopened.snapshot.files] == [30, 40, 1000]
    for data_file in reopened.snapshot.files[:2]:
        open_store(table_uri).delete(data_file.path)
    assert reopened.offset_for_timestamp(41) == 4
    assert reopened.offset_for_timestamp(901) == 4
    assert reopened.offset_for_timestamp(1001) is None
    with pytest.raises(StorageUnavailable):
        reopened.offset_for_timestamp(35)


def test_max_timestamp_ms_from_the_writer_statistics_and_compaction(table_uri):
    """Each DataFile's max_timestamp_ms is the same from the writer, from the statistics on a
    reopen, and from another writer's compaction commit that this writer steps over."""
    writer = DeltaPartitionLog.open(table_uri)
    for index in range(MERGE_FILES_MIN):
        writer.append([NewRecord(None, b"v", 5_000 - index)], config=CONFIG)
    written = [f.max_timestamp_ms for f in writer.snapshot.files]
    assert written == [5_000 - index for index in range(MERGE_FILES_MIN)]
    assert [f.max_timestamp_ms for f in DeltaPartitionLog.open(table_uri).snapshot.files] == written
    other = DeltaPartitionLog.open(table_uri)
    assert other.maybe_merge_small_files() == MERGE_FILES_MIN
    writer.append([NewRecord(None, b"v", 7)], config=CONFIG)  # steps over the compaction
    assert [f.max_timestamp_ms for f in writer.snapshot.files] == [5_000, 7]
    assert [f.max_timestamp_ms for f in DeltaPartitionLog.open(table_uri).snapshot.files] == [
        5_000,
        7,
    ]
    assert writer.offset_for_timestamp(4_990) == 0
    assert writer.offset_for_timestamp(4_999) == 0
    assert writer.offset_for_timestamp(5_001) is None


def test_offset_for_timestamp_trusts_truncated_foreign_statistics(table_uri):
    """A file written by another tool with microsecond timestamps: delta-rs truncates its
    statistics to the millisecond, which must not make the file look older than it is."""
    micros = 1_700_000_000_123_456
    table = pa.table(
        {
            "offset": pa.array([0], pa.int64()),
            "timestamp": pa.array([micros], PARTITION_SCHEMA.field("timestamp").type),
            "timestamp_type": pa.array([0], pa.int8()),
            "key": pa.array([None], pa.binary()),
            "value": pa.array([b"x"], pa.binary()),
            "headers": pa.nulls(1, PARTITION_SCHEMA.field("headers").type),
            "producer_id": pa.nulls(1, pa.int64()),
            "producer_epoch": pa.nulls(1, pa.int16()),
            "sequence": pa.nulls(1, pa.int32()),
            "transactional": pa.nulls(1, pa.bool_()),
            "control": pa.nulls(1, pa.int8()),
            "compression": pa.nulls(1, pa.int8()),
            "segment": pa.array([0], pa.int64()),
        },
        schema=PARTITION_SCHEMA,
    )
    write_deltalake(
        table_uri,
        table,
        mode="append",
        partition_by=["segment"],
        commit_properties=CommitProperties(app_transactions=[Transaction("log", 0)]),
    )
    log = DeltaPartitionLog.open(table_uri)
    assert log.snapshot.files[0].max_timestamp_ms == micros // 1000
    assert log.offset_for_timestamp(micros // 1000) == 0
    assert log.offset_for_timestamp(micros // 1000 + 1) is None


def test_offset_for_timestamp_answers_from_the_tail(table_uri):
    """Offsets the writer's in-memory tail holds are not read from Parquet: with the files
    gone, the writer still answers, while a reopened log (no tail) cannot."""
    writer = DeltaPartitionLog.open(table_uri)
    timestamps = _append_timestamps(writer, _TIMESTAMP_BATCHES)
    for data_file in writer.snapshot.files:
        os.remove(os.path.join(table_uri, data_file.path))
    for target in (0, 101, 301, 501):
        assert writer.offset_for_timestamp(target) == _first_at_or_after(timestamps, target)
    with pytest.raises(StorageUnavailable):
        DeltaPartitionLog.open(table_uri).offset_for_timestamp(0)


def test_reads_inside_a_file_rewritten_by_delta_rs(table_uri):
    """delta-rs rewrites files with binary_view columns (e.g. a row-level delete); a read
    starting inside such a file must still filter by offset."""
    log = DeltaPartitionLog.open(table_uri)
    log.append(records(4), config=CONFIG)
    DeltaTable(table_uri).delete("offset = 1")
    log.reload()
    fetched = log.read(from_offset=2, records_max=10, bytes_max=1_000_000).records
    assert fetched.column("offset").to_pylist() == [2, 3]
    assert fetched.column("value").to_pylist() == [b"v2", b"v3"]


@pytest.mark.parametrize("damage", [b"", b"\0" * 64, b'{"add": {"path"'])
def test_a_damaged_commit_file_fails_the_open(table_uri, damage):
    """delta-rs reads an empty commit as one without actions: the records it held would be
    gone from view (and their offsets assigned again). Opening fails loudly instead."""
    log = DeltaPartitionLog.open(table_uri)
    log.append(records(2), config=CONFIG)
    log.append(records(1), config=CONFIG)
    latest = max(
        (p for p in os.listdir(os.path.join(table_uri, "_delta_log")) if p.endswith(".json")),
        key=lambda name: int(name.split(".")[0]),
    )
    with open(os.path.join(table_uri, "_delta_log", latest), "wb") as commit:
        commit.write(damage)
    with pytest.raises(CorruptPartition, match="damaged commit files"):
        DeltaPartitionLog.open(table_uri)


@pytest.mark.parametrize("fenced", [True, False])  # direct commits / delta-rs (object stores)
def test_catch_up_sees_another_writers_commit_once(table_uri, fenced):
    reader, writer = (
        DeltaPartitionLog.open(table_uri, fenced=fenced),
        DeltaPartitionLog.open(table_uri),
    )
    assert not reader.catch_up()
    writer.append(records(2), config=CONFIG)
    assert reader.catch_up()
    assert reader.snapshot.high_watermark == 2 or not fenced  # unfenced: no txn to trust
    assert len(reader.snapshot.files) == 1
    assert not reader.catch_up()
