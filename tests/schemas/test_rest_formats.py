"""The REST Proxy's schema formats: v2 produce with `avro`, `jsonschema` and `protobuf` bodies,
v3 records typed AVRO/JSONSCHEMA/PROTOBUF, v2 consumer instances and stateless fetches of
those formats. What HTTP writes, Confluent's deserializers read over Kafka; what Confluent's
serializers write over Kafka, HTTP returns as JSON."""

from __future__ import annotations

import base64
import json

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.conftest import create_topic
from tests.integration.test_consumers_v2 import new_consumer, records, subscribe
from tests.kafka.test_clients import consume, produce_all
from tests.schemas.test_serializers import ORDER_AVRO
from tests.security.helpers import assert_error

pytestmark = pytest.mark.gateway

AVRO_V2 = "application/vnd.kafka.avro.v2+json"
V3 = "/v3/clusters/lakelog"
PROTO = 'syntax = "proto3";\npackage acme;\nmessage Order { int64 id = 1; string item = 2; }\n'


@pytest.fixture
def http(client_of_kafka_gateway):
    return client_of_kafka_gateway


@pytest.fixture
def registry(kafka_gateway) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": kafka_gateway.url})


def _context(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def test_v2_avro_produce_is_read_by_confluents_deserializer(http, bootstrap, registry, topic_name):
    create_topic(http, topic_name)
    body = {
        "value_schema": ORDER_AVRO,
        "key_schema": '"string"',
        "records": [
            {"key": "k1", "value": {"id": 1, "item": "pen", "qty": {"int": 2}}},
            {"value": {"id": 2, "item": "ink", "qty": None}},
        ],
    }
    answer = http.post(f"/topics/{topic_name}", json=body, headers={"Content-Type": AVRO_V2})
    assert answer.status_code == 200, answer.text
    ids = answer.json()
    assert ids["value_schema_id"] == registry.get_latest_version(f"{topic_name}-value").schema_id
    assert ids["key_schema_id"] is not None
    again = {
        "value_schema_id": ids["value_schema_id"],
        "records": [{"value": {"id": 3, "item": "x", "qty": None}}],
    }
    assert (
        http.post(
            f"/topics/{topic_name}", json=again, headers={"Content-Type": AVRO_V2}
        ).status_code
        == 200
    )

    read = consume(bootstrap, topic_name, [0], 3)
    deserialize = AvroDeserializer(registry)
    assert [deserialize(m.value(), _context(topic_name)) for m in read] == [
        {"id": 1, "item": "pen", "qty": 2},
        {"id": 2, "item": "ink", "qty": None},
        {"id": 3, "item": "x", "qty": None},
    ]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"records": [{"value": {"id": 1}}]}, 42202),
        ({"value_schema": '"long"', "records": [{"key": "k", "value": 1}]}, 42201),
        ({"value_schema": ORDER_AVRO, "records": [{"value": {"id": "not a long"}}]}, 42205),
        ({"value_schema_id": 987654, "records": [{"value": 1}]}, 42205),
        ({"value_schema": "{not avro", "records": [{"value": 1}]}, 42205),
    ],
)
def test_v2_avro_produce_refusals(http, topic_name, body, code):
    create_topic(http, topic_name)
    answer = http.post(f"/topics/{topic_name}", json=body, headers={"Content-Type": AVRO_V2})
    assert_error(answer, 422, code)


def test_v2_consumers_and_fetches_decode_what_serializers_wrote(
    http, bootstrap, registry, topic_name
):
    create_topic(http, topic_name)
    serialize = AvroSerializer(registry, ORDER_AVRO)
    values = [{"id": i, "item": f"i{i}", "qty": None} for i in range(3)]
    produce_all(
        bootstrap, topic_name, [{"value": serialize(v, _context(topic_name))} for v in values]
    )

    group = f"g-{topic_name}"
    consumer = new_consumer(http, group, format="avro")
    subscribe(http, consumer, [topic_name])
    items = []
    for _ in range(20):
        items += records(http, consumer, accept=AVRO_V2, timeout=500)
        if len(items) >= 3:
            break
    assert [item["value"] for item in items] == values
    fetched = http.get(
        f"/topics/{topic_name}/partitions/0/records",
        params={"offset": 0},
        headers={"Accept": AVRO_V2},
    )
    assert [item["value"] for item in fetched.json()] == values


def test_v3_typed_records(http, bootstrap, registry, topic_name):
    create_topic(http, topic_name)
    schema_id = registry.register_schema(f"{topic_name}-value", _schema(ORDER_AVRO))
    url = f"{V3}/topics/{topic_name}/records"
    by_id = {
        "value": {
            "type": "AVRO",
            "schema_id": schema_id,
            "data": {"id": 1, "item": "a", "qty": None},
        }
    }
    latest = {"value": {"type": "AVRO", "data": {"id": 2, "item": "b", "qty": {"int": 5}}}}
    reports = [http.post(url, json=document).json() for document in (by_id, latest)]
    assert reports[0]["value"]["type"] == "AVRO" and reports[0]["value"]["schema_id"] == schema_id
    assert reports[1]["value"]["schema_version"] == 1 and reports[1]["error_code"] == 200
    deserialize = AvroDeserializer(registry)
    read = consume(bootstrap, topic_name, [0], 2)
    assert [deserialize(m.value(), _context(topic_name))["qty"] for m in read] == [None, 5]

    proto_topic = f"{topic_name}-p"
    create_topic(http, proto_topic)
    document = {
        "value": {"type": "PROTOBUF", "raw_schema": PROTO, "data": {"id": "7", "item": "x"}}
    }
    report = http.post(f"{V3}/topics/{proto_topic}/records", json=document).json()
    assert report["error_code"] == 200, report
    raw = http.get(f"/topics/{proto_topic}/partitions/0/records", params={"offset": 0}).json()
    data = base64.b64decode(raw[0]["value"])
    assert data[0] == 0 and data[5] == 0  # the id's prefix, and message indexes [0]

    json_topic = f"{topic_name}-j"
    create_topic(http, json_topic)
    misfit = {
        "value": {
            "type": "JSONSCHEMA",
            "raw_schema": json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}}),
            "data": {"n": "x"},
        }
    }
    report = http.post(f"{V3}/topics/{json_topic}/records", json=misfit).json()
    assert report["error_code"] == 42205 and "'x' is not of type 'integer'" in report["message"]


def test_a_stream_keeps_its_order_when_an_early_record_is_slower_to_prepare(http, topic_name):
    """A streamed record that needs its schema registered first (slow: the registry writes it)
    is followed by plain ones prepared at once: each is queued only after the one before, so
    the offsets follow the stream."""
    create_topic(http, topic_name)
    typed = {"value": {"type": "PROTOBUF", "raw_schema": PROTO, "data": {"id": "1", "item": "x"}}}
    plain = [{"value": {"type": "STRING", "data": f"s{n}"}} for n in range(20)]
    chunks = [json.dumps(document).encode() + b"\n" for document in [typed, *plain]]
    response = http.post(f"{V3}/topics/{topic_name}/records", content=iter(chunks))
    assert response.status_code == 200, response.text
    reports = [json.loads(line) for line in response.text.split("\r\n") if line]
    assert [r["error_code"] for r in reports] == [200] * 21
    assert [r["offset"] for r in reports] == list(range(21))


def _schema(text: str):
    from confluent_kafka.schema_registry import Schema

    return Schema(text, "AVRO")
