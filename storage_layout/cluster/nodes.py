"""Node liveness records: `<root>/_meta/nodes/<node_id>.json`, one small file per gateway node.

Each node rewrites its own file every heartbeat with an increasing `heartbeat` counter. Other
nodes decide liveness by watching that counter change on their own monotonic clock (no
comparison of clocks between hosts). Liveness only decides *who should* lead a partition;
*who may* commit is decided by the `txn` compare-and-set in the partition table (FORMAT.md §7),
so a wrong liveness guess can cost a retry, never an offset.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from storage_layout import paths
from storage_layout.errors import StorageUnavailable
from storage_layout.store import open_store

NODES_DIR = "nodes"


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What a node last wrote about itself."""

    node_id: int
    url: str
    heartbeat: int
    incarnation: str
    kafka_address: str | None = None  # "host:port" of its Kafka listener, if it serves one


class NodeRegistry:
    """Reads and writes the liveness files under one storage root."""

    def __init__(self, root: str) -> None:
        self._dir = paths.meta_table_uri(paths.normalize_root(root), NODES_DIR)
        self._store = open_store(self._dir)

    def write(self, record: NodeRecord) -> None:
        """Replace this node's file (whole-object writes: readers never see half of it)."""
        data = json.dumps(
            {
                "node_id": record.node_id,
                "url": record.url,
                "heartbeat": record.heartbeat,
                "incarnation": record.incarnation,
                "kafka": record.kafka_address,
            }
        ).encode()
        name = f"{record.node_id}.json"
        try:
            self._store.put(name, data)
        except OSError as error:
            raise StorageUnavailable(
                f"Cannot write node record {self._dir}/{name}: {error}"
            ) from error

    def remove(self, node_id: int) -> None:
        """Delete a node's record: a node that has left on purpose is dead at once."""
        try:
            self._store.delete(f"{node_id}.json")
        except OSError as error:
            raise StorageUnavailable(f"Cannot remove node record {node_id}: {error}") from error

    def read_all(self) -> dict[int, NodeRecord]:
        """Every node's last record (unreadable or torn files are skipped)."""
        try:
            stored = self._store.list()
        except OSError as error:
            raise StorageUnavailable(f"Cannot list {self._dir}: {error}") from error
        records = {}
        for item in stored:
            name = item.name
            if not name.endswith(".json") or name.startswith("."):
                continue
            record = self._read(name)
            if record is not None:
                records[record.node_id] = record
        return records

    def _read(self, path: str) -> NodeRecord | None:
        try:
            payload = self._store.get(path)
            if payload is None:
                return None  # removed since the listing
            data = json.loads(payload)
            return NodeRecord(
                int(data["node_id"]),
                str(data["url"]),
                int(data["heartbeat"]),
                str(data["incarnation"]),
                data.get("kafka"),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None
