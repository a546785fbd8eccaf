"""The schema registry's operations, as Confluent Schema Registry defines them: register and
look up schemas under subjects, read them by id, GUID, subject and version, check
compatibility, soft and permanent deletes, compatibility levels and modes.

Every node of a root serves the same registry: the state is `_meta/schemas`, read by every node
and changed by compare-and-set (storage_layout/meta/schemas.py), so ids are unique across the
root and one schema has one id wherever it is registered. Reads follow other nodes' changes
within `refresh_interval_ms`, and at once for an id or GUID not seen yet (a deserializer asks
for an id a producer registered on another node a moment ago).

Blocking (storage I/O, protoc for Protobuf text): front-ends call it from a worker thread.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from api.core.schemas.errors import (
    CompatibilityNotConfigured,
    IncompatibleSchema,
    InvalidCompatibilityLevel,
    InvalidMode,
    InvalidSubject,
    InvalidVersion,
    ModeNotConfigured,
    OperationNotPermitted,
    ReferenceExists,
    SchemaNotFound,
    SubjectNotFound,
    SubjectNotSoftDeleted,
    SubjectSoftDeleted,
    VersionNotFound,
    VersionNotSoftDeleted,
    VersionSoftDeleted,
)
from storage_layout.meta.documents import Write
from storage_layout.meta.schemas import (
    GLOBAL,
    RegistryView,
    SchemaParser,
    SchemaTable,
    StoredSchema,
    SubjectVersion,
    config_write,
    mode_write,
    schema_writes,
    versions_write,
)
from storage_layout.schemas.compatibility import DEFAULT_LEVEL, LEVELS, incompatibilities
from storage_layout.schemas.model import AVRO, ParsedSchema, Reference

READWRITE, READONLY, READONLY_OVERRIDE, IMPORT = (
    "READWRITE",
    "READONLY",
    "READONLY_OVERRIDE",
    "IMPORT",
)
MODES = (READWRITE, READONLY, READONLY_OVERRIDE, IMPORT)
VERSION_MAX = 2**31 - 1
SUBJECT_CHARS_MAX = 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class SchemaRequest:
    """A schema as a client sends it: to register, look up or check."""

    text: str
    schema_type: str = AVRO
    references: tuple[Reference, ...] = ()
    schema_id: int | None = None  # IMPORT mode only: the id to register it under
    version: int | None = None  # IMPORT mode only


@dataclass(frozen=True, slots=True)
class Registered:
    """A subject version and its schema."""

    version: SubjectVersion
    schema: StoredSchema
    writes: list[Write] = field(default_factory=list, compare=False)


class SchemaRegistry:
    def __init__(self, root: str, *, refresh_interval_ms: int = 1000) -> None:
        self._table = SchemaTable(root)
        self._refresh_interval_ms = refresh_interval_ms
        self._refreshed_at = time.monotonic()
        self._parser = SchemaParser()

    # ---- reads -------------------------------------------------------------------------------

    def view(self, *, fresh: bool = False) -> RegistryView:
        """The registry, refreshed if older than the refresh interval (or `fresh`)."""
        age_ms = (time.monotonic() - self._refreshed_at) * 1000
        if fresh or age_ms >= self._refresh_interval_ms:
            self._table.refresh()
            self._refreshed_at = time.monotonic()
        return self._table.view()

    def schema_by_id(self, schema_id: int) -> StoredSchema:
        stored = self.schemas_by_ids([schema_id]).get(schema_id)
        if stored is None:
            raise SchemaNotFound(f"Schema {schema_id} not found.")
        return stored

    def schemas_by_ids(self, schema_ids: Iterable[int]) -> dict[int, StoredSchema]:
        """The registered schemas among `schema_ids` (unknown ids left out), reading the
        registry afresh at most once for all of them: a batch of binary values can seem to
        name a dozen ids, and each unknown one used to refresh the registry on its own."""
        wanted = set(schema_ids)
        view = self.view()
        if any(view.schema(schema_id) is None for schema_id in wanted):
            view = self.view(fresh=True)
        found = {}
        for schema_id in wanted:
            stored = view.schema(schema_id)
            if stored is not None and self._versions_of_id(stored.id, deleted=True, view=view):
                found[schema_id] = stored
        return found

    def schema_by_guid(self, guid: str) -> StoredSchema:
        found = self.view().schema_by_guid(guid) or self.view(fresh=True).schema_by_guid(guid)
        if found is None:
            raise SchemaNotFound(f"Schema {guid} not found.")
        return found

    def parsed(self, stored: StoredSchema) -> ParsedSchema:
        """A stored schema, parsed (cached: a schema id never changes meaning)."""
        return self._parser.parse(stored.schema_type, stored.text, stored.references, self.view())

    def subjects(self, *, prefix: str = "", deleted: bool = False) -> list[str]:
        view = self.view()
        return [
            subject
            for subject in view.subjects()
            if subject.startswith(prefix) and _visible(view.versions(subject), deleted)
        ]

    def versions(self, subject: str, *, deleted: bool = False) -> list[int]:
        found = _visible(self.view().versions(subject), deleted)
        if not found:
            raise SubjectNotFound(subject)
        return [v.version for v in found]

    def version(self, subject: str, spec: str, *, deleted: bool = False) -> Registered:
        """`spec`: a version number, or `latest` / `-1` (the newest not deleted)."""
        number = parse_version(spec)
        view = self.view()
        found = _visible(view.versions(subject), deleted or number is not None)
        if not found:
            raise SubjectNotFound(subject)
        chosen = (
            found[-1] if number is None else next((v for v in found if v.version == number), None)
        )
        if chosen is None or (chosen.deleted and not deleted):
            raise VersionNotFound(subject, spec)
        return Registered(chosen, self._stored(view, chosen.id))

    def subject_versions_of(
        self, schema_id: int, *, deleted: bool = False, fresh: bool = False
    ) -> list[SubjectVersion]:
        self.schema_by_id(schema_id)
        return self._versions_of_id(schema_id, deleted=deleted, view=self.view(fresh=fresh))

    def referenced_by(self, subject: str, spec: str) -> list[int]:
        """Ids of the schemas whose references name this subject version."""
        target = self.version(subject, spec, deleted=True).version
        return [
            stored.id
            for stored in self.view().schemas()
            if any(r.subject == subject and r.version == target.version for r in stored.references)
            and self._versions_of_id(stored.id, deleted=False)
        ]

    def lookup(
        self, subject: str, request: SchemaRequest, *, normalize: bool, deleted: bool
    ) -> Registered:
        """The version of `subject` that holds `request`'s schema."""
        view = self.view(fresh=True)
        found = _visible(view.versions(subject), deleted)
        if not found:
            raise SubjectNotFound(subject)
        fingerprint = self._request_schema(request, view, normalize).fingerprint()
        for version in reversed(found):
            if _fingerprint(view, version.id) == fingerprint:
                return Registered(version, self._stored(view, version.id))
        raise SchemaNotFound("Schema not found")

    # ---- registration and compatibility ------------------------------------------------------

    def register(self, subject: str, request: SchemaRequest, *, normalize: bool) -> Registered:
        """Register `request` under `subject`: its existing version when it is there already,
        else a new version (a new id only for a schema new to the registry), checked for
        compatibility with the subject's level first.

        Raises:
            InvalidSchema, IncompatibleSchema, OperationNotPermitted, InvalidSubject.
        """
        check_subject(subject)
        parsed = self._request_schema(request, self.view(fresh=True), normalize)
        registered = self._table.transact(
            lambda view: self._decide_registration(view, subject, request, parsed)
        )
        self._refreshed_at = time.monotonic()
        return registered

    def _decide_registration(
        self, view: RegistryView, subject: str, request: SchemaRequest, parsed: ParsedSchema
    ) -> Registered:
        mode = self._mode(view, subject)
        if mode in (READONLY, READONLY_OVERRIDE):
            raise OperationNotPermitted(f"Subject '{subject}' is in read-only mode.")
        versions = view.versions(subject)
        fingerprint = parsed.fingerprint()
        live = [v for v in versions if not v.deleted]
        if request.schema_id is None and request.version is None:
            existing = next(
                (v for v in reversed(live) if _fingerprint(view, v.id) == fingerprint), None
            )
            if existing is not None:
                return Registered(existing, self._stored(view, existing.id))
            self._check_compatible(view, subject, parsed, live)
            schema_id = view.id_of(fingerprint)
        else:
            schema_id = self._imported_id(view, mode, request, fingerprint)
            _check_imported_version(subject, versions, request.version, schema_id)
        number = request.version or max((v.version for v in versions), default=0) + 1
        writes = []
        if schema_id is None or view.schema(schema_id) is None:
            stored = _stored_of(schema_id or view.next_id(), parsed)
            writes += schema_writes(stored, keep_fingerprint=view.id_of(fingerprint) is not None)
        else:
            stored = self._stored(view, schema_id)
        version = SubjectVersion(subject, number, stored.id)
        kept = [v for v in versions if v.version != number]
        writes.append(versions_write(subject, sorted([*kept, version], key=_by_version)))
        return Registered(version, stored, writes)

    def _imported_id(
        self, view: RegistryView, mode: str, request: SchemaRequest, fingerprint: str
    ) -> int | None:
        """The id an IMPORT-mode registration gives: its own (unless another schema has
        it), or the schema's id when it gives none."""
        if mode != IMPORT:
            raise OperationNotPermitted(
                "A schema id or version can be given only in IMPORT mode: set the mode first."
            )
        if request.schema_id is None:
            return view.id_of(fingerprint)
        taken = view.schema(request.schema_id)
        if taken is not None and taken.fingerprint != fingerprint:
            raise OperationNotPermitted(
                f"Schema id {request.schema_id} is already used by a different schema."
            )
        return request.schema_id

    def check_compatibility(
        self, subject: str, spec: str | None, request: SchemaRequest, *, normalize: bool
    ) -> list[str]:
        """Why `request` may not follow `subject` (at version `spec`, or every version the
        level checks); empty when it may. A subject without versions accepts anything."""
        view = self.view(fresh=True)
        parsed = self._request_schema(request, view, normalize)
        live = [v for v in view.versions(subject) if not v.deleted]
        if spec is not None:
            chosen = self.version(subject, spec)
            live = [chosen.version]
        level = self._level(view, subject)
        return incompatibilities(level, parsed, self._previous(view, live))

    def _check_compatible(
        self,
        view: RegistryView,
        subject: str,
        parsed: ParsedSchema,
        live: Sequence[SubjectVersion],
    ) -> None:
        level = self._level(view, subject)
        messages = incompatibilities(level, parsed, self._previous(view, live))
        if messages:
            raise IncompatibleSchema(subject, level, messages)

    def _previous(
        self, view: RegistryView, versions: Sequence[SubjectVersion]
    ) -> list[tuple[int, ParsedSchema]]:
        previous = []
        for version in versions:
            stored = self._stored(view, version.id)
            parsed = self._parser.parse(stored.schema_type, stored.text, stored.references, view)
            previous.append((version.version, parsed))
        return previous

    # ---- deletes -----------------------------------------------------------------------------

    def delete_version(self, subject: str, spec: str, *, permanent: bool) -> int:
        number = parse_version(spec)

        def decide(view: RegistryView) -> Registered:
            self._check_writable(view, subject)
            versions = view.versions(subject)
            if not versions:
                raise SubjectNotFound(subject)
            candidates = versions if permanent else [v for v in versions if not v.deleted]
            chosen = (
                (candidates or [None])[-1]
                if number is None
                else next((v for v in versions if v.version == number), None)
            )
            if chosen is None:
                raise VersionNotFound(subject, spec)
            if not permanent and chosen.deleted:
                raise VersionSoftDeleted(subject, chosen.version)
            if permanent and not chosen.deleted:
                raise VersionNotSoftDeleted(subject, chosen.version)
            self._check_unreferenced(view, subject, [chosen.version])
            kept = [v for v in versions if v.version != chosen.version]
            if not permanent:
                kept = sorted([*kept, _deleted(chosen)], key=_by_version)
            return Registered(
                chosen, self._stored(view, chosen.id), [versions_write(subject, kept)]
            )

        return self._table.transact(decide).version.version

    def delete_subject(self, subject: str, *, permanent: bool) -> list[int]:
        def decide(view: RegistryView) -> _Deleted:
            self._check_writable(view, subject)
            versions = view.versions(subject)
            if not versions:
                raise SubjectNotFound(subject)
            live = [v for v in versions if not v.deleted]
            if not permanent and not live:
                raise SubjectSoftDeleted(subject)
            if permanent and live:
                raise SubjectNotSoftDeleted(subject)
            self._check_unreferenced(view, subject, [v.version for v in versions])
            if permanent:
                writes = [versions_write(subject, [])]
                writes += _subject_settings(view, subject)
                return _Deleted([v.version for v in versions], writes)
            kept = [_deleted(v) for v in versions]
            return _Deleted([v.version for v in live], [versions_write(subject, kept)])

        return self._table.transact(decide).versions

    def _check_unreferenced(self, view: RegistryView, subject: str, numbers: list[int]) -> None:
        for stored in view.schemas():
            for reference in stored.references:
                live = self._versions_of_id(stored.id, deleted=False, view=view)
                if reference.subject == subject and reference.version in numbers and live:
                    raise ReferenceExists(
                        f"Subject '{subject}' version {reference.version} is referenced by "
                        f"schema {stored.id}: delete the referencing schema first."
                    )

    # ---- compatibility levels and modes ------------------------------------------------------

    def compatibility(self, subject: str | None, *, default_to_global: bool) -> str:
        return _setting(
            RegistryView.config,
            self.view(),
            subject,
            DEFAULT_LEVEL,
            default_to_global=default_to_global,
            not_set=CompatibilityNotConfigured,
        )

    def set_compatibility(self, subject: str | None, level: object) -> str:
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise InvalidCompatibilityLevel(
                f"Invalid compatibility level {level!r}: use one of {', '.join(LEVELS)}."
            )
        if subject is not None:
            check_subject(subject)
        chosen = level.upper()

        def decide(view: RegistryView) -> list[Write]:
            self._check_writable(view, subject or GLOBAL)
            return [config_write(subject or GLOBAL, chosen)]

        self._table.transact(decide)
        return chosen

    def delete_compatibility(self, subject: str | None) -> str:
        """Remove a level; the one it had (the default, for an unset global level)."""

        def decide(view: RegistryView) -> _Removed:
            previous = view.config(subject or GLOBAL)
            if previous is None and subject is not None:
                raise CompatibilityNotConfigured(subject)
            writes = [] if previous is None else [config_write(subject or GLOBAL, None)]
            return _Removed(previous or DEFAULT_LEVEL, writes)

        return self._table.transact(decide).value

    def mode(self, subject: str | None, *, default_to_global: bool) -> str:
        return _setting(
            RegistryView.mode,
            self.view(),
            subject,
            READWRITE,
            default_to_global=default_to_global,
            not_set=ModeNotConfigured,
        )

    def set_mode(self, subject: str | None, mode: object, *, force: bool) -> str:
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise InvalidMode(f"Invalid mode {mode!r}: use one of {', '.join(MODES)}.")
        chosen = mode.upper()

        def decide(view: RegistryView) -> list[Write]:
            if chosen == IMPORT and not force and _has_schemas(view, subject):
                raise OperationNotPermitted(
                    "Cannot import since found existing subjects: use force=true to import "
                    "into a registry that has schemas."
                )
            return [mode_write(subject or GLOBAL, chosen)]

        self._table.transact(decide)
        return chosen

    def delete_mode(self, subject: str) -> str:
        def decide(view: RegistryView) -> _Removed:
            previous = view.mode(subject)
            if previous is None:
                raise ModeNotConfigured(subject)
            return _Removed(previous, [mode_write(subject, None)])

        return self._table.transact(decide).value

    # ---- internals ---------------------------------------------------------------------------

    def _level(self, view: RegistryView, subject: str) -> str:
        return _setting(RegistryView.config, view, subject, DEFAULT_LEVEL)

    def _mode(self, view: RegistryView, subject: str) -> str:
        return _setting(RegistryView.mode, view, subject, READWRITE)

    def _check_writable(self, view: RegistryView, subject: str) -> None:
        if self._mode(view, subject) == READONLY:
            raise OperationNotPermitted(f"Subject '{subject}' is in read-only mode.")

    def _stored(self, view: RegistryView, schema_id: int) -> StoredSchema:
        stored = view.schema(schema_id)
        if stored is None:
            raise SchemaNotFound(f"Schema {schema_id} not found.")
        return stored

    def _versions_of_id(
        self, schema_id: int, *, deleted: bool, view: RegistryView | None = None
    ) -> list[SubjectVersion]:
        view = view or self.view()
        return [
            version
            for subject in view.subjects()
            for version in _visible(view.versions(subject), deleted)
            if version.id == schema_id
        ]

    def _request_schema(
        self, request: SchemaRequest, view: RegistryView, normalize: bool
    ) -> ParsedSchema:
        parsed = self._parser.parse(request.schema_type, request.text, request.references, view)
        return parsed.normalized() if normalize else parsed


@dataclass(frozen=True, slots=True)
class _Deleted:
    versions: list[int]
    writes: list[Write]


@dataclass(frozen=True, slots=True)
class _Removed:
    value: str
    writes: list[Write]


def parse_version(spec: str) -> int | None:
    """A version number, or None for `latest` / `-1`.

    Raises:
        InvalidVersion: neither `latest` nor a number in [1, 2^31-1].
    """
    text = str(spec).strip()
    if text.lower() == "latest" or text == "-1":
        return None
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= VERSION_MAX:
        raise InvalidVersion(spec)
    return int(text)


def check_subject(subject: str) -> None:
    if not subject.strip() or len(subject) > SUBJECT_CHARS_MAX or _CONTROL.search(subject):
        raise InvalidSubject(
            f"Invalid subject {subject!r}: use 1 to {SUBJECT_CHARS_MAX} printable characters."
        )


def _visible(versions: list[SubjectVersion], deleted: bool) -> list[SubjectVersion]:
    return [v for v in versions if deleted or not v.deleted]


def _deleted(version: SubjectVersion) -> SubjectVersion:
    return SubjectVersion(version.subject, version.version, version.id, deleted=True)


def _by_version(version: SubjectVersion) -> int:
    return version.version


def _subject_settings(view: RegistryView, subject: str) -> list[Write]:
    """A permanently deleted subject's own level and mode go with it."""
    writes = []
    if view.config(subject) is not None:
        writes.append(config_write(subject, None))
    if view.mode(subject) is not None:
        writes.append(mode_write(subject, None))
    return writes


def _has_schemas(view: RegistryView, subject: str | None) -> bool:
    subjects = view.subjects() if subject is None else [subject]
    return any(view.versions(s) for s in subjects)


def _setting(
    read,
    view: RegistryView,
    subject: str | None,
    default: str,
    *,
    default_to_global: bool = True,
    not_set: type[Exception] | None = None,
) -> str:
    """A subject's level or mode (`read`: RegistryView.config or .mode): its own, else the
    global one, else `default`; `not_set(subject)` when it has none and `default_to_global`
    is off (None: the global settings)."""
    own = None if subject is None else read(view, subject)
    if subject is not None and own is None and not default_to_global and not_set is not None:
        raise not_set(subject)
    return own or read(view, GLOBAL) or default


def _fingerprint(view: RegistryView, schema_id: int) -> str | None:
    stored = view.schema(schema_id)
    return None if stored is None else stored.fingerprint


def _check_imported_version(
    subject: str, versions: list[SubjectVersion], number: int | None, schema_id: int | None
) -> None:
    """An imported version may not change what an existing version means."""
    existing = next((v for v in versions if v.version == number), None)
    if existing is not None and existing.id != schema_id:
        raise OperationNotPermitted(
            f"Subject '{subject}' version {number} already holds schema {existing.id}: "
            "a version never changes its schema."
        )


def _stored_of(schema_id: int, parsed: ParsedSchema) -> StoredSchema:
    return StoredSchema(
        id=schema_id,
        schema_type=parsed.schema_type,
        text=parsed.text,
        references=parsed.references,
        fingerprint=parsed.fingerprint(),
        guid=parsed.guid(),
    )
