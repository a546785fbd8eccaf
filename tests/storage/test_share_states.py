"""Share group states in `_meta/share_states` on a real Delta table (FORMAT.md §19): the latest
row per share partition, the per-topic-partition fence against a deposed or paused owner,
topic incarnations, deletes, the latest-rows rewrite, and what a plain Delta reader sees."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from storage_layout import paths
from storage_layout.errors import LeadershipConflict
from storage_layout.meta.share_states import (
    DELETED_STATE,
    SHARE_STATES_SCHEMA,
    ShareBatch,
    ShareCommit,
    ShareState,
    ShareStates,
)

TOPIC_ID = "5f0c3bd4-0000-4000-8000-000000000001"
ACQUIRED, ACKNOWLEDGED, AVAILABLE = 1, 2, 0


class PausedNode(ShareStates):
    """A node that stops seeing new table versions after `pause()` (SIGSTOP, GC)."""

    paused = False

    def _refresh(self) -> None:
        if not self.paused:
            super()._refresh()


def state(group: str, start: int, *batches: ShareBatch, topic_id: str = TOPIC_ID) -> ShareState:
    return ShareState(group, topic_id, start, tuple(batches))


def test_states_round_trip_and_the_latest_row_of_each_group_wins(tmp_path):
    node = ShareStates(str(tmp_path))
    held = node.take_partition("orders", 0, 1, expected=None)
    first = [
        state("billing", 10, ShareBatch(10, 12, ACQUIRED, 1), ShareBatch(13, 13, ACKNOWLEDGED, 2)),
        state("audit", 0),
    ]
    assert node.commit_many([ShareCommit("orders", 0, held, first)]) == {("orders", 0): 0}
    later = [state("billing", 13, ShareBatch(13, 13, AVAILABLE, 2))]
    assert node.commit_many([ShareCommit("orders", 0, held, later)]) == {("orders", 0): 1}
    expected = {"billing": later[0], "audit": first[1]}
    assert node.load("orders", 0, TOPIC_ID) == expected
    assert ShareStates(str(tmp_path)).load("orders", 0, TOPIC_ID) == expected  # another node
    assert node.load("orders", 1, TOPIC_ID) == {}
    assert node.groups() == ["audit", "billing"]


def test_a_deleted_state_is_gone_and_another_incarnation_of_the_topic_starts_afresh(tmp_path):
    node = ShareStates(str(tmp_path))
    held = node.take_partition("orders", 0, 1, expected=None)
    node.commit_many([ShareCommit("orders", 0, held, [state("a", 5), state("b", 7)])])
    node.commit_many([ShareCommit("orders", 0, held, [state("a", DELETED_STATE)])])
    assert list(node.load("orders", 0, TOPIC_ID)) == ["b"]
    assert node.load("orders", 0, "another-topic-id") == {}
    assert node.groups() == ["b"]


def test_a_paused_owner_is_fenced_once_the_partition_moved(tmp_path):
    paused = PausedNode(str(tmp_path))
    held = paused.take_partition("orders", 0, 1, expected=None)
    paused.commit_many([ShareCommit("orders", 0, held, [state("a", 1)])])
    paused.paused = True
    other = ShareStates(str(tmp_path))
    taken = other.take_partition("orders", 0, 2, expected=held)
    result = paused.commit_many([ShareCommit("orders", 0, held, [state("a", 99)])])
    assert isinstance(result[("orders", 0)], LeadershipConflict)
    assert other.load("orders", 0, TOPIC_ID)["a"].start_offset == 1
    assert other.owner("orders", 0) == taken
    with pytest.raises(LeadershipConflict):
        ShareStates(str(tmp_path)).take_partition("orders", 0, 3, expected=held)


def test_a_batched_commit_leaves_out_only_the_partition_that_was_taken(tmp_path):
    node, other = ShareStates(str(tmp_path)), ShareStates(str(tmp_path))
    kept = node.take_partition("orders", 0, 1, expected=None)
    lost = node.take_partition("orders", 1, 1, expected=None)
    other.take_partition("orders", 1, 2, expected=lost)
    results = node.commit_many(
        [
            ShareCommit("orders", 0, kept, [state("a", 4)]),
            ShareCommit("orders", 1, lost, [state("a", 9)]),
        ]
    )
    assert results[("orders", 0)] == 0 and isinstance(results[("orders", 1)], LeadershipConflict)
    assert node.load("orders", 1, TOPIC_ID) == {}


def test_bad_commits_are_refused_before_writing(tmp_path):
    node = ShareStates(str(tmp_path))
    held = node.take_partition("orders", 0, 1, expected=None)
    for states in ([], [state("a", 1), state("a", 2)], [state("a", -2)]):
        with pytest.raises(ValueError):
            node.commit_many([ShareCommit("orders", 0, held, states)])
    assert node.groups() == []


def test_the_table_is_plain_delta_with_the_documented_schema_and_keeps_latest_rows(tmp_path):
    node = ShareStates(str(tmp_path))
    held = node.take_partition("orders", 0, 1, expected=None)
    for start in range(3):
        batches = [ShareBatch(start, start + 1, ACQUIRED, start + 1)]
        node.commit_many([ShareCommit("orders", 0, held, [state("a", start, *batches)])])
    uri = paths.meta_table_uri(str(tmp_path), "share_states")
    table = DeltaTable(uri).to_pyarrow_table()
    assert table.schema == SHARE_STATES_SCHEMA and table.num_rows == 3
    assert node.keep_latest() == 2
    [row] = DeltaTable(uri).to_pyarrow_table().to_pylist()
    assert (row["start_offset"], row["state_sequence"]) == (2, 2)
    assert row["batches"] == [
        {"first_offset": 2, "last_offset": 3, "state": ACQUIRED, "delivery_count": 3}
    ]
