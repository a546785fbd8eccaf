"""Compatibility, format by format: a table of changes, each allowed or refused under each
level, as Confluent documents the rules (Avro's schema resolution; JSON Schema's content
models; Protobuf's wire format)."""

from __future__ import annotations

import json

import pytest

from storage_layout.errors import InvalidSchema
from storage_layout.schemas.compatibility import LEVELS, incompatibilities
from storage_layout.schemas.model import AVRO, JSON, PROTOBUF
from storage_layout.schemas.parsing import parse_schema


def _avro(*fields: dict) -> str:
    return json.dumps({"type": "record", "name": "Order", "namespace": "acme", "fields": fields})


def _json(properties: dict, **extra) -> str:
    return json.dumps({"type": "object", "properties": properties, **extra})


def _proto(body: str, package: str = "acme") -> str:
    return f'syntax = "proto3";\npackage {package};\nmessage Order {{ {body} }}\n'


ID = {"name": "id", "type": "long"}
# (name, type, old, new, backward allowed, forward allowed)
CASES = [
    (
        "avro add optional field",
        AVRO,
        _avro(ID),
        _avro(ID, {"name": "qty", "type": ["null", "int"], "default": None}),
        True,
        True,
    ),
    (
        "avro add field without default",
        AVRO,
        _avro(ID),
        _avro(ID, {"name": "qty", "type": "int"}),
        False,
        True,
    ),
    (
        "avro remove field without default",
        AVRO,
        _avro(ID, {"name": "qty", "type": "int"}),
        _avro(ID),
        True,
        False,
    ),
    (
        "avro promote int to long",
        AVRO,
        _avro({"name": "n", "type": "int"}),
        _avro({"name": "n", "type": "long"}),
        True,
        False,
    ),
    (
        "avro change long to string",
        AVRO,
        _avro(ID),
        _avro({"name": "id", "type": "string"}),
        False,
        False,
    ),
    (
        "avro add enum symbol",
        AVRO,
        _avro({"name": "s", "type": {"type": "enum", "name": "S", "symbols": ["A"]}}),
        _avro({"name": "s", "type": {"type": "enum", "name": "S", "symbols": ["A", "B"]}}),
        True,
        False,
    ),
    (
        "avro rename record",
        AVRO,
        _avro(ID),
        json.dumps({"type": "record", "name": "Other", "namespace": "acme", "fields": [ID]}),
        False,
        False,
    ),
    (
        "json add property to open model",
        JSON,
        _json({"a": {"type": "string"}}),
        _json({"a": {"type": "string"}, "b": {"type": "integer"}}),
        False,
        True,
    ),
    (
        "json add property to closed model",
        JSON,
        _json({"a": {"type": "string"}}, additionalProperties=False),
        _json({"a": {"type": "string"}, "b": {"type": "integer"}}, additionalProperties=False),
        True,
        False,
    ),
    (
        "json widen integer to number",
        JSON,
        _json({"a": {"type": "integer"}}),
        _json({"a": {"type": "number"}}),
        True,
        False,
    ),
    (
        "json change string to integer",
        JSON,
        _json({"a": {"type": "string"}}),
        _json({"a": {"type": "integer"}}),
        False,
        False,
    ),
    (
        "json add required property",
        JSON,
        _json({"a": {"type": "string"}}),
        _json({"a": {"type": "string"}}, required=["a"]),
        False,
        True,
    ),
    (
        "json add enum value",
        JSON,
        json.dumps({"type": "string", "enum": ["a"]}),
        json.dumps({"type": "string", "enum": ["a", "b"]}),
        True,
        False,
    ),
    (
        "json lower maxLength",
        JSON,
        json.dumps({"type": "string", "maxLength": 10}),
        json.dumps({"type": "string", "maxLength": 5}),
        False,
        True,
    ),
    (
        "protobuf add field",
        PROTOBUF,
        _proto("int64 id = 1;"),
        _proto("int64 id = 1; string note = 2;"),
        True,
        True,
    ),
    (
        "protobuf rename field",
        PROTOBUF,
        _proto("int64 id = 1;"),
        _proto("int64 key = 1;"),
        True,
        True,
    ),
    (
        "protobuf int32 to int64",
        PROTOBUF,
        _proto("int32 id = 1;"),
        _proto("int64 id = 1;"),
        True,
        True,
    ),
    (
        "protobuf int64 to string",
        PROTOBUF,
        _proto("int64 id = 1;"),
        _proto("string id = 1;"),
        False,
        False,
    ),
    (
        "protobuf change package",
        PROTOBUF,
        _proto("int64 id = 1;"),
        _proto("int64 id = 1;", package="other"),
        False,
        False,
    ),
    (
        "protobuf field into existing oneof",
        PROTOBUF,
        _proto("int64 id = 1; oneof k { string a = 2; }"),
        _proto("oneof k { string a = 2; int64 id = 1; }"),
        False,
        False,
    ),
    (
        "protobuf string to bytes",
        PROTOBUF,
        _proto("string id = 1;"),
        _proto("bytes id = 1;"),
        True,
        True,
    ),
]


@pytest.mark.parametrize(
    ("schema_type", "old", "new", "backward", "forward"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_each_level_follows_the_format_rules(schema_type, old, new, backward, forward):
    before = parse_schema(schema_type, old)
    after = parse_schema(schema_type, new)
    expected = {
        "BACKWARD": backward,
        "FORWARD": forward,
        "FULL": backward and forward,
        "NONE": True,
    }
    for level, allowed in expected.items():
        for transitive in ("", "_TRANSITIVE") if level != "NONE" else ("",):
            messages = incompatibilities(level + transitive, after, [(1, before)])
            assert (not messages) == allowed, (level + transitive, messages)


def test_transitive_levels_check_every_earlier_version():
    v1 = parse_schema(AVRO, _avro(ID))
    v2 = parse_schema(AVRO, _avro(ID, {"name": "qty", "type": "int", "default": 0}))
    # reads v2 data (qty has a default) but not v1 data: qty is required here
    v3 = parse_schema(AVRO, _avro(ID, {"name": "qty", "type": "int"}))
    assert incompatibilities("BACKWARD", v3, [(1, v1), (2, v2)]) == []
    messages = incompatibilities("BACKWARD_TRANSITIVE", v3, [(1, v1), (2, v2)])
    assert len(messages) == 1 and "version 1" in messages[0]


def test_every_level_is_known_and_a_changed_type_is_incompatible():
    assert LEVELS == (
        "BACKWARD",
        "BACKWARD_TRANSITIVE",
        "FORWARD",
        "FORWARD_TRANSITIVE",
        "FULL",
        "FULL_TRANSITIVE",
        "NONE",
    )
    avro = parse_schema(AVRO, _avro(ID))
    as_json = parse_schema(JSON, _json({"id": {"type": "integer"}}))
    assert incompatibilities("BACKWARD", as_json, [(1, avro)])


@pytest.mark.parametrize(
    ("schema_type", "text", "fragment"),
    [
        (AVRO, "{nope", "not JSON"),
        (
            AVRO,
            '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "Nope"}]}',
            "Nope",
        ),
        (
            AVRO,
            '{"type":"record","name":"R","fields":[{"name":"a","type":"int","default":"x"}]}',
            "Default value",
        ),
        (JSON, '{"type": "wat"}', "not valid"),
        (JSON, "[1, 2]", "object or a boolean"),
        (PROTOBUF, 'syntax = "proto3"; message M { strin a = 1; }', '"strin" is not defined'),
        (PROTOBUF, 'syntax = "proto3"; import "missing.proto"; message M {}', "missing.proto"),
        ("XML", "<a/>", "Unknown schemaType"),
        (AVRO, "   ", "empty"),
    ],
)
def test_a_malformed_schema_says_what_is_wrong(schema_type, text, fragment):
    with pytest.raises(InvalidSchema, match=None) as raised:
        parse_schema(schema_type, text)
    assert fragment in str(raised.value)


def test_an_oversized_schema_is_refused():
    fields = [{"name": f"f{i}", "type": "string", "doc": "x" * 100} for i in range(12_000)]
    with pytest.raises(InvalidSchema, match="more than"):
        parse_schema(AVRO, _avro(*fields))


def test_protobuf_text_and_descriptor_forms_are_one_schema():
    text = parse_schema(PROTOBUF, _proto("int64 id = 1; repeated string tags = 2;"))
    descriptor = parse_schema(PROTOBUF, text.serialized())
    assert descriptor.fingerprint() == text.fingerprint()
    assert "repeated string tags = 2;" in descriptor.text
