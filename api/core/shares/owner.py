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
from collections.abc import Awaitable, Callable, Sequence
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


# (from offset, records at most) -> what the log holds there
Reader = Callable[[int, int], Awaitable[LogRead]]


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
    ) -> None:
        self._states = states
        self._node_id = node_id
        self._blocking = blocking
        self._clock_ms = clock_ms
        self._held: dict[tuple[str, int], Leadership] = {}
        self._partitions: dict[ShareKey, SharePartition] = {}
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}

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
            changed, acquired = part.acquire(
                member_id,
                found.offsets,
                found.read_to,
                records_max=records_max,
                limits=limits,
                now_ms=self._clock_ms(),
            )
            if acquired or placed or changed != part:
                await self._store(key, changed)
            return acquired

    async def acknowledge(
        self,
        key: ShareKey,
        member_id: str,
        acknowledgements: Sequence[tuple[int, AcknowledgeType]],
        *,
        limits: Limits,
    ) -> list[Archived]:
        """Apply a member's acknowledgements, all or none, stored before this returns.

        Raises:
            InvalidRecordState: an acknowledgement of a record the member does not hold.
            NotShareOwner: another node owns the topic partition's share states now.
        """
        async with self._lock(key):
            part = await self._expired(key, limits)
            if part is None:  # nothing was ever acquired here: nothing can be acknowledged
                part = SharePartition.starting_at(0)
            changed, archived = part.acknowledge(
                member_id, acknowledgements, limits=limits, now_ms=self._clock_ms()
            )
            if changed != part:
                await self._store(key, changed)
            return archived

    async def release_member(self, key: ShareKey, member_id: str, *, limits: Limits) -> None:
        """A member left the group: what it held of the share partition is available again."""
        async with self._lock(key):
            part = await self._expired(key, limits)
            if part is None:
                return
            changed, _ = part.release_member(member_id, limits=limits)
            if changed is not part:
                await self._store(key, changed)

    async def describe(self, key: ShareKey, *, limits: Limits) -> SharePartition | None:
        """The share partition as this node holds it (loaded from the table if need be)."""
        async with self._lock(key):
            return await self._loaded(key, limits)

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
        part, _ = part.expire_locks(limits=limits, now_ms=self._clock_ms())
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
        self._partitions[key] = part
        return part

    async def _store(self, key: ShareKey, part: SharePartition) -> None:
        """Commit `part` as the share partition's state under this node's fence, then adopt it.

        Raises:
            NotShareOwner: the fence was taken by another node (nothing stored).
        """
        held = await self._ownership(key)
        state = ShareState(key.group_id, key.topic_id, part.start_offset, tuple(part.batches()))
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
        self._partitions[key] = part

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
        self._held.pop((topic, partition), None)
        self._partitions = {
            k: p
            for k, p in self._partitions.items()
            if (k.topic, k.partition) != (topic, partition)
        }
