"""The schema registry's state: `_meta/schemas`, a `DocumentTable` (FORMAT.md §15).

Kinds:
- `schema` / `<id>`: `{"schemaType", "schema", "references", "fingerprint", "guid"}`, written
  once: a schema id never changes meaning. `schema` is the canonical text.
- `fingerprint` / `<sha256>`: `{"id"}`: the id of a schema, written with it. Both are created
  in the registering commit, each with its txn, so two nodes giving one id to two schemas, or
  two ids to one schema, conflict and one of them decides again on the winner's state.
- `subject` / `<name>`: `{"versions": [{"version", "id", "deleted"}]}`: a subject's versions,
  soft-deleted ones flagged, permanently deleted ones gone.
- `config` / `<subject>` (`""`: the global one): `{"compatibilityLevel"}`.
- `mode` / `<subject>` (`""`: global): `{"mode"}`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from storage_layout.errors import InvalidSchema
from storage_layout.meta.documents import DocumentTable, DocumentView, Write
from storage_layout.schemas.model import REFERENCE_DEPTH_MAX, ParsedSchema, Reference
from storage_layout.schemas.parsing import parse_schema

SCHEMAS_TABLE = "schemas"
KIND_SCHEMA, KIND_FINGERPRINT, KIND_SUBJECT = "schema", "fingerprint", "subject"
KIND_CONFIG, KIND_MODE = "config", "mode"
GLOBAL = ""  # the name of the registry-wide config and mode
PARSED_CACHE_SIZE = 1024
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StoredSchema:
    id: int
    schema_type: str
    text: str
    references: tuple[Reference, ...]
    fingerprint: str
    guid: str

    def document(self) -> dict:
        return {
            "schemaType": self.schema_type,
            "schema": self.text,
            "references": [r.to_json() for r in self.references],
            "fingerprint": self.fingerprint,
            "guid": self.guid,
        }


@dataclass(frozen=True, slots=True)
class SubjectVersion:
    subject: str
    version: int
    id: int
    deleted: bool = False

    def document(self) -> dict:
        return {"version": self.version, "id": self.id, "deleted": self.deleted}


class RegistryView:
    """The registry as one decision sees it."""

    def __init__(self, documents: DocumentView) -> None:
        self._documents = documents

    def schema(self, schema_id: int) -> StoredSchema | None:
        document = self._documents.get(KIND_SCHEMA, str(schema_id))
        return None if document is None else _stored(schema_id, document)

    def schemas(self) -> list[StoredSchema]:
        found = self._documents.documents(KIND_SCHEMA)
        return sorted((_stored(int(k), d) for k, d in found.items()), key=lambda s: s.id)

    def schema_by_guid(self, guid: str) -> StoredSchema | None:
        return next((s for s in self.schemas() if s.guid == guid), None)

    def id_of(self, fingerprint: str) -> int | None:
        document = self._documents.get(KIND_FINGERPRINT, fingerprint)
        return None if document is None else int(document["id"])

    def next_id(self) -> int:
        ids = [int(name) for name in self._documents.documents(KIND_SCHEMA)]
        return max(ids, default=0) + 1

    def subjects(self) -> list[str]:
        return sorted(self._documents.documents(KIND_SUBJECT))

    def versions(self, subject: str) -> list[SubjectVersion]:
        """Every version of `subject` still stored (soft-deleted ones too), oldest first."""
        document = self._documents.get(KIND_SUBJECT, subject) or {"versions": []}
        return [
            SubjectVersion(subject, int(v["version"]), int(v["id"]), bool(v.get("deleted")))
            for v in document["versions"]
        ]

    def config(self, subject: str) -> str | None:
        document = self._documents.get(KIND_CONFIG, subject)
        return None if document is None else document["compatibilityLevel"]

    def mode(self, subject: str) -> str | None:
        document = self._documents.get(KIND_MODE, subject)
        return None if document is None else document["mode"]


def schema_writes(stored: StoredSchema, *, keep_fingerprint: bool = False) -> list[Write]:
    """A new schema: its document and its fingerprint's (unless the fingerprint names an id
    already: a schema imported under a second id keeps the first as its id)."""
    writes = [Write(KIND_SCHEMA, str(stored.id), stored.document())]
    if not keep_fingerprint:
        writes.append(Write(KIND_FINGERPRINT, stored.fingerprint, {"id": stored.id}))
    return writes


def versions_write(subject: str, versions: list[SubjectVersion]) -> Write:
    """A subject's versions (none left: the subject is gone)."""
    document = {"versions": [v.document() for v in versions]} if versions else None
    return Write(KIND_SUBJECT, subject, document)


def config_write(subject: str, level: str | None) -> Write:
    return Write(KIND_CONFIG, subject, None if level is None else {"compatibilityLevel": level})


def mode_write(subject: str, mode: str | None) -> Write:
    return Write(KIND_MODE, subject, None if mode is None else {"mode": mode})


def latest_live(view: RegistryView, subject: str) -> StoredSchema | None:
    """The schema of `subject`'s newest version that is not deleted, or None."""
    live = [v for v in view.versions(subject) if not v.deleted]
    return None if not live else view.schema(live[-1].id)


class SchemaTable:
    """`_meta/schemas` of a root: read by every node, changed by compare-and-set."""

    def __init__(self, root: str) -> None:
        self._table = DocumentTable(root, SCHEMAS_TABLE)
        self._table.refresh()

    @property
    def version(self) -> int:
        return self._table.version

    def refresh(self) -> bool:
        return self._table.refresh()

    def view(self) -> RegistryView:
        """The state last read (refresh first for the latest)."""
        return RegistryView(self._table.snapshot())

    def transact(self, decide: Callable[[RegistryView], T]) -> T:
        """`decide` on the latest state; its writes (a list of `Write`s, or an object with a
        `writes` attribute) are committed together, or it decides again (DocumentTable)."""
        return self._table.transact(lambda documents: decide(RegistryView(documents)))


class SchemaParser:
    """Schemas parsed with their references resolved (each reference names a subject
    version, itself parsed so), cached: the same text and references parse the same way."""

    def __init__(self, cache_size: int = PARSED_CACHE_SIZE) -> None:
        self._lock = threading.Lock()
        self._parsed: OrderedDict[object, ParsedSchema] = OrderedDict()
        self._cache_size = cache_size

    def stored(self, stored: StoredSchema, view: RegistryView) -> ParsedSchema:
        return self.parse(stored.schema_type, stored.text, stored.references, view)

    def parse(
        self,
        schema_type: str,
        text: str,
        references: tuple[Reference, ...],
        view: RegistryView,
        depth: int = 0,
    ) -> ParsedSchema:
        """`text` parsed with its references resolved in `view`.

        Raises:
            InvalidSchema: it does not parse, or a reference is not registered.
        """
        key = (schema_type, text, references)
        with self._lock:
            if key in self._parsed:
                self._parsed.move_to_end(key)
                return self._parsed[key]
        if depth > REFERENCE_DEPTH_MAX:
            raise InvalidSchema(
                f"References nest deeper than {REFERENCE_DEPTH_MAX} levels (or form a circle)."
            )
        resolved = [(r, self._resolve(r, view, depth)) for r in references]
        parsed = parse_schema(schema_type, text, resolved)
        with self._lock:
            self._parsed[key] = parsed
            while len(self._parsed) > self._cache_size:
                self._parsed.popitem(last=False)
        return parsed

    def _resolve(self, reference: Reference, view: RegistryView, depth: int) -> ParsedSchema:
        version = next(
            (v for v in view.versions(reference.subject) if v.version == reference.version),
            None,
        )
        stored = None if version is None else view.schema(version.id)
        if stored is None:
            raise InvalidSchema(
                f"Reference {reference.name!r} names subject '{reference.subject}' version "
                f"{reference.version}, which is not registered: register it first."
            )
        return self.parse(stored.schema_type, stored.text, stored.references, view, depth + 1)


def _stored(schema_id: int, document: dict) -> StoredSchema:
    return StoredSchema(
        id=schema_id,
        schema_type=document["schemaType"],
        text=document["schema"],
        references=tuple(Reference(**r) for r in document.get("references") or ()),
        fingerprint=document["fingerprint"],
        guid=document["guid"],
    )
