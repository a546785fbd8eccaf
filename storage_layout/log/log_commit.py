"""Direct commits to a partition table's `_delta_log`: the append hot path, on every store.

Why not delta-rs here: its commit builds a new table snapshot after writing the commit file and
then drops it, so the writer has to refresh its DeltaTable again; the two snapshot updates were
~10 ms of a ~12 ms one-record append (BENCHMARKS.md, "Direct commits"), and on an object store
each costs requests. The partition log knows exactly what it commits, so it writes the commit
file itself and advances its own file index.

Atomicity is the Delta protocol's own rule: `<version>.json` is created with the store's
put-if-absent (storage_layout/store: a hard link locally, an exclusive create on FUSE mounts, a
conditional PUT on object stores), which fails if that version exists. A writer whose snapshot
is version N that creates N + 1 knows that nothing was committed in between, so its `txn`
compare-and-sets hold (FORMAT.md §3). When N + 1 exists, the winner is read: a pure file
rearrangement (housekeeping's small-file merge: `dataChange=false` adds and removes, no txn)
is applied to the snapshot and the append retries at the next version; anything else sends the
writer through a full reload and the usual conflict checks. The commits are ordinary Delta JSON
that delta-rs and Spark read, carrying the same `txn` actions, so delta-rs and Spark writers
still see the CAS.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow as pa

from storage_layout.log.delta_types import field_json
from storage_layout.store import Store, StoreError

LOG_DIR = "_delta_log"
ENGINE_INFO = "lakelog"
LAST_CHECKPOINT = "_last_checkpoint"
# Complete checkpoint names only (classic and multi-part). delta-rs writes a checkpoint (and
# `_last_checkpoint`) under a temporary `<name>#<n>` and renames it, so a writer killed midway
# leaves no partial file under a checkpoint name; the temporary is ignored by every reader.
_CHECKPOINT_NAME = re.compile(r"(\d+)\.checkpoint(?:\.\d+\.\d+)?\.parquet")
_PARQUET_MAGIC = b"PAR1"
_PARQUET_BYTES_MIN = 12  # leading magic, footer length, trailing magic
# How delta-rs reports a checkpoint it cannot decode. Loading a table reads no other Parquet
# file; an I/O failure while reading one carries the OS error ("(os error 5)") instead.
_PARQUET_DECODE_ERROR = re.compile(r"Parquet error|Arrow error: EOF")


@dataclass(frozen=True, slots=True)
class Rearrangement:
    """A commit that moved records between files without changing any: paths added (with
    their add actions) and removed."""

    adds: tuple[dict[str, Any], ...]
    removed_paths: frozenset[str]
    actions: tuple[dict[str, Any], ...] = ()  # the whole commit, as read


def add_action(
    path: str,
    segment: int,
    size_bytes: int,
    modification_time_ms: int,
    stats: str,
    *,
    data_change: bool = True,
) -> dict[str, Any]:
    """A Delta `add` action of a new data file (dataChange=false for a rewrite)."""
    return {
        "path": path,
        "partitionValues": {"segment": str(segment)},
        "size": size_bytes,
        "modificationTime": modification_time_ms,
        "dataChange": data_change,
        "stats": stats,
    }


def remove_action(
    path: str, segment: int | None, size_bytes: int, deletion_ms: int, *, data_change: bool = False
) -> dict[str, Any]:
    """A Delta `remove` action: of a rewritten file (its records live on in the new file), or
    with `data_change` of a file whose records go (retention, key compaction). `segment`
    None: a file of an unpartitioned table (the `_meta` tables)."""
    return {
        "path": path,
        "deletionTimestamp": deletion_ms,
        "dataChange": data_change,
        "extendedFileMetadata": True,
        "partitionValues": {} if segment is None else {"segment": str(segment)},
        "size": size_bytes,
    }


def append_actions(
    add: dict[str, Any],
    transactions: list[tuple[str, int]],
    timestamp_ms: int,
    rewrite: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The actions of one append (`ndjson` makes its commit file): commitInfo, the add
    action, the actions of a small-file merge committed with it (`rewrite`: removes and an
    add, dataChange=false), the txns. The writer applies these same actions to its state."""
    commit_info = {
        "timestamp": timestamp_ms,
        "operation": "WRITE",
        "operationParameters": {"mode": "Append", "partitionBy": '["segment"]'},
        "engineInfo": ENGINE_INFO,
    }
    actions = [{"commitInfo": commit_info}, {"add": add}, *rewrite]
    actions += [{"txn": {"appId": app_id, "version": v}} for app_id, v in transactions]
    return actions


# The columns added after the first tables (schema.ADDED_COLUMNS: FORMAT.md §14's, §18's) as
# Delta schema fields (JSON), for tables created before them.
ADDED_FIELDS = (
    {"name": "transactional", "type": "boolean", "nullable": True, "metadata": {}},
    {"name": "control", "type": "byte", "nullable": True, "metadata": {}},
    {"name": "compression", "type": "byte", "nullable": True, "metadata": {}},
)


def has_added_fields(metadata: Mapping[str, Any]) -> bool:
    """Whether the schema of `metadata` (a metaData action's body) has ADDED_FIELDS."""
    schema_string = metadata.get("schemaString") if metadata else None
    return bool(schema_string) and not _missing_added_fields(json.loads(schema_string))


def with_added_fields(metadata: dict[str, Any]) -> dict[str, Any] | None:
    """`metadata` (a metaData action's body) with ADDED_FIELDS added to its schema before the
    partition column; None when the schema has them already."""
    schema = json.loads(metadata["schemaString"])
    missing = _missing_added_fields(schema)
    if not missing:
        return None
    fields = schema["fields"]
    at = next(
        (i for i, f in enumerate(fields) if f["name"] in metadata.get("partitionColumns", ())),
        len(fields),
    )
    schema["fields"] = [*fields[:at], *missing, *fields[at:]]
    return {**metadata, "schemaString": json.dumps(schema, separators=(",", ":"))}


def _missing_added_fields(schema: Mapping[str, Any]) -> list[dict[str, Any]]:
    names = {field["name"] for field in schema["fields"]}
    return [field for field in ADDED_FIELDS if field["name"] not in names]


def with_typed_fields(
    metadata: Mapping[str, Any], targets: Mapping[str, pa.DataType]
) -> dict[str, Any] | None:
    """`metadata` (a metaData action's body) whose schema has the typed columns `targets`
    (FORMAT.md §17): new ones added before the partition column, widened ones replaced; None
    when the schema has them already."""
    schema = json.loads(metadata["schemaString"])
    fields = schema["fields"]
    by_name = {f["name"]: i for i, f in enumerate(fields)}
    changed = False
    for name, kind in targets.items():
        wanted = field_json(pa.field(name, kind))
        if name in by_name:
            if fields[by_name[name]]["type"] != wanted["type"]:
                fields[by_name[name]] = wanted
                changed = True
            continue
        at = next(
            (i for i, f in enumerate(fields) if f["name"] in metadata.get("partitionColumns", ())),
            len(fields),
        )
        fields.insert(at, wanted)
        by_name = {f["name"]: i for i, f in enumerate(fields)}
        changed = True
    if not changed:
        return None
    return {**metadata, "schemaString": json.dumps(schema, separators=(",", ":"))}


def metadata_actions(metadata: dict[str, Any], timestamp_ms: int) -> list[dict[str, Any]]:
    """The actions of a schema change that adds nullable columns (no file, no record)."""
    commit_info = {
        "timestamp": timestamp_ms,
        "operation": "ADD COLUMNS",
        "operationParameters": {},
        "engineInfo": ENGINE_INFO,
    }
    return [{"commitInfo": commit_info}, {"metaData": metadata}]


def create_actions(
    schema_string: str,
    partition_columns: list[str],
    configuration: Mapping[str, str],
    timestamp_ms: int,
) -> list[dict[str, Any]]:
    """The actions of commit 0 of a new table: protocol 1/2 and its metadata (a fresh id)."""
    metadata = {
        "id": str(uuid.uuid4()),
        "name": None,
        "description": None,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": schema_string,
        "partitionColumns": list(partition_columns),
        "createdTime": timestamp_ms,
        "configuration": dict(configuration),
    }
    commit_info = {
        "timestamp": timestamp_ms,
        "operation": "CREATE TABLE",
        "operationParameters": {"mode": "Ignore"},
        "engineInfo": ENGINE_INFO,
    }
    protocol = {"minReaderVersion": 1, "minWriterVersion": 2}
    return [{"commitInfo": commit_info}, {"protocol": protocol}, {"metaData": metadata}]


def transactions_actions(
    transactions: list[tuple[str, int]], timestamp_ms: int
) -> list[dict[str, Any]]:
    """The actions of a commit of txns only (a leadership change): no file, no record."""
    commit_info = {
        "timestamp": timestamp_ms,
        "operation": "WRITE",
        "operationParameters": {"mode": "Append"},
        "engineInfo": ENGINE_INFO,
    }
    actions = [{"commitInfo": commit_info}]
    actions += [{"txn": {"appId": app_id, "version": v}} for app_id, v in transactions]
    return actions


def rewrite_commit(add: dict[str, Any], removes: list[dict[str, Any]], timestamp_ms: int) -> bytes:
    """The JSON of a compaction: the merged file replaces `removes`, no record changes."""
    return maintenance_commit(
        adds=[add],
        removes=removes,
        timestamp_ms=timestamp_ms,
        operation="OPTIMIZE",
        parameters={"targetSize": "small-file merge"},
    )


def maintenance_commit(
    *,
    adds: list[dict[str, Any]],
    removes: list[dict[str, Any]],
    timestamp_ms: int,
    operation: str,
    parameters: dict[str, str],
    transactions: Sequence[tuple[str, int]] = (),
) -> bytes:
    """The JSON of a maintenance change (retention delete, key compaction, file merge)."""
    return ndjson(change_actions(adds, removes, transactions, operation, parameters, timestamp_ms))


def change_actions(
    adds: Sequence[dict[str, Any]],
    removes: Sequence[dict[str, Any]],
    transactions: Sequence[tuple[str, int]],
    operation: str,
    parameters: dict[str, str],
    timestamp_ms: int,
) -> list[dict[str, Any]]:
    """The actions of a commit that removes and adds files and sets txns, in Delta's order:
    commitInfo, removes, adds, txns."""
    commit_info = {
        "timestamp": timestamp_ms,
        "operation": operation,
        "operationParameters": parameters,
        "engineInfo": ENGINE_INFO,
    }
    actions = [{"commitInfo": commit_info}, *({"remove": r} for r in removes)]
    actions += [{"add": a} for a in adds]
    actions += [{"txn": {"appId": app_id, "version": v}} for app_id, v in transactions]
    return actions


def parse_commit(payload: bytes) -> list[dict[str, Any]]:
    """The actions of a commit's newline-delimited JSON."""
    return [json.loads(line) for line in payload.split(b"\n") if line.strip()]


def ndjson(actions: list[dict[str, Any]]) -> bytes:
    """A commit file's bytes: one JSON action per line."""
    return b"".join(json.dumps(a, separators=(",", ":")).encode() + b"\n" for a in actions)


def commit_name(version: int) -> str:
    return f"{version:020d}.json"


def put_if_absent(log: Store, version: int, payload: bytes) -> bool:
    """Create commit `version` with `payload` in the `_delta_log` store `log`; False (and
    nothing written) if it exists. A create whose answer was lost counts as created when the
    commit holds our payload: every payload names a fresh data file, so it is unique."""
    return log.put_if_absent(commit_name(version), payload)


def is_log_entry(name: str) -> bool:
    """Whether `name` is a commit or a checkpoint file of a `_delta_log`."""
    head = name.split(".", 1)[0]
    return head.isdigit() and (name.endswith(".json") or ".checkpoint." in name)


def commit_exists(log: Store, version: int) -> bool:
    return log.exists(commit_name(version))


def read_commit(log: Store, version: int) -> list[dict[str, Any]] | None:
    """The actions of commit `version`, or None if it does not exist (yet, or any more)."""
    payload = log.get(commit_name(version))
    if payload is None:
        return None
    try:
        return [json.loads(line) for line in payload.split(b"\n") if line.strip()]
    except ValueError as error:
        # Only an exclusive-create store (FUSE) shows a commit before its bytes are all
        # there; anywhere else this is damage. Either way the caller answers "retry".
        raise StoreError(f"{log.uri}/{commit_name(version)} is incomplete: {error}") from error


def may_be_below_checkpoint(log: Store, version: int) -> bool:
    """Whether `_last_checkpoint` names a version after commit `version`, or cannot say.

    Asked after the commit is durable, so an unreadable hint (garbage, torn by a disk fault)
    must not raise: a committed change must never turn into an error a client retries (a
    duplicate). delta-rs ignores such a hint and lists the log; the commit is checked by a
    reload then, as for a commit below the checkpoint.
    """
    try:
        return last_checkpoint_version(log) > version
    except (OSError, ValueError, KeyError, TypeError):
        return True


def last_checkpoint_version(log: Store) -> int:
    """The version `_last_checkpoint` names, or -1 when there is none."""
    pointer = log.get(LAST_CHECKPOINT)
    if pointer is None:
        return -1
    return int(json.loads(pointer)["version"])


def checkpoint_files(log: Store) -> dict[int, list[str]]:
    """The complete checkpoint files in the log (names), by version."""
    by_version: dict[int, list[str]] = {}
    for stored in log.list():
        match = _CHECKPOINT_NAME.fullmatch(stored.name)
        if match:
            by_version.setdefault(int(match[1]), []).append(stored.name)
    return by_version


def damaged_checkpoint(log: Store, load_error: str) -> tuple[int, list[str]] | None:
    """The newest checkpoint's version and its files that are present but unreadable (each
    "<path>: <why>"), or None when it is fine, after delta-rs failed to load the table with
    `load_error`. Too short or without the Parquet magic (truncated, zeroed) is damage
    whatever delta-rs said; otherwise its Parquet decode error names the newest checkpoint,
    the one it reads.

    Raises:
        OSError: the files could not be read (an I/O failure, not damage).
    """
    by_version = checkpoint_files(log)
    if not by_version:
        return None
    version = max(by_version)
    files = by_version[version]
    damaged = [
        f"{_where(log, name)}: {why}" for name in files if (why := _parquet_problem(log, name))
    ]
    if not damaged and _PARQUET_DECODE_ERROR.search(load_error) and "os error" not in load_error:
        damaged = [f"{_where(log, name)}: {load_error}" for name in files]
    return (version, damaged) if damaged else None


def _where(log: Store, name: str) -> str:
    return f"{log.uri}/{name}"


def _parquet_problem(log: Store, name: str) -> str | None:
    data = log.get(name)
    if data is None:
        return None  # gone meanwhile (log cleanup): nothing to judge
    if len(data) < _PARQUET_BYTES_MIN:
        return f"{len(data)} bytes, shorter than any Parquet file"
    if (
        data[: len(_PARQUET_MAGIC)] != _PARQUET_MAGIC
        or data[-len(_PARQUET_MAGIC) :] != _PARQUET_MAGIC
    ):
        return "no Parquet magic at its start or end (truncated or overwritten)"
    return None


def commits_replace_checkpoint(log: Store, version: int) -> bool:
    """Whether the table can be read without checkpoint `version`: every JSON commit up to it
    is still there after the previous checkpoint (or from 0). Housekeeping trims commits only
    below the previous checkpoint, so this holds unless older logs were cleaned up."""
    older = [v for v in checkpoint_files(log) if v < version]
    first = max(older) + 1 if older else 0
    names = {stored.name for stored in log.list()}
    return all(commit_name(v) in names for v in range(first, version + 1))


def drop_dangling_checkpoint_hint(log: Store) -> bool:
    """Delete `_last_checkpoint` if it names a checkpoint that is not there; True if it did.

    delta-rs refuses to load a table whose hint names a missing checkpoint ("Had a
    _last_checkpoint hint but didn't find any checkpoints") although the hint is only a
    shortcut: without it, readers list the log. A checkpoint is renamed into place before its
    hint is written, so a dangling hint is damage from outside (e.g. only the checkpoint was
    deleted) and deleting it loses nothing; at worst a hint that another writer just replaced
    is deleted, which costs readers one listing of the log.
    """
    try:
        version = last_checkpoint_version(log)
    except (ValueError, KeyError, TypeError):
        return False  # unparsable: delta-rs ignores it already
    if version < 0 or version in checkpoint_files(log):
        return False
    log.delete(LAST_CHECKPOINT)
    return True


def unreadable_commits(log: Store) -> list[str]:
    """Commit files after the latest checkpoint that are empty or not JSON lines, each as
    "<version>: <why>". A commit is written whole and then linked into place, so such a file
    is damage from outside (a disk, a tool); delta-rs would read an empty one as a commit
    with no actions and silently drop what it held."""
    try:
        floor = last_checkpoint_version(log)
    except (ValueError, KeyError, TypeError):
        floor = -1  # a damaged pointer: check every commit file there is
    damaged = []
    for stored in log.list():
        stem, _, suffix = stored.name.partition(".")
        if suffix != "json" or not stem.isdigit() or int(stem) <= floor:
            continue
        payload = log.get(stored.name)
        problem = None if payload is None else commit_problem(payload)
        if problem:
            damaged.append(f"{int(stem)}: {problem}")
    return damaged


def commit_problem(payload: bytes) -> str | None:
    lines = [line for line in payload.split(b"\n") if line.strip()]
    if not lines:
        return "empty"
    for line in lines:
        try:
            if not isinstance(json.loads(line), dict):
                return "a line is not a JSON object"
        except ValueError:
            return "not JSON"
    return None


def as_rearrangement(actions: list[dict[str, Any]]) -> Rearrangement | None:
    """The commit as a pure file rearrangement, or None if it changes records, txns,
    metadata or protocol (then the writer must reload and re-check everything)."""
    adds, removed = [], set()
    for action in actions:
        ((kind, body),) = action.items()
        if kind == "commitInfo":
            continue
        if kind == "add" and body.get("dataChange") is False:
            adds.append(body)
        elif kind == "remove" and body.get("dataChange") is False:
            removed.add(unquote(body["path"]))
        else:
            return None
    return Rearrangement(tuple(adds), frozenset(removed), tuple(actions))


def leaves_files(actions: list[dict[str, Any]], paths: set[str], leader: int | None) -> bool:
    """Whether a commit leaves all of `paths` in place, the metadata as it was, and the
    partition with the same `leader` txn version (a compaction of those files can then be
    committed after it; a deposed leader's housekeeping must not)."""
    for action in actions:
        ((kind, body),) = action.items()
        if kind == "txn" and body.get("appId") == "leader" and body.get("version") != leader:
            return False
    return keeps_files(actions, paths, ())


def keeps_files(actions: list[dict[str, Any]], paths: set[str], app_ids: Sequence[str]) -> bool:
    """Whether a commit leaves all of `paths` in place, the metadata as it was, and none of
    the txns `app_ids` (a maintenance change of those files can then be committed after it)."""
    for action in actions:
        ((kind, body),) = action.items()
        if kind in ("metaData", "protocol"):
            return False
        if kind == "remove" and unquote(body["path"]) in paths:
            return False
        if kind == "txn" and body.get("appId") in app_ids:
            return False
    return True
