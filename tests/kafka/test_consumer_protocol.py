"""Kafka 4's consumer group protocol (KIP-848: ConsumerGroupHeartbeat, the coordinator assigns)
with unmodified clients: Apache Kafka's Java consumer (tests/java/ConsumerProtocol.java) and
librdkafka (group.protocol=consumer), Kafka's own group tool and the AdminClient, lakelog's
v3 API; and refusals of bad heartbeats, code for code the same as Apache Kafka's."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaError
from confluent_kafka.admin import AdminClient
from kio.serial import entity_reader

from api.kafka.messages import response_class
from tests.kafka.test_clients import create, produce_all
from tests.kafka.test_hostile_frames import connect, read_answer, request_frame
from tests.kafka.test_kafka_tools import rows, run
from tests.security.helpers import PROPAGATION_S, add_acl, basic, create_topic, produce

pytestmark = pytest.mark.gateway

FIND_COORDINATOR, CONSUMER_GROUP_HEARTBEAT = 10, 68
DEADLINE_S = 60
COORDINATOR_NOT_READY = {"not_coordinator", "coordinator_load_in_progress"}


# ---- Apache Kafka's Java consumer ------------------------------------------------------------


def test_members_joining_and_leaving_consume_every_record_once(consumer_protocol, bootstrap, http):
    name = f"kip848-{uuid.uuid4().hex[:8]}"
    seen = consumer_protocol("members", bootstrap, name)
    assert seen["errors"] == []
    assert (seen["consumed"], seen["duplicates"], seen["overlaps"]) == (600, 0, 0)
    assert sorted(seen["held_by_three"]) == [2, 2, 2]  # uniform: balanced
    group = seen["group"]
    assert (group["type"], group["state"], group["assignor"]) == ("Consumer", "Stable", "uniform")
    held = [p for member in group["members"] for p in member["partitions"]]
    assert sorted(held) == sorted(f"{name}-{p}" for p in range(6))
    assert [len(member["partitions"]) for member in group["members"]] == [3, 3]
    assert seen["listed"] == ["Consumer/consumer"]
    assert seen["committed_total"] == 600
    # the same offsets, in the same Delta commit table, over HTTP
    stored = http.get(f"/groups/{name}-group/offsets").json()["offsets"]
    assert sum(o["offset"] for o in stored) == 600


def test_a_static_member_comes_back_to_its_partitions(consumer_protocol, bootstrap):
    seen = consumer_protocol("static", bootstrap, f"kip848-{uuid.uuid4().hex[:8]}")
    assert seen["errors"] == []
    # away (epoch -2): still a member, holding its partitions, as Kafka shows it
    assert (seen["away_members"], seen["away_state"]) == (2, "Reconciling")
    assert seen["same_partitions"] is True and seen["b_kept"] == 2
    assert (seen["consumed"], seen["duplicates"], seen["overlaps"]) == (200, 0, 0)


def test_a_regular_expression_is_resolved_by_the_coordinator(consumer_protocol, bootstrap):
    name = f"kip848-{uuid.uuid4().hex[:8]}"
    seen = consumer_protocol("regex", bootstrap, name)
    assert seen["errors"] == []
    assert (seen["consumed"], seen["duplicates"], seen["other_consumed"]) == (70, 0, 0)
    counts = {"one": 2, "two": 2, "three": 3}  # "three" created after the member joined
    expected = [f"{name}-{topic}-{p}" for topic, count in counts.items() for p in range(count)]
    assert seen["held"] == sorted(expected)


def test_the_range_assignor_gives_co_partitioned_topics_the_same_numbers(
    consumer_protocol, bootstrap
):
    name = f"kip848-{uuid.uuid4().hex[:8]}"
    seen = consumer_protocol("range", bootstrap, name)
    assert seen["errors"] == [] and seen["overlaps"] == 0
    group = seen["group"]
    assert (group["assignor"], group["state"]) == ("range", "Stable")
    assert [member["partitions"] for member in group["members"]] == [
        [f"{name}-a-0", f"{name}-a-1", f"{name}-b-0", f"{name}-b-1"],
        [f"{name}-a-2", f"{name}-a-3", f"{name}-b-2", f"{name}-b-3"],
    ]


def test_an_unknown_assignor_fails_the_consumer(consumer_protocol, bootstrap):
    seen = consumer_protocol("bad-assignor", bootstrap, f"kip848-{uuid.uuid4().hex[:8]}")
    assert seen["error"] == "UnsupportedAssignorException"


def test_a_classic_group_upgraded_online_keeps_its_offsets(consumer_protocol, bootstrap, http):
    """KIP-848's migration: classic members replaced one by one by consumer members while
    records remain; the group turns into a consumer group at the first one."""
    name = f"kip848-{uuid.uuid4().hex[:8]}"
    seen = consumer_protocol("upgrade", bootstrap, name)
    assert seen["errors"] == []
    assert seen["mixed"] == "Consumer"  # classic and consumer members in one group
    assert seen["left_before_end"] > 0  # the partitions moved while records remained
    assert (seen["consumed"], seen["duplicates"], seen["overlaps"]) == (3000, 0, 0)
    group = seen["group"]
    assert (group["type"], group["state"]) == ("Consumer", "Stable")
    assert sorted(len(member["partitions"]) for member in group["members"]) == [2, 2]
    assert seen["committed_total"] == 3000
    stored = http.get(f"/groups/{name}-group/offsets").json()["offsets"]
    assert sum(o["offset"] for o in stored) == 3000


def test_a_consumer_group_left_with_classic_members_is_classic_again(consumer_protocol, bootstrap):
    """KIP-848's online downgrade: when the group's one consumer protocol member leaves, its
    two classic members remain and the group is a classic group again; nothing read twice."""
    name = f"kip848-{uuid.uuid4().hex[:8]}"
    seen = consumer_protocol("downgrade", bootstrap, name)
    assert seen["errors"] == []
    assert seen["mixed"] == "Consumer"
    assert seen["left_before_end"] > 0  # the partitions moved while records remained
    assert (seen["consumed"], seen["duplicates"], seen["overlaps"]) == (3000, 0, 0)
    group = seen["group"]
    assert (group["type"], group["state"]) == ("Classic", "Stable")
    assert sorted(len(member["partitions"]) for member in group["members"]) == [2, 2]


def test_an_administrator_removes_a_static_member_by_instance_id(consumer_protocol, bootstrap):
    """LeaveGroup v3+ naming only group.instance.id finds consumer protocol members too."""
    seen = consumer_protocol("remove-static", bootstrap, f"kip848-{uuid.uuid4().hex[:8]}")
    assert (seen["removed"], seen["unknown"]) == (True, "UnknownMemberIdException")


# ---- bad heartbeats: the same refusals as Apache Kafka ---------------------------------------


def heartbeat(bootstrap: str, body: dict, version: int = 1):
    """(error code name, member epoch) of one ConsumerGroupHeartbeat."""
    full = {
        "member_epoch": 0,
        "rebalance_timeout": 30_000,
        "topic_partitions": [],
        **body,
    }
    deadline = time.monotonic() + DEADLINE_S
    while True:  # as a client: again while the coordinator is still loading the group
        with connect(bootstrap) as sock:
            sock.sendall(request_frame(CONSUMER_GROUP_HEARTBEAT, version, full))
            answer = read_answer(sock)
        schema = response_class(CONSUMER_GROUP_HEARTBEAT, version)
        response, _ = entity_reader(schema)(answer, 5)
        code = response.error_code.name
        if code not in COORDINATOR_NOT_READY or time.monotonic() > deadline:
            return code, response.member_epoch
        time.sleep(0.2)


def load_coordinator(bootstrap: str, group_id: str) -> None:
    """FindCoordinator first, as clients do (Kafka creates its offsets topic then)."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        with connect(bootstrap) as sock:
            body = {"key_type": 0, "coordinator_keys": [group_id]}
            sock.sendall(request_frame(FIND_COORDINATOR, 4, body))
            answer = read_answer(sock)
        response, _ = entity_reader(response_class(FIND_COORDINATOR, 4))(answer, 5)
        if response.coordinators[0].error_code.value == 0:
            return
        time.sleep(0.5)
    raise AssertionError(f"no coordinator for {group_id} at {bootstrap}")


def refusals(bootstrap: str, topic: str) -> dict[str, tuple[str, int]]:
    group = f"g-{uuid.uuid4().hex[:8]}"
    load_coordinator(bootstrap, group)
    member = str(uuid.uuid4())
    names = {"group_id": group, "subscribed_topic_names": [topic]}
    answers = {
        "no subscription": heartbeat(bootstrap, {"group_id": group, "member_id": member}),
        "bad assignor": heartbeat(
            bootstrap, {**names, "member_id": member, "server_assignor": "x"}
        ),
        "bad regex": heartbeat(
            bootstrap, {"group_id": group, "member_id": member, "subscribed_topic_regex": "("}
        ),
        "no member id": heartbeat(bootstrap, {**names, "member_id": ""}),
        "epoch -3": heartbeat(bootstrap, {**names, "member_id": member, "member_epoch": -3}),
        "static leave without instance": heartbeat(
            bootstrap, {**names, "member_id": member, "member_epoch": -2}
        ),
        "unknown group": heartbeat(bootstrap, {**names, "member_id": member, "member_epoch": 4}),
    }
    joined = heartbeat(bootstrap, {**names, "member_id": member})
    answers["join"] = (joined[0], int(joined[1] > 0))
    answers["epoch ahead"] = heartbeat(
        bootstrap, {**names, "member_id": member, "member_epoch": joined[1] + 5}
    )
    answers["unknown member"] = heartbeat(
        bootstrap, {**names, "member_id": str(uuid.uuid4()), "member_epoch": 1}
    )
    left = heartbeat(bootstrap, {"group_id": group, "member_id": member, "member_epoch": -1})
    answers["leave"] = left
    return answers


def test_bad_heartbeats_are_refused_as_apache_kafka_refuses_them(
    bootstrap, apache_kafka_broker, topic_name
):
    create(bootstrap, topic_name, partitions=2)
    create(apache_kafka_broker.bootstrap, topic_name, partitions=2)
    ours = refusals(bootstrap, topic_name)
    kafkas = refusals(apache_kafka_broker.bootstrap, topic_name)
    # One deliberate difference: a member with an epoch heartbeating to a group the node does
    # not know. Kafka keeps groups in its log and answers GROUP_ID_NOT_FOUND (fatal to the
    # clients); lakelog's coordinator keeps members in memory, so after a failover that
    # member is one it lost: UNKNOWN_MEMBER_ID, and the client joins again.
    assert kafkas.pop("unknown group")[0] == "group_id_not_found"
    assert ours.pop("unknown group")[0] == "unknown_member_id"
    assert ours == kafkas
    assert ours["join"] == ("none", 1) and ours["epoch ahead"][0] == "fenced_member_epoch"
    assert ours["bad assignor"][0] == "unsupported_assignor"


# ---- librdkafka ------------------------------------------------------------------------------


def consumer848(bootstrap: str, group: str, **config) -> Consumer:
    # librdkafka refuses session.timeout.ms and heartbeat.interval.ms with this protocol: the
    # coordinator sets them
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **config,
        }
    )


def test_librdkafka_members_consume_every_record_once_across_reassignments(
    bootstrap, http, topic_name
):
    create(bootstrap, topic_name, partitions=4)
    records = [{"key": f"k{i}".encode(), "value": str(i).encode()} for i in range(400)]
    produce_all(bootstrap, topic_name, records)
    group = f"g-{topic_name}"
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def member(leaves_at: int | None) -> None:
        consumer = consumer848(bootstrap, group)
        consumer.subscribe([topic_name])
        while not stop.is_set() and (leaves_at is None or len(seen) < leaves_at):
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            consumer.commit(message, asynchronous=False)
            with lock:
                seen.append((message.partition(), message.offset()))
            time.sleep(0.01)  # a paced consumer: the others join while records remain
        consumer.close()

    # the second member leaves once half the records are read: its partitions move again
    threads = [threading.Thread(target=member, args=(at,)) for at in (None, 200, None)]
    for thread in threads:
        thread.start()
        time.sleep(1.0)  # each joins mid-consumption: the group reassigns
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(set(seen)) < 400 and time.monotonic() < deadline:
            time.sleep(0.2)
        threads[1].join(DEADLINE_S)
        check_admin_sees_a_consumer_group(bootstrap, group)
        check_v3_view(http, group)
        check_consumer_groups_tool(bootstrap, group)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert len(set(seen)) == 400
    assert len(seen) == 400  # each committed before the next: none redelivered


def check_admin_sees_a_consumer_group(bootstrap: str, group: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [described] = admin.describe_consumer_groups([group]).values()
    description = described.result(10)
    assert description.type == ConsumerGroupType.CONSUMER
    assert len(description.members) == 2


def check_v3_view(http, group: str) -> None:
    answer = http.get(f"/v3/clusters/lakelog/consumer-groups/{group}")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["type"] == "CONSUMER" and body["state"] in ("STABLE", "RECONCILING")
    consumers = http.get(f"/v3/clusters/lakelog/consumer-groups/{group}/consumers").json()
    assert len(consumers["data"]) == 2
    for consumer in consumers["data"]:
        path = f"/v3/clusters/lakelog/consumer-groups/{group}/consumers/{consumer['consumer_id']}"
        one = http.get(path)
        assert one.status_code == 200, one.text
        assert one.json()["consumer_id"] == consumer["consumer_id"]


def check_consumer_groups_tool(bootstrap: str, group: str) -> None:
    tool = ("kafka-consumer-groups", "--bootstrap-server", bootstrap)
    assert group in run(*tool, "--list", "--type", "consumer").stdout.split()
    members = run(*tool, "--describe", "--group", group, "--members").stdout
    assert [row[0] for row in rows(members, "GROUP")] == [group, group], members
    offsets = rows(run(*tool, "--describe", "--group", group).stdout, "GROUP")
    assert sorted(row[2] for row in offsets) == ["0", "1", "2", "3"], offsets


def test_librdkafka_regex_subscription(bootstrap, topic_name):
    for suffix in ("a", "b"):
        create(bootstrap, f"{topic_name}-{suffix}", partitions=2)
        produce_all(bootstrap, f"{topic_name}-{suffix}", [{"value": suffix.encode()}] * 10)
    consumer = consumer848(bootstrap, f"g-{topic_name}")
    consumer.subscribe([f"^{topic_name}-.*"])
    values = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(values) < 20 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
            elif message is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
    finally:
        consumer.close()
    assert sorted(values) == [b"a"] * 10 + [b"b"] * 10


def test_a_regular_expression_matches_only_topics_the_member_may_see(acl_node, topic_name):
    """Kafka resolves a member's expression with its own authorization: erin may read
    `<name>-open`, not `<name>-closed`, so only the first is assigned to her."""
    gateway, tokens = acl_node
    with basic(gateway.url, tokens["admin"]) as admin:
        for suffix in ("open", "closed"):
            create_topic(admin, f"{topic_name}-{suffix}", partitions=2)
            produce(admin, f"{topic_name}-{suffix}", [suffix.encode()] * 5)
        add_acl(admin, "User:erin", "READ", f"{topic_name}-open")
        add_acl(admin, "User:erin", "READ", f"g-{topic_name}", resource_type="GROUP")
    time.sleep(PROPAGATION_S)
    key_id, secret = tokens["erin"].split(".", 1)
    sasl = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": key_id,
        "sasl.password": secret,
    }
    consumer = consumer848(gateway.kafka_address, f"g-{topic_name}", **sasl)
    consumer.subscribe([f"^{topic_name}-.*"])
    values = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(values) < 5 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
        with basic(gateway.url, tokens["admin"]) as admin:  # what the coordinator assigned
            assigned = assignments(admin, f"g-{topic_name}")
    finally:
        consumer.close()
    assert values == [b"open"] * 5
    assert assigned == [f"{topic_name}-open-0", f"{topic_name}-open-1"]


def assignments(http, group: str) -> list[str]:
    """Every member's assigned partitions, as the v3 API shows them."""
    base = f"/v3/clusters/lakelog/consumer-groups/{group}/consumers"
    found = []
    for consumer in http.get(base).json()["data"]:
        listed = http.get(f"{base}/{consumer['consumer_id']}/assignments").json()["data"]
        found += [f"{a['topic_name']}-{a['partition_id']}" for a in listed]
    return sorted(found)
