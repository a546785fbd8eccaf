"""JSON Schema to typed columns (FORMAT.md §17): an object with `properties` → struct (other
keys of a document are left to the raw bytes), an array with one `items` schema → list,
string → string, integer → long, number → double, boolean → boolean, `["null", T]` → T; what
has no single type (several types, oneOf/anyOf, objects without properties, recursion) →
JSON text. `$ref`s are followed, to local definitions and to referenced schemas. A value of
another type than its schema says (possible when validation is off) is stored as null."""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa

from storage_layout.schemas.forms import (
    NESTING_MAX,
    Form,
    json_text_form,
    list_form,
    struct_form,
    top_level,
)

_SCALARS = {
    "string": (pa.string(), lambda v: v if isinstance(v, str) else None),
    "integer": (
        pa.int64(),
        lambda v: v if isinstance(v, int) and not isinstance(v, bool) else None,
    ),
    "number": (
        pa.float64(),
        lambda v: float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None,
    ),
    "boolean": (pa.bool_(), lambda v: v if isinstance(v, bool) else None),
}


def json_form(document: Any, resolve) -> Form:
    """The typed-column form of a JSON Schema; `resolve(schema)` follows a `$ref`."""
    mapper = _Mapper(resolve)
    root = resolve(document)
    is_record = _kind(root) == "object" and bool(root.get("properties"))
    return top_level(mapper.form(document, 0, ()), is_record)


def json_decode(payload: bytes) -> Any:
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError as error:
        raise ValueError(f"not JSON ({error})") from error


class _Mapper:
    def __init__(self, resolve) -> None:
        self._resolve = resolve

    def form(self, schema: Any, depth: int, stack: tuple[int, ...]) -> Form:
        if depth > NESTING_MAX or id(schema) in stack:
            return json_text_form()
        resolved = self._resolve(schema)
        if not isinstance(resolved, dict):
            return json_text_form()
        stack = (*stack, id(schema))
        kind = _kind(resolved)
        if kind in _SCALARS:
            arrow_type, adapt = _SCALARS[kind]
            return Form(arrow_type, adapt)
        if kind == "object" and resolved.get("properties"):
            fields = [
                (name, self.form(sub, depth + 1, stack))
                for name, sub in resolved["properties"].items()
            ]
            return _object(struct_form(fields))
        if kind == "array" and isinstance(resolved.get("items"), dict | bool):
            return _array(list_form(self.form(resolved["items"], depth + 1, stack)))
        return json_text_form()


def _kind(schema: dict) -> str | None:
    """The one type a schema has, or None."""
    declared = schema.get("type")
    if isinstance(declared, list):
        others = [t for t in declared if t != "null"]
        declared = others[0] if len(others) == 1 else None
    if declared is None:
        if "properties" in schema:
            return "object"
        enum = schema.get("enum")
        if enum and all(isinstance(v, str) for v in enum):
            return "string"
        return None
    return declared if isinstance(declared, str) else None


def _object(form: Form) -> Form:
    inner = form.adapt
    if inner is None:
        return Form(form.type, lambda v: v if isinstance(v, dict) else None)
    return Form(form.type, lambda v: inner(v) if isinstance(v, dict) else None)


def _array(form: Form) -> Form:
    inner = form.adapt
    if inner is None:
        return Form(form.type, lambda v: v if isinstance(v, list) else None)
    return Form(form.type, lambda v: inner(v) if isinstance(v, list) else None)
