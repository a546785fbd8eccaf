"""Arrow types as Delta's schema JSON (a metaData action's `schemaString`) and back: how
commit 0 states a table's schema, and how typed columns (FORMAT.md §17) widen it."""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa

_PRIMITIVES = {
    pa.string(): "string",
    pa.large_string(): "string",
    pa.binary(): "binary",
    pa.large_binary(): "binary",
    pa.bool_(): "boolean",
    pa.int8(): "byte",
    pa.int16(): "short",
    pa.int32(): "integer",
    pa.int64(): "long",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.date32(): "date",
}
_ARROW_OF = {
    "string": pa.string(),
    "binary": pa.binary(),
    "boolean": pa.bool_(),
    "byte": pa.int8(),
    "short": pa.int16(),
    "integer": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")
# Spark and Delta name list children `element`; pyarrow's default `item` would not round-trip.
LIST_ITEM = "element"


def delta_schema_string(schema: pa.Schema) -> str:
    """`schema` as a Delta metaData schemaString (the JSON delta-rs and Spark write)."""
    fields = [field_json(field) for field in schema]
    return json.dumps({"type": "struct", "fields": fields}, separators=(",", ":"))


def field_json(field: pa.Field) -> dict[str, Any]:
    return {
        "name": field.name,
        "type": type_json(field.type),
        "nullable": field.nullable,
        "metadata": {},
    }


def type_json(kind: pa.DataType) -> Any:
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind]
    if pa.types.is_timestamp(kind):
        return "timestamp" if kind.tz else "timestamp_ntz"
    if pa.types.is_decimal(kind):
        return f"decimal({kind.precision},{kind.scale})"
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        element = kind.value_field
        return {
            "type": "array",
            "elementType": type_json(element.type),
            "containsNull": element.nullable,
        }
    if pa.types.is_struct(kind):
        return {
            "type": "struct",
            "fields": [field_json(kind.field(i)) for i in range(kind.num_fields)],
        }
    if pa.types.is_map(kind):
        return {
            "type": "map",
            "keyType": type_json(kind.key_type),
            "valueType": type_json(kind.item_type),
            "valueContainsNull": kind.item_field.nullable,
        }
    raise ValueError(f"no Delta type for Arrow type {kind}")


def arrow_field(field: dict[str, Any]) -> pa.Field:
    """A Delta schema field (JSON) as an Arrow field."""
    return pa.field(field["name"], arrow_type(field["type"]), field.get("nullable", True))


def arrow_type(kind: Any) -> pa.DataType:
    """A Delta type (JSON) as an Arrow type; ValueError for one it does not know."""
    if isinstance(kind, str):
        if kind in _ARROW_OF:
            return _ARROW_OF[kind]
        match = _DECIMAL.fullmatch(kind)
        if match:
            return pa.decimal128(int(match[1]), int(match[2]))
        raise ValueError(f"no Arrow type for Delta type {kind!r}")
    if kind["type"] == "struct":
        return pa.struct([arrow_field(f) for f in kind["fields"]])
    if kind["type"] == "array":
        element = pa.field(LIST_ITEM, arrow_type(kind["elementType"]), kind["containsNull"])
        return pa.list_(element)
    if kind["type"] == "map":
        value = arrow_type(kind["valueType"])
        return pa.map_(arrow_type(kind["keyType"]), pa.field("value", value))
    raise ValueError(f"no Arrow type for Delta type {kind!r}")
