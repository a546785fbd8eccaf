"""Kafka's share consumers (KIP-932; KafkaShareConsumer of Kafka 4.2's Java clients,
unmodified) against lakelog's Kafka listener: several consumers read one topic as a queue,
every record is delivered to one of them and accepted once; releases come back with a higher
delivery count; rejections reach the group's dead letter topic; HTTP consumers of the same
group never get a record a Java consumer holds."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests import apache_kafka
from tests.conftest import create_topic

SOURCES = Path(__file__).resolve().parent.parent / "java_share"
SHARE = "/v3/clusters/lakelog/share-groups"

pytestmark = pytest.mark.gateway


@pytest.fixture(scope="session")
def share_classes(tmp_path_factory) -> Path:
    libs = apache_kafka.share_client_jars()
    out = tmp_path_factory.mktemp("share-classes")
    return apache_kafka.compile_java(sorted(SOURCES.glob("*.java")), out, libs)


def run_consumers(classes, bootstrap, group, topic, consumers, expected, mode, timeout_s=90):
    command = apache_kafka.java_command(
        "ShareConsumers",
        bootstrap,
        group,
        topic,
        str(consumers),
        str(expected),
        mode,
        str(timeout_s),
        classpath=(classes,),
        libs=apache_kafka.share_client_jars(),
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s + 60)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.split("\n")
    assert "done" in lines, done.stdout[-2000:] + done.stderr[-3000:]
    deliveries = []
    for line in lines:
        fields = line.split()
        if len(fields) == 6:
            consumer, partition, offset, count, value, kind = fields
            delivery = (int(consumer), int(partition), int(offset), int(count))
            deliveries.append((*delivery, value.strip('"'), kind.upper()))
    return deliveries


def produce(http, topic: str, count: int) -> None:
    records = [{"value": f"v{i}"} for i in range(count)]
    response = http.post(
        f"/topics/{topic}",
        json={"records": records},
        headers={"Content-Type": "application/vnd.kafka.json.v2+json"},
    )
    assert response.status_code == 200, response.text


def earliest(http, group: str, **more) -> None:
    data = [{"name": "share.auto.offset.reset", "value": "earliest"}]
    data += [{"name": k.replace("_", "."), "value": str(v)} for k, v in more.items()]
    response = http.post(f"{SHARE}/{group}/configs:alter", json={"data": data})
    assert response.status_code == 204, response.text


def test_java_share_consumers_get_every_record_once(bootstrap, http, share_classes, topic_name):
    create_topic(http, topic_name, partitions=2)
    group = f"q-{topic_name}"
    earliest(http, group)
    produce(http, topic_name, 60)
    deliveries = run_consumers(share_classes, bootstrap, group, topic_name, 3, 60, "accept")
    accepted = [(p, o) for _, p, o, _, _, kind in deliveries if kind == "ACCEPT"]
    assert sorted(set(accepted)) == sorted(accepted)  # none accepted twice
    assert len(accepted) == 60
    assert {count for *_, count, _, _ in deliveries} == {1}
    described = http.get(f"{SHARE}/{group}").json()["partitions"]
    assert sum(p["start_offset"] for p in described) == 60
    assert all(p["records"]["acquired"] == 0 for p in described)


def test_released_records_come_back_and_rejected_ones_are_dead_lettered(
    bootstrap, http, share_classes, topic_name
):
    create_topic(http, topic_name)
    group = f"q-{topic_name}"
    dead = f"{topic_name}-dead"
    earliest(http, group, errors_deadletterqueue_topic_name=dead)
    produce(http, topic_name, 10)
    released = run_consumers(share_classes, bootstrap, group, topic_name, 2, 10, "release-first")
    counts = {}
    for _, _, offset, count, _, kind in released:
        counts.setdefault(offset, []).append((count, kind))
    assert all(c == [(1, "RELEASE"), (2, "ACCEPT")] for c in counts.values()), counts

    group2 = f"r-{topic_name}"
    earliest(http, group2, errors_deadletterqueue_topic_name=dead)
    rejected = run_consumers(share_classes, bootstrap, group2, topic_name, 1, 10, "reject-odd")
    assert sum(kind == "REJECT" for *_, kind in rejected) == 5
    letters = http.get(
        f"/topics/{dead}/partitions/0/records",
        params={"offset": 0},
        headers={"Accept": "application/vnd.kafka.binary.v2+json"},
    ).json()
    assert len(letters) == 5
    assert all(letter["value"] is None for letter in letters)  # copy.record.enable=false


def test_http_and_java_members_of_one_group_never_share_a_record(
    bootstrap, http, share_classes, topic_name
):
    create_topic(http, topic_name, partitions=2)
    group = f"q-{topic_name}"
    earliest(http, group)
    produce(http, topic_name, 40)
    body = {"topics": [topic_name], "max_records": 10, "timeout_ms": 0, "lock_duration_ms": 60000}
    held = http.post(f"{SHARE}/{group}/records:acquire", json=body).json()["records"]
    assert len(held) == 10
    deliveries = run_consumers(share_classes, bootstrap, group, topic_name, 2, 30, "accept")
    by_java = {(p, o) for _, p, o, *_ in deliveries}
    by_http = {(r["partition"], r["offset"]) for r in held}
    assert not by_java & by_http
    assert len(by_java | by_http) == 40
    acknowledgements = [{"delivery_id": r["delivery_id"]} for r in held]
    answer = http.post(
        f"{SHARE}/{group}/records:acknowledge", json={"acknowledgements": acknowledgements}
    )
    assert answer.status_code == 200, answer.text


def share_groups_tool(bootstrap: str, *args: str, ok: bool = True):
    done = apache_kafka.tool(
        "kafka-share-groups",
        "--bootstrap-server",
        bootstrap,
        *args,
        libs=apache_kafka.share_client_jars(),
    )
    if ok:
        assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done


def test_kafka_share_groups_lists_describes_resets_and_deletes(
    bootstrap, http, share_classes, topic_name
):
    """Kafka 4.2's kafka-share-groups, unmodified: the group's start offsets after consumers
    accepted everything, a reset to the earliest offset that delivers it all again, deleting
    the offsets and then the group."""
    create_topic(http, topic_name)
    group = f"tool-{topic_name}"
    earliest(http, group)
    produce(http, topic_name, 8)
    run_consumers(share_classes, bootstrap, group, topic_name, 1, 8, "accept")
    assert group in share_groups_tool(bootstrap, "--list").stdout.split()
    described = share_groups_tool(bootstrap, "--describe", "--group", group).stdout
    rows = [line.split() for line in described.splitlines() if line.startswith(group)]
    assert [row[1:4] for row in rows] == [[topic_name, "0", "8"]], described
    state = share_groups_tool(bootstrap, "--describe", "--group", group, "--state").stdout
    assert "Empty" in state

    reset = ("--reset-offsets", "--group", group, "--topic", topic_name, "--to-earliest")
    share_groups_tool(bootstrap, *reset, "--execute")
    again = run_consumers(share_classes, bootstrap, group, topic_name, 1, 8, "accept")
    assert sorted(o for _, _, o, *_ in again) == list(range(8))  # all of it, once more

    share_groups_tool(bootstrap, "--delete-offsets", "--group", group, "--topic", topic_name)
    assert http.get(f"{SHARE}/{group}").json()["partitions"] == []
    share_groups_tool(bootstrap, "--delete", "--group", group)
    assert group not in share_groups_tool(bootstrap, "--list").stdout.split()


def test_kafka_console_share_consumer_reads_the_queue(bootstrap, http, topic_name):
    """Kafka 4.2's kafka-console-share-consumer, as a new user would first try a queue."""
    create_topic(http, topic_name)
    group = f"console-{topic_name}"
    earliest(http, group)
    produce(http, topic_name, 3)
    done = apache_kafka.tool(
        "kafka-console-share-consumer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic_name,
        "--group",
        group,
        "--max-messages",
        "3",
        "--timeout-ms",
        "30000",
        libs=apache_kafka.share_client_jars(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ['"v0"', '"v1"', '"v2"']
    assert "Processed a total of 3 messages" in done.stderr
