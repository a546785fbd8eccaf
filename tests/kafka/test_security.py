"""The Kafka listener with lakelog's security on (LAKELOG_AUTH=api-keys, LAKELOG_AUTHORIZER=acl):
SASL PLAIN with API keys (username = key id, password = secret), Kafka's ACLs on produce, fetch,
groups and admin, each refusal with its specific error code; without SASL nothing is served."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.gateway_process import start_gateway
from tests.kafka.test_hostile_frames import METADATA, connect, read_answer, request_frame
from tests.security.helpers import AUTH_ENV, add_acl, bearer, make_keys

pytestmark = pytest.mark.gateway

PRINCIPALS = ("admin", "alice", "bob")


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("kafka-auth") / "data"
    tokens = make_keys(data_dir, *PRINCIPALS)
    gateway = start_gateway(data_dir, env=AUTH_ENV, kafka=True)
    with bearer(gateway.url, tokens["admin"]) as admin:
        add_acl(admin, "User:alice", "WRITE", "alice.", pattern_type="PREFIXED")
        add_acl(admin, "User:alice", "READ", "alice.", pattern_type="PREFIXED")
        add_acl(admin, "User:alice", "DESCRIBE", "alice.", pattern_type="PREFIXED")
        add_acl(admin, "User:alice", "READ", "alice-group", resource_type="GROUP")
    yield gateway, tokens
    gateway.stop()


def sasl(gateway, token: str, **extra) -> dict:
    key_id, secret = token.split(".", 1)
    return {
        "bootstrap.servers": gateway.kafka_address,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": key_id,
        "sasl.password": secret,
        **extra,
    }


def create(gateway, tokens, name: str) -> None:
    admin = AdminClient(sasl(gateway, tokens["admin"]))
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)


def delivery_errors(config: dict, topic: str, count: int = 3) -> list:
    producer = Producer({**config, "message.timeout.ms": 10000})
    errors = []
    for n in range(count):
        producer.produce(topic, value=f"v{n}".encode(), on_delivery=lambda e, m: errors.append(e))
    producer.flush(30)
    return errors


def test_without_sasl_the_listener_serves_nothing(secured):
    gateway, _ = secured
    with connect(gateway.kafka_address) as sock:
        sock.sendall(
            request_frame(
                METADATA, 12, {"topics": None, "include_topic_authorized_operations": False}
            )
        )
        assert read_answer(sock) is None  # closed before answering


def test_a_wrong_secret_fails_sasl_authentication(secured):
    gateway, tokens = secured
    key_id = tokens["alice"].split(".", 1)[0]
    errors = []
    producer = Producer(
        {**sasl(gateway, f"{key_id}.not-the-secret"), "error_cb": lambda e: errors.append(e)}
    )
    for _ in range(40):
        producer.poll(0.25)
        if errors:
            break
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION
    assert "invalid credentials" in errors[0].str()


def test_acls_decide_produce_and_consume(secured):
    gateway, tokens = secured
    for name in ("alice.orders", "secret.orders"):
        create(gateway, tokens, name)
    alice = sasl(gateway, tokens["alice"])
    assert delivery_errors(alice, "alice.orders") == [None, None, None]
    refused = delivery_errors(alice, "secret.orders")
    assert {e.code() for e in refused} == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    bob = sasl(gateway, tokens["bob"])
    assert {e.code() for e in delivery_errors(bob, "alice.orders")} == {
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    }

    consumer = Consumer({**alice, "group.id": "alice-group", "auto.offset.reset": "earliest"})
    consumer.subscribe(["alice.orders"])
    values = []
    for _ in range(60):
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
        if len(values) == 3:
            break
    consumer.close()
    assert values == [b"v0", b"v1", b"v2"]

    other_group = Consumer({**alice, "group.id": "bob-group", "auto.offset.reset": "earliest"})
    other_group.subscribe(["alice.orders"])
    errors = set()
    for _ in range(20):
        message = other_group.poll(0.5)
        if message is not None and message.error() is not None:
            errors.add(message.error().code())
            break
    other_group.close()
    assert KafkaError.GROUP_AUTHORIZATION_FAILED in errors


def test_metadata_shows_only_what_the_principal_may_describe(secured):
    gateway, tokens = secured
    create(gateway, tokens, "alice.visible")
    create(gateway, tokens, "hidden.topic")
    alice = AdminClient(sasl(gateway, tokens["alice"]))
    topics = set(alice.list_topics(timeout=30).topics)
    assert "alice.visible" in topics and "hidden.topic" not in topics
    with pytest.raises(Exception) as refused:
        alice.create_topics([NewTopic("alice.new", 1, 1)])["alice.new"].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    consumer = Consumer({**sasl(gateway, tokens["alice"]), "group.id": "alice-group"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition("alice.visible", 0), 30)
        assert (low, high) == (0, 0)
    finally:
        consumer.close()


def test_acl_admin_apis_create_describe_and_delete(secured):
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    gateway, tokens = secured
    admin = AdminClient(sasl(gateway, tokens["admin"]))
    binding = AclBinding(
        ResourceType.TOPIC,
        "bob.",
        ResourcePatternType.PREFIXED,
        "User:bob",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    admin.create_acls([binding])[binding].result(30)
    bob_filter = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        "User:bob",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert admin.describe_acls(bob_filter).result(30) == [binding]
    create(gateway, tokens, "bob.events")
    assert delivery_errors(sasl(gateway, tokens["bob"]), "bob.events") == [None, None, None]

    deleted = admin.delete_acls([bob_filter])[bob_filter].result(30)
    assert deleted == [binding]
    assert admin.describe_acls(bob_filter).result(30) == []
    alice = AdminClient(sasl(gateway, tokens["alice"]))  # no ALTER on the cluster
    with pytest.raises(Exception) as refused:
        alice.create_acls([binding])[binding].result(30)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
