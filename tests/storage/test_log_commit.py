"""Direct commits (storage_layout/log/log_commit.py) on real Delta tables: put-if-absent, stepping
over housekeeping's rewrites, and tables that delta-rs reads, checkpoints and writes after."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from storage_layout.errors import AppendConflict
from storage_layout.log import MERGE_FILES_MIN, DeltaPartitionLog, housekeeping, log_commit
from storage_layout.records import NewRecord
from storage_layout.store import open_store
from storage_layout.store.local import LocalStore
from storage_layout.topic_config import TopicConfig

CONFIG = TopicConfig()


@pytest.fixture
def table_uri(tmp_path) -> str:
    uri = str(tmp_path / "topic" / "0")
    DeltaPartitionLog.create(uri)
    return uri


def one(value: str) -> list[NewRecord]:
    return [NewRecord(b"k", value.encode())]


def test_put_if_absent_never_replaces_a_version(tmp_path):
    """The second writer of a version gets False and the first commit stays as it was."""
    log = LocalStore(str(tmp_path))
    assert log_commit.put_if_absent(log, 7, b'{"a":1}\n')
    assert not log_commit.put_if_absent(log, 7, b'{"b":2}\n')
    assert log_commit.read_commit(log, 7) == [{"a": 1}]
    assert log_commit.read_commit(log, 8) is None
    assert os.listdir(tmp_path) == ["00000000000000000007.json"]  # no temporary left behind


@pytest.mark.parametrize(
    ("actions", "is_rearrangement"),
    [
        (
            [
                {"commitInfo": {}},
                {"remove": {"path": "a", "dataChange": False}},
                {"add": {"path": "b", "dataChange": False}},
            ],
            True,
        ),
        ([{"add": {"path": "b", "dataChange": True}}], False),
        ([{"remove": {"path": "a", "dataChange": True}}], False),
        (
            [{"add": {"path": "b", "dataChange": False}}, {"txn": {"appId": "log", "version": 3}}],
            False,
        ),
        ([{"metaData": {}}], False),
        ([{"protocol": {}}], False),
    ],
)
def test_only_rewrites_without_data_change_are_stepped_over(actions, is_rearrangement):
    assert (log_commit.as_rearrangement(actions) is not None) is is_rearrangement


def test_append_steps_over_a_compaction_without_reloading(table_uri, monkeypatch):
    """Housekeeping's compaction takes the version the writer expected; the append goes to the
    next version, and the writer's file index matches the table's, with no reload."""
    log = DeltaPartitionLog.open(table_uri)
    for index in range(MERGE_FILES_MIN + 2):
        log.append(one(f"v{index}"), config=CONFIG)
    other = DeltaPartitionLog.open(table_uri)
    assert other.maybe_merge_small_files() == MERGE_FILES_MIN + 2

    def no_reload():
        raise AssertionError("the append reloaded instead of stepping over the compaction")

    monkeypatch.setattr(log, "reload", no_reload)
    result = log.append(one("after"), config=CONFIG)
    assert result.base_offset == MERGE_FILES_MIN + 2
    fresh = DeltaPartitionLog.open(table_uri).snapshot
    assert log.snapshot.files == fresh.files
    assert log.snapshot.table_version == fresh.table_version
    assert len(fresh.files) == 2


def test_direct_commits_are_ordinary_delta(table_uri):
    """delta-rs reads the commits (txn, history, stats), checkpoints them, and a delta-rs
    write after them is fenced by the same txn."""
    log = DeltaPartitionLog.open(table_uri)
    for index in range(5):
        log.append(one(f"v{index}"), config=CONFIG)
    table = DeltaTable(table_uri)
    assert table.version() == 5
    assert table.transaction_version("log") == 4
    assert [h["operation"] for h in table.history()][:5] == ["WRITE"] * 5
    assert table.to_pyarrow_table().sort_by("offset").column("value").to_pylist() == [
        f"v{i}".encode() for i in range(5)
    ]
    stats = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    assert sorted(stats["min.offset"]) == [0, 1, 2, 3, 4]  # readers can skip files by offset
    table.create_checkpoint()
    assert DeltaPartitionLog.open(table_uri).bounds().high_watermark == 5
    assert log.append(one("v5"), config=CONFIG).base_offset == 5


def test_a_writer_paused_past_the_log_trim_is_not_acknowledged(table_uri, monkeypatch):
    """A stale writer whose next version was trimmed away finds that version free; its
    commit would lie below the latest checkpoint, unseen by readers, so it must not count."""
    monkeypatch.setattr(housekeeping, "LOG_GRACE_MS", 0)
    stale = DeltaPartitionLog.open(table_uri)
    stale.append(one("s0"), config=CONFIG)
    live = DeltaPartitionLog.open(table_uri)
    for index in range(3 * housekeeping.CHECKPOINT_INTERVAL):
        live.append(one(f"v{index}"), config=CONFIG)
        if index % 50 == 49:
            live.housekeeping()
    assert not os.path.exists(os.path.join(table_uri, "_delta_log", log_commit.commit_name(2)))
    with pytest.raises(AppendConflict):
        stale.append(one("lost"), config=CONFIG)
    table = DeltaTable(table_uri).to_pyarrow_table()
    assert b"lost" not in table.column("value").to_pylist()
    assert table.num_rows == 1 + 3 * housekeeping.CHECKPOINT_INTERVAL
    assert stale.append(one("s1"), config=CONFIG).base_offset == table.num_rows


def test_a_follower_idle_past_the_log_trim_catches_up(table_uri, monkeypatch):
    """A follower whose next version was trimmed while it was idle finds that version
    missing; `_last_checkpoint` tells it the table moved on, so it reloads instead of staying
    on its version for good."""
    monkeypatch.setattr(housekeeping, "LOG_GRACE_MS", 0)
    live = DeltaPartitionLog.open(table_uri)
    live.append(one("v"), config=CONFIG)
    follower = DeltaPartitionLog.open(table_uri)
    assert follower.catch_up() is False  # nothing moved
    for index in range(3 * housekeeping.CHECKPOINT_INTERVAL):
        live.append(one(f"v{index}"), config=CONFIG)
        if index % 50 == 49:
            live.housekeeping()
    next_commit = log_commit.commit_name(follower.snapshot.table_version + 1)
    assert not os.path.exists(os.path.join(table_uri, "_delta_log", next_commit))
    assert follower.catch_up() is True
    assert follower.bounds() == live.bounds()
    assert [f.path for f in follower.snapshot.files] == [f.path for f in live.snapshot.files]


def test_a_statistics_rewrite_of_live_files_is_not_stepped_over(table_uri):
    """A dataChange=false add of a file that is already live (a stats recompute) is not a
    rearrangement: the writer reloads instead of indexing the file twice."""
    log = DeltaPartitionLog.open(table_uri)
    for index in range(3):
        log.append(one(f"v{index}"), config=CONFIG)
    live = pa.table(DeltaTable(table_uri).get_add_actions(flatten=True)).to_pylist()
    first = next(row for row in live if row["min.offset"] == 0)
    add = log_commit.add_action(
        first["path"],
        0,
        first["size_bytes"],
        0,
        json.dumps({"numRecords": 1, "minValues": {"offset": 0}, "maxValues": {"offset": 0}}),
        data_change=False,
    )
    log_dir = open_store(table_uri).child("_delta_log")
    assert log_commit.put_if_absent(log_dir, 4, log_commit.ndjson([{"add": add}]))
    assert log.append(one("v3"), config=CONFIG).base_offset == 3
    fetched = log.read(from_offset=0, records_max=10, bytes_max=10**6).records
    assert fetched.column("offset").to_pylist() == [0, 1, 2, 3]
    assert sorted(f.path for f in log.snapshot.files) == sorted(
        f.path for f in DeltaPartitionLog.open(table_uri).snapshot.files
    )


def test_a_deposed_leaders_compaction_does_not_step_over_a_new_leader():
    """leaves_files: a `leader` txn of another version means the partition changed hands."""
    ours, theirs = 5, 65541
    append = [
        {"txn": {"appId": "leader", "version": ours}},
        {"txn": {"appId": "log", "version": 9}},
    ]
    assert log_commit.leaves_files(append, {"a"}, ours)
    takeover = [{"txn": {"appId": "leader", "version": theirs}}]
    assert not log_commit.leaves_files(takeover, {"a"}, ours)


def test_put_if_absent_recognises_its_own_commit(tmp_path):
    """A link that reports 'exists' for our own payload (a retried link) counts as created."""
    payload = b'{"add":{"path":"x"}}\n'
    log = LocalStore(str(tmp_path))
    assert log_commit.put_if_absent(log, 3, payload)
    assert log_commit.put_if_absent(log, 3, payload)
    assert not log_commit.put_if_absent(log, 3, b'{"other":1}\n')


def test_a_table_is_created_once_even_after_its_first_commit_was_trimmed(tmp_path):
    """Commit 0 is put if absent through the store (no hard link needed), readable by
    delta-rs; creating again is a no-op, also once commit 0 and the checkpoint hint are gone
    (trimmed logs, a dropped hint): a second commit 0 below a checkpoint would be invisible
    damage."""
    from storage_layout.log.checkpoint import write_checkpoint
    from storage_layout.log.reader import TableReader
    from storage_layout.log.tables import create_delta_table
    from storage_layout.schema import PARTITION_COLUMN, PARTITION_SCHEMA

    uri = str(tmp_path / "t")
    assert create_delta_table(uri, PARTITION_SCHEMA, [PARTITION_COLUMN], {}) is True
    assert create_delta_table(uri, PARTITION_SCHEMA, [PARTITION_COLUMN], {}) is False
    assert DeltaTable(uri).version() == 0
    assert DeltaTable(uri).metadata().partition_columns == [PARTITION_COLUMN]
    log = DeltaPartitionLog.open(uri)
    log.append([NewRecord(b"k", b"v")], config=TopicConfig())
    delta_log = open_store(uri).child(log_commit.LOG_DIR)
    write_checkpoint(delta_log, TableReader.read(uri).state)
    delta_log.delete(log_commit.commit_name(0))
    delta_log.delete(log_commit.LAST_CHECKPOINT)
    assert create_delta_table(uri, PARTITION_SCHEMA, [PARTITION_COLUMN], {}) is False
    assert not log_commit.commit_exists(delta_log, 0)
    assert DeltaTable(uri).version() == 1
