"""Consumer group offsets: `_meta/consumer_offsets`, Kafka's `__consumer_offsets` as a Delta table.

One row per partition per offset commit; a group's committed offset for a partition is its row
with the highest `commit_sequence` (FORMAT.md §11). Each group has a coordinator, named by the
table's `txn` action with app id `group:<group_id>` (version `epoch * NODE_IDS + node_id`, as
partition leadership): taking a group is a txn-only compare-and-set, and every offset commit
carries the coordinator's txn, so a deposed coordinator, however long it was paused, can never
commit again.

The fence, the sequences and the latest-rows rewrite are FencedRows' (fenced_rows.py), with
groups as its holders. Concurrency contract: FencedRows', so one process makes one offset commit
at a time: about 10 ms each on a local disk, i.e. roughly 100 commits/s per process whatever
the number of groups; coordinators batch a group's queued commits into one call to stay under
that.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from storage_layout import paths
from storage_layout.errors import LeadershipConflict
from storage_layout.log.leadership import Leadership
from storage_layout.meta.fenced_rows import FencedRows, HolderRows, Layout
from storage_layout.records import TopicPartition
from storage_layout.schema import TIMESTAMP_TYPE

CONSUMER_OFFSETS_TABLE = "consumer_offsets"
# Kafka's generation for commits made outside a group generation (admin resets, simple
# consumers).
GENERATION_NONE = -1
# Short log retention: delta-rs lists `_delta_log` on every commit, so a log kept for days
# would make each offset commit slower as the table ages (2.5 ms at 100 versions, 16 ms at
# 3 000, measured). Every 100 commits a checkpoint lets older commit files go after 10 s.
TABLE_CONFIGURATION = {
    "delta.checkpointInterval": "100",
    "delta.logRetentionDuration": "interval 10 seconds",
}

CONSUMER_OFFSETS_SCHEMA = pa.schema(
    [
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),  # the next offset to read (Kafka's)
        pa.field("metadata", pa.string()),
        pa.field("generation", pa.int32(), nullable=False),
        pa.field("member_id", pa.string()),
        pa.field("committed_at", TIMESTAMP_TYPE, nullable=False),
        pa.field("commit_sequence", pa.int64(), nullable=False),
        # Added later (FORMAT.md §1): null in files written before, and for "not given".
        pa.field("leader_epoch", pa.int32()),
    ]
)
_OFFSET_COLUMNS = (
    "topic",
    "partition",
    "offset",
    "metadata",
    "generation",
    "member_id",
    "leader_epoch",
)
# Kafka's "no leader epoch" in requests and answers; stored as null.
NO_LEADER_EPOCH = -1
# A row with this offset deletes the partition's committed offset (Kafka's OffsetDelete and
# DeleteGroups): the latest row wins, as for any commit (FORMAT.md §11).
DELETED_OFFSET = -1


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    """One partition's offset in a commit request. `offset` is the next offset to read.

    `generation` and `member_id` name who committed it when one Delta commit batches the
    commits of several members (None: the values given to `ConsumerOffsets.commit`).
    `leader_epoch` is the epoch of the record before `offset` as the consumer saw it (Kafka's
    committed leader epoch: a restarted consumer validates its position with it)."""

    topic: str
    partition: int
    offset: int
    metadata: str | None = None
    generation: int | None = None
    member_id: str | None = None
    leader_epoch: int = NO_LEADER_EPOCH


def offset_commit_from(body: Mapping[str, Any]) -> OffsetCommit:
    """An OffsetCommit from its JSON (a forwarded request), fields it does not know left out
    (a newer node's)."""
    known = {f.name for f in dataclasses.fields(OffsetCommit)}
    return OffsetCommit(**{name: value for name, value in body.items() if name in known})


@dataclass(frozen=True, slots=True)
class GroupCommit:
    """One group's part of a batched Delta commit, asserting the group's coordinator."""

    group_id: str
    held: Leadership
    commits: Sequence[OffsetCommit]
    generation: int = -1
    member_id: str | None = None


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """A group's stored offset for one partition, from its latest commit."""

    offset: int
    metadata: str | None
    generation: int
    member_id: str | None
    committed_at_ms: int
    leader_epoch: int = NO_LEADER_EPOCH


_LAYOUT = Layout(
    schema=CONSUMER_OFFSETS_SCHEMA,
    configuration=TABLE_CONFIGURATION,
    app_prefix="group:",  # part of the table format: FORMAT.md §11
    holder_columns=("group_id",),
    key_columns=("group_id", "topic", "partition"),
    sequence_column="commit_sequence",
    holder_name=lambda holder: f"Group '{holder[0]}'",
    deleted_column="offset",
    deleted_value=DELETED_OFFSET,
)


class ConsumerOffsets(FencedRows):
    """Reads and writes `<root>/_meta/consumer_offsets`; creates it if absent. Groups are the
    holders of a FencedRows table: `group:<group_id>` txns, `commit_sequence` per group."""

    def __init__(self, root: str) -> None:
        uri = paths.meta_table_uri(paths.normalize_root(root), CONSUMER_OFFSETS_TABLE)
        super().__init__(uri, _LAYOUT)

    # ---- coordinators ------------------------------------------------------------------------

    def group_coordinator(self, group_id: str) -> Leadership | None:
        """The group's coordinator as of the latest table version (None: never taken)."""
        return self.holder_of((group_id,))

    def take_group(self, group_id: str, node_id: int, *, expected: Leadership | None) -> Leadership:
        """Name `node_id` coordinator of the group with the next epoch, if it is still
        `expected` (FencedRows.take): of two nodes taking a group at once exactly one wins.

        Raises:
            LeadershipConflict: the coordinator is no longer `expected`, or another change won.
            StorageUnavailable: the table could not be read or written.
        """
        return self.take((group_id,), node_id, expected=expected)

    # ---- commits -----------------------------------------------------------------------------

    def commit(
        self,
        group_id: str,
        held: Leadership,
        commits: Sequence[OffsetCommit],
        *,
        generation: int,
        member_id: str | None,
        now_ms: int | None = None,
    ) -> int:
        """Store `commits` (one row each) in ONE Delta commit that asserts `held`.

        The commit carries `Transaction("group:<group_id>", held.version)`: if another node
        took the group since, nothing is written. Every row gets the group's next
        commit_sequence.

        Returns:
            The commit_sequence of these rows.

        Raises:
            LeadershipConflict: `held` is no longer the group's coordinator; nothing written.
            StorageUnavailable: the table could not be read or written (the commit may or may
                not have landed; the sequence is read again on the next commit).
            ValueError: no commits, a negative offset or partition, or a partition twice.
        """
        entry = GroupCommit(group_id, held, commits, generation, member_id)
        result = self.commit_many([entry], now_ms=now_ms)
        if isinstance(result[group_id], Exception):
            raise result[group_id]
        return result[group_id]

    def commit_many(
        self, entries: Sequence[GroupCommit], *, now_ms: int | None = None
    ) -> dict[str, int | LeadershipConflict]:
        """Store several groups' commits in ONE Delta commit carrying each group's txn
        (FencedRows.commit_rows): a group whose coordinator changed is left out with its
        LeadershipConflict, the others are committed.

        Returns:
            Per group id: the commit_sequence of its rows, or its LeadershipConflict.

        Raises:
            StorageUnavailable: the table could not be read or written, or kept conflicting.
            ValueError: a group twice, no commits, a negative offset or partition, or a
                partition twice within a group.
        """
        if len({e.group_id for e in entries}) != len(entries):
            raise ValueError("each group may appear once in a batched commit")
        for entry in entries:
            _check_commits(entry.commits)
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        rows = [HolderRows((e.group_id,), e.held, _rows_of(e, now_ms)) for e in entries]
        return {holder[0]: outcome for holder, outcome in self.commit_rows(rows).items()}

    # ---- reads -------------------------------------------------------------------------------

    def load(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        """The group's committed offsets as of the latest table version: per partition, the
        row with the highest commit_sequence. Reads only files whose statistics may hold the
        group, outside the commit lock.

        Raises:
            StorageUnavailable: the table could not be read.
        """
        files = self.latest_files()
        columns = [*_OFFSET_COLUMNS, "committed_at", "commit_sequence"]
        rows = self.read_holder(files, (group_id,), columns)
        latest = self.latest_rows(rows, ("topic", "partition"))
        data = latest.to_pydict()
        committed_micros = latest.column("committed_at").cast(pa.int64()).to_pylist()
        offsets = {
            TopicPartition(topic, partition): CommittedOffset(
                offset,
                metadata,
                generation,
                member_id,
                micros // 1000,
                NO_LEADER_EPOCH if epoch is None else epoch,
            )
            for topic, partition, offset, metadata, generation, member_id, epoch, micros in zip(
                *(data[name] for name in _OFFSET_COLUMNS), committed_micros, strict=True
            )
            if offset != DELETED_OFFSET
        }
        return dict(sorted(offsets.items()))

    def groups(self) -> list[str]:
        """Sorted ids of the groups with stored offsets (latest table version): a group whose
        every offset was deleted is gone."""
        return self.live_values("group_id")


# ---- helpers (pure) --------------------------------------------------------------------------


def _check_commits(commits: Sequence[OffsetCommit]) -> None:
    if not commits:
        raise ValueError("an offset commit needs at least one partition")
    seen: set[tuple[str, int]] = set()
    for commit in commits:
        if commit.offset < DELETED_OFFSET or commit.partition < 0:
            raise ValueError(f"negative offset or partition in {commit}")
        if (commit.topic, commit.partition) in seen:
            raise ValueError(f"{commit.topic}/{commit.partition} appears twice in one commit")
        seen.add((commit.topic, commit.partition))


def _rows_of(entry: GroupCommit, now_ms: int):
    """The rows of one group's commit, given its commit_sequence."""
    commits = entry.commits
    count = len(commits)

    def rows(sequence: int) -> pa.Table:
        return pa.table(
            {
                "group_id": [entry.group_id] * count,
                "topic": [c.topic for c in commits],
                "partition": [c.partition for c in commits],
                "offset": [c.offset for c in commits],
                "metadata": [c.metadata for c in commits],
                "generation": [
                    entry.generation if c.generation is None else c.generation for c in commits
                ],
                "member_id": [
                    entry.member_id if c.member_id is None else c.member_id for c in commits
                ],
                "committed_at": [now_ms * 1000] * count,
                "commit_sequence": [sequence] * count,
                "leader_epoch": [None if c.leader_epoch < 0 else c.leader_epoch for c in commits],
            },
            schema=CONSUMER_OFFSETS_SCHEMA,
        )

    return rows
