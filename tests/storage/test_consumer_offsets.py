"""Consumer group offsets in `_meta/consumer_offsets` on a real Delta table: the per-group
coordinator fence, commit sequences across coordinators, compaction racing commits."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from storage_layout import paths
from storage_layout.errors import LeadershipConflict
from storage_layout.log import Leadership
from storage_layout.meta.consumer_offsets import (
    CONSUMER_OFFSETS_SCHEMA,
    DELETED_OFFSET,
    GENERATION_NONE,
    CommittedOffset,
    ConsumerOffsets,
    GroupCommit,
    OffsetCommit,
)
from storage_layout.meta.table import META_FILES_MAX, MetaTable, Verdict
from storage_layout.records import TopicPartition


class PausedNode(ConsumerOffsets):
    """A node that stops seeing new table versions after `pause()`, as one frozen (SIGSTOP,
    GC) between reading the table and committing: its checks pass on a stale snapshot, so
    only the txn compare-and-set can stop it."""

    paused = False

    def pause(self) -> None:
        self.paused = True

    def _refresh(self) -> None:
        if not self.paused:
            super()._refresh()


def table_uri(root) -> str:
    return paths.meta_table_uri(str(root), "consumer_offsets")


def stored_rows(root) -> list[dict]:
    return DeltaTable(table_uri(root)).to_pyarrow_table().to_pylist()


def offsets_of(loaded: dict[TopicPartition, CommittedOffset]) -> dict[tuple[str, int], int]:
    return {(tp.topic, tp.partition): committed.offset for tp, committed in loaded.items()}


def test_commit_and_load_round_trip(tmp_path):
    """A commit's offsets, metadata, generation, member and time come back, also on another node."""
    node = ConsumerOffsets(str(tmp_path))
    held = node.take_group("g", 1, expected=None)
    commits = [OffsetCommit("orders", 0, 42, "note", leader_epoch=3), OffsetCommit("orders", 3, 7)]
    node.commit("g", held, commits, generation=5, member_id="m-1", now_ms=1_700_000_000_123)
    expected = {
        TopicPartition("orders", 0): CommittedOffset(42, "note", 5, "m-1", 1_700_000_000_123, 3),
        TopicPartition("orders", 3): CommittedOffset(7, None, 5, "m-1", 1_700_000_000_123, -1),
    }
    assert node.load("g") == expected
    assert ConsumerOffsets(str(tmp_path)).load("g") == expected
    assert node.load("other") == {}


def test_latest_commit_wins_and_sequences_increase(tmp_path):
    """Per partition the latest commit wins, whatever the commit times say; every commit gets
    a larger commit_sequence."""
    node = ConsumerOffsets(str(tmp_path))
    held = node.take_group("g", 1, expected=None)
    both = [OffsetCommit("t", 0, 10), OffsetCommit("t", 1, 10)]
    sequences = [
        node.commit("g", held, both, generation=1, member_id="a", now_ms=900),
        node.commit("g", held, [OffsetCommit("t", 0, 20)], generation=2, member_id="b", now_ms=500),
        node.commit(
            "g", held, [OffsetCommit("t", 1, 5)], generation=GENERATION_NONE, member_id=None
        ),
    ]
    assert sequences == sorted(sequences) and len(set(sequences)) == 3
    loaded = node.load("g")
    assert offsets_of(loaded) == {("t", 0): 20, ("t", 1): 5}
    assert loaded[TopicPartition("t", 0)].committed_at_ms == 500  # clock went back: still wins
    assert loaded[TopicPartition("t", 1)].generation == GENERATION_NONE


def _race_to_take(nodes: list[ConsumerOffsets], expected: Leadership | None) -> list:
    """Each node tries take_group at the same moment; their results or LeadershipConflicts."""
    barrier = threading.Barrier(len(nodes))
    outcomes: list = [None] * len(nodes)

    def take(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = nodes[index].take_group("g", index + 1, expected=expected)
        except LeadershipConflict as error:
            outcomes[index] = error

    threads = [threading.Thread(target=take, args=(index,)) for index in range(len(nodes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return outcomes


def test_only_one_of_two_racing_takers_wins(tmp_path):
    """Two nodes taking a group with the same `expected` at once: exactly one wins, each round."""
    nodes = [ConsumerOffsets(str(tmp_path)), ConsumerOffsets(str(tmp_path))]
    for round_index in range(8):
        outcomes = _race_to_take(nodes, nodes[0].group_coordinator("g"))
        winners = [o for o in outcomes if isinstance(o, Leadership)]
        assert len(winners) == 1, outcomes
        assert winners[0].epoch == round_index
        assert nodes[1].group_coordinator("g") == winners[0]


def test_take_on_a_stale_snapshot_is_refused_by_the_txn(tmp_path):
    """A node whose snapshot still shows the old coordinator loses the compare-and-set."""
    paused, other = PausedNode(str(tmp_path)), ConsumerOffsets(str(tmp_path))
    paused.pause()
    winner = other.take_group("g", 2, expected=None)
    with pytest.raises(LeadershipConflict):
        paused.take_group("g", 1, expected=None)
    assert ConsumerOffsets(str(tmp_path)).group_coordinator("g") == winner


def test_deposed_coordinator_writes_nothing_and_the_new_one_continues(tmp_path):
    """After a takeover the old coordinator's commit fails and writes nothing; the new
    coordinator loads the old commits and its commit_sequence continues above them."""
    old, new = ConsumerOffsets(str(tmp_path)), ConsumerOffsets(str(tmp_path))
    old_held = old.take_group("g", 1, expected=None)
    last_old = [
        old.commit("g", old_held, [OffsetCommit("t", 0, n)], generation=1, member_id="a")
        for n in (1, 2, 3)
    ][-1]
    new_held = new.take_group("g", 2, expected=old_held)
    version = DeltaTable(table_uri(tmp_path)).version()
    with pytest.raises(LeadershipConflict):
        old.commit("g", old_held, [OffsetCommit("t", 0, 99)], generation=1, member_id="a")
    assert DeltaTable(table_uri(tmp_path)).version() == version
    assert offsets_of(new.load("g")) == {("t", 0): 3}
    sequence = new.commit("g", new_held, [OffsetCommit("t", 1, 4)], generation=2, member_id="b")
    assert sequence == last_old + 1
    assert offsets_of(old.load("g")) == {("t", 0): 3, ("t", 1): 4}


def test_paused_coordinator_is_fenced_by_the_txn(tmp_path):
    """A coordinator frozen before a takeover passes its own check on its stale snapshot;
    the group txn in its commit still rejects it, and nothing is written."""
    paused, other = PausedNode(str(tmp_path)), ConsumerOffsets(str(tmp_path))
    held = paused.take_group("g", 1, expected=None)
    paused.commit("g", held, [OffsetCommit("t", 0, 1)], generation=1, member_id="a")
    paused.pause()
    other.take_group("g", 2, expected=held)
    rows_before = len(stored_rows(tmp_path))
    with pytest.raises(LeadershipConflict):
        paused.commit("g", held, [OffsetCommit("t", 0, 99)], generation=1, member_id="a")
    assert len(stored_rows(tmp_path)) == rows_before
    assert offsets_of(other.load("g")) == {("t", 0): 1}


def test_sequence_continues_when_a_group_comes_back(tmp_path):
    """A node that had the group, lost it and got it back (handed over, no take_group call of
    its own) continues above the sequences the other node used meanwhile."""
    first, second = ConsumerOffsets(str(tmp_path)), ConsumerOffsets(str(tmp_path))
    held = first.take_group("g", 1, expected=None)
    for n in range(3):
        first.commit("g", held, [OffsetCommit("t", 0, n)], generation=1, member_id="a")
    taken = second.take_group("g", 2, expected=held)
    used = [
        second.commit("g", taken, [OffsetCommit("t", 0, n)], generation=2, member_id="b")
        for n in (10, 11)
    ]
    handed_back = second.take_group("g", 1, expected=taken)
    sequence = first.commit(
        "g", handed_back, [OffsetCommit("t", 0, 12)], generation=3, member_id="c"
    )
    assert sequence == used[-1] + 1
    sequences = [row["commit_sequence"] for row in stored_rows(tmp_path)]
    assert sorted(sequences) == list(range(6))


def test_groups_are_listed_sorted(tmp_path):
    """groups() lists each group with stored offsets once, sorted; a taken group without
    commits is not listed."""
    node = ConsumerOffsets(str(tmp_path))
    assert node.groups() == []
    for group in ("zeta", "alpha", "mid"):
        held = node.take_group(group, 1, expected=None)
        for n in range(2):
            node.commit(group, held, [OffsetCommit("t", n, n)], generation=1, member_id=None)
    node.take_group("empty", 1, expected=None)
    assert ConsumerOffsets(str(tmp_path)).groups() == ["alpha", "mid", "zeta"]


def test_commits_from_many_threads_of_one_process(tmp_path):
    """Threads committing for different groups through one object (compactions included):
    each group's commits get sequences 0, 1, 2, … and the last offsets are loaded."""
    node = ConsumerOffsets(str(tmp_path))
    groups = [f"g{index}" for index in range(8)]
    held = {group: node.take_group(group, 1, expected=None) for group in groups}
    sequences: dict[str, list[int]] = {group: [] for group in groups}

    def commit_many(group: str) -> None:
        for n in range(20):
            commits = [OffsetCommit("t", n % 3, n)]
            sequences[group].append(
                node.commit(group, held[group], commits, generation=1, member_id=None)
            )

    threads = [threading.Thread(target=commit_many, args=(group,)) for group in groups]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    reader = ConsumerOffsets(str(tmp_path))
    for group in groups:
        assert sequences[group] == list(range(20)), group
        assert offsets_of(reader.load(group)) == {("t", 0): 18, ("t", 1): 19, ("t", 2): 17}


def _commit_history(node: ConsumerOffsets) -> dict[str, dict]:
    """Two groups, several commits each, overlapping partitions; returns the loaded state."""
    for group in ("a", "b"):
        held = node.take_group(group, 1, expected=None)
        for n in range(6):
            commits = [OffsetCommit("t", n % 3, n), OffsetCommit("u", 0, 100 + n)]
            node.commit(group, held, commits, generation=n, member_id=f"m{n}")
    return {group: node.load(group) for group in ("a", "b")}


def test_compaction_keeps_exactly_the_latest_rows(tmp_path):
    """Compaction drops superseded rows only: every (group, topic, partition) keeps its latest
    row and what load() returns is unchanged."""
    node = ConsumerOffsets(str(tmp_path))
    before = _commit_history(node)
    assert node.keep_latest() == 2 * 12 - 2 * 4
    rows = stored_rows(tmp_path)
    assert len(rows) == 8
    assert len({(r["group_id"], r["topic"], r["partition"]) for r in rows}) == 8
    assert len(DeltaTable(table_uri(tmp_path)).file_uris()) == 1
    reopened = ConsumerOffsets(str(tmp_path))
    assert {group: reopened.load(group) for group in ("a", "b")} == before
    assert node.keep_latest() == 0  # one file: nothing to do


def test_commit_between_compaction_read_and_commit_survives(tmp_path):
    """A coordinator commit landing after the compaction read the table (a new file the
    compaction does not remove) is kept, and the compaction still commits."""
    node = ConsumerOffsets(str(tmp_path))
    _commit_history(node)
    plan = node.plan_keep_latest()
    held = node.group_coordinator("a")
    node.commit(
        "a",
        held,
        [OffsetCommit("t", 0, 999), OffsetCommit("new", 0, 1)],
        generation=9,
        member_id="late",
    )
    assert node.commit_keep_latest(plan) == plan.rows_dropped > 0
    loaded = ConsumerOffsets(str(tmp_path)).load("a")
    assert offsets_of(loaded)[("t", 0)] == 999 and offsets_of(loaded)[("new", 0)] == 1
    assert len(stored_rows(tmp_path)) == 8 + 2


def test_coordinator_on_a_pre_compaction_snapshot_still_commits(tmp_path):
    """Compaction carries no group txn and rewrites with dataChange=false, so a coordinator
    whose snapshot predates it commits without a conflict (no retry, nothing lost)."""
    paused = PausedNode(str(tmp_path))
    _commit_history(paused)
    held = paused.group_coordinator("b")
    paused.pause()
    assert ConsumerOffsets(str(tmp_path)).keep_latest() > 0
    paused.commit("b", held, [OffsetCommit("t", 0, 555)], generation=7, member_id="x")
    loaded = ConsumerOffsets(str(tmp_path)).load("b")
    assert offsets_of(loaded)[("t", 0)] == 555


def test_second_compaction_of_one_snapshot_gives_up(tmp_path):
    """Two compactions planned on the same snapshot: the second gives up (its own txn), so
    the table never holds the latest rows twice."""
    node = ConsumerOffsets(str(tmp_path))
    before = _commit_history(node)
    first, second = node.plan_keep_latest(), node.plan_keep_latest()
    assert node.commit_keep_latest(first) > 0
    assert node.commit_keep_latest(second) == 0
    assert len(stored_rows(tmp_path)) == 8
    assert {group: node.load(group) for group in ("a", "b")} == before


def test_commits_keep_the_table_a_few_files(tmp_path):
    """Commits compact the table (in the background) once it has more than META_FILES_MAX
    files, losing nothing."""
    node = ConsumerOffsets(str(tmp_path))
    held = node.take_group("g", 1, expected=None)
    for n in range(3 * META_FILES_MAX + 5):
        node.commit("g", held, [OffsetCommit("t", n % 4, n)], generation=1, member_id=None)
        assert len(DeltaTable(table_uri(tmp_path)).file_uris()) <= 2 * META_FILES_MAX
    deadline = time.monotonic() + 20
    while len(DeltaTable(table_uri(tmp_path)).file_uris()) > META_FILES_MAX:
        assert time.monotonic() < deadline, "the background compaction never ran"
        time.sleep(0.1)
    last = 3 * META_FILES_MAX + 4
    expected = {("t", p): max(n for n in range(last + 1) if n % 4 == p) for p in range(4)}
    assert offsets_of(ConsumerOffsets(str(tmp_path)).load("g")) == expected


def test_table_is_plain_delta_with_the_documented_schema(tmp_path):
    """Any Delta reader sees the documented schema and one row per stored offset, before and
    after a compaction (whose file lakelog writes itself)."""
    node = ConsumerOffsets(str(tmp_path))
    held = node.take_group("g", 1, expected=None)
    node.commit(
        "g",
        held,
        [OffsetCommit("t", 0, 5, "m")],
        generation=2,
        member_id="x",
        now_ms=1_700_000_000_000,
    )
    node.commit(
        "g", held, [OffsetCommit("t", 0, 6)], generation=2, member_id="x", now_ms=1_700_000_000_001
    )
    for _ in range(2):
        table = DeltaTable(table_uri(tmp_path)).to_pyarrow_table()
        assert table.schema == CONSUMER_OFFSETS_SCHEMA
        latest = max(table.to_pylist(), key=lambda r: r["commit_sequence"])
        assert (latest["group_id"], latest["topic"], latest["partition"]) == ("g", "t", 0)
        assert (latest["offset"], latest["metadata"], latest["generation"]) == (6, None, 2)
        assert latest["committed_at"].timestamp() == pytest.approx(1_700_000_000.001)
        node.keep_latest()
    assert table.num_rows == 1


def test_a_table_from_before_the_leader_epoch_column_gains_it(tmp_path):
    """A table written by a lakelog without `leader_epoch` (FORMAT.md §1): opening it adds
    the column by a metadata-only commit, old rows read it as null (-1 in answers), new rows
    keep it, and plain Delta readers see the documented schema."""
    old_schema = pa.schema([f for f in CONSUMER_OFFSETS_SCHEMA if f.name != "leader_epoch"])
    old = MetaTable(table_uri(tmp_path), old_schema)
    row = {"group_id": "g", "topic": "t", "partition": 0, "offset": 5, "metadata": None,
           "generation": 1, "member_id": "m", "committed_at": 0, "commit_sequence": 0}  # fmt: skip
    assert old.append(pa.Table.from_pylist([row], old_schema), []) is Verdict.COMMITTED
    before = DeltaTable(table_uri(tmp_path)).version()
    node = ConsumerOffsets(str(tmp_path))
    assert node.load("g")[TopicPartition("t", 0)].leader_epoch == -1
    held = node.take_group("g", 1, expected=None)
    node.commit("g", held, [OffsetCommit("t", 1, 9, leader_epoch=4)], generation=1, member_id="m")
    loaded = ConsumerOffsets(str(tmp_path)).load("g")
    assert {tp.partition: c.leader_epoch for tp, c in loaded.items()} == {0: -1, 1: 4}
    delta = DeltaTable(table_uri(tmp_path))
    assert delta.history()[-(before + 2)]["operation"] == "ADD COLUMNS"
    table = delta.to_pyarrow_table()
    assert table.schema == CONSUMER_OFFSETS_SCHEMA
    assert sorted(table.column("leader_epoch").to_pylist(), key=str) == [4, None]
    # an older node keeps writing rows without the column: they read as null too
    old.refresh()
    assert old.append(pa.Table.from_pylist([row | {"partition": 2}], old_schema), []) is (
        Verdict.COMMITTED
    )
    assert ConsumerOffsets(str(tmp_path)).load("g")[TopicPartition("t", 2)].leader_epoch == -1


def test_nodes_creating_the_table_at_once_all_open_it(tmp_path):
    """Several nodes starting together on an empty root all get the one table."""
    barrier = threading.Barrier(4)
    opened: list[ConsumerOffsets | Exception] = []

    def open_table() -> None:
        barrier.wait()
        try:
            opened.append(ConsumerOffsets(str(tmp_path)))
        except Exception as error:  # reported by the assertion below
            opened.append(error)

    threads = [threading.Thread(target=open_table) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert all(isinstance(o, ConsumerOffsets) for o in opened), opened
    held = opened[0].take_group("g", 1, expected=None)
    assert opened[3].group_coordinator("g") == held


def test_bad_commit_requests_are_refused_before_writing(tmp_path):
    """No partitions, a negative offset (other than -1, the deletion row), or one partition
    twice: nothing is written."""
    node = ConsumerOffsets(str(tmp_path))
    held = node.take_group("g", 1, expected=None)
    bad = [
        [],
        [OffsetCommit("t", 0, -2)],
        [OffsetCommit("t", 0, 1), OffsetCommit("t", 0, 2)],
    ]
    for commits in bad:
        with pytest.raises(ValueError):
            node.commit("g", held, commits, generation=1, member_id=None)
    assert stored_rows(tmp_path) == []


def test_one_commit_can_carry_several_members_rows(tmp_path):
    """The coordinator batches members' commits into one Delta commit; rows keep who
    committed them."""
    node = ConsumerOffsets(str(tmp_path))
    held = node.take_group("g", 1, expected=None)
    version = DeltaTable(table_uri(tmp_path)).version()
    node.commit(
        "g",
        held,
        [
            OffsetCommit("t", 0, 5, generation=3, member_id="a"),
            OffsetCommit("t", 1, 9, generation=3, member_id="b"),
        ],
        generation=GENERATION_NONE,
        member_id=None,
    )
    assert DeltaTable(table_uri(tmp_path)).version() == version + 1
    loaded = node.load("g")
    assert (loaded[TopicPartition("t", 0)].member_id, loaded[TopicPartition("t", 1)].member_id) == (
        "a",
        "b",
    )
    assert {o.generation for o in loaded.values()} == {3}


def test_batched_commit_of_several_groups_leaves_out_a_taken_one(tmp_path):
    """One Delta commit for several groups; a group another node took meanwhile gets its
    LeadershipConflict and writes nothing, the others are committed."""
    node, other = ConsumerOffsets(str(tmp_path)), ConsumerOffsets(str(tmp_path))
    kept = node.take_group("kept", 1, expected=None)
    lost = node.take_group("lost", 1, expected=None)
    other.take_group("lost", 2, expected=lost)
    version = DeltaTable(table_uri(tmp_path)).version()
    results = node.commit_many(
        [
            GroupCommit("kept", kept, [OffsetCommit("t", 0, 4)], generation=1, member_id="a"),
            GroupCommit("lost", lost, [OffsetCommit("t", 0, 9)], generation=1, member_id="a"),
        ]
    )
    assert isinstance(results["lost"], LeadershipConflict)
    assert isinstance(results["kept"], int)
    assert DeltaTable(table_uri(tmp_path)).version() == version + 1
    assert offsets_of(other.load("kept")) == {("t", 0): 4}
    assert other.load("lost") == {}


def test_a_deleted_offset_is_gone_and_a_group_with_none_left_is_not_listed(tmp_path):
    """Rows with offset -1 delete (Kafka's OffsetDelete, DeleteGroups): the latest row wins."""
    node = ConsumerOffsets(str(tmp_path))
    held = node.take_group("g", 1, expected=None)
    node.commit(
        "g", held, [OffsetCommit("t", 0, 5), OffsetCommit("t", 1, 9)], generation=1, member_id="m"
    )
    node.commit("g", held, [OffsetCommit("t", 1, DELETED_OFFSET)], generation=-1, member_id=None)
    assert offsets_of(node.load("g")) == {("t", 0): 5}
    assert node.groups() == ["g"]

    node.commit("g", held, [OffsetCommit("t", 0, DELETED_OFFSET)], generation=-1, member_id=None)
    assert node.load("g") == {} and node.groups() == []
    node.commit("g", held, [OffsetCommit("t", 0, 3)], generation=-1, member_id=None)  # back again
    assert offsets_of(ConsumerOffsets(str(tmp_path)).load("g")) == {("t", 0): 3}
    assert node.groups() == ["g"]


def test_a_takeover_landing_between_the_refresh_and_a_batch_fences_its_group(tmp_path, monkeypatch):
    """The takeover lands after the coordinator's last look at the table (here: it looks no
    more) and before its batched commit. The batch conflicts, the groups are committed one
    by one, each checked against every commit since the same decision: the taken group writes
    nothing and does not come back to the deposed node; the other is committed (found in
    review: one by one on a refreshed state, the taken group was committed and taken back)."""
    node, other = ConsumerOffsets(str(tmp_path)), ConsumerOffsets(str(tmp_path))
    kept = node.take_group("kept", 1, expected=None)
    lost = node.take_group("lost", 1, expected=None)
    taken = other.take_group("lost", 2, expected=lost)
    monkeypatch.setattr(node, "_refresh", lambda: None)  # its view predates the takeover
    results = node.commit_many(
        [
            GroupCommit("kept", kept, [OffsetCommit("t", 0, 4)], generation=1, member_id="a"),
            GroupCommit("lost", lost, [OffsetCommit("t", 0, 9)], generation=1, member_id="a"),
        ]
    )
    assert isinstance(results["lost"], LeadershipConflict)
    assert results["kept"] == 0
    reader = ConsumerOffsets(str(tmp_path))
    assert reader.group_coordinator("lost") == taken
    assert reader.load("lost") == {}
    assert offsets_of(reader.load("kept")) == {("t", 0): 4}
