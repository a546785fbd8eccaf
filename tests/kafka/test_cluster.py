"""Kafka clients against several gateway nodes on one storage root: Metadata names the live
nodes and spreads partition leaders over them, clients follow it, a node that does not lead a
partition refuses a produce with NOT_LEADER_OR_FOLLOWER (so clients refresh, as with Kafka),
and a killed leader's partitions move to a live node without losing an acknowledged record."""

from __future__ import annotations

import os
import signal
import struct
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.serial import entity_reader

from api.core.cluster import preferred_node
from api.core.groups.coordinator import COORDINATOR_TOPIC, coordinator_slot
from api.kafka.fetch_batches import encode_records
from api.kafka.messages import response_class
from tests.gateway_process import start_gateway
from tests.integration.test_cluster import CLUSTER_ENV, stop_nodes
from tests.kafka.test_clients import consume, produce_all
from tests.kafka.test_consumer_protocol import consumer848
from tests.kafka.test_hostile_frames import PRODUCE, _records
from tests.kafka.wire import connect, raw, read_answer, request_frame

pytestmark = pytest.mark.gateway

PARTITIONS = 6
FETCH, LIST_OFFSETS, METADATA, OFFSET_FOR_LEADER_EPOCH = 1, 2, 3, 23
NOT_LEADER_OR_FOLLOWER = 6


@pytest.fixture
def two_nodes(tmp_path):
    nodes = [
        start_gateway(tmp_path / "data", env={**CLUSTER_ENV, "LAKELOG_NODE_ID": str(n)}, kafka=True)
        for n in range(2)
    ]
    yield nodes
    stop_nodes(nodes)


def spread_name(base: str) -> str:
    """`base` with a suffix that makes node 0 lead partition 0 and node 1 partition 1."""
    for suffix in range(1000):
        name = f"{base}-{suffix}"
        if [preferred_node([0, 1], name, p) for p in range(2)] == [0, 1]:
            return name
    raise AssertionError("no name spreads two partitions")


def wait_for_both(admin: AdminClient) -> dict:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        metadata = admin.list_topics(timeout=10)
        if len(metadata.brokers) == 2:
            return metadata
        time.sleep(0.2)
    raise AssertionError("Metadata never listed both nodes")


def test_clients_follow_the_leaders_metadata_names_across_nodes(two_nodes, topic_name):
    first, second = two_nodes
    bootstrap = first.kafka_address  # the client learns the other node from Metadata
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wait_for_both(admin)
    admin.create_topics([NewTopic(topic_name, PARTITIONS, 1)])[topic_name].result(30)
    leaders = {
        p.id: p.leader for p in admin.list_topics(timeout=10).topics[topic_name].partitions.values()
    }
    # Leaders spread by rendezvous hashing over the live nodes, the rule leadership follows.
    assert leaders == {p: preferred_node([0, 1], topic_name, p) for p in range(PARTITIONS)}

    records = [{"key": f"k{i}".encode(), "value": f"v{i}".encode()} for i in range(120)]
    acked = produce_all(bootstrap, topic_name, records)
    read = consume(second.kafka_address, topic_name, list(range(PARTITIONS)), len(records))
    assert sorted((m.partition(), m.offset()) for m in acked) == sorted(
        (m.partition(), m.offset()) for m in read
    )

    partition, leader = next(iter(leaders.items()))
    other = second if leader == 0 else first
    with connect(other.kafka_address) as sock:  # a node that does not lead the partition
        body = {
            "acks": -1,
            "timeout": 5000,
            "topic_data": [
                {
                    "name": topic_name,
                    "partition_data": [
                        {"index": partition, "records": encode_records(_records([b"x"]))}
                    ],
                }
            ],
        }
        sock.sendall(request_frame(PRODUCE, 9, body))
        answer = read_answer(sock)
    response, _ = entity_reader(response_class(PRODUCE, 9))(answer, 5)
    [result] = response.responses[0].partition_responses
    assert result.error_code.value == NOT_LEADER_OR_FOLLOWER


def test_a_killed_leaders_partitions_move_and_nothing_acknowledged_is_lost(two_nodes, topic_name):
    first, second = two_nodes
    admin = AdminClient({"bootstrap.servers": second.kafka_address})
    wait_for_both(admin)
    topic_name = spread_name(topic_name)  # node 0, which is killed, leads one partition
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(30)
    before = produce_all(second.kafka_address, topic_name, [{"value": b"before"}] * 40)
    first.process.kill()  # SIGKILL: no clean leave; its lease runs out
    first.process.wait()
    after = produce_all(
        second.kafka_address,
        topic_name,
        [{"value": b"after"}] * 40,
        **{"message.timeout.ms": 60000},
    )
    read = consume(second.kafka_address, topic_name, [0, 1], 80)
    acknowledged = {(m.partition(), m.offset()) for m in before + after}
    assert {(m.partition(), m.offset()) for m in read} == acknowledged
    assert len(acknowledged) == 80


def test_idempotent_producers_through_a_leader_kill_lose_and_duplicate_nothing(
    two_nodes, topic_name
):
    """Chaos: librdkafka idempotent producers keep sending while the leader of one partition is
    SIGKILLed mid-stream; afterwards every acknowledged record is stored exactly once and the
    offsets are dense (the producer's retries are deduplicated by sequence)."""
    first, second = two_nodes
    admin = AdminClient({"bootstrap.servers": second.kafka_address})
    wait_for_both(admin)
    topic_name = spread_name(topic_name)
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(30)
    producer = Producer(
        {
            "bootstrap.servers": f"{first.kafka_address},{second.kafka_address}",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 60000,
        }
    )
    acked, failed = [], []

    def report(error, message):
        (failed if error else acked).append(
            (message.partition(), message.offset(), message.value())
        )

    sent = 0
    deadline = time.monotonic() + 6
    killed = False
    while time.monotonic() < deadline:
        for _ in range(50):
            producer.produce(
                topic_name, value=f"r{sent}".encode(), partition=sent % 2, on_delivery=report
            )
            sent += 1
        producer.poll(0.01)
        if not killed and time.monotonic() > deadline - 4.5:
            first.process.kill()  # node 0 leads partition 0: killed with sends in flight
            killed = True
    assert producer.flush(90) == 0
    assert failed == []
    read = consume(second.kafka_address, topic_name, [0, 1], len(acked))
    stored = [(m.partition(), m.offset(), m.value()) for m in read]
    assert sorted(stored) == sorted(acked)  # each acknowledged record once, where acknowledged
    values = [value for _, _, value in stored]
    assert len(values) == len(set(values)) == sent  # nothing lost, nothing twice
    for partition in (0, 1):
        offsets = sorted(o for p, o, _ in stored if p == partition)
        assert offsets == list(range(len(offsets)))


def test_a_transaction_across_both_nodes_commits_its_markers_and_offsets(two_nodes, topic_name):
    """Partition 0 is led by node 0, partition 1 by node 1: the coordinator forwards the marker
    of the partition it does not lead, and the offsets to the group's coordinator."""
    from confluent_kafka import Consumer, TopicPartition

    first, second = two_nodes
    admin = AdminClient({"bootstrap.servers": first.kafka_address})
    wait_for_both(admin)
    name = spread_name(topic_name)
    admin.create_topics([NewTopic(name, 2, 1)])[name].result(30)
    groups = [f"{topic_name}-g{n}" for n in range(4)]  # some coordinated by each node
    producer = Producer(
        {"bootstrap.servers": first.kafka_address, "transactional.id": f"{name}-txn"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for partition in range(2):
        producer.produce(name, value=b"p%d" % partition, partition=partition)
    offsets = [TopicPartition(name, 0, 7)]
    for group in groups:
        metadata = Consumer({"bootstrap.servers": first.kafka_address, "group.id": group})
        producer.send_offsets_to_transaction(offsets, metadata.consumer_group_metadata())
        metadata.close()
    producer.commit_transaction(30)

    reader = Consumer(
        {
            "bootstrap.servers": second.kafka_address,
            "group.id": f"{topic_name}-reader",
            "isolation.level": "read_committed",
        }
    )
    reader.assign([TopicPartition(name, p, 0) for p in range(2)])
    seen, deadline = [], time.monotonic() + 20
    while len(seen) < 2 and time.monotonic() < deadline:
        message = reader.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(message.value())
    reader.close()
    assert sorted(seen) == [b"p0", b"p1"]
    for group in groups:
        consumer = Consumer({"bootstrap.servers": second.kafka_address, "group.id": group})
        assert consumer.committed([TopicPartition(name, 0)], 30)[0].offset == 7
        consumer.close()


def test_a_kip848_member_rejoins_when_its_coordinator_is_killed(two_nodes, topic_name):
    """Membership lives in the coordinator's memory: after its node dies the member is
    unknown to the new coordinator, joins again (UNKNOWN_MEMBER_ID, not a fatal error) and
    goes on from the committed offsets."""
    coordinator, survivor = two_nodes
    survivor_address = survivor.kafka_address
    admin = AdminClient({"bootstrap.servers": survivor_address})
    wait_for_both(admin)
    topic_name = spread_name(topic_name)
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(30)
    group = next(
        f"g{n}-{topic_name}" for n in range(100) if coordinator_of(f"g{n}-{topic_name}") == 0
    )
    produce_all(survivor_address, topic_name, [{"value": b"before"}] * 20)
    consumer = consumer848(survivor_address, group, **{"enable.auto.commit": True})
    consumer.subscribe([topic_name])
    try:
        values = poll_values(consumer, 20)
        consumer.commit(asynchronous=False)
        coordinator.process.kill()  # node 0, the group's coordinator: no clean handover
        coordinator.process.wait()
        produce_all(
            survivor_address,
            topic_name,
            [{"value": b"after"}] * 20,
            **{"message.timeout.ms": 60000},
        )
        values += poll_values(consumer, 20)
    finally:
        consumer.close()
    assert sorted(values) == [b"after"] * 20 + [b"before"] * 20


def coordinator_of(group: str) -> int:
    return preferred_node([0, 1], COORDINATOR_TOPIC, coordinator_slot(group))


def poll_messages(consumer, count: int, timeout_s: float = 90) -> list:
    messages = []
    deadline = time.monotonic() + timeout_s
    while len(messages) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            messages.append(message)
    return messages


def poll_values(consumer, count: int) -> list[bytes]:
    return [message.value() for message in poll_messages(consumer, count)]


def epoch_end(address: str, topic: str, current: int, requested: int) -> tuple[str, int, int]:
    partition = {"partition": 0, "current_leader_epoch": current, "leader_epoch": requested}
    body = {"replica_id": -1, "topics": [{"topic": topic, "partitions": [partition]}]}
    [answer] = raw(address, OFFSET_FOR_LEADER_EPOCH, 4, body).topics[0].partitions
    return answer.error_code.name, answer.leader_epoch, answer.end_offset


def batch_epochs(address: str, topic: str) -> list[tuple[int, int]]:
    """(base offset, partition leader epoch) of each batch a Fetch v12 returns from offset 0."""
    partition = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
    body = {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "topics": [{"topic": topic, "partitions": [partition]}],
    }
    [answer] = raw(address, FETCH, 12, body).responses[0].partitions
    assert answer.error_code.value == 0, answer.error_code
    found, data, position = [], answer.records, 0
    while position < len(data):
        base_offset, length, leader_epoch = struct.unpack_from(">qii", data, position)
        found.append((base_offset, leader_epoch))
        position += 12 + length
    return found


def test_leader_epochs_grow_with_each_leader_and_mark_what_each_wrote(two_nodes, topic_name):
    """Epoch 0 on node 0 writes offsets 0-2; killed, node 1 takes epoch 1 and writes 3-4:
    Metadata, Fetch's batches, ListOffsets, OffsetForLeaderEpoch and the committed offset all
    say so, and a request with the old epoch is fenced."""
    first, second = two_nodes
    admin = AdminClient({"bootstrap.servers": second.kafka_address})
    wait_for_both(admin)
    topic_name = spread_name(topic_name)  # node 0 leads partition 0
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(30)
    produce_all(first.kafka_address, topic_name, [{"value": b"a", "partition": 0}] * 3)
    assert leader_epoch(first.kafka_address, topic_name) == 0
    assert epoch_end(first.kafka_address, topic_name, 0, 0) == ("none", 0, 3)
    # a consumer reading across the leader change validates its position with the new
    # leader (KIP-320): a wrong epoch end would look like truncation and reset it
    reader = Consumer(
        {"bootstrap.servers": second.kafka_address, "group.id": f"g-{topic_name}",
         "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )  # fmt: skip
    reader.assign([TopicPartition(topic_name, 0, 0)])
    offsets = poll_offsets(reader, 3)
    first.process.kill()
    first.process.wait()
    after = [{"value": b"b", "partition": 0}] * 2
    produce_all(second.kafka_address, topic_name, after, **{"message.timeout.ms": 60000})
    offsets += poll_offsets(reader, 2)
    # the position's epoch is committed with it, and comes back to validate it on a restart
    reader.commit(asynchronous=False)
    [committed] = reader.committed([TopicPartition(topic_name, 0)], timeout=30)
    reader.close()
    assert offsets == [0, 1, 2, 3, 4]
    assert (committed.offset, committed.leader_epoch) == (5, 1)
    assert leader_epoch(second.kafka_address, topic_name) == 1
    assert batch_epochs(second.kafka_address, topic_name) == [(0, 0), (3, 1)]
    assert epoch_end(second.kafka_address, topic_name, 1, 0) == ("none", 0, 3)
    assert epoch_end(second.kafka_address, topic_name, 1, 1) == ("none", 1, 5)
    assert epoch_end(second.kafka_address, topic_name, 0, 0)[0] == "fenced_leader_epoch"
    assert epoch_end(second.kafka_address, topic_name, 7, 0)[0] == "unknown_leader_epoch"
    listed = {"partition_index": 0, "current_leader_epoch": 1, "timestamp": -1}
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"name": topic_name, "partitions": [listed]}],
    }
    [latest] = raw(second.kafka_address, LIST_OFFSETS, 7, body).topics[0].partitions
    assert (latest.offset, latest.leader_epoch) == (5, 1)


def test_a_paused_leader_given_its_partition_back_serves_readers_at_the_new_epoch(
    two_nodes, topic_name
):
    """Node 0 leads (epoch 0) and is paused past its lease; node 1 takes the partition
    (epoch 1), writes, and hands it back once node 0 lives again (epoch 2, node 0). Node 0's
    writer of epoch 0 was never refused an append, yet it must not go on naming epoch 0 in
    Metadata: Fetch checks the epoch in the table, and a client given epoch 0 again and again
    was fenced forever (found by TX with Kafka's Java copiers)."""
    first, second = two_nodes
    admin = AdminClient({"bootstrap.servers": second.kafka_address})
    wait_for_both(admin)
    topic_name = spread_name(topic_name)  # node 0 leads partition 0
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(30)
    produce_all(first.kafka_address, topic_name, [{"value": b"a", "partition": 0}] * 3)
    assert leader_epoch(first.kafka_address, topic_name) == 0
    os.kill(first.process.pid, signal.SIGSTOP)
    try:
        after = [{"value": b"b", "partition": 0}] * 2
        produce_all(second.kafka_address, topic_name, after, **{"message.timeout.ms": 60000})
    finally:
        os.kill(first.process.pid, signal.SIGCONT)
    deadline = time.monotonic() + 30  # node 1 hands the partition back to node 0
    while leader_of(second.kafka_address, topic_name) != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leader_of(second.kafka_address, topic_name) == 0
    reader = Consumer(
        {"bootstrap.servers": first.kafka_address, "group.id": f"g-{topic_name}",
         "isolation.level": "read_committed", "enable.auto.commit": False}
    )  # fmt: skip
    reader.assign([TopicPartition(topic_name, 0, 0)])
    try:
        offsets = poll_offsets(reader, 5, timeout_s=30)
    finally:
        reader.close()
    assert offsets == [0, 1, 2, 3, 4]
    assert leader_epoch(first.kafka_address, topic_name) >= 2


def partition_zero(address: str, topic: str):
    """Partition 0 of `topic` as a Metadata v12 answer from `address` names it."""
    body = {
        "topics": [{"name": topic}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    metadata = raw(address, METADATA, 12, body)
    [partition] = [p for p in metadata.topics[0].partitions if p.partition_index == 0]
    return partition


def leader_of(address: str, topic: str) -> int:
    return partition_zero(address, topic).leader_id


def leader_epoch(address: str, topic: str) -> int:
    return partition_zero(address, topic).leader_epoch


def poll_offsets(consumer, count: int, timeout_s: float = 90) -> list[int]:
    return [message.offset() for message in poll_messages(consumer, count, timeout_s)]
