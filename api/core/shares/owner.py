"""The share partitions a node owns (KIP-932's share-partition leader): for each topic partition
it leads, every share group's SharePartition in memory, each change stored in
`_meta/share_states` before it takes effect (FORMAT.md §19).

An acquisition is stored before its records are handed out, an acknowledgement before it is
answered: a crash loses neither, and a record's delivery count never goes back. The node
takes a topic partition's share states with the table's fence (`share:<topic>/<partition>`)
the first time it serves them; if another node has taken them since, its commit is refused and
the caller is told this node no longer owns them (NotShareOwner: the partition moved).

Concurrency contract: coroutines on the broker's event loop; one asyncio lock per topic
partition serializes its share groups' changes and commits; table I/O runs on `blocking`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from api.core.errors import NotLeader
from api.core.shares.share_partition import (
    AcknowledgeType,
    Acquired,
    Archived,
    Limits,
    SharePartition,
)
from storage_layout.errors import LeadershipConflict
from storage_layout.log.leadership import Leadership
from storage_layout.meta.share_states import DELETED_STATE as DELETED
from storage_layout.meta.share_states import ShareCommit, ShareState, ShareStates

Blocking = Callable[..., Awaitable]


@dataclass(frozen=True, slots=True)
class ShareKey:
    """One share partition: a group's view of one incarnation of a topic partition."""

    group_id: str
    topic: str
    partition: int
    topic_id: str


@dataclass(frozen=True, slots=True)
class LogRead:
    """What a read of the topic partition found from an offset: the offsets of deliverable
    records (no markers, no aborted records), and where the read ended (exclusive)."""

    offsets: Sequence[int]
    read_to: int
    log_start_offset: int = 0  # the log's start: everything before it is settled


# (from offset, records at most) -> what the log holds there
Reader = Callable[[int, int], Awaitable[LogRead]]
# Records archived after delivery (rejected, at the delivery limit), told before the change
# that archives them is stored: the dead letters (at least once: a failed store repeats them).
ArchivedHook = Callable[[ShareKey, list[Archived]], Awaitable[None]]


class NotShareOwner(NotLeader):
    """Another node took this topic partition's share states: it leads the partition now."""


class ShareOwner:
    """This node's share partitions, stored before they change."""

    def __init__(
        self,
        *,
        states: ShareStates,
        node_id: int,
        blocking: Blocking,
        clock_ms: Callable[[], int],
        on_archived: ArchivedHook | None = None,
    ) -> None:
        self._states = states
        self._on_archived = on_archived
        self._node_id = node_id
        self._blocking = blocking
        self._clock_ms = clock_ms
        self._held: dict[tuple[str, int], Leadership] = {}
        self._partitions: dict[ShareKey, SharePartition] = {}
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}
        # archived in memory (lock expiry, a load), told with the next stored change
        self._unsent: dict[ShareKey, list[Archived]] = {}

    # ---- the share partitions' operations --------------------------------------------------

    async def acquire(
        self,
        key: ShareKey,
        member_id: str,
        *,
        records_max: int,
        limits: Limits,
        read: Reader,
        start_offset: Callable[[], Awaitable[int]],
    ) -> list[Acquired]:
        """Lock up to `records_max` records for `member_id` (SharePartition.acquire), stored
        before they are returned. `start_offset` places a share partition that has no state
        yet (share.auto.offset.reset); `read` reads the log.

        Raises:
            NotShareOwner: another node owns the topic partition's share states now.
        """
        async with self._lock(key):
            part = await self._expired(key, limits)
            placed = part is None  # Kafka persists where a new share partition starts
            if placed:
                part = SharePartition.starting_at(await start_offset())
            found = await read(part.next_fetch_offset(), records_max)
            part = part.moved_to(found.log_start_offset)
            changed, acquired = part.acquire(
                member_id,
                found.offsets,
                found.read_to,
                records_max=records_max,
                limits=limits,
                now_ms=self._clock_ms(),
            )
            if acquired or placed or changed != part or self._unsent.get(key):
                await self._store(key, changed)
            return acquired

    async def acknowledge(
        self,
        key: ShareKey,
        member_id: str,
        acknowledgements: Sequence[tuple[int, AcknowledgeType]],
        *,
        limits: Limits,
        delivery_counts: Mapping[int, int] | None = None,
    ) -> list[Archived]:
        """Apply a member's acknowledgements, all or none, stored before this returns
        (`delivery_counts`: SharePartition.acknowledge's).

        Raises:
            InvalidRecordState: an acknowledgement of a record the member does not hold.
            NotShareOwner: another node owns the topic partition's share states now.
        """
        async with self._lock(key):
            await self._ownership(key)
            # before the expired locks are released, so that acknowledging a record whose
            # lock expired is refused as such (not as "available")
            part = await self._loaded(key, limits)
            if part is None:  # nothing was ever acquired here: nothing can be acknowledged
                part = SharePartition.starting_at(0)
            now_ms = self._clock_ms()
            changed, archived = part.acknowledge(
                member_id,
                acknowledgements,
                limits=limits,
                now_ms=now_ms,
                delivery_counts=delivery_counts,
            )
            changed, expired = changed.expire_locks(limits=limits, now_ms=now_ms)
            if changed != part:
                await self._store(key, changed, [*archived, *expired])
            return archived

    async def release_member(self, key: ShareKey, member_id: str, *, limits: Limits) -> None:
        """A member left the group: what it held of the share partition is available again."""
        async with self._lock(key):
            part = await self._expired(key, limits)
            if part is None:
                return
            changed, archived = part.release_member(member_id, limits=limits)
            if changed is not part:
                await self._store(key, changed, archived)

    async def reset(self, key: ShareKey, start_offset: int | None) -> None:
        """An administrator's reset: the share partition starts over at `start_offset` with
        nothing in flight; None deletes its state (it starts as a new one would). Stored
        before this returns; records acquired before are settled by it (their acknowledgements
        are refused).

        Raises:
            NotShareOwner: another node owns the topic partition's share states now.
        """
        if start_offset is not None and start_offset < 0:
            raise ValueError(f"a share partition starts at 0 or later, not {start_offset}")
        async with self._lock(key):
            if start_offset is None:
                await self._commit(key, ShareState(key.group_id, key.topic_id, DELETED, ()))
                self._partitions.pop(key, None)
                self._unsent.pop(key, None)
                return
            part = SharePartition.starting_at(start_offset)
            self._unsent.pop(key, None)  # not archived: an administrator moved past them
            await self._store(key, part)

    def held(self) -> list[tuple[ShareKey, SharePartition]]:
        """The share partitions in this node's memory (those it served since it took them),
        without I/O: the metrics read them."""
        return sorted(self._partitions.items(), key=lambda item: dataclasses.astuple(item[0]))

    def series(self) -> list[tuple[str, str, int, int, dict[str, int]]]:
        """(group, topic, partition, start offset, records by state) of `held()` (metrics)."""
        now_ms = self._clock_ms()
        return [
            (key.group_id, key.topic, key.partition, part.start_offset, part.counts(now_ms))
            for key, part in self.held()
        ]

    async def stored_groups(self) -> list[str]:
        """The share groups with a stored state (any node's)."""
        return await self._blocking(self._states.groups)

    async def stored_partitions(self, group_id: str) -> dict[tuple[str, int], ShareState]:
        """The group's stored share states by (topic, partition), every node's."""
        return await self._blocking(self._states.of_group, group_id)

    # ---- internals -------------------------------------------------------------------------

    def _lock(self, key: ShareKey) -> asyncio.Lock:
        return self._locks.setdefault((key.topic, key.partition), asyncio.Lock())

    async def _expired(self, key: ShareKey, limits: Limits) -> SharePartition | None:
        """The share partition, owned by this node and read after it took the ownership, with
        its expired locks released (in memory: stored with its next change; a crash
        meanwhile makes them available all the same)."""
        await self._ownership(key)
        part = await self._loaded(key, limits)
        if part is None:
            return None
        part, archived = part.expire_locks(limits=limits, now_ms=self._clock_ms())
        part, spent = part.past_limit(limits=limits)
        self._unsent.setdefault(key, []).extend([*archived, *spent])
        self._partitions[key] = part
        return part

    async def _loaded(self, key: ShareKey, limits: Limits) -> SharePartition | None:
        part = self._partitions.get(key)
        if part is not None:
            return part
        stored = await self._blocking(self._states.load, key.topic, key.partition, key.topic_id)
        state = stored.get(key.group_id)
        if state is None:
            return None
        part = SharePartition.from_batches(state.start_offset, state.batches, limits)
        self._unsent[key] = SharePartition.archived_on_load(state.batches, limits)
        self._partitions[key] = part
        return part

    async def _store(
        self, key: ShareKey, part: SharePartition, archived: Sequence[Archived] = ()
    ) -> None:
        """Commit `part` as the share partition's state under this node's fence, then adopt it;
        the records it archives are told first (`on_archived`).

        Raises:
            NotShareOwner: the fence was taken by another node (nothing stored).
        """
        told = [*self._unsent.get(key, ()), *archived]
        if told and self._on_archived is not None:
            await self._on_archived(key, told)
        state = ShareState(key.group_id, key.topic_id, part.start_offset, tuple(part.batches()))
        await self._commit(key, state)
        self._unsent.pop(key, None)
        self._partitions[key] = part

    async def _commit(self, key: ShareKey, state: ShareState) -> None:
        """Raises NotShareOwner: the fence was taken by another node (nothing stored)."""
        held = await self._ownership(key)
        commit = ShareCommit(key.topic, key.partition, held, [state])
        outcome = (await self._blocking(self._states.commit_many, [commit]))[
            (key.topic, key.partition)
        ]
        if isinstance(outcome, LeadershipConflict):
            self._forget(key.topic, key.partition)
            raise NotShareOwner(
                f"Another node owns the share states of {key.topic}/{key.partition} now; "
                "ask the partition's leader."
            ) from outcome

    async def _ownership(self, key: ShareKey) -> Leadership:
        where = (key.topic, key.partition)
        held = self._held.get(where)
        if held is not None:
            return held
        current = await self._blocking(self._states.owner, key.topic, key.partition)
        try:
            held = await self._blocking(
                self._states.take_partition,
                key.topic,
                key.partition,
                self._node_id,
                expected=current,
            )
        except LeadershipConflict as error:
            raise NotShareOwner(
                f"Another node took the share states of {key.topic}/{key.partition} first."
            ) from error
        self._forget(*where)  # what was read before the take may predate the last owner's
        self._held[where] = held
        return held

    def _forget(self, topic: str, partition: int) -> None:
        where = (topic, partition)
        self._held.pop((topic, partition), None)
        self._unsent = {k: a for k, a in self._unsent.items() if (k.topic, k.partition) != where}
        self._partitions = {
            k: p for k, p in self._partitions.items() if (k.topic, k.partition) != where
        }
