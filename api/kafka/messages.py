"""Kafka's message types, from kio (generated from Kafka's own JSON message schemas): reading a
request frame, and building and writing a response of the request's version.

Handlers answer with plain nested mappings; `build` turns one into the kio dataclass of the
response's version, keeping the fields that version has and leaving the others at their
defaults. So one handler serves every version it is registered for, as Kafka's own handlers do
with the generated `*Data` classes.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from kio import index
from kio.serial import entity_reader, entity_writer

_HEADER_START = struct.Struct(">hhi")  # api key, api version, correlation id
_TIMEDELTA_TYPES = {"timedelta_i32", "timedelta_i64"}

# kio resolves a message class by its import path on every call (pkgutil.resolve_name, two a
# request); the classes never change.
load_request_schema = cache(index.load_request_schema)
load_response_schema = cache(index.load_response_schema)


class MalformedRequest(ValueError):
    """The frame is not a request of the version its header names."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id): the first 8 bytes of every request header."""
    if len(frame) < _HEADER_START.size:
        raise MalformedRequest(f"a {len(frame)}-byte frame has no request header")
    return _HEADER_START.unpack_from(frame)


def read_request(frame: bytes, api_key: int, version: int) -> tuple[RequestHeader, object]:
    """The header and the body of a request whose key and version are supported.

    Raises:
        MalformedRequest: the bytes do not parse as that request.
    """
    schema = load_request_schema(api_key, version)
    try:
        header, size = _reader(schema.__header_schema__)(frame, 0)
        body, body_size = _reader(schema)(frame, size)
    except Exception as error:  # kio raises several kinds on truncated or bad bytes
        raise MalformedRequest(
            f"{schema.__name__} v{version} does not parse: {type(error).__name__}: {error}"
        ) from None
    # Trailing bytes are ignored, as Kafka's parser does (librdkafka sends some after a
    # MetadataRequest v12).
    client_id = getattr(header, "client_id", None)
    return RequestHeader(api_key, version, header.correlation_id, client_id), body


def response_frame(api_key: int, version: int, correlation_id: int, body: Mapping) -> bytes:
    """The whole response frame (size, header, body) for `body` built as the response of
    `api_key` at `version`."""
    schema = load_response_schema(api_key, version)
    buffer = io.BytesIO()
    buffer.write(b"\x00\x00\x00\x00")  # the size, filled in below
    buffer.write(struct.pack(">i", correlation_id))
    if schema.__header_schema__.__flexible__:
        buffer.write(b"\x00")  # no tagged fields in the response header
    _writer(schema)(buffer, build(schema, body))
    frame = buffer.getbuffer()
    struct.pack_into(">i", frame, 0, len(frame) - 4)
    return bytes(frame)


def response_class(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


def build(schema: type, data: Mapping) -> object:
    """The kio dataclass `schema` from a mapping: nested mappings become nested entities,
    integers become timedeltas where the schema wants milliseconds, and fields the mapping
    does not name take their defaults: the schema's, else an empty array or null (another
    required field missing is a programming error)."""
    kwargs = {}
    for name, converter, empty in _plan(schema):
        if name in data:
            kwargs[name] = converter(data[name])
        elif empty is not _HAS_DEFAULT:
            if empty is _REQUIRED:
                raise TypeError(f"{schema.__name__}.{name} is required")
            kwargs[name] = empty
    return schema(**kwargs)


_HAS_DEFAULT = object()
_REQUIRED = object()


@cache
def _plan(schema: type) -> tuple[tuple[str, object, object], ...]:
    return tuple(
        (field.name, _converter(field), _empty(field)) for field in dataclasses.fields(schema)
    )


def _empty(field: dataclasses.Field) -> object:
    """What an unnamed field gets: _HAS_DEFAULT (the schema's default), (), None or _REQUIRED."""
    if field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING:
        return _HAS_DEFAULT
    origin = typing.get_origin(field.type)
    if origin is tuple:
        return ()
    if origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(field.type):
        return None
    return _REQUIRED


def _converter(field: dataclasses.Field):
    if field.metadata.get("kafka_type") in _TIMEDELTA_TYPES:
        return _milliseconds
    field_type = _without_none(field.type)
    is_array = typing.get_origin(field_type) is tuple
    entity = typing.get_args(field_type)[0] if is_array else field_type
    if not dataclasses.is_dataclass(entity):
        return _same
    if is_array:
        return lambda items: None if items is None else tuple(_entity(entity, i) for i in items)
    return lambda item: _entity(entity, item)


def _without_none(field_type):
    """`X` of `X | None`; any other type unchanged."""
    if typing.get_origin(field_type) in (typing.Union, types.UnionType):
        candidates = [t for t in typing.get_args(field_type) if t is not type(None)]
        if len(candidates) == 1:
            return candidates[0]
    return field_type


def _entity(schema: type, item):
    if item is None or not isinstance(item, Mapping):
        return item
    return build(schema, item)


def _milliseconds(value):
    if isinstance(value, datetime.timedelta):
        return value
    return datetime.timedelta(milliseconds=value)


def _same(value):
    return value


@cache
def _reader(schema: type):
    return entity_reader(schema)


@cache
def _writer(schema: type):
    return entity_writer(schema)


def milliseconds(value) -> int:
    """A kio duration field (a timedelta, or an int on some versions) in milliseconds."""
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)
