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
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

LOG_DIR = "_delta_log"
TEMPORARY_PREFIX = "_commit_"
TEMPORARY_SUFFIX = ".json.tmp"
ENGINE_INFO = "lakelog"


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
        with open(os.path.join(log_dir, "_last_checkpoint"), "rb") as pointer:
            return int(json.loads(pointer.read())["version"])
    except FileNotFoundError:
        return -1


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
