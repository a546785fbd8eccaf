"""Writing a Delta checkpoint from a `TableState` held in memory: no read of the log.

A checkpoint is the table's state at one version as one Parquet file of actions (Delta
protocol, "Checkpoints"): the protocol, the metadata, every txn, every live add and the
tombstones not yet expired. delta-rs's `create_checkpoint` rebuilds that state from the log
first (four reads of every commit since the previous checkpoint; on an object store a burst of
requests that stalled appends for up to 1.5 s in BENCHMARKS.md); the partition writer already
knows it, since it made or followed every commit.

The columns and types are the ones delta-rs writes (and Spark reads): `_CHECKPOINT_SCHEMA`.
The file is written whole (the store's `put`: a rename locally, one PUT on object stores), then
`_last_checkpoint` names it, so no reader ever sees a partial checkpoint.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage_layout.errors import StorageError
from storage_layout.log import log_commit
from storage_layout.log.replay import TableState, file_path, read_checkpoint_part
from storage_layout.store import Store

# Delta's default `delta.deletedFileRetentionDuration`: tombstones younger than this stay in
# checkpoints, for readers of older versions and for vacuum's lite mode (which deletes only
# files it finds as tombstones).
TOMBSTONE_RETENTION_MS = 7 * 24 * 3600 * 1000
# A file removed more recently than this is never deleted (by Settling or by vacuum): a reader
# planned on an older version (a stream's split, a gateway's fetch before it reloads) may
# still read it.
REMOVED_FILE_GRACE_MS = 10 * 60 * 1000
# In the Parquet footer of lakelog's own checkpoints: their tombstones' dataChange flags are
# the commits' own (Settling trusts them).
WRITER_KEY, WRITER = b"lakelog.checkpoint", b"1"

logger = logging.getLogger(__name__)

_STRING_MAP = pa.map_(pa.string(), pa.string())
_DELETION_VECTOR = pa.struct(
    [
        pa.field("storageType", pa.string(), nullable=False),
        pa.field("pathOrInlineDv", pa.string(), nullable=False),
        pa.field("offset", pa.int32()),
        pa.field("sizeInBytes", pa.int32(), nullable=False),
        pa.field("cardinality", pa.int64(), nullable=False),
    ]
)
_ADD = pa.struct(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("partitionValues", _STRING_MAP, nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        pa.field("modificationTime", pa.int64(), nullable=False),
        pa.field("dataChange", pa.bool_(), nullable=False),
        pa.field("stats", pa.string()),
        pa.field("tags", _STRING_MAP),
        pa.field("deletionVector", _DELETION_VECTOR),
        pa.field("baseRowId", pa.int64()),
        pa.field("defaultRowCommitVersion", pa.int64()),
        pa.field("clusteringProvider", pa.string()),
    ]
)
_REMOVE = pa.struct(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("deletionTimestamp", pa.int64()),
        pa.field("dataChange", pa.bool_(), nullable=False),
        pa.field("extendedFileMetadata", pa.bool_()),
        pa.field("partitionValues", _STRING_MAP),
        pa.field("size", pa.int64()),
        pa.field("stats", pa.string()),
        pa.field("tags", _STRING_MAP),
        pa.field("deletionVector", _DELETION_VECTOR),
        pa.field("baseRowId", pa.int64()),
        pa.field("defaultRowCommitVersion", pa.int64()),
    ]
)
_METADATA = pa.struct(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("description", pa.string()),
        pa.field(
            "format",
            pa.struct(
                [
                    pa.field("provider", pa.string(), nullable=False),
                    pa.field("options", _STRING_MAP, nullable=False),
                ]
            ),
            nullable=False,
        ),
        pa.field("schemaString", pa.string(), nullable=False),
        pa.field("partitionColumns", pa.list_(pa.string()), nullable=False),
        pa.field("createdTime", pa.int64()),
        pa.field("configuration", _STRING_MAP, nullable=False),
    ]
)
_PROTOCOL = pa.struct(
    [
        pa.field("minReaderVersion", pa.int32(), nullable=False),
        pa.field("minWriterVersion", pa.int32(), nullable=False),
        pa.field("readerFeatures", pa.list_(pa.string())),
        pa.field("writerFeatures", pa.list_(pa.string())),
    ]
)
_TXN = pa.struct(
    [
        pa.field("appId", pa.string(), nullable=False),
        pa.field("version", pa.int64(), nullable=False),
        pa.field("lastUpdated", pa.int64()),
    ]
)
_CHECKPOINT_SCHEMA = pa.schema(
    [
        pa.field("add", _ADD),
        pa.field("remove", _REMOVE),
        pa.field("metaData", _METADATA),
        pa.field("protocol", _PROTOCOL),
        pa.field("txn", _TXN),
    ]
)


def checkpoint_name(version: int) -> str:
    return f"{version:020d}.checkpoint.parquet"


@dataclass(frozen=True, slots=True)
class WrittenCheckpoint:
    """A checkpoint just written: its version and file names (`TableState.checkpointed`) and
    its rows (actions: mostly tombstones at a high commit rate, which the next one carries)."""

    version: int
    names: tuple[str, ...]
    rows: int
    files_deleted: int = 0  # settled rearrangements' files (Settling)


@dataclass(frozen=True, slots=True)
class Settling:
    """Deleting the files that rearrangements replaced, once no reader needs them, so their
    tombstones can leave the checkpoints.

    A rearrangement (a remove with dataChange=false: a small-file merge, file optimization)
    moved records into another file, unchanged. Its file is settled when it was removed over
    `retention_ms` ago: readers of the latest snapshot no longer list it, and no version that
    time travel is promised to reach (the table's log history) does. Without settling, its
    tombstone would stay for Delta's week (TOMBSTONE_RETENTION_MS, for vacuum): one per small
    file merged, hundreds of thousands a day at a high commit rate, rewritten by every
    checkpoint, and the file itself would wait a week on disk for vacuum. Tombstones of
    removes that change data (retention, key compaction) keep the week."""

    retention_ms: int
    delete_files: Callable[[list[str]], None]  # relative paths under the table root


def write_checkpoint(
    log: Store,
    state: TableState,
    now_ms: int | None = None,
    settling: Settling | None = None,
) -> WrittenCheckpoint:
    """Write the checkpoint of `state` (at `state.version`) and point `_last_checkpoint` at it.
    The tombstones not in memory are carried over from the checkpoint `state` is based on (one
    read). With `settling`, the files of settled rearrangements are deleted first and their
    tombstones left out (Settling).

    Raises:
        OSError: the store failed; UnreadableLog: the base checkpoint could not be read.
    """
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    removes = _tombstones(log, state, now_ms - TOMBSTONE_RETENTION_MS)
    settled = 0
    if settling is not None:
        removes, settled = _settle(removes, now_ms - settling.retention_ms, settling.delete_files)
    table = pa.concat_tables([checkpoint_table(state), _remove_rows(removes)])
    table = table.replace_schema_metadata({WRITER_KEY: WRITER})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="snappy")
    data = sink.getvalue().to_pybytes()
    name = checkpoint_name(state.version)
    log.put(name, data)
    pointer = {
        "version": state.version,
        "size": table.num_rows,
        "sizeInBytes": len(data),
        "numOfAddFiles": len(state.adds),
    }
    log.put(log_commit.LAST_CHECKPOINT, json.dumps(pointer).encode())
    return WrittenCheckpoint(state.version, (name,), table.num_rows, settled)


def checkpoint_table(state: TableState) -> pa.Table:
    """The checkpoint's rows but its tombstones, one action per row, the other columns null."""
    rows: list[tuple[str, dict[str, Any]]] = [
        ("protocol", _protocol_row(state.protocol)),
        ("metaData", _metadata_row(state.metadata)),
    ]
    rows += [
        ("txn", {"appId": app_id, "version": version})
        for app_id, version in state.transactions.items()
    ]
    rows += [("add", _file_row(body, _ADD)) for body in state.adds.values()]
    columns = {name: [None] * len(rows) for name in _CHECKPOINT_SCHEMA.names}
    for index, (kind, body) in enumerate(rows):
        columns[kind][index] = body
    return pa.table(
        [pa.array(columns[f.name], type=f.type) for f in _CHECKPOINT_SCHEMA],
        schema=_CHECKPOINT_SCHEMA,
    )


def _tombstones(log: Store, state: TableState, cutoff_ms: int) -> pa.StructArray:
    """Every tombstone of `state` deleted at or after `cutoff_ms`: those in memory (removed
    since the base checkpoint) and those carried over from it."""
    young = [
        _file_row(body, _REMOVE)
        for _, body in state.tombstones.values()
        if (body.get("deletionTimestamp") or 0) >= cutoff_ms
    ]
    in_memory = pa.array(young, type=_REMOVE)
    return pa.concat_arrays([in_memory, *_carried_tombstones(log, state, cutoff_ms)])


def _settle(
    removes: pa.StructArray, before_ms: int, delete_files: Callable[[list[str]], None]
) -> tuple[pa.StructArray, int]:
    """`removes` without the settled rearrangements' tombstones, once their files are deleted;
    and how many were. A remove whose dataChange is unknown counts as changing data. A failed
    delete keeps every tombstone (the checkpoint is written all the same: a file that cannot
    be deleted must not stop the log from being checkpointed and trimmed)."""
    rearranged = pc.invert(pc.fill_null(removes.field("dataChange"), True))
    old = pc.less(removes.field("deletionTimestamp").fill_null(before_ms), before_ms)
    settled = pc.and_(rearranged, old)
    count = pc.sum(settled).as_py() or 0
    if count == 0:
        return removes, 0
    try:
        delete_files(_decoded(removes.field("path").filter(settled)).to_pylist())
    except (OSError, StorageError) as error:
        logger.warning("kept %d tombstones: deleting their files failed: %s", count, error)
        return removes, 0
    return removes.filter(pc.invert(settled)), count


def _remove_rows(removes: pa.StructArray) -> pa.Table:
    """Tombstones as checkpoint rows: the `remove` column, the others null."""
    return pa.table(
        [
            removes if f.name == "remove" else pa.array([None] * len(removes), type=f.type)
            for f in _CHECKPOINT_SCHEMA
        ],
        schema=_CHECKPOINT_SCHEMA,
    )


def _carried_tombstones(log: Store, state: TableState, cutoff_ms: int) -> list[pa.StructArray]:
    """The base checkpoint's tombstones that still count: not expired, not re-added, not
    removed again since (then the newer remove is in memory). Kept in Arrow: an hour of them
    is large."""
    pieces = []
    superseded = set(state.adds) | set(state.tombstones)
    for name in state.checkpoint[1]:
        part = read_checkpoint_part(log, name, ("remove",))
        if "remove" not in part.column_names:
            continue
        removes = part.column("remove").combine_chunks()
        removes = removes.filter(removes.is_valid())
        if not len(removes):
            continue
        # Spark writes every carried tombstone with dataChange=false: another engine's flags
        # do not say which removes only rearranged records, so none settles (they are written
        # as data changes from here on, and expire after the week).
        ours = (part.schema.metadata or {}).get(WRITER_KEY) == WRITER
        kept = removes.filter(_still_counting(removes, superseded, cutoff_ms))
        pieces.append(_conformed(kept, trust_data_change=ours))
    return pieces


def _still_counting(removes: pa.StructArray, superseded: set[str], cutoff_ms: int) -> pa.Array:
    """Which of a checkpoint's tombstones to carry: deleted at or after `cutoff_ms` and not
    `superseded`. Vectorized: a checkpoint carries a tombstone per small file a merge replaced
    within the history kept (hundreds of thousands an hour at a high commit rate)."""
    young = pc.greater_equal(removes.field("deletionTimestamp").fill_null(0), cutoff_ms)
    # (another engine's checkpoint may hold large or view strings: the kernels want plain)
    paths = _decoded(removes.field("path").cast(pa.string()))
    fresh = pc.invert(pc.is_in(paths, value_set=pa.array(list(superseded), pa.string())))
    return pc.and_(young, pc.fill_null(fresh, True))


def _decoded(paths: pa.Array) -> pa.Array:
    """Tombstone paths as relative paths (the log URI-encodes them: file_path). The writers'
    own only encode `=` (segment=N/...), decoded at once; anything else path by path."""
    escapes = pc.sum(pc.count_substring(paths, "%")).as_py() or 0
    if escapes == 0:
        return paths
    if escapes == (pc.sum(pc.count_substring(paths, "%3D")).as_py() or 0):
        return pc.replace_substring(paths, "%3D", "=")
    return pa.array([file_path({"path": p}) for p in paths.to_pylist()], pa.string())


def _conformed(removes: pa.StructArray, *, trust_data_change: bool = True) -> pa.StructArray:
    """`removes` with exactly _REMOVE's fields (another writer's checkpoint may have fewer,
    more, or other types); without `trust_data_change`, every one a data change."""
    present = {removes.type.field(i).name for i in range(removes.type.num_fields)}

    def child(field: pa.Field) -> pa.Array:
        if field.name == "dataChange" and not trust_data_change:
            return pa.repeat(True, len(removes))
        if field.name in present:
            return removes.field(field.name).cast(field.type)
        return pa.nulls(len(removes), field.type)

    children = [child(f) for f in _REMOVE]
    return pa.StructArray.from_arrays(children, fields=list(_REMOVE), mask=None)


def _file_row(body: Mapping[str, Any], kind: pa.StructType) -> dict[str, Any]:
    row = {f.name: body.get(f.name) for f in kind}
    for name in ("partitionValues", "tags"):
        if row.get(name) is not None:
            row[name] = list(row[name].items())
    if kind is _ADD and row["partitionValues"] is None:
        row["partitionValues"] = []
    return row


def _metadata_row(metadata: Mapping[str, Any]) -> dict[str, Any]:
    row = {f.name: metadata.get(f.name) for f in _METADATA}
    file_format = metadata.get("format") or {"provider": "parquet"}
    row["format"] = {
        "provider": file_format.get("provider", "parquet"),
        "options": list((file_format.get("options") or {}).items()),
    }
    row["partitionColumns"] = list(metadata.get("partitionColumns") or [])
    row["configuration"] = list((metadata.get("configuration") or {}).items())
    return row


def _protocol_row(protocol: Mapping[str, Any]) -> dict[str, Any]:
    return {f.name: protocol.get(f.name) for f in _PROTOCOL}
