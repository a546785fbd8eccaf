"""The schema registry's REST API on a real gateway: Confluent's paths, bodies and error codes,
checked with plain HTTP and with Confluent's own registry client."""

from __future__ import annotations

import json

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from tests.security.helpers import assert_error

SR = "application/vnd.schemaregistry.v1+json"


def _avro(*fields: dict, name: str = "Order") -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "acme", "fields": fields})


ID = {"name": "id", "type": "long"}
QTY = {"name": "qty", "type": ["null", "int"], "default": None}


@pytest.fixture
def subject(topic_name) -> str:
    return f"{topic_name}-value"


@pytest.fixture
def registry(gateway) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": gateway.url})


def _register(client: httpx.Client, subject: str, schema: str, **extra) -> httpx.Response:
    return client.post(
        f"/subjects/{subject}/versions",
        content=json.dumps({"schema": schema, **extra}),
        headers={"Content-Type": SR},
    )


def test_register_read_and_look_up_with_confluents_client(registry, subject):
    first = registry.register_schema(subject, Schema(_avro(ID), "AVRO"))
    assert registry.register_schema(subject, Schema(_avro(ID), "AVRO")) == first
    second = registry.register_schema(subject, Schema(_avro(ID, QTY), "AVRO"))
    assert second != first
    assert registry.get_versions(subject) == [1, 2]
    latest = registry.get_latest_version(subject)
    assert (latest.version, latest.schema_id) == (2, second)
    found = registry.lookup_schema(subject, Schema(_avro(ID), "AVRO"))
    assert (found.version, found.schema_id) == (1, first)
    assert json.loads(registry.get_schema(first).schema_str) == json.loads(_avro(ID))
    assert subject in registry.get_subjects()


def test_one_schema_has_one_id_in_every_subject(client, topic_name):
    schema = _avro(ID, {"name": "marker", "type": "string", "default": topic_name})
    ids = {_register(client, f"{topic_name}-{n}-value", schema).json()["id"] for n in range(3)}
    assert len(ids) == 1
    (schema_id,) = ids
    listed = client.get(f"/schemas/ids/{schema_id}/versions").json()
    assert sorted(v["subject"] for v in listed) == [f"{topic_name}-{n}-value" for n in range(3)]
    assert client.get(f"/schemas/ids/{schema_id}/subjects").json() == sorted(
        v["subject"] for v in listed
    )


def test_whitespace_does_not_make_a_new_schema(client, subject):
    compact = _register(client, subject, _avro(ID)).json()
    spaced = _register(client, subject, json.dumps(json.loads(_avro(ID)), indent=4)).json()
    assert spaced["id"] == compact["id"] and spaced["version"] == 1


def test_an_incompatible_schema_is_refused_with_409_and_checked_with_verbose(client, subject):
    assert _register(client, subject, _avro(ID)).status_code == 200
    changed = _avro({"name": "id", "type": "string"})
    body = assert_error(_register(client, subject, changed), 409, 409)
    assert "TYPE_MISMATCH" in body["message"]
    check = client.post(
        f"/compatibility/subjects/{subject}/versions/latest?verbose=true",
        json={"schema": changed},
    )
    assert check.status_code == 200
    assert check.json()["is_compatible"] is False and check.json()["messages"]
    good = client.post(
        f"/compatibility/subjects/{subject}/versions", json={"schema": _avro(ID, QTY)}
    )
    assert good.json() == {"is_compatible": True}


def test_subject_level_compatibility(client, subject):
    assert_error(client.get(f"/config/{subject}"), 404, 40408)
    default = client.get(f"/config/{subject}?defaultToGlobal=true").json()
    assert default == {"compatibilityLevel": "BACKWARD"}
    assert client.put(f"/config/{subject}", json={"compatibility": "none"}).json() == {
        "compatibility": "NONE"
    }
    assert _register(client, subject, _avro(ID)).status_code == 200
    assert _register(client, subject, _avro({"name": "id", "type": "string"})).status_code == 200
    assert_error(client.put(f"/config/{subject}", json={"compatibility": "SOME"}), 422, 42203)
    assert client.delete(f"/config/{subject}").json() == {"compatibilityLevel": "NONE"}
    assert_error(client.get(f"/config/{subject}"), 404, 40408)


def test_soft_then_permanent_deletes(client, subject):
    _register(client, subject, _avro(ID))
    _register(client, subject, _avro(ID, QTY))
    assert_error(client.delete(f"/subjects/{subject}/versions/1?permanent=true"), 404, 40407)
    assert client.delete(f"/subjects/{subject}/versions/1").json() == 1
    assert_error(client.delete(f"/subjects/{subject}/versions/1"), 404, 40406)
    assert client.get(f"/subjects/{subject}/versions").json() == [2]
    assert client.get(f"/subjects/{subject}/versions?deleted=true").json() == [1, 2]
    assert_error(client.get(f"/subjects/{subject}/versions/1"), 404, 40402)
    assert client.get(f"/subjects/{subject}/versions/1?deleted=true").json()["deleted"] is True
    assert_error(client.delete(f"/subjects/{subject}?permanent=true"), 404, 40405)
    assert client.delete(f"/subjects/{subject}").json() == [2]
    assert_error(client.delete(f"/subjects/{subject}"), 404, 40404)
    assert subject not in client.get("/subjects").json()
    assert subject in client.get("/subjects?deleted=true").json()
    assert client.delete(f"/subjects/{subject}?permanent=true").json() == [1, 2]
    assert_error(client.get(f"/subjects/{subject}/versions"), 404, 40401)
    assert subject not in client.get("/subjects?deleted=true").json()


def test_references_resolve_and_protect_what_they_name(registry, client, topic_name):
    address = f"{topic_name}-address"
    registry.register_schema(
        address,
        Schema(
            json.dumps(
                {
                    "type": "record",
                    "name": "Address",
                    "namespace": "acme",
                    "fields": [{"name": "city", "type": "string"}],
                }
            ),
            "AVRO",
        ),
    )
    person = Schema(
        _avro({"name": "home", "type": "acme.Address"}, name="Person"),
        "AVRO",
        [SchemaReference("acme.Address", address, 1)],
    )
    person_id = registry.register_schema(f"{topic_name}-value", person)
    body = client.get(f"/schemas/ids/{person_id}").json()
    assert body["references"] == [{"name": "acme.Address", "subject": address, "version": 1}]
    assert client.get(f"/subjects/{address}/versions/1/referencedby").json() == [person_id]
    assert_error(client.delete(f"/subjects/{address}/versions/1"), 422, 42206)
    assert_error(client.delete(f"/subjects/{address}"), 422, 42206)
    unresolved = _register(
        client,
        f"{topic_name}-x",
        person.schema_str,
        references=[{"name": "acme.Address", "subject": "nowhere", "version": 1}],
    )
    assert_error(unresolved, 422, 42201)


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/schemas/ids/987654", 404, 40403),
        ("/subjects/no-such-subject/versions", 404, 40401),
        ("/subjects/no-such-subject/versions/latest", 404, 40401),
        ("/subjects/no-such-subject/versions/0", 422, 42202),
        ("/subjects/no-such-subject/versions/abc", 422, 42202),
        ("/mode/no-such-subject", 404, 40409),
    ],
)
def test_reads_of_what_is_not_there(client, path, status, code):
    assert_error(client.get(path), status, code)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{nope", 400, 400),
        (b'{"schemaType": "AVRO"}', 422, 42201),
        (b'{"schema": "{\\"type\\": \\"nope\\"}"}', 422, 42201),
        (b'{"schema": "x", "schemaType": "XML"}', 422, 42201),
        (b'{"schema": "{}", "schemaType": "JSON", "references": [{"name": 1}]}', 422, 42201),
    ],
)
def test_bad_registrations_are_refused_with_confluents_codes(client, subject, body, status, code):
    response = client.post(
        f"/subjects/{subject}/versions", content=body, headers={"Content-Type": SR}
    )
    assert_error(response, status, code)
    assert_error(client.get(f"/subjects/{subject}/versions"), 404, 40401)


def test_lookup_of_an_unregistered_schema(client, subject):
    assert_error(client.post(f"/subjects/{subject}", json={"schema": _avro(ID)}), 404, 40401)
    _register(client, subject, _avro(ID))
    other = client.post(f"/subjects/{subject}", json={"schema": _avro(ID, QTY)})
    assert_error(other, 404, 40403)


def test_read_only_mode_refuses_registrations(client, subject):
    assert client.put(f"/mode/{subject}", json={"mode": "READONLY"}).json() == {"mode": "READONLY"}
    assert_error(_register(client, subject, _avro(ID)), 422, 42205)
    assert_error(client.put(f"/mode/{subject}", json={"mode": "SLEEPY"}), 422, 42204)
    assert client.delete(f"/mode/{subject}").json() == {"mode": "READONLY"}
    assert _register(client, subject, _avro(ID)).status_code == 200


def test_json_and_protobuf_schemas(client, registry, topic_name):
    json_schema = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})
    json_id = registry.register_schema(f"{topic_name}-j", Schema(json_schema, "JSON"))
    assert client.get(f"/schemas/ids/{json_id}").json()["schemaType"] == "JSON"
    proto = 'syntax = "proto3";\npackage acme;\nmessage Order { int64 id = 1; }\n'
    proto_id = registry.register_schema(f"{topic_name}-p", Schema(proto, "PROTOBUF"))
    body = client.get(f"/schemas/ids/{proto_id}").json()
    assert body["schemaType"] == "PROTOBUF" and "message Order" in body["schema"]
    serialized = client.get(f"/schemas/ids/{proto_id}?format=serialized").json()["schema"]
    # the descriptor form registers as the same schema
    same = registry.register_schema(f"{topic_name}-p", Schema(serialized, "PROTOBUF"))
    assert same == proto_id
    assert client.get("/schemas/types").json() == ["AVRO", "JSON", "PROTOBUF"]


def test_schemas_by_guid(client, subject):
    registered = _register(client, subject, _avro(ID)).json()
    by_guid = client.get(f"/schemas/guids/{registered['guid']}")
    assert by_guid.status_code == 200 and by_guid.json()["id"] == registered["id"]


def test_client_errors_carry_the_code(registry, subject):
    with pytest.raises(SchemaRegistryError) as raised:
        registry.get_latest_version(subject)
    assert (raised.value.http_status_code, raised.value.error_code) == (404, 40401)


def test_a_version_or_an_id_is_given_only_in_import_mode(client, subject):
    first = _register(client, subject, _avro(ID)).json()
    rewrite = _register(client, subject, _avro(ID, QTY), version=1)
    assert_error(rewrite, 422, 42205)  # a version never changes its schema
    assert_error(_register(client, subject, _avro(ID, QTY), id=999), 422, 42205)
    assert client.get(f"/subjects/{subject}/versions/1").json()["id"] == first["id"]
    for bad in (0, 2**31, True, "7"):
        assert_error(_register(client, subject, _avro(ID), id=bad), 422, 422)


def test_import_mode_keeps_a_schemas_first_id(client, topic_name):
    subject = f"{topic_name}-import"
    first = _register(client, f"{topic_name}-first", _avro(ID, name="Imported")).json()
    assert client.put(f"/mode/{subject}", json={"mode": "IMPORT"}).status_code == 200
    imported = _register(
        client, subject, _avro(ID, name="Imported"), id=first["id"] + 5000, version=3
    )
    assert imported.status_code == 200, imported.text
    # looked up by its text, the schema is found in both subjects, under either id
    found = client.post(
        f"/subjects/{topic_name}-first", json={"schema": _avro(ID, name="Imported")}
    )
    assert found.json()["id"] == first["id"]
    found = client.post(f"/subjects/{subject}", json={"schema": _avro(ID, name="Imported")})
    assert found.json()["version"] == 3
    clash = _register(client, subject, _avro(ID, name="Other"), id=first["id"] + 5000, version=4)
    assert_error(clash, 422, 42205)  # an id names one schema
