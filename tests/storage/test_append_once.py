"""`DeltaPartitionLog.append_once`: a writer's txn committed with its records makes a retried
write (task retry, restart from a checkpoint, lost answer) a no-op, on real Delta tables."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from storage_layout.log import DeltaPartitionLog
from storage_layout.records import AppTransaction, NewRecord
from storage_layout.topic_config import TopicConfig

CONFIG = TopicConfig()


def records(count: int, prefix: str) -> list[NewRecord]:
    return [NewRecord(None, f"{prefix}{i}".encode()) for i in range(count)]


def values(uri: str) -> list[bytes]:
    table = DeltaTable(uri).to_pyarrow_table(columns=["offset", "value"]).sort_by("offset")
    assert table.column("offset").to_pylist() == list(range(table.num_rows))  # dense
    return table.column("value").to_pylist()


@pytest.fixture
def uri(tmp_path) -> str:
    path = str(tmp_path / "topic" / "0")
    DeltaPartitionLog.create(path)
    return path


def test_a_retry_of_a_committed_write_appends_nothing(uri):
    log = DeltaPartitionLog.open(uri)
    txn = AppTransaction("spark:q1:0", 7)
    first = log.append_once(records(3, "a"), config=CONFIG, transaction=txn)
    assert (first.base_offset, first.last_offset) == (0, 2)
    assert log.append_once(records(3, "a"), config=CONFIG, transaction=txn) is None
    reopened = DeltaPartitionLog.open(uri)  # a restarted writer sees the txn in the table
    assert reopened.app_version("spark:q1:0") == 7
    assert reopened.append_once(records(3, "a"), config=CONFIG, transaction=txn) is None
    assert values(uri) == [b"a0", b"a1", b"a2"]


def test_versions_only_move_forward(uri):
    log = DeltaPartitionLog.open(uri)
    log.append_once(records(1, "b1-"), config=CONFIG, transaction=AppTransaction("w", 1))
    log.append_once(records(1, "b2-"), config=CONFIG, transaction=AppTransaction("w", 2))
    late = log.append_once(records(1, "b1-"), config=CONFIG, transaction=AppTransaction("w", 1))
    assert late is None
    other = AppTransaction("w2", 1)  # another app id is independent
    assert log.append_once(records(1, "c"), config=CONFIG, transaction=other) is not None
    assert values(uri) == [b"b1-0", b"b2-0", b"c0"]


def test_two_attempts_from_one_snapshot_append_once(uri):
    """Speculative execution: two attempts of one task race from the same snapshot."""
    first, second = DeltaPartitionLog.open(uri), DeltaPartitionLog.open(uri)
    txn = AppTransaction("spark:q1:3", 0)
    assert first.append_once(records(2, "x"), config=CONFIG, transaction=txn) is not None
    assert second.app_version("spark:q1:3") is None  # its snapshot predates the commit
    assert second.append_once(records(2, "x"), config=CONFIG, transaction=txn) is None
    assert values(uri) == [b"x0", b"x1"]


def test_other_writers_in_between_are_retried_with_fresh_offsets(uri):
    writer, other = DeltaPartitionLog.open(uri), DeltaPartitionLog.open(uri)
    other.append(records(2, "o"), config=CONFIG)  # writer's snapshot is now stale
    result = writer.append_once(records(2, "w"), config=CONFIG, transaction=AppTransaction("w", 0))
    assert (result.base_offset, result.last_offset) == (2, 3)
    assert values(uri) == [b"o0", b"o1", b"w0", b"w1"]


def test_the_log_txns_are_reserved(uri):
    log = DeltaPartitionLog.open(uri)
    for app_id in ("log", "leader"):
        with pytest.raises(ValueError, match="reserved"):
            log.append_once(records(1, "r"), config=CONFIG, transaction=AppTransaction(app_id, 9))
    assert values(uri) == []
