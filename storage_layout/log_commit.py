"""Direct commits to a local partition table's `_delta_log`: the append hot path.

Why not delta-rs here: its commit builds a new table snapshot after writing the commit file and
then drops it, so the writer has to refresh its DeltaTable again; the two snapshot updates were
~10 ms of a ~12 ms one-record append (BENCHMARKS.md, "Direct commits"). The partition log knows
exactly what it commits, so on a local file system it writes the commit file itself and
advances its own file index.

Atomicity is the Delta protocol's own rule, done as delta-rs's local store does it: the commit
is written under a temporary name and hard-linked to `<version>.json`, which fails if that
version exists (put-if-absent). A writer whose snapshot is version N that creates N + 1 knows
that nothing was committed in between, so its `txn` compare-and-sets hold (FORMAT.md §3). When
N + 1 exists, the winner is read: a pure file rearrangement (housekeeping's compaction:
`dataChange=false` adds and removes, no txn) is applied to the snapshot and the append retries
at the next version; anything else sends the writer through a full reload and the usual
conflict checks. The commits are ordinary Delta JSON that delta-rs and Spark read, carrying the
same `txn` actions, so delta-rs and Spark writers still see the CAS.

Object stores have no put-if-absent in pyarrow; partition tables there commit through delta-rs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

LOG_DIR = "_delta_log"
TEMPORARY_PREFIX = "_commit_"
TEMPORARY_SUFFIX = ".json.tmp"
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


def commit_path(log_dir: str, version: int) -> str:
    return os.path.join(log_dir, f"{version:020d}.json")


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
    path: str, segment: int, size_bytes: int, deletion_ms: int, *, data_change: bool = False
) -> dict[str, Any]:
    """A Delta `remove` action: of a rewritten file (its records live on in the new file), or
    with `data_change` of a file whose records go (retention, key compaction)."""
    return {
        "path": path,
        "deletionTimestamp": deletion_ms,
        "dataChange": data_change,
        "extendedFileMetadata": True,
        "partitionValues": {"segment": str(segment)},
        "size": size_bytes,
    }


def append_commit(
    add: dict[str, Any], transactions: list[tuple[str, int]], timestamp_ms: int
) -> bytes:
    """The newline-delimited JSON of one append: commitInfo, the add action, the txns."""
    commit_info = {
        "timestamp": timestamp_ms,
        "operation": "WRITE",
        "operationParameters": {"mode": "Append", "partitionBy": '["segment"]'},
        "engineInfo": ENGINE_INFO,
    }
    actions = [{"commitInfo": commit_info}, {"add": add}]
    actions += [{"txn": {"appId": app_id, "version": v}} for app_id, v in transactions]
    return _ndjson(actions)


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
    transactions: list[tuple[str, int]] = (),
) -> bytes:
    """The JSON of a maintenance change (retention delete, key compaction, file merge)."""
    commit_info = {
        "timestamp": timestamp_ms,
        "operation": operation,
        "operationParameters": parameters,
        "engineInfo": ENGINE_INFO,
    }
    actions = [{"commitInfo": commit_info}, *({"remove": r} for r in removes)]
    actions += [{"add": a} for a in adds]
    actions += [{"txn": {"appId": app_id, "version": v}} for app_id, v in transactions]
    return _ndjson(actions)


def _ndjson(actions: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(a, separators=(",", ":")).encode() + b"\n" for a in actions)


def put_if_absent(log_dir: str, version: int, payload: bytes) -> bool:
    """Create commit `version` with `payload`; False (and nothing written) if it exists.

    A link that reports "exists" although it is our own payload (a retried link on a network
    file system) counts as created: every payload names a fresh data file, so it is unique.
    """
    temporary = os.path.join(log_dir, f"{TEMPORARY_PREFIX}{uuid.uuid4().hex}{TEMPORARY_SUFFIX}")
    try:
        with open(temporary, "wb") as out:
            out.write(payload)
        os.link(temporary, commit_path(log_dir, version))
    except FileExistsError:
        return _holds(commit_path(log_dir, version), payload)
    finally:
        with contextlib.suppress(OSError):  # a leftover temporary is trimmed later
            os.unlink(temporary)
    return True


def _holds(path: str, payload: bytes) -> bool:
    try:
        with open(path, "rb") as existing:
            return existing.read() == payload
    except FileNotFoundError:
        return False


def is_stale_temporary(name: str) -> bool:
    """A temporary commit file name (left by a crash between write and link)."""
    return name.startswith(TEMPORARY_PREFIX) and name.endswith(TEMPORARY_SUFFIX)


def read_commit(log_dir: str, version: int) -> list[dict[str, Any]] | None:
    """The actions of commit `version`, or None if it does not exist (yet, or any more)."""
    try:
        with open(commit_path(log_dir, version), "rb") as commit:
            return [json.loads(line) for line in commit if line.strip()]
    except FileNotFoundError:
        return None


def last_checkpoint_version(log_dir: str) -> int:
    """The version `_last_checkpoint` names, or -1 when there is none."""
    try:
        with open(os.path.join(log_dir, LAST_CHECKPOINT), "rb") as pointer:
            return int(json.loads(pointer.read())["version"])
    except FileNotFoundError:
        return -1


def checkpoint_files(log_dir: str) -> dict[int, list[str]]:
    """The complete checkpoint files in `log_dir` (full paths), by version."""
    by_version: dict[int, list[str]] = {}
    for name in sorted(os.listdir(log_dir)):
        match = _CHECKPOINT_NAME.fullmatch(name)
        if match:
            by_version.setdefault(int(match[1]), []).append(os.path.join(log_dir, name))
    return by_version


def damaged_checkpoint(log_dir: str, load_error: str) -> tuple[int, list[str]] | None:
    """The newest checkpoint's version and its files that are present but unreadable (each
    "<path>: <why>"), or None when it is fine, after delta-rs failed to load the table with
    `load_error`. Too short or without the Parquet magic (truncated, zeroed) is damage
    whatever delta-rs said; otherwise its Parquet decode error names the newest checkpoint,
    the one it reads.

    Raises:
        OSError: the files could not be read (an I/O failure, not damage).
    """
    by_version = checkpoint_files(log_dir)
    if not by_version:
        return None
    version = max(by_version)
    files = by_version[version]
    damaged = [f"{path}: {why}" for path in files if (why := _parquet_problem(path))]
    if not damaged and _PARQUET_DECODE_ERROR.search(load_error) and "os error" not in load_error:
        damaged = [f"{path}: {load_error}" for path in files]
    return (version, damaged) if damaged else None


def _parquet_problem(path: str) -> str | None:
    with open(path, "rb") as checkpoint:
        size = os.fstat(checkpoint.fileno()).st_size
        if size < _PARQUET_BYTES_MIN:
            return f"{size} bytes, shorter than any Parquet file"
        head = checkpoint.read(len(_PARQUET_MAGIC))
        checkpoint.seek(-len(_PARQUET_MAGIC), os.SEEK_END)
        tail = checkpoint.read(len(_PARQUET_MAGIC))
    if head != _PARQUET_MAGIC or tail != _PARQUET_MAGIC:
        return "no Parquet magic at its start or end (truncated or overwritten)"
    return None


def commits_replace_checkpoint(log_dir: str, version: int) -> bool:
    """Whether the table can be read without checkpoint `version`: every JSON commit up to it
    is still there after the previous checkpoint (or from 0). Housekeeping trims commits only
    below the previous checkpoint, so this holds unless older logs were cleaned up."""
    older = [v for v in checkpoint_files(log_dir) if v < version]
    first = max(older) + 1 if older else 0
    names = set(os.listdir(log_dir))
    return all(f"{v:020d}.json" in names for v in range(first, version + 1))


def drop_dangling_checkpoint_hint(log_dir: str) -> bool:
    """Delete `_last_checkpoint` if it names a checkpoint that is not there; True if it did.

    delta-rs refuses to load a table whose hint names a missing checkpoint ("Had a
    _last_checkpoint hint but didn't find any checkpoints") although the hint is only a
    shortcut: without it, readers list the log. A checkpoint is renamed into place before its
    hint is written, so a dangling hint is damage from outside (e.g. only the checkpoint was
    deleted) and deleting it loses nothing; at worst a hint that another writer just replaced
    is deleted, which costs readers one listing of the log.
    """
    try:
        version = last_checkpoint_version(log_dir)
    except (ValueError, KeyError, TypeError):
        return False  # unparsable: delta-rs ignores it already
    if version < 0 or version in checkpoint_files(log_dir):
        return False
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(log_dir, LAST_CHECKPOINT))
    return True


def unreadable_commits(log_dir: str) -> list[str]:
    """Commit files after the latest checkpoint that are empty or not JSON lines, each as
    "<version>: <why>". A commit is written whole and then linked into place, so such a file
    is damage from outside (a disk, a tool); delta-rs would read an empty one as a commit
    with no actions and silently drop what it held."""
    try:
        floor = last_checkpoint_version(log_dir)
    except (ValueError, KeyError, TypeError):
        floor = -1  # a damaged pointer: check every commit file there is
    damaged = []
    for name in sorted(os.listdir(log_dir)):
        stem, _, suffix = name.partition(".")
        if suffix != "json" or not stem.isdigit() or int(stem) <= floor:
            continue
        with open(os.path.join(log_dir, name), "rb") as commit:
            problem = _commit_problem(commit.read())
        if problem:
            damaged.append(f"{int(stem)}: {problem}")
    return damaged


def _commit_problem(payload: bytes) -> str | None:
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
            removed.add(body["path"])
        else:
            return None
    return Rearrangement(tuple(adds), frozenset(removed))


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
        if kind == "remove" and body["path"] in paths:
            return False
        if kind == "txn" and body.get("appId") in app_ids:
            return False
    return True
