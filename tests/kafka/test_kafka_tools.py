"""Kafka's own command-line tools (Apache Kafka 4.1's bin/*.sh main classes, unmodified) against
lakelog's Kafka listener, as a Kafka user runs them: kafka-topics, kafka-configs, the console
producer and consumer, kafka-consumer-groups, kafka-delete-records, kafka-get-offsets and
kafka-acls. Their output is Kafka's text; each check reads the lines a user would."""

from __future__ import annotations

import pytest

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
        "--topic", topic_name,
        "--group", group,
        "--from-beginning",
        "--max-messages", "5",
        "--property", "print.key=true",
        "--property", "print.offset=true",
    ).stdout  # fmt: skip
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
    assert sorted(earliest.split()) == [f"{topic_name}:{full}:2", f"{topic_name}:{other}:0"]


@pytest.fixture(scope="module")
def secured_node(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("tools-acls") / "data"
    tokens = make_keys(data_dir, "admin")
    gateway = start_gateway(data_dir, env=AUTH_ENV, kafka=True)
    yield gateway, tokens["admin"]
    gateway.stop()


def test_kafka_acls(secured_node, topic_name, tmp_path):
    gateway, token = secured_node
    key_id, secret = token.split(".", 1)
    config = tmp_path / "admin.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{key_id}" password="{secret}";\n'
    )
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
