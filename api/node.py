"""The node: one `lakelog serve` process, and the composition root of everything in it.

`lakelog serve` reads as settings -> node -> front-ends: the node builds the broker core and
the parts around it (topics, cluster membership, partition leaders, the node-to-node client,
consumer groups, transactions, the maintenance scheduler, the lag sampler, security), starts
them in that order, then starts its front-ends (the HTTP gateway and, with a Kafka port, the
Kafka listener) on the started broker; it closes them in the reverse order. The only module
that knows both front-ends (the layers in pyproject.toml keep them apart).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from fastapi import FastAPI

from api.core import metrics, node_tls
from api.core.broker import Broker
from api.core.cluster import Cluster, ClusterSettings
from api.core.group_configs import GroupConfigs
from api.core.groups.coordinator import GroupCoordinator
from api.core.lag_history import LagHistory
from api.core.leaders import Leaders
from api.core.membership import Membership
from api.core.peers import Peers, request_id_headers
from api.core.producer_ids import ProducerIds
from api.core.scheduled_jobs import ScheduledJobs
from api.core.schemas.registry import SchemaRegistry
from api.core.shares import serving
from api.core.shares.membership import ShareMembership
from api.core.shares.owner import ShareKey, ShareOwner
from api.core.shares.share_partition import Archived
from api.core.topics import Topics
from api.core.transaction_participants import TransactionParticipants
from api.core.transaction_requests import TransactionRequests
from api.core.transactions import TransactionCoordinator
from api.core.writer import CommitLimits
from api.http.app import HttpFrontEnd
from api.kafka.listener import KafkaListener
from api.security.node_auth import signature_hook
from api.security.state import SecurityState
from conf.settings import Settings
from storage_layout import paths, store
from storage_layout.cluster.client import NodeClient
from storage_layout.cluster.nodes import NodeRegistry
from storage_layout.meta.consumer_offsets import ConsumerOffsets
from storage_layout.meta.group_configs import GroupConfigStore
from storage_layout.meta.share_states import ShareStates
from storage_layout.meta.transaction_state import TransactionStateStore

# On a local disk the storage threads' work is mostly Python (a commit's file and log entry
# take well under a millisecond of I/O), so more threads only hand the GIL over more often:
# 1 000 partitions taken at once cost 5.5-6.9 ms of CPU each with 8 threads, 3.3-4.7 with 2
# (BENCHMARKS.md). On an object store, and on a mount that commits by exclusive create (FUSE,
# such as Unity Catalog Volumes: each operation a round trip), a thread mostly waits.
LOCAL_IO_THREADS = 2
MOUNT_IO_THREADS = 8
OBJECT_STORE_IO_THREADS = 64
SHARE_EXPIRY_INTERVAL_S = 1.0  # how often share group members' sessions are checked

log = logging.getLogger("lakelog.node")


class FrontEnd(Protocol):
    """A protocol a node serves (HTTP, Kafka): started on the started broker, closed before
    it; it only translates requests and answers."""

    async def start(self, broker: Broker) -> None: ...

    async def close(self) -> None: ...


def io_threads(settings: Settings) -> int:
    """The storage threads (Settings.io_threads): as set, else by the kind of root."""
    if settings.io_threads is not None:
        return settings.io_threads
    if store.store_kind(settings.data_dir) is not None:
        return OBJECT_STORE_IO_THREADS
    if isinstance(store.open_store(settings.data_dir), store.ExclusiveCreateStore):
        return MOUNT_IO_THREADS
    return LOCAL_IO_THREADS


class Node:
    """One node: its parts, started in order and closed in reverse, and its front-ends."""

    def __init__(self, settings: Settings, front_ends: list[FrontEnd] | None = None) -> None:
        self.settings = settings
        store.configure(settings.storage_options)
        self.root = paths.normalize_root(settings.data_dir)
        threads = io_threads(settings)
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="lakelog-io")
        # Background work (housekeeping passes, scheduled job units) never takes every
        # storage thread: one is always left for produces and fetches.
        self._background_slots = asyncio.Semaphore(max(1, threads - 1))
        self.security = SecurityState(settings)  # one for every front-end: keys, ACLs, quotas
        self.lag_history = LagHistory(
            interval_ms=settings.lag_sample_interval_ms,
            samples_max=settings.lag_history_samples,
        )
        self.front_ends: list[FrontEnd] = list(front_ends or [])
        self.broker: Broker | None = None
        self._closers: list[Callable[[], Awaitable]] = []  # what start() opened, in order

    async def blocking(self, function, *args, **kwargs):
        """`function` on the node's executor (Delta and object-store work never blocks the
        event loop)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: function(*args, **kwargs))

    async def _background_blocking(self, function, *args, **kwargs):
        """`blocking` for background work, once one of its slots is free."""
        async with self._background_slots:
            return await self.blocking(function, *args, **kwargs)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: object = None) -> AsyncIterator[None]:
        """The node from start to close: the HTTP server runs it for the process's lifetime
        (started before the server listens, closed once it has stopped)."""
        await self.start()
        _freeze_what_start_made()
        try:
            yield
        finally:
            await self.close()

    async def start(self) -> None:
        """The broker core and its parts, security, the samplers, then the front-ends."""
        self.broker = await self._start_core()
        await self.security.start()
        if self.security.cluster_secret is not None:  # calls to other nodes carry a signature
            hook = signature_hook(self.security.cluster_secret, self.settings.node_id)
            self.broker.peers.client.add_header_hook(hook)
        self._start_task(self.lag_history.sample_forever(self.broker))
        metrics.GROUP_LAG.source = self.lag_history.current_lags
        metrics.SHARE_PARTITIONS.source = self.broker.shares.series
        for front_end in self.front_ends:
            await front_end.start(self.broker)
            self._closers.append(front_end.close)

    async def close(self) -> None:
        """Everything start() opened, newest first; then the executor."""
        if self.broker is not None:
            self.broker.begin_close()
        while self._closers:
            closer = self._closers.pop()
            try:
                await closer()
            except Exception:  # close the rest: one part failing to close must not leak them
                log.exception("closing %s failed", closer)
        self._executor.shutdown(wait=True)

    async def _start_core(self) -> Broker:
        settings, blocking = self.settings, self.blocking
        topics = Topics(
            root=self.root,
            blocking=blocking,
            refresh_ms=settings.catalog_refresh_ms,
            before_delete=lambda name: self.broker.forget_topic(name),
        )
        await topics.open(settings.topic_defaults())
        cluster = await self._join_cluster()
        leaders = self._leaders(cluster, topics)
        self._closers.append(leaders.close)
        peers = self._peers(cluster, leaders)
        groups, states = await self._start_groups(cluster, topics)
        producer_ids = ProducerIds(self.root, blocking)
        participants = TransactionParticipants(leaders=leaders, peers=peers, groups=groups)
        transactions = TransactionCoordinator(
            store=states,
            node_id=cluster.node_id,
            live_nodes=cluster.live_nodes,
            init_producer=producer_ids.init_producer,
            write_marker=participants.write_marker,
            commit_offsets=participants.commit_offsets,
            blocking=blocking,
        )
        transactions.start()
        self._closers.append(transactions.close)
        requests = TransactionRequests(
            transactions, node_id=cluster.node_id, node_url=cluster.url, peers=peers
        )
        membership = Membership(
            cluster=cluster, leaders=leaders, topics=topics, heartbeat_ms=settings.heartbeat_ms
        )
        membership.start()
        self._closers.append(membership.close)
        configs = GroupConfigs(
            await blocking(GroupConfigStore, self.root),
            blocking,
            lock_duration_bounds_ms=(
                settings.group_share_min_record_lock_duration_ms,
                settings.group_share_max_record_lock_duration_ms,
            ),
        )
        return Broker(
            settings,
            root=self.root,
            blocking=blocking,
            topics=topics,
            cluster=cluster,
            leaders=leaders,
            peers=peers,
            producer_ids=producer_ids,
            groups=groups,
            transactions=transactions,
            transaction_requests=requests,
            transaction_participants=participants,
            scheduled_jobs=self._start_scheduled_jobs(cluster, leaders, topics),
            schemas=await blocking(SchemaRegistry, self.root),
            group_configs=configs,
            shares=await self._share_owner(cluster),
            share_members=self._share_members(cluster, groups, topics, configs),
        )

    async def _join_cluster(self) -> Cluster:
        settings = self.settings
        registry = await self.blocking(NodeRegistry, self.root)
        cluster_settings = ClusterSettings(
            settings.node_id,
            settings.url,
            settings.lease_ms,
            settings.heartbeat_ms,
            settings.kafka_address,
        )
        cluster = Cluster(cluster_settings, registry)
        await self.blocking(cluster.heartbeat)
        self._closers.append(lambda: self.blocking(cluster.leave))
        return cluster

    def _leaders(self, cluster: Cluster, topics: Topics) -> Leaders:
        settings = self.settings
        limits = CommitLimits(
            settings.linger_ms,
            settings.commit_records_max,
            settings.commit_bytes_max,
            settings.producer_id_expiration_ms,
        )
        leaders = Leaders(
            root=self.root,
            cluster=cluster,
            executor=self._executor,
            limits=limits,
            tail_records_max=settings.tail_records_max,
            config_of=topics.config_of,
            fenced=not settings.unsafe_disable_fencing,
            fault_point=settings.fault_point,
            housekeeping_slots=self._background_slots,
        )
        metrics.PARTITIONS_LED.set_function(leaders.led_count)
        return leaders

    def _peers(self, cluster: Cluster, leaders: Leaders) -> Peers:
        client = NodeClient(
            timeout_ms=self.settings.forward_timeout_ms,
            verify=node_tls.client_verify(self.settings),
        )
        client.add_header_hook(request_id_headers)
        self._closers.append(client.aclose)
        return Peers(
            client,
            is_alive=cluster.is_alive,
            forget_leader=leaders.forget,
            liveness_check_ms=self.settings.heartbeat_ms,
        )

    async def _start_groups(
        self, cluster: Cluster, topics: Topics
    ) -> tuple[GroupCoordinator, TransactionStateStore]:
        offsets = await self.blocking(ConsumerOffsets, self.root)
        states = await self.blocking(TransactionStateStore, self.root)

        async def pending_transactions(group_id: str) -> list:
            """(producer id, partitions) of the open transactions holding offsets of the
            group, from their stored states (one listing when there are none)."""
            return await self.blocking(states.pending_offsets_of, group_id)

        groups = GroupCoordinator(
            offsets=offsets,
            node_id=cluster.node_id,
            live_nodes=cluster.live_nodes,
            node_url=cluster.url,
            topics=topics.recent_partition_counts,
            blocking=self.blocking,
            pending_transactions=pending_transactions,
            consumer_session_timeout_ms=self.settings.group_consumer_session_timeout_ms,
        )
        groups.start()
        self._closers.append(groups.close)
        return groups, states

    def _share_members(
        self, cluster: Cluster, groups: GroupCoordinator, topics: Topics, configs: GroupConfigs
    ) -> ShareMembership:
        members = ShareMembership(
            node_id=cluster.node_id,
            coordinator_of=groups.coordinator_of,
            other_type=groups.has_members,
            partition_counts=topics.recent_partition_counts,
            configs=configs,
        )
        self._start_task(_every(SHARE_EXPIRY_INTERVAL_S, members.expire))
        return members

    async def _share_owner(self, cluster: Cluster) -> ShareOwner:
        states = await self.blocking(ShareStates, self.root)

        async def dead_letters(key: ShareKey, archived: list[Archived]) -> None:
            await serving.dead_letter_archived(self.broker, key, archived)

        return ShareOwner(
            states=states,
            node_id=cluster.node_id,
            blocking=self.blocking,
            clock_ms=lambda: int(time.time() * 1000),
            on_archived=dead_letters,
        )

    def _start_scheduled_jobs(
        self, cluster: Cluster, leaders: Leaders, topics: Topics
    ) -> ScheduledJobs | None:
        """In-node maintenance (retention, compaction, file optimization, vacuum), if on."""
        if not self.settings.maintenance:
            return None

        async def committed(topic: str, partition: int) -> None:
            writer = leaders.writer_here(topic, partition)
            if writer is not None:  # this node's readers see the change before the next append
                writer.request_catch_up()

        jobs = ScheduledJobs(
            root=self.root,
            settings=self.settings,
            node_id=cluster.node_id,
            topics=topics.list_all,
            preferred=cluster.preferred,
            blocking=self._background_blocking,
            committed=committed,
        )
        self._start_task(jobs.run_forever())
        return jobs

    def _start_task(self, work: Awaitable) -> None:
        task = asyncio.get_running_loop().create_task(work)

        async def stop() -> None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

        self._closers.append(stop)


async def _every(interval_s: float, work: Callable[[], Awaitable]) -> None:
    """`work()` every `interval_s` until cancelled; a failure is logged, not fatal."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await work()
        except Exception:
            log.exception("periodic %s failed", work)


def node_app(settings: Settings) -> FastAPI:
    """The ASGI app of a node with its front-ends (the HTTP gateway always, the Kafka listener
    when `kafka_port` is set): the server that runs the app runs the node (its lifespan)."""
    node = Node(settings)
    http = HttpFrontEnd(settings, node.security, node.lag_history, lifespan=node.lifespan)
    node.front_ends.append(http)
    if settings.kafka_port:
        node.front_ends.append(KafkaListener(node.security, settings))
    return http.app


def _freeze_what_start_made() -> None:
    """Move every object alive after the start into the collector's permanent generation:
    modules, routes, message classes and the node's parts live as long as the process, and
    each full collection walked their ~170 000 objects again, for 80-115 ms every 2 s at
    1 000 one-record HTTP produces a second (BENCHMARKS.md): that pause was the p99."""
    gc.collect()
    gc.freeze()
