"""Follower fetching (Kafka's KIP-392, "fetch from the closest replica"): a node that does not
lead a partition serves its committed records straight from the shared table instead of
proxying the read to the leader, so read throughput grows with the nodes.

Only what this node has seen committed is served here: a fetch at or past its view of the high
watermark (the head, where consumers long-poll) goes to the leader, whose in-memory tail and
commit events stay the fast path for the newest records. The view is refreshed at most every
REFRESH_MS per partition (one existence check of the next commit, then a reload when it moved),
so an idle follower costs the store nothing and a busy one a bounded number of requests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from storage_layout import paths
from storage_layout.errors import OffsetOutOfRange, StorageError
from storage_layout.log import DeltaPartitionLog
from storage_layout.records import FetchResult, Isolation

REFRESH_MS = 500
PartitionKey = tuple[str, int]
Blocking = Callable[..., Awaitable]


class FollowerReads:
    """Read-only partition logs of the partitions this node does not lead."""

    def __init__(self, root: str, blocking: Blocking) -> None:
        self._root = root
        self._blocking = blocking
        self._logs: dict[PartitionKey, DeltaPartitionLog] = {}
        self._refreshed_at: dict[PartitionKey, float] = {}
        self._locks: dict[PartitionKey, asyncio.Lock] = {}

    async def read(
        self,
        topic: str,
        partition: int,
        *,
        offset: int,
        records_max: int,
        bytes_max: int,
        isolation: Isolation = Isolation.PLAIN,
    ) -> FetchResult | None:
        """Committed records from `offset`, or None when the leader should answer: the
        offset is at or past this node's view of the high watermark, below its log start, or
        the table could not be read here."""
        key = (topic, partition)
        try:
            log = await self._fresh_log(key)
            bounds = log.bounds()
            if not bounds.log_start_offset <= offset < bounds.high_watermark:
                return None
            result = await self._blocking(
                log.read,
                from_offset=offset,
                records_max=records_max,
                bytes_max=bytes_max,
                isolation=isolation,
            )
        except (StorageError, OffsetOutOfRange):
            self._logs.pop(key, None)  # open afresh next time; the leader answers this one
            return None
        if not result.records.num_rows and result.next_offset is None:
            return None  # at the last stable offset here: the leader's long poll answers
        return result

    async def read_committed(
        self, topic: str, partition: int, *, offset: int, records_max: int, bytes_max: int
    ) -> FetchResult:
        """Records from `offset`, which the caller knows is committed (a consumer read it):
        the table is read again first when this node's view ends before it.

        Raises:
            OffsetOutOfRange: `offset` is outside the partition's bounds even after that.
        """
        key = (topic, partition)
        log = await self._fresh_log(key)
        if offset >= log.bounds().high_watermark:
            async with self._locks[key]:
                await self._blocking(log.catch_up)
                self._refreshed_at[key] = time.monotonic()
        return await self._blocking(
            log.read, from_offset=offset, records_max=records_max, bytes_max=bytes_max
        )

    def forget_topic(self, topic: str) -> None:
        """Drop the logs of a deleted topic."""
        for key in [key for key in self._logs if key[0] == topic]:
            self._logs.pop(key, None)
            self._refreshed_at.pop(key, None)

    async def _fresh_log(self, key: PartitionKey) -> DeltaPartitionLog:
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            log = self._logs.get(key)
            now = time.monotonic()
            if log is None:
                uri = paths.partition_table_uri(self._root, *key)
                log = await self._blocking(DeltaPartitionLog.open, uri, tail_records_max=0)
                self._logs[key] = log
            elif now - self._refreshed_at.get(key, 0.0) >= REFRESH_MS / 1000:
                await self._blocking(log.catch_up)
            else:
                return log
            self._refreshed_at[key] = now
            return log
