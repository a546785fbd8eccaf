"""Nodes sharing one storage root: liveness, and who should lead each partition.

Each node rewrites its liveness record every `heartbeat_ms`; a node whose heartbeat counter has
not changed for `lease_ms` of *this* node's monotonic clock is dead. The preferred leader of a
partition is the live node with the highest rendezvous hash for it, so leadership spreads over
the nodes and moves as little as possible when one joins or leaves.

Liveness only steers leadership; it never guarantees it. Who may commit is decided by the
`leader` and `log` compare-and-sets in the partition table (storage_layout/FORMAT.md §7).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from storage_layout.cluster.nodes import NodeRecord, NodeRegistry
from storage_layout.partitioner import murmur2


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    node_id: int
    url: str
    lease_ms: int
    heartbeat_ms: int
    kafka_address: str | None = None


class NodeLiveness:
    """Which nodes are alive, judged by watching their heartbeat counters change."""

    def __init__(self, lease_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._lease_s = lease_ms / 1000
        self._clock = clock
        self._last: dict[int, tuple[int, str, float]] = {}  # node -> (heartbeat, incarnation, t)
        self._urls: dict[int, str] = {}
        self._kafka_addresses: dict[int, str | None] = {}

    def observe(self, records: dict[int, NodeRecord]) -> None:
        """Update from every node's record; a node whose record is gone has left: dead."""
        now = self._clock()
        for gone in set(self._last) - set(records):
            del self._last[gone]
        for node_id, record in records.items():
            seen = self._last.get(node_id)
            if seen is None or (record.heartbeat, record.incarnation) != seen[:2]:
                self._last[node_id] = (record.heartbeat, record.incarnation, now)
            self._urls[node_id] = record.url
            self._kafka_addresses[node_id] = record.kafka_address

    def is_alive(self, node_id: int) -> bool:
        seen = self._last.get(node_id)
        return seen is not None and self._clock() - seen[2] < self._lease_s

    def live_nodes(self) -> list[int]:
        return sorted(node for node in self._last if self.is_alive(node))

    def url(self, node_id: int) -> str | None:
        return self._urls.get(node_id)

    def kafka_address(self, node_id: int) -> str | None:
        return self._kafka_addresses.get(node_id)


def preferred_node(live_nodes: list[int], topic: str, partition: int) -> int | None:
    """Rendezvous hashing: the live node with the highest hash for this partition."""
    if not live_nodes:
        return None
    return max(live_nodes, key=lambda node: (murmur2(f"{node}/{topic}/{partition}".encode()), node))


class Cluster:
    """This node's view of the cluster; `heartbeat` is called on a timer (api/core/membership)."""

    def __init__(
        self,
        settings: ClusterSettings,
        registry: NodeRegistry,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.node_id = settings.node_id
        self._registry = registry
        self._clock = clock  # seconds; the leases are judged on this node's clock alone
        self._liveness = NodeLiveness(settings.lease_ms, clock)
        self._incarnation = uuid.uuid4().hex
        self._heartbeat = 0
        self._last_renewed = 0.0

    def heartbeat(self) -> None:
        """Renew this node's record and observe the others (blocking I/O: run off the loop)."""
        self._heartbeat += 1
        record = NodeRecord(
            self.node_id,
            self.settings.url,
            self._heartbeat,
            self._incarnation,
            self.settings.kafka_address,
        )
        # The lease counts from before the write (conservative for fencing), and can_lead()
        # turns true only once the others have been observed too: a node resuming from a
        # pause must not take a partition while its view of who is alive is still old.
        renewed_at = self._clock()
        self._registry.write(record)
        self._liveness.observe(self._registry.read_all())
        self._last_renewed = renewed_at

    def leave(self) -> None:
        """Remove this node's record on a clean stop: others see it gone at once."""
        self._registry.remove(self.node_id)

    def can_lead(self) -> bool:
        """False once this node has not renewed for most of a lease: it must stop writing
        before others may consider it dead and take its partitions."""
        age_s = self._clock() - self._last_renewed
        return age_s < 0.8 * self.settings.lease_ms / 1000

    def is_alive(self, node_id: int) -> bool:
        return node_id == self.node_id or self._liveness.is_alive(node_id)

    def live_nodes(self) -> list[int]:
        return sorted({*self._liveness.live_nodes(), self.node_id})

    def preferred(self, topic: str, partition: int) -> int:
        return preferred_node(self.live_nodes(), topic, partition)

    def url(self, node_id: int) -> str | None:
        if node_id == self.node_id:
            return self.settings.url
        return self._liveness.url(node_id)

    def kafka_address(self, node_id: int) -> str | None:
        """The node's Kafka listener ("host:port"), None if it serves none."""
        if node_id == self.node_id:
            return self.settings.kafka_address
        return self._liveness.kafka_address(node_id)
