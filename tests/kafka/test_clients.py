"""Unmodified Kafka clients against a real gateway's Kafka listener: librdkafka
(confluent-kafka) and kafka-python create topics, produce (idempotent, every codec), consume and
list offsets; what one API writes the other reads at the same offsets."""

from __future__ import annotations

import base64
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tests.kafka.wire import raw

pytestmark = pytest.mark.gateway

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
POLL_DEADLINE_S = 30
CREATE_TOPICS = 19


def create(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce_all(bootstrap: str, topic: str, records: list[dict], **config) -> list:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **config})
    reports = []
    for record in records:
        producer.produce(topic, **record, on_delivery=lambda e, m: reports.append((e, m)))
    assert producer.flush(30) == 0, "records left undelivered"
    errors = [error for error, _ in reports if error is not None]
    assert errors == []
    return [message for _, message in reports]


def consume(bootstrap: str, topic: str, partitions: list[int], count: int, **config) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}",
            "enable.auto.commit": False,
            **config,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    messages, deadline = [], time.monotonic() + POLL_DEADLINE_S
    try:
        while len(messages) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            messages.append(message)
    finally:
        consumer.close()
    return messages


def test_admin_creates_lists_grows_and_deletes_topics(bootstrap, topic_name):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic_name, 2, 1, config={"retention.ms": "60000"})])[
        topic_name
    ].result(30)
    metadata = admin.list_topics(timeout=30)
    assert len(metadata.topics[topic_name].partitions) == 2
    assert [b.port for b in metadata.brokers.values()] == [int(bootstrap.rsplit(":", 1)[1])]

    again = admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name]
    with pytest.raises(Exception) as exists:
        again.result(30)
    assert exists.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    admin.create_partitions([NewPartitions(topic_name, 4)])[topic_name].result(30)
    assert len(admin.list_topics(timeout=30).topics[topic_name].partitions) == 4
    admin.delete_topics([topic_name])[topic_name].result(30)
    assert topic_name not in admin.list_topics(timeout=30).topics


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_produce_with_every_codec_reads_back_exactly(bootstrap, http, topic_name, codec):
    create(bootstrap, topic_name, partitions=2)
    records = [
        {
            "key": f"key-{i}".encode(),
            "value": (f"value-{i}-" + "x" * 50).encode(),
            "headers": [("trace", f"t{i}".encode())],
            "timestamp": 1_700_000_000_000 + i,
        }
        for i in range(200)
    ]

    acked = produce_all(bootstrap, topic_name, records, **{"compression.type": codec})
    read = consume(bootstrap, topic_name, [0, 1], len(records))

    sent = {r["key"]: r for r in records}
    assert len(read) == len(records)
    for message in read:
        record = sent[message.key()]
        assert message.value() == record["value"]
        assert message.headers() == record["headers"]
        assert message.timestamp()[1] == record["timestamp"]
    positions = sorted((m.partition(), m.offset()) for m in acked)
    assert positions == sorted((m.partition(), m.offset()) for m in read)
    for partition in (0, 1):  # dense offsets from 0, nothing twice
        offsets = sorted(o for p, o in positions if p == partition)
        assert offsets == list(range(len(offsets)))
    over_http = http.get(
        f"/topics/{topic_name}/partitions/0/records",
        params={"offset": 0},
        headers={"Accept": "application/vnd.kafka.binary.v2+json"},
    ).json()
    by_offset = {m.offset(): m for m in read if m.partition() == 0}
    for item in over_http:
        assert base64.b64decode(item["value"]) == by_offset[item["offset"]].value()


def test_http_writes_and_kafka_reads_at_the_same_offsets(bootstrap, http, topic_name):
    create(bootstrap, topic_name)
    body = {"records": [{"value": base64.b64encode(f"h{i}".encode()).decode()} for i in range(5)]}
    answer = http.post(
        f"/topics/{topic_name}/partitions/0",
        json=body,
        headers={"Content-Type": "application/vnd.kafka.binary.v2+json"},
    )
    assert answer.status_code == 200, answer.text
    read = consume(bootstrap, topic_name, [0], 5)
    assert [(m.offset(), m.value()) for m in read] == [(i, f"h{i}".encode()) for i in range(5)]


def test_keys_land_where_the_http_partitioner_puts_them(bootstrap, http, topic_name):
    create(bootstrap, topic_name, partitions=6)
    keys = [f"customer-{i}".encode() for i in range(40)]
    acked = produce_all(
        bootstrap,
        topic_name,
        [{"key": key, "value": b"v"} for key in keys],
        partitioner="murmur2_random",  # the Java client's partitioner
    )
    body = {"records": [{"key": base64.b64encode(key).decode(), "value": None} for key in keys]}
    answer = http.post(
        f"/topics/{topic_name}",
        json=body,
        headers={"Content-Type": "application/vnd.kafka.binary.v2+json"},
    )
    over_http = [o["partition"] for o in answer.json()["offsets"]]
    over_kafka = {m.key(): m.partition() for m in acked}  # reports come in delivery order
    assert [over_kafka[key] for key in keys] == over_http
    assert len(set(over_http)) > 1


def test_offsets_by_time_and_watermarks(bootstrap, topic_name):
    create(bootstrap, topic_name)
    records = [{"value": b"v", "timestamp": 1_700_000_000_000 + 1000 * i} for i in range(10)]
    produce_all(bootstrap, topic_name, records)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"times-{topic_name}"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic_name, 0), 30) == (0, 10)
        [found] = consumer.offsets_for_times([TopicPartition(topic_name, 0, 1_700_000_004_500)], 30)
        assert found.offset == 5
        [after] = consumer.offsets_for_times([TopicPartition(topic_name, 0, 1_800_000_000_000)], 30)
        assert after.offset == -1  # no record at or after: Kafka's "end"
    finally:
        consumer.close()


def test_kafka_python_produces_and_consumes(bootstrap, topic_name):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as Tp

    create(bootstrap, topic_name)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    futures = [producer.send(topic_name, key=b"k", value=f"m{i}".encode()) for i in range(20)]
    producer.flush(30)
    assert [f.get(30).offset for f in futures] == list(range(20))
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=5000)
    consumer.assign([Tp(topic_name, 0)])
    consumer.seek_to_beginning()
    values = [message.value for message in consumer]
    consumer.close()
    assert values == [f"m{i}".encode() for i in range(20)]


def test_admin_describes_and_alters_topic_configs(bootstrap, topic_name):
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        ResourceType,
    )

    create(bootstrap, topic_name)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic_name)

    def described() -> dict:
        return admin.describe_configs([resource])[resource].result(30)

    before = described()
    assert before["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    change = ConfigResource(
        ResourceType.TOPIC,
        topic_name,
        incremental_configs=[
            ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([change])[change].result(30)
    after = described()
    assert after["retention.ms"].value == "60000"
    assert after["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    reset = ConfigResource(
        ResourceType.TOPIC,
        topic_name,
        incremental_configs=[
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)
        ],
    )
    admin.incremental_alter_configs([reset])[reset].result(30)
    assert described()["retention.ms"].value == before["retention.ms"].value
    bad = ConfigResource(
        ResourceType.TOPIC,
        topic_name,
        incremental_configs=[
            ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(Exception) as refused:
        admin.incremental_alter_configs([bad])[bad].result(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    cluster = admin.describe_cluster().result(30)
    assert cluster.cluster_id == "lakelog" and len(cluster.nodes) == 1
    from confluent_kafka import TopicCollection

    [described] = admin.describe_topics(
        TopicCollection([topic_name]), include_authorized_operations=True
    ).values()
    assert len(described.result(30).authorized_operations) == 8  # ACLs off: all of a topic's


def test_delete_records_moves_the_log_start_for_every_reader(bootstrap, http, topic_name):
    create(bootstrap, topic_name)
    produce_all(bootstrap, topic_name, [{"value": f"v{i}".encode()} for i in range(10)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.delete_records([TopicPartition(topic_name, 0, 6)]).values()
    assert future.result(30).low_watermark == 6
    offsets = http.get(f"/topics/{topic_name}/partitions/0/offsets").json()
    assert (offsets["beginning_offset"], offsets["end_offset"]) == (6, 10)
    # Asks for offset 0, gets OFFSET_OUT_OF_RANGE, resets to the log start.
    read = consume(bootstrap, topic_name, [0], 4, **{"auto.offset.reset": "earliest"})
    assert [m.offset() for m in read] == [6, 7, 8, 9]
    below = http.get(f"/topics/{topic_name}/partitions/0/records", params={"offset": 2})
    assert below.status_code == 416


def test_compacted_topic_refuses_a_batch_with_a_keyless_record(bootstrap, topic_name):
    """As Kafka: INVALID_RECORD for the batch, and nothing of it is appended."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(topic_name, 1, 1, config={"cleanup.policy": "compact"})
    admin.create_topics([topic])[topic_name].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "retries": 0})
    reports = []
    for record in ({"key": b"k", "value": b"a"}, {"value": b"no key"}):
        producer.produce(topic_name, **record, on_delivery=lambda e, m: reports.append(e))
    producer.flush(30)
    assert [error.code() for error in reports] == [KafkaError.INVALID_RECORD] * 2
    # Each keyless record is named (record_errors, as Kafka lists them): librdkafka fails
    # those with INVALID_RECORD and the rest of the batch with _INVALID_DIFFERENT_RECORD.
    reports.clear()
    for record in ({"value": b"x"}, {"key": b"k", "value": b"y"}) * 2:
        producer.produce(topic_name, **record, on_delivery=lambda e, m: reports.append(e))
    producer.flush(30)
    assert [error.code() for error in reports] == [
        KafkaError.INVALID_RECORD,
        KafkaError._INVALID_DIFFERENT_RECORD,
    ] * 2
    produce_all(bootstrap, topic_name, [{"key": b"k", "value": b"b"}])
    assert [m.value() for m in consume(bootstrap, topic_name, [0], 1)] == [b"b"]


def create_topics_raw(bootstrap: str, topic: dict) -> tuple[str, int]:
    """(error code name, partitions the topic has after) for one CreateTopics v7 entry."""
    body = {"topics": [{"configs": [], "assignments": [], **topic}], "timeout": 30000,
            "validate_only": False}  # fmt: skip
    [created] = raw(bootstrap, CREATE_TOPICS, 7, body).topics
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    listed = metadata.topics.get(topic["name"])
    return created.error_code.name, len(listed.partitions) if listed and not listed.error else 0


def test_create_topics_counts_partitions_as_kafka_does(bootstrap, topic_name):
    """A replica assignment gives the partition count (librdkafka's 0081 creates 22 so);
    -1 is the default (num.partitions); both at once, or a bad assignment, is refused with
    Kafka's code and nothing is created."""
    assignment = [{"partition_index": n, "broker_ids": [0]} for n in range(22)]
    by_assignment = {"name": f"{topic_name}-a", "num_partitions": -1, "replication_factor": -1,
                     "assignments": assignment}  # fmt: skip
    assert create_topics_raw(bootstrap, by_assignment) == ("none", 22)
    default = {"name": f"{topic_name}-d", "num_partitions": -1, "replication_factor": -1}
    assert create_topics_raw(bootstrap, default) == ("none", 1)
    both = {**by_assignment, "name": f"{topic_name}-b", "num_partitions": 3}
    assert create_topics_raw(bootstrap, both) == ("invalid_request", 0)
    backwards = {**by_assignment, "name": f"{topic_name}-r", "assignments": assignment[::-1]}
    assert create_topics_raw(bootstrap, backwards) == ("none", 22)  # any order, as Kafka
    missing = [{"partition_index": 1, "broker_ids": [0]}]
    repeating = [{"partition_index": 0, "broker_ids": [0, 0]}]
    for bad in (missing, repeating):
        entry = {**by_assignment, "name": f"{topic_name}-x", "assignments": bad}
        assert create_topics_raw(bootstrap, entry) == ("invalid_replica_assignment", 0)
