"""The group coordinator of one gateway node: membership, rebalances and committed offsets of
the consumer groups this node coordinates.

Which node coordinates a group: the live node with the highest rendezvous hash for the group's
coordinator slot (Kafka: the leader of `__consumer_offsets` partition hash(group) % 50). That
node takes the group with a compare-and-set on the group's `txn` in `_meta/consumer_offsets`
(storage_layout/meta/consumer_offsets.py), and every offset commit asserts it, so a deposed
coordinator can never commit again. Other nodes forward the group's requests to it, so any node
serves any group. Membership lives in the coordinator's memory; after a failover the members
get UNKNOWN_MEMBER_ID and join again, and the offsets are reloaded from the table.

Concurrency contract: everything runs on the broker's event loop; blocking storage calls go to
the broker's executor. Offset commits of one group are batched: one Delta commit takes every
commit queued on this node while the previous one was being written, of every group this
node coordinates (group commit, as for produce).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from api.core import metrics
from api.core.cluster import preferred_node
from api.core.groups.consumer_group import (
    LEAVE_EPOCH,
    ClassicJoin,
    ConsumerGroup,
    ConsumerMember,
    Heartbeat,
    HeartbeatAnswer,
    check_heartbeat,
)
from api.core.groups.consumer_protocol import (
    BadConsumerProtocol,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from api.core.groups.errors import (
    GroupNotFound,
    GroupSubscribedToTopic,
    InconsistentGroupProtocol,
    InvalidGroupRequest,
    NonEmptyGroup,
    NotCoordinator,
    RebalanceInProgress,
    UnknownMemberId,
)
from api.core.groups.group import (
    Group,
    GroupState,
    JoinRequest,
    Member,
    MemberView,
    Subscription,
)
from api.core.internal_topics import COORDINATOR_SLOTS, COORDINATOR_TOPIC
from storage_layout.errors import LeadershipConflict
from storage_layout.log import Leadership
from storage_layout.meta.consumer_offsets import (
    DELETED_OFFSET,
    GENERATION_NONE,
    CommittedOffset,
    ConsumerOffsets,
    GroupCommit,
    OffsetCommit,
)
from storage_layout.partitioner import murmur2, to_positive
from storage_layout.records import TopicPartition

log = logging.getLogger("lakelog.groups")

TICK_S = 0.1  # how often sessions expire and rebalance deadlines are checked
METADATA_CHECK_S = 5.0  # how often subscribed topics are checked for new partitions or matches
SESSION_TIMEOUT_MS_RANGE = (1_000, 1_800_000)  # Kafka's group.min/max.session.timeout.ms
CLASSIC, CONSUMER = "classic", "consumer"  # Kafka's group types: JoinGroup's, KIP-848's
CONSUMER_SESSION_TIMEOUT_MS = 45_000  # Kafka's group.consumer.session.timeout.ms


def coordinator_slot(group_id: str) -> int:
    return to_positive(murmur2(group_id.encode())) % COORDINATOR_SLOTS


@dataclass(frozen=True, slots=True)
class JoinResult:
    member_id: str
    generation: int
    protocol: str | None
    leader_id: str | None
    assignment: tuple[TopicPartition, ...]
    members: tuple[MemberView, ...]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group as admin APIs show it. For a consumer group (KIP-848), `generation` is the
    group epoch and `protocol` the server-side assignor."""

    group_id: str
    state: str
    generation: int
    protocol: str | None
    leader_id: str | None
    coordinator_id: int
    members: tuple[MemberView, ...]
    group_type: str = CLASSIC
    protocol_type: str | None = None  # Kafka's, e.g. "consumer"; None for a group never joined


@dataclass(slots=True)
class _PendingCommit:
    commits: Sequence[OffsetCommit]
    member_id: str | None
    generation: int
    future: asyncio.Future


@dataclass(slots=True)
class _GroupSlot:
    """What this node keeps for a group it coordinates."""

    group: Group
    held: Leadership
    offsets: dict[TopicPartition, CommittedOffset]
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    topics_seen: dict[str, int] = field(default_factory=dict)  # partitions at last rebalance
    consumer: ConsumerGroup | None = None  # while the group is a KIP-848 consumer group

    @property
    def group_type(self) -> str:
        return CONSUMER if self.consumer is not None else CLASSIC


# group id -> (producer id, partitions) of each open transaction holding offsets of the group
PendingTransactions = Callable[[str], Awaitable[list[tuple[int, list[TopicPartition]]]]]


class GroupCoordinator:
    """The groups this node coordinates, and where the others are coordinated."""

    def __init__(
        self,
        *,
        offsets: ConsumerOffsets,
        node_id: int,
        live_nodes: Callable[[], list[int]],
        node_url: Callable[[int], str | None],
        topics: Callable[[], asyncio.Future],
        blocking: Callable,
        clock: Callable[[], float] = time.monotonic,
        pending_transactions: PendingTransactions | None = None,
        consumer_session_timeout_ms: int = CONSUMER_SESSION_TIMEOUT_MS,
    ) -> None:
        self._offsets = offsets
        self.node_id = node_id
        self._live_nodes = live_nodes
        self._node_url = node_url
        self._topics = topics  # async () -> {topic name: partitions}
        self._blocking = blocking
        self._clock = clock
        self._consumer_session_timeout_ms = consumer_session_timeout_ms
        self._slots: dict[str, _GroupSlot] = {}
        self._taking: dict[str, asyncio.Lock] = {}
        self._ticker: asyncio.Task | None = None
        self._queue: list[tuple[str, _PendingCommit]] = []  # offset commits of every group
        self._committer: asyncio.Task | None = None
        self._last_metadata_check_s = 0.0
        # Offsets sent within open transactions (KIP-447): group -> partition -> producer id.
        # OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for these partitions
        # until the transaction ends, so a new owner does not start from a stale offset.
        self._pending_txn: dict[str, dict[TopicPartition, int]] = {}
        # Where a coordinator new to a group learns them (the transactions' stored state).
        self._pending_transactions = pending_transactions
        self.before_rebalance: Callable[[str], asyncio.Future] | None = None  # REST instances

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        if self._committer is not None:
            await asyncio.gather(self._committer, return_exceptions=True)

    # ---- routing ---------------------------------------------------------------------------

    def coordinator_of(self, group_id: str) -> int:
        return preferred_node(self._live_nodes(), COORDINATOR_TOPIC, coordinator_slot(group_id))

    def remote_url(self, group_id: str) -> str | None:
        """The coordinator's URL when another node coordinates the group (None: this node).
        A group this node no longer should coordinate is dropped here (handed over)."""
        node = self.coordinator_of(group_id)
        if node == self.node_id:
            return None
        self._drop(group_id)
        url = self._node_url(node)
        if url is None:
            raise NotCoordinator(f"Node {node} coordinates group '{group_id}' but has no URL yet.")
        return url

    def committed_here(self) -> list[tuple[str, TopicPartition, int]]:
        """(group, partition, committed offset) of every group this node coordinates, from
        memory (no I/O: the metrics' lag)."""
        return [
            (group_id, tp, committed.offset)
            for group_id, slot in list(self._slots.items())
            for tp, committed in list(slot.offsets.items())
        ]

    def local_groups(self) -> dict[str, Group]:
        return {group_id: slot.group for group_id, slot in self._slots.items()}

    def has_members(self, group_id: str) -> bool:
        """Whether a classic or consumer group of that id has members here (a share group
        may not take its id)."""
        slot = self._slots.get(group_id)
        if slot is None:
            return False
        return bool(slot.group.members) or bool(slot.consumer and slot.consumer.members)

    # ---- membership ------------------------------------------------------------------------

    async def join(self, group_id: str, request: JoinRequest) -> JoinResult:
        """Join (or rejoin) and wait until the rebalance completes; returns the assignment."""
        _check_join(request)
        slot = await self._slot(group_id)
        if slot.consumer is not None and slot.consumer.members:
            return await self._join_consumer_group(slot, request)
        self._become_classic(slot)
        group = slot.group
        joined_during = group.generation  # the rebalance completes with the next generation
        member = group.join(request)
        self._notify(slot)
        deadline_s = self._clock() + request.rebalance_timeout_ms / 1000 + 1.0
        while self._rebalancing(group, joined_during) and self._clock() < deadline_s:
            if group.ready_to_complete():
                await self._complete(group_id, slot)
                continue
            await self._wait(slot, min(TICK_S, deadline_s - self._clock()))
        if member.member_id not in group.members:
            raise UnknownMemberId(f"Member {member.member_id} was removed during the rebalance.")
        if self._rebalancing(group, joined_during):
            raise RebalanceInProgress(f"Group '{group_id}' did not finish rebalancing in time.")
        # The generation this join was part of is complete: it is answered now, as Kafka
        # answers every pending join at completion, even if another member's join has
        # started the next rebalance already (the member learns it at its sync or heartbeat
        # and joins again). Waiting on for the next one would deadlock: that rebalance waits
        # for this member to join again, which it cannot while its join is still pending
        # (franz-go's TestTxnEtl: joins held for the whole rebalance timeout, then
        # UNKNOWN_MEMBER_ID, and transactions outliving their timeout meanwhile).
        if not group.client_assigned and group.state != GroupState.PREPARING_REBALANCE:
            # The join response carries the assignment (computed here, not by a leader
            # member), so delivering it is the member's sync; a separate sync is optional.
            group.sync(member.member_id, group.generation)
            self._notify(slot)
        return JoinResult(
            member.member_id,
            group.generation,
            group.protocol,
            group.leader_id,
            tuple(sorted(member.assignment)),
            tuple(group.views()),
        )

    @staticmethod
    def _rebalancing(group: Group, joined_during: int) -> bool:
        """Whether the rebalance a join made (or joined) in generation `joined_during` is
        still to complete."""
        return group.state == GroupState.PREPARING_REBALANCE and group.generation == joined_during

    async def _join_consumer_group(self, slot: _GroupSlot, request: JoinRequest) -> JoinResult:
        """KIP-848's migration: a classic member in a consumer group, assigned by the
        coordinator. Its answer names no leader (nobody assigns on the client side)."""
        consumer = slot.consumer
        if not request.client_assigned or request.protocol_type != "consumer":
            raise InconsistentGroupProtocol(
                f"Group '{consumer.group_id}' is a consumer group (KIP-848): only Kafka "
                f"consumers may join it (group.protocol=consumer, or classic consumers)."
            )
        join = _classic_join(request)
        member = consumer.classic_join(join, await self._topics())
        self._notify(slot)
        assignment = tuple(sorted(member.assigned))
        return JoinResult(member.member_id, member.epoch, join.protocol, "", assignment, ())

    async def sync(self, group_id: str, member_id: str, generation: int) -> tuple:
        slot = await self._slot(group_id)
        assignment = slot.group.sync(member_id, generation)
        self._notify(slot)
        return tuple(sorted(assignment))

    async def sync_client_assigned(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None,
    ) -> bytes:
        """Kafka's SyncGroup: the leader's call brings every member's assignment; each member
        waits (up to its rebalance timeout) for its own.

        Raises:
            RebalanceInProgress: a new rebalance began, or the leader never sent assignments.
        """
        slot = await self._slot(group_id)
        if slot.consumer is not None:
            member = slot.consumer.classic_member(member_id, generation)
            return encode_assignment(tuple(sorted(member.assigned)))
        group = slot.group
        member = group.member(member_id)
        deadline_s = self._clock() + member.rebalance_timeout_ms / 1000
        while True:
            assignment = group.sync_client_assigned(member_id, generation, assignments)
            self._notify(slot)
            if assignment is not None:
                return assignment
            if self._clock() >= deadline_s:
                raise RebalanceInProgress(
                    f"Group '{group_id}': the leader sent no assignment in time; join again."
                )
            await self._wait(slot, min(TICK_S * 10, deadline_s - self._clock()))
            slot = await self._slot(group_id)
            group = slot.group

    async def heartbeat(self, group_id: str, member_id: str, generation: int) -> None:
        slot = await self._slot(group_id)
        if slot.consumer is None:
            slot.group.heartbeat(member_id, generation)
            return
        if slot.consumer.refresh(await self._topics()):
            self._notify(slot)
        slot.consumer.classic_heartbeat(member_id, generation)

    async def leave(self, group_id: str, member_id: str) -> None:
        """Kafka's LeaveGroup by member id. In a consumer group only a classic member leaves
        so; a consumer protocol member leaves by its heartbeat (Kafka: UNKNOWN_MEMBER_ID)."""
        slot = await self._slot(group_id)
        if slot.consumer is not None:
            member = slot.consumer.members.get(member_id)
            if member is not None and not member.classic:
                raise UnknownMemberId(
                    f"Member {member_id} of consumer group '{group_id}' uses the consumer "
                    "protocol: it leaves with a ConsumerGroupHeartbeat of epoch -1."
                )
        self._leave(group_id, slot, member_id)

    async def remove_static_member(self, group_id: str, instance_id: str) -> str:
        """LeaveGroup v3+ by group.instance.id alone (an administrator's removal, as
        `kafka-consumer-groups --delete` and Kafka Streams use): the static member goes,
        whichever protocol it uses. Returns its member id.

        Raises:
            UnknownMemberId: no member has that instance id.
        """
        slot = await self._slot(group_id)
        container = slot.consumer if slot.consumer is not None else slot.group
        member_id = container.static_member_id(instance_id)
        if member_id is None:
            raise UnknownMemberId(
                f"No member of group '{group_id}' has group.instance.id '{instance_id}'."
            )
        self._leave(group_id, slot, member_id)
        return member_id

    def _leave(self, group_id: str, slot: _GroupSlot, member_id: str) -> None:
        if slot.consumer is not None:
            slot.consumer.leave(member_id, LEAVE_EPOCH, None)
        else:
            slot.group.leave(member_id)
        self._notify(slot)
        self._maybe_downgrade(group_id, slot)

    async def group(self, group_id: str) -> Group:
        return (await self._slot(group_id)).group

    async def wait_for_change(self, group_id: str, timeout_s: float) -> None:
        await self._wait(await self._slot(group_id), timeout_s)

    async def complete_if_ready(self, group_id: str) -> None:
        slot = await self._slot(group_id)
        if slot.group.ready_to_complete():
            await self._complete(group_id, slot)

    # ---- KIP-848 consumer groups -----------------------------------------------------------

    async def consumer_heartbeat(self, group_id: str, beat: Heartbeat) -> HeartbeatAnswer:
        """Kafka's ConsumerGroupHeartbeat: join, reconcile, leave (consumer_group.py).

        Raises:
            GroupNotFound: a classic group with members has this id, or (a member not joining)
                no consumer group has. Any error of ConsumerGroup.heartbeat.
        """
        check_heartbeat(beat)
        slot = await self._slot(group_id)
        consumer = self._become_consumer(group_id, slot, joining=beat.member_epoch == 0)
        answer = consumer.heartbeat(beat, await self._topics())
        self._notify(slot)
        self._maybe_downgrade(group_id, slot)
        return answer

    async def consumer_group(self, group_id: str) -> ConsumerGroup:
        """The consumer group of that id.

        Raises:
            GroupNotFound: the group is not a consumer group (it is classic, or unknown).
        """
        slot = await self._slot(group_id)
        if slot.consumer is None:
            _check_exists(group_id, slot)
            raise GroupNotFound(group_id, f"Group '{group_id}' is not a consumer group.")
        return slot.consumer

    async def uses_member_epochs(self, group_id: str, member_id: str) -> bool:
        """Whether the member is a consumer protocol member (KIP-848), whose offset commits
        carry its epoch: OffsetCommit v9 or later."""
        slot = await self._slot(group_id)
        member = slot.consumer.members.get(member_id) if slot.consumer is not None else None
        return member is not None and not member.classic

    async def check_member_epoch(self, group_id: str, member_id: str, epoch: int) -> None:
        """OffsetFetch v9 names its member: in a consumer group it must be at its epoch
        (a classic group's fetches are not checked, as in Kafka)."""
        slot = await self._slot(group_id)
        if slot.consumer is not None:
            slot.consumer.check_member_epoch(member_id, epoch)

    def _become_consumer(self, group_id: str, slot: _GroupSlot, *, joining: bool) -> ConsumerGroup:
        if slot.consumer is not None:
            return slot.consumer
        group = slot.group
        if group.members and not _upgradable(group):
            raise GroupNotFound(
                group_id,
                f"Group '{group_id}' is not a consumer group, and its classic members cannot "
                f"move to one now (the group must be Stable, its members Kafka consumers).",
            )
        if not joining:
            # Kafka answers GROUP_ID_NOT_FOUND, which clients take as fatal; here membership
            # lives in the coordinator's memory, so a member with an epoch may well have been
            # in the group before a failover or restart: it is unknown, and joins again.
            raise UnknownMemberId(
                f"Consumer group '{group_id}' has no such member here (a new "
                f"coordinator, or the group is gone): join again with epoch 0."
            )
        slot.consumer = ConsumerGroup(group_id, self._clock, self._consumer_session_timeout_ms)
        # Epochs continue above the generations committed with, as a classic group's do.
        slot.consumer.epoch = slot.consumer.assignment_epoch = group.generation
        if group.members:  # KIP-848's online upgrade: the classic members come along
            slot.consumer.adopt([_adopted(m, group) for m in group.members.values()])
            group.hand_over()
            log.info("group %s upgraded to a consumer group", group_id)
        return slot.consumer

    def _maybe_downgrade(self, group_id: str, slot: _GroupSlot) -> None:
        """KIP-848's online downgrade: when the last consumer protocol member has left (or
        its session expired) and classic members remain, the group is a classic group again;
        they keep their partitions until they have joined it."""
        consumer = slot.consumer
        if consumer is None or not consumer.only_classic_members():
            return
        now_s = self._clock()
        members = [_downgraded(m, now_s) for m in consumer.members.values()]
        protocol = next(iter(consumer.members.values())).classic_protocol
        # The generation the classic members are at (the epoch before the leave bumped it,
        # as Kafka converts the group as it was): their heartbeats and commits stay valid
        # until they have joined the rebalance.
        generation = max(m.epoch for m in consumer.members.values())
        slot.group.adopt(members, generation, protocol)
        slot.consumer = None
        self._notify(slot)
        log.info("group %s downgraded to a classic group", group_id)

    def _become_classic(self, slot: _GroupSlot) -> None:
        """An empty consumer group a classic member joins is a classic group again."""
        consumer = slot.consumer
        if consumer is None:
            return
        slot.group.generation = max(slot.group.generation, consumer.epoch)
        slot.consumer = None

    # ---- offsets ---------------------------------------------------------------------------

    async def commit(
        self,
        group_id: str,
        commits: Sequence[OffsetCommit],
        *,
        member_id: str | None,
        generation: int,
    ) -> None:
        """Commit offsets (the next offset to read per partition), batched with others.

        A member commits with its generation: unknown members get UNKNOWN_MEMBER_ID, older
        generations ILLEGAL_GENERATION, and commits during a rebalance REBALANCE_IN_PROGRESS.
        Without a member (generation -1) the group must have no members (an admin reset).
        """
        _check_commits(commits)
        slot = await self._slot(group_id)
        partitions = [TopicPartition(c.topic, c.partition) for c in commits]
        self._check_committer(slot, member_id, generation, partitions)
        future = asyncio.get_running_loop().create_future()
        self._queue.append((group_id, _PendingCommit(commits, member_id, generation, future)))
        if self._committer is None or self._committer.done():
            self._committer = asyncio.get_running_loop().create_task(self._commit_loop())
        await future

    async def note_transactional(
        self, group_id: str, producer_id: int, partitions: Sequence[TopicPartition]
    ) -> None:
        """Offsets of these partitions were sent within `producer_id`'s open transaction."""
        await self._slot(group_id)
        pending = self._pending_txn.setdefault(group_id, {})
        for partition in partitions:
            pending[partition] = producer_id

    def unstable_partitions(self, group_id: str) -> set[TopicPartition]:
        """Partitions whose offsets an open transaction is about to commit."""
        return set(self._pending_txn.get(group_id, {}))

    async def end_transactional(self, group_id: str, producer_id: int) -> None:
        """The producer's transaction ended: its offsets are stable (committed or dropped).
        After the group is loaded here: a load in progress reads the stored transactions and
        would otherwise mark this one's offsets unstable after its end had been applied."""
        await self._slot(group_id)
        pending = self._pending_txn.get(group_id, {})
        for partition in [p for p, owner in pending.items() if owner == producer_id]:
            del pending[partition]

    async def commit_transactional(self, group_id: str, commits: Sequence[OffsetCommit]) -> None:
        """Commit the offsets a committed transaction carried (TxnOffsetCommit). The member
        and generation were checked when the transaction received them; by now the group may
        have rebalanced, and the transaction's commit must not be refused for it (Kafka
        writes them with the transaction's marker)."""
        _check_commits(commits)
        await self._slot(group_id)
        future = asyncio.get_running_loop().create_future()
        pending = _PendingCommit(commits, None, GENERATION_NONE, future)
        self._queue.append((group_id, pending))
        if self._committer is None or self._committer.done():
            self._committer = asyncio.get_running_loop().create_task(self._commit_loop())
        await future

    async def check_committer(self, group_id: str, member_id: str | None, generation: int) -> None:
        """Raise what `commit` would for this member and generation, committing nothing (a
        caller that writes elsewhere first, as a dead letter, checks before it writes)."""
        slot = await self._slot(group_id)
        self._check_committer(slot, member_id, generation)

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, Exception | None]:
        """Kafka's OffsetDelete: forget the committed offsets of `partitions`, except those of
        topics the group's members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC each)."""
        slot = await self._slot(group_id)
        _check_exists(group_id, slot)
        subscribed = _subscribed_topics(slot, await self._topics())
        outcome: dict[TopicPartition, Exception | None] = {}
        doomed = []
        for tp in partitions:
            if tp.topic in subscribed:
                outcome[tp] = GroupSubscribedToTopic(
                    f"Group '{group_id}' has active members subscribed to '{tp.topic}'."
                )
            else:
                outcome[tp] = None
                if tp in slot.offsets:
                    doomed.append(tp)
        await self._delete(group_id, doomed)
        return outcome

    async def delete_group(self, group_id: str) -> None:
        """Kafka's DeleteGroups: a group without members loses every committed offset.

        Raises:
            NonEmptyGroup: it has members. GroupNotFound: it does not exist (_check_exists).
        """
        slot = await self._slot(group_id)
        if members := _member_count(slot):
            raise NonEmptyGroup(
                f"Group '{group_id}' has {members} active member(s): stop them first."
            )
        _check_exists(group_id, slot)
        await self._delete(group_id, list(slot.offsets))
        self._slots.pop(group_id, None)
        _mark_dead(slot)
        self._notify(slot)

    async def _delete(self, group_id: str, partitions: list[TopicPartition]) -> None:
        if not partitions:
            return
        deletions = [
            OffsetCommit(tp.topic, tp.partition, DELETED_OFFSET, None) for tp in partitions
        ]
        future = asyncio.get_running_loop().create_future()
        self._queue.append((group_id, _PendingCommit(deletions, None, -1, future)))
        if self._committer is None or self._committer.done():
            self._committer = asyncio.get_running_loop().create_task(self._commit_loop())
        await future

    async def committed(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        return dict((await self._slot(group_id)).offsets)

    # ---- admin -----------------------------------------------------------------------------

    async def describe(self, group_id: str) -> GroupDescription:
        slot = await self._slot(group_id)
        group = slot.group
        _check_exists(group_id, slot)
        if slot.consumer is not None:
            return _consumer_description(slot.consumer, self.node_id)
        protocol_type = group.protocol_type or ("consumer" if group.members else None)
        return GroupDescription(
            group_id,
            group.state.value,
            group.generation,
            group.protocol,
            group.leader_id,
            self.node_id,
            tuple(group.views()),
            CLASSIC,
            protocol_type,
        )

    async def stored_groups(self) -> list[str]:
        """Every group with committed offsets on the storage root (any coordinator)."""
        return await self._blocking(self._offsets.groups)

    # ---- internals: taking a group -------------------------------------------------------------

    async def _slot(self, group_id: str) -> _GroupSlot:
        if not group_id:
            raise InvalidGroupRequest("The group id must not be empty.")
        slot = self._slots.get(group_id)
        if slot is not None:
            return slot
        if self.coordinator_of(group_id) != self.node_id:
            raise NotCoordinator(f"This node does not coordinate group '{group_id}'; retry.")
        lock = self._taking.setdefault(group_id, asyncio.Lock())
        async with lock:
            if group_id not in self._slots:
                self._slots[group_id] = await self._take(group_id)
        return self._slots[group_id]

    async def _take(self, group_id: str) -> _GroupSlot:
        current = await self._blocking(self._offsets.group_coordinator, group_id)
        try:
            held = await self._blocking(
                self._offsets.take_group, group_id, self.node_id, expected=current
            )
        except LeadershipConflict as error:
            raise NotCoordinator(f"Another node took group '{group_id}' first; retry.") from error
        stored = await self._blocking(self._offsets.load, group_id)
        group = Group(group_id, self._clock, decode_assignment=decode_assignment)
        # Generations continue above the newest one stored with a committed offset. A number
        # handed out before a restart but never committed with may be handed out again; that
        # is safe because membership is in memory and member ids are random: every member of
        # the previous coordinator is unknown here (UNKNOWN_MEMBER_ID comes before the
        # generation check), whatever its generation. Chaos T3g checks this.
        group.generation = max((o.generation for o in stored.values()), default=0)
        await self._load_pending_transactions(group_id)
        log.info("node %s coordinates group %s (epoch %s)", self.node_id, group_id, held.epoch)
        return _GroupSlot(group, held, stored)

    async def _load_pending_transactions(self, group_id: str) -> None:
        """Offsets of the group that open transactions hold, as the stored transaction states
        say: after a failover they stay unstable here until those transactions end, as they
        were at the group's previous coordinator (Kafka keeps them in its offsets log)."""
        if self._pending_transactions is None:
            return
        pending = self._pending_txn.setdefault(group_id, {})
        for producer_id, partitions in await self._pending_transactions(group_id):
            for partition in partitions:
                pending.setdefault(partition, producer_id)

    def _drop(self, group_id: str) -> None:
        slot = self._slots.pop(group_id, None)
        if slot is not None:
            _mark_dead(slot)
            self._notify(slot)
            log.info("node %s hands group %s over", self.node_id, group_id)

    # ---- internals: rebalancing ------------------------------------------------------------------

    async def _complete(self, group_id: str, slot: _GroupSlot) -> None:
        if self.before_rebalance is not None:
            await self.before_rebalance(group_id)
        if not slot.group.ready_to_complete():
            return  # another coroutine completed it meanwhile
        partitions = await self._topics()
        if not slot.group.ready_to_complete():
            return
        slot.group.complete_rebalance(partitions, frozenset(partitions))
        metrics.GROUP_REBALANCES.inc()
        log.info(
            "group %s generation %s: %s members, %s",
            group_id,
            slot.group.generation,
            len(slot.group.members),
            slot.group.state.value,
        )
        slot.topics_seen = _relevant(slot.group, partitions)
        self._notify(slot)

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("group coordinator tick failed")

    async def _tick(self) -> None:
        check_metadata = self._clock() - self._last_metadata_check_s >= METADATA_CHECK_S
        partitions = await self._topics() if check_metadata else None
        if check_metadata:
            self._last_metadata_check_s = self._clock()
        for group_id, slot in list(self._slots.items()):
            if slot.consumer is not None:
                if self._tick_consumer_group(slot, partitions):
                    # Only after members expired: a group converted by a joining heartbeat
                    # that then failed has lost no member, and is not flipped back (Kafka
                    # applies the conversion and the heartbeat together).
                    self._maybe_downgrade(group_id, slot)
                continue
            group = slot.group
            if group.expire():
                self._notify(slot)
            if partitions is not None and group.state == GroupState.STABLE:
                if _relevant(group, partitions) != slot.topics_seen:
                    group.request_rebalance()  # partitions added, or a pattern matches more
                    self._notify(slot)
            if group.ready_to_complete():
                await self._complete(group_id, slot)

    def _tick_consumer_group(self, slot: _GroupSlot, partitions: dict[str, int] | None) -> bool:
        """Expire sessions and revocation deadlines; on a metadata check, compute a new target
        when the subscribed topics changed. Members learn it at their next heartbeat. True
        when members expired."""
        consumer = slot.consumer
        expired = consumer.expire()
        changed = expired
        if partitions is not None:
            changed = consumer.refresh(partitions) or changed
        if changed:
            self._notify(slot)
        return expired

    def _notify(self, slot: _GroupSlot) -> None:
        changed, slot.changed = slot.changed, asyncio.Event()
        changed.set()

    async def _wait(self, slot: _GroupSlot, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(slot.changed.wait(), max(0.0, timeout_s))

    # ---- internals: offset commits ---------------------------------------------------------

    def _check_committer(
        self,
        slot: _GroupSlot,
        member_id: str | None,
        generation: int,
        partitions: list[TopicPartition] | None = None,
    ) -> None:
        group = slot.group
        members = _member_count(slot)
        if member_id is None and generation < 0:
            if members:
                raise NonEmptyGroup(
                    f"Group '{group.group_id}' has {members} active member(s): "
                    f"offsets outside a generation can be set only while it has none."
                )
            return
        if member_id is None:
            raise InvalidGroupRequest("A commit with a generation must name its member_id.")
        if slot.consumer is not None:  # KIP-848: the member's epoch is its generation
            slot.consumer.check_member_epoch(member_id, generation, partitions)
            return
        group.touch(member_id)
        group.check_generation(generation)
        # As Kafka: members of the current generation may still commit while the group
        # prepares a rebalance (that is when they give partitions up), not once it assigns.
        if group.state == GroupState.COMPLETING_REBALANCE:
            raise RebalanceInProgress(
                f"Group '{group.group_id}' is completing a rebalance: sync, then commit."
            )

    async def _commit_loop(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            by_group: dict[str, list[_PendingCommit]] = {}
            for group_id, pending in batch:
                by_group.setdefault(group_id, []).append(pending)
            try:
                results = await self._write(by_group)
            except Exception as error:  # the whole Delta commit failed: nobody is committed
                results = dict.fromkeys(by_group, error)
            for group_id, pendings in by_group.items():
                error = results.get(group_id)
                if isinstance(error, LeadershipConflict):
                    self._drop(group_id)
                    error = NotCoordinator(f"Group '{group_id}' moved to another node; retry.")
                for pending in pendings:
                    if pending.future.done():
                        continue
                    if isinstance(error, Exception):
                        pending.future.set_exception(error)
                    else:
                        pending.future.set_result(None)

    async def _write(self, by_group: dict[str, list[_PendingCommit]]) -> dict[str, object]:
        """One Delta commit for every queued commit of every group: each row names its
        member and generation; a partition committed twice keeps the later offset."""
        entries, merged_by_group, results = [], {}, {}
        for group_id, pendings in by_group.items():
            slot = self._slots.get(group_id)
            if slot is None:
                results[group_id] = NotCoordinator(f"Group '{group_id}' moved; retry.")
                continue
            merged: dict[TopicPartition, OffsetCommit] = {}
            for pending in pendings:
                for commit in pending.commits:
                    merged[TopicPartition(commit.topic, commit.partition)] = dataclasses.replace(
                        commit, generation=pending.generation, member_id=pending.member_id
                    )
            merged_by_group[group_id] = merged
            entries.append(GroupCommit(group_id, slot.held, list(merged.values())))
        if not entries:
            return results
        now_ms = int(time.time() * 1000)
        stored = await self._blocking(self._offsets.commit_many, entries, now_ms=now_ms)
        for group_id, outcome in stored.items():
            results[group_id] = outcome
            slot = self._slots.get(group_id)
            if isinstance(outcome, Exception) or slot is None:
                continue
            for tp, commit in merged_by_group[group_id].items():
                if commit.offset == DELETED_OFFSET:
                    slot.offsets.pop(tp, None)
                    continue
                slot.offsets[tp] = CommittedOffset(
                    commit.offset,
                    commit.metadata,
                    commit.generation,
                    commit.member_id,
                    now_ms,
                    commit.leader_epoch,
                )
        return results


def _subscribed_topics(slot: _GroupSlot, partitions: dict[str, int]) -> set[str]:
    all_topics = frozenset(partitions)
    if slot.consumer is not None:
        return slot.consumer.subscribed_topics(all_topics)
    members = slot.group.members.values()
    return set().union(*(m.subscription.resolve(all_topics) for m in members))


def _classic_join(request: JoinRequest) -> ClassicJoin:
    _, metadata = request.protocol_metadata[0]
    try:
        subscription = decode_subscription(metadata)
    except BadConsumerProtocol as error:
        raise InvalidGroupRequest(f"Unreadable consumer protocol metadata: {error}") from error
    return ClassicJoin(
        member_id=request.member_id or f"{request.client_id}-{uuid.uuid4()}",
        client_id=request.client_id,
        instance_id=request.group_instance_id,
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        topics=frozenset(subscription.topics),
        owned=frozenset(subscription.owned),
        protocols=request.protocol_metadata,
    )


def _upgradable(group: Group) -> bool:
    """Kafka's rule for converting a classic group: Stable, and every member a consumer."""
    return (
        group.state == GroupState.STABLE
        and all(m.protocol_metadata is not None for m in group.members.values())
        and group.protocol_type == "consumer"
    )


def _adopted(member, group: Group) -> ConsumerMember:
    """A classic member as a consumer group's member: at its generation, with what it holds."""
    return ConsumerMember(
        member_id=member.member_id,
        client_id=member.client_id,
        client_host="",
        instance_id=member.group_instance_id,
        rack_id=None,
        rebalance_timeout_ms=member.rebalance_timeout_ms,
        last_seen_s=member.last_seen_s,
        topic_names=member.subscription.topics,
        epoch=group.generation,
        assigned=frozenset(member.assignment),
        classic_session_timeout_ms=member.session_timeout_ms,
        classic_protocol=group.protocol,
        classic_protocols=tuple((member.protocol_metadata or {}).items()),
    )


def _downgraded(member: ConsumerMember, now_s: float) -> Member:
    """A consumer group's classic member as a classic group's, with what it holds."""
    return Member(
        member_id=member.member_id,
        client_id=member.client_id,
        group_instance_id=member.instance_id,
        session_timeout_ms=member.classic_session_timeout_ms,
        rebalance_timeout_ms=member.rebalance_timeout_ms,
        subscription=Subscription(topics=member.topic_names),
        assignors=tuple(name for name, _ in member.classic_protocols),
        server_driven=False,
        last_seen_s=now_s,
        assignment=frozenset(member.assigned),
        protocol_metadata=dict(member.classic_protocols),
        assignment_bytes=encode_assignment(tuple(sorted(member.assigned))),
    )


def _member_count(slot: _GroupSlot) -> int:
    return len(slot.consumer.members if slot.consumer is not None else slot.group.members)


def _mark_dead(slot: _GroupSlot) -> None:
    slot.group.mark_dead()
    if slot.consumer is not None:
        slot.consumer.mark_dead()


def _consumer_description(consumer: ConsumerGroup, node_id: int) -> GroupDescription:
    members = tuple(
        MemberView(m.member_id, m.client_id, m.instance_id, tuple(sorted(m.assigned)))
        for m in consumer.members.values()
    )
    return GroupDescription(
        consumer.group_id,
        consumer.state.value,
        consumer.epoch,
        consumer.assignor(),
        None,
        node_id,
        members,
        CONSUMER,
        "consumer",
    )


def _relevant(group: Group, partitions: dict[str, int]) -> dict[str, int]:
    """Partition counts of the topics the group's members subscribe to now."""
    all_topics = frozenset(partitions)
    topics = set().union(*(m.subscription.resolve(all_topics) for m in group.members.values()))
    return {topic: partitions[topic] for topic in sorted(topics) if topic in partitions}


def _check_join(request: JoinRequest) -> None:
    low, high = SESSION_TIMEOUT_MS_RANGE
    if not low <= request.session_timeout_ms <= high:
        raise InvalidGroupRequest(
            f"session.timeout.ms {request.session_timeout_ms} is outside {low}..{high}."
        )
    if request.rebalance_timeout_ms < 0:
        raise InvalidGroupRequest("rebalance_timeout_ms (max.poll.interval.ms) must be >= 0.")
    if not request.assignors:
        raise InvalidGroupRequest("At least one assignor is required.")


def _check_commits(commits: Sequence[OffsetCommit]) -> None:
    for commit in commits:
        if commit.offset < 0 or commit.partition < 0:
            raise InvalidGroupRequest(
                f"Offset {commit.offset} for {commit.topic}/{commit.partition}: offsets and "
                f"partitions must be >= 0."
            )


def _check_exists(group_id: str, slot: _GroupSlot) -> None:
    """GroupNotFound unless the group has offsets or members, or had members since this node
    took it: a group whose offsets were all deleted lives on empty, as in Kafka until its
    empty group expires.

    Raises:
        GroupNotFound: none of these.
    """
    group = slot.group
    if slot.consumer is not None or slot.offsets:
        return
    if group.state == GroupState.EMPTY and group.protocol_type is None:
        raise GroupNotFound(group_id)
