"""The maintenance executors (storage_layout/maintenance/execute.py) on real partition tables,
record by record: latest per key, tombstones, min.compaction.lag.ms, the log start, file
merges, and reruns."""

from __future__ import annotations

import time

import pytest
from deltalake import DeltaTable

from storage_layout.errors import OffsetOutOfRange
from storage_layout.log import DeltaPartitionLog
from storage_layout.maintenance import execute
from storage_layout.maintenance.execute import Unit
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.paths import partition_table_uri
from storage_layout.records import Isolation, NewRecord
from storage_layout.schema import CONTROL_ABORT, CONTROL_COMMIT
from storage_layout.topic_config import TopicConfig

HOUR_MS = 3_600_000


def make(root: str, name: str, config: TopicConfig) -> DeltaPartitionLog:
    TopicCatalog(root).create_topic(name, 1, config)
    return DeltaPartitionLog.open(partition_table_uri(root, name, 0))


def stored(root: str, name: str) -> list[tuple[int, bytes | None, bytes | None]]:
    table = DeltaTable(partition_table_uri(root, name, 0)).to_pyarrow_table(
        columns=["offset", "key", "value"]
    )
    rows = table.sort_by("offset").to_pylist()
    return [(r["offset"], r["key"], r["value"]) for r in rows]


def test_compaction_keeps_the_latest_record_per_key(tmp_path):
    root, now_ms = str(tmp_path), int(time.time() * 1000)
    config = TopicConfig(cleanup_policy="compact", segment_bytes=14, delete_retention_ms=HOUR_MS)
    log = make(root, "c", config)
    old, recent = now_ms - 2 * HOUR_MS, now_ms - 60_000
    for key, value, ts in [
        (b"a", b"a1", old),  # 0: superseded by 3
        (b"b", b"b1", old),  # 1: latest b
        (None, b"n1", old),  # 2: no key: kept
        (b"a", b"a2", old),  # 3: superseded by the tombstone at 5
        (b"c", None, old),  # 4: old tombstone, latest of c: dropped
        (b"a", None, recent),  # 5: recent tombstone, latest of a: kept
        (b"d", b"d1", recent),  # 6: active segment: never compacted
    ]:
        log.append([NewRecord(key, value, timestamp_ms=ts)], config=config)
    unit = Unit(root, "c", 0)
    outcome = execute.run_compact_keys(unit, now_ms=now_ms, dry_run=False)
    assert outcome.committed and outcome.records_removed == 3
    assert stored(root, "c") == [
        (1, b"b", b"b1"),
        (2, None, b"n1"),
        (5, b"a", None),
        (6, b"d", b"d1"),
    ]
    reopened = DeltaPartitionLog.open(partition_table_uri(root, "c", 0))
    assert reopened.snapshot.log_start_offset == 0  # the emptied first segment moved nothing
    assert reopened.read(from_offset=0, records_max=10, bytes_max=10_000).records[
        "offset"
    ].to_pylist() == [1, 2, 5, 6]  # a fetch in the gap reads on
    again = execute.run_compact_keys(unit, now_ms=now_ms, dry_run=False)
    assert not again.committed  # nothing dirty since: the compaction txn says so


def test_compaction_leaves_records_younger_than_the_lag(tmp_path):
    root, now_ms = str(tmp_path), int(time.time() * 1000)
    config = TopicConfig(cleanup_policy="compact", segment_bytes=14, min_compaction_lag_ms=HOUR_MS)
    log = make(root, "lag", config)
    for value, ts in [(b"1", now_ms - 2 * HOUR_MS), (b"2", now_ms - 60_000), (b"3", now_ms)]:
        log.append([NewRecord(b"k", value, timestamp_ms=ts)], config=config)
    outcome = execute.run_compact_keys(Unit(root, "lag", 0), now_ms=now_ms, dry_run=False)
    # Only segment 0 is old enough, and within it "1" is the latest of k: nothing goes.
    assert outcome.records_removed == 0
    assert [value for _, _, value in stored(root, "lag")] == [b"1", b"2", b"3"]


def test_retention_moves_the_log_start_and_reruns_do_nothing(tmp_path):
    root, now_ms = str(tmp_path), int(time.time() * 1000)
    config = TopicConfig(segment_bytes=14, retention_ms=HOUR_MS)
    log = make(root, "r", config)
    for i, ts in enumerate([now_ms - 3 * HOUR_MS, now_ms - 2 * HOUR_MS, now_ms, now_ms]):
        log.append([NewRecord(None, f"v{i}".encode(), timestamp_ms=ts)], config=config)
    unit = Unit(root, "r", 0)
    dry = execute.run_retention(unit, now_ms=now_ms, dry_run=True)
    assert dry.segments == 2 and not dry.committed and len(stored(root, "r")) == 4
    done = execute.run_retention(unit, now_ms=now_ms, dry_run=False)
    assert done.committed and done.records_removed == 2
    assert [offset for offset, _, _ in stored(root, "r")] == [2, 3]
    log.reload()
    assert log.snapshot.log_start_offset == 2
    with pytest.raises(OffsetOutOfRange):
        log.read(from_offset=1, records_max=10, bytes_max=10_000)
    assert not execute.run_retention(unit, now_ms=now_ms, dry_run=False).committed


def test_optimize_merges_a_closed_segments_files_in_offset_order(tmp_path):
    root, now_ms = str(tmp_path), int(time.time() * 1000)
    log = make(root, "o", TopicConfig())
    for i in range(4):  # four files in segment 0
        log.append([NewRecord(None, f"v{i}".encode())], config=TopicConfig())
    log.append([NewRecord(None, b"next")], config=TopicConfig(segment_bytes=14))  # rolls
    before = stored(root, "o")
    outcome = execute.run_optimize_files(Unit(root, "o", 0), now_ms=now_ms, dry_run=False)
    assert outcome.committed and outcome.segments == 1
    log.reload()
    assert len(log.snapshot.segment_files(0)) == 1
    assert stored(root, "o") == before
    log.append([NewRecord(None, b"after")], config=TopicConfig())  # appends go on
    assert stored(root, "o")[-1] == (5, None, b"after")


def test_compaction_of_transactions_keeps_committed_records_and_the_markers_they_need(tmp_path):
    """Kafka's cleaner rules on FORMAT.md §14's rows: aborted records go and never shadow a
    committed record of their key; an open transaction's records are not cleaned (it may still
    abort); a marker stays while a record of its transaction does (then until the horizon)."""
    root = str(tmp_path)
    config = TopicConfig(cleanup_policy="compact", segment_bytes=14, delete_retention_ms=HOUR_MS)
    log = make(root, "txn", config)

    def txn(producer: int, sequence: int, key: bytes, value: bytes) -> None:
        record = NewRecord(key, value)
        log.append([record], config=config, producers=[(producer, 0, sequence, True)])

    txn(1, 0, b"a", b"a-committed")  # 0
    log.append_marker(1, 0, CONTROL_COMMIT, config=config)  # 1
    txn(2, 0, b"a", b"a-aborted")  # 2: must not shadow offset 0
    log.append_marker(2, 0, CONTROL_ABORT, config=config)  # 3
    txn(1, 1, b"b", b"b-committed")  # 4
    log.append_marker(1, 0, CONTROL_COMMIT, config=config)  # 5
    txn(3, 0, b"b", b"b-open")  # 6: open, the last stable offset
    log.append([NewRecord(b"c", b"c1")], config=config)  # 7
    unit = Unit(root, "txn", 0)
    later_ms = int(time.time() * 1000) + 2 * HOUR_MS  # every marker older than the horizon

    assert execute.run_compact_keys(unit, now_ms=later_ms, dry_run=False).committed
    # 2 aborted (and its marker 3, past the horizon with no record left) gone; 4 stays: the
    # open transaction at 6 may abort, so nothing from its segment on is cleaned.
    assert [offset for offset, _, _ in stored(root, "txn")] == [0, 1, 4, 5, 6, 7]

    log = DeltaPartitionLog.open(partition_table_uri(root, "txn", 0))
    log.append_marker(3, 0, CONTROL_COMMIT, config=config)  # 8: b-open commits
    log.append([NewRecord(b"z", b"z1")], config=config)  # 9: the active segment
    assert execute.run_compact_keys(unit, now_ms=later_ms, dry_run=False).committed
    # b-committed (4) is superseded by b-open (6), so its marker (5) has no record left.
    assert [offset for offset, _, _ in stored(root, "txn")] == [0, 1, 6, 7, 8, 9]
    reopened = DeltaPartitionLog.open(partition_table_uri(root, "txn", 0))
    committed = reopened.read(
        from_offset=0, records_max=100, bytes_max=10**6, isolation=Isolation.COMMITTED_DATA
    )
    assert committed.records.column("value").to_pylist() == [
        b"a-committed",
        b"b-open",
        b"c1",
        b"z1",
    ]


def test_a_recent_marker_outlives_its_aborted_records_until_the_horizon(tmp_path):
    root, now_ms = str(tmp_path), int(time.time() * 1000)
    config = TopicConfig(cleanup_policy="compact", segment_bytes=14, delete_retention_ms=HOUR_MS)
    log = make(root, "abort", config)
    log.append([NewRecord(b"a", b"aborted")], config=config, producers=[(1, 0, 0, True)])
    log.append_marker(1, 0, CONTROL_ABORT, config=config)
    log.append([NewRecord(b"z", b"active")], config=config)
    assert execute.run_compact_keys(Unit(root, "abort", 0), now_ms=now_ms, dry_run=False).committed
    assert [offset for offset, _, _ in stored(root, "abort")] == [1, 2]
