"""Consumer groups of unmodified Kafka clients (the classic protocol, the leader member
assigns) against a real gateway: rebalances, commits, restarts from the committed offset,
static membership, seeks, admin views; the offsets are the same Delta table the HTTP APIs read."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.kafka.test_clients import create, produce_all
from tests.kafka.wire import raw

OFFSET_FETCH = 9

pytestmark = pytest.mark.gateway

DEADLINE_S = 30


def group_consumer(bootstrap: str, group: str, **config) -> Consumer:
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        **config,
    }
    return Consumer(settings)


def poll_until(consumer: Consumer, done, seen: list) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done() and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            seen.append(message)
            consumer.commit(message, asynchronous=False)


def assigned(consumer: Consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def wait_for_assignment(consumers: list[Consumer], partitions: int) -> None:
    """Poll every consumer until their assignments cover the partitions without overlap."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        for consumer in consumers:
            consumer.poll(0.1)
        owned = [assigned(c) for c in consumers]
        if all(owned) and sum(len(o) for o in owned) == partitions:
            if set().union(*owned) == set(range(partitions)):
                return
    raise AssertionError(f"assignments never settled: {[assigned(c) for c in consumers]}")


def test_two_members_split_the_partitions_and_a_leaver_hands_them_over(bootstrap, topic_name):
    create(bootstrap, topic_name, partitions=4)
    group = f"g-{topic_name}"
    first, second = group_consumer(bootstrap, group), group_consumer(bootstrap, group)
    first.subscribe([topic_name])
    second.subscribe([topic_name])
    try:
        wait_for_assignment([first, second], 4)
        assert assigned(first).isdisjoint(assigned(second))
        second.close()
        wait_for_assignment([first], 4)
    finally:
        first.close()


def test_each_record_is_consumed_and_committed_once_across_a_rebalance(bootstrap, http, topic_name):
    create(bootstrap, topic_name, partitions=3)
    produce_all(
        bootstrap, topic_name, [{"key": f"k{i}".encode(), "value": b"v"} for i in range(300)]
    )
    group = f"g-{topic_name}"
    seen: list = []
    lock = threading.Lock()

    def member() -> None:
        consumer = group_consumer(bootstrap, group)
        consumer.subscribe([topic_name])
        mine: list = []
        poll_until(consumer, lambda: len(seen) + len(mine) >= 300, mine)
        consumer.close()
        with lock:
            seen.extend(mine)

    threads = [threading.Thread(target=member) for _ in range(2)]
    for thread in threads:
        thread.start()
        time.sleep(1)  # the second joins mid-consumption: a rebalance
    for thread in threads:
        thread.join()
    positions = {(m.partition(), m.offset()) for m in seen}
    assert len(positions) == 300  # every record; a redelivery after a rebalance is allowed
    stored = http.get(f"/groups/{group}/offsets").json()["offsets"]  # the same Delta table
    assert sum(o["offset"] for o in stored) == 300


def test_a_restarted_member_resumes_from_its_committed_offset(bootstrap, topic_name):
    create(bootstrap, topic_name)
    produce_all(bootstrap, topic_name, [{"value": f"v{i}".encode()} for i in range(10)])
    group = f"g-{topic_name}"
    consumer = group_consumer(bootstrap, group)
    consumer.subscribe([topic_name])
    first: list = []
    poll_until(consumer, lambda: len(first) >= 4, first)
    consumer.close()
    produce_all(bootstrap, topic_name, [{"value": b"later"}])

    again = group_consumer(bootstrap, group)
    again.subscribe([topic_name])
    rest: list = []
    poll_until(again, lambda: len(rest) >= 7, rest)
    again.close()
    assert [m.offset() for m in first] == [0, 1, 2, 3]
    assert [m.offset() for m in rest] == list(range(4, 11))


def test_a_committed_leader_epoch_is_kept_with_its_offset(bootstrap, topic_name):
    """OffsetCommit v6+ carries the epoch of the record before the offset; OffsetFetch v5+
    gives it back (a restarted consumer validates its position with it, KIP-320). Older
    versions, which have no such field, commit -1 and read the offset alone."""
    create(bootstrap, topic_name, partitions=2)
    group = f"g-{topic_name}"
    consumer = group_consumer(bootstrap, group)
    wanted = [TopicPartition(topic_name, 0, 5, leader_epoch=7), TopicPartition(topic_name, 1, 3)]
    consumer.commit(offsets=wanted, asynchronous=False)
    committed = consumer.committed([TopicPartition(topic_name, p) for p in (0, 1)], timeout=10)
    consumer.close()
    assert [(tp.offset, tp.leader_epoch) for tp in committed] == [(5, 7), (3, None)]
    body = {"group_id": group, "topics": [{"name": topic_name, "partition_indexes": [0]}]}
    [old] = raw(bootstrap, OFFSET_FETCH, 4, body).topics[0].partitions
    assert (old.committed_offset, old.error_code.value) == (5, 0)


def test_a_static_member_restarting_keeps_its_generation(bootstrap, http, topic_name):
    create(bootstrap, topic_name, partitions=2)
    group = f"g-{topic_name}"
    consumer = group_consumer(bootstrap, group, **{"group.instance.id": "static-1"})
    consumer.subscribe([topic_name])
    wait_for_assignment([consumer], 2)
    generation = http.get(f"/groups/{group}").json()["generation_id"]
    consumer.close()  # a static member's close does not leave the group (KIP-345)

    again = group_consumer(bootstrap, group, **{"group.instance.id": "static-1"})
    again.subscribe([topic_name])
    try:
        wait_for_assignment([again], 2)
        described = http.get(f"/groups/{group}").json()
        assert described["generation_id"] == generation
        assert [m["group_instance_id"] for m in described["members"]] == ["static-1"]
    finally:
        again.close()


def test_seek_moves_the_position(bootstrap, topic_name):
    create(bootstrap, topic_name)
    produce_all(bootstrap, topic_name, [{"value": f"v{i}".encode()} for i in range(10)])
    consumer = group_consumer(bootstrap, f"g-{topic_name}")
    consumer.subscribe([topic_name])
    try:
        wait_for_assignment([consumer], 1)
        consumer.seek(TopicPartition(topic_name, 0, 7))
        seen: list = []
        poll_until(consumer, lambda: len(seen) >= 3, seen)
        assert [m.offset() for m in seen] == [7, 8, 9]
    finally:
        consumer.close()


def test_admin_lists_and_describes_groups(bootstrap, topic_name):
    create(bootstrap, topic_name, partitions=2)
    group = f"g-{topic_name}"
    consumer = group_consumer(bootstrap, group, **{"client.id": "describer"})
    consumer.subscribe([topic_name])
    try:
        wait_for_assignment([consumer], 2)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        listed = admin.list_consumer_groups().result(timeout=30)
        assert group in {g.group_id for g in listed.valid}
        description = admin.describe_consumer_groups([group])[group].result(timeout=30)
        [member] = description.members
        assert member.client_id == "describer"
        partitions = {tp.partition for tp in member.assignment.topic_partitions}
        assert partitions == {0, 1}
        assert str(description.state).endswith("STABLE")
    finally:
        consumer.close()


def test_kafka_python_group_members_consume_every_record(bootstrap, topic_name):
    from kafka import KafkaConsumer

    create(bootstrap, topic_name, partitions=2)
    produce_all(
        bootstrap, topic_name, [{"key": f"k{i}".encode(), "value": b"v"} for i in range(50)]
    )
    consumer = KafkaConsumer(
        topic_name,
        bootstrap_servers=bootstrap,
        group_id=f"g-{topic_name}",
        auto_offset_reset="earliest",
        consumer_timeout_ms=8000,
    )
    seen = [(m.partition, m.offset) for m in consumer]
    consumer.commit()
    committed = sum(consumer.committed(tp) or 0 for tp in consumer.assignment())
    consumer.close()
    assert len(set(seen)) == 50 and committed == 50


def test_admin_deletes_offsets_and_groups(bootstrap, http, topic_name):
    from kafka import TopicPartition as KafkaPythonPartition
    from kafka.admin import KafkaAdminClient

    create(bootstrap, topic_name, partitions=2)
    other = f"{topic_name}-other"
    create(bootstrap, other)
    produce_all(bootstrap, topic_name, [{"value": b"v"}] * 4)
    group = f"g-{topic_name}"
    committer = group_consumer(bootstrap, group)  # a simple consumer: commits, no membership
    committer.commit(
        offsets=[TopicPartition(topic_name, 0, 2), TopicPartition(topic_name, 1, 1)],
        asynchronous=False,
    )
    committer.commit(offsets=[TopicPartition(other, 0, 0)], asynchronous=False)
    committer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    offsets_admin = KafkaAdminClient(bootstrap_servers=bootstrap)  # OffsetDelete: kafka-python's

    deleted = offsets_admin.delete_group_offsets(group, [KafkaPythonPartition(topic_name, 1)])
    assert [error.__name__ for error in deleted.values()] == ["NoError"]
    stored = {
        (o["topic"], o["partition"]) for o in http.get(f"/groups/{group}/offsets").json()["offsets"]
    }
    assert stored == {(topic_name, 0), (other, 0)}

    member = group_consumer(bootstrap, group)
    member.subscribe([topic_name])
    wait_for_assignment([member], 2)
    with pytest.raises(Exception) as busy:
        admin.delete_consumer_groups([group])[group].result(30)
    assert busy.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    refused = offsets_admin.delete_group_offsets(group, [KafkaPythonPartition(topic_name, 0)])
    assert [error.__name__ for error in refused.values()] == ["GroupSubscribedToTopicError"]
    member.close()
    offsets_admin.close()

    admin.delete_consumer_groups([group])[group].result(30)
    assert http.get(f"/groups/{group}/offsets").json()["offsets"] == []
    listed = admin.list_consumer_groups().result(timeout=30)
    assert group not in {g.group_id for g in listed.valid}
