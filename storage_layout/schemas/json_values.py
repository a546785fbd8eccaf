"""Values as JSON, written and read with a registered schema: what the REST Proxy's `avro`,
`jsonschema` and `protobuf` formats send and receive, and what the console shows.

Avro values use Avro's JSON encoding (a union's value tagged with its branch,
`{"string": "x"}`, as Confluent's REST Proxy reads and writes them); an untagged value is
accepted too when it is unambiguous. JSON Schema values are validated against the schema.
Protobuf values use Protobuf's JSON mapping, with the schema's first message unless message
indexes say otherwise.
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import orjson
from google.protobuf import json_format, message_factory

from storage_layout.schemas.avro_arrow import RECURSIVE_BYTES_MAX
from storage_layout.schemas.avro_format import AvroSchema
from storage_layout.schemas.json_format import JsonSchema
from storage_layout.schemas.model import ParsedSchema
from storage_layout.schemas.protobuf_format import ProtobufSchema
from storage_layout.schemas.wire import prefix


def serialize(parsed: ParsedSchema, schema_id: int, value: Any) -> bytes:
    """`value` (JSON) in Confluent's wire format for schema `schema_id`.

    Raises:
        ValueError: the value does not fit the schema, with why.
    """
    try:
        return _serialized(parsed, schema_id, value)
    except RecursionError as error:
        raise ValueError("the value nests too deep") from error


def _serialized(parsed: ParsedSchema, schema_id: int, value: Any) -> bytes:
    if isinstance(parsed, AvroSchema):
        return prefix(schema_id) + _avro_bytes(parsed, value)
    if isinstance(parsed, JsonSchema):
        problems = parsed.validation_errors(value)
        if problems:
            raise ValueError("; ".join(problems))
        return prefix(schema_id) + orjson.dumps(value)
    if isinstance(parsed, ProtobufSchema):
        message = message_factory.GetMessageClass(parsed.message_at([0]))()
        try:
            json_format.ParseDict(value, message)
        except (json_format.ParseError, TypeError, AttributeError) as error:
            raise ValueError(str(error)) from error
        return prefix(schema_id, (0,)) + message.SerializeToString()
    raise ValueError(f"no JSON values for {parsed.schema_type} schemas")


def deserialize(parsed: ParsedSchema, payload: bytes, message_indexes=(0,)) -> Any:
    """A payload (after the wire format's prefix) as JSON.

    Raises:
        ValueError: the payload is not a value of the schema (or not one decoded safely).
    """
    try:
        return _deserialized(parsed, payload, message_indexes)
    except RecursionError as error:
        raise ValueError("the value nests too deep to decode") from error


def _deserialized(parsed: ParsedSchema, payload: bytes, message_indexes) -> Any:
    if isinstance(parsed, AvroSchema):
        if parsed.unbounded:
            raise ValueError("arrays or maps of zero-width items are not decoded")
        if parsed.recursive and len(payload) > RECURSIVE_BYTES_MAX:
            raise ValueError(f"a value of a recursive schema over {RECURSIVE_BYTES_MAX} bytes")
        try:
            record = fastavro.schemaless_reader(io.BytesIO(payload), parsed.parsed, None)
            out = io.StringIO()
            fastavro.json_writer(out, parsed.parsed, [record])
        except Exception as error:  # fastavro raises many kinds on malformed bytes
            raise ValueError(f"not Avro of schema ({error!r})") from error
        return json.loads(out.getvalue())
    if isinstance(parsed, JsonSchema):
        try:
            return orjson.loads(payload)
        except orjson.JSONDecodeError as error:
            raise ValueError(f"not JSON ({error})") from error
    if isinstance(parsed, ProtobufSchema):
        cls = message_factory.GetMessageClass(parsed.message_at(message_indexes))
        try:
            message = cls.FromString(payload)
        except Exception as error:
            raise ValueError(f"not Protobuf of the message ({error})") from error
        return json_format.MessageToDict(message, preserving_proto_field_name=True)
    raise ValueError(f"no JSON values for {parsed.schema_type} schemas")


def _avro_bytes(parsed: AvroSchema, value: Any) -> bytes:
    out = io.BytesIO()
    try:
        (record,) = fastavro.json_reader(io.StringIO(json.dumps(value)), parsed.parsed)
    except Exception:  # not Avro's JSON encoding: try the value as it is (untagged unions)
        record = value
    try:
        fastavro.schemaless_writer(out, parsed.parsed, record, strict=True)
    except Exception as error:
        raise ValueError(f"the value does not fit the Avro schema ({error})") from error
    return out.getvalue()
