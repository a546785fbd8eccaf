"""Confluent's wire format: how a key or value names its schema. Either a prefix (magic byte
0, the schema id as 4 bytes big-endian, for Protobuf the message indexes, then the payload),
or a record header `__key_schema_id` / `__value_schema_id` (magic byte 1 and the schema's
16-byte GUID, or magic 0 and the id; for Protobuf then the message indexes) with the payload
alone in the key or value."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

MAGIC_ID, MAGIC_GUID = 0, 1
KEY_HEADER, VALUE_HEADER = "__key_schema_id", "__value_schema_id"
INDEXES_MAX = 100_000
PREFIX_BYTES = 5  # the magic byte and the id
# A registry gives ids from 1 (ids are int32): a prefix naming another can name no schema.
SCHEMA_ID_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class SchemaRef:
    """Which schema a key or value names, and where its payload starts."""

    schema_id: int | None
    guid: str | None
    message_indexes: tuple[int, ...]
    payload_at: int  # the payload's offset in the key or value


def may_be_schema_id(schema_id: int) -> bool:
    return 0 < schema_id <= SCHEMA_ID_MAX


def header_name(*, is_key: bool) -> str:
    return KEY_HEADER if is_key else VALUE_HEADER


def from_prefix(data: bytes, *, protobuf: bool) -> SchemaRef | None:
    """The schema a prefixed key or value names, or None when it has no prefix."""
    if len(data) < PREFIX_BYTES or data[0] != MAGIC_ID:
        return None
    schema_id = int.from_bytes(data[1:PREFIX_BYTES], "big")
    indexes, at = ((), PREFIX_BYTES) if not protobuf else read_indexes(data, PREFIX_BYTES)
    return SchemaRef(schema_id, None, indexes, at)


def from_header(header: bytes, *, protobuf: bool) -> SchemaRef | None:
    """The schema a `__key_schema_id`/`__value_schema_id` header names (the payload is the
    whole key or value), or None when the header is malformed."""
    if len(header) >= 17 and header[0] == MAGIC_GUID:
        guid, at = str(uuid.UUID(bytes=bytes(header[1:17]))), 17
        schema_id = None
    elif len(header) >= 5 and header[0] == MAGIC_ID:
        guid, schema_id, at = None, int.from_bytes(header[1:5], "big"), 5
    else:
        return None
    indexes = read_indexes(header, at)[0] if protobuf else ()
    return SchemaRef(schema_id, guid, indexes, 0)


def read_indexes(data: bytes, at: int) -> tuple[tuple[int, ...], int]:
    """Protobuf's message indexes (zigzag varints: a count, then the path; a count of 0 means
    [0], the first message) and the offset after them.

    Raises:
        ValueError: the indexes are truncated or absurd.
    """
    count, at = _zigzag(data, at)
    if count < 0 or count > INDEXES_MAX:
        raise ValueError(f"invalid message index count {count}")
    if count == 0:
        return (0,), at
    indexes = []
    for _ in range(count):
        index, at = _zigzag(data, at)
        indexes.append(index)
    return tuple(indexes), at


def prefix(schema_id: int, message_indexes: tuple[int, ...] | None = None) -> bytes:
    """The prefix of a key or value written with `schema_id` (Protobuf: with its message
    indexes; [0] is written as a count of 0, as Confluent's serializers do)."""
    head = bytes([MAGIC_ID]) + schema_id.to_bytes(4, "big")
    if message_indexes is None:
        return head
    if tuple(message_indexes) == (0,):
        return head + b"\x00"
    body = _varint_zigzag(len(message_indexes))
    for index in message_indexes:
        body += _varint_zigzag(index)
    return head + body


def _zigzag(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(data):
            raise ValueError("truncated message indexes")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), at
        if shift > 63:
            raise ValueError("message index varint too long")


def _varint_zigzag(value: int) -> bytes:
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = encoded & 0x7F
        encoded >>= 7
        if encoded:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
