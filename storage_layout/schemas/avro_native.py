"""Avro typed columns decoded in Rust (`lakelog_native.decode_avro`): the schema reduced to a
plan of what the typed column holds, the payloads of a batch decoded into Arrow buffers in one
call. Schemas with what the plan does not cover (unions of several types, recursion,
decimals) have no plan: avro_arrow.py decodes them in Python, to the same columns."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

try:
    import lakelog_native
except ImportError:  # pragma: no cover (the extension is built by `make install`)
    lakelog_native = None

_PRIMITIVES = {
    "boolean": ("boolean",),
    "int": ("long", 1),
    "long": ("long", 1),
    "float": ("float",),
    "double": ("double",),
    "bytes": ("bytes",),
    "string": ("string",),
}
_LOGICAL = {
    "timestamp-millis": ("long", 1000),
    "timestamp-micros": ("long", 1),
    "local-timestamp-millis": ("long", 1000),
    "local-timestamp-micros": ("long", 1),
    "date": ("int32",),
    "time-millis": ("long", 1),
    "time-micros": ("long", 1),
    "uuid": ("string",),
}


class NoPlan(Exception):
    """The schema has something the Rust decoder does not cover."""


def avro_plan(parsed: Any) -> tuple | None:
    """The plan of fastavro's parsed schema (wrapped as a one-field record when it is not a
    record, as the typed column is), or None when Rust cannot decode it."""
    if lakelog_native is None:
        return None
    try:
        plan = _Planner().plan(parsed, ())
    except NoPlan:
        return None
    is_record = isinstance(parsed, dict) and parsed.get("type") in ("record", "error")
    return plan if is_record else ("record", [plan])


def decode_batch(plan: tuple, kind: pa.DataType, payloads: list[bytes], skip: int):
    """The typed column of `payloads` (each from byte `skip`) and which decoded (a list of
    bools: a payload that did not is null)."""
    tree, ok = lakelog_native.decode_avro(plan, payloads, skip)
    return _array(kind, tree), [flag == 1 for flag in ok]


def _array(kind: pa.DataType, tree: tuple) -> pa.Array:
    length, nulls, bitmap, buffers, children = tree
    validity = None if bitmap is None else pa.py_buffer(bitmap)
    own = [pa.py_buffer(b) for b in buffers]
    if pa.types.is_struct(kind):
        fields = [_array(kind.field(i).type, child) for i, child in enumerate(children)]
        return pa.StructArray.from_buffers(kind, length, [validity], nulls, children=fields)
    if pa.types.is_list(kind):
        (child,) = children
        values = _array(kind.value_type, child)
        return pa.Array.from_buffers(kind, length, [validity, *own], nulls, children=[values])
    if pa.types.is_map(kind):
        keys = _array(kind.key_type, children[0])
        items = _array(kind.item_type, children[1])
        entries = pa.StructArray.from_arrays(
            [keys, items], fields=[kind.key_field, kind.item_field]
        )
        return pa.Array.from_buffers(kind, length, [validity, *own], nulls, children=[entries])
    return pa.Array.from_buffers(kind, length, [validity, *own], nulls)


def _zero_width(plan: tuple) -> bool:
    """Whether a value of `plan` can take no bytes (a record of no fields, or of such)."""
    kind = plan[0]
    if kind == "record":
        return all(_zero_width(child) for child in plan[1])
    return kind == "fixed" and plan[1] == 0


class _Planner:
    def __init__(self) -> None:
        self._named: dict[str, Any] = {}

    def plan(self, schema: Any, stack: tuple[str, ...]) -> tuple:
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return _PRIMITIVES[schema]
            if schema in stack or schema not in self._named:
                raise NoPlan(schema)
            return self.plan(self._named[schema], stack)
        if isinstance(schema, list):
            return self._union(schema, stack)
        kind, logical = schema.get("type"), schema.get("logicalType")
        if logical in _LOGICAL:
            return _LOGICAL[logical]
        if logical is not None and logical != "decimal":
            return self.plan(kind, stack)  # an unknown logical type: its underlying type
        if logical == "decimal":
            raise NoPlan("decimal")
        name = schema.get("name")
        if name and kind in ("record", "enum", "fixed", "error"):
            self._named[name] = schema
        if kind in ("record", "error"):
            inner = (*stack, name)
            return ("record", [self.plan(f["type"], inner) for f in schema["fields"]])
        if kind == "enum":
            return ("enum", [symbol.encode() for symbol in schema["symbols"]])
        if kind == "fixed":
            return ("fixed", int(schema["size"]))
        if kind in ("array", "map"):
            item = self.plan(schema["items" if kind == "array" else "values"], stack)
            if _zero_width(item):
                raise NoPlan("repeated zero-width items")  # the decoder bounds items by bytes
            return (kind, item)
        return self.plan(kind, stack)

    def _union(self, members: list, stack: tuple[str, ...]) -> tuple:
        if len(members) != 2 or "null" not in members:
            raise NoPlan("union")
        null_index = members.index("null")
        return ("nullable", null_index, self.plan(members[1 - null_index], stack))
