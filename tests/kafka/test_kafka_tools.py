"""Kafka's own command-line tools (Apache Kafka 4.1's bin/*.sh main classes, unmodified) against
lakelog's Kafka listener, as a Kafka user runs them: kafka-topics, kafka-configs, the console
producer and consumer, kafka-consumer-groups, kafka-delete-records, kafka-get-offsets and
kafka-acls, kafka-log-dirs, kafka-leader-election, kafka-reassign-partitions and
kafka-transactions. Their output is Kafka's text; each check reads the lines a user would."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests import apache_kafka
from tests.gateway_process import start_gateway
from tests.security.helpers import AUTH_ENV, make_keys

pytestmark = pytest.mark.gateway


def run(name: str, *args: str, stdin: str | None = None, ok: bool = True):
    done = apache_kafka.tool(name, *args, stdin=stdin)
    if ok:
        assert done.returncode == 0, f"{name} {args}:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done


def rows(output: str, first_column: str) -> list[list[str]]:
    """The whitespace-separated rows of a table whose header starts with `first_column`."""
    lines = [line.split() for line in output.splitlines() if line.strip()]
    return [line for line in lines if line and line[0] != first_column]


def test_kafka_topics(bootstrap, topic_name):
    server = ("--bootstrap-server", bootstrap)
    create = ("--create", "--topic", topic_name, "--partitions", "3")
    done = run("kafka-topics", *server, *create, "--config", "retention.ms=1000")
    assert done.stdout.strip() == f"Created topic {topic_name}."
    again = run("kafka-topics", *server, *create, ok=False)
    assert again.returncode == 1 and f"Topic '{topic_name}' already exists." in again.stdout

    assert topic_name in run("kafka-topics", *server, "--list").stdout.split()
    described = run("kafka-topics", *server, "--describe", "--topic", topic_name).stdout
    assert "PartitionCount: 3" in described and "Configs: retention.ms=1000" in described
    partitions = [line for line in described.splitlines() if line.strip().startswith("Topic:")]
    assert [line.split("Partition: ")[1].split()[0] for line in partitions[1:]] == ["0", "1", "2"]

    run("kafka-topics", *server, "--alter", "--topic", topic_name, "--partitions", "5")
    described = run("kafka-topics", *server, "--describe", "--topic", topic_name).stdout
    assert "PartitionCount: 5" in described

    run("kafka-topics", *server, "--delete", "--topic", topic_name)
    assert topic_name not in run("kafka-topics", *server, "--list").stdout.split()
    missing = run("kafka-topics", *server, "--describe", "--topic", topic_name, ok=False)
    assert missing.returncode == 1 and "does not exist" in missing.stdout


def test_internal_topics_are_listed_and_described_but_never_written_or_read(bootstrap, http):
    """`__consumer_offsets` and `__transaction_state` appear as Kafka's tools show them
    (internal, 50 partitions, compacted); their content lives in `_meta`, so a produce or a
    fetch is refused with INVALID_TOPIC_EXCEPTION and a message saying where it is."""
    server = ("--bootstrap-server", bootstrap)
    listed = run("kafka-topics", *server, "--list").stdout.split()
    assert {"__consumer_offsets", "__transaction_state"} <= set(listed)
    external = run("kafka-topics", *server, "--list", "--exclude-internal").stdout.split()
    assert "__consumer_offsets" not in external
    described = run("kafka-topics", *server, "--describe", "--topic", "__consumer_offsets").stdout
    assert "PartitionCount: 50" in described and "Configs: cleanup.policy=compact" in described
    create = ("--create", "--topic", "__transaction_state", "--partitions", "1")
    again = run("kafka-topics", *server, *create, ok=False)
    assert "Topic '__transaction_state' already exists." in again.stdout

    reports = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000})
    producer.produce(
        "__consumer_offsets", b"v", partition=0, on_delivery=lambda e, m: reports.append(e)
    )
    producer.flush(15)
    assert [e.code() for e in reports] == [KafkaError.TOPIC_EXCEPTION]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "internal-reader"})
    consumer.assign([TopicPartition("__consumer_offsets", 0, 0)])
    try:
        errors = [m.error() for m in (consumer.poll(1) for _ in range(10)) if m and m.error()]
    finally:
        consumer.close()
    assert errors and errors[0].code() == KafkaError.TOPIC_EXCEPTION
    answer = http.get("/topics/__consumer_offsets")  # over HTTP, the same refusal
    assert (answer.status_code, answer.json()["error_code"]) == (400, 40002)
    assert "_meta/consumer_offsets" in answer.json()["message"]


def test_kafka_configs(bootstrap, topic_name):
    server = ("--bootstrap-server", bootstrap)
    run("kafka-topics", *server, "--create", "--topic", topic_name)
    entity = ("--entity-type", "topics", "--entity-name", topic_name)
    run("kafka-configs", *server, *entity, "--alter", "--add-config", "retention.ms=5000")
    run(
        "kafka-configs",
        *server,
        *entity,
        "--alter",
        "--add-config",
        "cleanup.policy=[compact,delete]",
    )
    described = run("kafka-configs", *server, *entity, "--describe").stdout
    assert "retention.ms=5000 sensitive=false" in described
    assert "cleanup.policy=compact,delete sensitive=false" in described

    run("kafka-configs", *server, *entity, "--alter", "--delete-config", "retention.ms")
    described = run("kafka-configs", *server, *entity, "--describe").stdout
    assert "retention.ms" not in described and "cleanup.policy" in described
    everything = run("kafka-configs", *server, *entity, "--describe", "--all").stdout
    assert "retention.ms=604800000 sensitive=false" in everything  # back to the default

    bad = run(
        "kafka-configs", *server, *entity, "--alter", "--add-config", "retention.ms=abc", ok=False
    )
    assert bad.returncode == 1
    assert "InvalidConfigurationException: Invalid value 'abc' for 'retention.ms'" in bad.stderr


def test_kafka_configs_sets_lakelogs_own_topic_configs(bootstrap, topic_name):
    """kafka-topics --create --config checks names against Kafka's own list before sending
    (README: set lakelog's with kafka-configs); kafka-configs sends them, and the node checks."""
    server = ("--bootstrap-server", bootstrap)
    refused = run(
        "kafka-topics", *server, "--create", "--topic", topic_name,
        "--config", "delta.commit.interval.ms=500", ok=False,
    )  # fmt: skip
    assert "Unknown topic config name: delta.commit.interval.ms" in refused.stdout + refused.stderr
    run("kafka-topics", *server, "--create", "--topic", topic_name)
    entity = ("--entity-type", "topics", "--entity-name", topic_name)
    interval = ("--alter", "--add-config", "delta.commit.interval.ms=500")
    run("kafka-configs", *server, *entity, *interval)
    described = run("kafka-configs", *server, *entity, "--describe").stdout
    assert "delta.commit.interval.ms=500 sensitive=false" in described
    too_long = run(
        "kafka-configs", *server, *entity, "--alter",
        "--add-config", "delta.commit.interval.ms=20000", ok=False,
    )  # fmt: skip
    assert "it must be between 0 and 10000" in too_long.stderr


def test_console_clients_and_consumer_groups(bootstrap, topic_name):
    server = ("--bootstrap-server", bootstrap)
    group = f"{topic_name}-group"
    run("kafka-topics", *server, "--create", "--topic", topic_name, "--partitions", "1")
    lines = "".join(f"key{n}:value{n}\n" for n in range(5))
    key_settings = ("--property", "parse.key=true", "--property", "key.separator=:")
    run("kafka-console-producer", *server, "--topic", topic_name, *key_settings, stdin=lines)
    consumed = run(
        "kafka-console-consumer",
        *server,
        "--topic",
        topic_name,
        "--group",
        group,
        "--from-beginning",
        "--max-messages",
        "5",
        "--property",
        "print.key=true",
        "--property",
        "print.offset=true",
    ).stdout
    assert consumed.splitlines() == [f"Offset:{n}\tkey{n}\tvalue{n}" for n in range(5)]

    groups = ("kafka-consumer-groups", *server)
    assert group in run(*groups, "--list").stdout.split()
    described = run(*groups, "--describe", "--group", group).stdout
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
    assert [row[:6] for row in rows(described, "GROUP")] == [
        [group, topic_name, "0", "5", "5", "0"]
    ]
    state = rows(run(*groups, "--describe", "--group", group, "--state").stdout, "GROUP")
    assert state[0][0] == group and "Empty" in state[0]

    reset = ("--group", group, "--topic", topic_name, "--reset-offsets")
    planned = rows(run(*groups, *reset, "--to-earliest", "--dry-run").stdout, "GROUP")
    assert planned == [[group, topic_name, "0", "0"]]
    described = run(*groups, "--describe", "--group", group).stdout
    assert [row[3] for row in rows(described, "GROUP")] == ["5"]  # a dry run changes nothing
    run(*groups, *reset, "--to-earliest", "--execute")
    run(*groups, *reset, "--shift-by", "2", "--execute")
    described = run(*groups, "--describe", "--group", group).stdout
    assert [row[3:6] for row in rows(described, "GROUP")] == [["2", "5", "3"]]

    run(*groups, "--group", group, "--topic", topic_name, "--delete-offsets")
    assert rows(run(*groups, "--describe", "--group", group).stdout, "GROUP") == []
    deleted = run(*groups, "--group", group, "--delete").stdout
    assert f"Deletion of requested consumer groups ('{group}') was successful." in deleted
    assert group not in run(*groups, "--list").stdout.split()


def test_delete_records_and_get_offsets(bootstrap, topic_name, tmp_path):
    server = ("--bootstrap-server", bootstrap)
    run("kafka-topics", *server, "--create", "--topic", topic_name, "--partitions", "2")
    records = "".join(f"{n}\n" for n in range(6))
    run("kafka-console-producer", *server, "--topic", topic_name, stdin=records)
    latest = run("kafka-get-offsets", *server, "--topic", topic_name).stdout.split()
    ends = {partition: end for _, partition, end in (line.rsplit(":", 2) for line in latest)}
    assert sum(map(int, ends.values())) == 6
    full = max(ends, key=lambda p: int(ends[p]))  # keyless records stick to a partition

    plan = tmp_path / "delete.json"
    plan.write_text(
        f'{{"partitions":[{{"topic":"{topic_name}","partition":{full},"offset":2}}],"version":1}}'
    )
    done = run("kafka-delete-records", *server, "--offset-json-file", str(plan)).stdout
    assert f"partition: {topic_name}-{full}\tlow_watermark: 2" in done
    earliest = run("kafka-get-offsets", *server, "--topic", topic_name, "--time", "-2").stdout
    other = 1 - int(full)
    assert sorted(earliest.split()) == sorted([f"{topic_name}:{full}:2", f"{topic_name}:{other}:0"])


@pytest.fixture(scope="module")
def secured_node(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("tools-acls") / "data"
    tokens = make_keys(data_dir, "admin")
    gateway = start_gateway(data_dir, env=AUTH_ENV, kafka=True)
    yield gateway, tokens["admin"]
    gateway.stop()


def admin_properties(token: str, directory) -> object:
    """A client properties file that logs in over SASL PLAIN with an API key."""
    key_id, secret = token.split(".", 1)
    config = directory / "admin.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{key_id}" password="{secret}";\n'
    )
    return config


def test_kafka_acls(secured_node, topic_name, tmp_path):
    gateway, token = secured_node
    config = admin_properties(token, tmp_path)
    acls = (
        "kafka-acls",
        "--bootstrap-server",
        gateway.kafka_address,
        "--command-config",
        str(config),
    )
    principal = ("--allow-principal", "User:erin")
    topic = ("--topic", topic_name)
    run(*acls, "--add", *principal, "--operation", "Read", "--operation", "Write", *topic)
    listed = run(*acls, "--list", *topic).stdout
    assert "principal=User:erin, host=*, operation=READ, permissionType=ALLOW" in listed
    assert "principal=User:erin, host=*, operation=WRITE, permissionType=ALLOW" in listed
    run(*acls, "--remove", "--force", *principal, "--operation", "Write", *topic)
    listed = run(*acls, "--list", *topic).stdout
    assert "operation=READ" in listed and "operation=WRITE" not in listed


def test_kafka_log_dirs_leader_election_and_reassignments(kafka_gateway, topic_name, tmp_path):
    """The replica tools, answered for a system whose only replica is the leader."""
    server = ("--bootstrap-server", kafka_gateway.kafka_address)
    run("kafka-topics", *server, "--create", "--topic", topic_name, "--partitions", "2")
    run("kafka-console-producer", *server, "--topic", topic_name, stdin="a\nb\nc\n")

    described = run("kafka-log-dirs", *server, "--describe", "--topic-list", topic_name).stdout
    report = json.loads(described.strip().splitlines()[-1])
    (broker,) = report["brokers"]
    (log_dir,) = broker["logDirs"]
    assert log_dir["logDir"] == str(kafka_gateway.data_dir) and log_dir["error"] is None
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    assert set(sizes) == {f"{topic_name}-0", f"{topic_name}-1"}
    assert sum(sizes.values()) > 0  # the Parquet bytes of the three records

    elect = ("kafka-leader-election", *server, "--topic", topic_name, "--partition", "0")
    done = run(*elect, "--election-type", "PREFERRED").stdout
    assert f"Valid replica already elected for partitions {topic_name}-0" in done
    done = run(*elect, "--election-type", "UNCLEAN").stdout
    assert f"Valid replica already elected for partitions {topic_name}-0" in done

    leader = broker["broker"]
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [{"topic": topic_name, "partition": 0, "replicas": [leader]}],
            }
        )
    )
    reassign = ("kafka-reassign-partitions", *server, "--reassignment-json-file", str(plan))
    done = run(*reassign, "--execute").stdout
    assert f"Successfully started partition reassignment for {topic_name}-0" in done
    assert (
        "No partition reassignments found."
        in run("kafka-reassign-partitions", *server, "--list").stdout
    )
    done = run(*reassign, "--verify").stdout
    assert f"Reassignment of partition {topic_name}-0 is completed." in done
    assert (
        "None of the specified partition reassignments are active."
        in run(*reassign, "--cancel").stdout
    )


def test_kafka_get_offsets_by_special_times(bootstrap, topic_name):
    server = ("--bootstrap-server", bootstrap)
    run("kafka-topics", *server, "--create", "--topic", topic_name)
    stamps = [1_700_000_003_000, 1_700_000_009_000, 1_700_000_001_000]  # the largest in the middle
    producer = Producer({"bootstrap.servers": bootstrap})
    for n, stamp in enumerate(stamps):
        producer.produce(topic_name, value=f"v{n}".encode(), timestamp=stamp)
    assert producer.flush(30) == 0

    def offsets(time: str) -> list[str]:
        return run(
            "kafka-get-offsets", *server, "--topic", topic_name, "--time", time
        ).stdout.split()

    assert offsets("-1") == [f"{topic_name}:0:3"]
    assert offsets("-2") == [f"{topic_name}:0:0"]
    assert offsets("-3") == [f"{topic_name}:0:1"]  # max-timestamp: the record with the largest
    assert offsets("-4") == [f"{topic_name}:0:0"]  # earliest-local: all of it is local
    assert offsets("-5") == []  # latest-tiered: nothing is tiered (-1, which the tool omits)
    assert offsets(str(1_700_000_004_000)) == [f"{topic_name}:0:1"]


def test_kafka_topics_describe_pages_through_partitions(bootstrap, topic_name):
    server = ("--bootstrap-server", bootstrap)
    run("kafka-topics", *server, "--create", "--topic", topic_name, "--partitions", "5")
    described = run(
        "kafka-topics",
        *server,
        "--describe",
        "--topic",
        topic_name,
        "--partition-size-limit-per-response",
        "2",
    ).stdout
    lines = [line.split("\t") for line in described.splitlines() if "Partition: " in line]
    assert [line[2] for line in lines] == [f"Partition: {n}" for n in range(5)]
    assert all(line[-2:] == ["Elr: ", "LastKnownElr: "] for line in lines)


def test_kafka_transactions(bootstrap, topic_name):
    server = ("--bootstrap-server", bootstrap)
    run("kafka-topics", *server, "--create", "--topic", topic_name)
    transactional_id = f"{topic_name}-txn"
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions()
    producer.begin_transaction()
    producer.produce(topic_name, value=b"open")
    assert producer.flush(30) == 0

    tool = ("kafka-transactions", *server)
    listed = rows(run(*tool, "list").stdout, "TransactionalId")
    assert [transactional_id, "Ongoing"] in [[row[0], row[3]] for row in listed]
    described = rows(
        run(*tool, "describe", "--transactional-id", transactional_id).stdout, "CoordinatorId"
    )
    assert described[0][1] == transactional_id and described[0][4] == "Ongoing"
    assert described[0][-1] == f"{topic_name}-0"  # TopicPartitions
    missing = run(*tool, "describe", "--transactional-id", f"{topic_name}-never", ok=False)
    assert missing.returncode == 1 and "could not be found" in missing.stderr
    producers = rows(
        run(*tool, "describe-producers", "--topic", topic_name, "--partition", "0").stdout,
        "ProducerId",
    )
    assert len(producers) == 1 and producers[0][-1] == "0"  # CurrentTransactionStartOffset

    producer.commit_transaction()
    listed = rows(run(*tool, "list").stdout, "TransactionalId")
    assert [transactional_id, "CompleteCommit"] in [[row[0], row[3]] for row in listed]
    producers = rows(
        run(*tool, "describe-producers", "--topic", topic_name, "--partition", "0").stdout,
        "ProducerId",
    )
    assert producers[0][-1] == "None"  # no open transaction


def test_kafka_configs_cluster_wide_broker_defaults(bootstrap, topic_name):
    server = ("--bootstrap-server", bootstrap)
    run("kafka-topics", *server, "--create", "--topic", topic_name)
    brokers = ("kafka-configs", *server, "--entity-type", "brokers", "--entity-default")
    topic = ("kafka-configs", *server, "--entity-type", "topics", "--entity-name", topic_name)
    try:
        run(*brokers, "--alter", "--add-config", "log.retention.ms=3600000")
        assert "log.retention.ms=3600000" in run(*brokers, "--describe").stdout
        everything = run(*topic, "--describe", "--all").stdout
        source = "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=3600000"
        assert f"retention.ms=3600000 sensitive=false {source}" in everything
        one_broker = ("kafka-configs", *server, "--entity-type", "brokers", "--entity-name", "0")
        refused = run(*one_broker, "--alter", "--add-config", "log.retention.ms=1", ok=False)
        assert refused.returncode == 1 and "has no configs of its own" in refused.stderr
        unknown = run(*brokers, "--alter", "--add-config", "num.io.threads=4", ok=False)
        assert unknown.returncode == 1 and "num.io.threads: not a broker config" in unknown.stderr
    finally:
        run(*brokers, "--alter", "--delete-config", "log.retention.ms")
    assert "log.retention.ms" not in run(*brokers, "--describe").stdout


def quotas_listed(gateway) -> str:
    """What `lakelog quotas list` prints for the node's storage root."""
    root = ["--data-dir", str(gateway.data_dir)]
    command = [sys.executable, "-m", "api.cli", "quotas", "list", *root]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def test_kafka_configs_user_quotas(secured_node, tmp_path):
    gateway, token = secured_node
    config = admin_properties(token, tmp_path)
    users = (
        "kafka-configs",
        "--bootstrap-server",
        gateway.kafka_address,
        "--command-config",
        str(config),
        "--entity-type",
        "users",
    )
    done = run(
        *users,
        "--entity-name",
        "frank",
        "--alter",
        "--add-config",
        "producer_byte_rate=5000,consumer_byte_rate=7000",
    )
    assert done.stdout.strip() == "Completed updating config for user frank."
    listed = quotas_listed(gateway)
    assert "User:frank\tproduce_bytes_per_s=5000\tfetch_bytes_per_s=7000" in listed
    refused = run(
        *users,
        "--entity-name",
        "frank",
        "--alter",
        "--add-config",
        "request_percentage=50",
        ok=False,
    )
    assert (
        refused.returncode == 1 and "Quota 'request_percentage' is not kept here" in refused.stderr
    )
    run(
        *users,
        "--entity-name",
        "frank",
        "--alter",
        "--delete-config",
        "producer_byte_rate,consumer_byte_rate",
    )
    listed = quotas_listed(gateway)
    assert "User:frank" not in listed


def test_kafka_configs_of_a_group(bootstrap, http):
    """`kafka-configs --entity-type groups` sets, shows and deletes a share group's configs
    (the GROUP config resource); the HTTP view shows the same settings."""
    server = ("--bootstrap-server", bootstrap)
    entity = ("--entity-type", "groups", "--entity-name", "tools-share")
    settings = "share.auto.offset.reset=earliest,share.record.lock.duration.ms=20000"
    run("kafka-configs", *server, *entity, "--alter", "--add-config", settings)
    described = run("kafka-configs", *server, *entity, "--describe").stdout
    assert "share.auto.offset.reset=earliest" in described
    assert "share.record.lock.duration.ms=20000" in described
    listed = http.get("/v3/clusters/lakelog/share-groups/tools-share/configs").json()["data"]
    assert {"name": "share.auto.offset.reset", "value": "earliest"}.items() <= next(
        c for c in listed if c["name"] == "share.auto.offset.reset"
    ).items()
    run("kafka-configs", *server, *entity, "--alter", "--delete-config", "share.auto.offset.reset")
    described = run("kafka-configs", *server, *entity, "--describe").stdout
    assert "share.auto.offset.reset" not in described
    refused = run(
        "kafka-configs",
        *server,
        *entity,
        "--alter",
        "--add-config",
        "share.record.lock.duration.ms=5",
        ok=False,
    )
    assert refused.returncode != 0
    assert "between 15000 and 60000" in refused.stderr + refused.stdout
