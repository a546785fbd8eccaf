"""Versioned JSON documents keyed by `(kind, name)` in one small `_meta` Delta table: the
principals, the ACLs and the schema registry are kept this way.

Layout: one row per version of a document, `document` a JSON string (null = deleted). The
current document is the row with the highest `version`. A change commits
`Transaction("<kind>/<name>", version)` for every document it writes, on the snapshot it read,
so of two writers of one document only one wins (the loser decides again on the winner's
state), and a change of several documents is one commit: all of them or none.

Concurrency contract: safe from several threads (a lock serializes this process's writers);
processes and nodes are serialized by the compare-and-set.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa

from storage_layout import paths
from storage_layout.errors import StorageUnavailable
from storage_layout.meta.table import MetaTable, Verdict
from storage_layout.schema import TIMESTAMP_TYPE

WRITE_ATTEMPTS_MAX = 20

DOCUMENTS_SCHEMA = pa.schema(
    [
        pa.field("kind", pa.string(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("version", pa.int64(), nullable=False),
        pa.field("document", pa.string()),
        pa.field("updated_at", TIMESTAMP_TYPE, nullable=False),
    ]
)

Key = tuple[str, str]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Write:
    """One document of a change: `document` None deletes it."""

    kind: str
    name: str
    document: dict | None


class DocumentView:
    """The current documents, as a decision sees them (read-only)."""

    def __init__(self, current: Mapping[Key, dict]) -> None:
        self._current = current

    def get(self, kind: str, name: str) -> dict | None:
        return self._current.get((kind, name))

    def documents(self, kind: str) -> dict[str, dict]:
        return {name: doc for (k, name), doc in self._current.items() if k == kind}


class DocumentTable:
    """Versioned JSON documents keyed by `(kind, name)` in one small `_meta` Delta table."""

    def __init__(self, root: str, table: str) -> None:
        self._uri = paths.meta_table_uri(paths.normalize_root(root), table)
        self._lock = threading.Lock()
        self._table = MetaTable(self._uri, DOCUMENTS_SCHEMA)
        self._loaded_version = -1
        self._current: dict[Key, dict] = {}

    @property
    def version(self) -> int:
        """The table version the documents were last read at."""
        return self._loaded_version

    def refresh(self) -> bool:
        """Read changes committed by other nodes or tools; True if anything changed."""
        with self._lock:
            return self._refresh()

    def snapshot(self) -> DocumentView:
        """The documents as last refreshed (a view that later reads do not change)."""
        with self._lock:
            return DocumentView(self._current)

    def documents(self, kind: str) -> dict[str, dict]:
        """The current (not deleted) documents of `kind`, by name, as last refreshed."""
        with self._lock:
            return DocumentView(self._current).documents(kind)

    def get(self, kind: str, name: str) -> dict | None:
        with self._lock:
            return self._current.get((kind, name))

    def put(self, kind: str, name: str, document: dict | None, *, create_only=False) -> bool:
        """Write (or, with None, delete) one document; False if `create_only` and it exists,
        or if deleting a document that does not exist.

        Raises:
            StorageUnavailable: the table could not be read or written.
        """

        def decide(view: DocumentView) -> list[Write] | None:
            exists = view.get(kind, name) is not None
            if (create_only and exists) or (document is None and not exists):
                return None
            return [Write(kind, name, document)]

        return self.transact(decide) is not None

    def transact(self, decide: Callable[[DocumentView], T]) -> T:
        """Apply `decide`'s writes as one commit, deciding on the latest documents: `decide`
        returns a list of `Write`s (or an object with a `writes` attribute holding them), or
        None to write nothing; it is called again on the new state when another writer
        changed one of the same documents first. Returns what `decide` returned.

        Raises:
            StorageUnavailable: the table could not be read or written, or kept changing.
        """
        with self._lock:
            for _ in range(WRITE_ATTEMPTS_MAX):
                self._refresh()
                decision = decide(DocumentView(self._current))
                writes = _writes_of(decision)
                if not writes:
                    return decision
                if self._write(writes):
                    self._refresh()
                    return decision
        raise StorageUnavailable(f"Could not write {self._uri}: contention.")

    def _write(self, writes: Sequence[Write]) -> bool:
        now_us = int(time.time() * 1_000_000)
        rows: dict[str, list] = {name: [] for name in DOCUMENTS_SCHEMA.names}
        transactions = []
        for write in writes:
            app_id = f"{write.kind}/{write.name}"
            version = (self._table.transaction_version(app_id) or 0) + 1
            transactions.append((app_id, version))
            document = _encoded(write.document)
            for column, value in zip(
                DOCUMENTS_SCHEMA.names,
                (write.kind, write.name, version, document, now_us),
                strict=True,
            ):
                rows[column].append(value)
        table = pa.table(rows, schema=DOCUMENTS_SCHEMA)
        return self._table.append(table, transactions) is Verdict.COMMITTED

    def _refresh(self) -> bool:
        self._table.refresh()
        if self._table.version == self._loaded_version:
            return False
        table = self._table.read()
        newest: dict[Key, tuple[int, str | None]] = {}
        for kind, name, version, document in zip(
            *(table.column(c).to_pylist() for c in ("kind", "name", "version", "document")),
            strict=True,
        ):
            if (kind, name) not in newest or version > newest[(kind, name)][0]:
                newest[(kind, name)] = (version, document)
        self._current = {
            key: json.loads(document)
            for key, (_, document) in newest.items()
            if document is not None
        }
        self._loaded_version = self._table.version
        return True


def _encoded(document: dict | None) -> str | None:
    return None if document is None else json.dumps(document, sort_keys=True)


def _writes_of(decision: object) -> list[Write]:
    if decision is None:
        return []
    if isinstance(decision, list):
        return decision
    return list(getattr(decision, "writes", ()))
