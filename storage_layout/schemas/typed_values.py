"""One schema's typed values: a key or value payload decoded and shaped as its typed column
(FORMAT.md §17), and checked the way produce-time validation checks it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from storage_layout.schemas.avro_arrow import avro_decoder, avro_form
from storage_layout.schemas.avro_format import AvroSchema
from storage_layout.schemas.avro_native import avro_plan, decode_batch
from storage_layout.schemas.forms import Form
from storage_layout.schemas.json_arrow import json_decode, json_form
from storage_layout.schemas.json_format import JsonSchema
from storage_layout.schemas.model import ParsedSchema
from storage_layout.schemas.protobuf_arrow import protobuf_decoder, protobuf_form
from storage_layout.schemas.protobuf_format import ProtobufSchema
from storage_layout.schemas.typed_columns import (
    KEY_FIELDS,
    KEY_SCHEMA_ID,
    SCHEMA_ID_TYPE,
    VALUE_FIELDS,
    VALUE_SCHEMA_ID,
)
from storage_layout.schemas.wire import from_prefix


@dataclass(frozen=True, slots=True)
class TypedCodec:
    """Decodes payloads of one schema (a Protobuf schema: of one of its messages)."""

    form: Form
    decode: Callable[[bytes], Any]
    check: Callable[[Any], list[str]] | None = None  # more than decoding (JSON Schema)
    protobuf: bool = False  # its wire format carries message indexes
    # payloads -> (the typed column, which decoded): many at once, in Rust (Avro)
    batch: Callable[[list[bytes]], tuple[pa.Array, list[bool]]] | None = None

    def value(self, payload: bytes) -> Any:
        """The payload's value for the typed column.

        Raises:
            ValueError: the payload is not a value of this schema.
        """
        try:
            decoded = self.decode(payload)
            return decoded if self.form.adapt is None else self.form.adapt(decoded)
        except ValueError:
            raise
        except Exception as error:  # RecursionError and whatever else hostile data causes
            raise ValueError(f"not decodable ({error!r})") from error

    def problems(self, payload: bytes) -> list[str]:
        """Why the payload is not a valid value of this schema (empty: it is)."""
        try:
            decoded = self.decode(payload)
            return [] if self.check is None else self.check(decoded)
        except Exception as error:  # RecursionError included: hostile data, not our fault
            return [str(error) if isinstance(error, ValueError) else f"not decodable ({error!r})"]


def typed_codec(parsed: ParsedSchema, message_indexes: tuple[int, ...] = ()) -> TypedCodec:
    """The codec of `parsed` (for Protobuf, of the message at `message_indexes`).

    Raises:
        ValueError: the message indexes name no message of the schema.
    """
    if isinstance(parsed, AvroSchema):
        if parsed.unbounded:
            raise ValueError("arrays or maps of zero-width items are not decoded")
        form = avro_form(parsed.parsed)
        plan = avro_plan(parsed.parsed)
        batch = None
        if plan is not None:

            def batch(payloads: list[bytes]) -> tuple[pa.Array, list[bool]]:
                return decode_batch(plan, form.type, payloads, 0)

        decoder = avro_decoder(parsed.parsed, recursive=parsed.recursive)
        return TypedCodec(form, decoder, batch=batch)
    if isinstance(parsed, JsonSchema):
        return TypedCodec(
            json_form(parsed.document, parsed.resolve), json_decode, parsed.validation_errors
        )
    if isinstance(parsed, ProtobufSchema):
        try:
            message = parsed.message_at(message_indexes)
        except Exception as error:
            raise ValueError(str(error)) from error
        return TypedCodec(protobuf_form(message), protobuf_decoder(message), protobuf=True)
    raise ValueError(f"no typed columns for {parsed.schema_type} schemas")


def typed_columns(
    payloads: list[bytes | None], schema_id: int, codec: TypedCodec, *, is_key: bool
) -> dict[str, pa.Array]:
    """The typed columns (FORMAT.md §17) of keys or values all written with `schema_id` in
    Confluent's wire format (a writer that serialized them itself knows it): a payload that
    does not decode is null, as at the leader."""
    if codec.batch is not None and all(p is None or p[:1] == b"\x00" for p in payloads):
        present = [i for i, p in enumerate(payloads) if p is not None and len(p) >= 5]
        if len(present) == len(payloads):
            fields, ok = codec.batch([p[5:] for p in payloads])
            ids = [schema_id if good else None for good in ok]
            id_name, fields_name = (
                (KEY_SCHEMA_ID, KEY_FIELDS) if is_key else (VALUE_SCHEMA_ID, VALUE_FIELDS)
            )
            return {id_name: pa.array(ids, SCHEMA_ID_TYPE), fields_name: fields}
    ids, values = [], []
    for payload in payloads:
        value = None
        if payload is not None:
            try:
                ref = from_prefix(payload, protobuf=codec.protobuf)
                value = None if ref is None else codec.value(payload[ref.payload_at :])
            except (ValueError, TypeError, KeyError, AttributeError):
                value = None
        ids.append(None if value is None else schema_id)
        values.append(value)
    id_name, fields_name = (
        (KEY_SCHEMA_ID, KEY_FIELDS) if is_key else (VALUE_SCHEMA_ID, VALUE_FIELDS)
    )
    return {
        id_name: pa.array(ids, SCHEMA_ID_TYPE),
        fields_name: pa.array(values, codec.form.type),
    }
