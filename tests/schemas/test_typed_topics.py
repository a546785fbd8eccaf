"""Typed topics end to end: records produced with Confluent's serializers through the Kafka
listener are decoded on the leader and their fields stored as typed columns of the partition
table (FORMAT.md §17), read here with delta-rs (no lakelog code); the topic's schema
validation refuses what does not fit, over Kafka and over HTTP, and writes nothing of a
refused batch."""

from __future__ import annotations

import base64
import json

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from deltalake import DeltaTable

from storage_layout.paths import partition_table_uri
from tests.conftest import BINARY_V2, create_topic
from tests.kafka.test_clients import create, produce_all
from tests.schemas.test_serializers import ORDER_AVRO, _compiled_order

pytestmark = pytest.mark.gateway

ORDER_V2 = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "acme",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "item", "type": "string"},
            {"name": "qty", "type": ["null", "int"], "default": None},
            {"name": "note", "type": ["null", "string"], "default": None},
        ],
    }
)


@pytest.fixture
def registry(kafka_gateway) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": kafka_gateway.url})


def _rows(gateway, topic: str, *columns: str) -> list[dict]:
    table = DeltaTable(partition_table_uri(gateway.root, topic, 0))
    return table.to_pyarrow_table(columns=["offset", *columns]).sort_by("offset").to_pylist()


def _context(topic: str, key: bool = False) -> SerializationContext:
    return SerializationContext(topic, MessageField.KEY if key else MessageField.VALUE)


def test_avro_values_and_keys_become_typed_columns(kafka_gateway, bootstrap, registry, topic_name):
    create(bootstrap, topic_name)
    v1, v2 = AvroSerializer(registry, ORDER_AVRO), AvroSerializer(registry, ORDER_V2)
    keys = AvroSerializer(registry, '"string"')
    value = _context(topic_name)
    records = [
        {
            "key": keys("k0", _context(topic_name, True)),
            "value": v1({"id": 0, "item": "a", "qty": None}, value),
        },
        {"value": v1({"id": 1, "item": "b", "qty": 2}, value)},
        {"value": b"raw bytes, no schema"},
        {"value": v2({"id": 3, "item": "c", "qty": None, "note": "new field"}, value)},
    ]
    produce_all(bootstrap, topic_name, records)
    rows = _rows(kafka_gateway, topic_name, "value_fields", "key_fields", "value")
    assert [r["value_fields"] for r in rows] == [
        {"id": 0, "item": "a", "qty": None, "note": None},
        {"id": 1, "item": "b", "qty": 2, "note": None},
        None,
        {"id": 3, "item": "c", "qty": None, "note": "new field"},
    ]
    assert rows[0]["key_fields"] == {"value": "k0"} and rows[1]["key_fields"] is None
    # the raw bytes stay exactly as produced
    assert [r["value"] for r in rows] == [r["value"] for r in records]
    ids = [r["value_schema_id"] for r in _rows(kafka_gateway, topic_name, "value_schema_id")]
    assert ids[2] is None and ids[0] == ids[1] != ids[3]


def test_json_schema_and_protobuf_values(kafka_gateway, bootstrap, registry, topic_name, tmp_path):
    json_topic, proto_topic = f"{topic_name}-json", f"{topic_name}-proto"
    create(bootstrap, json_topic)
    create(bootstrap, proto_topic)
    schema = json.dumps(
        {
            "type": "object",
            "title": "Reading",
            "properties": {
                "sensor": {"type": "string"},
                "celsius": {"type": "number"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "first seen": {"type": "integer"},
            },
        }
    )
    serialize = JSONSerializer(schema, registry)
    document = {"sensor": "s1", "celsius": 21.5, "tags": ["a"], "first seen": 7}
    produce_all(bootstrap, json_topic, [{"value": serialize(document, _context(json_topic))}])
    (row,) = _rows(kafka_gateway, json_topic, "value_fields")
    # a name Delta refuses (the space) is stored with `_`
    assert row["value_fields"] == {"sensor": "s1", "celsius": 21.5, "tags": ["a"], "first_seen": 7}

    order = _compiled_order(tmp_path)
    serialize = ProtobufSerializer(order, registry, {"use.deprecated.format": False})
    message = order(id=5, item="pen", tags=["x", "y"])
    produce_all(bootstrap, proto_topic, [{"value": serialize(message, _context(proto_topic))}])
    (row,) = _rows(kafka_gateway, proto_topic, "value_fields")
    assert row["value_fields"] == {"id": 5, "item": "pen", "tags": ["x", "y"]}


def _validating_topic(client, name: str) -> None:
    create_topic(client, name, confluent_value_schema_validation="true")


def test_validation_refuses_records_over_http_one_by_one(
    kafka_gateway, client_of_kafka_gateway, registry, topic_name
):
    client = client_of_kafka_gateway
    _validating_topic(client, topic_name)
    good = AvroSerializer(registry, ORDER_AVRO)(
        {"id": 1, "item": "a", "qty": None}, _context(topic_name)
    )
    other_subject = AvroSerializer(registry, ORDER_V2)(
        {"id": 1, "item": "a", "qty": None, "note": None}, _context(f"{topic_name}-elsewhere")
    )
    truncated = good[:-2]
    # a payload valid for another schema, behind this topic's schema id
    foreign = good[:5] + other_subject[5:]
    values = [good, b"no schema", other_subject, truncated, b"\x00\x00\x0f\x42\x40abc", foreign]
    body = {"records": [{"value": base64.b64encode(v).decode()} for v in values]}
    answer = client.post(f"/topics/{topic_name}", json=body, headers={"Content-Type": BINARY_V2})
    offsets = answer.json()["offsets"]
    assert offsets[0]["error_code"] is None
    assert [o["error_code"] for o in offsets[1:]] == [42205] * 5
    assert "names no schema" in offsets[1]["error"]
    assert "not registered under subject" in offsets[2]["error"]
    assert "does not decode" in offsets[3]["error"]
    assert "not in the registry" in offsets[4]["error"]
    assert "bytes left over" in offsets[5]["error"]
    assert len(_rows(kafka_gateway, topic_name, "value")) == 1


def test_validation_refuses_a_kafka_batch_whole(
    kafka_gateway, client_of_kafka_gateway, bootstrap, registry, topic_name
):
    _validating_topic(client_of_kafka_gateway, topic_name)
    good = AvroSerializer(registry, ORDER_AVRO)(
        {"id": 1, "item": "a", "qty": None}, _context(topic_name)
    )
    # One batch: a 2 s linger, so a stall of the loaded machine between the three produce()
    # calls does not split it (200 ms did once in a full run).
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2000, "retries": 0})
    reports = []
    for value in (good, good, b"not framed"):
        producer.produce(topic_name, value=value, on_delivery=lambda e, m: reports.append(e))
    producer.flush(30)
    assert [e.code() if e else None for e in reports] == [KafkaError.INVALID_RECORD] * 3
    assert _rows(kafka_gateway, topic_name, "value") == []
    produce_all(bootstrap, topic_name, [{"value": good}])
    assert len(_rows(kafka_gateway, topic_name, "value")) == 1


RECURSIVE = json.dumps(
    {
        "type": "record",
        "name": "Node",
        "namespace": "acme",
        "fields": [{"name": "next", "type": ["null", "Node"], "default": None}],
    }
)
ZERO_WIDTH = json.dumps(
    {
        "type": "record",
        "name": "Z",
        "namespace": "acme",
        "fields": [
            {
                "name": "empties",
                "type": {
                    "type": "array",
                    "items": {"type": "record", "name": "Empty", "fields": []},
                },
            }
        ],
    }
)


def test_hostile_values_are_stored_untyped_and_the_node_lives(
    kafka_gateway, bootstrap, client_of_kafka_gateway, registry, topic_name
):
    """A recursive schema's deep value (which would overflow a decoder's stack), arrays of
    zero-width items claiming billions of them, and a truncated GUID header: each record is
    appended as bytes, untyped, and the node keeps serving."""
    create(bootstrap, topic_name)
    from confluent_kafka.schema_registry import Schema

    recursive_id = registry.register_schema(f"{topic_name}-value", Schema(RECURSIVE, "AVRO"))
    client_of_kafka_gateway.put(f"/config/{topic_name}-value", json={"compatibility": "NONE"})
    zero_id = registry.register_schema(f"{topic_name}-value", Schema(ZERO_WIDTH, "AVRO"))
    deep = b"\x00" + recursive_id.to_bytes(4, "big") + b"\x02" * 100_000 + b"\x00"
    billions = b"\x00" + zero_id.to_bytes(4, "big") + b"\xfe\xff\xff\xff\x0f" * 50 + b"\x00"
    records = [
        {"value": deep},
        {"value": billions},
        {"value": b"plain", "headers": [("__value_schema_id", b"\x01abcd")]},
    ]
    produce_all(bootstrap, topic_name, records)
    table = DeltaTable(partition_table_uri(kafka_gateway.root, topic_name, 0))
    assert "value_fields" not in table.schema().to_arrow().names  # nothing was typed
    rows = _rows(kafka_gateway, topic_name, "value")
    assert [r["value"] for r in rows] == [r["value"] for r in records]
    assert client_of_kafka_gateway.get("/subjects").status_code == 200
