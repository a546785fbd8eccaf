"""Topic administration over the catalog table (`_meta/topics`), and the node's cache of it.

Every node reads the catalog: topics created, altered or deleted through another node (or a
tool) show here on a cache miss, and within `refresh_ms` otherwise. Concurrency contract:
coroutines run on the broker's event loop; catalog I/O runs on its executor (`blocking`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from api.core.internal_topics import (
    INTERNAL_TOPICS,
    InternalTopicAccess,
    internal_topic,
    is_internal,
)
from storage_layout.errors import TopicExists, TopicNotFound
from storage_layout.meta.catalog import TopicCatalog, TopicInfo, check_partition_count
from storage_layout.meta.topic_defaults import read_topic_defaults, write_topic_defaults
from storage_layout.topic_config import (
    TopicConfig,
    check_removable,
    normalized,
    resolved,
    validate_topic_name,
)

log = logging.getLogger("lakelog.topics")

Blocking = Callable[..., Awaitable]


class Topics:
    """The cluster's topics as this node knows them, and the changes made through it."""

    def __init__(
        self,
        *,
        root: str,
        blocking: Blocking,
        refresh_ms: int,
        before_delete: Callable[[str], Awaitable[None]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._root = root
        self._blocking = blocking
        self._refresh_s = refresh_ms / 1000
        self._before_delete = before_delete
        self._clock = clock
        self._catalog: TopicCatalog | None = None
        self._topics: dict[str, TopicInfo] = {}
        self._loaded_at = 0.0
        self._read_started_at = -1.0  # when the newest completed catalog read began
        self._reading: asyncio.Future | None = None

    async def open(self, defaults: Mapping[str, object]) -> None:
        """Store this node's cluster-wide defaults (`defaults`), then read the catalog."""
        await self._store_defaults(defaults)
        self._catalog = await self._blocking(TopicCatalog, self._root)
        await self.refresh()

    async def _store_defaults(self, ours: Mapping[str, object]) -> None:
        """The cluster-wide topic defaults set in this node's environment, stored over the
        ones stored (another node may have set others); a change is logged."""
        if not ours:
            return
        stored = await self._blocking(read_topic_defaults, self._root)
        merged = {**stored, **normalized(ours)}
        if merged != stored:
            await self._blocking(write_topic_defaults, self._root, merged)
            log.info("cluster-wide topic defaults now %s (were %s)", merged, stored)

    def cached(self) -> Mapping[str, TopicInfo]:
        """The topics as last read (no I/O)."""
        return self._topics

    def config_of(self, name: str) -> TopicConfig:
        return self._topics[name].config

    async def list_all(self) -> list[TopicInfo]:
        await self.refresh()
        return sorted(self._topics.values(), key=lambda topic: topic.name)

    def internal_views(self) -> list[TopicInfo]:
        """Kafka's internal topics as lakelog lists them (api/core/internal_topics.py),
        except any a catalog topic of the same name hides. For listing (no I/O): their
        configs leave out the cluster's defaults, which `describe` adds."""
        return [internal_topic(n, {}) for n in INTERNAL_TOPICS if n not in self._topics]

    async def describe(self, name: str) -> TopicInfo:
        """`get`, or the view of an internal topic: for what describes topics (Metadata,
        DescribeConfigs), never for what reads or writes them."""
        try:
            return await self.get(name)
        except InternalTopicAccess:
            return internal_topic(name, await self._blocking(read_topic_defaults, self._root))

    async def recent(self) -> list[TopicInfo]:
        """Every topic, from the cache unless it is older than `refresh_ms` (what `get`
        tolerates): for frequent callers, such as group heartbeats, which must not read the
        catalog each time (that queued them behind commits on a busy node)."""
        now = self._clock()
        if now - self._loaded_at > self._refresh_s:
            await self._read_since(now - self._refresh_s)
        return sorted(self._topics.values(), key=lambda topic: topic.name)

    async def recent_partition_counts(self) -> dict[str, int]:
        return {topic.name: topic.partitions for topic in await self.recent()}

    async def get(self, name: str) -> TopicInfo:
        """The topic from the cache; a miss or an old cache re-reads the catalog (other nodes
        and tools may have created it).

        Raises:
            TopicNotFound: no topic has that name.
            InternalTopicAccess: the name is one of Kafka's internal topics (a view only).
        """
        now = self._clock()
        if name not in self._topics:
            await self._read_since(now)  # created a moment ago elsewhere?
        elif now - self._loaded_at > self._refresh_s:
            await self._read_since(now - self._refresh_s)
        topic = self._topics.get(name)
        if topic is None:
            raise InternalTopicAccess(name) if is_internal(name) else TopicNotFound(name)
        return topic

    async def create(self, name: str, *, partitions: int, configs: Mapping[str, object]):
        if is_internal(name):
            raise TopicExists(name)  # as Kafka answers: the internal topic is there
        topic = await self._blocking(
            self._catalog.create_topic, name, partitions, overrides=configs
        )
        await self.refresh()
        return topic

    async def validate_new(
        self, name: str, partitions: int, configs: Mapping[str, object]
    ) -> TopicInfo:
        """What create would create, without creating it (v3 `validate_only`)."""
        validate_topic_name(name)
        await self.refresh()
        if name in self._topics or is_internal(name):
            raise TopicExists(name)
        check_partition_count(partitions)
        overrides = normalized(configs)
        defaults = await self._blocking(read_topic_defaults, self._root)
        config = resolved(overrides, defaults)
        return TopicInfo(name, "", 0, partitions, config, overrides=overrides, defaults=defaults)

    async def defaults(self) -> dict[str, str]:
        """The cluster-wide topic config defaults in force (LAKELOG_DEFAULT_*, by topic name)."""
        return await self._blocking(read_topic_defaults, self._root)

    async def alter_defaults(
        self, changes: Mapping[str, str | None], *, validate_only: bool = False
    ) -> dict[str, str]:
        """Set (a value) or remove (None) cluster-wide topic defaults, by topic config name,
        as Kafka's dynamic cluster-wide broker configs; every topic without its own value
        follows at once. Returns the defaults in force after.

        Raises:
            InvalidConfig: an unknown name or a bad value.
        """
        stored = await self._blocking(read_topic_defaults, self._root)
        merged = {name: value for name, value in stored.items() if name not in changes}
        merged.update({name: value for name, value in changes.items() if value is not None})
        values = normalized(merged)
        if validate_only or values == stored:
            return values
        await self._blocking(write_topic_defaults, self._root, values)
        log.info("cluster-wide topic defaults now %s (were %s)", values, stored)
        await self.refresh()
        return values

    @staticmethod
    def validate_configs(configs: Mapping[str, object]) -> TopicConfig:
        return TopicConfig.from_mapping(configs)

    async def alter(
        self,
        name: str,
        *,
        partitions: int | None = None,
        configs: Mapping[str, object | None] = {},
    ) -> TopicInfo:
        """Add partitions and/or change the topic's own configs: a value sets one, None
        removes it (the topic then follows the cluster-wide default again)."""
        current = await self.get(name)
        overrides = None
        if configs:
            overrides = {k: v for k, v in current.overrides.items() if k not in configs}
            overrides |= {k: v for k, v in configs.items() if v is not None}
            for removed in (k for k, v in configs.items() if v is None):
                check_removable(removed)
        topic = await self._blocking(
            self._catalog.alter_topic, name, partitions=partitions, overrides=overrides
        )
        await self.refresh()
        return topic

    async def delete(self, name: str) -> None:
        await self.get(name)
        await self._before_delete(name)
        await self._blocking(self._catalog.delete_topic, name)
        await self.refresh()

    async def refresh(self) -> None:
        started = self._clock()
        self._topics = await self._blocking(self._catalog.topics)
        self._loaded_at = self._clock()
        self._read_started_at = max(self._read_started_at, started)

    async def _read_since(self, moment: float) -> None:
        """Have the catalog read by a read that began at or after `moment` (clock seconds).
        Requests arriving together share one read: one each, as when the cache went stale
        under load, queued hundreds of catalog reads (a LIST and GETs each on an object
        store) ahead of commits and heartbeats."""
        while self._read_started_at < moment:
            if self._reading is None or self._reading.done():
                self._reading = asyncio.ensure_future(self.refresh())
            await asyncio.shield(self._reading)
