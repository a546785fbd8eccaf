"""Broker: produce and fetch for every front-end, over the partition logs of one storage root.

Both front-ends enter here: produce() and produce_batch() check the topic's rules once
(api/core/produce_rules.py) and queue records at the partition's single writer; fetch() and
long_poll() are the one long poll. Any node accepts any request: writes for a partition another
node leads are forwarded to it (api/core/leaders.py decides who leads, api/core/peers.py
forwards). The node (api/node.py) builds the parts a broker works with and starts them.
Concurrency contract: every coroutine runs on one event loop; blocking Delta work runs on the
node's executor (`blocking`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from api.core import metrics, produce_rules
from api.core.cluster import Cluster
from api.core.errors import BrokerShuttingDown, InvalidRequest, NotLeader
from api.core.follower_reads import FollowerReads
from api.core.group_configs import GroupConfigs
from api.core.groups.coordinator import GroupCoordinator
from api.core.leaders import Leaders, Route
from api.core.partitions import Partitions
from api.core.peers import Peers
from api.core.producer_ids import ProducerIds
from api.core.records import (
    ACKS_ALL,
    ACKS_NONE,
    FetchRequest,
    Idempotence,
    OpenedBatch,
    ProduceRecord,
    RecordAck,
    RecordQueued,
)
from api.core.scheduled_jobs import ScheduledJobs
from api.core.schemas.errors import RecordSchemaInvalid
from api.core.schemas.registry import SchemaRegistry
from api.core.schemas.typed_records import TypedRecords
from api.core.shares.membership import ShareMembership
from api.core.shares.owner import ShareOwner
from api.core.topics import Topics
from api.core.transaction_participants import TransactionParticipants
from api.core.transaction_requests import TransactionRequests
from api.core.transactions import TransactionCoordinator
from api.core.writer import FOREIGN_CHECK_INTERVAL_MS, BatchAck
from conf.settings import Settings
from storage_layout.cluster import routes
from storage_layout.cluster.codec import encode_append
from storage_layout.errors import OffsetOutOfRange
from storage_layout.log import DeltaPartitionLog
from storage_layout.log.arrow_records import payload_bytes
from storage_layout.meta.catalog import TopicInfo
from storage_layout.meta.producers import ProducerIdentity
from storage_layout.meta.transaction_state import PendingOffset
from storage_layout.partitioner import RoundRobin, choose_partition
from storage_layout.producer_state import ProducerBatch
from storage_layout.records import (
    AppTransaction,
    FetchResult,
    NewRecord,
    Records,
    TopicPartition,
    records_size_bytes,
)

T = TypeVar("T")
Blocking = Callable[..., Awaitable]

log = logging.getLogger("lakelog.broker")


class Broker:
    """The broker core of one node: what both front-ends call."""

    def __init__(
        self,
        settings: Settings,
        *,
        root: str,
        blocking: Blocking,
        topics: Topics,
        cluster: Cluster,
        leaders: Leaders,
        peers: Peers,
        producer_ids: ProducerIds,
        groups: GroupCoordinator,
        transactions: TransactionCoordinator,
        transaction_requests: TransactionRequests,
        transaction_participants: TransactionParticipants,
        scheduled_jobs: ScheduledJobs | None,
        schemas: SchemaRegistry,
        group_configs: GroupConfigs,
        shares: ShareOwner,
        share_members: ShareMembership,
    ) -> None:
        self.settings = settings
        self.root = root
        self._blocking = blocking
        self.topics = topics
        self.cluster = cluster
        self.leaders = leaders
        self.peers = peers
        self._producer_ids = producer_ids
        self._followers = FollowerReads(self.root, blocking)
        self.partitions = Partitions(
            root=self.root, topics=topics, cluster=cluster, leaders=leaders, blocking=blocking
        )
        self._round_robin: dict[str, RoundRobin] = {}
        self._closing = False
        # The node's coordinators, which the front-ends reach through the broker.
        self.groups = groups
        self.transactions = transactions
        self.transaction_requests = transaction_requests
        self.transaction_participants = transaction_participants
        self.scheduled_jobs = scheduled_jobs  # None unless this node runs maintenance
        self.schemas = schemas
        self.group_configs = group_configs
        self.shares = shares  # the share partitions of the topic partitions this node leads
        self.share_members = share_members  # the share groups this node coordinates
        self.typed_records = TypedRecords(schemas, blocking)

    def begin_close(self) -> None:
        """Refuse new appends and end long polls: the node is closing."""
        self._closing = True

    async def forget_topic(self, name: str) -> None:
        """Before a topic is deleted: its writers closed, its cached reads and metrics gone."""
        await self.leaders.close_topic(name)
        self._followers.forget_topic(name)
        metrics.forget_topic(name)

    # ---- producers -------------------------------------------------------------------------

    async def init_producer(
        self, transactional_id: str | None = None, client_id: str | None = None
    ) -> ProducerIdentity:
        """A producer id and epoch for idempotent produce (see ProducerIdAllocator)."""
        return await self._producer_ids.init_producer(transactional_id, client_id)

    async def add_transaction_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        offsets: Sequence[PendingOffset],
    ) -> None:
        """Offsets sent within a transaction (TxnOffsetCommit reaches the group's coordinator),
        kept by the transaction's coordinator, and unstable at the group's coordinator (this
        node) until the transaction ends (KIP-447)."""
        await self.transaction_requests.add_offsets(transactional_id, producer_id, epoch, offsets)
        for group_id in {offset.group_id for offset in offsets}:
            partitions = [
                TopicPartition(o.topic, o.partition) for o in offsets if o.group_id == group_id
            ]
            await self.groups.note_transactional(group_id, producer_id, partitions)

    # ---- produce ---------------------------------------------------------------------------

    async def produce(
        self,
        topic_name: str,
        records: Sequence[ProduceRecord],
        *,
        idempotence: Idempotence | None = None,
        acks: str = ACKS_ALL,
        on_queued: Callable[[], None] | None = None,
    ) -> list[RecordAck | RecordQueued | Exception]:
        """Append records; one result per record, in request order.

        Records for one partition keep their request order and get contiguous offsets. A record
        that fails validation gets its error in its slot and is not written; the others are.
        With `idempotence`, each partition's records form one producer batch (a retry gets the
        original offsets). With acks=0 the results are RecordQueued once the records are queued.

        `on_queued` is called once every record is queued (or refused), before the acks: a
        caller producing one stream's records concurrently starts the next call then, so the
        records keep their stream's order in each partition. (When this raises instead, it
        queued nothing: the caller goes on.)

        Raises:
            InvalidProducerRequest: a partition that receives records has no base sequence.
        """
        topic = await self.topics.get(topic_name)
        results: list = [None] * len(records)
        await self._validate_schemas(topic, records, results)
        by_partition = self._route(topic, records, results)
        if idempotence is not None and idempotence.transactional_id is not None:
            await self._add_to_transaction(topic_name, by_partition, idempotence, results)
        batches = {
            partition: idempotence.batch(partition, len(indexes)) if idempotence else None
            for partition, indexes in by_partition.items()
        }
        pendings = await asyncio.gather(
            *(
                self._queue_partition(topic, partition, indexed, records, results, batches)
                for partition, indexed in by_partition.items()
            )
        )
        if on_queued is not None:
            on_queued()
        await asyncio.gather(
            *(
                self._acknowledged(topic, partition, indexed, records, results, pending, acks)
                for (partition, indexed), pending in zip(
                    by_partition.items(), pendings, strict=True
                )
            )
        )
        return results

    async def _add_to_transaction(
        self, topic_name: str, by_partition: dict, idempotence: Idempotence, results: list
    ) -> None:
        """A transactional produce adds its partitions to the transaction first (as KIP-890's
        second protocol does on the broker); refused, no record of the request is written."""
        partitions = [TopicPartition(topic_name, p) for p in by_partition]
        try:
            await self.transaction_requests.add_partitions(
                idempotence.transactional_id,
                idempotence.producer_id,
                idempotence.epoch,
                partitions,
            )
        except Exception as error:
            for indexes in by_partition.values():
                for index in indexes:
                    results[index] = error
            by_partition.clear()

    async def _validate_schemas(self, topic: TopicInfo, records, results: list) -> None:
        """Record by record, the topic's schema validation (a refused record fails alone)."""
        config = topic.config
        if not (config.validates_schema(is_key=True) or config.validates_schema(is_key=False)):
            return
        for index, produce_record in enumerate(records):
            try:
                await self.typed_records.attach(topic.name, config, [produce_record.record])
            except RecordSchemaInvalid as error:
                results[index] = error.at(index)

    def _route(self, topic: TopicInfo, records, results) -> dict[int, list[int]]:
        round_robin = self._round_robin.setdefault(topic.name, RoundRobin())
        by_partition: dict[int, list[int]] = {}
        for index, produce_record in enumerate(records):
            if results[index] is not None:
                continue  # refused already
            record = produce_record.record
            try:
                produce_rules.check_size(topic, record.size_bytes(), index=index)
                produce_rules.check_key(topic, record.key, index=index)
                partition = choose_partition(
                    explicit=produce_record.partition,
                    key=record.key,
                    partitions=topic.partitions,
                    round_robin=round_robin,
                )
                topic.check_partition(partition)
            except Exception as error:
                results[index] = error
                continue
            by_partition.setdefault(partition, []).append(index)
        return by_partition

    async def _queue_partition(
        self, topic, partition, indexes, records, results, batches
    ) -> asyncio.Future | None:
        """One partition's records queued: the future of their ack (None: refused, the error
        in each record's result)."""
        batch = [records[i].record for i in indexes]
        try:
            return await self.submit(
                topic.name, partition, batch, producer=batches[partition], forward=True, topic=topic
            )
        except Exception as error:
            for index in indexes:
                results[index] = error
            return None

    async def _acknowledged(
        self, topic, partition, indexes, records, results, pending, acks
    ) -> None:
        if pending is None:
            return
        if acks == ACKS_NONE:
            pending.add_done_callback(_consume_outcome)
            for index in indexes:
                results[index] = RecordQueued(partition)
            return
        try:
            ack = await pending
        except Exception as error:
            for index in indexes:
                results[index] = error
            return
        for position, index in enumerate(indexes):
            results[index] = _record_ack(partition, ack, position, records[index].record, topic)

    async def produce_batch(
        self,
        topic_name: str,
        partition: int,
        *,
        size_bytes: int,
        open_batch: Callable[[], Awaitable[OpenedBatch]],
    ) -> tuple[TopicInfo, asyncio.Future]:
        """Append one partition's record batch whole (the Kafka protocol's produce), here only:
        a client that reaches a node that does not lead the partition is told so (NotLeader)
        and finds the leader itself. The topic's rules are checked in Kafka's order: the
        partition, the batch's size (before its records are read: `open_batch` decodes them
        and names the producer), then the keys. Returns the topic and a future of the BatchAck.
        """
        topic = await self.topics.get(topic_name)
        topic.check_partition(partition)
        produce_rules.check_size(topic, size_bytes)
        batch = await open_batch()
        produce_rules.check_keys(topic, batch.records)
        pending = await self.submit(
            topic_name,
            partition,
            batch.records,
            producer=batch.producer,
            forward=False,
            topic=topic,
        )
        return topic, pending

    async def submit(
        self,
        topic_name: str,
        partition: int,
        batch: Records,
        *,
        producer: ProducerBatch | None,
        forward: bool,
        transaction: AppTransaction | None = None,
        topic: TopicInfo | None = None,
    ) -> asyncio.Future:
        """Queue one partition's records here if this node leads it, else at the leader
        (`forward`), else fail with NotLeader (retriable). The future resolves to the
        BatchAck once the records are durably committed. With `transaction` (a Spark
        writer's txn), they are committed alone with it, once (see PartitionWriter)."""
        if self._closing:
            raise BrokerShuttingDown("This gateway is shutting down; retry the request.")
        route = await self.leaders.route(topic_name, partition)
        if route.writer is not None:
            size_bytes = records_size_bytes(batch)
            topic = topic or await self.topics.get(topic_name)  # the caller's, when it has it
            batch = await self.typed_records.attach(topic_name, topic.config, batch)
            return route.writer.submit(batch, size_bytes, producer, transaction)
        if not forward:
            raise NotLeader(
                f"Node {route.leader_id} leads {topic_name}/{partition}.", leader_id=route.leader_id
            )
        return asyncio.ensure_future(
            self._forward_append(route, topic_name, partition, batch, producer)
        )

    async def _forward_append(
        self, route: Route, topic: str, partition: int, batch, producer: ProducerBatch | None
    ) -> BatchAck:
        path = routes.append_path(topic, partition)
        body = encode_append(batch, producer=producer)
        answer = await self.peers.to_leader(
            route.url, route.leader_id, topic, partition, path, body
        )
        return BatchAck(answer["base_offset"], len(batch), answer["append_time_ms"])

    # ---- fetch -----------------------------------------------------------------------------

    async def fetch(self, request: FetchRequest) -> FetchResult:
        """Records from `offset`; waits up to `timeout_ms` for the first one (long-poll, woken
        by the commit, not by a poll interval). Reads past rows this reader does not see
        (markers, aborted records) and reports where it went on (`next_offset`)."""
        if request.offset < 0:
            raise InvalidRequest(f"Offset {request.offset} is negative; offsets start at 0.")
        (await self.topics.get(request.topic)).check_partition(request.partition)
        writer = await self.leaders.writer(request.topic, request.partition)
        moved_to = None

        async def read() -> FetchResult:
            nonlocal request, moved_to
            writer.notice_foreign_commits()  # at most every FOREIGN_CHECK_INTERVAL_MS
            while True:
                result = await self._read(writer.log, request)
                if result.records.num_rows or result.next_offset is None:
                    return result
                moved_to = result.next_offset  # go on from there, and wait for records
                request = dataclasses.replace(request, offset=moved_to)

        result = await self.long_poll(
            [(request.topic, request.partition)],
            read,
            lambda result: result.records.num_rows > 0,
            request.timeout_ms,
        )
        if result.records.num_rows:
            return result
        return dataclasses.replace(result, next_offset=moved_to)

    async def long_poll(
        self,
        partitions: Sequence[tuple[str, int]],
        read: Callable[[], Awaitable[T]],
        enough: Callable[[T], bool],
        timeout_ms: int,
    ) -> T:
        """`read()` until its result is `enough`, waiting for the next commit of `partitions`
        between reads, for up to `timeout_ms`; the last result. The one long poll of every
        front-end: woken by this node's commits, and at the latest when another writer's commit
        could be visible (FOREIGN_CHECK_INTERVAL_MS)."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            events = self.commit_events(partitions)  # before the read: no commit is missed
            result = await read()
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if enough(result) or remaining_ms <= 0 or self._closing:
                return result
            await self.wait_for_commits(events, remaining_ms)

    async def read_now(self, request: FetchRequest) -> FetchResult:
        """Records from `request.offset` as they are now, without waiting: this node's log if
        it leads the partition, else the shared table as a follower (KIP-392).

        Raises:
            NotLeader: another node leads it and the read is at its head (ask the leader).
            OffsetOutOfRange: the offset is outside the partition.
        """
        if request.offset < 0:
            raise InvalidRequest(f"Offset {request.offset} is negative; offsets start at 0.")
        (await self.topics.get(request.topic)).check_partition(request.partition)
        route = await self.leaders.route(request.topic, request.partition)
        if route.writer is not None:
            route.writer.notice_foreign_commits()
            return await self._read(route.writer.log, request)
        result = await self.read_as_follower(request)
        if result is None:
            raise NotLeader(
                f"Node {route.leader_id} leads {request.topic}/{request.partition}.",
                leader_id=route.leader_id,
            )
        return result

    def commit_events(self, partitions: Sequence[tuple[str, int]]) -> list[asyncio.Event]:
        """Events the next commit of each partition this node leads will set. Take them
        before reading, so a commit between the read and the wait is not missed."""
        writers = (self.leaders.writer_here(topic, p) for topic, p in partitions)
        return [writer.appended_event() for writer in writers if writer is not None]

    async def wait_for_commits(self, events: Sequence[asyncio.Event], timeout_ms: int) -> None:
        """Return once one of `events` is set, or after `timeout_ms`, and at the latest when
        another writer's commit could be visible (FOREIGN_CHECK_INTERVAL_MS)."""
        wait_s = max(0, min(timeout_ms, FOREIGN_CHECK_INTERVAL_MS)) / 1000
        if not events:
            await asyncio.sleep(wait_s)
            return
        waiters = [asyncio.ensure_future(event.wait()) for event in events]
        try:
            await asyncio.wait(waiters, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def read_as_follower(self, request: FetchRequest) -> FetchResult | None:
        """Committed records of a partition another node leads, read here from the shared
        table (follower_reads); None when the leader must answer (the head, long-polls)."""
        if not self.settings.follower_fetch or request.offset < 0:
            return None
        result = await self._followers.read(
            request.topic,
            request.partition,
            offset=request.offset,
            records_max=self.settings.fetch_records_max,
            bytes_max=request.bytes_max,
            isolation=request.isolation,
        )
        if result is not None:
            _count_fetched(request.topic, result)
        return result

    async def record_at(self, topic_name: str, partition: int, offset: int) -> FetchResult:
        """The committed record at `offset`, read wherever the partition is led (this node's
        log, else the shared table): at most one row, none when compaction removed it.

        Raises:
            OffsetOutOfRange: `offset` is below the log start or at or past the high watermark.
        """
        (await self.topics.get(topic_name)).check_partition(partition)
        route = await self.leaders.route(topic_name, partition)
        if route.writer is None:
            result = await self._followers.read_committed(
                topic_name, partition, offset=offset, records_max=1, bytes_max=1
            )
        else:
            route.writer.notice_foreign_commits()
            result = await self._blocking(
                route.writer.log.read, from_offset=offset, records_max=1, bytes_max=1
            )
        if offset >= result.high_watermark:
            raise OffsetOutOfRange(offset, result.log_start_offset, result.high_watermark)
        records = result.records
        if records.num_rows and records.column("offset")[0].as_py() != offset:
            records = records.slice(0, 0)  # compaction removed it; the next record came back
        return FetchResult(records, result.log_start_offset, result.high_watermark)

    async def _read(self, log: DeltaPartitionLog, request: FetchRequest) -> FetchResult:
        result = await self._blocking(
            log.read,
            from_offset=request.offset,
            records_max=self.settings.fetch_records_max,
            bytes_max=request.bytes_max,
            isolation=request.isolation,
        )
        _count_fetched(request.topic, result)
        return result


def _count_fetched(topic: str, result: FetchResult) -> None:
    records = result.records
    if records.num_rows:
        metrics.record_fetch(topic, records.num_rows, payload_bytes(records))


def _consume_outcome(future: asyncio.Future) -> None:
    """acks=0: nobody waits for the outcome; retrieve it so asyncio does not log it."""
    if not future.cancelled():
        future.exception()


def _record_ack(
    partition: int, ack: BatchAck, position: int, record: NewRecord, topic: TopicInfo
) -> RecordAck:
    if topic.config.log_append_time or record.timestamp_ms is None:
        timestamp_ms = ack.append_time_ms
    else:
        timestamp_ms = record.timestamp_ms
    return RecordAck(partition, ack.base_offset + position, timestamp_ms)
