"""The REST Proxy's schema formats: v2 produce bodies with `application/vnd.kafka.avro.v2+json`,
`jsonschema.v2+json` or `protobuf.v2+json` (`key_schema`/`value_schema` or their `_id`s),
v3 records typed `AVRO`, `JSONSCHEMA` or `PROTOBUF` (`schema_id`, or `subject` and
`schema_version`, or `raw_schema`), and v2 consumer instances of those formats.

A produce's JSON values are serialized here into Confluent's wire format (so Kafka consumers
with Confluent's deserializers read them, and the leader stores them typed: FORMAT.md §17), and
handed on as binary records. A schema given as text is registered under the topic's subject
(TopicNameStrategy: `<topic>-key`, `<topic>-value`) first, as Confluent's REST Proxy does.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from api.core.schemas.errors import RegistryError
from api.core.schemas.registry import SchemaRegistry, SchemaRequest
from api.http.errors import ApiError
from storage_layout.errors import InvalidSchema
from storage_layout.meta.schemas import StoredSchema
from storage_layout.schemas import wire
from storage_layout.schemas.json_values import deserialize, serialize
from storage_layout.schemas.model import AVRO, JSON, PROTOBUF, ParsedSchema
from storage_layout.schemas.subjects import topic_subject

V2_FORMATS = {"avro": AVRO, "jsonschema": JSON, "protobuf": PROTOBUF}
V3_TYPES = {"AVRO": AVRO, "JSONSCHEMA": JSON, "PROTOBUF": PROTOBUF}
SCHEMA_CODE = 42205  # the REST Proxy's "schema" error: unknown, invalid, or the data misfits


@dataclass(frozen=True, slots=True)
class SideSchema:
    """The schema a produce's keys or values are written with."""

    schema_id: int
    parsed: ParsedSchema
    subject: str | None = None
    version: int | None = None

    def encode(self, value: Any, where: str) -> bytes:
        try:
            return serialize(self.parsed, self.schema_id, value)
        except ValueError as error:
            raise ApiError(
                422, SCHEMA_CODE, f"{where} does not fit schema {self.schema_id}: {error}"
            ) from error


class SchemaFormats:
    def __init__(self, registry: SchemaRegistry) -> None:
        self._registry = registry

    # ---- v2 produce --------------------------------------------------------------------------

    async def v2_records(
        self, topic: str, embedded: str, document: dict
    ) -> tuple[int | None, int | None]:
        """Serialize the records of a v2 body of a schema format in place (their keys and
        values become base64 binary); the key and value schema ids.

        Raises:
            ApiError: 42201/42202 a key/value without a schema, 42205 a schema that is
                unknown or invalid, or a value that does not fit it.
        """
        schema_type = V2_FORMATS[embedded]
        records = document.get("records")
        if not isinstance(records, list):
            return None, None  # the binary parser says what is wrong with it
        ids = []
        for field, code in (("key", 42201), ("value", 42202)):
            needed = any(isinstance(r, dict) and r.get(field) is not None for r in records)
            side = await self._v2_side(topic, document, field, schema_type, code, needed)
            ids.append(None if side is None else side.schema_id)
            for index, record in enumerate(records):
                if side is not None and isinstance(record, dict) and record.get(field) is not None:
                    data = side.encode(record[field], f"Record {index}'s {field}")
                    record[field] = base64.b64encode(data).decode()
        return ids[0], ids[1]

    async def _v2_side(self, topic, document, field, schema_type, code, needed):
        schema_id, text = document.get(f"{field}_schema_id"), document.get(f"{field}_schema")
        if schema_id is None and text is None:
            if needed:
                raise ApiError(
                    422,
                    code,
                    f"Records with a {field} need `{field}_schema` or `{field}_schema_id` in "
                    "this format.",
                )
            return None
        subject = topic_subject(topic, is_key=field == "key")
        if schema_id is not None:
            return await self._by_id(schema_id, f"{field}_schema_id")
        return await self._registered(subject, schema_type, text, f"{field}_schema")

    # ---- v3 produce --------------------------------------------------------------------------

    async def v3_section(
        self, topic: str, section: object, field: str, authorize: Callable[[str], None]
    ) -> tuple[object, dict]:
        """A v3 record's `key` or `value` of a schema type, serialized: the section as BINARY
        and what its delivery report says about it (type, schema id and version). A
        `raw_schema` registers under a subject `authorize` allows (WRITE on it)."""
        if not isinstance(section, dict):
            return section, {}
        kind = str(section.get("type", "")).upper()
        if kind not in V3_TYPES:
            return section, {}
        side = await self._v3_side(topic, section, field, V3_TYPES[kind], authorize)
        data = section.get("data")
        encoded = None if data is None else side.encode(data, f"'{field}.data'")
        binary = {"type": "BINARY", "data": None}
        if encoded is not None:
            binary["data"] = base64.b64encode(encoded).decode()
        report = {"type": kind, "schema_id": side.schema_id}
        if side.subject is not None:
            report.update(subject=side.subject, schema_version=side.version)
        return binary, report

    async def _v3_side(
        self, topic, section: dict, field: str, schema_type: str, authorize
    ) -> SideSchema:
        subject = section.get("subject") or topic_subject(topic, is_key=field == "key")
        if not isinstance(subject, str):
            raise ApiError(422, SCHEMA_CODE, f"'{field}.subject' must be a string.")
        if section.get("schema_id") is not None:
            return await self._by_id(section["schema_id"], f"'{field}.schema_id'")
        if section.get("raw_schema") is not None:
            authorize(subject)
            return await self._registered(subject, schema_type, section["raw_schema"], field)
        version = section.get("schema_version", "latest")
        try:
            registered = await asyncio.to_thread(self._registry.version, subject, str(version))
        except RegistryError as error:
            raise ApiError(422, SCHEMA_CODE, f"'{field}': {error}") from error
        parsed = await asyncio.to_thread(self._registry.parsed, registered.schema)
        return SideSchema(registered.schema.id, parsed, subject, registered.version.version)

    # ---- consumers ---------------------------------------------------------------------------

    async def decode_items(self, items: list[dict], embedded: str) -> list[dict]:
        """v2 consumer items fetched as binary, with keys and values decoded as JSON with the
        schemas they name (a schema-format consumer instance)."""
        for item in items:
            for field in ("key", "value"):
                if item.get(field) is not None:
                    item[field] = await self._decoded(base64.b64decode(item[field]), embedded)
        return items

    async def _decoded(self, data: bytes, embedded: str) -> Any:
        is_protobuf = V2_FORMATS[embedded] == PROTOBUF
        try:
            ref = wire.from_prefix(data, protobuf=is_protobuf)
        except ValueError:
            ref = None
        if ref is None:
            raise ApiError(
                422,
                42207,
                f"A record is not in Confluent's wire format and cannot be returned as "
                f"{embedded}: use a binary consumer for it.",
            )
        side = await self._by_id(ref.schema_id, "the record's schema id")
        try:
            return deserialize(side.parsed, data[ref.payload_at :], ref.message_indexes)
        except ValueError as error:
            message = f"A record does not decode with its schema: {error}"
            raise ApiError(422, 42207, message) from error

    async def annotate(self, items: list[dict]) -> list[dict]:
        """Binary items with, beside each key and value that names a schema of the registry
        (Confluent's prefix), `<field>_schema_id` and `<field>_decoded` (its JSON): the
        console's view of a topic, where not every record need have a schema."""
        for item in items:
            for field in ("key", "value"):
                if item.get(field) is None:
                    continue
                decoded = await self._decoded_if_named(base64.b64decode(item[field]))
                if decoded is not None:
                    item[f"{field}_schema_id"], item[f"{field}_decoded"] = decoded
        return items

    async def _decoded_if_named(self, data: bytes) -> tuple[int, Any] | None:
        if len(data) < 5 or data[0] != wire.MAGIC_ID:
            return None
        try:
            side = await self._by_id(int.from_bytes(data[1:5], "big"), "id")
            ref = wire.from_prefix(data, protobuf=side.parsed.schema_type == PROTOBUF)
            return side.schema_id, deserialize(
                side.parsed, data[ref.payload_at :], ref.message_indexes
            )
        except (ApiError, ValueError):
            return None

    # ---- lookups -----------------------------------------------------------------------------

    async def _by_id(self, schema_id: object, where: str) -> SideSchema:
        if not isinstance(schema_id, int) or isinstance(schema_id, bool):
            raise ApiError(422, SCHEMA_CODE, f"{where} must be an integer schema id.")
        try:
            stored = await asyncio.to_thread(self._registry.schema_by_id, schema_id)
            parsed = await asyncio.to_thread(self._registry.parsed, stored)
        except (RegistryError, InvalidSchema) as error:
            raise ApiError(422, SCHEMA_CODE, f"{where}: {error}") from error
        return SideSchema(stored.id, parsed)

    async def _registered(self, subject: str, schema_type: str, text: object, where: str):
        if not isinstance(text, str):
            raise ApiError(422, SCHEMA_CODE, f"`{where}` must be the schema as a string.")
        request = SchemaRequest(text, schema_type)
        try:
            registered = await asyncio.to_thread(
                self._registry.register, subject, request, normalize=False
            )
            parsed = await asyncio.to_thread(self._registry.parsed, registered.schema)
        except (RegistryError, InvalidSchema) as error:
            raise ApiError(422, SCHEMA_CODE, f"`{where}`: {error}") from error
        return _side_of(registered.schema, parsed, subject, registered.version.version)


def _side_of(stored: StoredSchema, parsed: ParsedSchema, subject: str, version: int):
    return SideSchema(stored.id, parsed, subject, version)
