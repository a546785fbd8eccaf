"""PartitionWriter: the single writer of one partition, with group commit.

Produce requests queue their records; whenever the writer is free it takes everything queued
(bounded by records and bytes), appends it in one Delta commit with the offset CAS, then resolves
every waiting request with its own base offset and wakes the long-polling fetchers.

Concurrency contract: `append` and `appended_event` are called on the event loop; the blocking
Delta commit runs on the shared executor, one commit at a time per partition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

from api.broker.errors import NotLeader
from storage_layout.delta_log import DeltaPartitionLog
from storage_layout.errors import LeadershipConflict
from storage_layout.records import NewRecord
from storage_layout.topic_config import TopicConfig


@dataclass(frozen=True, slots=True)
class BatchAck:
    """One produce batch was committed at offsets [base_offset, base_offset + count)."""

    base_offset: int
    count: int
    append_time_ms: int


@dataclass(slots=True)
class _Pending:
    records: Sequence[NewRecord]
    size_bytes: int
    future: asyncio.Future


@dataclass(frozen=True, slots=True)
class CommitLimits:
    linger_ms: int
    records_max: int
    bytes_max: int


class PartitionWriter:
    """Queues and group-commits the appends of one partition."""

    def __init__(
        self,
        log: DeltaPartitionLog,
        *,
        config: Callable[[], TopicConfig],
        executor: Executor,
        limits: CommitLimits,
        can_write: Callable[[], bool] = lambda: True,
    ) -> None:
        self.log = log
        self.deposed = False  # set when another node took the partition: the writer is done
        self._can_write = can_write
        self._config = config
        self._executor = executor
        self._limits = limits
        self._queue: list[_Pending] = []
        self._wakeup = asyncio.Event()
        self._appended = asyncio.Event()
        self._closed = False
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def append(self, records: Sequence[NewRecord], size_bytes: int) -> BatchAck:
        """Queue `records` (in order, contiguous offsets) and wait for their durable commit."""
        if self._closed or self.deposed:
            raise NotLeader("This node no longer leads the partition; retry the request.")
        future = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(records, size_bytes, future))
        self._wakeup.set()
        return await future

    def appended_event(self) -> asyncio.Event:
        """An event set by the next commit (fetchers wait on it instead of polling)."""
        return self._appended

    async def close(self) -> None:
        """Stop taking appends; the queue already taken is committed first."""
        self._closed = True
        self._wakeup.set()
        await self._task

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if self._limits.linger_ms and not self._closed:
                await asyncio.sleep(self._limits.linger_ms / 1000)
            while self._queue:
                await self._commit(self._take_batch())
            if self._closed:
                return

    def _take_batch(self) -> list[_Pending]:
        batch, records, size = [], 0, 0
        while self._queue:
            pending = self._queue[0]
            over = records + len(pending.records) > self._limits.records_max or (
                size + pending.size_bytes > self._limits.bytes_max
            )
            if batch and over:
                break
            batch.append(self._queue.pop(0))
            records += len(pending.records)
            size += pending.size_bytes
        return batch

    async def _commit(self, batch: list[_Pending]) -> None:
        records = [record for pending in batch for record in pending.records]
        loop = asyncio.get_running_loop()
        try:
            if self.deposed:
                raise NotLeader("Another node took this partition; retry the request.")
            if not self._can_write():
                raise NotLeader("This node could not renew its lease, so it stopped writing.")
            result = await loop.run_in_executor(self._executor, self._append_blocking, records)
        except Exception as error:  # every waiter learns the failure; nothing was acknowledged
            if isinstance(error, LeadershipConflict):
                self.deposed = True
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(error)
            return
        base = result.base_offset
        for pending in batch:
            if not pending.future.done():
                pending.future.set_result(
                    BatchAck(base, len(pending.records), result.append_time_ms)
                )
            base += len(pending.records)
        self._wake_fetchers()

    def _append_blocking(self, records: list[NewRecord]):
        return self.log.append(records, config=self._config())

    def _wake_fetchers(self) -> None:
        appended, self._appended = self._appended, asyncio.Event()
        appended.set()
