"""Leader per partition: which node writes a partition, and this node's partition writers.

A node writes a partition only after committing itself as its leader (a compare-and-set on the
partition table's `leader` txn, storage_layout/FORMAT.md §7), and every append asserts that
leadership, so a deposed or paused leader can never commit again. Liveness (api/core/cluster)
only chooses who *should* lead: the live leader keeps a partition; a dead leader's partitions go
to the preferred live node; a leader that is not preferred hands its partition over.

Concurrency contract: coroutines run on the broker's event loop; one asyncio lock per partition
serializes taking, handing over and opening writers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass

from api.core import metrics
from api.core.cluster import Cluster, preferred_node
from api.core.errors import NotLeader
from api.core.writer import CommitLimits, PartitionWriter
from storage_layout import paths
from storage_layout.errors import LeadershipConflict, StorageError
from storage_layout.log import DeltaPartitionLog, Leadership, TableReader
from storage_layout.topic_config import TopicConfig

log = logging.getLogger("lakelog.leaders")

PartitionKey = tuple[str, int]
# Partition tables a maintenance round reads for the first time, at most (each is a table
# load; requests take the others when they come).
UNREAD_PER_ROUND_MAX = 64


@dataclass(frozen=True, slots=True)
class Route:
    """Where a partition's writes go: this node's writer, or the leader's URL."""

    writer: PartitionWriter | None
    leader_id: int | None
    url: str | None


class Leaders:
    """This node's partition writers and its leadership decisions."""

    def __init__(
        self,
        *,
        root: str,
        cluster: Cluster,
        executor: Executor,
        limits: CommitLimits,
        tail_records_max: int,
        config_of: Callable[[str], TopicConfig],
        fenced: bool = True,
        fault_point: str | None = None,
        housekeeping_slots: asyncio.Semaphore | None = None,
    ) -> None:
        self._fenced = fenced
        # Bounds the housekeeping passes of all the node's writers running at once.
        self._housekeeping_slots = housekeeping_slots
        self._fault_point = fault_point
        self._root = root
        self._cluster = cluster
        self._executor = executor
        self._limits = limits
        self._tail_records_max = tail_records_max
        self._config_of = config_of
        self._writers: dict[PartitionKey, PartitionWriter] = {}
        self._locks: dict[PartitionKey, asyncio.Lock] = {}
        self._hints: dict[PartitionKey, tuple[int, float]] = {}  # leader id, when learned
        self._tables: dict[PartitionKey, TableReader] = {}  # table states for leader reads
        # The leader each partition's table named when this node last read it (None: never
        # led), while the live nodes stay `_members`. Maintenance reads a table again only
        # when that leader is dead or the membership changed, so with a stable membership
        # an idle partition costs the store nothing.
        self._last_read: dict[PartitionKey, int | None] = {}
        self._members: frozenset[int] = frozenset()

    @property
    def node_id(self) -> int:
        return self._cluster.node_id

    async def _blocking(self, function, *args, **kwargs):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: function(*args, **kwargs))

    # ---- routing ---------------------------------------------------------------------------

    async def route(self, topic: str, partition: int) -> Route:
        """This node's writer if it leads (taking the partition if it should), else the
        leader's URL. Raises NotLeader when the leader is unknown or unreachable."""
        key = (topic, partition)
        writer = self._writers.get(key)
        if writer is not None and not writer.deposed:
            return Route(writer, self.node_id, None)
        hinted = self._fresh_hint(key)
        if hinted is None or hinted == self.node_id:
            try:
                return Route(await self.writer(topic, partition), self.node_id, None)
            except NotLeader as error:
                hinted = error.leader_id
        url = self._cluster.url(hinted) if hinted is not None else None
        if url is None:
            raise NotLeader(f"No live leader for {topic}/{partition} yet; retry shortly.")
        return Route(None, hinted, url)

    def led_count(self) -> int:
        """Partitions this node leads now (its writers not deposed)."""
        return sum(1 for writer in list(self._writers.values()) if not writer.deposed)

    def writer_here(self, topic: str, partition: int) -> PartitionWriter | None:
        """This node's live writer of the partition, if it has one (no take-over)."""
        writer = self._writers.get((topic, partition))
        return None if writer is None or writer.deposed else writer

    def _fresh_hint(self, key: PartitionKey) -> int | None:
        hint = self._hints.get(key)
        if hint is None:
            return None
        leader_id, learned_at = hint
        # Trusted for a lease while its node lives (and the membership stays: maintenance
        # drops every hint when it changes): each re-learning is a table read, a LIST and
        # GETs on an object store, which made every read on a follower cost ~0.5 s there.
        fresh = time.monotonic() - learned_at < self._cluster.settings.lease_ms / 1000
        return leader_id if fresh and self._cluster.is_alive(leader_id) else None

    def forget(self, topic: str, partition: int) -> None:
        """Drop what this node believes about a partition's leader (e.g. a forward failed)."""
        self._hints.pop((topic, partition), None)

    def known_leader(self, topic: str, partition: int) -> int | None:
        key = (topic, partition)
        if key in self._writers and not self._writers[key].deposed:
            return self.node_id
        hint = self._hints.get(key)
        if hint is None or not self._cluster.is_alive(hint[0]):
            return None
        return hint[0]

    async def leader_of(self, topic: str, partition: int) -> int | None:
        """The partition's current leader as its table names it (None: never led)."""
        known = self.known_leader(topic, partition)
        if known is not None:
            return known
        leader = await self._read_leader((topic, partition))
        return None if leader is None else leader.node_id

    # ---- taking a partition ----------------------------------------------------------------

    async def writer(self, topic: str, partition: int) -> PartitionWriter:
        """This node's writer for the partition, after committing itself as leader.

        Raises:
            NotLeader: another live node leads it, or should take it (its id is attached).
        """
        key = (topic, partition)
        async with self._locks.setdefault(key, asyncio.Lock()):
            writer = self._writers.get(key)
            if writer is not None and not writer.deposed:
                return writer
            self._writers.pop(key, None)
            return await self._take(topic, partition)

    async def _take(self, topic: str, partition: int) -> PartitionWriter:
        key = (topic, partition)
        current = await self._read_leader(key)
        target = self._choose_leader(topic, partition, current)
        self._hints[key] = (target, time.monotonic())
        if target != self.node_id:
            raise NotLeader(f"Node {target} leads {topic}/{partition}.", leader_id=target)
        if not self._cluster.can_lead():
            raise NotLeader("This node cannot renew its liveness record, so it does not write.")
        uri = paths.partition_table_uri(self._root, topic, partition)
        try:
            partition_log = await self._blocking(
                _open_as_leader,
                uri,
                self.node_id,
                current,
                tail_records_max=self._tail_records_max,
                fenced=self._fenced,
                # The table _read_leader just refreshed: one load per take, not two. Handed
                # over, not shared (the log keeps it as its own snapshot).
                loaded=self._tables.pop(key, None),
            )
        except LeadershipConflict as error:
            self._hints.pop(key, None)
            raise NotLeader(f"Another node took {topic}/{partition} first; retry.") from error
        writer = PartitionWriter(
            partition_log,
            config=lambda: self._config_of(topic),
            executor=self._executor,
            limits=self._limits,
            can_write=self._cluster.can_lead if self._fenced else lambda: True,
            fault_point=self._fault_point,
            topic=topic,
            housekeeping_slots=self._housekeeping_slots,
        )
        self._writers[key] = writer
        self._last_read[key] = self.node_id
        log.info("node %s leads %s/%s", self.node_id, topic, partition)
        metrics.LEADERSHIP_CHANGES.labels("taken").inc()
        return writer

    def _choose_leader(self, topic: str, partition: int, current: Leadership | None) -> int:
        """A live leader keeps its partition; this node re-takes what an earlier incarnation of
        it led (fencing that incarnation); otherwise the preferred live node takes it."""
        if current is not None and current.node_id == self.node_id:
            return self.node_id
        if current is not None and self._cluster.is_alive(current.node_id):
            return current.node_id
        return self._cluster.preferred(topic, partition)

    async def _read_leader(self, key: PartitionKey) -> Leadership | None:
        leader = await self._read_leader_from_table(key)
        self._last_read[key] = None if leader is None else leader.node_id
        return leader

    async def _read_leader_from_table(self, key: PartitionKey) -> Leadership | None:
        reader = self._tables.get(key)
        if reader is not None:
            try:
                await self._blocking(reader.refresh)
                return reader.leader()
            except StorageError:
                # The cached state can outlive its table: the topic was deleted and created
                # again (a maintenance round may have cached it while the delete ran).
                self._tables.pop(key, None)
        uri = paths.partition_table_uri(self._root, *key)
        reader = self._tables[key] = await self._blocking(TableReader.read, uri)
        return reader.leader()

    # ---- keeping leadership where it belongs -----------------------------------------------

    async def maintain(self, partitions: list[PartitionKey]) -> None:
        """One round: hand partitions to their preferred node, take dead leaders' partitions."""
        members = frozenset(self._cluster.live_nodes())
        if members != self._members:
            self._members = members
            self._last_read.clear()  # someone died or joined: look at every table once
            self._hints.clear()
        for key, writer in list(self._writers.items()):
            if writer.deposed:
                self._writers.pop(key, None)
                self._last_read.pop(key, None)
                metrics.LEADERSHIP_CHANGES.labels("lost").inc()
                continue
            preferred = self._cluster.preferred(*key)
            if preferred != self.node_id:
                await self._hand_over(key, preferred)
        unread = 0  # a node starting under a thousand partitions reads them over rounds
        for key in partitions:
            if key in self._writers or self._cluster.preferred(*key) != self.node_id:
                continue
            if key not in self._last_read:
                unread += 1
                if unread > UNREAD_PER_ROUND_MAX:
                    continue
            await self._maybe_take_from_dead(key)

    async def _maybe_take_from_dead(self, key: PartitionKey) -> None:
        if key in self._last_read:
            known = self._last_read[key]
            if known is None or self._cluster.is_alive(known):
                return  # never led (a produce takes it), or led by a live node
        try:
            current = await self._read_leader(key)
            if current is not None and not self._cluster.is_alive(current.node_id):
                await self.writer(*key)
        except (NotLeader, StorageError) as error:
            log.info("not taking %s/%s now: %s", *key, error)

    async def _hand_over(self, key: PartitionKey, to_node: int) -> None:
        async with self._locks.setdefault(key, asyncio.Lock()):
            writer = self._writers.pop(key, None)
            if writer is None:
                return
            await writer.close()  # commits what was queued first
            held = writer.log.held_leadership
            try:
                await self._blocking(
                    writer.log.commit_leadership, to_node, expected=held, hold=False
                )
            except (LeadershipConflict, StorageError) as error:
                log.info("hand-over of %s/%s to %s failed: %s", *key, to_node, error)
            self._hints[key] = (to_node, time.monotonic())
            self._last_read[key] = to_node
            log.info("node %s handed %s/%s to node %s", self.node_id, *key, to_node)
            metrics.LEADERSHIP_CHANGES.labels("handed").inc()

    # ---- closing ---------------------------------------------------------------------------

    async def close_topic(self, topic: str) -> None:
        for key in [key for key in self._writers if key[0] == topic]:
            await self._writers.pop(key).close()
        for key in [key for key in self._tables if key[0] == topic]:
            self._tables.pop(key, None)
            self._hints.pop(key, None)
        for key in [key for key in self._last_read if key[0] == topic]:
            self._last_read.pop(key, None)

    async def close(self) -> None:
        """Stop writing; hand each partition to another live node so failover is immediate."""
        others = [node for node in self._cluster.live_nodes() if node != self.node_id]
        for key in list(self._writers):
            if others:
                await self._hand_over(key, preferred_node(others, *key))
            else:
                await self._writers.pop(key).close()


def _open_as_leader(
    uri: str,
    node_id: int,
    current: Leadership | None,
    *,
    tail_records_max: int,
    fenced: bool,
    loaded: TableReader | None,
) -> DeltaPartitionLog:
    """The partition's log, opened with `node_id` committed as its leader if the leader is
    still `current`, in one trip to the storage threads (each trip is a GIL hand-over, a third
    of a take's CPU when a restarted node takes a thousand partitions at once).

    A table from before the added columns gains them too, before any commit of the new writer
    is in flight (its group commit stages the next file while the last one commits).

    Raises:
        LeadershipConflict: another node took the partition first.
    """
    partition_log = DeltaPartitionLog.open(
        uri, tail_records_max=tail_records_max, fenced=fenced, loaded=loaded
    )
    partition_log.commit_leadership(node_id, expected=current, hold=True)
    partition_log.ensure_added_columns()
    return partition_log
