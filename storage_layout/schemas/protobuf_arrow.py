"""Protobuf to typed columns (FORMAT.md §17): message → struct (oneof members and fields
with presence null when unset, proto3 scalars their value), enum → string (its name),
repeated → list, map → map; int32/int64/sint*/sfixed*/uint32 → long, uint64/fixed64 →
decimal(20,0), float/double → double; google.protobuf.Timestamp → timestamp, the wrapper
types → their value; Struct, Value, ListValue, Any and recursive messages → JSON text."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import FieldDescriptor

from storage_layout.schemas.forms import NESTING_MAX, Form, as_json_text, list_form, map_form

_FD = FieldDescriptor
_LONG = (
    _FD.TYPE_INT32,
    _FD.TYPE_INT64,
    _FD.TYPE_SINT32,
    _FD.TYPE_SINT64,
    _FD.TYPE_SFIXED32,
    _FD.TYPE_SFIXED64,
    _FD.TYPE_UINT32,
    _FD.TYPE_FIXED32,
)
_SCALARS = {
    **dict.fromkeys(_LONG, pa.int64()),
    _FD.TYPE_UINT64: pa.decimal128(20, 0),
    _FD.TYPE_FIXED64: pa.decimal128(20, 0),
    _FD.TYPE_FLOAT: pa.float64(),
    _FD.TYPE_DOUBLE: pa.float64(),
    _FD.TYPE_BOOL: pa.bool_(),
    _FD.TYPE_STRING: pa.string(),
    _FD.TYPE_BYTES: pa.binary(),
}
_WRAPPERS = {
    f"google.protobuf.{name}Value"
    for name in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
}
_AS_JSON = {
    "google.protobuf.Struct",
    "google.protobuf.Value",
    "google.protobuf.ListValue",
    "google.protobuf.Any",
}
_TIMESTAMP = "google.protobuf.Timestamp"


def protobuf_form(descriptor: Any) -> Form:
    """The typed-column form of a message descriptor; its adapter takes a message."""
    return _message_form(descriptor, ())


def protobuf_decoder(descriptor: Any):
    cls = message_factory.GetMessageClass(descriptor)

    def decode(payload: bytes) -> Any:
        try:
            return cls.FromString(payload)
        except Exception as error:  # DecodeError, and RuntimeWarning-free others
            raise ValueError(f"not Protobuf of this message ({error})") from error

    return decode


def _message_form(descriptor: Any, stack: tuple[str, ...]) -> Form:
    fields = []
    for field in descriptor.fields:
        form = _field_form(field, (*stack, descriptor.full_name))
        fields.append((field, form))
    struct = pa.struct([pa.field(f.name, form.type) for f, form in fields])
    readers = [(f.name, _reader(f, form)) for f, form in fields]

    def adapt(message: Any) -> Any:
        return {name: read(message) for name, read in readers}

    return Form(struct, adapt)


def _field_form(field: Any, stack: tuple[str, ...]) -> Form:
    if _is_map(field):
        key, value = (
            field.message_type.fields_by_name["key"],
            field.message_type.fields_by_name["value"],
        )
        return map_form(_single_form(value, stack), _single_form(key, stack).type)
    single = _single_form(field, stack)
    if field.is_repeated:
        return list_form(single)
    return single


def _single_form(field: Any, stack: tuple[str, ...]) -> Form:
    if field.type == _FD.TYPE_ENUM:
        enum = field.enum_type
        return Form(pa.string(), lambda number: _enum_name(enum, number))
    if field.type in (_FD.TYPE_UINT64, _FD.TYPE_FIXED64):
        return Form(pa.decimal128(20, 0), Decimal)
    if field.type in _SCALARS:
        return Form(_SCALARS[field.type])
    name = field.message_type.full_name
    if name == _TIMESTAMP:
        return Form(pa.timestamp("us", tz="UTC"), _timestamp)
    if name in _WRAPPERS:
        return _single_form(field.message_type.fields_by_name["value"], stack)
    if name in _AS_JSON or name in stack or len(stack) > NESTING_MAX:
        return Form(pa.string(), lambda m: as_json_text(json_format.MessageToDict(m)))
    return _message_form(field.message_type, stack)


def _reader(field: Any, form: Form):
    """message → the field's Arrow-ready value."""
    name = field.name
    has_presence = field.has_presence and not field.is_repeated
    if _is_map(field):
        return lambda message: form.adapt(dict(getattr(message, name)))
    if field.is_repeated:
        return lambda message: (
            form.adapt(list(getattr(message, name))) if form.adapt else list(getattr(message, name))
        )
    wrapper = field.type == _FD.TYPE_MESSAGE and field.message_type.full_name in _WRAPPERS
    adapt = form.adapt

    def read(message: Any) -> Any:
        if has_presence and not message.HasField(name):
            return None
        value = getattr(message, name)
        if wrapper:
            value = value.value
        return value if adapt is None else adapt(value)

    return read


def _is_map(field: Any) -> bool:
    return (
        field.type == _FD.TYPE_MESSAGE
        and field.is_repeated
        and field.message_type.GetOptions().map_entry
    )


def _enum_name(enum: Any, number: int) -> str:
    value = enum.values_by_number.get(number)
    return value.name if value is not None else str(number)


def _timestamp(message: Any) -> datetime.datetime:
    micros = message.seconds * 1_000_000 + message.nanos // 1000
    return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(
        microseconds=micros
    )
