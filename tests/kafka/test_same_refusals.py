"""One produce policy for both front-ends: the same bad produce sent over HTTP (Confluent v3)
and over Kafka's protocol (a raw Produce v9 frame, read with Kafka's own response schema) is
refused for the same reason, each in its protocol's codes, and appends nothing."""

from __future__ import annotations

import base64

import pyarrow as pa
import pytest
from kio.serial import entity_reader

from api.kafka.fetch_batches import encode_records
from api.kafka.messages import response_class
from tests.conftest import create_topic
from tests.kafka.test_hostile_frames import connect, read_answer, request_frame

pytestmark = pytest.mark.gateway

PRODUCE = 0
LIMIT_BYTES = 2_000
# Kafka's codes (clients/src/main/java/org/apache/kafka/common/protocol/Errors.java)
UNKNOWN_TOPIC_OR_PARTITION, MESSAGE_TOO_LARGE, INVALID_RECORD = 3, 10, 87


def kafka_produce(bootstrap: str, topic: str, partition: int, key: bytes | None, value: bytes):
    """(error code, error message) of a one-record Produce v9 to `partition`."""
    batch = encode_records(_one_record(key, value))
    body = {
        "acks": -1,
        "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
    }
    with connect(bootstrap) as sock:
        sock.sendall(request_frame(PRODUCE, 9, body))
        answer = read_answer(sock)
    response, _ = entity_reader(response_class(PRODUCE, 9))(answer, 5)  # id + tagged fields
    [result] = response.responses[0].partition_responses
    return result.error_code.value, result.error_message


def http_produce(http, topic: str, partition: int, key: bytes | None, value: bytes):
    """(status, body) of a one-record v3 produce to `partition`."""
    record = {
        "partition_id": partition,
        "value": {"type": "BINARY", "data": base64.b64encode(value).decode()},
    }
    if key is not None:
        record["key"] = {"type": "BINARY", "data": base64.b64encode(key).decode()}
    answer = http.post(f"/v3/clusters/lakelog/topics/{topic}/records", json=record)
    return answer.status_code, answer.json()


def _one_record(key: bytes | None, value: bytes) -> pa.Table:
    return pa.table(
        {
            "offset": pa.array([0], pa.int64()),
            "timestamp": pa.array([1_700_000_000_000_000], pa.timestamp("us", tz="UTC")),
            "timestamp_type": pa.array([0], pa.int8()),
            "key": pa.array([key], pa.binary()),
            "value": pa.array([value], pa.binary()),
            "headers": pa.array(
                [None], pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
            ),
        }
    )


def end_offset(http, topic: str) -> int:
    return http.get(f"/topics/{topic}/partitions/0/offsets").json()["end_offset"]


CASES = {
    # case: (partition, key, value size, compacted), HTTP (status, code), Kafka code, both say
    "too-large": ((0, b"k", 3 * LIMIT_BYTES, False), (413, 413), MESSAGE_TOO_LARGE, "max.message"),
    "keyless-on-compacted": ((0, None, 10, True), (422, 42214), INVALID_RECORD, "has no key"),
    "no-such-partition": ((7, b"k", 10, False), (404, 40403), UNKNOWN_TOPIC_OR_PARTITION, "7"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_bad_produce_is_refused_for_one_reason_over_both_protocols(
    bootstrap, http, topic_name, case
):
    (partition, key, size, compacted), http_codes, kafka_code, reason = CASES[case]
    configs = {"max.message.bytes": str(LIMIT_BYTES)}
    if compacted:
        configs["cleanup.policy"] = "compact"
    create_topic(http, topic_name, 1, **configs)
    value = b"v" * size

    status, body = http_produce(http, topic_name, partition, key, value)
    kafka_error, kafka_message = kafka_produce(bootstrap, topic_name, partition, key, value)

    assert (status, body["error_code"]) == http_codes
    assert kafka_error == kafka_code
    assert reason in body["message"] and reason in kafka_message
    assert end_offset(http, topic_name) == 0  # neither appended anything


def test_a_good_produce_is_taken_over_both_protocols(bootstrap, http, topic_name):
    """The control: the same shapes within the rules are appended by both."""
    create_topic(http, topic_name, 1, **{"max.message.bytes": str(LIMIT_BYTES)})
    status, body = http_produce(http, topic_name, 0, b"k", b"v" * 10)
    assert status == 200 and body["offset"] == 0
    assert kafka_produce(bootstrap, topic_name, 0, b"k", b"v" * 10)[0] == 0
    assert end_offset(http, topic_name) == 2


CREATE_TOPICS = 19


def test_create_topics_answers_the_created_topics_configs(bootstrap, topic_name):
    """Kafka answers CreateTopics (v5+) with the new topic's configs, which Java's AdminClient
    reads (it failed on a null list); the configs set in the request are the topic's own."""
    body = {
        "topics": [
            {
                "name": topic_name,
                "num_partitions": 2,
                "replication_factor": -1,
                "assignments": [],
                "configs": [{"name": "retention.ms", "value": "3600000"}],
            }
        ],
        "timeout": 5000,
        "validate_only": False,
    }
    with connect(bootstrap) as sock:
        sock.sendall(request_frame(CREATE_TOPICS, 7, body))
        answer = read_answer(sock)
    response, _ = entity_reader(response_class(CREATE_TOPICS, 7))(answer, 5)
    [topic] = response.topics
    assert topic.error_code.value == 0 and topic.num_partitions == 2
    configs = {config.name: config for config in topic.configs}
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].config_source == 1  # DYNAMIC_TOPIC_CONFIG: the topic's own
    assert configs["cleanup.policy"].value == "delete"
