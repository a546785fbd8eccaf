"""One consumer group's membership state machine (Kafka's classic group protocol, with the
assignment computed by the coordinator as in KIP-848).

States and transitions (`GroupState`):

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
    CompletingRebalance --every member synced--> Stable --join, leave, expiry--> PreparingRebalance
    PreparingRebalance --nobody left--> Empty;  any --group deleted--> Dead

A rebalance waits until every known member has joined again (or its rebalance timeout, Kafka's
max.poll.interval.ms, passed: members that did not rejoin are removed), then bumps the
generation and assigns partitions with the group's assignor. Server-driven members (REST
consumer instances, whose loop runs in the gateway) count as joined at once, so a group made of
them rebalances without waiting. With cooperative-sticky, a partition that moves is first
revoked; the follow-up rebalance then hands it over.

Kafka's own clients use the classic protocol as Kafka defines it: the member with
`protocol_metadata` (per assignor, opaque) are "client-assigned": the coordinator picks the
protocol and a leader, hands the leader every member's metadata, and the leader's SyncGroup
carries each member's assignment (opaque bytes, read with consumer_protocol for the views). A
group is either client-assigned or not: mixing the two is INCONSISTENT_GROUP_PROTOCOL.

No I/O and no asyncio here: the coordinator (api/core/groups/coordinator.py) drives this class and
owns waiting, timers and offsets. Times are `time.monotonic()` seconds from the injected clock.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from api.core.groups.assignors import ASSIGNORS, MemberSubscription, assign, needs_follow_up
from api.core.groups.errors import (
    FencedInstanceId,
    IllegalGeneration,
    InconsistentGroupProtocol,
    RebalanceInProgress,
    UnknownMemberId,
)
from storage_layout.records import TopicPartition

FENCED_MEMBERS_KEPT = 256  # replaced static member ids remembered to answer FENCED_INSTANCE_ID


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class Subscription:
    """Topics by name, or a regular expression matched against every topic at each rebalance."""

    topics: frozenset[str] = frozenset()
    pattern: str | None = None

    def resolve(self, all_topics: frozenset[str]) -> frozenset[str]:
        if self.pattern is None:
            return self.topics
        compiled = re.compile(self.pattern)
        return frozenset(t for t in all_topics if compiled.fullmatch(t))


@dataclass(frozen=True, slots=True)
class JoinRequest:
    member_id: str | None  # None or "" for a new member
    client_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    subscription: Subscription
    assignors: tuple[str, ...] = ASSIGNORS
    server_driven: bool = False
    # Kafka's classic protocol: (assignor, metadata) pairs; the leader member assigns.
    protocol_metadata: tuple[tuple[str, bytes], ...] | None = None
    protocol_type: str | None = None

    @property
    def client_assigned(self) -> bool:
        return self.protocol_metadata is not None


@dataclass(slots=True)
class Member:
    """A member as the coordinator sees it (mutable, confined to the coordinator's loop)."""

    member_id: str
    client_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    subscription: Subscription
    assignors: tuple[str, ...]
    server_driven: bool
    last_seen_s: float
    assignment: frozenset[TopicPartition] = frozenset()
    joined: bool = True  # has joined the current (or last) rebalance
    synced: bool = True  # has fetched its assignment of the current generation
    protocol_metadata: dict[str, bytes] | None = None  # client-assigned members only
    assignment_bytes: bytes | None = None  # the leader's assignment for it (client-assigned)


@dataclass(frozen=True, slots=True)
class MemberView:
    """A member's public description (describe, v3 consumers)."""

    member_id: str
    client_id: str
    group_instance_id: str | None
    assignment: tuple[TopicPartition, ...]
    metadata: bytes | None = None  # for the group's protocol (client-assigned groups)
    assignment_bytes: bytes | None = None


@dataclass(slots=True)
class Group:
    group_id: str
    clock: Callable[[], float]
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    rebalance_deadline_s: float | None = None
    follow_up: bool = False  # a cooperative rebalance that revoked partitions: hand them over
    protocol_type: str | None = None  # Kafka's, e.g. "consumer" (client-assigned groups)
    decode_assignment: Callable[[bytes], tuple[TopicPartition, ...]] | None = None
    _instances: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    _fenced: dict[str, str] = field(default_factory=dict)  # replaced member id -> instance id

    # ---- membership ------------------------------------------------------------------------

    def join(self, request: JoinRequest) -> Member:
        """Add a member or take a rejoin; starts a rebalance unless a static member came back
        unchanged while the group is stable (then it keeps its assignment: no rebalance)."""
        self._check_protocol(request.assignors)
        self._check_kind(request)
        if request.member_id:
            member = self.member(request.member_id)
            changed = _changed(member, request)
            _update(member, request, self.clock())
            # As Kafka: a client leader rejoining a stable group asks for a rebalance (it saw
            # new metadata); another unchanged member just learns the current generation.
            leader_rejoins = request.client_assigned and member.member_id == self.leader_id
            if changed or leader_rejoins or self.state != GroupState.STABLE or not member.synced:
                self._prepare_rebalance()
            member.joined = True
            return member
        static = request.group_instance_id and self._instances.get(request.group_instance_id)
        if static and static in self.members:
            return self._replace_static(self.members[static], request)
        member = _new_member(request, self.clock())
        self.members[member.member_id] = member
        if request.group_instance_id:
            self._instances[request.group_instance_id] = member.member_id
        self._prepare_rebalance()
        member.joined = True
        return member

    def leave(self, member_id: str) -> None:
        self.member(member_id)
        self._remove(member_id)

    def member(self, member_id: str) -> Member:
        """The member, or UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID."""
        member = self.members.get(member_id)
        if member is not None:
            return member
        instance = self._fenced.get(member_id)
        if instance is not None:
            raise FencedInstanceId(
                f"Member {member_id} was replaced by a newer member with group.instance.id "
                f"'{instance}'; this one is fenced."
            )
        raise UnknownMemberId(
            f"Member '{member_id}' is not in group '{self.group_id}' (it left, its session "
            f"timed out, or the group moved to another coordinator): join again without an id."
        )

    def expire(self) -> list[str]:
        """Remove members whose session timed out; returns their ids."""
        now = self.clock()
        expired = [
            m.member_id
            for m in self.members.values()
            if now - m.last_seen_s > m.session_timeout_ms / 1000 and not self._awaiting_join(m)
        ]
        for member_id in expired:
            self._remove(member_id)
        return expired

    def _awaiting_join(self, member: Member) -> bool:
        """Kafka's hasSatisfiedHeartbeat: a member that joined and waits for the rebalance to
        complete is alive, however long that takes (its rebalance timeout bounds it); its
        session restarts when the rebalance completes."""
        return self.state == GroupState.PREPARING_REBALANCE and member.joined

    def touch(self, member_id: str) -> Member:
        member = self.member(member_id)
        member.last_seen_s = self.clock()
        return member

    # ---- heartbeats and generations ----------------------------------------------------------

    def heartbeat(self, member_id: str, generation: int) -> None:
        """Keep the session; REBALANCE_IN_PROGRESS tells the member to join again."""
        member = self.touch(member_id)
        self.check_generation(generation)
        if self.state == GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgress(
                f"Group '{self.group_id}' is rebalancing: join again (member "
                f"{member.member_id}, generation {generation})."
            )

    def check_generation(self, generation: int) -> None:
        if generation != self.generation:
            raise IllegalGeneration(
                f"Generation {generation} is not group '{self.group_id}''s current generation "
                f"{self.generation}: the member missed a rebalance and must join again."
            )

    def sync(self, member_id: str, generation: int) -> frozenset[TopicPartition]:
        """The member's assignment of this generation; the last sync makes the group Stable."""
        member = self._syncing(member_id, generation)
        member.synced = True
        if self.state == GroupState.COMPLETING_REBALANCE and self._all(lambda m: m.synced):
            self._stabilize()
        return member.assignment

    def sync_client_assigned(
        self, member_id: str, generation: int, assignments: Mapping[str, bytes] | None
    ) -> bytes | None:
        """Kafka's SyncGroup: the leader brings every member's assignment (the group turns
        Stable); each member gets its own, None while the leader's has not come yet."""
        member = self._syncing(member_id, generation)
        if member_id == self.leader_id and self.state == GroupState.COMPLETING_REBALANCE:
            if assignments is not None:
                self._take_assignments(assignments)
        if member.assignment_bytes is None:
            return None
        member.synced = True
        return member.assignment_bytes

    def _syncing(self, member_id: str, generation: int) -> Member:
        member = self.touch(member_id)
        self.check_generation(generation)
        if self.state == GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgress(f"Group '{self.group_id}' is rebalancing: join again.")
        return member

    def _take_assignments(self, assignments: Mapping[str, bytes]) -> None:
        for member in self.members.values():
            data = assignments.get(member.member_id, b"")
            member.assignment_bytes = data
            member.assignment = frozenset(self._decoded(data))
        self.state = GroupState.STABLE  # as Kafka: once the leader's assignment is in

    def _decoded(self, data: bytes) -> tuple[TopicPartition, ...]:
        if self.decode_assignment is None:
            return ()
        try:
            return self.decode_assignment(data)
        except ValueError:  # not the consumer protocol: shown without partitions
            return ()

    @property
    def client_assigned(self) -> bool:
        return any(m.protocol_metadata is not None for m in self.members.values())

    # ---- rebalancing -----------------------------------------------------------------------

    def ready_to_complete(self) -> bool:
        if self.state != GroupState.PREPARING_REBALANCE:
            return False
        deadline_passed = self.rebalance_deadline_s is not None and (
            self.clock() >= self.rebalance_deadline_s
        )
        return deadline_passed or self._all(lambda m: m.joined)

    def complete_rebalance(
        self, partitions_per_topic: Mapping[str, int], all_topics: frozenset[str]
    ) -> None:
        """Drop members that did not rejoin, bump the generation, assign partitions."""
        for member_id in [m.member_id for m in self.members.values() if not m.joined]:
            self._forget(member_id)
        now = self.clock()
        for member in self.members.values():
            member.last_seen_s = now  # the join answer counts as a heartbeat (Kafka's)
        self.generation += 1
        self.rebalance_deadline_s = None
        if not self.members:
            self.state, self.protocol, self.leader_id = GroupState.EMPTY, None, None
            return
        self.protocol = self._choose_protocol()
        if self.client_assigned:
            self._await_leader_assignment()
            return
        result = assign(
            self.protocol,
            [_subscription(m, all_topics) for m in self._sorted_members()],
            partitions_per_topic,
        )
        for member in self.members.values():
            member.assignment = result.partitions.get(member.member_id, frozenset())
            member.synced = member.server_driven
        self.leader_id = self._sorted_members()[0].member_id
        self.follow_up = needs_follow_up(result)
        if self._all(lambda m: m.synced):
            self._stabilize()
        else:
            self.state = GroupState.COMPLETING_REBALANCE

    def _await_leader_assignment(self) -> None:
        """Client-assigned: keep the leader if it stayed, else the first member; every member
        waits in SyncGroup for what the leader assigns."""
        if self.leader_id not in self.members:
            self.leader_id = self._sorted_members()[0].member_id
        for member in self.members.values():
            member.assignment_bytes = None
            member.assignment = frozenset()
            member.synced = False
        self.state = GroupState.COMPLETING_REBALANCE

    def request_rebalance(self) -> None:
        """Rebalance because something outside the membership changed (a subscribed topic
        gained partitions, a pattern matches a new topic)."""
        if self.members:
            self._prepare_rebalance()

    def static_member_id(self, instance_id: str) -> str | None:
        """The member id of the static member with that group.instance.id, if any."""
        member_id = self._instances.get(instance_id)
        return member_id if member_id in self.members else None

    def adopt(self, members: list[Member], generation: int, protocol: str | None) -> None:
        """KIP-848's downgrade: a consumer group's remaining members, all classic, become
        this group's at the consumer group's epoch, each keeping its assignment; a rebalance
        starts, so each joins again (REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION at its next
        heartbeat, as Kafka answers) and its leader assigns."""
        self.members = {m.member_id: m for m in members}
        self._instances = {m.group_instance_id: m.member_id for m in members if m.group_instance_id}
        self.generation, self.protocol, self.protocol_type = generation, protocol, "consumer"
        self.leader_id = self._sorted_members()[0].member_id
        self.state = GroupState.STABLE
        self._prepare_rebalance()

    def hand_over(self) -> None:
        """Its members moved into a consumer group (KIP-848's upgrade): it is left empty, its
        generation kept."""
        self.members.clear()
        self._instances.clear()
        self.state, self.protocol, self.leader_id = GroupState.EMPTY, None, None
        self.rebalance_deadline_s = None

    def mark_dead(self) -> None:
        self.state = GroupState.DEAD
        self.members.clear()

    # ---- views -----------------------------------------------------------------------------

    def owners(self) -> dict[TopicPartition, str]:
        return {tp: m.member_id for m in self.members.values() for tp in m.assignment}

    def views(self) -> list[MemberView]:
        return [
            MemberView(
                m.member_id,
                m.client_id,
                m.group_instance_id,
                tuple(sorted(m.assignment)),
                (m.protocol_metadata or {}).get(self.protocol or ""),
                m.assignment_bytes,
            )
            for m in self._sorted_members()
        ]

    # ---- internals -------------------------------------------------------------------------

    def _prepare_rebalance(self) -> None:
        if self.state == GroupState.PREPARING_REBALANCE:
            return
        self.state = GroupState.PREPARING_REBALANCE
        for member in self.members.values():
            member.joined = member.server_driven
        timeout_s = max((m.rebalance_timeout_ms for m in self.members.values()), default=0) / 1000
        self.rebalance_deadline_s = self.clock() + timeout_s

    def _stabilize(self) -> None:
        self.state = GroupState.STABLE
        if self.follow_up:
            self.follow_up = False
            self._prepare_rebalance()

    def _replace_static(self, old: Member, request: JoinRequest) -> Member:
        """A static member restarted: the new member id takes over the old one's place (and
        assignment); the old id is fenced. Only a changed subscription rebalances."""
        changed = _changed(old, request)
        member = _new_member(request, self.clock())
        member.assignment, member.synced = old.assignment, old.synced
        member.assignment_bytes = old.assignment_bytes
        del self.members[old.member_id]
        self._remember_fenced(old.member_id, request.group_instance_id)
        self.members[member.member_id] = member
        self._instances[request.group_instance_id] = member.member_id
        if self.leader_id == old.member_id:
            self.leader_id = member.member_id
        if changed or self.state != GroupState.STABLE:
            self._prepare_rebalance()
        member.joined = True
        return member

    def _remove(self, member_id: str) -> None:
        self._forget(member_id)
        if self.members:
            self._prepare_rebalance()
        else:
            self.state, self.protocol, self.leader_id = GroupState.EMPTY, None, None
            self.rebalance_deadline_s = None

    def _forget(self, member_id: str) -> None:
        member = self.members.pop(member_id)
        if member.group_instance_id and self._instances.get(member.group_instance_id) == member_id:
            del self._instances[member.group_instance_id]

    def _remember_fenced(self, member_id: str, instance_id: str) -> None:
        self._fenced[member_id] = instance_id
        while len(self._fenced) > FENCED_MEMBERS_KEPT:
            self._fenced.pop(next(iter(self._fenced)))

    def _check_protocol(self, assignors: tuple[str, ...]) -> None:
        if not self.members:
            return
        common = set(assignors).intersection(*(m.assignors for m in self.members.values()))
        if not common:
            raise InconsistentGroupProtocol(
                f"Group '{self.group_id}' members use assignors "
                f"{sorted(set().union(*(m.assignors for m in self.members.values())))}; this "
                f"member supports only {list(assignors)}."
            )

    def _check_kind(self, request: JoinRequest) -> None:
        others = [m for m in self.members.values() if m.member_id != request.member_id]
        if not others:
            self.protocol_type = request.protocol_type
            return
        if any((m.protocol_metadata is not None) != request.client_assigned for m in others):
            raise InconsistentGroupProtocol(
                f"Group '{self.group_id}' has members whose assignment is computed by "
                f"{'the client leader' if not request.client_assigned else 'lakelog'}: Kafka "
                f"clients and HTTP consumers cannot share a group."
            )
        if request.protocol_type != self.protocol_type:
            raise InconsistentGroupProtocol(
                f"Group '{self.group_id}' has protocol type {self.protocol_type!r}, not "
                f"{request.protocol_type!r}."
            )

    def _choose_protocol(self) -> str:
        """The first assignor of the leader's preference that every member supports."""
        members = self._sorted_members()
        common = set(members[0].assignors).intersection(*(m.assignors for m in members))
        return next(a for a in members[0].assignors if a in common)

    def _sorted_members(self) -> list[Member]:
        return sorted(self.members.values(), key=lambda m: (m.group_instance_id or "", m.member_id))

    def _all(self, predicate: Callable[[Member], bool]) -> bool:
        return all(predicate(m) for m in self.members.values())


def _new_member(request: JoinRequest, now_s: float) -> Member:
    prefix = request.group_instance_id or request.client_id or "member"
    return Member(
        member_id=f"{prefix}-{uuid.uuid4().hex[:12]}",
        client_id=request.client_id,
        group_instance_id=request.group_instance_id,
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscription=request.subscription,
        assignors=request.assignors,
        server_driven=request.server_driven,
        last_seen_s=now_s,
        protocol_metadata=_metadata(request),
    )


def _metadata(request: JoinRequest) -> dict[str, bytes] | None:
    if request.protocol_metadata is None:
        return None
    return dict(request.protocol_metadata)


def _changed(member: Member, request: JoinRequest) -> bool:
    return (
        member.subscription != request.subscription
        or member.assignors != request.assignors
        or member.protocol_metadata != _metadata(request)
    )


def _update(member: Member, request: JoinRequest, now_s: float) -> None:
    member.subscription = request.subscription
    member.assignors = request.assignors
    member.session_timeout_ms = request.session_timeout_ms
    member.rebalance_timeout_ms = request.rebalance_timeout_ms
    member.protocol_metadata = _metadata(request)
    member.last_seen_s = now_s


def _subscription(member: Member, all_topics: frozenset[str]) -> MemberSubscription:
    return MemberSubscription(
        member_id=member.member_id,
        topics=member.subscription.resolve(all_topics),
        owned=member.assignment,
        group_instance_id=member.group_instance_id,
    )
