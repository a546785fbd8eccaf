"""Avro to typed columns (FORMAT.md §17): record → struct, enum → string, array → list,
map → map<string, _>, a union with null → its other type (nullable), unions of several types
and recursive types → JSON text; int and long → long, float and double → double (so Avro's
promotions widen nothing); logical types: decimal → decimal (precision ≤ 38, else text),
date → date, timestamp-*/local-timestamp-* → timestamp (UTC), time-* → long (ms or µs since
midnight), uuid → string."""

from __future__ import annotations

import datetime
import io
from typing import Any

import fastavro
import pyarrow as pa

from storage_layout.schemas.forms import (
    NESTING_MAX,
    Form,
    json_text_form,
    list_form,
    map_form,
    struct_form,
    top_level,
)

_PRIMITIVES = {
    "boolean": pa.bool_(),
    "int": pa.int64(),
    "long": pa.int64(),
    "float": pa.float64(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
_TIMESTAMPS = {"timestamp-millis", "timestamp-micros"}  # fastavro: aware datetimes, UTC
_LOCAL_TIMESTAMPS = {"local-timestamp-millis", "local-timestamp-micros"}  # naive


def avro_form(parsed: Any) -> Form:
    """The typed-column form of fastavro's parsed schema."""
    is_record = isinstance(parsed, dict) and parsed.get("type") == "record"
    return top_level(_Mapper().form(parsed, ()), is_record)


# The largest value of a recursive schema that is decoded: fastavro's reader recurses once per
# level with no bound (a 100 KB value crashed the process), and each level takes a byte or
# more, so this bounds the depth well inside the stack.
RECURSIVE_BYTES_MAX = 256


def avro_decoder(parsed: Any, *, recursive: bool = False):
    """payload bytes → the decoded value (Avro's own objects); ValueError when the payload
    is not one value of the schema, to its last byte, or is too large to decode safely (a
    value of a recursive schema over RECURSIVE_BYTES_MAX)."""

    def decode(payload: bytes) -> Any:
        if recursive and len(payload) > RECURSIVE_BYTES_MAX:
            raise ValueError(
                f"a value of a recursive schema over {RECURSIVE_BYTES_MAX} bytes is not decoded"
            )
        buffer = io.BytesIO(payload)
        try:
            value = fastavro.schemaless_reader(buffer, parsed, None)
        except Exception as error:  # fastavro raises many kinds on malformed bytes
            raise ValueError(f"not Avro of this schema ({error!r})") from error
        left = len(payload) - buffer.tell()
        if left:
            raise ValueError(f"{left} bytes left over after the value")
        return value

    return decode


class _Mapper:
    def __init__(self) -> None:
        self._named: dict[str, Any] = {}

    def form(self, schema: Any, stack: tuple[str, ...]) -> Form:
        if len(stack) > NESTING_MAX:
            return json_text_form()
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return Form(_PRIMITIVES[schema])
            if schema in stack:
                return json_text_form()  # recursive: Delta types are finite
            return self.form(self._named.get(schema, "string"), stack)
        if isinstance(schema, list):
            return self._union(schema, stack)
        return self._complex(schema, stack)

    def _complex(self, schema: dict, stack: tuple[str, ...]) -> Form:
        kind, logical = schema.get("type"), schema.get("logicalType")
        if logical is not None:
            form = _logical(schema, logical)
            if form is not None:
                return form
        name = schema.get("name")
        if name and kind in ("record", "enum", "fixed", "error"):
            self._named[name] = schema
        if kind in ("record", "error"):
            inner = (*stack, name)
            return struct_form([(f["name"], self.form(f["type"], inner)) for f in schema["fields"]])
        if kind == "enum":
            return Form(pa.string())
        if kind == "fixed":
            return Form(pa.binary())
        if kind == "array":
            return list_form(self.form(schema["items"], stack))
        if kind == "map":
            return map_form(self.form(schema["values"], stack))
        return self.form(kind, stack)

    def _union(self, members: list, stack: tuple[str, ...]) -> Form:
        others = [m for m in members if m != "null"]
        if len(others) == 1:
            return self.form(others[0], stack)
        for member in others:  # still learn the named types they define
            if isinstance(member, dict) and member.get("name"):
                self._named[member["name"]] = member
        return json_text_form()


def _logical(schema: dict, logical: str) -> Form | None:
    if logical == "decimal":
        precision = int(schema.get("precision", 0))
        if 0 < precision <= 38:
            return Form(pa.decimal128(precision, int(schema.get("scale", 0))))
        return Form(pa.string(), str)
    if logical == "date":
        return Form(pa.date32())
    if logical in _TIMESTAMPS:
        return Form(pa.timestamp("us", tz="UTC"))
    if logical in _LOCAL_TIMESTAMPS:
        return Form(pa.timestamp("us", tz="UTC"), _utc)
    if logical in ("time-millis", "time-micros"):
        unit_us = 1000 if logical == "time-millis" else 1
        return Form(pa.int64(), lambda t: _micros_of_day(t) // unit_us)
    if logical == "uuid":
        return Form(pa.string(), str)
    return None


def _utc(value: Any) -> Any:
    if isinstance(value, datetime.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=datetime.UTC)
    return value


def _micros_of_day(value: Any) -> int:
    if isinstance(value, int):
        return value
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
