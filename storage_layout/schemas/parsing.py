"""One entry point for every schema type."""

from __future__ import annotations

from collections.abc import Sequence

from storage_layout.errors import InvalidSchema
from storage_layout.schemas.avro_format import parse_avro
from storage_layout.schemas.json_format import parse_json_schema
from storage_layout.schemas.model import AVRO, JSON, PROTOBUF, ParsedSchema, Reference
from storage_layout.schemas.protobuf_format import parse_protobuf

_PARSERS = {AVRO: parse_avro, JSON: parse_json_schema, PROTOBUF: parse_protobuf}


def parse_schema(
    schema_type: str, text: str, references: Sequence[tuple[Reference, ParsedSchema]] = ()
) -> ParsedSchema:
    """`text` parsed as a `schema_type` schema, its `references` resolved already.

    Raises:
        InvalidSchema: the schema is not valid, or its type is unknown.
    """
    parser = _PARSERS.get(schema_type)
    if parser is None:
        raise InvalidSchema(f"Unknown schemaType {schema_type!r}: use AVRO, JSON or PROTOBUF.")
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchema("The schema is empty: give it as a string in `schema`.")
    for reference, parsed in references:  # a schema references schemas of its own type
        if parsed.schema_type != schema_type:
            raise InvalidSchema(
                f"Reference {reference.name!r} ({reference.subject} version "
                f"{reference.version}) is a {parsed.schema_type} schema, not {schema_type}."
            )
    try:
        return parser(text, references)
    except RecursionError as error:
        raise InvalidSchema("The schema nests too deep to parse.") from error
