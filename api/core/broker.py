"""Broker: topic admin, produce and fetch over the partition logs of one storage root.

Any node accepts any request: writes for a partition another node leads are forwarded to it
(api/core/leaders.py decides who leads). Concurrency contract: every coroutine runs on one
event loop; blocking Delta work runs on the broker's executor.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import httpx

from api.core import metrics, node_tls
from api.core.cluster import Cluster, ClusterSettings
from api.core.errors import (
    BrokerShuttingDown,
    InvalidRequest,
    KeyRequired,
    NotLeader,
    RecordTooLarge,
)
from api.core.follower_reads import FollowerReads
from api.core.groups.errors import NotCoordinator
from api.core.leaders import Leaders, Route
from api.core.records import (
    ACKS_ALL,
    ACKS_NONE,
    FetchRequest,
    Idempotence,
    ProduceRecord,
    RecordAck,
    RecordQueued,
)
from api.core.request_context import REQUEST_ID_HEADER, current_request_id
from api.core.scheduled_jobs import ScheduledJobs
from api.core.transaction_requests import TransactionRequests
from api.core.transactions import TransactionCoordinator
from api.core.writer import (
    FOREIGN_CHECK_INTERVAL_MS,
    BatchAck,
    CommitLimits,
    TransactionMarker,
)
from conf.settings import Settings
from storage_layout import paths, store
from storage_layout.append_wire import (
    INTERNAL_APPEND_PATH,
    INTERNAL_MARKER_PATH,
    INTERNAL_TXN_OFFSETS_PATH,
    encode_append,
)
from storage_layout.catalog import TopicCatalog, TopicInfo, check_partition_count
from storage_layout.consumer_offsets import ConsumerOffsets
from storage_layout.errors import OffsetOutOfRange, ProducerError, TopicExists, TopicNotFound
from storage_layout.log import DeltaPartitionLog
from storage_layout.log.arrow_records import payload_bytes
from storage_layout.nodes import NodeRegistry
from storage_layout.partitioner import RoundRobin, choose_partition
from storage_layout.producer_state import ProducerBatch
from storage_layout.producers import ProducerIdAllocator, ProducerIdentity
from storage_layout.records import (
    AppTransaction,
    FetchResult,
    NewRecord,
    PartitionBounds,
    Records,
    TopicPartition,
    records_size_bytes,
)
from storage_layout.topic_config import (
    TopicConfig,
    check_config_name,
    normalized,
    resolved,
    validate_topic_name,
)
from storage_layout.topic_defaults import read_topic_defaults, write_topic_defaults
from storage_layout.transaction_state import TransactionStateStore

EXECUTOR_THREADS = 8
DELETE_TO_HIGH_WATERMARK = -1  # Kafka's DeleteRecords offset for "everything so far"
CATCH_UP_WAIT_S = 5.0

log = logging.getLogger("lakelog.broker")


class Broker:
    """The broker services of one gateway node."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        store.configure(settings.storage_options)
        self.root = paths.normalize_root(settings.data_dir)
        self._executor = ThreadPoolExecutor(EXECUTOR_THREADS, thread_name_prefix="lakelog-io")
        # Liveness renewals on a thread of their own: queued behind partition opens (a node
        # taking a thousand partitions at start), a renewal came late enough for the node to
        # stop leading (can_lead) and answer 503s.
        self._heartbeats = ThreadPoolExecutor(1, thread_name_prefix="lakelog-heartbeat")
        self._followers = FollowerReads(self.root, self._blocking)
        self._catalog: TopicCatalog | None = None
        self._producer_ids: ProducerIdAllocator | None = None
        self._topics: dict[str, TopicInfo] = {}
        self._topics_loaded_at = 0.0
        self._topics_read_started_at = -1.0  # when the newest completed catalog read began
        self._topics_reading: asyncio.Future | None = None
        self.cluster: Cluster | None = None
        self.leaders: Leaders | None = None
        self.groups = None  # GroupCoordinator, once started
        self.transactions = None  # TransactionCoordinator, once started
        self._transaction_states: TransactionStateStore | None = None  # with the groups
        self.transaction_requests = None  # TransactionRequests: its operations from any node
        self._maintenance: asyncio.Task | None = None
        self.scheduled_jobs: ScheduledJobs | None = None  # in-gateway maintenance, if on
        self._scheduled: asyncio.Task | None = None
        self._http: httpx.AsyncClient | None = None
        self._round_robin: dict[str, RoundRobin] = {}
        self._closing = False
        self._limits = CommitLimits(
            settings.linger_ms,
            settings.commit_records_max,
            settings.commit_bytes_max,
            settings.producer_id_expiration_ms,
        )

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        await self._store_topic_defaults()
        self._catalog = await self._blocking(TopicCatalog, self.root)
        await self._refresh_topics()
        registry = await self._blocking(NodeRegistry, self.root)
        self.cluster = Cluster(self._cluster_settings(), registry)
        await self._blocking(self.cluster.heartbeat)
        self.leaders = Leaders(
            root=self.root,
            cluster=self.cluster,
            executor=self._executor,
            limits=self._limits,
            tail_records_max=self.settings.tail_records_max,
            config_of=lambda name: self._topics[name].config,
            fenced=not self.settings.unsafe_disable_fencing,
            fault_point=self.settings.fault_point,
        )
        metrics.PARTITIONS_LED.set_function(self.leaders.led_count)
        self._http = httpx.AsyncClient(
            timeout=self.settings.forward_timeout_ms / 1000,
            verify=node_tls.client_verify(self.settings),
            event_hooks={"request": [_carry_request_id]},
        )
        await self._start_groups()
        await self._start_transactions()
        self._maintenance = asyncio.get_running_loop().create_task(self._maintain_forever())
        if self.settings.maintenance:
            self.scheduled_jobs = ScheduledJobs(
                root=self.root,
                settings=self.settings,
                node_id=self.cluster.node_id,
                topics=self.list_topics,
                preferred=self.cluster.preferred,
                blocking=self._blocking,
                committed=self._after_maintenance_commit,
            )
            self._scheduled = asyncio.get_running_loop().create_task(
                self.scheduled_jobs.run_forever()
            )

    async def _after_maintenance_commit(self, topic: str, partition: int) -> None:
        writer = self.leaders.writer_here(topic, partition)
        if writer is not None:
            writer.request_catch_up()

    async def _store_topic_defaults(self) -> None:
        """Store the cluster-wide topic defaults set in this node's environment, over the ones
        stored (another node may have set others); a change is logged."""
        ours = self.settings.topic_defaults()
        if not ours:
            return
        stored = await self._blocking(read_topic_defaults, self.root)
        merged = {**stored, **normalized(ours)}
        if merged != stored:
            await self._blocking(write_topic_defaults, self.root, merged)
            log.info("cluster-wide topic defaults now %s (were %s)", merged, stored)

    async def _start_groups(self) -> None:
        # Imported here: the group layer builds on the broker (it reads partitions through it).
        from api.core.groups.coordinator import GroupCoordinator

        offsets = await self._blocking(ConsumerOffsets, self.root)
        self._transaction_states = await self._blocking(TransactionStateStore, self.root)
        self.groups = GroupCoordinator(
            offsets=offsets,
            node_id=self.cluster.node_id,
            live_nodes=self.cluster.live_nodes,
            node_url=self.cluster.url,
            topics=self._partition_counts,
            blocking=self._blocking,
            pending_transactions=self._pending_transaction_offsets,
        )
        self.groups.start()

    async def _pending_transaction_offsets(self, group_id: str) -> list:
        """(producer id, partitions) of the open transactions holding offsets of the group,
        from their stored states (one listing when there are none)."""
        return await self._blocking(self._transaction_states.pending_offsets_of, group_id)

    async def _start_transactions(self) -> None:
        store = self._transaction_states
        self.transactions = TransactionCoordinator(
            store=store,
            node_id=self.cluster.node_id,
            live_nodes=self.cluster.live_nodes,
            init_producer=self.init_producer,
            write_marker=self.write_marker,
            commit_offsets=self._commit_transaction_offsets,
            blocking=self._blocking,
        )
        self.transactions.start()
        self.transaction_requests = TransactionRequests(
            self.transactions,
            node_id=self.cluster.node_id,
            node_url=self.cluster.url,
            http=self._http,
        )

    async def write_marker(
        self, topic_name: str, partition: int, marker: TransactionMarker, *, forward: bool = True
    ) -> None:
        """Write a transaction marker at the partition's leader (FORMAT.md §14): here, or
        forwarded to it (`forward`).

        Raises:
            NotLeader: the leader could not be reached (the coordinator tries again later).
            ProducerFenced: the partition has seen a newer epoch of the producer.
        """
        route = await self.leaders.route(topic_name, partition)
        if route.writer is not None:
            await route.writer.submit_marker(marker)
            return
        if not forward or route.url is None:
            raise NotLeader(f"Node {route.leader_id} leads {topic_name}/{partition}.")
        path = INTERNAL_MARKER_PATH.format(topic=topic_name, partition=partition)
        await self._post_to_leader(route, topic_name, partition, path, dataclasses.asdict(marker))

    async def add_transaction_offsets(
        self, transactional_id: str, producer_id: int, epoch: int, offsets: list
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

    async def _commit_transaction_offsets(self, group_id: str, commits, producer_id: int) -> None:
        """An ended transaction's offsets (none if it aborted) at the group's coordinator,
        here or forwarded: committed, and the group's offsets of the producer stable again."""
        url = self.groups.remote_url(group_id)
        if url is None:
            await self.end_transaction_offsets(group_id, commits, producer_id)
            return
        path = INTERNAL_TXN_OFFSETS_PATH.format(group=group_id)
        body = {
            "producer_id": producer_id,
            "offsets": [dataclasses.asdict(commit) for commit in commits],
        }
        try:
            response = await self._http.post(url + path, json=body)
        except httpx.HTTPError as error:
            raise NotCoordinator(f"The coordinator of group {group_id!r}: {error!r}") from None
        if response.status_code != 200:
            raise NotCoordinator(
                f"The coordinator of group {group_id!r} refused: {response.text[:200]}"
            )

    async def end_transaction_offsets(self, group_id: str, commits, producer_id: int) -> None:
        if commits:
            await self.groups.commit_transactional(group_id, commits)
        await self.groups.end_transactional(group_id, producer_id)

    async def _partition_counts(self) -> dict[str, int]:
        return {topic.name: topic.partitions for topic in await self.list_topics()}

    def _cluster_settings(self) -> ClusterSettings:
        settings = self.settings
        return ClusterSettings(
            settings.node_id,
            settings.url,
            settings.lease_ms,
            settings.heartbeat_ms,
            settings.kafka_address,
        )

    async def close(self) -> None:
        self._closing = True
        if self._maintenance is not None:
            self._maintenance.cancel()
        if self._scheduled is not None:
            self._scheduled.cancel()
            await asyncio.gather(self._scheduled, return_exceptions=True)
        if self.transactions is not None:
            await self.transactions.close()
        if self.groups is not None:
            await self.groups.close()
        if self.leaders is not None:
            await self.leaders.close()
        if self.cluster is not None:
            await self._blocking(self.cluster.leave)
        if self._http is not None:
            await self._http.aclose()
        self._executor.shutdown(wait=True)
        self._heartbeats.shutdown(wait=True)

    async def _maintain_forever(self) -> None:
        """Renew this node's liveness, and (in a task of its own, so that a long round over
        many partitions never delays a renewal) keep partition leadership where it belongs."""
        leadership = asyncio.get_running_loop().create_task(self._keep_leadership_forever())
        try:
            await self._renew_forever()
        finally:
            leadership.cancel()

    async def _renew_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closing:
            try:
                await loop.run_in_executor(self._heartbeats, self.cluster.heartbeat)
            except asyncio.CancelledError:
                raise
            except Exception:  # keep renewing: one failed round must not stop the node
                log.exception("liveness renewal failed")
            await asyncio.sleep(self.settings.heartbeat_ms / 1000)

    async def _keep_leadership_forever(self) -> None:
        while not self._closing:
            try:
                keys = [(t.name, p) for t in self._topics.values() for p in range(t.partitions)]
                await self.leaders.maintain(keys)
            except asyncio.CancelledError:
                raise
            except Exception:  # one failed round must not stop the next
                log.exception("cluster maintenance round failed")
            await asyncio.sleep(self.settings.heartbeat_ms / 1000)

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
        now = time.monotonic()
        refresh_s = self.settings.catalog_refresh_ms / 1000
        if name not in self._topics:
            await self._read_topics_since(now)  # created a moment ago elsewhere?
        elif now - self._topics_loaded_at > refresh_s:
            await self._read_topics_since(now - refresh_s)
        topic = self._topics.get(name)
        if topic is None:
            raise TopicNotFound(name)
        return topic

    async def create_topic(
        self, name: str, *, partitions: int, configs: Mapping[str, object]
    ) -> TopicInfo:
        topic = await self._blocking(
            self._catalog.create_topic, name, partitions, overrides=configs
        )
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
        overrides = normalized(configs)
        defaults = await self._blocking(read_topic_defaults, self.root)
        config = resolved(overrides, defaults)
        return TopicInfo(name, "", 0, partitions, config, overrides=overrides, defaults=defaults)

    async def topic_defaults(self) -> dict[str, str]:
        """The cluster-wide topic config defaults in force (LAKELOG_DEFAULT_*, by topic name)."""
        return await self._blocking(read_topic_defaults, self.root)

    def validate_configs(self, configs: Mapping[str, object]) -> TopicConfig:
        return TopicConfig.from_mapping(configs)

    async def alter_topic(
        self,
        name: str,
        *,
        partitions: int | None = None,
        configs: Mapping[str, object | None] = {},
    ) -> TopicInfo:
        """Add partitions and/or change the topic's own configs: a value sets one, None
        removes it (the topic then follows the cluster-wide default again)."""
        current = await self.topic(name)
        overrides = None
        if configs:
            overrides = {k: v for k, v in current.overrides.items() if k not in configs}
            overrides |= {k: v for k, v in configs.items() if v is not None}
            for removed in (k for k, v in configs.items() if v is None):
                check_config_name(removed)
        topic = await self._blocking(
            self._catalog.alter_topic, name, partitions=partitions, overrides=overrides
        )
        await self._refresh_topics()
        return topic

    async def delete_topic(self, name: str) -> None:
        await self.topic(name)
        await self.leaders.close_topic(name)
        self._followers.forget_topic(name)
        metrics.forget_topic(name)
        await self._blocking(self._catalog.delete_topic, name)
        await self._refresh_topics()

    async def _refresh_topics(self) -> None:
        started = time.monotonic()
        self._topics = await self._blocking(self._catalog.topics)
        self._topics_loaded_at = time.monotonic()
        self._topics_read_started_at = max(self._topics_read_started_at, started)

    async def _read_topics_since(self, moment: float) -> None:
        """Have the catalog read by a read that began at or after `moment` (monotonic s).
        Requests arriving together share one read: one each, as when the cache went stale
        under load, queued hundreds of catalog reads (a LIST and GETs each on an object
        store) ahead of commits and heartbeats."""
        while self._topics_read_started_at < moment:
            if self._topics_reading is None or self._topics_reading.done():
                self._topics_reading = asyncio.ensure_future(self._refresh_topics())
            await asyncio.shield(self._topics_reading)

    async def partition_bounds(
        self, topic_name: str, partition: int, *, stable: bool = False
    ) -> PartitionBounds:
        """log_start_offset and high watermark from the leader's loaded snapshot (O(1)), and
        the last stable offset when `stable` (from the transaction index: reads the files
        written since it was last brought up to date, usually none).

        Raises:
            NotLeader: another node leads the partition (routes proxy to it first).
        """
        (await self.topic(topic_name)).check_partition(partition)
        writer = await self.leaders.writer(topic_name, partition)
        writer.notice_foreign_commits()  # the next answer includes other writers' appends
        if stable:
            return await self._blocking(writer.log.stable_bounds)
        return writer.log.bounds()

    async def partition_size_bytes(self, topic_name: str, partition: int) -> int:
        """The Parquet bytes of the partition's live files, from the leader's snapshot.

        Raises:
            NotLeader: another node leads the partition (routes proxy to it first).
        """
        (await self.topic(topic_name)).check_partition(partition)
        return (await self.leaders.writer(topic_name, partition)).log.size_bytes()

    async def delete_records(self, topic_name: str, partition: int, offset: int) -> int:
        """Kafka's DeleteRecords on the partition's leader: the log starts at `offset` (-1:
        the high watermark) once this returns; returns the new log start.

        Raises:
            NotLeader: another node leads the partition.
            OffsetOutOfRange: `offset` is above the high watermark.
        """
        (await self.topic(topic_name)).check_partition(partition)
        writer = await self.leaders.writer(topic_name, partition)
        if offset == DELETE_TO_HIGH_WATERMARK:
            offset = writer.log.bounds().high_watermark
        elif offset < 0:  # Kafka answers OFFSET_OUT_OF_RANGE here too
            bounds = writer.log.bounds()
            raise OffsetOutOfRange(offset, bounds.log_start_offset, bounds.high_watermark)
        uri = paths.partition_table_uri(self.root, topic_name, partition)
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
        (await self.topic(topic_name)).check_partition(partition)
        log = (await self.leaders.writer(topic_name, partition)).log
        return await self._blocking(log.offset_for_timestamp, timestamp_ms)

    @property
    def http(self) -> httpx.AsyncClient:
        """The client this node uses to reach other nodes (forwarding, remote reads)."""
        return self._http

    async def partition_leader(self, topic_name: str, partition: int) -> int | None:
        """The node that leads the partition (None if it has never been written)."""
        (await self.topic(topic_name)).check_partition(partition)
        return await self.leaders.leader_of(topic_name, partition)

    async def remote_leader_url(self, topic_name: str, partition: int) -> str | None:
        """The leader's URL when another node leads the partition (None: served here)."""
        (await self.topic(topic_name)).check_partition(partition)
        route = await self.leaders.route(topic_name, partition)
        return route.url

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
        if idempotence is not None and idempotence.transactional_id is not None:
            await self._add_to_transaction(topic_name, by_partition, idempotence, results)
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

    def _route(self, topic: TopicInfo, records, results) -> dict[int, list[int]]:
        limit = topic.config.max_message_bytes
        round_robin = self._round_robin.setdefault(topic.name, RoundRobin())
        by_partition: dict[int, list[int]] = {}
        for index, produce_record in enumerate(records):
            size = produce_record.record.size_bytes()
            if size > limit:
                results[index] = RecordTooLarge(index=index, size_bytes=size, limit_bytes=limit)
                continue
            if produce_record.record.key is None and topic.config.compacted:
                results[index] = KeyRequired(topic=topic.name, index=index)
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
        try:
            pending = await self.submit(
                topic.name, partition, batch, producer=producer_batch, forward=True
            )
            if acks == ACKS_NONE:
                pending.add_done_callback(_consume_outcome)
                for index in indexes:
                    results[index] = RecordQueued(partition)
                return
            ack = await pending
        except Exception as error:
            for index in indexes:
                results[index] = error
            return
        for position, index in enumerate(indexes):
            results[index] = _record_ack(partition, ack, position, records[index].record, topic)

    async def submit(
        self,
        topic_name: str,
        partition: int,
        batch: Records,
        *,
        producer: ProducerBatch | None,
        forward: bool,
        transaction: AppTransaction | None = None,
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
        path = INTERNAL_APPEND_PATH.format(topic=topic, partition=partition)
        body = encode_append(batch, producer=producer)
        answer = await self._post_to_leader(route, topic, partition, path, body)
        return BatchAck(answer["base_offset"], len(batch), answer["append_time_ms"])

    async def _post_to_leader(
        self, route: Route, topic: str, partition: int, path: str, body: dict
    ) -> dict:
        """POST `body` to the partition leader's internal `path`; its answer.

        Raises:
            NotLeader: the leader is unreachable or refused (it no longer leads): retry.
            ProducerError: the leader's verdict on the producer's sequence or epoch, unchanged.
        """
        post = self._http.post(route.url + path, json=body)
        try:
            response = await self._while_alive(post, route.leader_id, topic, partition)
        except httpx.HTTPError as error:
            self.leaders.forget(topic, partition)
            raise NotLeader(
                f"The leader of {topic}/{partition} at {route.url} is unreachable "
                f"({type(error).__name__}); retry."
            ) from None
        answer = response.json()
        if response.status_code == 200:
            return answer
        if response.status_code == 409 and "producer_error" in answer:
            raise producer_error_from(answer)
        self.leaders.forget(topic, partition)
        raise NotLeader(f"The leader of {topic}/{partition} refused: {answer.get('message')}")

    async def _while_alive(self, request, node_id: int, topic: str, partition: int):
        """The forwarded request's response, unless the node it went to stops renewing its
        lease first (paused, cut off): then this node may take the partition, so waiting out
        `forward_timeout_ms` (30 s) only delayed the client's retry (chaos T2: recovery p50 was
        the client's own timeout). Either way the outcome is unknown to the client, as after
        a timeout; an idempotent producer's retry is safe, and a stale leader is fenced."""
        pending = asyncio.ensure_future(request)
        check_s = self.settings.heartbeat_ms / 1000
        while True:
            done, _ = await asyncio.wait({pending}, timeout=check_s)
            if done:
                return pending.result()
            if not self.cluster.is_alive(node_id):
                pending.cancel()
                self.leaders.forget(topic, partition)
                raise NotLeader(
                    f"Node {node_id}, leader of {topic}/{partition}, stopped renewing its lease "
                    f"while an append was forwarded to it; whether it was written is unknown "
                    f"(an idempotent producer's retry is safe); retry."
                )

    # ---- fetch -----------------------------------------------------------------------------

    async def fetch(self, request: FetchRequest) -> FetchResult:
        """Records from `offset`; waits up to `timeout_ms` for the first one (long-poll, woken
        by the commit, not by a poll interval)."""
        if request.offset < 0:
            raise InvalidRequest(f"Offset {request.offset} is negative; offsets start at 0.")
        (await self.topic(request.topic)).check_partition(request.partition)
        writer = await self.leaders.writer(request.topic, request.partition)
        writer.notice_foreign_commits()  # a job's or Spark's commit shows within the interval
        deadline = time.monotonic() + request.timeout_ms / 1000
        moved_to = None
        while True:
            appended = writer.appended_event()
            result = await self._read(writer.log, request)
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if result.records.num_rows:
                return result
            if result.next_offset is not None:
                # The read passed only rows this reader does not see (markers, aborted
                # records): go on from there, and wait for records as the long poll asks.
                moved_to = result.next_offset
                request = dataclasses.replace(request, offset=moved_to)
                continue
            if remaining_ms <= 0 or self._closing:
                return dataclasses.replace(result, next_offset=moved_to)
            writer.notice_foreign_commits()
            await self.wait_for_commits([appended], remaining_ms)

    async def read_now(self, request: FetchRequest) -> FetchResult:
        """Records from `request.offset` as they are now, without waiting: this node's log if
        it leads the partition, else the shared table as a follower (KIP-392).

        Raises:
            NotLeader: another node leads it and the read is at its head (ask the leader).
            OffsetOutOfRange: the offset is outside the partition.
        """
        if request.offset < 0:
            raise InvalidRequest(f"Offset {request.offset} is negative; offsets start at 0.")
        (await self.topic(request.topic)).check_partition(request.partition)
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

    def leader_for_clients(self, topic_name: str, partition: int) -> int:
        """The node clients should send the partition's writes to: its known live leader,
        else the node that should lead it (which takes it at the first request). No I/O."""
        known = self.leaders.known_leader(topic_name, partition)
        if known is not None:
            return known
        return self.cluster.preferred(topic_name, partition)

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
        (await self.topic(topic_name)).check_partition(partition)
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


async def _carry_request_id(request: httpx.Request) -> None:
    """A request this node sends on a client's behalf carries that request's id."""
    request_id = current_request_id()
    if request_id is not None and REQUEST_ID_HEADER not in request.headers:
        request.headers[REQUEST_ID_HEADER] = request_id


def _count_fetched(topic: str, result: FetchResult) -> None:
    records = result.records
    if records.num_rows:
        metrics.record_fetch(topic, records.num_rows, payload_bytes(records))


def _advance_log_start(uri: str, offset: int) -> int:
    """DeleteRecords' commit, on a log of its own: the writer's stays with its task."""
    return DeltaPartitionLog.open(uri, tail_records_max=0).advance_log_start(offset)


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


def producer_error_from(body: dict) -> ProducerError:
    """Rebuild the leader's producer-sequence error from a forwarded request's answer."""
    error_types = {t.__name__: t for t in ProducerError.__subclasses__()}
    error_type = error_types.get(body["producer_error"], ProducerError)
    return error_type(body.get("message", "the leader rejected the producer batch"))
