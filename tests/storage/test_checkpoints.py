"""Checkpoints written from the writer's in-memory state (storage_layout/log/checkpoint.py) and
tables read by lakelog's own log replay (storage_layout/log/replay.py): both must agree with
what delta-rs makes of the same log, action for action."""

from __future__ import annotations

import json
import os
import shutil
import time
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from storage_layout.errors import CorruptPartition
from storage_layout.log import (
    MERGE_FILES_MIN,
    DeltaPartitionLog,
    checkpoint,
    housekeeping,
    log_commit,
    vacuum_table,
)
from storage_layout.log.checkpoint import Settling, checkpoint_name, write_checkpoint
from storage_layout.log.reader import TableReader
from storage_layout.log.replay import read_state
from storage_layout.records import AppTransaction, NewRecord
from storage_layout.schema import LOG_START_APP_ID
from storage_layout.store import open_store
from storage_layout.topic_config import TopicConfig

CONFIG = TopicConfig()
APP_IDS = ("log", "leader", LOG_START_APP_ID, "spark-sink")


@pytest.fixture
def busy_table(tmp_path) -> tuple[str, DeltaPartitionLog]:
    """A table that saw every kind of commit: appends, a leadership change, a small-file
    merge, a user txn and a retention delete that advanced the log start."""
    uri = str(tmp_path / "topic" / "0")
    DeltaPartitionLog.create(uri)
    log = DeltaPartitionLog.open(uri)
    log.commit_leadership(3, expected=None, hold=True)
    for index in range(MERGE_FILES_MIN + 5):
        log.append([NewRecord(b"k%d" % index, b"v%d" % index)], config=CONFIG)
    assert log.maybe_merge_small_files() >= MERGE_FILES_MIN
    log.append_once(
        [NewRecord(b"s", b"sink")], config=CONFIG, transaction=AppTransaction("spark-sink", 7)
    )
    first = log.snapshot.files[0]
    assert log.commit_maintenance(
        removes=[first],
        operation="DELETE",
        data_change=True,
        transactions=[AppTransaction(LOG_START_APP_ID, first.max_offset + 1)],
    )
    return uri, log


def _delta_rs_view(uri: str) -> tuple[int, set[str], dict[str, int | None]]:
    table = DeltaTable(uri)
    files = {os.path.relpath(f, uri) for f in table.file_uris()}
    return table.version(), files, {app: table.transaction_version(app) for app in APP_IDS}


def _without_checkpoints(uri: str, copy: str) -> str:
    shutil.copytree(uri, copy)
    for name in os.listdir(os.path.join(copy, "_delta_log")):
        if "checkpoint" in name:
            os.remove(os.path.join(copy, "_delta_log", name))
    return copy


def test_a_checkpoint_from_memory_reads_as_the_log_it_replaces(busy_table, tmp_path):
    """delta-rs and lakelog's replay see the same version, files and txns through the
    in-memory checkpoint as through the JSON commits alone."""
    uri, log = busy_table
    logs = open_store(uri).child(log_commit.LOG_DIR)
    write_checkpoint(logs, log.snapshot.state)
    assert os.path.exists(
        os.path.join(uri, "_delta_log", checkpoint_name(log.snapshot.table_version))
    )
    json_only = _without_checkpoints(uri, str(tmp_path / "json-only"))

    assert _delta_rs_view(uri) == _delta_rs_view(json_only)
    version, files, txns = _delta_rs_view(uri)
    assert version == log.snapshot.table_version
    assert files == {f.path for f in log.snapshot.files}
    assert txns["leader"] is not None and txns["spark-sink"] == 7

    from_checkpoint = read_state(logs, uri)
    from_commits = read_state(open_store(json_only).child(log_commit.LOG_DIR), json_only)
    assert from_checkpoint.adds == from_commits.adds == log.snapshot.state.adds
    assert from_checkpoint.transactions == from_commits.transactions
    assert from_commits.tombstones  # the merge's and the delete's removes
    assert checkpoint_removes(uri, log.snapshot.table_version) == set(from_commits.tombstones)
    assert not from_checkpoint.tombstones  # a state read from a checkpoint leaves them there


def checkpoint_removes(uri: str, version: int) -> set[str]:
    path = os.path.join(uri, "_delta_log", checkpoint_name(version))
    removes = pq.read_table(path, columns=["remove"]).column("remove").to_pylist()
    return {r["path"] for r in removes if r is not None}


def test_tombstones_carry_over_from_checkpoint_to_checkpoint_and_leave_memory(busy_table):
    """A second checkpoint holds the first one's tombstones (read from it) and the newer
    ones; the writer's state keeps only what came after the newest; expired ones go."""
    uri, log = busy_table
    logs = open_store(uri).child(log_commit.LOG_DIR)
    removed_first = set(log.snapshot.state.tombstones)
    first = write_checkpoint(logs, log.snapshot.state)
    for index in range(MERGE_FILES_MIN):
        log.append([NewRecord(None, b"more%d" % index)], config=CONFIG)
    assert log.maybe_merge_small_files() >= MERGE_FILES_MIN
    state = log.snapshot.state.checkpointed(first.version, first.names)
    removed_since = set(state.tombstones)
    assert removed_since and not removed_since & removed_first
    second = write_checkpoint(logs, state)
    assert checkpoint_removes(uri, second.version) == removed_first | removed_since
    assert not state.checkpointed(second.version, second.names).tombstones
    # delta-rs reads it: the same files live, and vacuum (lite: from tombstones) finds them.
    assert {os.path.relpath(f, uri) for f in DeltaTable(uri).file_uris()} == set(state.adds)
    doomed = set(vacuum_table(uri, retention_hours=0, dry_run=True))
    on_disk = {p for p in removed_first | removed_since if os.path.exists(os.path.join(uri, p))}
    assert on_disk and doomed == on_disk
    expired = write_checkpoint(logs, state.checkpointed(second.version, second.names), now_ms=2**62)
    assert checkpoint_removes(uri, expired.version) == set()
    assert DeltaTable(uri).version() == log.snapshot.table_version


HOUR_MS = 3_600_000


def _rearranged_and_deleted(state) -> tuple[set[str], set[str]]:
    """The tombstones of `state` by kind: a merge's (dataChange=false), a delete's."""
    merged = {p for p, (_, remove) in state.tombstones.items() if not remove["dataChange"]}
    return merged, set(state.tombstones) - merged


def _on_disk(uri: str, paths: set[str]) -> set[str]:
    return {p for p in paths if os.path.exists(os.path.join(uri, p))}


def test_files_merges_replaced_are_deleted_once_settled_and_their_tombstones_go(busy_table):
    """Settling: a checkpoint written longer than the retention after a merge deletes the files
    the merge replaced (their records are in the merged file) and leaves their tombstones
    out; the delete's tombstone (its records went) stays, its file left to vacuum. delta-rs
    and lakelog read the table as before."""
    uri, log = busy_table
    logs = open_store(uri).child(log_commit.LOG_DIR)
    merged, deleted = _rearranged_and_deleted(log.snapshot.state)
    assert len(merged) >= MERGE_FILES_MIN and len(deleted) == 1
    settling = Settling(HOUR_MS, open_store(uri).delete_many)
    young = write_checkpoint(logs, log.snapshot.state, settling=settling)
    assert young.files_deleted == 0  # removed just now: kept
    assert checkpoint_removes(uri, young.version) == merged | deleted
    assert _on_disk(uri, merged) == merged

    log.append([NewRecord(b"k", b"after")], config=CONFIG)
    state = log.snapshot.state.checkpointed(young.version, young.names)
    later_ms = int(time.time() * 1000) + 2 * HOUR_MS
    settled = write_checkpoint(logs, state, now_ms=later_ms, settling=settling)

    assert settled.files_deleted == len(merged)
    assert checkpoint_removes(uri, settled.version) == deleted
    assert _on_disk(uri, merged) == set() and _on_disk(uri, deleted) == deleted
    table = DeltaTable(uri)
    assert table.version() == settled.version
    assert {os.path.relpath(f, uri) for f in table.file_uris()} == set(state.adds)
    assert table.to_pyarrow_table().num_rows == sum(f.num_records for f in log.snapshot.files)
    assert set(vacuum_table(uri, retention_hours=0, dry_run=True)) == deleted
    reopened = DeltaPartitionLog.open(uri)
    assert [f.path for f in reopened.snapshot.files] == [f.path for f in log.snapshot.files]
    assert reopened.snapshot.high_watermark == log.snapshot.high_watermark


def test_a_merges_removes_are_stamped_when_the_append_carrying_it_commits(tmp_path):
    """Settling counts a replaced file's grace from when the table stopped listing it: the
    merge housekeeping prepared is committed by the next append, with that append's time."""
    uri = str(tmp_path / "topic" / "0")
    DeltaPartitionLog.create(uri)
    log = DeltaPartitionLog.open(uri)
    for index in range(MERGE_FILES_MIN):
        log.append([NewRecord(None, b"v%d" % index)], config=CONFIG)
    assert log.housekeeping() >= MERGE_FILES_MIN  # the merged file is written, not committed
    later_ms = int(time.time() * 1000) + 60_000
    log.append([NewRecord(None, b"carrier")], config=CONFIG, now_ms=later_ms)
    removes = [remove for _, remove in log.snapshot.state.tombstones.values()]
    assert len(removes) >= MERGE_FILES_MIN
    assert {remove["deletionTimestamp"] for remove in removes} == {later_ms}


def test_a_failed_delete_keeps_the_tombstones_and_still_checkpoints(busy_table):
    """A file that cannot be deleted (a role without delete rights, an object lock) keeps its
    tombstone, and the checkpoint is written all the same (the log must still be trimmed);
    the next checkpoint settles it."""
    uri, log = busy_table
    logs = open_store(uri).child(log_commit.LOG_DIR)
    merged, deleted = _rearranged_and_deleted(log.snapshot.state)

    def refuse(paths: list[str]) -> None:
        raise PermissionError("the store refused the delete")

    later_ms = int(time.time() * 1000) + 2 * HOUR_MS
    kept = write_checkpoint(
        logs, log.snapshot.state, now_ms=later_ms, settling=Settling(HOUR_MS, refuse)
    )
    assert kept.version == log.snapshot.table_version and kept.files_deleted == 0
    assert checkpoint_removes(uri, kept.version) == merged | deleted
    assert _on_disk(uri, merged) == merged

    log.append([NewRecord(b"k", b"after")], config=CONFIG)
    state = log.snapshot.state.checkpointed(kept.version, kept.names)
    settling = Settling(HOUR_MS, open_store(uri).delete_many)
    settled = write_checkpoint(logs, state, now_ms=later_ms, settling=settling)
    assert settled.files_deleted == len(merged) and _on_disk(uri, merged) == set()
    assert checkpoint_removes(uri, settled.version) == deleted


def test_tombstones_carried_from_another_engines_checkpoint_never_settle(busy_table):
    """Spark writes every tombstone of its checkpoints with dataChange=false, so a carried
    tombstone settles only from lakelog's own checkpoints (marked in the Parquet footer)."""
    uri, log = busy_table
    logs = open_store(uri).child(log_commit.LOG_DIR)
    merged, deleted = _rearranged_and_deleted(log.snapshot.state)
    base = write_checkpoint(logs, log.snapshot.state)
    path = os.path.join(uri, "_delta_log", base.names[0])
    table = pq.read_table(path)
    removes = table.column("remove").combine_chunks()
    as_spark = pa.StructArray.from_arrays(  # every dataChange false, as Spark writes them
        [
            pa.repeat(False, len(removes)) if f.name == "dataChange" else removes.field(f.name)
            for f in removes.type
        ],
        fields=list(removes.type),
        mask=pc.invert(removes.is_valid()),
    )
    table = table.set_column(table.schema.get_field_index("remove"), "remove", as_spark)
    pq.write_table(table.replace_schema_metadata(None), path)

    log.append([NewRecord(b"k", b"after")], config=CONFIG)
    state = log.snapshot.state.checkpointed(base.version, base.names)
    later_ms = int(time.time() * 1000) + 2 * HOUR_MS
    settling = Settling(HOUR_MS, open_store(uri).delete_many)
    written = write_checkpoint(logs, state, now_ms=later_ms, settling=settling)
    assert written.files_deleted == 0
    assert _on_disk(uri, merged | deleted) == merged | deleted
    assert checkpoint_removes(uri, written.version) == merged | deleted


@pytest.mark.parametrize(
    ("history_ms", "later_ms", "settles"),
    [
        (HOUR_MS, 2 * HOUR_MS, True),
        (3 * HOUR_MS, 2 * HOUR_MS, False),  # the topic keeps three hours of history
        (0, 15 * 60_000, True),
        (0, 5 * 60_000, False),  # never sooner than REMOVED_FILE_GRACE_MS
    ],
)
def test_housekeeping_settles_merged_files_after_the_history_kept(
    busy_table, monkeypatch, history_ms, later_ms, settles
):
    """The writer's housekeeping keeps rearranged files as long as the topic keeps history for
    time travel (delta.log.retention.ms, at least 10 minutes), then deletes them with its
    next checkpoint."""
    uri, log = busy_table
    merged, _ = _rearranged_and_deleted(log.snapshot.state)
    monkeypatch.setattr(housekeeping, "CHECKPOINT_INTERVAL", 4)
    later_s = time.time() + later_ms / 1000
    monkeypatch.setattr(checkpoint, "time", SimpleNamespace(time=lambda: later_s))
    log.housekeeping(history_ms)
    written = log._housekeeper.written
    assert written is not None and written.version == log.snapshot.table_version
    assert _on_disk(uri, merged) == (set() if settles else merged)
    assert (checkpoint_removes(uri, written.version) & merged) == (set() if settles else merged)


def test_the_writers_state_follows_every_commit(busy_table):
    """The state the writer advanced itself equals a fresh replay of the table."""
    uri, log = busy_table
    fresh = read_state(open_store(uri).child(log_commit.LOG_DIR), uri)
    state = log.snapshot.state
    assert (state.version, state.transactions, state.adds) == (
        fresh.version,
        fresh.transactions,
        fresh.adds,
    )
    assert set(state.tombstones) == set(fresh.tombstones)  # no checkpoint yet: all of them


def test_housekeeping_checkpoints_without_reading_the_log(busy_table, monkeypatch):
    """The housekeeper's checkpoint needs no table load: with every log read failing, it is
    still written, and a new writer opens the table from it."""
    uri, log = busy_table
    for index in range(100):
        log.append([NewRecord(None, b"x%d" % index)], config=CONFIG)
    store_type = type(open_store(uri))

    def no_reads(self, path):
        raise AssertionError(f"read {path}")

    monkeypatch.setattr(store_type, "get", no_reads)
    version = log.snapshot.table_version
    log.housekeeping()  # the checkpoint, then a merge of the small files
    monkeypatch.undo()
    assert os.path.exists(os.path.join(uri, "_delta_log", checkpoint_name(version)))
    log.catch_up()  # steps over the merge
    reopened = DeltaPartitionLog.open(uri)
    assert reopened.snapshot.high_watermark == log.snapshot.high_watermark
    assert [f.path for f in reopened.snapshot.files] == [f.path for f in log.snapshot.files]
    assert DeltaTable(uri, version=version).version() == version
    assert DeltaTable(uri).version() == log.snapshot.table_version


def test_a_reader_follows_new_commits_and_sees_a_new_leader(busy_table):
    uri, log = busy_table
    reader = TableReader.read(uri)
    assert reader.leader().node_id == 3
    log.commit_leadership(5, expected=reader.leader(), hold=True)
    log.append([NewRecord(None, b"after")], config=CONFIG)
    state = reader.refresh()
    assert reader.leader().node_id == 5
    assert state.version == log.snapshot.table_version


def test_a_damaged_commit_is_refused_with_what_to_do(busy_table):
    uri, log = busy_table
    version = log.snapshot.table_version
    with open(os.path.join(uri, "_delta_log", log_commit.commit_name(version)), "wb") as f:
        f.write(b"{not json")
    with pytest.raises(CorruptPartition, match=f"damaged commit files \\({version}: not JSON"):
        DeltaPartitionLog.open(uri)


def test_a_missing_table_is_named(tmp_path):
    with pytest.raises(CorruptPartition, match="No Delta table"):
        DeltaPartitionLog.open(str(tmp_path / "nothing"))


def test_a_checkpoint_of_an_empty_table_has_protocol_and_metadata(tmp_path):
    uri = str(tmp_path / "empty")
    DeltaPartitionLog.create(uri)
    log = DeltaPartitionLog.open(uri)
    write_checkpoint(open_store(uri).child(log_commit.LOG_DIR), log.snapshot.state)
    table = DeltaTable(uri)
    assert table.version() == 0
    assert table.schema().to_arrow().field("offset").type == pa.int64()
    assert table.metadata().partition_columns == ["segment"]


def test_tombstone_paths_are_decoded_as_the_log_encodes_them():
    """The carried tombstones' paths are compared decoded: the writers' own `%3D` at once,
    any other escape path by path (as file_path decodes them)."""
    paths = pa.array(["segment%3D0/part-a.parquet", "segment%3D5/part-b.parquet"])
    assert checkpoint._decoded(paths).to_pylist() == [
        "segment=0/part-a.parquet",
        "segment=5/part-b.parquet",
    ]
    other = pa.array(["segment%3D0/a%20b.parquet", "plain.parquet"])
    assert checkpoint._decoded(other).to_pylist() == ["segment=0/a b.parquet", "plain.parquet"]
    assert checkpoint._decoded(pa.array(["plain.parquet"])).to_pylist() == ["plain.parquet"]


def test_a_checkpoint_heavy_with_tombstones_makes_the_next_one_wait(tmp_path, monkeypatch):
    """The next checkpoint is due after CHECKPOINT_INTERVAL versions, or one version per
    CHECKPOINT_ROWS_PER_VERSION rows of the last one if that is longer: checkpoints carrying
    a week of tombstones are not rewritten every CHECKPOINT_INTERVAL commits."""
    monkeypatch.setattr(housekeeping, "CHECKPOINT_INTERVAL", 4)
    monkeypatch.setattr(housekeeping, "CHECKPOINT_ROWS_PER_VERSION", 1)
    uri = str(tmp_path / "topic" / "0")
    DeltaPartitionLog.create(uri)
    log = DeltaPartitionLog.open(uri)
    for index in range(MERGE_FILES_MIN + 4):
        log.append([NewRecord(None, b"v%d" % index)], config=CONFIG)
    assert log.maybe_merge_small_files() >= MERGE_FILES_MIN  # 32 tombstones
    log.housekeeping()
    first = log_commit.last_checkpoint_version(open_store(uri).child(log_commit.LOG_DIR))
    assert first == log.snapshot.table_version
    logs = open_store(uri).child(log_commit.LOG_DIR)
    rows = json.loads(logs.get(log_commit.LAST_CHECKPOINT))["size"]
    assert rows > 4 * 2  # more rows than CHECKPOINT_INTERVAL versions, by far
    for index in range(rows - 1):  # past CHECKPOINT_INTERVAL, short of the first one's rows
        log.append([NewRecord(None, b"w%d" % index)], config=CONFIG)
        log.housekeeping()
    assert log_commit.last_checkpoint_version(logs) == first
    log.append([NewRecord(None, b"x")], config=CONFIG)
    log.housekeeping()
    assert log_commit.last_checkpoint_version(logs) == first + rows


def test_the_checkpoint_interval_is_bounded():
    due = housekeeping.checkpoint_due_after
    assert due(0) == housekeeping.CHECKPOINT_INTERVAL
    assert due(200 * housekeeping.CHECKPOINT_ROWS_PER_VERSION) == 200
    assert due(10**9) == housekeeping.CHECKPOINT_INTERVAL_MAX
