"""Typed columns at produce time (FORMAT.md §17), and Confluent's produce-time schema
validation.

On the partition's leader, an append's keys and values that name a schema of this registry
(Confluent's wire format: a prefix, or a `__key_schema_id`/`__value_schema_id` header) are
decoded, and their fields ride with the records to the partition table as typed columns. What
does not decode stays raw bytes with null typed columns, unless the topic validates
(`confluent.key|value.schema.validation=true`): then the append is refused, naming the record
and why, and nothing of it is written.

Registry lookups are cached: a schema id never changes meaning, so its decoder is kept; an id
the registry does not know is asked again after `UNKNOWN_ID_RETRY_S`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from api.core import metrics
from api.core.schemas.errors import RecordSchemaInvalid, RegistryError
from api.core.schemas.registry import SchemaRegistry
from storage_layout.errors import InvalidSchema
from storage_layout.log.arrow_records import compression_of, new_records_table
from storage_layout.meta.schemas import StoredSchema
from storage_layout.records import RecordColumns, Records, records_size_bytes
from storage_layout.schemas import subjects, wire
from storage_layout.schemas.avro_format import AvroSchema
from storage_layout.schemas.json_format import JsonSchema
from storage_layout.schemas.model import PROTOBUF, ParsedSchema
from storage_layout.schemas.protobuf_format import ProtobufSchema
from storage_layout.schemas.typed_columns import (
    KEY_FIELDS,
    KEY_SCHEMA_ID,
    SCHEMA_ID_TYPE,
    VALUE_FIELDS,
    VALUE_SCHEMA_ID,
    conform,
    merge_all,
)
from storage_layout.schemas.typed_values import TypedCodec, typed_codec
from storage_layout.topic_config import TopicConfig

Blocking = Callable[..., Awaitable]
UNKNOWN_ID_RETRY_S = 5.0
UNKNOWN_REMEMBERED_MAX = 10_000
NOT_FAST = object()  # _prefixed_side: not the common case
SUBJECTS_RECHECK_S = 0.1


@dataclass(frozen=True, slots=True)
class _Schema:
    """A registered schema as typed columns need it."""

    stored: StoredSchema
    parsed: ParsedSchema

    @property
    def record_name(self) -> str | None:
        """What RecordNameStrategy names its subject after."""
        parsed = self.parsed
        if isinstance(parsed, AvroSchema):
            return getattr(parsed.schema, "fullname", None)
        if isinstance(parsed, JsonSchema) and isinstance(parsed.document, dict):
            return parsed.document.get("title")
        return None


class TypedRecords:
    def __init__(self, registry: SchemaRegistry, blocking: Blocking) -> None:
        self._registry = registry
        self._blocking = blocking
        self._known: dict[int, _Schema] = {}  # schema id -> its registered schema
        self._guids: dict[str, int] = {}
        self._unknown: dict[object, float] = {}  # id or GUID -> when to ask again
        self._codecs: dict[tuple[int, tuple[int, ...]], TypedCodec | None] = {}
        self._subjects: dict[int, tuple[float, frozenset[str]]] = {}

    async def attach(self, topic: str, config: TopicConfig, records: Records) -> Records:
        """`records` with the typed columns of their keys and values (unchanged when none
        names a schema).

        Raises:
            RecordSchemaInvalid: the topic validates, and a record fails (the first, by index).
        """
        if not _may_name_schemas(records, config):
            return records
        table = new_records_table(records)
        named = records.named if isinstance(records, RecordColumns) else None
        typed: dict[str, pa.Array] = {}
        for is_key in (True, False):
            listed = None if named is None else named.ids(is_key=is_key)
            found = await self._side(topic, config, table, is_key, listed)
            if found is not None:
                typed.update(found)
        if not typed:
            return records
        return RecordColumns(
            table, records_size_bytes(records), pa.table(typed), compression_of(records)
        )

    async def _side(
        self,
        topic: str,
        config: TopicConfig,
        table: pa.Table,
        is_key: bool,
        listed: frozenset[int] | None,
    ) -> dict[str, pa.Array] | None:
        """The typed columns of one side; `listed`: the ids its prefixes name, when the
        decoder listed them."""
        column = table.column("key" if is_key else "value")
        validate = config.validates_schema(is_key=is_key)
        if not validate:
            fast = await self._prefixed_side(topic, config, column, table, is_key, listed)
            if fast is not NOT_FAST:
                return fast
        refs = _refs(column, table.column("headers"), is_key)
        if refs is None and not validate:
            return None
        payloads = column.to_pylist()
        refs = refs or [None] * len(payloads)
        refusals = await self._load(refs, topic, config, is_key, validate)
        ids: list[int | None] = [None] * len(payloads)
        groups: dict[tuple[int, tuple[int, ...]], list[tuple[int, Any]]] = {}
        for index, (ref, payload) in enumerate(zip(refs, payloads, strict=True)):
            outcome = self._typed_value(ref, payload, validate, refusals)
            if isinstance(outcome, str):
                raise RecordSchemaInvalid(topic=topic, index=index, is_key=is_key, reason=outcome)
            if outcome is not None:
                key, value = outcome
                ids[index] = key[0]
                groups.setdefault(key, []).append((index, value))
        if not groups:
            return None
        return _typed_columns(is_key, ids, self._fields_array(groups, len(payloads), ids))

    async def _prefixed_side(self, topic, config, column, table, is_key: bool, listed):
        """The common case in one pass with no object per record: no header names a schema,
        and every schema the prefixes name decodes in batches (Avro in Rust). NOT_FAST when
        the case is not that one (the general path then decides)."""
        if _has_header(table.column("headers"), wire.header_name(is_key=is_key)):
            return NOT_FAST
        if listed is not None and not await self._names_a_schema(listed):
            # Binary keys and values often start with a zero byte (big-endian numbers, Avro
            # without the wire format): the ids alone rule them out, with no pass over the
            # column (~0.1 ms a request).
            return None
        by_id: dict[int, list[tuple[int, bytes]]] = {}
        for index, payload in _prefixed_rows(column):
            by_id.setdefault(int.from_bytes(payload[1 : wire.PREFIX_BYTES], "big"), []).append(
                (index, payload)
            )
        schemas = await self._schemas(by_id)
        ids: list[int | None] = [None] * len(column)
        groups: dict[tuple[int, tuple[int, ...]], list[tuple[int, Any]]] = {}
        for schema_id, rows in by_id.items():
            found = schemas.get(schema_id)
            if found is None or await self._subject_refusal(topic, config, found, is_key):
                continue  # not the topic's schema: stored untyped
            if found.parsed.schema_type == PROTOBUF:
                return NOT_FAST  # message indexes per record: the general path
            codec = self._codec((schema_id, ()), found)
            if codec is None or codec.batch is None:
                return NOT_FAST
            groups[(schema_id, ())] = [
                (index, payload[wire.PREFIX_BYTES :]) for index, payload in rows
            ]
            for index, _ in rows:
                ids[index] = schema_id
        if not groups:
            return None
        return _typed_columns(is_key, ids, self._fields_array(groups, len(column), ids))

    async def _names_a_schema(self, schema_ids: frozenset[int]) -> bool:
        """Whether any of `schema_ids` is a registered schema's."""
        return bool(await self._schemas(schema_ids))

    async def _load(self, refs, topic, config, is_key, validate) -> dict[int, str | None]:
        """Look up (once per batch, cached across batches) the schemas `refs` name; when the
        topic validates, why each schema may not be used for it (None: it may)."""
        refusals: dict[int, str | None] = {}
        seen: set[object] = set()
        for ref in refs:
            if ref is None or (ref.guid or ref.schema_id) in seen:
                continue
            seen.add(ref.guid or ref.schema_id)
            schema_id = ref.schema_id if ref.guid is None else await self._id_of_guid(ref.guid)
            found = None if schema_id is None else await self._schema(schema_id)
            if found is not None and schema_id not in refusals:
                refusals[schema_id] = await self._subject_refusal(topic, config, found, is_key)
        return refusals

    def _typed_value(self, ref, payload, validate: bool, refusals: dict[int, str | None]):
        """(codec key, typed value), None (not typed), or why the record is refused; the
        schemas are loaded already (`_load`)."""
        if payload is None:
            return "it is null" if validate else None
        if ref is None:
            return "it names no schema (Confluent's wire format)" if validate else None
        schema_id = ref.schema_id if ref.guid is None else self._guids.get(ref.guid)
        found = None if schema_id is None else self._known.get(schema_id)
        if found is None:
            return f"schema {ref.guid or schema_id} is not in the registry" if validate else None
        try:
            resolved = ref.resolved(found.parsed.schema_type)
        except ValueError as error:
            return f"its message indexes are malformed ({error})" if validate else None
        key = (schema_id, resolved.message_indexes)
        codec = self._codec(key, found)
        data = payload[resolved.payload_at :]
        if refusals.get(schema_id) is not None and not validate:
            return None  # a schema of another subject types nothing here
        if validate:
            reason = refusals.get(schema_id) or _payload_refusal(found, codec, data)
            if reason is not None:
                return reason
        if codec is None:
            return None
        if codec.batch is not None:
            return key, data  # decoded with the rest of its group (_fields_array)
        try:
            return key, codec.value(data)
        except ValueError:  # TypedCodec.value turns whatever hostile data causes into this
            metrics.TYPED_DECODE_FAILURES.inc()
            return None

    async def _subject_refusal(self, topic, config, found, is_key) -> str | None:
        subject = _subject(topic, config, found, is_key)
        if subject is None:
            return "its schema has no record name for the subject name strategy"
        if not await self._registered_under(found.stored.id, subject):
            return f"schema {found.stored.id} is not registered under subject {subject!r}"
        return None

    def _fields_array(self, groups, count: int, ids: list[int | None]) -> pa.Array:
        """One typed column from each schema's values, in record order; a value that does
        not convert (its schema's type, unvalidated) is null, and so is its id."""
        codecs = {key: self._codecs[key] for key in groups}
        merged = merge_all(codec.form.type for codec in codecs.values() if codec).type
        pieces, order = [], []
        for key, items in groups.items():
            codec = codecs[key]
            indexes = [i for i, _ in items]
            if codec.batch is not None:  # the items hold payloads: decoded here, all at once
                array, decoded = codec.batch([data for _, data in items])
                for index, good in zip(indexes, decoded, strict=True):
                    if not good:
                        metrics.TYPED_DECODE_FAILURES.inc()
                        ids[index] = None
            else:
                array = _to_arrow([value for _, value in items], codec.form.type, ids, indexes)
            pieces.append(conform(array, merged))
            order.extend(index for index, _ in items)
        if len(pieces) == 1 and len(order) == count:
            return pieces[0]  # one schema, every record: already in record order
        typed = set(order)
        untyped = [i for i in range(count) if i not in typed]
        pieces.append(pa.nulls(len(untyped), merged))
        order.extend(untyped)
        combined = pa.concat_arrays(pieces)
        positions = [0] * count
        for position, index in enumerate(order):
            positions[index] = position
        return combined.take(pa.array(positions, pa.int64()))

    # ---- registry lookups, cached -------------------------------------------------------------

    async def _schema(self, schema_id: int) -> _Schema | None:
        return (await self._schemas((schema_id,))).get(schema_id)

    async def _schemas(self, schema_ids: Iterable[int]) -> dict[int, _Schema]:
        """The registered schemas among `schema_ids`, cached: known ones for good, unknown
        ones for UNKNOWN_ID_RETRY_S; ids no registry gives (wire.may_be_schema_id) are never
        looked up. The ids not cached are looked up in one trip for all of them."""
        now = time.monotonic()
        found: dict[int, _Schema] = {}
        missing: list[int] = []
        for schema_id in schema_ids:
            if not wire.may_be_schema_id(schema_id):
                continue
            cached = self._known.get(schema_id)
            if cached is not None:
                found[schema_id] = cached
            elif self._unknown.get(schema_id, 0) <= now:
                missing.append(schema_id)
        if missing:
            looked_up = await self._blocking(self._look_up, missing)
            for schema_id in missing:
                if schema_id in looked_up:
                    found[schema_id] = self._known[schema_id] = looked_up[schema_id]
                else:
                    self._remember_unknown(schema_id)
        return found

    def _look_up(self, schema_ids: list[int]) -> dict[int, _Schema]:
        """(In a storage thread.) The registered and parsable schemas among `schema_ids`."""
        try:
            stored = self._registry.schemas_by_ids(schema_ids)
        except RegistryError:
            return {}
        parsed = {}
        for schema_id, schema in stored.items():
            try:
                parsed[schema_id] = _Schema(schema, self._registry.parsed(schema))
            except InvalidSchema:
                continue
        return parsed

    async def _id_of_guid(self, guid: str) -> int | None:
        if guid in self._guids or self._unknown.get(guid, 0) > time.monotonic():
            return self._guids.get(guid)
        try:
            stored = await self._blocking(self._registry.schema_by_guid, guid)
        except RegistryError:
            self._remember_unknown(guid)
            return None
        self._guids[guid] = stored.id
        return stored.id

    def _remember_unknown(self, name: object) -> None:
        if len(self._unknown) >= UNKNOWN_REMEMBERED_MAX:  # random ids must not grow it forever
            self._unknown.clear()
        self._unknown[name] = time.monotonic() + UNKNOWN_ID_RETRY_S

    def _codec(self, key: tuple[int, tuple[int, ...]], found: _Schema) -> TypedCodec | None:
        if key not in self._codecs:
            try:
                self._codecs[key] = typed_codec(found.parsed, key[1])
            except ValueError:
                self._codecs[key] = None
        return self._codecs[key]

    async def _registered_under(self, schema_id: int, subject: str) -> bool:
        """Whether the id has a version under `subject`: from the cache when it says so, else
        asked again (a registration a moment ago, maybe on another node), at most every
        SUBJECTS_RECHECK_S per id."""
        now = time.monotonic()
        cached = self._subjects.get(schema_id)
        if cached is not None and subject in cached[1]:
            return True
        if cached is not None and now - cached[0] < SUBJECTS_RECHECK_S:
            return False
        versions = await self._blocking(self._registry.subject_versions_of, schema_id, fresh=True)
        found = frozenset(v.subject for v in versions)
        self._subjects[schema_id] = (now, found)
        return subject in found


def _prefixed_rows(column: pa.ChunkedArray) -> list[tuple[int, bytes]]:
    """(index, payload) of the payloads that start with the wire format's zero byte and have
    room for an id: found by Arrow, so only they become Python objects (random binary values
    start with a zero byte once in 256, and a batch of 8 000 of them was converted whole)."""
    prefixed = pc.and_(
        pc.equal(pc.binary_slice(column, 0, 1), b"\x00"),
        pc.greater_equal(pc.binary_length(column), wire.PREFIX_BYTES),
    )
    indexes = pc.indices_nonzero(prefixed)
    if not len(indexes):
        return []
    return list(zip(indexes.to_pylist(), column.take(indexes).to_pylist(), strict=True))


def _typed_columns(is_key: bool, ids: list[int | None], fields: pa.Array) -> dict:
    names = (KEY_SCHEMA_ID, KEY_FIELDS) if is_key else (VALUE_SCHEMA_ID, VALUE_FIELDS)
    return {names[0]: pa.array(ids, SCHEMA_ID_TYPE), names[1]: fields}


def _payload_refusal(found: _Schema, codec: TypedCodec | None, data: bytes) -> str | None:
    if codec is None:
        return "its message indexes name no message of the schema"
    problems = codec.problems(data)
    if problems:
        return f"it does not decode with schema {found.stored.id}: {'; '.join(problems)}"
    return None


def _may_name_schemas(records: Records, config: TopicConfig) -> bool:
    """Whether any record may name a schema (or the topic validates): checked before
    building columns of record objects, or looking at decoded columns."""
    if config.validates_schema(is_key=True) or config.validates_schema(is_key=False):
        return True
    if isinstance(records, RecordColumns):
        return records.may_name_schemas
    for record in records:
        for data in (record.key, record.value):
            if data is not None and len(data) >= 5 and data[0] == 0:
                return True
        if any(name in (wire.KEY_HEADER, wire.VALUE_HEADER) for name, _ in record.headers):
            return True
    return False


def _refs(column: pa.ChunkedArray, headers: pa.ChunkedArray, is_key: bool):
    """Each record's schema reference (None: none), or None when no record has one; cheap
    when none does (one vectorized look at the first bytes and the header names)."""
    prefixed = pc.any(pc.equal(pc.binary_slice(column, 0, 1), b"\x00")).as_py()
    name = wire.header_name(is_key=is_key)
    in_headers = headers.null_count < len(headers) and _has_header(headers, name)
    if not prefixed and not in_headers:
        return None
    payloads = column.to_pylist()
    header_lists = headers.to_pylist() if in_headers else [None] * len(payloads)
    refs = []
    for payload, record_headers in zip(payloads, header_lists, strict=True):
        refs.append(_LazyRef.of(payload, record_headers, name))
    return refs


def _has_header(headers: pa.ChunkedArray, name: str) -> bool:
    if headers.null_count == len(headers):
        return False
    keys = pc.struct_field(pc.list_flatten(headers), "key")
    return bool(pc.any(pc.equal(keys, name)).as_py())


class _LazyRef:
    """A schema reference whose Protobuf message indexes are read once the schema's type is
    known (they are there only for Protobuf)."""

    __slots__ = ("schema_id", "guid", "_data", "_from_header", "_at")

    @classmethod
    def of(cls, payload: bytes | None, record_headers: list | None, name: str) -> _LazyRef | None:
        header = next((h["value"] for h in record_headers or () if h["key"] == name), None)
        if header is not None and len(header) >= (17 if header[:1] == b"\x01" else 5):
            if header[0] in (wire.MAGIC_ID, wire.MAGIC_GUID):
                return cls(header, from_header=True)
        if payload is not None and len(payload) >= 5 and payload[0] == 0:
            return cls(payload, from_header=False)
        return None

    def __init__(self, data: bytes, *, from_header: bool) -> None:
        self._data, self._from_header = data, from_header
        if data[0] == 1:
            self.schema_id, self.guid, self._at = None, str(uuid.UUID(bytes=bytes(data[1:17]))), 17
        else:
            self.schema_id, self.guid, self._at = int.from_bytes(data[1:5], "big"), None, 5

    def resolved(self, schema_type: str) -> wire.SchemaRef:
        indexes: tuple[int, ...] = ()
        at = self._at
        if schema_type == PROTOBUF:
            indexes, at = wire.read_indexes(self._data, at)
        return wire.SchemaRef(self.schema_id, self.guid, indexes, 0 if self._from_header else at)


def _subject(topic: str, config: TopicConfig, found: _Schema, is_key: bool) -> str | None:
    strategy = config.subject_strategy(is_key=is_key)
    if strategy == subjects.TOPIC_NAME:
        return subjects.topic_subject(topic, is_key=is_key)
    name = found.record_name
    if isinstance(found.parsed, ProtobufSchema):
        name = name or (found.parsed.messages() or [None])[0]
    if name is None:
        return None
    return name if strategy == subjects.RECORD_NAME else f"{topic}-{name}"


def _to_arrow(values: list, kind: pa.DataType, ids: list, indexes: list[int]) -> pa.Array:
    try:
        return pa.array(values, type=kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        pass
    converted = []
    for value, index in zip(values, indexes, strict=True):
        try:
            converted.append(pa.array([value], type=kind))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            metrics.TYPED_DECODE_FAILURES.inc()
            ids[index] = None
            converted.append(pa.nulls(1, kind))
    return pa.concat_arrays(converted)
