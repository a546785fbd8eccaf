"""A partition's state and administration, asked of its leader: bounds, size, DeleteRecords,
offsets by time, and who leads it. The reads of records are the broker's (fetch)."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Awaitable, Callable

from api.core.cluster import Cluster
from api.core.errors import check_leader_epoch
from api.core.leaders import Leaders
from api.core.topics import Topics
from storage_layout import paths
from storage_layout.errors import OffsetOutOfRange
from storage_layout.leader_epochs import UNDEFINED_EPOCH, LeaderEpochs
from storage_layout.log import DeltaPartitionLog, TableReader
from storage_layout.producer_state import ActiveProducer
from storage_layout.records import PartitionBounds

DELETE_TO_HIGH_WATERMARK = -1  # Kafka's DeleteRecords offset for "everything so far"
UNKNOWN_BYTES = -1  # Kafka's DescribeLogDirs figure for a size it does not know
CATCH_UP_WAIT_S = 5.0


class Partitions:
    """The node's view of its partitions (each answered by its leader's writer)."""

    def __init__(
        self,
        *,
        root: str,
        topics: Topics,
        cluster: Cluster,
        leaders: Leaders,
        blocking: Callable[..., Awaitable],
    ) -> None:
        self._root = root
        self._topics = topics
        self._cluster = cluster
        self._leaders = leaders
        self._blocking = blocking

    async def bounds(
        self, topic_name: str, partition: int, *, stable: bool = False
    ) -> PartitionBounds:
        """log_start_offset and high watermark from the leader's loaded snapshot (O(1)), and
        the last stable offset when `stable` (from the transaction index: reads the files
        written since it was last brought up to date, usually none).

        Raises:
            NotLeader: another node leads the partition (routes proxy to it first).
        """
        (await self._topics.get(topic_name)).check_partition(partition)
        writer = await self._leaders.writer(topic_name, partition)
        writer.notice_foreign_commits()  # the next answer includes other writers' appends
        if stable:
            return await self._blocking(writer.log.stable_bounds)
        return writer.log.bounds()

    async def size_bytes(self, topic_name: str, partition: int) -> int:
        """The Parquet bytes of the partition's live files, from the leader's snapshot.

        Raises:
            NotLeader: another node leads the partition (routes proxy to it first).
        """
        (await self._topics.get(topic_name)).check_partition(partition)
        return (await self._leaders.writer(topic_name, partition)).log.size_bytes()

    async def delete_records(self, topic_name: str, partition: int, offset: int) -> int:
        """Kafka's DeleteRecords on the partition's leader: the log starts at `offset` (-1:
        the high watermark) once this returns; returns the new log start.

        Raises:
            NotLeader: another node leads the partition.
            OffsetOutOfRange: `offset` is above the high watermark.
        """
        (await self._topics.get(topic_name)).check_partition(partition)
        writer = await self._leaders.writer(topic_name, partition)
        if offset == DELETE_TO_HIGH_WATERMARK:
            offset = writer.log.bounds().high_watermark
        elif offset < 0:  # Kafka answers OFFSET_OUT_OF_RANGE here too
            bounds = writer.log.bounds()
            raise OffsetOutOfRange(offset, bounds.log_start_offset, bounds.high_watermark)
        uri = paths.partition_table_uri(self._root, topic_name, partition)
        start = await self._blocking(_advance_log_start, uri, offset)
        writer.request_catch_up()  # this node's readers see the new start before the answer
        deadline = time.monotonic() + CATCH_UP_WAIT_S
        while writer.log.bounds().log_start_offset < start and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return start

    async def offset_for_timestamp(
        self, topic_name: str, partition: int, timestamp_ms: int
    ) -> int | None:
        """Kafka's ListOffsets by time: the earliest offset with timestamp >= timestamp_ms."""
        (await self._topics.get(topic_name)).check_partition(partition)
        log = (await self._leaders.writer(topic_name, partition)).log
        return await self._blocking(log.offset_for_timestamp, timestamp_ms)

    async def offset_of_max_timestamp(
        self, topic_name: str, partition: int
    ) -> tuple[int, int] | None:
        """Kafka's ListOffsets MAX_TIMESTAMP: (offset, timestamp ms) of the first record with
        the largest timestamp, None when the partition has no records."""
        (await self._topics.get(topic_name)).check_partition(partition)
        log = (await self._leaders.writer(topic_name, partition)).log
        return await self._blocking(log.offset_of_max_timestamp)

    async def leader_epochs(self, topic_name: str, partition: int) -> tuple[int, LeaderEpochs]:
        """(the current leader epoch, where each epoch began) from the leader's log.

        Raises:
            NotLeader: another node leads the partition.
        """
        (await self._topics.get(topic_name)).check_partition(partition)
        log = (await self._leaders.writer(topic_name, partition)).log
        held = log.held_leadership
        return (UNDEFINED_EPOCH if held is None else held.epoch), log.leader_epochs()

    async def epoch_end_offset(
        self, topic_name: str, partition: int, *, current_leader_epoch: int, leader_epoch: int
    ) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch: (the largest epoch <= `leader_epoch`, where it ends),
        from the table as it is now (a record appended past the leader's snapshot must not
        look truncated to a consumer that read it).

        Raises:
            NotLeader: another node leads it. FencedLeaderEpoch, UnknownLeaderEpoch: the
            requester's `current_leader_epoch` is not the partition's.
        """
        (await self._topics.get(topic_name)).check_partition(partition)
        await self._leaders.writer(topic_name, partition)
        uri = paths.partition_table_uri(self._root, topic_name, partition)
        reader = await self._blocking(TableReader.read, uri)
        leader = reader.leader()
        current = UNDEFINED_EPOCH if leader is None else leader.epoch
        check_leader_epoch(current_leader_epoch, current)
        return reader.leader_epochs().end_offset_for(
            leader_epoch, current_epoch=current, log_end_offset=reader.high_watermark()
        )

    def leader_epoch_for_clients(self, topic_name: str, partition: int) -> int:
        """The partition's leader epoch where this node leads it, else UNDEFINED_EPOCH (the
        leader's Metadata tells it). No I/O."""
        writer = self._leaders.writer_here(topic_name, partition)
        held = None if writer is None else writer.log.held_leadership
        return UNDEFINED_EPOCH if held is None else held.epoch

    async def active_producers(self, topic_name: str, partition: int) -> list[ActiveProducer]:
        """Kafka's DescribeProducers: the producers the partition's leader remembers.

        Raises:
            NotLeader: another node leads the partition.
        """
        (await self._topics.get(topic_name)).check_partition(partition)
        writer = await self._leaders.writer(topic_name, partition)
        return await writer.active_producers()

    async def leader(self, topic_name: str, partition: int) -> int | None:
        """The node that leads the partition (None if it has never been written)."""
        (await self._topics.get(topic_name)).check_partition(partition)
        return await self._leaders.leader_of(topic_name, partition)

    async def remote_leader_url(self, topic_name: str, partition: int) -> str | None:
        """The leader's URL when another node leads the partition (None: served here)."""
        (await self._topics.get(topic_name)).check_partition(partition)
        route = await self._leaders.route(topic_name, partition)
        return route.url

    def preferred_leader(self, topic_name: str, partition: int) -> int:
        """The live node that should lead the partition (a leader elsewhere hands it over)."""
        return self._cluster.preferred(topic_name, partition)

    def storage_root(self) -> tuple[str, int, int]:
        """(root, total bytes, usable bytes) of the storage root: the disk's figures for a
        local root, UNKNOWN_BYTES for an object store (no capacity to speak of)."""
        if not paths.is_local(self._root):
            return self._root, UNKNOWN_BYTES, UNKNOWN_BYTES
        usage = shutil.disk_usage(self._root)
        return self._root, usage.total, usage.free

    def leader_for_clients(self, topic_name: str, partition: int) -> int:
        """The node clients should send the partition's writes to: its known live leader,
        else the node that should lead it (which takes it at the first request). No I/O."""
        known = self._leaders.known_leader(topic_name, partition)
        if known is not None:
            return known
        return self._cluster.preferred(topic_name, partition)


def _advance_log_start(uri: str, offset: int) -> int:
    """DeleteRecords' commit, on a log of its own: the writer's stays with its task."""
    return DeltaPartitionLog.open(uri, tail_records_max=0).advance_log_start(offset)
