"""Kafka's own applications, unmodified, on lakelog: a Kafka Streams application with
exactly_once_v2 (tests/java/StreamsApp.java: a stream-table join, two repartitions, two state
stores), whose output is checked exactly, and whose changelog and repartition topics are
ordinary lakelog topics; Kafka Connect, standalone and distributed, with the FileStream
connectors, driven through Connect's REST API."""

from __future__ import annotations

import json
import os
import subprocess
import time

import httpx
import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests import apache_kafka
from tests.gateway_process import start_gateway

pytestmark = pytest.mark.gateway

PARTITIONS = 2
OUTPUT_TIMEOUT_S = 120.0


def read_to_end(bootstrap: str, topic: str, partitions: int, **settings) -> list:
    """Every message of `topic` from offset 0 to each partition's end (`settings`: more
    consumer settings, e.g. the isolation level)."""
    config = {"group.id": f"{topic}-reader", "enable.partition.eof": True, **settings}
    consumer = Consumer({"bootstrap.servers": bootstrap, **config})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    messages, ended = [], set()
    deadline = time.monotonic() + 30
    while len(ended) < partitions and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error() is not None:
            ended.add(message.partition())
            continue
        messages.append(message)
    consumer.close()
    return messages


def latest_committed(bootstrap: str, topic: str) -> dict[str, str]:
    """The last committed value of each key of `topic` (read_committed, from the start)."""
    messages = read_to_end(bootstrap, topic, PARTITIONS, **{"isolation.level": "read_committed"})
    return {m.key().decode(): m.value().decode() for m in messages}


def wait_for(bootstrap: str, expected: dict[str, dict[str, str]], app) -> None:
    deadline = time.monotonic() + OUTPUT_TIMEOUT_S
    seen = {}
    while time.monotonic() < deadline:
        assert app.poll() is None, f"the application exited: {app.stderr.read()[-3000:]}"
        seen = {topic: latest_committed(bootstrap, topic) for topic in expected}
        if seen == expected:
            return
        time.sleep(1)
    transactions = apache_kafka.tool("kafka-transactions", "--bootstrap-server", bootstrap, "list")
    raise AssertionError(f"output {seen} != {expected}; transactions:\n{transactions.stdout}")


def wait_for_records(bootstrap: str, topic: str, count: int, app) -> None:
    """Until `topic`'s partitions hold `count` records in all."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-counter"})
    deadline = time.monotonic() + OUTPUT_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            assert app.poll() is None, f"the application exited: {app.stderr.read()[-3000:]}"
            try:
                ends = [
                    consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                    for p in range(PARTITIONS)
                ]
            except Exception:  # not created yet
                ends = [0]
            if sum(ends) >= count:
                return
            time.sleep(0.5)
    finally:
        consumer.close()
    raise AssertionError(f"{topic} did not reach {count} records")


def start_app(java_classes, bootstrap: str, name: str, state_dir) -> subprocess.Popen:
    command = apache_kafka.java_command(
        "StreamsApp",
        bootstrap,
        name,
        str(state_dir),
        "repartition.purge.interval.ms=500",
        classpath=(java_classes,),
    )
    return subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def stop_app(app: subprocess.Popen) -> dict:
    out, err = app.communicate(input="", timeout=90)
    assert app.returncode == 0, err[-3000:]
    return json.loads(out.splitlines()[-1])


def produce_orders(producer: Producer, name: str, numbers: range) -> None:
    for n in numbers:
        producer.produce(f"{name}-orders", key=f"c{n % 10}", value=f"item{n % 3}:{n}")
    assert producer.flush(30) == 0


def expected_outputs(name: str, orders: int) -> dict[str, dict[str, str]]:
    """Customers with an odd number are in the north; order n costs n, of item n % 3."""
    north = sum(n for n in range(orders) if n % 2)
    south = sum(n for n in range(orders) if not n % 2)
    counts = {f"item{i}": str(len(range(i, orders, 3))) for i in range(3)}
    return {
        f"{name}-region-totals": {"north": str(north), "south": str(south)},
        f"{name}-item-counts": counts,
    }


def test_kafka_streams_exactly_once_v2(java_classes, bootstrap, http, topic_name, tmp_path):
    name = topic_name
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [f"{name}-{t}" for t in ("orders", "customers", "region-totals", "item-counts")]
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for customer in range(10):
        region = "north" if customer % 2 else "south"
        producer.produce(f"{name}-customers", key=f"c{customer}", value=region)
    assert producer.flush(30) == 0

    app = start_app(java_classes, bootstrap, name, tmp_path / "state-1")
    try:
        # A stream-table join sees the table as of each order's processing: the orders come
        # once the customers are in the table's store (its changelog), as in a real pipeline.
        changelog = f"{name}-app-{name}-customers-STATE-STORE-0000000000-changelog"
        wait_for_records(bootstrap, changelog, 10, app)
        produce_orders(producer, name, range(100))
        wait_for(bootstrap, expected_outputs(name, 100), app)
    finally:
        outcome = stop_app(app)
    assert outcome["error"] is None

    # A second instance with an empty state directory restores both stores from their
    # changelog topics (read back from the Delta tables) and carries on from the committed
    # offsets: the totals continue, nothing is counted twice.
    produce_orders(producer, name, range(100, 150))
    app = start_app(java_classes, bootstrap, name, tmp_path / "state-2")
    try:
        wait_for(bootstrap, expected_outputs(name, 150), app)
    finally:
        outcome = stop_app(app)
    assert outcome["error"] is None

    application = f"{name}-app"
    configs = http.get(f"/v3/clusters/lakelog/topics/{application}-region-totals-changelog/configs")
    assert {c["name"]: c["value"] for c in configs.json()["data"]}["cleanup.policy"] == "compact"
    # Streams purges the repartition records it has processed with DeleteRecords
    repartition = f"{application}-by-region-repartition"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{name}-bounds"})
    starts = [
        consumer.get_watermark_offsets(TopicPartition(repartition, p), timeout=10)[0]
        for p in range(PARTITIONS)
    ]
    consumer.close()
    assert sum(starts) > 0


CONNECT_START_TIMEOUT_S = 120.0
STRING_CONVERTER = "org.apache.kafka.connect.storage.StringConverter"
FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
FILE_SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"


def properties(path, settings: dict) -> str:
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return str(path)


def start_worker(main_class: str, *args: str, log_path) -> subprocess.Popen:
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            apache_kafka.java_command(main_class, *args), stdout=log, stderr=subprocess.STDOUT
        )


def stop_worker(worker: subprocess.Popen) -> None:
    worker.terminate()  # Connect closes its connectors and leaves the group on SIGTERM
    try:
        worker.wait(60)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


def wait_until(condition, timeout_s: float, what: str, worker: subprocess.Popen, log_path):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert worker.poll() is None, f"the worker exited:\n{log_path.read_text()[-3000:]}"
        try:
            if condition():
                return
        except (httpx.HTTPError, ValueError):  # not listening yet, or not answering JSON yet
            pass
        time.sleep(0.5)
    raise AssertionError(f"{what} within {timeout_s:g}s:\n{log_path.read_text()[-3000:]}")


def running(rest: str, connector: str) -> bool:
    answer = httpx.get(f"{rest}/connectors/{connector}/status", timeout=5)
    if answer.status_code != 200:
        return False
    status = answer.json()
    states = [status["connector"]["state"], *(task["state"] for task in status["tasks"])]
    return len(states) > 1 and set(states) == {"RUNNING"}


def worker_settings(bootstrap: str, rest_port: int) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "key.converter": STRING_CONVERTER,
        "value.converter": STRING_CONVERTER,
        "offset.flush.interval.ms": 500,
        "listeners": f"http://127.0.0.1:{rest_port}",
    }


def create_topics(bootstrap: str, *names: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
        future.result(30)


def test_kafka_connect_standalone_file_connectors(bootstrap, topic_name, tmp_path):
    create_topics(bootstrap, topic_name)  # auto-creation is off, as a user runs lakelog
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    source_file.write_text("".join(f"line-{n}\n" for n in range(3)))
    port = apache_kafka.free_port()
    worker = properties(
        tmp_path / "worker.properties",
        worker_settings(bootstrap, port) | {"offset.storage.file.filename": tmp_path / "offsets"},
    )
    source = properties(
        tmp_path / "source.properties",
        {"name": "lines-in", "connector.class": FILE_SOURCE, "tasks.max": 1,
         "file": source_file, "topic": topic_name},
    )  # fmt: skip
    sink = properties(
        tmp_path / "sink.properties",
        {"name": "lines-out", "connector.class": FILE_SINK, "tasks.max": 1,
         "file": sink_file, "topics": topic_name},
    )  # fmt: skip
    log_path = tmp_path / "connect.log"
    process = start_worker(
        "org.apache.kafka.connect.cli.ConnectStandalone", worker, source, sink, log_path=log_path
    )
    rest = f"http://127.0.0.1:{port}"
    try:
        for connector in ("lines-in", "lines-out"):
            wait_until(lambda c=connector: running(rest, c), CONNECT_START_TIMEOUT_S,
                       f"{connector} RUNNING", process, log_path)  # fmt: skip
        lines = [f"line-{n}" for n in range(3)]
        wait_until(lambda: sink_file.exists() and sink_file.read_text().split() == lines,
                   60, "the lines in the sink file", process, log_path)  # fmt: skip
        with source_file.open("a") as more:
            more.write("line-3\n")
        wait_until(lambda: sink_file.read_text().split() == [*lines, "line-3"],
                   60, "the new line in the sink file", process, log_path)  # fmt: skip
    finally:
        stop_worker(process)


def test_kafka_connect_distributed(bootstrap, http, topic_name, tmp_path):
    """A distributed worker keeps its connectors' configs, offsets and statuses in three
    lakelog topics and joins its group with Connect's own group protocol."""
    create_topics(bootstrap, topic_name)
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    source_file.write_text("d-0\nd-1\n")
    port = apache_kafka.free_port()
    internal = {kind: f"{topic_name}-{kind}" for kind in ("configs", "offsets", "status")}
    settings = worker_settings(bootstrap, port) | {
        "group.id": f"{topic_name}-cluster",
        "config.storage.topic": internal["configs"],
        "offset.storage.topic": internal["offsets"],
        "status.storage.topic": internal["status"],
        "config.storage.replication.factor": 1,
        "offset.storage.replication.factor": 1,
        "status.storage.replication.factor": 1,
    }
    worker = properties(tmp_path / "distributed.properties", settings)
    log_path = tmp_path / "connect.log"
    process = start_worker(
        "org.apache.kafka.connect.cli.ConnectDistributed", worker, log_path=log_path
    )
    rest = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: httpx.get(rest, timeout=5).json()["kafka_cluster_id"] == "lakelog",
                   CONNECT_START_TIMEOUT_S, "Connect's REST API", process, log_path)  # fmt: skip
        connectors = {
            "d-in": {"connector.class": FILE_SOURCE, "file": str(source_file), "topic": topic_name},
            "d-out": {"connector.class": FILE_SINK, "file": str(sink_file), "topics": topic_name},
        }
        for name, config in connectors.items():
            created = httpx.post(f"{rest}/connectors", json={"name": name, "config": config},
                                 timeout=30)  # fmt: skip
            assert created.status_code == 201, created.text
        for name in connectors:
            wait_until(lambda n=name: running(rest, n), CONNECT_START_TIMEOUT_S,
                       f"{name} RUNNING", process, log_path)  # fmt: skip
        wait_until(lambda: sink_file.exists() and sink_file.read_text().split() == ["d-0", "d-1"],
                   60, "the lines in the sink file", process, log_path)  # fmt: skip
        group = http.get(f"/v3/clusters/lakelog/consumer-groups/{topic_name}-cluster")
        assert group.status_code == 200, group.text
    finally:
        stop_worker(process)
    for topic in internal.values():
        configs = http.get(f"/v3/clusters/lakelog/topics/{topic}/configs").json()["data"]
        policy = {c["name"]: c["value"] for c in configs}["cleanup.policy"]
        assert policy == "compact", topic  # Connect checks its topics are compacted


def mirror_maker_settings(source: str, target: str, topic: str, group: str) -> dict:
    """MirrorMaker 2 from Apache Kafka ("kafka") into lakelog, topic names kept
    (IdentityReplicationPolicy): the migration path of the README."""
    factors = {
        f"{kind}.replication.factor": 1
        for kind in ("checkpoints.topic", "heartbeats.topic", "offset-syncs.topic",
                     "offset.storage", "status.storage", "config.storage")
    }  # fmt: skip
    return {
        "clusters": "kafka, lakelog",
        "kafka.bootstrap.servers": source,
        "lakelog.bootstrap.servers": target,
        "kafka->lakelog.enabled": "true",
        "kafka->lakelog.topics": topic,
        "kafka->lakelog.groups": group,
        "lakelog->kafka.enabled": "false",
        "replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        "replication.factor": 1,
        **factors,
        "sync.group.offsets.enabled": "true",
        "sync.group.offsets.interval.seconds": 1,
        "emit.checkpoints.interval.seconds": 1,
        "refresh.topics.interval.seconds": 2,
        "refresh.groups.interval.seconds": 2,
        "offset.lag.max": 0,
    }


def records_of(bootstrap: str, topic: str, partitions: int) -> list[tuple]:
    messages = read_to_end(bootstrap, topic, partitions)
    return sorted((m.partition(), m.offset(), m.key(), m.value()) for m in messages)


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = [TopicPartition(topic, p) for p in range(partitions)]
    request = [ConsumerGroupTopicPartitions(group, wanted)]
    answer = admin.list_consumer_group_offsets(request)[group].result(30)
    return [tp.offset for tp in sorted(answer.topic_partitions, key=lambda tp: tp.partition)]


@pytest.fixture
def empty_node(tmp_path):
    """A lakelog node of its own, as a migration starts with: only what MirrorMaker brings."""
    gateway = start_gateway(tmp_path / "lakelog" / "data", kafka=True)
    yield gateway.kafka_address
    gateway.stop()


@pytest.mark.skipif(
    os.environ.get("LAKELOG_MIRROR_MAKER_TEST") != "1",
    reason="flaky under the full suite's load (MirrorMaker sometimes syncs no group offset "
    "within 5 minutes); runs in `make chaos` and with LAKELOG_MIRROR_MAKER_TEST=1",
)
def test_mirror_maker_2_migrates_a_topic_and_its_group_from_apache_kafka(
    apache_kafka_broker, empty_node, topic_name, tmp_path
):
    source, bootstrap = apache_kafka_broker.bootstrap, empty_node
    topic, group = topic_name, f"{topic_name}-billing"
    create_topics(source, topic, partitions=2)
    producer = Producer({"bootstrap.servers": source})
    for n in range(100):
        producer.produce(topic, key=f"k{n}", value=f"v{n}")
    assert producer.flush(30) == 0
    reader = Consumer(
        {"bootstrap.servers": source, "group.id": group, "auto.offset.reset": "earliest",
         "enable.auto.commit": False}
    )  # fmt: skip
    reader.subscribe([topic])
    read = 0
    while read < 60:
        message = reader.poll(1)
        read += message is not None and message.error() is None
    reader.commit(asynchronous=False)
    reader.close()
    source_offsets = committed(source, group, topic, 2)

    settings = mirror_maker_settings(source, bootstrap, topic, group)
    config = properties(tmp_path / "mm2.properties", settings)
    log_path = tmp_path / "mm2.log"
    process = start_worker("org.apache.kafka.connect.mirror.MirrorMaker", config, log_path=log_path)
    try:

        def migrated() -> bool:
            try:
                return all(offset >= 0 for offset in committed(bootstrap, group, topic, 2))
            except Exception:  # the topic or the group is not there yet
                return False

        wait_until(migrated, 300, "the group's offsets in lakelog", process, log_path)
    finally:
        stop_worker(process)

    # The same records at the same offsets. MirrorMaker translates a group's offsets
    # conservatively (never past the last offset sync it has), so the group resumes at or
    # before where it stopped on Kafka: it reads again, it never skips.
    source_records = records_of(source, topic, 2)
    assert records_of(bootstrap, topic, 2) == source_records
    migrated_offsets = committed(bootstrap, group, topic, 2)
    assert all(0 <= m <= s for m, s in zip(migrated_offsets, source_offsets, strict=True))
    unread = {value for partition, offset, _key, value in source_records
              if offset >= source_offsets[partition]}  # fmt: skip
    resumed = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    resumed.subscribe([topic])
    expected = 100 - sum(migrated_offsets)
    seen, deadline = [], time.monotonic() + 60
    while len(seen) < expected and time.monotonic() < deadline:
        message = resumed.poll(1)
        if message is not None and message.error() is None:
            seen.append(message.value())
    resumed.close()
    assert len(seen) == expected and unread <= set(seen)
