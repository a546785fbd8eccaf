"""Share group administration (Kafka's DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets, DeleteGroups of a share group; `kafka-share-groups`, lakelog's CLI and
HTTP views). Protocol-neutral.

Stored states are read from `_meta/share_states` by any node. A reset goes to each partition's
leader, which owns the share partition (api/core/shares/serving.py), as appends do: this node's
own partitions directly, the others over the node-to-node route. Kafka allows resets only
while the group has no members (GROUP_NOT_EMPTY): a member could be holding records the reset
settles.
"""

from __future__ import annotations

from dataclasses import dataclass

from api.core import leader_reads
from api.core.broker import Broker
from api.core.errors import InvalidRequest
from api.core.groups.errors import GroupNotFound, NonEmptyGroup
from api.core.shares import serving
from api.core.shares.membership import ShareGroupView
from api.core.shares.share_partition import RecordState
from storage_layout.cluster import routes
from storage_layout.meta.share_states import ShareBatch, ShareState

SETTLED = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(frozen=True, slots=True)
class SharePartitionView:
    """A share partition as an administrator sees it: where it starts and how many records of
    the log from there are still to be delivered or settled (Kafka's share-group lag)."""

    topic: str
    partition: int
    topic_id: str
    start_offset: int
    batches: tuple[ShareBatch, ...]
    lag: int


async def stored_partitions(broker: Broker, group_id: str) -> dict[tuple[str, int], ShareState]:
    """The group's stored share states of the topics as they are now (not of deleted ones)."""
    stored = await broker.shares.stored_partitions(group_id)
    current = {topic.name: topic.topic_id for topic in await broker.topics.list_all()}
    return {
        where: state for where, state in stored.items() if current.get(where[0]) == state.topic_id
    }


async def describe_offsets(broker: Broker, group_id: str) -> list[SharePartitionView]:
    """Each share partition of the group with its start offset and lag, in (topic, partition)
    order."""
    views = []
    for (topic, partition), state in sorted((await stored_partitions(broker, group_id)).items()):
        bounds = await leader_reads.bounds(broker, topic, partition)
        settled = sum(
            b.last_offset - b.first_offset + 1 for b in state.batches if b.state in SETTLED
        )
        lag = max(0, bounds.high_watermark - state.start_offset - settled)
        views.append(
            SharePartitionView(
                topic, partition, state.topic_id, state.start_offset, state.batches, lag
            )
        )
    return views


async def share_group_ids(broker: Broker) -> list[str]:
    """Every share group: recorded as existing, with a stored state, members at this node, or
    share configs."""
    named = set(await broker.shares.stored_groups())
    named |= set(broker.share_members.local_groups())
    named |= set(await broker.group_configs.configured_groups(share_only=True))
    named |= set(await broker.group_configs.share_groups())
    return sorted(named)


async def group_view(broker: Broker, group_id: str) -> ShareGroupView:
    """The share group as its coordinator (this node) holds it; an existing group without
    members is Empty.

    Raises:
        NotCoordinator: another node coordinates it.
        GroupNotFound: there is no share group of that id.
    """
    held = _held_view(broker, group_id)
    if held is not None:
        return held
    if group_id not in await share_group_ids(broker):
        raise GroupNotFound(f"No share group '{group_id}' has members here.")
    return ShareGroupView(group_id)


def known_group_view(broker: Broker, group_id: str) -> ShareGroupView:
    """group_view of a group known to exist (from share_group_ids): no second listing.

    Raises:
        NotCoordinator: another node coordinates it.
    """
    held = _held_view(broker, group_id)
    return ShareGroupView(group_id) if held is None else held


def _held_view(broker: Broker, group_id: str) -> ShareGroupView | None:
    """The group as this node's coordinator holds it; None when it holds no members of it.

    Raises:
        NotCoordinator: another node coordinates it.
    """
    try:
        return broker.share_members.describe(group_id)
    except GroupNotFound:
        return None


def check_empty(broker: Broker, group_id: str) -> None:
    """Raises NonEmptyGroup: the share group has members (Kafka's GROUP_NOT_EMPTY)."""
    try:
        members = broker.share_members.describe(group_id).members
    except GroupNotFound:
        return
    if members:
        raise NonEmptyGroup(
            f"Share group '{group_id}' has {len(members)} members: stop them before its "
            "offsets are reset or deleted."
        )


async def _target_offset(broker: Broker, topic: str, partition: int, to: str | int) -> int:
    """Where a reset `to` earliest, latest or an offset puts a share partition: an offset is
    clamped to the partition's bounds, as Kafka's tools clamp consumer group resets.

    Raises:
        InvalidRequest: a negative offset, or neither earliest nor latest.
    """
    if isinstance(to, str) and to not in ("earliest", "latest"):
        raise InvalidRequest(f"A reset goes to earliest, latest or an offset, not {to!r}.")
    if isinstance(to, int) and to < 0:
        raise InvalidRequest(f"Offset {to} is negative: share partitions start at 0 or later.")
    bounds = await leader_reads.bounds(broker, topic, partition)
    if to == "earliest":
        return bounds.log_start_offset
    if to == "latest":
        return bounds.high_watermark
    return min(max(int(to), bounds.log_start_offset), bounds.high_watermark)


async def reset(
    broker: Broker, group_id: str, topic: str, partition: int, to: str | int | None
) -> int | None:
    """Start the group's share partition over where `to` says (_target_offset; None: delete
    its state), at the partition's leader; the start offset set.

    Raises:
        TopicNotFound, PartitionNotFound: no such partition.
        InvalidRequest: a negative offset, or neither earliest nor latest.
        NotLeader: its leader could not be reached (retry).
    """
    key = await serving.share_key(broker, group_id, topic, partition)
    start = None if to is None else await _target_offset(broker, topic, partition, to)
    if start is not None:  # Kafka creates the share group if it did not exist
        await broker.group_configs.mark_share_group(group_id)
    url = await broker.partitions.remote_leader_url(topic, partition)
    if url is None:
        await serving.reset_here(broker, key, start)
        return start
    body = {"group_id": group_id, "topic_id": key.topic_id, "start_offset": start}
    path = routes.share_path(routes.SHARE_RESET_PATH, topic, partition)
    await broker.peers.to_leader(url, None, topic, partition, path, body)
    return start


async def delete_group(broker: Broker, group_id: str) -> int:
    """Delete every share partition state of an empty share group and its configs; how many
    share partitions it had.

    Raises:
        NonEmptyGroup: it has members.
        GroupNotFound: it has no state and no configs.
    """
    check_empty(broker, group_id)
    if group_id not in await share_group_ids(broker):
        raise GroupNotFound(f"No share group '{group_id}'.")
    stored = await stored_partitions(broker, group_id)
    for topic, partition in stored:
        await reset(broker, group_id, topic, partition, None)
    if group_id in await broker.group_configs.configured_groups():
        await broker.group_configs.alter(group_id, lambda current: dict.fromkeys(current))
    await broker.group_configs.mark_share_group(group_id, exists=False)
    return len(stored)
