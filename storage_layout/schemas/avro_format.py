"""Avro schemas: parsed by Apache Avro's Python library (whose compatibility checker is Avro's
schema resolution, as the Java one Confluent uses) and by fastavro (which checks defaults and
decodes records fast). A reference names an Avro named type defined by another subject."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import avro.compatibility
import avro.errors
import avro.name
import avro.schema
import fastavro
import fastavro.schema

from storage_layout.errors import InvalidSchema
from storage_layout.schemas.model import (
    AVRO,
    ParsedSchema,
    Reference,
    check_size,
    compact_json,
    load_json,
)


@dataclass(frozen=True, slots=True, eq=False)
class AvroSchema(ParsedSchema):
    text: str
    references: tuple[Reference, ...]
    document: Any  # the schema's JSON
    # the JSON of every schema it references, directly or not, dependencies first
    dependencies: tuple[Any, ...]
    schema: avro.schema.Schema
    parsed: Any = field(repr=False)  # fastavro's parsed form, for decoding
    # A type that contains itself: its values nest as deep as their bytes allow, deeper than
    # a decoder's stack (values are decoded only when small: avro_arrow.RECURSIVE_BYTES_MAX).
    recursive: bool = False
    # An array or map of items that take no bytes (a record without fields, fixed(0)): a few
    # bytes would make billions of items, so such values are never decoded.
    unbounded: bool = False
    schema_type: str = AVRO

    def read_errors(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, AvroSchema):
            return [f"A {writer.schema_type} schema cannot be read as AVRO."]
        checker = avro.compatibility.ReaderWriterCompatibilityChecker()
        result = checker.get_compatibility(self.schema, writer.schema)
        if result.compatibility is avro.compatibility.SchemaCompatibilityType.compatible:
            return []
        return [_describe(result)]

    def normalized(self) -> AvroSchema:
        document = load_json(compact_json(self.document, sort_keys=True), "AVRO")
        return _build(document, self.references, self.dependencies)


def _describe(result: avro.compatibility.SchemaCompatibilityResult) -> str:
    """Avro's findings as one message (its library keeps them as sets, unpaired)."""
    kinds = ", ".join(sorted({kind.name.upper() for kind in result.incompatibilities}))
    details = "; ".join(sorted(_plain(message) for message in result.messages))
    locations = ", ".join(sorted(result.locations))
    return f"{kinds or 'INCOMPATIBLE'} at {locations}: {details}"


def _plain(message: str) -> str:
    """Avro reports a reader field missing a default by its name alone."""
    if " " in message:
        return message
    return f"field {message!r} is new without a default, so data without it cannot be read"


def parse_avro(text: str, references: Sequence[tuple[Reference, ParsedSchema]]) -> AvroSchema:
    """The Avro schema `text`, whose `references` are resolved (each an AvroSchema).

    Raises:
        InvalidSchema: not JSON, not a valid Avro schema, a default of the wrong type, or a
            reference that is not an Avro schema.
    """
    check_size(text)
    dependencies: list[Any] = []
    for _, parsed in references:  # of its type: parsing.parse_schema checks
        for document in (*parsed.dependencies, parsed.document):
            if not any(document is known for known in dependencies):
                dependencies.append(document)
    document = load_json(text, "AVRO")
    return _build(document, tuple(r for r, _ in references), tuple(dependencies))


def _build(document: Any, references: tuple[Reference, ...], dependencies: tuple) -> AvroSchema:
    names = avro.name.Names(validate_names=True)
    named: dict[str, Any] = {}
    try:
        for dependency in dependencies:
            avro.schema.make_avsc_object(dependency, names)
            fastavro.parse_schema(dependency, named_schemas=named)
        schema = avro.schema.make_avsc_object(document, names)
        parsed = fastavro.parse_schema(document, named_schemas=named)
    except (avro.errors.AvroException, fastavro.schema.SchemaParseException) as error:
        raise InvalidSchema(f"Invalid AVRO schema: {error}") from error
    except (TypeError, ValueError, AttributeError, KeyError) as error:
        raise InvalidSchema(f"Invalid AVRO schema: {error!r}") from error
    except RecursionError as error:
        raise InvalidSchema("Invalid AVRO schema: it nests too deep.") from error
    shape = _Shape()
    shape.walk(parsed, ())
    return AvroSchema(
        text=compact_json(document),
        references=references,
        document=document,
        dependencies=dependencies,
        schema=schema,
        parsed=parsed,
        recursive=shape.recursive,
        unbounded=shape.unbounded,
    )


class _Shape:
    """Whether a fastavro-parsed schema contains itself, or repeats zero-width items."""

    def __init__(self) -> None:
        self.recursive = False
        self.unbounded = False
        self._named: dict[str, Any] = {}

    def walk(self, schema: Any, stack: tuple[str, ...]) -> None:
        if isinstance(schema, list):
            for member in schema:
                self.walk(member, stack)
        elif isinstance(schema, str):
            if schema in stack:
                self.recursive = True
            elif schema in self._named:
                self.walk(self._named[schema], stack)
        elif isinstance(schema, dict):
            self._walk_complex(schema, stack)

    def _walk_complex(self, schema: dict, stack: tuple[str, ...]) -> None:
        kind, name = schema.get("type"), schema.get("name")
        if name and kind in ("record", "error", "enum", "fixed"):
            self._named[name] = schema
        if kind in ("record", "error"):
            for item in schema.get("fields", ()):
                self.walk(item["type"], (*stack, name))
        elif kind in ("array", "map"):
            item = schema["items"] if kind == "array" else schema["values"]
            self.unbounded = self.unbounded or self._zero_width(item, 0)
            self.walk(item, stack)
        elif isinstance(kind, dict | list):
            self.walk(kind, stack)

    def _zero_width(self, schema: Any, depth: int) -> bool:
        if depth > 64:
            return False
        if isinstance(schema, str):
            if schema == "null":
                return True
            return schema in self._named and self._zero_width(self._named[schema], depth + 1)
        if isinstance(schema, dict):
            kind = schema.get("type")
            if kind in ("record", "error"):
                return all(self._zero_width(f["type"], depth + 1) for f in schema["fields"])
            if kind == "fixed":
                return int(schema.get("size", 1)) == 0
            if kind == "null":
                return True
        return False
