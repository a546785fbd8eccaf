"""Consumer-group lag on the group's coordinator: committed offsets against each partition's
last stable offset (asked of its leader), for the v3 lag routes and the lag history."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from api.core import leader_reads
from api.core.broker import Broker
from api.core.errors import NotLeader
from api.core.groups.group import MemberView
from storage_layout.errors import PartitionNotFound, TopicNotFound
from storage_layout.records import Isolation, TopicPartition

BOUNDS_CONCURRENCY_MAX = 16  # partition bounds looked up at once for one lag request


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """A committed offset against the partition's last stable offset, and who owns it."""

    partition: TopicPartition
    current_offset: int
    log_end_offset: int
    owner: MemberView | None

    @property
    def lag(self) -> int:
        return lag_of(self.log_end_offset, self.current_offset)


def lag_of(log_end_offset: int, committed_offset: int) -> int:
    """Records between a committed offset and the log's end (never below 0: a commit may run
    ahead of an end read a moment earlier)."""
    return max(0, log_end_offset - committed_offset)


async def group_lags(
    broker: Broker, group_id: str, *, only: TopicPartition | None = None
) -> list[PartitionLag]:
    """Lag of every partition the group has a committed offset for (or of `only`), sorted by
    topic and partition. Runs on the group's coordinator.

    Partitions of topics deleted (or shrunk) since the commit are left out, as Confluent leaves
    out partitions without a latest offset.

    Raises:
        GroupNotFound: the group has neither members nor committed offsets.
    """
    description = await broker.groups.describe(group_id)
    committed = await broker.groups.committed(group_id)
    if only is not None:
        committed = {tp: o for tp, o in committed.items() if tp == only}
    owners = {tp: member for member in description.members for tp in member.assignment}
    partitions = sorted(committed)
    ends = await log_end_offsets(broker, partitions)
    return [
        PartitionLag(tp, committed[tp].offset, end, owners.get(tp))
        for tp, end in zip(partitions, ends, strict=True)
        if end is not None
    ]


# What `log_end_offsets(..., skip_unreachable=True)` gives for a partition whose leader did not
# answer (None means the partition is gone).
UNREACHABLE = -1


async def log_end_offsets(
    broker: Broker, partitions: list[TopicPartition], *, skip_unreachable: bool = False
) -> list[int | None]:
    """Last stable offsets from each partition's leader, at most BOUNDS_CONCURRENCY_MAX at
    once; None for a partition that no longer exists; with `skip_unreachable`, UNREACHABLE
    for one whose leader did not answer (a background sample must not fail for one partition).

    Raises:
        NotLeader: a leader did not answer (unless `skip_unreachable`).
    """
    limit = asyncio.Semaphore(BOUNDS_CONCURRENCY_MAX)
    unreachable = (NotLeader,) if skip_unreachable else ()

    async def one(tp: TopicPartition) -> int | None:
        async with limit:
            try:
                bounds = await leader_reads.bounds(broker, tp.topic, tp.partition)
                return bounds.end_offset(Isolation.COMMITTED)
            except (TopicNotFound, PartitionNotFound):
                return None
            except unreachable:
                return UNREACHABLE

    return list(await asyncio.gather(*(one(tp) for tp in partitions)))
