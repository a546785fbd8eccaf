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

import pyarrow.fs as pafs

from storage_layout import paths
from storage_layout.errors import StorageUnavailable
from storage_layout.fs import filesystem

NODES_DIR = "nodes"


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What a node last wrote about itself."""

    node_id: int
    url: str
    heartbeat: int
    incarnation: str


class NodeRegistry:
    """Reads and writes the liveness files under one storage root."""

    def __init__(self, root: str) -> None:
        self._dir = paths.meta_table_uri(paths.normalize_root(root), NODES_DIR)
        self._fs, base = filesystem(self._dir)
        self._base = base
        try:
            self._fs.create_dir(self._path(""), recursive=True)
        except OSError as error:
            raise StorageUnavailable(f"Cannot create {self._dir}: {error}") from error

    def _path(self, name: str) -> str:
        if not self._base:
            return name
        return paths.join(self._base, name) if name else self._base

    def write(self, record: NodeRecord) -> None:
        """Replace this node's file (a whole-object write: readers never see half of it)."""
        data = json.dumps(
            {
                "node_id": record.node_id,
                "url": record.url,
                "heartbeat": record.heartbeat,
                "incarnation": record.incarnation,
            }
        ).encode()
        final = self._path(f"{record.node_id}.json")
        try:
            if isinstance(self._fs, pafs.LocalFileSystem):
                # Local disks: write aside then rename, so a reader never sees a torn file.
                staging = self._path(f".{record.node_id}.json.tmp")
                with self._fs.open_output_stream(staging) as stream:
                    stream.write(data)
                self._fs.move(staging, final)
            else:
                with self._fs.open_output_stream(final) as stream:
                    stream.write(data)
        except OSError as error:
            raise StorageUnavailable(f"Cannot write node record {final}: {error}") from error

    def remove(self, node_id: int) -> None:
        """Delete a node's record: a node that has left on purpose is dead at once."""
        try:
            self._fs.delete_file(self._path(f"{node_id}.json"))
        except FileNotFoundError:
            pass
        except OSError as error:
            raise StorageUnavailable(f"Cannot remove node record {node_id}: {error}") from error

    def read_all(self) -> dict[int, NodeRecord]:
        """Every node's last record (unreadable or torn files are skipped)."""
        try:
            infos = self._fs.get_file_info(pafs.FileSelector(self._path(""), allow_not_found=True))
        except OSError as error:
            raise StorageUnavailable(f"Cannot list {self._dir}: {error}") from error
        records = {}
        for info in infos:
            name = info.path.rsplit("/", 1)[-1]
            if not name.endswith(".json") or name.startswith("."):
                continue
            record = self._read(info.path)
            if record is not None:
                records[record.node_id] = record
        return records

    def _read(self, path: str) -> NodeRecord | None:
        try:
            with self._fs.open_input_stream(path) as stream:
                data = json.loads(stream.read())
            return NodeRecord(
                int(data["node_id"]),
                str(data["url"]),
                int(data["heartbeat"]),
                str(data["incarnation"]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None
