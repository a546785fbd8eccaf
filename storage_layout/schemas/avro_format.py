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
    for reference, parsed in references:
        if not isinstance(parsed, AvroSchema):
            raise InvalidSchema(
                f"Reference {reference.name!r} ({reference.subject} version "
                f"{reference.version}) is a {parsed.schema_type} schema, not AVRO."
            )
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
    return AvroSchema(
        text=compact_json(document),
        references=references,
        document=document,
        dependencies=dependencies,
        schema=schema,
        parsed=parsed,
    )
