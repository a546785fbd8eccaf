"""JSON Schema: parsed and validated by the `jsonschema` library (draft 7 unless `$schema`
says otherwise, as Confluent's default). A reference names a schema that `$ref` reaches by
that URL. Compatibility follows Confluent's rules for JSON Schema: a reader accepts a writer
when every document valid for the writer is valid for the reader, judged keyword by keyword
(types, with integer read as number; properties against open and closed content models;
required properties; enums; bounds; items; combined schemas)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import referencing
import referencing.exceptions
import referencing.jsonschema

from storage_layout.errors import InvalidSchema
from storage_layout.schemas.model import (
    JSON,
    ParsedSchema,
    Reference,
    check_size,
    compact_json,
    load_json,
)

# Keywords whose larger value accepts more, and those whose smaller value does.
_UPPER_BOUNDS = ("maxLength", "maximum", "exclusiveMaximum", "maxItems", "maxProperties")
_LOWER_BOUNDS = ("minLength", "minimum", "exclusiveMinimum", "minItems", "minProperties")
_NESTING_MAX = 64


@dataclass(frozen=True, slots=True, eq=False)
class JsonSchema(ParsedSchema):
    text: str
    references: tuple[Reference, ...]
    document: Any
    resources: tuple[tuple[str, Any], ...]  # every referenced schema by its `$ref` URL
    validator: Any = field(repr=False)
    schema_type: str = JSON

    def read_errors(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, JsonSchema):
            return [f"A {writer.schema_type} schema cannot be read as JSON."]
        return _Comparison(self, writer).accepts(self.document, writer.document, "#", 0)

    def normalized(self) -> JsonSchema:
        document = load_json(compact_json(self.document, sort_keys=True), "JSON")
        return _build(document, self.references, self.resources)

    def resolve(self, schema: Any) -> Any:
        """`schema` with its `$ref` followed (a local pointer or a referenced schema)."""
        return resolve_ref(self, schema)

    def validation_errors(self, document: Any) -> list[str]:
        """Why `document` is not valid for this schema (empty: it is)."""
        return [
            f"{error.json_path}: {error.message}" for error in self.validator.iter_errors(document)
        ][:10]


def parse_json_schema(
    text: str, references: Sequence[tuple[Reference, ParsedSchema]]
) -> JsonSchema:
    """The JSON Schema `text`, whose `references` are resolved (each a JsonSchema).

    Raises:
        InvalidSchema: not JSON, not a valid schema of its draft, or a reference that is not
            a JSON schema.
    """
    check_size(text)
    resources: dict[str, Any] = {}
    for reference, parsed in references:
        resources.update(parsed.resources)
        resources[reference.name] = parsed.document
    document = load_json(text, "JSON")
    return _build(document, tuple(r for r, _ in references), tuple(resources.items()))


def _build(document: Any, references: tuple[Reference, ...], resources: tuple) -> JsonSchema:
    if not isinstance(document, dict | bool):
        raise InvalidSchema("Invalid JSON schema: a schema is an object or a boolean.")
    cls = jsonschema.validators.validator_for(document, default=jsonschema.Draft7Validator)
    try:
        cls.check_schema(document)
    except jsonschema.exceptions.SchemaError as error:
        raise InvalidSchema(f"Invalid JSON schema: {error.message}") from error
    registry = referencing.Registry().with_resources(
        (name, referencing.Resource.from_contents(body, referencing.jsonschema.DRAFT7))
        for name, body in resources
    )
    return JsonSchema(
        text=compact_json(document),
        references=references,
        document=document,
        resources=resources,
        validator=cls(document, registry=registry),
    )


class _Comparison:
    """One reader/writer comparison: resolves each side's `$ref`s in its own documents."""

    def __init__(self, reader: JsonSchema, writer: JsonSchema) -> None:
        self._documents = {"reader": reader, "writer": writer}

    def accepts(self, reader: Any, writer: Any, path: str, depth: int) -> list[str]:
        """Why some document valid for `writer` may be invalid for `reader` (at `path`)."""
        if depth > _NESTING_MAX:
            return []  # a recursive schema: what is above was compared already
        reader = self._resolve("reader", reader)
        writer = self._resolve("writer", writer)
        if _accepts_anything(reader) or writer is False:
            return []
        if reader is False:
            return [f"{path}: the reader accepts nothing"]
        if writer is True:
            writer = {}
        combined = self._combined(reader, writer, path, depth)
        if combined is not None:
            return combined
        errors = _type_errors(reader, writer, path)
        errors += _value_errors(reader, writer, path)
        errors += self._object_errors(reader, writer, path, depth)
        errors += self._array_errors(reader, writer, path, depth)
        return errors

    def _resolve(self, side: str, schema: Any) -> Any:
        return resolve_ref(self._documents[side], schema)

    def _combined(self, reader: dict, writer: dict, path: str, depth: int) -> list[str] | None:
        """anyOf/oneOf/allOf: every writer alternative read by some reader alternative."""
        reader_options = reader.get("anyOf") or reader.get("oneOf")
        writer_options = writer.get("anyOf") or writer.get("oneOf")
        if reader_options is None and writer_options is None:
            if "allOf" in reader:
                return [
                    error
                    for i, part in enumerate(reader["allOf"])
                    for error in self.accepts(part, writer, f"{path}/allOf/{i}", depth + 1)
                ]
            return None
        alternatives = writer_options or [writer]
        errors = []
        for i, alternative in enumerate(alternatives):
            readers = reader_options or [reader]
            if not any(not self.accepts(r, alternative, path, depth + 1) for r in readers):
                errors.append(f"{path}: alternative {i} of the writer is not read by the reader")
        return errors

    def _object_errors(self, reader: dict, writer: dict, path: str, depth: int) -> list[str]:
        reader_props = reader.get("properties") or {}
        writer_props = writer.get("properties") or {}
        errors = []
        for name, schema in writer_props.items():
            where = f"{path}/properties/{name}"
            target = reader_props.get(name, _additional(reader))
            if target is False:
                errors.append(f"{where}: PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")
            else:
                errors += self.accepts(target, schema, where, depth + 1)
        for name, schema in reader_props.items():
            if name in writer_props:
                continue
            written = _additional(writer)
            if written is True and not _accepts_anything(self._resolve("reader", schema)):
                errors.append(f"{path}/properties/{name}: PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
            elif written not in (True, False):
                errors += self.accepts(schema, written, f"{path}/properties/{name}", depth + 1)
        for name in set(reader.get("required") or ()) - set(writer.get("required") or ()):
            if "default" not in (self._resolve("reader", reader_props.get(name)) or {}):
                errors.append(f"{path}/required/{name}: REQUIRED_PROPERTY_ADDED")
        reader_extra, writer_extra = _additional(reader), _additional(writer)
        if reader_extra is not True and writer_extra is True and "properties" in writer:
            errors.append(f"{path}/additionalProperties: ADDITIONAL_PROPERTIES_NARROWED")
        for keyword in ("dependencies", "dependentRequired", "dependentSchemas"):
            if reader.get(keyword) and reader.get(keyword) != writer.get(keyword):
                errors.append(f"{path}/{keyword}: DEPENDENCY_ADDED")
        return errors

    def _array_errors(self, reader: dict, writer: dict, path: str, depth: int) -> list[str]:
        errors = []
        reader_items, writer_items = reader.get("items"), writer.get("items")
        if isinstance(reader_items, list) or isinstance(writer_items, list):
            if reader_items != writer_items:
                errors.append(f"{path}/items: ITEMS_CHANGED")
        elif reader_items is not None:
            errors += self.accepts(
                reader_items,
                True if writer_items is None else writer_items,
                f"{path}/items",
                depth + 1,
            )
        if reader.get("uniqueItems") and not writer.get("uniqueItems"):
            errors.append(f"{path}/uniqueItems: UNIQUE_ITEMS_ADDED")
        return errors


def resolve_ref(root: JsonSchema, schema: Any) -> Any:
    """`schema` (a part of `root`) with its `$ref`s followed, to a local pointer or to a
    referenced schema; True (anything) when a target is not there."""
    for _ in range(_NESTING_MAX):
        if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str)):
            return schema
        url, _, pointer = schema["$ref"].partition("#")
        target = root.document if not url else dict(root.resources).get(url)
        if target is None:
            return True  # unresolvable here: the validator reports it
        for part in filter(None, pointer.split("/")):
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, dict) else None
        schema = True if target is None else target
    return schema


def _accepts_anything(schema: Any) -> bool:
    if schema is True:
        return True
    return isinstance(schema, dict) and not any(k for k in schema if k not in _ANNOTATIONS)


_ANNOTATIONS = frozenset(
    {
        "$schema",
        "$id",
        "id",
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        "definitions",
        "$defs",
        "readOnly",
        "writeOnly",
        "deprecated",
    }
)


def _additional(schema: dict) -> Any:
    """What the schema allows for properties it does not name (True: anything)."""
    extra = schema.get("additionalProperties", True)
    return True if extra == {} else extra


def _types(schema: dict) -> set[str] | None:
    declared = schema.get("type")
    if declared is None:
        return None
    return {declared} if isinstance(declared, str) else set(declared)


def _type_errors(reader: dict, writer: dict, path: str) -> list[str]:
    reader_types, writer_types = _types(reader), _types(writer)
    if reader_types is None:
        return []
    if writer_types is None:
        return [f"{path}/type: TYPE_NARROWED (the writer allows any type)"]
    missing = {
        t
        for t in writer_types
        if t not in reader_types and not (t == "integer" and "number" in reader_types)
    }
    if missing:
        return [f"{path}/type: TYPE_CHANGED ({', '.join(sorted(missing))} no longer accepted)"]
    return []


def _value_errors(reader: dict, writer: dict, path: str) -> list[str]:
    """enum, const, pattern, not, multipleOf and the numeric and size bounds."""
    errors = []
    if "enum" in reader:
        if "enum" not in writer:
            errors.append(f"{path}/enum: ENUM_ADDED")
        elif any(value not in reader["enum"] for value in writer["enum"]):
            errors.append(f"{path}/enum: ENUM_ARRAY_NARROWED")
    for keyword in ("const", "pattern", "not"):
        if keyword in reader and reader[keyword] != writer.get(keyword):
            errors.append(f"{path}/{keyword}: {keyword.upper()}_ADDED_OR_CHANGED")
    if "multipleOf" in reader:
        written = writer.get("multipleOf")
        if written is None or written % reader["multipleOf"] != 0:
            errors.append(f"{path}/multipleOf: MULTIPLE_OF_ADDED_OR_CHANGED")
    for keyword in _UPPER_BOUNDS:
        bound, written = _bound(reader, keyword), _bound(writer, keyword)
        if bound is not None and (written is None or written > bound):
            errors.append(f"{path}/{keyword}: {_upper_snake(keyword)}_DECREASED_OR_ADDED")
    for keyword in _LOWER_BOUNDS:
        bound, written = _bound(reader, keyword), _bound(writer, keyword)
        vacuous = bound == 0 and keyword not in ("minimum", "exclusiveMinimum")
        if bound is not None and not vacuous and (written is None or written < bound):
            errors.append(f"{path}/{keyword}: {_upper_snake(keyword)}_INCREASED_OR_ADDED")
    return errors


def _bound(schema: dict, keyword: str) -> float | None:
    """A numeric bound (draft 4's boolean exclusiveMinimum/Maximum are flags, not bounds)."""
    value = schema.get(keyword)
    return None if isinstance(value, bool) or not isinstance(value, int | float) else value


def _upper_snake(name: str) -> str:
    return "".join(f"_{c}" if c.isupper() else c.upper() for c in name)
