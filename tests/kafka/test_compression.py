"""The topic config `compression.type` over Kafka's protocol: `producer` (the default) sends each
record back in a batch compressed as its producer's was (lakelog keeps the codec per record,
FORMAT.md §18), a codec recompresses every batch with it, `uncompressed` sends none. Checked on
the wire (a raw Fetch: each batch's codec bits) and with unmodified consumers: librdkafka and
Kafka's Java console consumer (which reads snappy only in Java's xerial framing)."""

from __future__ import annotations

import struct

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kio.index import load_response_schema
from kio.serial import entity_reader

from api.kafka.codec import COMPRESSION_MASK, decode_batches
from tests import apache_kafka
from tests.kafka.test_hostile_frames import connect, read_answer, request_frame

pytestmark = pytest.mark.gateway

FETCH = 1
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def make_topic(bootstrap: str, name: str, **configs) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(30)


def produce(bootstrap: str, topic: str, values: list[bytes], codec: str) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 50}
    )
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0


def fetched_batches(bootstrap: str, topic: str) -> list[tuple[int, list[bytes]]]:
    """(codec id, values) of each batch a Fetch v12 from offset 0 returns."""
    body = {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 24,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                     "last_fetched_epoch": -1, "log_start_offset": -1,
                     "partition_max_bytes": 1 << 24}
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }  # fmt: skip
    with connect(bootstrap) as sock:
        sock.sendall(request_frame(FETCH, 12, body))
        payload = read_answer(sock)
    schema = load_response_schema(FETCH, 12)
    response, _ = entity_reader(schema)(payload, 5)  # after the correlation id and header tags
    records = response.responses[0].partitions[0].records
    batches, position = [], 0
    while position < len(records):
        (length,) = struct.unpack_from(">i", records, position + 8)
        batch = records[position : position + 12 + length]
        (attributes,) = struct.unpack_from(">h", batch, 21)
        (decoded,) = decode_batches(batch)
        values = [bytes(v) for v in decoded.records.table.column("value").to_pylist()]
        batches.append((attributes & COMPRESSION_MASK, values))
        position += 12 + length
    return batches


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd", "none"])
def test_producer_keeps_each_producers_codec(bootstrap, topic_name, codec):
    make_topic(bootstrap, topic_name)
    values = [f"value-{n}".encode() * 20 for n in range(50)]
    produce(bootstrap, topic_name, values, codec)
    batches = fetched_batches(bootstrap, topic_name)
    assert {codec_id for codec_id, _ in batches} == {CODEC_IDS[codec]}
    assert [v for _, batch in batches for v in batch] == values


def test_two_producers_codecs_in_one_fetch(bootstrap, topic_name):
    # compressible values: librdkafka sends a batch uncompressed when its codec saves nothing
    zstd, lz4, plain = ([f"{name}-{n}".encode() * 40 for n in range(2)] for name in ("z", "l", "p"))
    make_topic(bootstrap, topic_name)
    produce(bootstrap, topic_name, zstd, "zstd")
    produce(bootstrap, topic_name, lz4, "lz4")
    produce(bootstrap, topic_name, plain, "none")
    assert fetched_batches(bootstrap, topic_name) == [(4, zstd), (3, lz4), (0, plain)]


def test_a_topic_codec_recompresses_and_uncompressed_sends_none(bootstrap, http, topic_name):
    make_topic(bootstrap, topic_name, **{"compression.type": "gzip"})
    produce(bootstrap, topic_name, [b"was-zstd"], "zstd")
    create_answer = http.post(
        f"/v3/clusters/lakelog/topics/{topic_name}/records",
        json={"value": {"type": "BINARY", "data": "aHR0cA=="}},  # "http"
    )
    assert create_answer.status_code == 200, create_answer.text
    assert fetched_batches(bootstrap, topic_name) == [(1, [b"was-zstd", b"http"])]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry("compression.type", "uncompressed",
                        incremental_operation=AlterConfigOpType.SET)  # fmt: skip
    resource = ConfigResource("topic", topic_name, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(30)
    assert fetched_batches(bootstrap, topic_name) == [(0, [b"was-zstd", b"http"])]


def test_an_unknown_codec_is_an_invalid_config(bootstrap, topic_name):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics(
        [NewTopic(topic_name, 1, 1, config={"compression.type": "brotli"})]
    )
    with pytest.raises(Exception) as refused:
        future[topic_name].result(30)
    assert "INVALID_CONFIG" in str(refused.value) or "compression.type" in str(refused.value)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_consumers_read_every_codec(bootstrap, topic_name, codec):
    make_topic(bootstrap, topic_name, **{"compression.type": codec})
    values = [f"record-{n}" for n in range(20)]
    produce(bootstrap, topic_name, [v.encode() for v in values], "none")

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic_name}-c"})
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    seen = []
    while len(seen) < len(values):
        message = consumer.poll(10)
        assert message is not None, f"librdkafka read {len(seen)} of {len(values)}"
        assert message.error() is None, message.error()
        seen.append(message.value().decode())
    consumer.close()
    assert seen == values

    java = apache_kafka.tool(
        "kafka-console-consumer", "--bootstrap-server", bootstrap, "--topic", topic_name,
        "--from-beginning", "--max-messages", str(len(values)), "--timeout-ms", "30000",
    )  # fmt: skip
    assert java.returncode == 0, java.stderr[-3000:]
    assert java.stdout.split() == values
