"""What the typed columns of one schema look like (FORMAT.md §17): an Arrow type, and how a
decoded value becomes a value of it. Shared by the three formats' mappings."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from storage_layout.schemas.typed_columns import field_names

Adapter = Callable[[Any], Any]
# A struct nested deeper than this (or a recursive type) is stored as JSON text.
NESTING_MAX = 32


@dataclass(frozen=True, slots=True)
class Form:
    """An Arrow type and the adapter that turns a decoded value into one of its values
    (None: the decoded value already is)."""

    type: pa.DataType
    adapt: Adapter | None = None


def json_text_form() -> Form:
    """A value stored as JSON text: what Delta cannot type (recursive types, unions of
    several types, free-form objects)."""
    return Form(pa.string(), as_json_text)


def as_json_text(value: Any) -> str | None:
    if value is None:
        return None
    return json.dumps(value, default=_json_default, ensure_ascii=False, separators=(",", ":"))


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    return str(value)


def struct_form(fields: list[tuple[str, Form]]) -> Form:
    """A struct of `fields` (names made Delta-safe); its adapter maps a dict's keys."""
    names = field_names(name for name, _ in fields)
    struct = pa.struct([pa.field(n, f.type) for n, (_, f) in zip(names, fields, strict=True)])
    renamed = any(n != original for n, (original, _) in zip(names, fields, strict=True))
    adapters = [(original, n, f.adapt) for n, (original, f) in zip(names, fields, strict=True)]
    if not renamed and all(adapt is None for _, _, adapt in adapters):
        return Form(struct)

    def adapt(value: Any) -> Any:
        if value is None:
            return None
        return {
            name: (item if fn is None or item is None else fn(item))
            for original, name, fn in adapters
            for item in (value.get(original),)
        }

    return Form(struct, adapt)


def list_form(item: Form) -> Form:
    kind = pa.list_(pa.field("element", item.type))
    if item.adapt is None:
        return Form(kind)
    fn = item.adapt
    return Form(
        kind, lambda value: None if value is None else [None if v is None else fn(v) for v in value]
    )


def map_form(item: Form, key_type: pa.DataType | None = None) -> Form:
    kind = pa.map_(key_type or pa.string(), item.type)
    fn = item.adapt

    def adapt(value: Any) -> Any:
        if value is None:
            return None
        pairs = value.items() if isinstance(value, dict) else value
        return [(k, v if fn is None or v is None else fn(v)) for k, v in pairs]

    return Form(kind, adapt)


def top_level(form: Form, is_record: bool) -> Form:
    """A typed column is always a struct: a schema that is not a record is one field,
    `value`."""
    if is_record:
        return form
    kind = pa.struct([pa.field("value", form.type)])
    inner = form.adapt
    if inner is None:
        return Form(kind, lambda value: {"value": value})
    return Form(kind, lambda value: {"value": None if value is None else inner(value)})
