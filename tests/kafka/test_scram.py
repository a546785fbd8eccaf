"""SASL SCRAM-SHA-256 and SCRAM-SHA-512 on the Kafka listener: credentials managed with Kafka's
own kafka-configs (AlterUserScramCredentials, DescribeUserScramCredentials) and with
`lakelog scram`, stored salted; Java clients and librdkafka authenticate with them; ACLs apply
to the principal as to any other; wrong passwords and malformed exchanges are refused with
SASL_AUTHENTICATION_FAILED and the node serves on."""

from __future__ import annotations

import struct
import subprocess
import sys

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from storage_layout.meta.principals import PrincipalStore
from tests import apache_kafka
from tests.gateway_process import start_gateway
from tests.kafka.test_hostile_frames import (
    api_versions_answered,
    connect,
    read_answer,
    request_frame,
)
from tests.kafka.test_kafka_tools import admin_properties
from tests.kafka.test_security import sasl
from tests.security.helpers import AUTH_ENV, add_acl, bearer, make_keys

pytestmark = pytest.mark.gateway

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SASL_AUTHENTICATION_FAILED = 58


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("scram") / "data"
    tokens = make_keys(data_dir, "admin")
    gateway = start_gateway(data_dir, env=AUTH_ENV, kafka=True)
    yield gateway, tokens["admin"]
    gateway.stop()


def scram_config(gateway, user: str, password: str, mechanism: str) -> dict:
    return {
        "bootstrap.servers": gateway.kafka_address,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def java_properties(tmp_path, user: str, password: str, mechanism: str):
    module = "org.apache.kafka.common.security.scram.ScramLoginModule"
    path = tmp_path / f"{user}-{mechanism}.properties"
    path.write_text(
        f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\n"
        f'sasl.jaas.config={module} required username="{user}" password="{password}";\n'
    )
    return str(path)


def test_kafka_configs_manages_credentials_and_clients_log_in(node, topic_name, tmp_path):
    gateway, token = node
    admin = ("--bootstrap-server", gateway.kafka_address, "--command-config")
    admin_file = admin_properties(token, tmp_path)
    users = ("kafka-configs", *admin, str(admin_file), "--entity-type", "users")
    user = f"scram-{topic_name[-6:]}"
    # one mechanism per request: Kafka refuses two changes of one user in a request
    settings = (
        "SCRAM-SHA-256=[iterations=8192,password=s3cret]",
        "SCRAM-SHA-512=[password=s3cret]",
    )
    for setting in settings:
        alter = ("--entity-name", user, "--alter", "--add-config", setting)
        done = apache_kafka.tool(*users, *alter)
        assert done.returncode == 0, done.stderr[-2000:]
    described = apache_kafka.tool(*users, "--entity-name", user, "--describe")
    assert (
        f"SCRAM credential configs for user-principal '{user}' are "
        "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096"
    ) in described.stdout

    # The principal User:<user> is authorized by ACL like any other
    with bearer(gateway.url, token) as http_admin:
        add_acl(http_admin, f"User:{user}", "DESCRIBE", topic_name)
        add_acl(http_admin, f"User:{user}", "WRITE", topic_name)
    creator = AdminClient(sasl(gateway, token))
    creator.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)

    listed = apache_kafka.tool(
        "kafka-topics", "--bootstrap-server", gateway.kafka_address,
        "--command-config", java_properties(tmp_path, user, "s3cret", "SCRAM-SHA-512"), "--list",
    )  # fmt: skip
    assert listed.returncode == 0 and listed.stdout.split() == [topic_name], listed.stderr[-2000:]

    producer = Producer(scram_config(gateway, user, "s3cret", "SCRAM-SHA-256"))
    errors = []
    producer.produce(topic_name, b"by scram", on_delivery=lambda e, m: errors.append(e))
    assert producer.flush(30) == 0 and errors == [None]

    wrong = apache_kafka.tool(
        "kafka-topics", "--bootstrap-server", gateway.kafka_address,
        "--command-config", java_properties(tmp_path, user, "not-it", "SCRAM-SHA-256"), "--list",
    )  # fmt: skip
    assert wrong.returncode == 1 and "SaslAuthenticationException" in wrong.stderr

    delete = ("--entity-name", user, "--alter", "--delete-config", "SCRAM-SHA-512")
    done = apache_kafka.tool(*users, *delete)
    assert done.returncode == 0, done.stderr[-2000:]
    described = apache_kafka.tool(*users, "--entity-name", user, "--describe")
    assert "SCRAM-SHA-256=iterations=8192" in described.stdout
    assert "SCRAM-SHA-512" not in described.stdout


def test_bad_credentials_get_kafkas_error_codes(node):
    gateway, token = node
    admin = AdminClient(sasl(gateway, token))
    few = UserScramCredentialUpsertion(
        "erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100), b"pw", b"salt"
    )
    with pytest.raises(KafkaException) as refused:
        admin.alter_user_scram_credentials([few])["erin"].result(30)
    assert refused.value.args[0].name() == "UNACCEPTABLE_CREDENTIAL"
    missing = UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_512)
    with pytest.raises(KafkaException) as refused:
        admin.alter_user_scram_credentials([missing])["nobody"].result(30)
    assert refused.value.args[0].name() == "RESOURCE_NOT_FOUND"
    with pytest.raises(KafkaException) as refused:
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(30)
    assert refused.value.args[0].name() == "RESOURCE_NOT_FOUND"


def test_lakelog_cli_credentials_are_stored_salted(node, tmp_path):
    gateway, _ = node
    cli = [sys.executable, "-m", "api.cli", "scram"]
    root = ["--data-dir", str(gateway.data_dir)]
    done = subprocess.run(
        [*cli, "set", "--principal", "User:frank", "--mechanism", "SCRAM-SHA-512", *root],
        input="frank-password\n", capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed = subprocess.run([*cli, "list", *root], capture_output=True, text=True, check=True)
    assert "User:frank\tSCRAM-SHA-512\titerations=8192" in listed.stdout
    stored = PrincipalStore(str(gateway.data_dir)).table.documents("scram")[
        "User:frank|SCRAM-SHA-512"
    ]
    assert set(stored) == {"iterations", "salt", "stored_key", "server_key"}
    assert "frank-password" not in str(stored)

    # a credential made by the CLI logs in at once (the node reads the store again on a miss)
    admin = AdminClient(scram_config(gateway, "frank", "frank-password", "SCRAM-SHA-512"))
    assert admin.list_topics(timeout=15).brokers

    refused = subprocess.run(
        [*cli, "set", "--principal", "User:frank", "--iterations", "10", *root],
        input="x\n", capture_output=True, text=True,
    )  # fmt: skip
    assert refused.returncode == 1 and "Iterations must be 4096..16384" in refused.stderr


def authenticate_frames(address: str, mechanism: str, messages: list[bytes]) -> list[bytes | None]:
    """Raw SaslHandshake then SaslAuthenticate frames; each answer (None: closed)."""
    with connect(address) as sock:
        sock.sendall(request_frame(SASL_HANDSHAKE, 1, {"mechanism": mechanism}))
        answers = [read_answer(sock)]
        for message in messages:
            sock.sendall(request_frame(SASL_AUTHENTICATE, 2, {"auth_bytes": message}))
            answers.append(read_answer(sock))
            if answers[-1] is None:
                break
        return answers


@pytest.mark.parametrize(
    "messages",
    [
        [b"garbage"],
        [b"n,,n=,r=abc"],
        [b"n,,n=grace,r=abc", b"c=biws,r=not-the-nonce,p=AAAA"],
        [b"\xff\xfe"],
    ],
    ids=["garbage", "empty-user", "wrong-nonce", "not-utf8"],
)
def test_a_malformed_exchange_is_refused_and_the_node_serves_on(node, messages):
    gateway, token = node
    grace = UserScramCredentialUpsertion(
        "grace", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"grace-password"
    )
    admin = AdminClient(sasl(gateway, token))
    admin.alter_user_scram_credentials([grace])["grace"].result(30)
    answers = authenticate_frames(gateway.kafka_address, "SCRAM-SHA-512", messages)
    failed = answers[-1]
    assert failed is not None  # answered, then closed
    # SaslAuthenticate v2 response: correlation id, tagged fields, then the error code
    (code,) = struct.unpack_from(">h", failed, 5)
    assert code == SASL_AUTHENTICATION_FAILED
    assert api_versions_answered(gateway.kafka_address)
    login = AdminClient(scram_config(gateway, "grace", "grace-password", "SCRAM-SHA-512"))
    assert login.list_topics(timeout=15).brokers
