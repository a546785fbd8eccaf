"""`DeltaPartitionLog.commit_maintenance`: retention deletes, key compaction and file merges
commit while another writer appends, never lose an appended record, and lose to each other
cleanly (nothing committed, no file left behind)."""

from __future__ import annotations

import os

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from storage_layout.log import DeltaPartitionLog
from storage_layout.records import AppTransaction, NewRecord
from storage_layout.topic_config import TopicConfig

SMALL_SEGMENTS = TopicConfig(segment_bytes=14)  # every append opens a new segment


def append(log: DeltaPartitionLog, *values: str) -> None:
    log.append([NewRecord(None, v.encode()) for v in values], config=SMALL_SEGMENTS)


def offsets_and_values(uri: str) -> list[tuple[int, bytes]]:
    table = DeltaTable(uri).to_pyarrow_table(columns=["offset", "value"]).sort_by("offset")
    return list(
        zip(table.column("offset").to_pylist(), table.column("value").to_pylist(), strict=True)
    )


def parquet_files(uri: str) -> set[str]:
    found = set()
    for folder, _, names in os.walk(uri):
        found |= {os.path.join(folder, n) for n in names if n.endswith(".parquet")}
    return found


@pytest.fixture
def uri(tmp_path) -> str:
    path = str(tmp_path / "topic" / "0")
    DeltaPartitionLog.create(path)
    log = DeltaPartitionLog.open(path)
    for batch in ("a", "b", "c"):
        append(log, f"{batch}0", f"{batch}1")
    return path


def test_a_delete_commits_over_a_concurrent_append(uri):
    job, writer = DeltaPartitionLog.open(uri), DeltaPartitionLog.open(uri)
    append(writer, "d0")  # lands after the job's snapshot
    first_segment = job.snapshot.segment_files(0)
    assert job.commit_maintenance(removes=first_segment, operation="DELETE", data_change=True)
    assert job.snapshot.log_start_offset == 2
    assert job.snapshot.high_watermark == 7
    assert offsets_and_values(uri) == [(2, b"b0"), (3, b"b1"), (4, b"c0"), (5, b"c1"), (6, b"d0")]
    append(writer, "e0")  # the writer's stale snapshot still appends at the right offset
    assert offsets_and_values(uri)[-1] == (7, b"e0")


def test_two_jobs_removing_the_same_files_one_wins(uri):
    first, second = DeltaPartitionLog.open(uri), DeltaPartitionLog.open(uri)
    segment = first.snapshot.segment_files(4)  # offsets 4 and 5
    records = first.read_files(segment)
    kept = records.filter(pc.equal(records["offset"], 5))
    before = parquet_files(uri)
    assert first.commit_maintenance(
        removes=segment, replacements=[(4, kept)], operation="COMPACT", data_change=True
    )
    after_first = parquet_files(uri)
    assert not second.commit_maintenance(
        removes=segment, replacements=[(4, kept)], operation="COMPACT", data_change=True
    )
    assert parquet_files(uri) == after_first  # the loser's new file was deleted
    assert len(after_first - before) == 1
    assert offsets_and_values(uri)[-2:] == [(3, b"b1"), (5, b"c1")]  # offset 4 is a gap now


def test_a_maintenance_txn_is_committed_once(uri):
    first, second = DeltaPartitionLog.open(uri), DeltaPartitionLog.open(uri)
    txn = AppTransaction("compaction", 4)
    assert first.commit_maintenance(
        removes=[], operation="COMPACT", data_change=True, transactions=[txn]
    )
    assert first.app_version("compaction") == 4
    assert not second.commit_maintenance(
        removes=second.snapshot.segment_files(0),
        operation="COMPACT",
        data_change=True,
        transactions=[txn],
    )
    assert len(offsets_and_values(uri)) == 6  # the loser removed nothing


def test_the_snapshot_after_a_commit_equals_a_reload(uri):
    """The job's in-memory snapshot after its commit (no reload) matches the table."""
    job = DeltaPartitionLog.open(uri)
    segment = job.snapshot.segment_files(4)
    records = job.read_files(segment)
    kept = records.filter(pc.equal(records["offset"], 5))
    assert job.commit_maintenance(
        removes=job.snapshot.segment_files(0) + segment,
        replacements=[(4, kept)],
        operation="COMPACT",
        data_change=True,
        transactions=[AppTransaction("log_start", 2), AppTransaction("compaction", 6)],
    )
    reloaded = DeltaPartitionLog.open(uri)
    assert job.snapshot.table_version == reloaded.snapshot.table_version
    assert [f.path for f in job.snapshot.files] == [f.path for f in reloaded.snapshot.files]
    assert job.snapshot.log_start_offset == reloaded.snapshot.log_start_offset == 2
    assert job.app_version("compaction") == reloaded.app_version("compaction") == 6
