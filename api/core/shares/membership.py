"""Share group membership (KIP-932's ShareGroupHeartbeat), kept by the group's coordinator.

Members join, heartbeat and leave; the coordinator assigns partitions as Kafka's simple
share assignor does: a topic with at least as many partitions as subscribed members has each
partition assigned to one member (round robin over the members in id order), and a topic with
fewer partitions than members has each member assigned one partition, so each partition is
shared by several (records are locked one by one: members of a share group never idle while a
partition has records). Assignments follow membership at once (no revocation phase: a
partition read by two members for a moment hands each record to one of them). A member's epoch
moves on whenever its assignment changes; a heartbeat carrying another epoch is fenced
(FENCED_MEMBER_EPOCH), as in Kafka. Membership is in memory: a new coordinator starts with
none, and members join again (UNKNOWN_MEMBER_ID), as after any coordinator change. Records a
member held are not affected: they are locked at the partitions' leaders and come back when
their locks expire, or at once when the member closes its share sessions.

Concurrency contract: coroutines on the node's event loop, no I/O but the configs' reads.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from api.core.group_configs import GroupConfigs
from api.core.groups.errors import (
    FencedMemberEpoch,
    GroupNotFound,
    InvalidGroupRequest,
    NotCoordinator,
    UnknownMemberId,
)
from storage_layout.records import TopicPartition

JOIN_EPOCH = 0
LEAVE_EPOCH = -1


@dataclass(frozen=True, slots=True)
class ShareHeartbeat:
    """One ShareGroupHeartbeat: `topic_names` None when unchanged since the last one."""

    member_id: str
    member_epoch: int
    client_id: str = ""
    client_host: str = ""
    rack_id: str | None = None
    topic_names: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ShareMember:
    member_id: str
    epoch: int
    client_id: str
    client_host: str
    rack_id: str | None
    topic_names: tuple[str, ...]
    assigned: frozenset[TopicPartition]
    last_seen_ms: int


@dataclass(frozen=True, slots=True)
class ShareHeartbeatAnswer:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: frozenset[TopicPartition] | None  # None: unchanged since the last answer


@dataclass(slots=True)
class ShareGroupView:
    """A share group as the coordinator holds it: its epoch and members."""

    group_id: str
    epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    @property
    def subscribed(self) -> set[str]:
        return {t for m in self.members.values() for t in m.topic_names}


class ShareMembership:
    """The share groups this node coordinates."""

    def __init__(
        self,
        *,
        node_id: int,
        coordinator_of: Callable[[str], int],
        other_type: Callable[[str], bool],
        partition_counts: Callable[[], Awaitable[dict[str, int]]],
        configs: GroupConfigs,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self._node_id = node_id
        self._coordinator_of = coordinator_of
        self._other_type = other_type  # a classic or consumer group has this id
        self._partition_counts = partition_counts
        self._configs = configs
        self._clock_ms = clock_ms or (lambda: int(time.monotonic() * 1000))
        self._groups: dict[str, ShareGroupView] = {}

    async def heartbeat(self, group_id: str, beat: ShareHeartbeat) -> ShareHeartbeatAnswer:
        """Join (epoch 0), heartbeat, or leave (epoch -1).

        Raises:
            NotCoordinator: another node coordinates the group.
            GroupNotFound: a classic or consumer group has this id (Kafka's GROUP_ID_NOT_FOUND).
            UnknownMemberId, FencedMemberEpoch: the member must join again.
            InvalidGroupRequest: no member id, or a join without topics.
        """
        self._check(group_id, beat)
        settings = await self._configs.share_settings(group_id)
        group = self._groups.setdefault(group_id, ShareGroupView(group_id))
        if beat.member_epoch == LEAVE_EPOCH:
            self._leave(group, beat.member_id)
            return ShareHeartbeatAnswer(beat.member_id, LEAVE_EPOCH, 0, None)
        member = await self._updated(group, beat)
        if beat.member_epoch == JOIN_EPOCH:
            await self._configs.mark_share_group(group_id)
        known = group.members.get(beat.member_id)
        changed = known is None or known.epoch != member.epoch or beat.member_epoch == JOIN_EPOCH
        group.members[member.member_id] = member
        return ShareHeartbeatAnswer(
            member.member_id,
            member.epoch,
            settings.heartbeat_interval_ms,
            member.assigned if changed else None,
        )

    def _check(self, group_id: str, beat: ShareHeartbeat) -> None:
        if not group_id:
            raise InvalidGroupRequest("The group id must not be empty.")
        if self._coordinator_of(group_id) != self._node_id:
            raise NotCoordinator(f"This node does not coordinate group '{group_id}'; retry.")
        if not beat.member_id:
            raise InvalidGroupRequest("A share group member names itself: member_id is empty.")
        if self._other_type(group_id):  # Kafka's answer, word for word
            raise GroupNotFound(f"Group {group_id} is not a share group.")

    async def _updated(self, group: ShareGroupView, beat: ShareHeartbeat) -> ShareMember:
        known = group.members.get(beat.member_id)
        now_ms = self._clock_ms()
        if beat.member_epoch == JOIN_EPOCH:
            if not beat.topic_names:
                raise InvalidGroupRequest("A joining member names the topics it subscribes to.")
            topics = tuple(beat.topic_names)
        elif known is None:
            raise UnknownMemberId(
                f"Member {beat.member_id} is not in share group '{group.group_id}': join again."
            )
        elif beat.member_epoch != known.epoch:
            raise FencedMemberEpoch(
                f"Member {beat.member_id} sent epoch {beat.member_epoch}; its epoch is "
                f"{known.epoch}: join again."
            )
        else:
            topics = known.topic_names if beat.topic_names is None else tuple(beat.topic_names)
        subscriptions = {m.member_id: m.topic_names for m in group.members.values()}
        subscriptions[beat.member_id] = topics
        assigned = _assignment(beat.member_id, subscriptions, await self._partition_counts())
        if known is not None and assigned == known.assigned and topics == known.topic_names:
            return replace(known, last_seen_ms=now_ms)
        group.epoch += 1
        return ShareMember(
            beat.member_id,
            group.epoch,
            beat.client_id,
            beat.client_host,
            beat.rack_id,
            topics,
            assigned,
            now_ms,
        )

    def _leave(self, group: ShareGroupView, member_id: str) -> None:
        if group.members.pop(member_id, None) is not None:
            group.epoch += 1

    # ---- views and housekeeping --------------------------------------------------------------

    def describe(self, group_id: str) -> ShareGroupView:
        """Raises GroupNotFound: this node holds no share group of that id."""
        if self._coordinator_of(group_id) != self._node_id:
            raise NotCoordinator(f"This node does not coordinate group '{group_id}'; retry.")
        group = self._groups.get(group_id)
        if group is None:
            raise GroupNotFound(f"No share group '{group_id}' has members here.")
        return group

    def local_groups(self) -> list[str]:
        """The share groups with members here."""
        return sorted(g.group_id for g in self._groups.values() if g.members)

    async def expire(self) -> list[tuple[str, str]]:
        """Remove members whose session timed out (share.session.timeout.ms); (group, member)
        of each removed."""
        removed = []
        now_ms = self._clock_ms()
        for group in list(self._groups.values()):
            timeout_ms = (await self._configs.share_settings(group.group_id)).session_timeout_ms
            for member in list(group.members.values()):
                if now_ms - member.last_seen_ms > timeout_ms:
                    self._leave(group, member.member_id)
                    removed.append((group.group_id, member.member_id))
        return removed


def _assignment(
    member_id: str, subscriptions: Mapping[str, Iterable[str]], counts: Mapping[str, int]
) -> frozenset[TopicPartition]:
    """`member_id`'s partitions under the simple assignor (module docstring)."""
    assigned = set()
    for topic in subscriptions[member_id]:
        partitions = counts.get(topic, 0)
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        index = members.index(member_id)
        if partitions >= len(members):
            assigned |= {TopicPartition(topic, p) for p in range(index, partitions, len(members))}
        elif partitions:
            assigned.add(TopicPartition(topic, index % partitions))
    return frozenset(assigned)
