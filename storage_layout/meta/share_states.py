"""Share group states: `_meta/share_states`, one row per share partition per change (FORMAT.md
§19). A row holds the whole state of its share partition (group, topic, partition): its start
offset and its in-flight records as runs of one state and delivery count; the latest row of
each share partition is its state.

The share states of a topic partition are written by its leader only: topic partitions are the
holders of a FencedRows table (txn `share:<topic>/<partition>`, `state_sequence` per topic
partition), so a node that lost the partition can never write a share state again, whatever
its view of the table.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from storage_layout import paths
from storage_layout.errors import LeadershipConflict
from storage_layout.log.leadership import Leadership
from storage_layout.meta.fenced_rows import FencedRows, HolderRows, Layout
from storage_layout.schema import TIMESTAMP_TYPE

SHARE_STATES_TABLE = "share_states"
# A row with this start offset deletes the share partition's state (FORMAT.md §19).
DELETED_STATE = -1
TABLE_CONFIGURATION = {  # as the consumer offsets' (FORMAT.md §11), for the same reason
    "delta.checkpointInterval": "100",
    "delta.logRetentionDuration": "interval 10 seconds",
}
BATCH_TYPE = pa.struct(
    [
        pa.field("first_offset", pa.int64(), nullable=False),
        pa.field("last_offset", pa.int64(), nullable=False),
        pa.field("state", pa.int8(), nullable=False),
        pa.field("delivery_count", pa.int16(), nullable=False),
    ]
)
SHARE_STATES_SCHEMA = pa.schema(
    [
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("topic_id", pa.string(), nullable=False),
        pa.field("start_offset", pa.int64(), nullable=False),
        pa.field("batches", pa.list_(pa.field("item", BATCH_TYPE, nullable=False))),
        pa.field("written_at", TIMESTAMP_TYPE, nullable=False),
        pa.field("state_sequence", pa.int64(), nullable=False),
    ]
)


@dataclass(frozen=True, slots=True)
class ShareBatch:
    """A run of consecutive in-flight offsets in one state (Kafka's values: 0 available, 1
    acquired, 2 acknowledged, 4 archived) with one delivery count."""

    first_offset: int
    last_offset: int
    state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareState:
    """One share partition's stored state, for one incarnation of its topic (`topic_id`)."""

    group_id: str
    topic_id: str
    start_offset: int
    batches: tuple[ShareBatch, ...] = ()


@dataclass(frozen=True, slots=True)
class ShareCommit:
    """The states of one topic partition's share groups in a batched commit, asserting the
    partition's share-state owner."""

    topic: str
    partition: int
    held: Leadership
    states: Sequence[ShareState]


class ShareStates(FencedRows):
    """Reads and writes `<root>/_meta/share_states`; creates it if absent."""

    def __init__(self, root: str) -> None:
        uri = paths.meta_table_uri(paths.normalize_root(root), SHARE_STATES_TABLE)
        super().__init__(uri, _LAYOUT)

    def owner(self, topic: str, partition: int) -> Leadership | None:
        """Who writes the topic partition's share states, as of the latest table version."""
        return self.holder_of((topic, partition))

    def take_partition(
        self, topic: str, partition: int, node_id: int, *, expected: Leadership | None
    ) -> Leadership:
        """Name `node_id` the writer of the topic partition's share states (the partition's
        new leader does), if the owner is still `expected` (FencedRows.take).

        Raises:
            LeadershipConflict: the owner is no longer `expected`, or another change won.
            StorageUnavailable: the table could not be read or written.
        """
        return self.take((topic, partition), node_id, expected=expected)

    def commit_many(
        self, entries: Sequence[ShareCommit], *, now_ms: int | None = None
    ) -> dict[tuple[str, int], int | LeadershipConflict]:
        """Store several topic partitions' share states in ONE Delta commit carrying each
        partition's txn: a partition whose owner changed is left out with its
        LeadershipConflict, the others are committed.

        Raises:
            StorageUnavailable: the table could not be read or written, or kept conflicting.
            ValueError: a partition twice, no states, or a group twice within a partition.
        """
        for entry in entries:
            _check_states(entry)
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        rows = [HolderRows((e.topic, e.partition), e.held, _rows_of(e, now_ms)) for e in entries]
        return self.commit_rows(rows)

    def load(self, topic: str, partition: int, topic_id: str) -> dict[str, ShareState]:
        """The share states of the topic partition by group id, as of the latest table
        version: each group's latest row, deleted ones and other incarnations of the topic
        left out.

        Raises:
            StorageUnavailable: the table could not be read.
        """
        rows = self.read_holder(self.latest_files(), (topic, partition), _STATE_COLUMNS)
        states = _states(self.latest_rows(rows, ("group_id",)))
        return {s.group_id: s for s in states if s.topic_id == topic_id}

    def of_group(self, group_id: str) -> dict[tuple[str, int], ShareState]:
        """The group's share states by (topic, partition), as of the latest table version
        (every incarnation's: the caller knows which topic ids are current).

        Raises:
            StorageUnavailable: the table could not be read.
        """
        columns = ["topic", "partition", *_STATE_COLUMNS]
        rows = self.read_files(self.latest_files(), columns)
        rows = self.latest_rows(rows.filter(pc.equal(rows.column("group_id"), group_id)))
        topics, partitions = rows.column("topic").to_pylist(), rows.column("partition").to_pylist()
        holders = zip(topics, partitions, strict=True)
        states = _states(rows, keep_deleted=True)
        return {
            holder: state
            for holder, state in zip(holders, states, strict=True)
            if state.start_offset != DELETED_STATE
        }

    def groups(self) -> list[str]:
        """Sorted ids of the share groups with a stored state (latest table version)."""
        return self.live_values("group_id")


_LAYOUT = Layout(
    schema=SHARE_STATES_SCHEMA,
    configuration=TABLE_CONFIGURATION,
    app_prefix="share:",  # part of the table format: FORMAT.md §19
    holder_columns=("topic", "partition"),
    key_columns=("group_id", "topic", "partition"),
    sequence_column="state_sequence",
    holder_name=lambda holder: f"The share states of {holder[0]}/{holder[1]}",
    deleted_column="start_offset",
    deleted_value=DELETED_STATE,
)
_STATE_COLUMNS = ["group_id", "topic_id", "start_offset", "batches", "state_sequence"]


def _check_states(entry: ShareCommit) -> None:
    if not entry.states:
        raise ValueError("a share-state commit needs at least one group's state")
    groups = [state.group_id for state in entry.states]
    if len(set(groups)) != len(groups):
        raise ValueError(f"a group appears twice for {entry.topic}/{entry.partition}")
    for state in entry.states:
        if state.start_offset < DELETED_STATE:
            raise ValueError(f"negative start offset in {state}")


def _rows_of(entry: ShareCommit, now_ms: int):
    """The rows of one topic partition's commit, given its state_sequence."""
    states = entry.states
    count = len(states)

    def rows(sequence: int) -> pa.Table:
        return pa.table(
            {
                "group_id": [s.group_id for s in states],
                "topic": [entry.topic] * count,
                "partition": [entry.partition] * count,
                "topic_id": [s.topic_id for s in states],
                "start_offset": [s.start_offset for s in states],
                "batches": [[_batch_row(b) for b in s.batches] for s in states],
                "written_at": [now_ms * 1000] * count,
                "state_sequence": [sequence] * count,
            },
            schema=SHARE_STATES_SCHEMA,
        )

    return rows


def _batch_row(batch: ShareBatch) -> dict:
    return {
        "first_offset": batch.first_offset,
        "last_offset": batch.last_offset,
        "state": int(batch.state),
        "delivery_count": batch.delivery_count,
    }


def _states(rows: pa.Table, *, keep_deleted: bool = False) -> list[ShareState]:
    return [
        ShareState(
            row["group_id"],
            row["topic_id"],
            row["start_offset"],
            tuple(ShareBatch(**batch) for batch in row["batches"] or ()),
        )
        for row in rows.to_pylist()
        if keep_deleted or row["start_offset"] != DELETED_STATE
    ]
