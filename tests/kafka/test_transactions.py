"""Kafka transactions with confluent-kafka's transactional producer, unmodified, against a
real gateway: commit and abort across partitions, read_committed and read_uncommitted
consumers, consume-transform-produce with send_offsets_to_transaction, fencing of an older
producer of the same transactional id, and the abort of an abandoned transaction."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.gateway_process import start_gateway
from tests.kafka.test_clients import create, produce_all

pytestmark = pytest.mark.gateway

POLL_DEADLINE_S = 20


def transactional(bootstrap: str, transactional_id: str | None = None, **config) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id or f"txn-{uuid.uuid4().hex[:8]}",
            **config,
        }
    )
    producer.init_transactions(30)
    return producer


def read(bootstrap: str, topic: str, partitions: int, isolation: str, expected: int) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen, deadline = [], time.monotonic() + POLL_DEADLINE_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.value())
            elif message is None and len(seen) >= expected:
                break
    finally:
        consumer.close()
    return sorted(seen)


def test_a_committed_transaction_is_read_whole_and_an_aborted_one_never(bootstrap, topic_name):
    create(bootstrap, topic_name, partitions=2)
    producer = transactional(bootstrap)
    producer.begin_transaction()
    for n in range(4):
        producer.produce(topic_name, value=b"aborted-%d" % n, partition=n % 2)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    for n in range(4):
        producer.produce(topic_name, value=b"committed-%d" % n, partition=n % 2)
    producer.commit_transaction(30)

    committed = [b"committed-%d" % n for n in range(4)]
    assert read(bootstrap, topic_name, 2, "read_committed", 4) == committed
    everything = sorted(committed + [b"aborted-%d" % n for n in range(4)])
    assert read(bootstrap, topic_name, 2, "read_uncommitted", 8) == everything


def test_consume_transform_produce_commits_its_input_offsets_with_its_output(bootstrap, topic_name):
    source, sink, group = f"{topic_name}-in", f"{topic_name}-out", f"{topic_name}-etl"
    create(bootstrap, source)
    create(bootstrap, sink)
    produce_all(bootstrap, source, [{"value": b"v%d" % n} for n in range(10)])
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([source])
    producer = transactional(bootstrap)
    copied, deadline = 0, time.monotonic() + POLL_DEADLINE_S
    try:
        while copied < 10 and time.monotonic() < deadline:
            messages = consumer.consume(5, 0.5)
            messages = [m for m in messages if m.error() is None]
            if not messages:
                continue
            producer.begin_transaction()
            for message in messages:
                producer.produce(sink, value=message.value().upper())
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata())
            producer.commit_transaction(30)
            copied += len(messages)
        committed = consumer.committed([TopicPartition(source, 0)], 30)
    finally:
        consumer.close()
    assert committed[0].offset == 10
    assert read(bootstrap, sink, 1, "read_committed", 10) == sorted(b"V%d" % n for n in range(10))


def test_a_new_producer_of_the_same_id_aborts_and_fences_the_old_one(bootstrap, topic_name):
    create(bootstrap, topic_name)
    transactional_id = f"fenced-{topic_name}"
    old = transactional(bootstrap, transactional_id)
    old.begin_transaction()
    old.produce(topic_name, value=b"zombie")
    old.flush(30)
    new = transactional(bootstrap, transactional_id)  # aborts the old one's transaction
    with pytest.raises(KafkaException) as raised:
        old.commit_transaction(30)
    assert raised.value.args[0].fatal() or raised.value.args[0].txn_requires_abort()
    new.begin_transaction()
    new.produce(topic_name, value=b"successor")
    new.commit_transaction(30)
    assert read(bootstrap, topic_name, 1, "read_committed", 1) == [b"successor"]


def test_an_abandoned_transaction_is_aborted_after_its_timeout(bootstrap, topic_name):
    create(bootstrap, topic_name)
    abandoned = transactional(bootstrap, **{"transaction.timeout.ms": 1000})
    abandoned.begin_transaction()
    abandoned.produce(topic_name, value=b"abandoned")
    abandoned.flush(30)
    produce_all(bootstrap, topic_name, [{"value": b"after"}])
    # The open transaction holds read_committed readers back until the coordinator aborts it.
    assert read(bootstrap, topic_name, 1, "read_committed", 1) == [b"after"]


def test_a_group_offset_pending_in_a_transaction_is_not_read_until_it_ends(bootstrap, topic_name):
    """KIP-447: a read_committed consumer asks for stable offsets; while a transaction holds
    an offset of its group, the answer is UNSTABLE_OFFSET_COMMIT (librdkafka retries), so a
    new owner of the partition never starts from the offset the transaction is replacing."""
    create(bootstrap, topic_name)
    group = f"{topic_name}-g"
    producer = transactional(bootstrap)
    producer.begin_transaction()
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    offsets = [TopicPartition(topic_name, 0, 5)]
    producer.send_offsets_to_transaction(offsets, member.consumer_group_metadata())
    member.close()
    reader = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"}
    )
    try:
        with pytest.raises(KafkaException):
            reader.committed([TopicPartition(topic_name, 0)], 3)
        producer.commit_transaction(30)
        assert reader.committed([TopicPartition(topic_name, 0)], 30)[0].offset == 5
    finally:
        reader.close()


def test_offsets_pending_in_a_transaction_stay_unstable_after_a_coordinator_restart(tmp_path):
    """The group's coordinator is killed (-9) while a transaction holds an offset of the group;
    the new one (a restart on the same root) learns it from the stored transaction states and
    answers UNSTABLE_OFFSET_COMMIT until that transaction ends (here: aborted at its timeout)."""
    data_dir = tmp_path / "data"
    gateway = start_gateway(data_dir, kafka=True)
    topic, group = "pending-across-restart", "pending-across-restart-g"
    try:
        create(gateway.kafka_address, topic)
        producer = transactional(gateway.kafka_address, **{"transaction.timeout.ms": 4000})
        producer.begin_transaction()
        member = Consumer({"bootstrap.servers": gateway.kafka_address, "group.id": group})
        offsets = [TopicPartition(topic, 0, 5)]
        producer.send_offsets_to_transaction(offsets, member.consumer_group_metadata())
        member.close()
    finally:
        gateway.process.kill()
        gateway.process.wait()
    restarted = start_gateway(data_dir, kafka=True)
    reader = Consumer(
        {
            "bootstrap.servers": restarted.kafka_address,
            "group.id": group,
            "isolation.level": "read_committed",
        }
    )
    try:
        with pytest.raises(KafkaException):  # unstable: the transaction is still open
            reader.committed([TopicPartition(topic, 0)], 2)
        # Its timeout passes: the new coordinator aborts it, and the offset is stable again
        # (none committed: the transaction's offset went with it).
        assert reader.committed([TopicPartition(topic, 0)], 30)[0].offset < 0
    finally:
        reader.close()
        restarted.stop()
