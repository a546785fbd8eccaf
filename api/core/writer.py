"""PartitionWriter: the single writer of one partition, with group commit.

Produce requests queue their records; whenever the writer is free it takes everything queued
(bounded by records and bytes), appends it in one Delta commit with the offset CAS, then resolves
every waiting request with its own base offset and wakes the long-polling fetchers.

Idempotent producers: the writer checks each batch's (producer_id, epoch, sequence) when it forms
a group commit, against the producer state of this partition plus the batches ahead of it in the
same group (storage_layout/producer_state.py). Duplicates are answered with their original
offsets, rejected batches with their error; the new state is kept tentative and adopted only once
the commit (which stores the sequences in the same Delta version) has succeeded.

Concurrency contract: `append`, `submit` and `appended_event` are called on the event loop; the
blocking Delta commit runs on the shared executor, one commit at a time per partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from api.core import metrics
from api.core.errors import BrokerShuttingDown, NotLeader
from storage_layout import paths
from storage_layout.errors import AppendConflict, LeadershipConflict, ProducerFenced
from storage_layout.log import DeltaPartitionLog
from storage_layout.log.arrow_records import concat_records
from storage_layout.producer_state import (
    ActiveProducer,
    Duplicate,
    ProducerBatch,
    ProducerStates,
)
from storage_layout.records import AppendResult, AppTransaction, Records
from storage_layout.topic_config import TopicConfig

log = logging.getLogger("lakelog.writer")

# Test-only fault point (conf/settings.py `fault_point`): exit right after a durable commit,
# before any waiting request is answered, to test retries after an ambiguous failure.
FAULT_AFTER_COMMIT_BEFORE_ACK = "after_commit_before_ack"
FAULT_EXIT_CODE = 75
# Housekeeping runs after this many commits, and at most once per HOUSEKEEPING_INTERVAL_MS: at a
# high commit rate each pass then merges one larger run instead of many passes of 32 files;
# sooner only when half the in-memory tail was committed since the last pass (the merge then
# still takes its files' records from memory instead of reading them back).
HOUSEKEEPING_EVERY_COMMITS = 32
HOUSEKEEPING_INTERVAL_MS = 1000
# A group commit that loses the offset CAS to another writer (a Spark task appending directly)
# is planned again from the reloaded log until this long after its first attempt; only then do
# its producers see the (retriable) error.
CONFLICT_RETRY_MS = 10_000
# How stale the log may look to a fetch at its head when another writer appends directly.
FOREIGN_CHECK_INTERVAL_MS = 500
LINGER_SKIP_BYTES = 64 * 1024  # queued this much: commit at once (see _worth_committing)
# Bound on the producer ids a writer remembers having searched for in older files (a client
# sending made-up ids must not grow it without end; forgetting only allows a second search).
LOOKED_UP_MAX = 10_000


@dataclass(frozen=True, slots=True)
class BatchAck:
    """One produce batch was committed at offsets [base_offset, base_offset + count).
    `duplicate`: the table already held the batch's transaction; nothing was appended and
    the original offsets are unknown (base_offset -1)."""

    base_offset: int
    count: int
    append_time_ms: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class TransactionMarker:
    """The end of `producer_id`'s transaction in one partition: `control` is CONTROL_COMMIT
    or CONTROL_ABORT (FORMAT.md §14)."""

    producer_id: int
    epoch: int
    control: int


@dataclass(slots=True)
class _Pending:
    records: Records
    size_bytes: int
    future: asyncio.Future
    producer: ProducerBatch | None = None
    transaction: AppTransaction | None = None  # committed alone, with this txn
    marker: TransactionMarker | None = None  # committed alone, in place of records


@dataclass(slots=True)
class _Plan:
    """A group commit after the sequence checks: what to append and what echoes it."""

    base_offset: int  # the offset the commit is expected to start at (the high watermark)
    states: ProducerStates  # tentative: adopted only after the commit succeeds
    appends: list[tuple[_Pending, int]] = field(default_factory=list)  # (pending, offset)
    echoes: list[tuple[_Pending, Duplicate]] = field(default_factory=list)  # same group
    refused: list[tuple[_Pending, Exception]] = field(default_factory=list)  # sequence errors

    def records(self) -> Records:
        return concat_records([pending.records for pending, _ in self.appends])

    def producer_columns(self) -> list | None:
        if all(pending.producer is None for pending, _ in self.appends):
            return None
        return [column for pending, _ in self.appends for column in _columns(pending)]


@dataclass(frozen=True, slots=True)
class CommitLimits:
    linger_ms: int
    records_max: int
    bytes_max: int
    producer_expiration_ms: int = 86_400_000


class PartitionWriter:
    """Queues and group-commits the appends of one partition."""

    def __init__(
        self,
        log: DeltaPartitionLog,
        *,
        config: Callable[[], TopicConfig],
        executor: Executor,
        limits: CommitLimits,
        fault_point: str | None = None,
        can_write: Callable[[], bool] = lambda: True,
        topic: str = "",
        alone_in_one_trip: bool | None = None,
        housekeeping_slots: asyncio.Semaphore | None = None,
    ) -> None:
        self.log = log
        self.topic = topic  # the metrics' label
        # A lone group (nothing in flight, nothing waiting) is staged and committed in one
        # trip to the storage threads: by default on a local disk, where the next group's
        # file is written too fast for the overlap to be worth a second trip; an object
        # store's writer keeps overlapping (a group arriving meanwhile writes its file).
        if alone_in_one_trip is None:
            alone_in_one_trip = paths.is_local(log.table_uri)
        self._alone_in_one_trip = alone_in_one_trip
        self.deposed = False  # set when another node took the partition: the writer is done
        self._can_write = can_write
        self._config = config
        self._executor = executor
        self._limits = limits
        self._fault_point = fault_point
        self._states: ProducerStates | None = None  # loaded from the table when first needed
        self._looked_up: set[int] = set()  # producers already searched for in older files
        self._queue: list[_Pending] = []
        self._wakeup = asyncio.Event()
        self._appended = asyncio.Event()
        self._closed = False
        self._commits_since_housekeeping = 0
        self._expired_at_ms = 0  # when idle producers were last forgotten
        self._housekeeping_started = 0.0  # time.monotonic() of the last housekeeping start
        self._housekeeping: asyncio.Future | None = None
        # Shared by the node's writers: housekeeping passes running at once (None: no bound).
        self._housekeeping_slots = housekeeping_slots
        self._catch_up_requested = False
        self._catch_up_asked_at = 0.0  # time.monotonic() of the last request
        self._last_arrival = 0.0  # time.monotonic() of the last submit
        self._arrival_gap_s = float("inf")  # between the last two submits
        self._last_take = 0.0  # time.monotonic() when the last commit's batch was taken
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def append(
        self, records: Records, size_bytes: int, producer: ProducerBatch | None = None
    ) -> BatchAck:
        """Queue `records` (in order, contiguous offsets) and wait for their durable commit.

        With `producer`, a retry of a committed batch returns the original BatchAck; a batch
        breaking the sequence rules raises ProducerError and appends nothing.
        """
        return await self.submit(records, size_bytes, producer)

    def submit(
        self,
        records: Records,
        size_bytes: int,
        producer: ProducerBatch | None = None,
        transaction: AppTransaction | None = None,
    ) -> asyncio.Future:
        """Queue `records`; the returned future resolves to their BatchAck after the commit.

        With `transaction`, the records are committed in a commit of their own that carries
        it, unless the table already holds it (then the ack says `duplicate`)."""
        if producer is not None and transaction is not None:
            raise ValueError("a batch has a producer sequence or a transaction, not both")
        if self.deposed:
            raise NotLeader("This node no longer leads the partition; retry the request.")
        if self._closed:
            raise BrokerShuttingDown("The partition writer is closing; retry the request.")
        future = asyncio.get_running_loop().create_future()
        now = time.monotonic()
        self._arrival_gap_s, self._last_arrival = now - self._last_arrival, now
        self._queue.append(_Pending(records, size_bytes, future, producer, transaction))
        self._wakeup.set()
        return future

    def submit_marker(self, marker: TransactionMarker) -> asyncio.Future:
        """Queue a transaction marker, committed alone after what is queued before it; the
        future resolves to its BatchAck (one offset). A marker of an epoch older than the
        producer's newest here fails with ProducerFenced: a zombie coordinator's late marker
        never ends its successor's transaction."""
        if self.deposed:
            raise NotLeader("This node no longer leads the partition; retry the request.")
        if self._closed:
            raise BrokerShuttingDown("The partition writer is closing; retry the request.")
        future = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending((), 0, future, marker=marker))
        self._wakeup.set()
        return future

    async def active_producers(self) -> list[ActiveProducer]:
        """The producers this partition remembers (Kafka's DescribeProducers): the states
        the writer holds, else read from the table, with their open transactions."""
        loop = asyncio.get_running_loop()
        states = self._states
        if states is None:
            states = await loop.run_in_executor(self._executor, self.log.producer_states)
        index = await loop.run_in_executor(self._executor, self.log.transaction_index)
        return states.active(index.open_first_offsets)

    def notice_foreign_commits(self) -> None:
        """Called by fetches and offset queries: at most every FOREIGN_CHECK_INTERVAL_MS, have
        the writer task look for commits another writer made (a Spark task appending
        directly, a retention or compaction job), so readers see them without waiting for
        this node's next append."""
        now = time.monotonic()
        if (now - self._catch_up_asked_at) * 1000 < FOREIGN_CHECK_INTERVAL_MS:
            return
        self._catch_up_asked_at = now
        self._catch_up_requested = True
        self._wakeup.set()

    def request_catch_up(self) -> None:
        """Have the writer task follow other writers' commits now (a maintenance job of this
        node just committed): readers then see what the table holds without waiting for the
        next foreign-commit check."""
        self._catch_up_asked_at = time.monotonic()
        self._catch_up_requested = True
        self._wakeup.set()

    async def _catch_up(self) -> bool:
        """Load other writers' commits; True if there were any (then the producer state is
        rebuilt from the table when next needed)."""
        self._catch_up_requested = False
        loop = asyncio.get_running_loop()
        try:
            changed = await loop.run_in_executor(self._executor, self.log.catch_up)
        except Exception as error:  # the next fetch asks again; appends reload on their own
            log.warning("catching up with other writers failed: %r", error)
            return False
        if changed:
            self._states = None
            self._looked_up.clear()  # producers may now be found where they were not
            if self.log.superseded():
                # Deposed, though no append of ours has failed yet: leaders.writer takes the
                # partition again or sends clients to its leader, and Metadata stops naming
                # the epoch this writer held (a client fenced by the epoch in the table would
                # otherwise be given the same stale epoch again and again).
                self.deposed = True
            self._wake_fetchers()
        return changed

    def appended_event(self) -> asyncio.Event:
        """An event set by the next commit (fetchers wait on it instead of polling)."""
        return self._appended

    async def close(self) -> None:
        """Stop taking appends; the queue already taken is committed first."""
        self._closed = True
        self._wakeup.set()
        await self._task
        if self._housekeeping is not None:
            await asyncio.gather(self._housekeeping, return_exceptions=True)
            await self._commit_merge_when_idle()  # a pass that finished after the last append

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if self._worth_lingering():
                await asyncio.sleep(self._limits.linger_ms / 1000)
            while self._queue:
                if _plain(self._queue[0]):
                    await self._commit_plain_groups()
                else:
                    await self._commit(await self._next_batch())
            if self._catch_up_requested:
                await self._catch_up()
            await self._commit_merge_when_idle()
            if self._closed:
                return

    def _worth_lingering(self) -> bool:
        """The linger gathers small requests that arrive close together into one commit. It
        is skipped when the queue already fills a good commit (a Kafka client's batch, a
        1 000-record request would only wait for nothing), and when requests come further
        apart than the linger (a producer waiting for each acknowledgement: the next request
        will not come before this one is answered)."""
        linger_s = self._limits.linger_ms / 1000
        if not linger_s or self._closed or self._arrival_gap_s >= linger_s:
            return False
        return not self._worth_committing()

    async def _next_batch(self) -> list[_Pending]:
        """The next commit's batch, taken no sooner than the topic's
        `delta.commit.interval.ms` after the previous one: what comes meanwhile joins it (on
        an object store each commit is two requests, however few records it holds). A quiet
        partition commits at once."""
        interval_s = self._config().delta_commit_interval_ms / 1000
        pause_s = self._last_take + interval_s - time.monotonic()
        if interval_s and pause_s > 0 and not self._closed:
            await asyncio.sleep(pause_s)
        self._last_take = time.monotonic()
        return self._take_batch()

    def _worth_committing(self) -> bool:
        """The queue holds LINGER_SKIP_BYTES or more."""
        queued_bytes = 0
        for pending in self._queue:
            queued_bytes += pending.size_bytes
            if queued_bytes >= LINGER_SKIP_BYTES:
                return True
        return False

    async def _commit_merge_when_idle(self) -> None:
        """Housekeeping's small-file merge rides on the next append; with none queued (the
        partition went quiet, or the writer closes), it is committed on its own."""
        housekeeping_running = self._housekeeping is not None and not self._housekeeping.done()
        if self._queue or housekeeping_running or not self.log.merge_pending or self.deposed:
            return
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self.log.commit_pending_merge)
        except Exception as error:  # noqa: BLE001 - a later pass plans the merge again
            log.warning("committing a small-file merge failed: %r", error)

    async def _commit_plain_groups(self) -> None:
        """Group commits of plain batches (no producer ids, no txn), pipelined: the next
        group's data file is written while the previous group's commit is in flight. On an
        object store each is a request of ~20 ms, so a commit costs about one request of
        latency instead of two in a row. Returns when no commit is in flight and the queue is
        empty or starts with a batch that is not plain (committed on its own path)."""
        committing: _Committing | None = None
        while True:
            if self._queue and _plain(self._queue[0]):
                batch = await self._next_batch()
                if committing is None and not self._queue and self._alone_in_one_trip:
                    retry = await self._stage_and_commit(batch)
                    self._queue[:0] = retry or []
                    continue
                staged = await self._stage(batch, None if committing is None else committing.staged)
                if committing is not None:
                    retry = await committing.task
                    committing = None
                    if retry is not None:  # its offsets are taken or moved: plan both again
                        self._queue[:0] = retry + ([] if staged is None else batch)
                        await self._discard(staged)
                        continue
                if staged is not None:
                    committing = _Committing(staged, self._start_commit(batch, staged))
                continue
            if committing is None:
                return
            if await self._wait_commit_or_arrival(committing.task):
                retry = await committing.task
                committing = None
                if retry is not None:
                    self._queue[:0] = retry

    async def _wait_commit_or_arrival(self, task: asyncio.Future) -> bool:
        """Wait for the commit in flight or a new produce; True if the commit is done."""
        arrival = asyncio.ensure_future(self._wakeup.wait())
        try:
            await asyncio.wait({task, arrival}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            arrival.cancel()
        if self._wakeup.is_set() and not task.done():
            self._wakeup.clear()
        return task.done()

    async def _stage(self, batch: list[_Pending], after) -> Any:
        """Write the batch's data file (offsets after `after`'s, if given); None if that
        failed (every waiter has learnt why: nothing of it was committed)."""
        loop = asyncio.get_running_loop()
        records = concat_records([pending.records for pending in batch])
        config = self._config()
        try:
            self._check_can_write()
            return await loop.run_in_executor(
                self._executor,
                lambda: self.log.stage_append(records, config=config, after=after),
            )
        except Exception as error:  # noqa: BLE001 - every waiter learns it
            _fail(batch, error)
            return None

    async def _discard(self, staged) -> None:
        if staged is None:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self.log.discard_staged, staged)

    def _start_commit(self, batch: list[_Pending], staged) -> asyncio.Future:
        first_try = time.monotonic()
        return asyncio.ensure_future(self._commit_staged(batch, staged, first_try))

    async def _stage_and_commit(self, batch: list[_Pending]) -> list[_Pending] | None:
        """Stage and commit a plain group in one trip to the storage threads (nothing is in
        flight and nothing waits: a producer waiting for each acknowledgement). Each trip is a
        hand-over of the GIL and two thread wake-ups: 10-13% of a commit's CPU in rounds of 1
        and 100 records on tmpfs (BENCHMARKS.md). Returns as _commit_staged does."""
        loop = asyncio.get_running_loop()
        records = concat_records([pending.records for pending in batch])
        config = self._config()

        def stage_and_commit() -> tuple[AppendResult, float]:
            staged = self.log.stage_append(records, config=config)
            started = time.monotonic()
            return self.log.commit_staged(staged), time.monotonic() - started

        first_try = time.monotonic()
        try:
            self._check_can_write()
            result, seconds = await loop.run_in_executor(self._executor, stage_and_commit)
        except Exception as error:  # noqa: BLE001 - every waiter learns it
            return self._commit_failed(batch, error, first_try)
        self._committed(batch, result, seconds)
        return None

    async def _commit_staged(
        self, batch: list[_Pending], staged, first_try: float
    ) -> list[_Pending] | None:
        """Commit a staged plain group and answer its waiters. Returns the batch when it must
        be planned again (it lost the offset CAS to another writer; nobody was answered),
        else None (committed, or failed with every waiter told)."""
        loop = asyncio.get_running_loop()
        try:
            self._check_can_write()
            started = time.monotonic()
            result = await loop.run_in_executor(self._executor, self.log.commit_staged, staged)
        except Exception as error:  # noqa: BLE001 - every waiter learns it
            return self._commit_failed(batch, error, first_try)
        self._committed(batch, result, time.monotonic() - started)
        return None

    def _commit_failed(
        self, batch: list[_Pending], error: Exception, first_try: float
    ) -> list[_Pending]:
        """Every waiter learns the failure (nothing was acknowledged), unless the group lost
        the offset CAS recently enough to be planned again: then the batch is returned."""
        if isinstance(error, AppendConflict):
            self._states = None  # another writer committed: rebuild from the table
            if (time.monotonic() - first_try) * 1000 < CONFLICT_RETRY_MS:
                return batch
        if isinstance(error, LeadershipConflict):
            self.deposed = True
        _fail(batch, error)
        return []  # not None: a group staged after this one must be planned again

    def _committed(self, batch: list[_Pending], result: AppendResult, seconds: float) -> None:
        """Answer a committed plain group's waiters, wake fetchers, maybe housekeep."""
        if self._fault_point == FAULT_AFTER_COMMIT_BEFORE_ACK:
            os._exit(FAULT_EXIT_CODE)
        self._note_commit(batch, seconds)
        offset = result.base_offset
        for pending in batch:
            _resolve(pending, BatchAck(offset, len(pending.records), result.append_time_ms))
            offset += len(pending.records)
        self._wake_fetchers()
        self._maybe_start_housekeeping()

    def _note_commit(self, committed: list[_Pending], seconds: float) -> None:
        records = sum(len(p.records) for p in committed)
        metrics.record_commit(self.topic, records, sum(p.size_bytes for p in committed), seconds)

    def _take_batch(self) -> list[_Pending]:
        batch, records, size = [], 0, 0
        while self._queue:
            pending = self._queue[0]
            over = records + len(pending.records) > self._limits.records_max or (
                size + pending.size_bytes > self._limits.bytes_max
            )
            alone = _alone(pending) or (batch and _alone(batch[0]))
            mixed = batch and _plain(batch[0]) != _plain(pending)
            if batch and (over or alone or mixed):
                break
            batch.append(self._queue.pop(0))
            records += len(pending.records)
            size += pending.size_bytes
        return batch

    async def _commit(self, batch: list[_Pending]) -> None:
        if batch[0].transaction is not None:
            await self._commit_transaction(batch[0])
            return
        if batch[0].marker is not None:
            await self._commit_marker(batch[0])
            return
        first_try = time.monotonic()
        while batch and not await self._commit_group(batch, first_try):
            batch = [p for p in batch if not p.future.done()]  # lost the CAS: plan again

    async def _commit_group(self, batch: list[_Pending], first_try: float) -> bool:
        """One attempt at a group commit; False if it lost the offset CAS to another writer
        (e.g. a Spark task appending directly) and should be planned again."""
        loop = asyncio.get_running_loop()
        now_ms = int(time.time() * 1000)
        try:
            self._check_can_write()
            if self._states is None and any(p.producer is not None for p in batch):
                self._states = await loop.run_in_executor(self._executor, self.log.producer_states)
            await self._look_up_older_producers(batch, now_ms)
            self._maybe_expire_producers(now_ms)
            plan = self._plan(batch, now_ms)
            if plan.refused and await self._state_may_be_stale(first_try):
                return False  # plan again against the table as it is now
        except Exception as error:  # the state could not be rebuilt: nobody is acknowledged
            _fail(batch, error)
            return True
        for pending, error in plan.refused:
            _fail([pending], error)
        if not plan.appends:
            return True
        try:
            started = time.monotonic()
            result = await loop.run_in_executor(self._executor, self._append_blocking, plan, now_ms)
        except Exception as error:  # every waiter learns the failure; nothing was acknowledged
            if isinstance(error, AppendConflict):
                self._states = None  # another writer committed: rebuild from the table
                if (time.monotonic() - first_try) * 1000 < CONFLICT_RETRY_MS:
                    return False
            if isinstance(error, LeadershipConflict):
                self.deposed = True  # every later batch fails too: it must go to the new leader
            _fail([p for p, _ in plan.appends] + [p for p, _ in plan.echoes], error)
            return True
        if self._fault_point == FAULT_AFTER_COMMIT_BEFORE_ACK:
            os._exit(FAULT_EXIT_CODE)
        self._note_commit([pending for pending, _ in plan.appends], time.monotonic() - started)
        shift = result.base_offset - plan.base_offset  # 0 unless the log reloaded mid-append
        self._adopt(plan, shift)
        for pending, offset in plan.appends:
            _resolve(pending, BatchAck(offset + shift, len(pending.records), now_ms))
        for pending, duplicate in plan.echoes:
            _resolve(pending, BatchAck(duplicate.base_offset + shift, len(pending.records), now_ms))
        self._wake_fetchers()
        self._maybe_start_housekeeping()
        return True

    async def _commit_transaction(self, pending: _Pending) -> None:
        """A batch with a writer's txn: committed alone, or acknowledged as a duplicate when
        the table already holds the txn (storage's append_once)."""
        loop = asyncio.get_running_loop()
        now_ms = int(time.time() * 1000)
        try:
            self._check_can_write()
            result = await loop.run_in_executor(
                self._executor,
                lambda: self.log.append_once(
                    pending.records,
                    config=self._config(),
                    transaction=pending.transaction,
                    now_ms=now_ms,
                ),
            )
        except Exception as error:
            if isinstance(error, LeadershipConflict):
                self.deposed = True
            self._states = None  # the log may have reloaded past others' commits
            _fail([pending], error)
            return
        if result is None:
            _resolve(pending, BatchAck(-1, len(pending.records), now_ms, duplicate=True))
            return
        _resolve(pending, BatchAck(result.base_offset, len(pending.records), now_ms))
        self._wake_fetchers()
        self._maybe_start_housekeeping()

    async def _commit_marker(self, pending: _Pending) -> None:
        marker = pending.marker
        loop = asyncio.get_running_loop()
        try:
            self._check_can_write()
            if self._states is None:
                self._states = await loop.run_in_executor(self._executor, self.log.producer_states)
            entry = self._states.entry(marker.producer_id)
            if entry is not None and entry.epoch > marker.epoch:
                raise ProducerFenced(
                    f"Producer {marker.producer_id} has epoch {entry.epoch} here: the marker "
                    f"of epoch {marker.epoch} is from a fenced transaction."
                )
            result = await loop.run_in_executor(
                self._executor,
                lambda: self.log.append_marker(
                    marker.producer_id, marker.epoch, marker.control, config=self._config()
                ),
            )
        except Exception as error:
            if isinstance(error, LeadershipConflict):
                self.deposed = True
            if isinstance(error, AppendConflict):
                self._states = None
            _fail([pending], error)
            return
        # The marker's epoch fences older ones here (a coordinator bumps it when it aborts).
        self._states = self._states.fenced_to(marker.producer_id, marker.epoch)
        _resolve(pending, BatchAck(result.base_offset, 1, result.append_time_ms))
        self._wake_fetchers()
        self._maybe_start_housekeeping()

    async def _housekeep(self, history_ms: int) -> None:
        """One housekeeping pass in the storage threads, once a slot is free: the node's
        passes never take every thread, so a produce never waits behind checkpoints."""
        loop = asyncio.get_running_loop()
        slots = self._housekeeping_slots or contextlib.nullcontext()
        async with slots:
            await loop.run_in_executor(self._executor, self.log.housekeeping, history_ms)

    def _maybe_start_housekeeping(self) -> None:
        """Every HOUSEKEEPING_EVERY_COMMITS commits (and HOUSEKEEPING_INTERVAL_MS, or sooner
        when the log says half its in-memory tail turned over since the last pass), merge small
        files, checkpoint and trim the log in the background (the cost of opening and reading a
        table grows with files and log entries); appends go on meanwhile: the housekeeping
        commits change no record, and a direct append steps over them."""
        self._commits_since_housekeeping += 1
        running = self._housekeeping is not None and not self._housekeeping.done()
        since_ms = (time.monotonic() - self._housekeeping_started) * 1000
        if self._commits_since_housekeeping < HOUSEKEEPING_EVERY_COMMITS:
            return
        if since_ms < HOUSEKEEPING_INTERVAL_MS and not self.log.housekeeping_overdue():
            return
        if running:
            return
        self._commits_since_housekeeping = 0
        self._expired_at_ms = 0  # when idle producers were last forgotten
        self._housekeeping_started = time.monotonic()
        history_ms = self._config().delta_log_retention_ms
        self._housekeeping = asyncio.ensure_future(self._housekeep(history_ms))
        self._housekeeping.add_done_callback(_report_housekeeping_failure)
        self._housekeeping.add_done_callback(
            lambda _: self._wakeup.set()
        )  # an idle merge to commit

    async def _state_may_be_stale(self, first_try: float) -> bool:
        """Before a sequence error (a definite answer: the client re-initialises), check that
        no other writer committed since this writer's snapshot: a node that led the partition
        for a moment (it had seen this one as dead) appended the producer's next batch, and
        this writer, never deposed, answered OUT_OF_ORDER_SEQUENCE from its old state (chaos
        T2). True if the table moved (the state is then rebuilt)."""
        if (time.monotonic() - first_try) * 1000 >= CONFLICT_RETRY_MS:
            return False
        return await self._catch_up()

    async def _look_up_older_producers(self, batch: list[_Pending], now_ms: int) -> None:
        """Producers that continue a sequence (not at 0) unknown to the state rebuilt from the
        newest files are searched for in older ones, once each per writer (a producer that is
        not there stays UNKNOWN_PRODUCER_ID without another search)."""
        if self._states is None:
            return
        unknown = {
            p.producer.producer_id
            for p in batch
            if p.producer is not None
            and p.producer.base_sequence > 0
            and self._states.entry(p.producer.producer_id) is None
        } - self._looked_up
        if not unknown:
            return
        if len(self._looked_up) > LOOKED_UP_MAX:
            self._looked_up.clear()
        self._looked_up |= unknown
        loop = asyncio.get_running_loop()
        older = await loop.run_in_executor(self._executor, self.log.older_producer_states, unknown)
        expiration_ms = self._limits.producer_expiration_ms
        self._states = self._states.adding(older.without_expired(now_ms, expiration_ms))

    def _maybe_expire_producers(self, now_ms: int) -> None:
        """Forget idle producers, at most every half expiration (not on every commit: the
        scan is over every producer the partition knows)."""
        expiration_ms = self._limits.producer_expiration_ms
        if self._states is None or now_ms - self._expired_at_ms < expiration_ms // 2:
            return
        self._states = self._states.without_expired(now_ms, expiration_ms)
        self._expired_at_ms = now_ms

    def _check_can_write(self) -> None:
        if self.deposed:
            raise NotLeader("Another node took this partition; retry the request.")
        if not self._can_write():
            raise NotLeader("This node could not renew its lease, so it stopped writing.")

    def _plan(self, batch: list[_Pending], now_ms: int) -> _Plan:
        """Check every batch's sequences in queue order; answer duplicates of earlier commits
        and rule breakers at once, and keep the rest (with same-group echoes) for the commit."""
        base = self.log.snapshot.high_watermark
        plan = _Plan(base, self._states or ProducerStates())
        offset = base
        for pending in batch:
            duplicate = None
            if pending.producer is not None:
                try:
                    duplicate = plan.states.check(pending.producer)
                except Exception as error:
                    plan.refused.append((pending, error))
                    continue
            if duplicate is None:
                if pending.producer is not None:
                    plan.states = plan.states.recorded(pending.producer, offset, now_ms)
                plan.appends.append((pending, offset))
                offset += len(pending.records)
            elif duplicate.base_offset < base:
                ack = BatchAck(
                    duplicate.base_offset, len(pending.records), duplicate.append_time_ms
                )
                _resolve(pending, ack)
            else:
                plan.echoes.append((pending, duplicate))
        return plan

    def _adopt(self, plan: _Plan, shift: int) -> None:
        """Keep the tentative producer state now that the commit holds it."""
        if all(pending.producer is None for pending, _ in plan.appends):
            return  # nothing changed (and an unloaded state stays unloaded)
        # A shifted commit (never seen in practice) is rebuilt from the table when next needed.
        self._states = plan.states if shift == 0 else None

    def _append_blocking(self, plan: _Plan, now_ms: int):
        return self.log.append(
            plan.records(),
            config=self._config(),
            now_ms=now_ms,
            producers=plan.producer_columns(),
        )

    def _wake_fetchers(self) -> None:
        appended, self._appended = self._appended, asyncio.Event()
        appended.set()


@dataclass(frozen=True, slots=True)
class _Committing:
    """A plain group whose commit is in flight."""

    staged: Any  # storage_layout.log.StagedAppend
    task: asyncio.Future  # -> the batch to plan again, or None


def _plain(pending: _Pending) -> bool:
    """Neither producer sequences nor a txn nor a marker: the commit can be pipelined
    (nothing in its plan depends on the outcome of the commit before it)."""
    return pending.producer is None and pending.transaction is None and pending.marker is None


def _alone(pending: _Pending) -> bool:
    """Committed in a commit of its own."""
    return pending.transaction is not None or pending.marker is not None


def _columns(pending: _Pending) -> list[tuple[int, int, int] | None]:
    producer = pending.producer
    if producer is None:
        return [None] * len(pending.records)
    return [
        (producer.producer_id, producer.epoch, producer.base_sequence + i, producer.transactional)
        for i in range(len(pending.records))
    ]


def _resolve(pending: _Pending, ack: BatchAck) -> None:
    if not pending.future.done():
        pending.future.set_result(ack)


def _fail(batch: Sequence[_Pending], error: Exception) -> None:
    for pending in batch:
        if not pending.future.done():
            pending.future.set_exception(error)


def _report_housekeeping_failure(future: asyncio.Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("housekeeping failed: %r", future.exception())
