"""Broker: topic admin, produce and fetch over the partition logs of one storage root.

Concurrency contract: every coroutine runs on one event loop; blocking Delta work runs on the
broker's executor. Partition logs and writers are created lazily, once per partition.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from api.broker.errors import (
    BrokerShuttingDown,
    InvalidProducerRequest,
    InvalidRequest,
    RecordTooLarge,
)
from api.broker.partitioner import RoundRobin, choose_partition
from api.broker.writer import BatchAck, CommitLimits, PartitionWriter
from conf.settings import Settings
from storage_layout import paths
from storage_layout.catalog import TopicCatalog, TopicInfo, check_partition_count
from storage_layout.delta_log import DeltaPartitionLog
from storage_layout.errors import TopicExists, TopicNotFound
from storage_layout.producer_state import ProducerBatch, check_batch_shape
from storage_layout.producers import ProducerIdAllocator, ProducerIdentity
from storage_layout.records import FetchResult, NewRecord, PartitionBounds
from storage_layout.topic_config import TopicConfig, validate_topic_name

EXECUTOR_THREADS = 8
ACKS_NONE = "0"  # answer once queued
ACKS_ALL = "all"  # answer after the durable Delta commit ("1" and "-1" mean the same here)


@dataclass(frozen=True, slots=True)
class ProduceRecord:
    """A record of a produce request and the partition it asked for (None = let us choose)."""

    partition: int | None
    record: NewRecord


@dataclass(frozen=True, slots=True)
class RecordAck:
    """Where one produced record landed."""

    partition: int
    offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class RecordQueued:
    """acks=0: the record was queued for `partition`; its offset is not reported."""

    partition: int


@dataclass(frozen=True, slots=True)
class Idempotence:
    """Producer fields of a produce request: a base sequence per partition that receives
    records (`base_sequences`), or one base sequence for whichever partition does (v3)."""

    producer_id: int
    epoch: int
    base_sequences: Mapping[int, int] | None = None
    base_sequence: int | None = None

    def batch(self, partition: int, count: int) -> ProducerBatch:
        """The batch of `count` records routed to `partition` (InvalidProducerRequest if none)."""
        if self.base_sequences is not None:
            sequence = self.base_sequences.get(partition)
        else:
            sequence = self.base_sequence
        if sequence is None:
            raise InvalidProducerRequest(
                f"Records are routed to partition {partition} but the request has no base "
                f"sequence for it: add \"{partition}\" to 'base_sequences'."
            )
        batch = ProducerBatch(self.producer_id, self.epoch, sequence, count)
        try:
            check_batch_shape(batch)
        except ValueError as error:
            raise InvalidProducerRequest(str(error)) from None
        return batch


@dataclass(frozen=True, slots=True)
class FetchRequest:
    topic: str
    partition: int
    offset: int
    bytes_max: int
    timeout_ms: int


class Broker:
    """The broker services of one gateway node."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.root = paths.normalize_root(settings.data_dir)
        self._executor = ThreadPoolExecutor(EXECUTOR_THREADS, thread_name_prefix="lakelog-io")
        self._catalog: TopicCatalog | None = None
        self._producer_ids: ProducerIdAllocator | None = None
        self._topics: dict[str, TopicInfo] = {}
        self._topics_loaded_at = 0.0
        self._writers: dict[tuple[str, int], PartitionWriter] = {}
        self._writer_locks: dict[tuple[str, int], asyncio.Lock] = {}
        self._round_robin: dict[str, RoundRobin] = {}
        self._closing = False
        self._limits = CommitLimits(
            settings.linger_ms, settings.commit_records_max, settings.commit_bytes_max
        )

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        self._catalog = await self._blocking(TopicCatalog, self.root)
        await self._refresh_topics()

    async def close(self) -> None:
        self._closing = True
        writers, self._writers = list(self._writers.values()), {}
        await asyncio.gather(*(writer.close() for writer in writers), return_exceptions=True)
        self._executor.shutdown(wait=True)

    async def _blocking(self, function, *args, **kwargs):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: function(*args, **kwargs))

    # ---- topics ----------------------------------------------------------------------------

    async def list_topics(self) -> list[TopicInfo]:
        await self._refresh_topics()
        return sorted(self._topics.values(), key=lambda topic: topic.name)

    async def topic(self, name: str) -> TopicInfo:
        """The topic from the cache; a miss or an old cache re-reads the catalog (other nodes
        and tools may have created it)."""
        age_ms = (time.monotonic() - self._topics_loaded_at) * 1000
        if name not in self._topics or age_ms > self.settings.catalog_refresh_ms:
            await self._refresh_topics()
        topic = self._topics.get(name)
        if topic is None:
            raise TopicNotFound(name)
        return topic

    async def create_topic(
        self, name: str, *, partitions: int, configs: Mapping[str, object]
    ) -> TopicInfo:
        config = TopicConfig.from_mapping(configs)
        topic = await self._blocking(self._catalog.create_topic, name, partitions, config)
        await self._refresh_topics()
        return topic

    async def validate_new_topic(
        self, name: str, partitions: int, configs: Mapping[str, object]
    ) -> TopicInfo:
        """What create_topic would create, without creating it (v3 `validate_only`)."""
        validate_topic_name(name)
        await self._refresh_topics()
        if name in self._topics:
            raise TopicExists(name)
        check_partition_count(partitions)
        return TopicInfo(name, "", 0, partitions, TopicConfig.from_mapping(configs))

    def validate_configs(self, configs: Mapping[str, object]) -> TopicConfig:
        return TopicConfig.from_mapping(configs)

    async def alter_topic(
        self, name: str, *, partitions: int | None = None, configs: Mapping[str, object] = {}
    ) -> TopicInfo:
        current = await self.topic(name)
        config = TopicConfig.from_mapping(configs, base=current.config) if configs else None
        topic = await self._blocking(
            self._catalog.alter_topic, name, partitions=partitions, config=config
        )
        await self._refresh_topics()
        return topic

    async def delete_topic(self, name: str) -> None:
        topic = await self.topic(name)
        for partition in range(topic.partitions):
            writer = self._writers.pop((name, partition), None)
            if writer is not None:
                await writer.close()
        await self._blocking(self._catalog.delete_topic, name)
        await self._refresh_topics()

    async def _refresh_topics(self) -> None:
        self._topics = await self._blocking(self._catalog.topics)
        self._topics_loaded_at = time.monotonic()

    async def partition_bounds(self, topic_name: str, partition: int) -> PartitionBounds:
        writer = await self._writer(topic_name, partition)
        return writer.log.bounds()

    # ---- producers -------------------------------------------------------------------------

    async def init_producer(
        self, transactional_id: str | None = None, client_id: str | None = None
    ) -> ProducerIdentity:
        """A producer id and epoch for idempotent produce (see ProducerIdAllocator)."""
        if self._producer_ids is None:
            self._producer_ids = await self._blocking(ProducerIdAllocator, self.root)
        return await self._blocking(self._producer_ids.init_producer, transactional_id, client_id)

    # ---- produce ---------------------------------------------------------------------------

    async def produce(
        self,
        topic_name: str,
        records: Sequence[ProduceRecord],
        *,
        idempotence: Idempotence | None = None,
        acks: str = ACKS_ALL,
    ) -> list[RecordAck | RecordQueued | Exception]:
        """Append records; one result per record, in request order.

        Records for one partition keep their request order and get contiguous offsets. A record
        that fails validation gets its error in its slot and is not written; the others are.
        With `idempotence`, each partition's records form one producer batch (a retry gets the
        original offsets). With acks=0 the results are RecordQueued once the records are queued.

        Raises:
            InvalidProducerRequest: a partition that receives records has no base sequence.
        """
        topic = await self.topic(topic_name)
        results: list = [None] * len(records)
        by_partition = self._route(topic, records, results)
        batches = {
            partition: idempotence.batch(partition, len(indexes)) if idempotence else None
            for partition, indexes in by_partition.items()
        }
        await asyncio.gather(
            *(
                self._produce_partition(
                    topic, partition, indexed, records, results, batches[partition], acks
                )
                for partition, indexed in by_partition.items()
            )
        )
        return results

    def _route(self, topic: TopicInfo, records, results) -> dict[int, list[int]]:
        limit = topic.config.max_message_bytes
        round_robin = self._round_robin.setdefault(topic.name, RoundRobin())
        by_partition: dict[int, list[int]] = {}
        for index, produce_record in enumerate(records):
            size = produce_record.record.size_bytes()
            if size > limit:
                results[index] = RecordTooLarge(index=index, size_bytes=size, limit_bytes=limit)
                continue
            partition = choose_partition(
                explicit=produce_record.partition,
                key=produce_record.record.key,
                partitions=topic.partitions,
                round_robin=round_robin,
            )
            try:
                topic.check_partition(partition)
            except Exception as error:
                results[index] = error
                continue
            by_partition.setdefault(partition, []).append(index)
        return by_partition

    async def _produce_partition(
        self, topic, partition, indexes, records, results, producer_batch, acks
    ) -> None:
        batch = [records[i].record for i in indexes]
        size_bytes = sum(record.size_bytes() for record in batch)
        try:
            writer = await self._writer(topic.name, partition)
            future = writer.submit(batch, size_bytes, producer_batch)
            if acks == ACKS_NONE:
                future.add_done_callback(_consume_outcome)
                for index in indexes:
                    results[index] = RecordQueued(partition)
                return
            ack = await future
        except Exception as error:
            for index in indexes:
                results[index] = error
            return
        for position, index in enumerate(indexes):
            results[index] = _record_ack(partition, ack, position, records[index].record, topic)

    # ---- fetch -----------------------------------------------------------------------------

    async def fetch(self, request: FetchRequest) -> FetchResult:
        """Records from `offset`; waits up to `timeout_ms` for the first one (long-poll, woken
        by the commit, not by a poll interval)."""
        if request.offset < 0:
            raise InvalidRequest(f"Offset {request.offset} is negative; offsets start at 0.")
        writer = await self._writer(request.topic, request.partition)
        deadline = time.monotonic() + request.timeout_ms / 1000
        while True:
            appended = writer.appended_event()
            result = await self._read(writer.log, request)
            remaining = deadline - time.monotonic()
            if result.records.num_rows or remaining <= 0 or self._closing:
                return result
            try:
                await asyncio.wait_for(appended.wait(), remaining)
            except TimeoutError:
                return await self._read(writer.log, request)

    async def _read(self, log: DeltaPartitionLog, request: FetchRequest) -> FetchResult:
        return await self._blocking(
            log.read,
            from_offset=request.offset,
            records_max=self.settings.fetch_records_max,
            bytes_max=request.bytes_max,
        )

    # ---- partition writers -----------------------------------------------------------------

    async def _writer(self, topic_name: str, partition: int) -> PartitionWriter:
        key = (topic_name, partition)
        writer = self._writers.get(key)
        if writer is not None:
            return writer
        topic = await self.topic(topic_name)
        topic.check_partition(partition)
        async with self._writer_locks.setdefault(key, asyncio.Lock()):
            if key not in self._writers:
                if self._closing:
                    raise BrokerShuttingDown("The gateway is shutting down; retry elsewhere.")
                self._writers[key] = await self._open_writer(topic_name, partition)
        return self._writers[key]

    async def _open_writer(self, topic_name: str, partition: int) -> PartitionWriter:
        uri = paths.partition_table_uri(self.root, topic_name, partition)
        log = await self._blocking(
            DeltaPartitionLog.open, uri, tail_records_max=self.settings.tail_records_max
        )
        return PartitionWriter(
            log,
            config=lambda: self._topics[topic_name].config,
            executor=self._executor,
            limits=self._limits,
            fault_point=self.settings.fault_point,
        )


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
