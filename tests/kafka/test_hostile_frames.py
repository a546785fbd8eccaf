"""Bad input on the Kafka listener of a real gateway: oversized, negative, truncated and never
finished frames, unknown API keys and versions, damaged record batches and random mutations of
valid requests. Each gets the right error code or a closed connection; the node keeps serving
and nothing acknowledged is lost."""

from __future__ import annotations

import random
import struct
import time

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.serial import entity_reader

from api.kafka.fetch_batches import encode_records
from api.kafka.messages import response_class
from tests.gateway_process import start_gateway
from tests.kafka.test_clients import consume, create, produce_all
from tests.kafka.wire import connect, raw, read_answer, request_frame  # noqa: F401 (re-exported)

pytestmark = pytest.mark.gateway

API_VERSIONS, METADATA, PRODUCE = 18, 3, 0
FUZZ_CASES = 300


def api_versions_answered(address: str) -> bool:
    with connect(address) as sock:
        sock.sendall(
            request_frame(
                API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
            )
        )
        return read_answer(sock) is not None


def closed_after(address: str, data: bytes) -> bool:
    with connect(address) as sock:
        sock.sendall(data)
        return read_answer(sock) is None


@pytest.mark.parametrize(
    "data",
    [
        struct.pack(">i", 200 * 1024 * 1024),  # above LAKELOG_KAFKA_REQUEST_BYTES_MAX
        struct.pack(">i", -5),
        struct.pack(">i", 8) + struct.pack(">hhi", 9999, 0, 1),  # unknown API key
        struct.pack(">i", 8) + struct.pack(">hhi", PRODUCE, 1, 1),  # Produce v1: removed in 4.0
        struct.pack(">i", 3) + b"\x00\x03\x00",  # shorter than a header
        struct.pack(">i", 12) + struct.pack(">hhi", METADATA, 12, 1) + b"\xff\xff\xff\xff",
    ],
    ids=["oversized", "negative", "unknown-api", "removed-version", "no-header", "garbage-body"],
)
def test_a_bad_frame_closes_its_connection_and_the_node_serves_on(bootstrap, data):
    assert closed_after(bootstrap, data)
    assert api_versions_answered(bootstrap)


def test_an_unknown_api_versions_version_is_answered_with_the_supported_ranges(bootstrap):
    with connect(bootstrap) as sock:
        payload = struct.pack(">hhi", API_VERSIONS, 99, 42) + struct.pack(">h", -1) + b"\x00" * 8
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        answer = read_answer(sock)
    assert answer is not None
    (correlation_id,) = struct.unpack_from(">i", answer)
    body, _ = entity_reader(response_class(API_VERSIONS, 0))(answer, 4)
    assert correlation_id == 42 and body.error_code.value == 35  # UNSUPPORTED_VERSION
    ranges = {key.api_key: (key.min_version, key.max_version) for key in body.api_keys}
    assert ranges[API_VERSIONS] == (0, 4) and PRODUCE in ranges


def test_a_damaged_batch_is_corrupt_message_and_appends_nothing(bootstrap, topic_name):
    create(bootstrap, topic_name)
    produce_all(bootstrap, topic_name, [{"value": b"kept"}])
    batch = bytearray(encode_records(_records([b"damaged"])))
    batch[-1] ^= 0xFF  # the CRC no longer matches
    body = {
        "acks": -1,
        "timeout": 5000,
        "topic_data": [
            {"name": topic_name, "partition_data": [{"index": 0, "records": bytes(batch)}]}
        ],
    }
    with connect(bootstrap) as sock:
        sock.sendall(request_frame(PRODUCE, 9, body))
        answer = read_answer(sock)
    response, _ = entity_reader(response_class(PRODUCE, 9))(answer, 5)  # id + tagged fields
    [partition] = response.responses[0].partition_responses
    assert partition.error_code.value == 2  # CORRUPT_MESSAGE
    assert high_watermark(bootstrap, topic_name) == 1
    assert [m.value() for m in consume(bootstrap, topic_name, [0], 1)] == [b"kept"]


def test_a_frame_never_finished_is_dropped_after_the_frame_timeout(tmp_path_factory):
    env = {"LAKELOG_KAFKA_FRAME_TIMEOUT_MS": "500"}
    gateway = start_gateway(tmp_path_factory.mktemp("slow") / "data", env=env, kafka=True)
    try:
        with connect(gateway.kafka_address) as sock:
            sock.sendall(struct.pack(">i", 100) + b"\x00" * 10)  # 90 bytes never come
            started = time.monotonic()
            assert read_answer(sock) is None
            assert time.monotonic() - started < 5
        assert api_versions_answered(gateway.kafka_address)
    finally:
        gateway.stop()


def test_an_idle_connection_is_closed_after_the_idle_timeout(tmp_path_factory):
    """connections.max.idle.ms: a connection that sends nothing is closed, and the node
    still answers others."""
    env = {"LAKELOG_KAFKA_IDLE_TIMEOUT_MS": "500"}
    gateway = start_gateway(tmp_path_factory.mktemp("idle") / "data", env=env, kafka=True)
    try:
        with connect(gateway.kafka_address) as sock:
            started = time.monotonic()
            assert read_answer(sock) is None  # closed by the node, not by this test
            assert 0.4 < time.monotonic() - started < 5
        assert api_versions_answered(gateway.kafka_address)
    finally:
        gateway.stop()


def test_random_mutations_of_valid_requests_never_break_the_node(bootstrap, topic_name):
    create(bootstrap, topic_name)
    acked = produce_all(bootstrap, topic_name, [{"value": f"v{i}".encode()} for i in range(5)])
    valid = [
        request_frame(
            API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
        ),
        request_frame(
            METADATA,
            12,
            {"topics": [{"name": topic_name}], "include_topic_authorized_operations": False},
        ),
        request_frame(
            PRODUCE,
            9,
            {
                "acks": -1,
                "timeout": 5000,
                "topic_data": [
                    {
                        "name": topic_name,
                        "partition_data": [
                            {"index": 0, "records": encode_records(_records([b"z"]))}
                        ],
                    }
                ],
            },
        ),
    ]
    rng = random.Random(1)
    for _ in range(FUZZ_CASES):
        frame = bytearray(rng.choice(valid))
        for _ in range(rng.randint(1, 4)):
            position = rng.randrange(4, len(frame))  # keep the size: mutate the request
            frame[position] = rng.randrange(256)
        with connect(bootstrap) as sock:
            sock.settimeout(10)
            sock.sendall(bytes(frame))
            read_answer(sock)  # an answer or a closed connection, never a hang
    assert api_versions_answered(bootstrap)
    end = high_watermark(bootstrap, topic_name)
    read = consume(bootstrap, topic_name, [0], end)
    assert [m.value() for m in read[:5]] == [m.value() for m in acked]  # acknowledged: kept
    assert [m.offset() for m in read] == list(range(end))  # dense, nothing twice


def high_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hw-{topic}"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), 30)[1]
    finally:
        consumer.close()


def _records(values: list[bytes]) -> pa.Table:
    count = len(values)
    return pa.table(
        {
            "offset": pa.array(range(count), pa.int64()),
            "timestamp": pa.array([1_700_000_000_000_000] * count, pa.timestamp("us", tz="UTC")),
            "timestamp_type": pa.array([0] * count, pa.int8()),
            "key": pa.array([None] * count, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "headers": pa.array(
                [None] * count, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
            ),
        }
    )


def test_auto_creation_creates_legal_topics_and_refuses_illegal_names(tmp_path_factory):
    env = {"LAKELOG_KAFKA_AUTO_CREATE_TOPICS": "true"}
    gateway = start_gateway(tmp_path_factory.mktemp("auto") / "data", env=env, kafka=True)
    try:
        body = {
            "topics": [{"name": "auto.created"}, {"name": "illegal$#!"}],
            "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False,
        }
        with connect(gateway.kafka_address) as sock:
            sock.sendall(request_frame(METADATA, 12, body))
            answer = read_answer(sock)
        assert answer is not None  # answered, not a dropped connection
        response, _ = entity_reader(response_class(METADATA, 12))(answer, 5)
        codes = {t.name: t.error_code.value for t in response.topics}
        assert codes == {"auto.created": 0, "illegal$#!": 17}  # INVALID_TOPIC_EXCEPTION
        created = {t.name: len(t.partitions) for t in response.topics}["auto.created"]
        assert created == 1
    finally:
        gateway.stop()
