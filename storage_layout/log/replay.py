"""Reading a partition table's state from its `_delta_log` ourselves: the newest checkpoint,
then every commit after it, replayed in order (the Delta protocol's own snapshot rule).

Why not delta-rs here: a `DeltaTable` load reads each commit since the checkpoint twice, and
each `transaction_version` call replays them all again, so opening a partition cost five reads
per commit (on an object store, five requests each; measured: 5 bursts of 134 GETs per table
open, 4 per checkpoint). The log is ours to read: one listing, one read per commit, one read of
the checkpoint. `TableState` is also what the writer keeps up to date with its own commits, so
a checkpoint is written from memory (storage_layout/log/checkpoint.py) without reading the log.

Only what a lakelog partition table can hold is understood (protocol 1/2, classic checkpoints,
single or multi-part); the caller checks the protocol against the allow-list.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from storage_layout.errors import CorruptPartition
from storage_layout.log import log_commit
from storage_layout.store import Store, StoredObject, StoreError

# Commits read at once from an object store (each is a request of ~15-30 ms there); a local
# disk reads them one by one.
READS_IN_FLIGHT = 8
_COMMIT_NAME = re.compile(r"(\d{20})\.json")
_CHECKPOINT_NAME = re.compile(r"(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet")
# What a state needs of a checkpoint: all but its tombstones.
_STATE_COLUMNS = ("protocol", "metaData", "txn", "add")


class TableMissing(Exception):
    """No table at the location: no commit and no checkpoint in its `_delta_log`."""


class UnreadableLog(Exception):
    """Part of the log could not be made sense of (a damaged checkpoint, a gap): the caller
    asks delta-rs, whose failure is explained by storage_layout.log.tables."""


@dataclass(frozen=True, slots=True)
class TableState:
    """A table at `version`: the Delta actions a checkpoint of it holds, but for the
    tombstones (`remove` actions) already in checkpoint `checkpoint`: only those removed after
    it are in memory (an hour of small-file merges leaves hundreds of thousands of them, which
    only a checkpoint needs; it carries them over from the previous one). Never mutated: a
    commit makes a new one (`applied`)."""

    version: int
    protocol: Mapping[str, Any]
    metadata: Mapping[str, Any]
    transactions: Mapping[str, int] = field(default_factory=dict)  # appId -> version
    adds: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # path -> add
    # path -> (the version that removed it, the remove action), removed after `checkpoint`
    tombstones: Mapping[str, tuple[int, Mapping[str, Any]]] = field(default_factory=dict)
    # The checkpoint this state was read from or last written as: (version, part names), or
    # (-1, ()). Its tombstones are not in `tombstones`.
    checkpoint: tuple[int, tuple[str, ...]] = (-1, ())

    def applied(self, version: int, actions: Iterable[Mapping[str, Any]]) -> TableState:
        """This state with commit `version` (its actions, in order) applied."""
        protocol, metadata = self.protocol, self.metadata
        transactions, adds, tombstones = self.transactions, self.adds, self.tombstones
        copied: set[str] = set()

        def own(name: str, value: dict) -> dict:  # copy each mapping once, on first change
            if name not in copied:
                copied.add(name)
                return dict(value)
            return value

        for action in actions:
            ((kind, body),) = action.items()
            if kind == "add":
                path = file_path(body)
                adds = own("adds", adds)
                adds[path] = body
                if path in tombstones:
                    tombstones = own("tombstones", tombstones)
                    del tombstones[path]
            elif kind == "remove":
                path = file_path(body)
                if path in adds:
                    adds = own("adds", adds)
                    del adds[path]
                tombstones = own("tombstones", tombstones)
                tombstones[path] = (version, body)
            elif kind == "txn":
                transactions = own("transactions", transactions)
                transactions[body["appId"]] = int(body["version"])
            elif kind == "metaData":
                metadata = body
            elif kind == "protocol":
                protocol = body
        return dataclasses.replace(
            self,
            version=version,
            protocol=protocol,
            metadata=metadata,
            transactions=transactions,
            adds=adds,
            tombstones=tombstones,
        )

    def checkpointed(self, version: int, names: tuple[str, ...]) -> TableState:
        """This state once checkpoint `version` (files `names`) holds it up to `version`: the
        tombstones up to there leave memory."""
        if version <= self.checkpoint[0]:
            return self
        kept = {path: item for path, item in self.tombstones.items() if item[0] > version}
        return dataclasses.replace(self, tombstones=kept, checkpoint=(version, names))


def file_path(action: Mapping[str, Any]) -> str:
    """An add or remove action's path as a relative path (the log stores it URI-encoded)."""
    return unquote(action["path"])


def read_state(log: Store, table_uri: str) -> TableState:
    """The table as its newest readable checkpoint and the commits after it make it.

    Raises:
        TableMissing: there is no table.
        CorruptPartition: a commit file after the checkpoint is empty or not JSON.
        UnreadableLog: a checkpoint cannot be decoded, or commits are missing.
        OSError: the store could not be read (retriable).
    """
    listed = _listed_from_hint(log)
    commits = _versions(listed, _COMMIT_NAME)
    checkpoint = _newest_checkpoint(listed)
    if checkpoint is None and not commits:
        raise TableMissing(f"No Delta table at {table_uri}")
    state = None if checkpoint is None else _read_checkpoint(log, *checkpoint)
    first = 0 if state is None else state.version + 1
    pending = sorted(v for v in commits if v >= first)
    if pending != list(range(first, first + len(pending))):
        raise UnreadableLog(f"{table_uri}: commits after version {first - 1} have gaps")
    for version, actions in zip(pending, _read_commits(log, pending, table_uri), strict=True):
        if state is None:
            state = _initial(version, actions, table_uri)
        state = state.applied(version, actions)
    if state is None:
        raise UnreadableLog(f"{table_uri}: no commit 0 and no checkpoint")
    return state


def _listed_from_hint(log: Store) -> list[StoredObject]:
    """The log from the checkpoint `_last_checkpoint` names on (object stores list only that
    far: the log may keep an hour of commits for time travel), or all of it when the hint is
    missing, unreadable or names a checkpoint that is not there."""
    try:
        hinted = log_commit.last_checkpoint_version(log)
    except (ValueError, KeyError, TypeError):
        hinted = -1
    if hinted >= 0:
        listed = log.list_after(f"{hinted - 1:020d}.~")
        found = _newest_checkpoint(listed)
        if found is not None and found[0] >= hinted:
            return listed
    return log.list()


def read_newer(log: Store, state: TableState, table_uri: str) -> TableState:
    """`state` with the commits after it applied, read one by one until the next is absent.
    The caller makes sure none was trimmed meanwhile (see DeltaPartitionLog's log grace)."""
    version = state.version + 1
    while True:
        payload = log.get(log_commit.commit_name(version))
        if payload is None:
            return state
        state = state.applied(version, _parse_commit(payload, version, table_uri, log))
        version += 1


def _initial(version: int, actions: list[dict], table_uri: str) -> TableState:
    if version != 0:
        raise UnreadableLog(f"{table_uri}: the log starts at {version}, with no checkpoint")
    return TableState(-1, {}, {})


def _versions(listed: list[StoredObject], pattern: re.Pattern) -> list[int]:
    return [int(m[1]) for item in listed if (m := pattern.fullmatch(item.name))]


def _newest_checkpoint(listed: list[StoredObject]) -> tuple[int, list[str]] | None:
    """The newest checkpoint with all its parts present: (version, part names in order)."""
    parts: dict[tuple[int, int], list[tuple[int, str]]] = {}
    for item in listed:
        match = _CHECKPOINT_NAME.fullmatch(item.name)
        if match:
            total = int(match[3]) if match[3] else 1
            part = int(match[2]) if match[2] else 1
            parts.setdefault((int(match[1]), total), []).append((part, item.name))
    complete = [
        (version, [name for _, name in sorted(found)])
        for (version, total), found in parts.items()
        if len(found) == total
    ]
    return max(complete, default=None)


def _read_checkpoint(log: Store, version: int, names: list[str]) -> TableState:
    state = TableState(version, {}, {}, checkpoint=(version, tuple(names)))
    for name in names:
        table = read_checkpoint_part(log, name, _STATE_COLUMNS)
        state = state.applied(version, _checkpoint_actions(table))
    if not state.protocol or not state.metadata:
        raise UnreadableLog(f"{log.uri}: checkpoint {version} has no protocol or metadata")
    return state


def read_checkpoint_part(log: Store, name: str, columns: tuple[str, ...]) -> pa.Table:
    """The `columns` of one checkpoint file that it has.

    Raises:
        UnreadableLog: it is gone or cannot be decoded.
    """
    data = log.get(name)
    if data is None:
        raise UnreadableLog(f"{log.uri}/{name} disappeared while being read")
    try:
        present = pq.read_schema(pa.BufferReader(data)).names
        wanted = [column for column in columns if column in present]
        return pq.read_table(pa.BufferReader(data), columns=wanted)
    except (pa.ArrowException, OSError, ValueError) as error:
        raise UnreadableLog(f"{log.uri}/{name}: {error}") from error


def _checkpoint_actions(table: pa.Table) -> list[dict[str, Any]]:
    """The checkpoint's rows as actions (its tombstones are not read: see TableState)."""
    actions: list[dict[str, Any]] = []
    for kind in _STATE_COLUMNS:
        if kind not in table.column_names:
            continue
        for body in table.column(kind).to_pylist():
            if body is not None:
                actions.append({kind: _maps_as_dicts(body)})
    return actions


def _maps_as_dicts(body: dict[str, Any]) -> dict[str, Any]:
    """Arrow returns Parquet maps as lists of (key, value) pairs; JSON commits have objects."""
    fixed = {}
    for key, value in body.items():
        if value is None:
            continue
        if key in ("partitionValues", "tags", "configuration") and isinstance(value, list):
            value = dict(value)
        elif key == "format" and isinstance(value, dict):
            value = _maps_as_dicts(value)
        elif key == "options" and isinstance(value, list):
            value = dict(value)
        fixed[key] = value
    return fixed


def _read_commits(log: Store, versions: list[int], table_uri: str) -> Iterable[list[dict]]:
    def read(version: int) -> list[dict]:
        payload = log.get(log_commit.commit_name(version))
        if payload is None:
            raise UnreadableLog(f"{table_uri}: commit {version} disappeared while being read")
        return _parse_commit(payload, version, table_uri, log)

    if log.kind.startswith("local") or len(versions) < 2:
        return [read(v) for v in versions]
    with ThreadPoolExecutor(min(READS_IN_FLIGHT, len(versions))) as pool:
        return list(pool.map(read, versions))


def _parse_commit(payload: bytes, version: int, table_uri: str, log: Store) -> list[dict]:
    problem = log_commit.commit_problem(payload)
    if problem is not None and log.kind == "local-exclusive-create":
        # Only there is a commit visible before its bytes are all written: retry later.
        raise StoreError(f"{table_uri}: commit {version} is incomplete ({problem})")
    if problem is not None:
        raise CorruptPartition(
            f"{table_uri}: damaged commit files ({version}: {problem}); the partition is not "
            f"served rather than served without them. Restore them from a backup."
        )
    return [json.loads(line) for line in payload.split(b"\n") if line.strip()]
