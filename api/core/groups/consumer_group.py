"""One KIP-848 consumer group: Kafka 4's consumer group protocol, where the coordinator assigns
and each member reconciles towards its target by heartbeats alone (no JoinGroup, no SyncGroup,
no group-wide barrier).

Epochs: the group epoch counts changes of what the assignment depends on (members, their
subscriptions, the subscribed topics' partitions); the assignment epoch is the group epoch the
target assignment was computed at; each member's epoch is the assignment epoch it has reached.
A member joins with epoch 0, leaves with -1, and a static member (group.instance.id) leaves
for a while with -2, keeping its partitions until its session expires.

Reconciliation is Kafka's CurrentAssignmentBuilder: a member first gives up (revokes) what its
target no longer holds, keeping its epoch; only then does it reach the target epoch; it
receives a partition only once no other member holds it (or is still revoking it), so no two
members ever consume one partition at once.

No I/O and no asyncio here: the coordinator drives this class (api/core/groups/coordinator.py)
and gives it the partition counts of every topic. Times come from the injected clock.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from api.core.groups.assignors import SERVER_ASSIGNORS, MemberSubscription, assign_target
from api.core.groups.errors import (
    FencedInstanceId,
    FencedMemberEpoch,
    IllegalGeneration,
    InvalidGroupRequest,
    InvalidRegularExpression,
    RebalanceInProgress,
    StaleMemberEpoch,
    UnknownMemberId,
    UnreleasedInstanceId,
    UnsupportedAssignor,
)
from storage_layout.records import TopicPartition

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2  # a static member away for a while: it keeps its partitions
INTERNAL_TOPIC_PREFIX = "__"  # regex subscriptions never match internal topics, as in Kafka

Partitions = frozenset[TopicPartition]


class MemberState(StrEnum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"  # must give partitions up first
    UNRELEASED_PARTITIONS = "unreleased_partitions"  # waits for others to give some up


class ConsumerGroupState(StrEnum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat, protocol-neutral. None means "unchanged since the last one"."""

    member_id: str
    member_epoch: int
    client_id: str = ""
    client_host: str = ""
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topic_names: tuple[str, ...] | None = None
    topic_regex: str | None = None
    assignor: str | None = None
    owned: Partitions | None = None
    # Which topics the member's principal may see: what its regular expression may match
    # (Kafka resolves it with the member's authorization). None: every topic.
    topic_filter: Callable[[str], bool] | None = None

    @property
    def full(self) -> bool:
        """Whether the member sent everything (after a join or an error): answer in full."""
        return self.member_epoch == JOIN_EPOCH or (
            self.topic_names is not None and self.owned is not None
        )


@dataclass(frozen=True, slots=True)
class ClassicJoin:
    """A JoinGroup of a classic member into a consumer group (KIP-848's migration): what its
    consumer protocol metadata says it subscribes to and owns."""

    member_id: str
    client_id: str
    instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    topics: frozenset[str]
    owned: Partitions
    # every (assignor, metadata) it offered, its preferred first: kept for a downgrade to a
    # classic group
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def protocol(self) -> str:
        """The assignor name the member is answered with: its first."""
        return self.protocols[0][0]


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    member_id: str
    member_epoch: int
    assignment: Partitions | None  # None: unchanged since the member's last answer


@dataclass(slots=True)
class ConsumerMember:
    """A member as the coordinator sees it (mutable, confined to the coordinator's loop)."""

    member_id: str
    client_id: str
    client_host: str
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    last_seen_s: float
    topic_names: frozenset[str] = frozenset()
    topic_regex: str | None = None
    assignor: str | None = None
    epoch: int = JOIN_EPOCH
    previous_epoch: int = LEAVE_EPOCH
    state: MemberState = MemberState.STABLE
    assigned: Partitions = frozenset()
    revoking: Partitions = frozenset()
    revoke_deadline_s: float | None = None
    # The member epoch at which each partition it holds was given to it (KIP-1251: a commit
    # with an older epoch is still the holder's for the partitions it has held since then).
    assigned_at: dict[TopicPartition, int] = field(default_factory=dict)
    # A classic member (JoinGroup/SyncGroup/Heartbeat) in the group: its own session timeout
    # and the protocol name it is answered with. None for a consumer protocol member.
    classic_session_timeout_ms: int | None = None
    classic_protocol: str | None = None
    classic_protocols: tuple[tuple[str, bytes], ...] = ()  # its JoinGroup's (assignor, metadata)
    topic_filter: Callable[[str], bool] | None = None  # see Heartbeat.topic_filter

    @property
    def classic(self) -> bool:
        return self.classic_session_timeout_ms is not None

    def holds(self) -> Partitions:
        return self.assigned | self.revoking

    def topics(self, all_topics: frozenset[str]) -> frozenset[str]:
        """The topics it subscribes to now: by name, plus what its expression matches."""
        if self.topic_regex is None:
            return self.topic_names & all_topics
        pattern = re.compile(self.topic_regex)
        visible = self.topic_filter or _every_topic
        matched = {
            t
            for t in all_topics
            if pattern.fullmatch(t) and not t.startswith(INTERNAL_TOPIC_PREFIX) and visible(t)
        }
        return frozenset(matched) | (self.topic_names & all_topics)


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    clock: Callable[[], float]
    session_timeout_ms: int
    epoch: int = 0
    assignment_epoch: int = 0
    target: dict[str, Partitions] = field(default_factory=dict)
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    dead: bool = False
    _instances: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    _topics_seen: dict[str, int] = field(default_factory=dict)  # at the last target
    _partitions_resolved: Mapping[str, int] | None = None  # the topics last resolved against

    # ---- the protocol ------------------------------------------------------------------------

    def heartbeat(self, beat: Heartbeat, partitions: Mapping[str, int]) -> HeartbeatAnswer:
        """Take one heartbeat and answer the member's epoch and (when changed) assignment.

        Raises:
            UnknownMemberId, FencedMemberEpoch, FencedInstanceId, UnreleasedInstanceId,
            UnsupportedAssignor, InvalidRegularExpression, InvalidGroupRequest.
        """
        check_heartbeat(beat)
        if beat.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self.leave(beat.member_id, beat.member_epoch, beat.instance_id)
        member = self._member_for(beat)
        before = member.assigned
        if self._update(member, beat):
            self._bump()
        self.refresh(partitions)
        self._reconcile(member, beat.owned)
        changed = member.assigned != before or beat.full
        return HeartbeatAnswer(member.member_id, member.epoch, member.assigned if changed else None)

    def leave(self, member_id: str, epoch: int, instance_id: str | None) -> HeartbeatAnswer:
        member = self.members.get(member_id)
        if member is None:
            raise UnknownMemberId(f"Member {member_id} is not in group '{self.group_id}'.")
        if epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            # Kafka: a static member away keeps its partitions and its place in the target
            # until its session expires or it comes back (with a new member id).
            member.epoch = STATIC_LEAVE_EPOCH
            member.last_seen_s = self.clock()
            return HeartbeatAnswer(member_id, STATIC_LEAVE_EPOCH, None)
        self._remove(member_id)
        return HeartbeatAnswer(member_id, LEAVE_EPOCH, None)

    def refresh(self, partitions: Mapping[str, int]) -> bool:
        """Recompute the target when the group epoch moved on or the subscribed topics'
        partitions changed (topics created, deleted or grown; a pattern matching more). The
        subscriptions are resolved again only when the epoch moved or the topics changed:
        every heartbeat calls this, and each resolution matches every pattern to every topic."""
        if self.epoch == self.assignment_epoch and partitions == self._partitions_resolved:
            return False
        self._partitions_resolved = partitions
        seen = self._subscribed_counts(partitions)
        if seen != self._topics_seen:
            self._bump()
        if self.epoch == self.assignment_epoch:
            return False
        self._assign(partitions, seen)
        return True

    def expire(self) -> bool:
        """Remove members whose session expired or that did not revoke within their rebalance
        timeout (Kafka fences both); True when any was removed."""
        expired = [m.member_id for m in self.members.values() if self._expired(m)]
        for member_id in expired:
            self._remove(member_id)
        return bool(expired)

    def check_member_epoch(
        self, member_id: str, epoch: int, partitions: Iterable[TopicPartition] | None = None
    ) -> None:
        """An offset commit or fetch of a member must carry its current epoch (a classic
        member's generation is its epoch), or, committing `partitions`, an older epoch from
        which on the member has held every one of them (KIP-1251: a heartbeat answered after
        the commit was sent moved the member on, and the commit is still its own).

        Raises:
            UnknownMemberId: no such member. StaleMemberEpoch: another epoch (a classic
            member: IllegalGeneration, as its protocol says).
        """
        member = self.members.get(member_id)
        if member is None:
            raise UnknownMemberId(f"Member {member_id} is not in group '{self.group_id}'.")
        if epoch != member.epoch and member.classic:
            raise IllegalGeneration(
                f"Generation {epoch} is not member {member_id}'s generation {member.epoch}: "
                f"join again."
            )
        if epoch != member.epoch and not _held_since(member, epoch, partitions):
            raise StaleMemberEpoch(
                f"Member {member_id} is at epoch {member.epoch}, not {epoch}: heartbeat first."
            )

    # ---- classic members (KIP-848's migration) ----------------------------------------------

    def adopt(self, members: list[ConsumerMember]) -> None:
        """A stable classic group's members become this group's, at their generation, each
        keeping what it consumes (the upgrade of a group whose first consumer protocol member
        joins: offsets, assignment and generation carry over)."""
        for member in members:
            member.assigned_at = dict.fromkeys(member.assigned, member.epoch)
            self.members[member.member_id] = member
            self.target[member.member_id] = member.assigned
            if member.instance_id is not None:
                self._instances[member.instance_id] = member.member_id

    def classic_join(self, join: ClassicJoin, partitions: Mapping[str, int]) -> ConsumerMember:
        """JoinGroup: the member reconciles with what its metadata says it owns; its answer
        is its epoch as generation, and SyncGroup gives it what it holds then."""
        member = self.members.get(join.member_id)
        if member is None:
            member = self._new_classic_member(join)
        member.last_seen_s = self.clock()
        member.classic_session_timeout_ms = join.session_timeout_ms
        member.rebalance_timeout_ms = join.rebalance_timeout_ms
        member.classic_protocol = join.protocol
        member.classic_protocols = join.protocols
        if join.topics != member.topic_names:
            member.topic_names = join.topics
            self._bump()
        self.refresh(partitions)
        self._reconcile(member, join.owned)
        return member

    def _new_classic_member(self, join: ClassicJoin) -> ConsumerMember:
        holder_id = self._instances.get(join.instance_id) if join.instance_id else None
        beat = Heartbeat(join.member_id, JOIN_EPOCH, join.client_id, instance_id=join.instance_id)
        if holder_id is not None and holder_id in self.members:
            return self._replace(self.members[holder_id], beat)  # a static member's restart
        member = self._new_member(beat)
        self.members[member.member_id] = member
        if join.instance_id is not None:
            self._instances[join.instance_id] = member.member_id
        self._bump()
        return member

    def classic_member(self, member_id: str, generation: int) -> ConsumerMember:
        """The classic member at that generation (SyncGroup, Heartbeat), its session kept.

        Raises:
            UnknownMemberId, IllegalGeneration.
        """
        member = self.members.get(member_id)
        if member is None:
            raise UnknownMemberId(f"Member {member_id} is not in group '{self.group_id}'.")
        member.last_seen_s = self.clock()
        if generation != member.epoch:
            raise IllegalGeneration(
                f"Generation {generation} is not member {member_id}'s generation "
                f"{member.epoch}: join again."
            )
        return member

    def classic_heartbeat(self, member_id: str, generation: int) -> None:
        """A classic member learns of a new assignment by REBALANCE_IN_PROGRESS: it joins
        again, saying what it owns, and so reconciles."""
        member = self.classic_member(member_id, generation)
        settled = member.state == MemberState.STABLE and member.epoch == self.assignment_epoch
        if not settled or self.epoch != self.assignment_epoch:
            raise RebalanceInProgress(
                f"Group '{self.group_id}' has a new assignment for member {member_id}: join again."
            )

    def static_member_id(self, instance_id: str) -> str | None:
        """The member id of the static member with that group.instance.id, if any."""
        member_id = self._instances.get(instance_id)
        return member_id if member_id in self.members else None

    def only_classic_members(self) -> bool:
        """Whether members remain and every one is classic: KIP-848's downgrade then turns
        the group back into a classic group (Kafka's default migration policy)."""
        return bool(self.members) and all(m.classic for m in self.members.values())

    # ---- views -------------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.epoch != self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        reconciled = all(
            m.epoch == self.assignment_epoch and m.state == MemberState.STABLE
            for m in self.members.values()
        )
        return ConsumerGroupState.STABLE if reconciled else ConsumerGroupState.RECONCILING

    def assignor(self) -> str:
        """The assignor most members ask for (ties: the first of SERVER_ASSIGNORS), as Kafka."""
        asked = [m.assignor for m in self.members.values() if m.assignor]
        if not asked:
            return SERVER_ASSIGNORS[0]
        return max(SERVER_ASSIGNORS, key=lambda name: (asked.count(name), -_rank(name)))

    def subscribed_topics(self, all_topics: frozenset[str]) -> set[str]:
        return set().union(*(m.topics(all_topics) for m in self.members.values()))

    def mark_dead(self) -> None:
        self.dead = True

    # ---- internals: membership ----------------------------------------------------------------

    def _member_for(self, beat: Heartbeat) -> ConsumerMember:
        if beat.instance_id is not None:
            return self._static_member(beat)
        member = self.members.get(beat.member_id)
        if member is None and beat.member_epoch == JOIN_EPOCH:
            member = self._new_member(beat)
            self.members[member.member_id] = member
            self._bump()
            return member
        if member is None:
            raise UnknownMemberId(f"Member {beat.member_id} is not in group '{self.group_id}'.")
        self._check_epoch(member, beat)
        return member

    def _static_member(self, beat: Heartbeat) -> ConsumerMember:
        holder_id = self._instances.get(beat.instance_id)
        holder = self.members.get(holder_id) if holder_id else None
        if beat.member_epoch != JOIN_EPOCH:
            if holder is None or holder_id != beat.member_id:
                if holder is not None:
                    raise FencedInstanceId(
                        f"Instance '{beat.instance_id}' belongs to member {holder_id} now."
                    )
                raise UnknownMemberId(f"Member {beat.member_id} is not in '{self.group_id}'.")
            self._check_epoch(holder, beat)
            return holder
        if holder is None:
            member = self._new_member(beat)
            self.members[member.member_id] = member
            self._instances[beat.instance_id] = member.member_id
            self._bump()
            return member
        if holder.epoch != STATIC_LEAVE_EPOCH and holder_id != beat.member_id:
            raise UnreleasedInstanceId(
                f"Instance '{beat.instance_id}' is still held by member {holder_id}: it must "
                f"leave (epoch -2) or its session expire first."
            )
        return self._replace(holder, beat)

    def _replace(self, holder: ConsumerMember, beat: Heartbeat) -> ConsumerMember:
        """A static member back under a new member id takes the place of its former self:
        same target, same partitions, no new group epoch (Kafka: no rebalance)."""
        member_id = beat.member_id or holder.member_id
        member = replace(holder, member_id=member_id, epoch=JOIN_EPOCH, last_seen_s=self.clock())
        del self.members[holder.member_id]
        self.members[member_id] = member
        self._instances[beat.instance_id] = member_id
        if holder.member_id in self.target:
            self.target[member_id] = self.target.pop(holder.member_id)
        return member

    def _new_member(self, beat: Heartbeat) -> ConsumerMember:
        return ConsumerMember(
            member_id=beat.member_id,
            client_id=beat.client_id,
            client_host=beat.client_host,
            instance_id=beat.instance_id,
            rack_id=beat.rack_id,
            rebalance_timeout_ms=beat.rebalance_timeout_ms,
            last_seen_s=self.clock(),
        )

    def _check_epoch(self, member: ConsumerMember, beat: Heartbeat) -> None:
        """Kafka's throwIfMemberEpochIsInvalid: the member's epoch, or (its answer lost) the
        previous one while it owns nothing beyond what it is assigned now."""
        if beat.member_epoch == member.epoch:
            return
        if beat.member_epoch == JOIN_EPOCH:
            # A known member joining afresh (it lost its state): it starts over, keeping
            # nothing it may still hold in its own view.
            member.assigned, member.revoking, member.epoch = frozenset(), frozenset(), JOIN_EPOCH
            member.assigned_at = {}
            member.state = MemberState.STABLE
            self._bump()
            return
        owned_within = beat.owned is not None and beat.owned <= member.assigned
        if beat.member_epoch == member.previous_epoch and owned_within:
            return
        raise FencedMemberEpoch(
            f"Member {member.member_id} sent epoch {beat.member_epoch}; its epoch is "
            f"{member.epoch}: join again with epoch 0."
        )

    def _update(self, member: ConsumerMember, beat: Heartbeat) -> bool:
        """Take what the heartbeat changes; True when the target must be computed again."""
        member.last_seen_s = self.clock()
        member.client_id, member.client_host = beat.client_id, beat.client_host
        member.topic_filter = beat.topic_filter
        if beat.rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = beat.rebalance_timeout_ms
        if beat.rack_id is not None:
            member.rack_id = beat.rack_id
        changed = False
        if beat.topic_names is not None and frozenset(beat.topic_names) != member.topic_names:
            member.topic_names, changed = frozenset(beat.topic_names), True
        if beat.topic_regex is not None and (beat.topic_regex or None) != member.topic_regex:
            member.topic_regex, changed = beat.topic_regex or None, True
        if beat.assignor is not None and beat.assignor != member.assignor:
            member.assignor, changed = beat.assignor, True
        return changed

    def _remove(self, member_id: str) -> None:
        member = self.members.pop(member_id)
        self.target.pop(member_id, None)
        if member.instance_id is not None and self._instances.get(member.instance_id) == member_id:
            del self._instances[member.instance_id]
        self._bump()

    def _expired(self, member: ConsumerMember) -> bool:
        now = self.clock()
        session_ms = member.classic_session_timeout_ms or self.session_timeout_ms
        if now - member.last_seen_s > session_ms / 1000:
            return True
        return member.revoke_deadline_s is not None and now > member.revoke_deadline_s

    def _bump(self) -> None:
        """A new group epoch, once however many changes come before the next target."""
        self.epoch = max(self.epoch, self.assignment_epoch + 1)

    # ---- internals: assignment ----------------------------------------------------------------

    def _subscribed_counts(self, partitions: Mapping[str, int]) -> dict[str, int]:
        topics = self.subscribed_topics(frozenset(partitions))
        return {topic: partitions[topic] for topic in sorted(topics)}

    def _assign(self, partitions: Mapping[str, int], seen: dict[str, int]) -> None:
        all_topics = frozenset(partitions)
        subscriptions = [
            MemberSubscription(
                m.member_id,
                m.topics(all_topics),
                self.target.get(m.member_id, frozenset()),
                m.instance_id,
            )
            for m in self.members.values()
        ]
        self.target = assign_target(self.assignor(), subscriptions, seen)
        self.assignment_epoch = self.epoch
        self._topics_seen = seen

    def _reconcile(self, member: ConsumerMember, owned: Partitions | None) -> None:
        """Kafka's CurrentAssignmentBuilder: revoke first, then assign what is free."""
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if owned is None or owned & member.revoking:
                return  # still revoking: wait for the member's next heartbeat
            member.revoking = frozenset()
        elif member.state == MemberState.STABLE and member.epoch == self.assignment_epoch:
            return
        self._next_assignment(member, owned)

    def _next_assignment(self, member: ConsumerMember, owned: Partitions | None) -> None:
        target = self.target.get(member.member_id, frozenset())
        kept, revoke = member.assigned & target, member.assigned - target
        held_by_others = self._held_by_others(member.member_id)
        wanted = target - member.assigned
        free = frozenset(tp for tp in wanted if tp not in held_by_others)
        if revoke and (owned is None or owned & revoke):
            member.assigned, member.revoking = kept, revoke
            member.state = MemberState.UNREVOKED_PARTITIONS
            member.revoke_deadline_s = self.clock() + member.rebalance_timeout_ms / 1000
            return
        member.previous_epoch, member.epoch = member.epoch, self.assignment_epoch
        member.assigned, member.revoking, member.revoke_deadline_s = kept | free, frozenset(), None
        member.assigned_at = {
            tp: member.assigned_at.get(tp, member.epoch) for tp in member.assigned
        }
        unreleased = len(free) < len(wanted)
        member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE

    def _held_by_others(self, member_id: str) -> Partitions:
        return frozenset().union(
            *(m.holds() for m in self.members.values() if m.member_id != member_id)
        )


def _held_since(
    member: ConsumerMember, epoch: int, partitions: Iterable[TopicPartition] | None
) -> bool:
    if partitions is None or epoch > member.epoch:
        return False
    held = member.holds()
    return all(
        tp in held and member.assigned_at.get(tp, member.epoch) <= epoch for tp in partitions
    )


def _every_topic(topic: str) -> bool:
    return True


def _rank(assignor: str) -> int:
    return SERVER_ASSIGNORS.index(assignor)


def check_heartbeat(beat: Heartbeat) -> None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid, with its messages' sense: before
    the heartbeat touches (or creates) its group."""
    if beat.member_epoch < STATIC_LEAVE_EPOCH:
        raise InvalidGroupRequest(f"MemberEpoch {beat.member_epoch} is invalid.")
    if beat.member_epoch == STATIC_LEAVE_EPOCH and beat.instance_id is None:
        raise InvalidGroupRequest("InstanceId can't be null when MemberEpoch is -2.")
    if not beat.member_id:
        raise InvalidGroupRequest("MemberId can't be empty.")
    if beat.instance_id is not None and not beat.instance_id:
        raise InvalidGroupRequest("InstanceId can't be empty.")
    if beat.member_epoch == JOIN_EPOCH:
        _check_join(beat)
    if beat.assignor is not None and beat.assignor not in SERVER_ASSIGNORS:
        raise UnsupportedAssignor(
            f"ServerAssignor '{beat.assignor}' is not supported; supported assignors: "
            f"{', '.join(SERVER_ASSIGNORS)}."
        )
    if beat.topic_regex:
        try:
            re.compile(beat.topic_regex)
        except re.error as error:
            raise InvalidRegularExpression(
                f"SubscribedTopicRegex '{beat.topic_regex}' is invalid: {error}."
            ) from error


def _check_join(beat: Heartbeat) -> None:
    if beat.rebalance_timeout_ms < 0:
        raise InvalidGroupRequest("RebalanceTimeoutMs must be provided in first request.")
    if beat.topic_names is None and beat.topic_regex is None:
        raise InvalidGroupRequest(
            "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
        )
    if beat.owned:
        raise InvalidGroupRequest("TopicPartitions must be empty when (re-)joining.")
