"""The schema registry with API keys and ACLs on: reads need a principal; registering needs
WRITE, and deletes and subject settings ALTER, on the subject (resource type SUBJECT) or on the
topic of a `<topic>-key`/`<topic>-value` subject; the global level needs ALTER on the cluster.
Confluent's registry client authenticates with `basic.auth.user.info`."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from tests.gateway_process import start_gateway
from tests.security.helpers import (
    AUTH_ENV,
    PROPAGATION_S,
    add_acl,
    assert_error,
    bearer,
    make_keys,
)

SCHEMA = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "a", "type": "int"}]})


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("registry-auth") / "data"
    tokens = make_keys(data_dir, "admin", "alice", "bob")
    gateway = start_gateway(data_dir, env=AUTH_ENV)
    clients = {name: bearer(gateway.url, token) for name, token in tokens.items()}
    add_acl(clients["admin"], "User:alice", "WRITE", "orders")
    add_acl(
        clients["admin"],
        "User:alice",
        "ALL",
        "acme.",
        resource_type="SUBJECT",
        pattern_type="PREFIXED",
    )
    time.sleep(PROPAGATION_S)
    yield {"gateway": gateway, "tokens": tokens, **clients}
    for client in clients.values():
        client.close()
    gateway.stop()


def _register(client: httpx.Client, subject: str) -> httpx.Response:
    return client.post(f"/subjects/{subject}/versions", json={"schema": SCHEMA})


def test_reading_needs_a_principal(env):
    url = env["gateway"].url
    assert_error(httpx.get(f"{url}/subjects"), 401, 40101)
    assert_error(httpx.get(f"{url}/schemas/ids/1"), 401, 40101)
    assert env["bob"].get("/subjects").status_code == 200


def test_registering_needs_write_on_the_topic_or_the_subject(env):
    alice, bob = env["alice"], env["bob"]
    assert_error(_register(bob, "orders-value"), 403, 40301)
    assert _register(alice, "orders-value").status_code == 200
    assert _register(alice, "acme.Order").status_code == 200  # the SUBJECT ACL, by prefix
    assert_error(_register(alice, "payments-value"), 403, 40301)
    # any principal reads and looks up what is registered
    found = bob.post("/subjects/orders-value", json={"schema": SCHEMA})
    assert found.status_code == 200 and found.json()["version"] == 1


def test_deletes_and_settings_need_alter(env):
    alice, admin = env["alice"], env["admin"]
    _register(alice, "acme.Deletable")
    assert_error(alice.delete("/subjects/orders-value"), 403, 40301)  # WRITE is not ALTER
    assert alice.delete("/subjects/acme.Deletable").json() == [1]  # ALL on the subject
    assert_error(alice.put("/config/orders-value", json={"compatibility": "NONE"}), 403, 40301)
    assert_error(alice.put("/config", json={"compatibility": "NONE"}), 403, 40301)
    assert admin.put("/config/orders-value", json={"compatibility": "NONE"}).status_code == 200


def test_confluents_client_with_basic_auth(env):
    key_id, secret = env["tokens"]["alice"].split(".", 1)
    registry = SchemaRegistryClient(
        {"url": env["gateway"].url, "basic.auth.user.info": f"{key_id}:{secret}"}
    )
    schema_id = registry.register_schema("orders-key", Schema(SCHEMA, "AVRO"))
    assert registry.get_schema(schema_id).schema_type == "AVRO"


def test_v3_records_register_only_under_subjects_they_may_write(env):
    alice, admin = env["alice"], env["admin"]
    topic = "orders"
    assert admin.post(
        "/v3/clusters/lakelog/topics", json={"topic_name": topic, "partitions_count": 1}
    ).status_code in (201, 400)
    time.sleep(PROPAGATION_S)
    url = f"/v3/clusters/lakelog/topics/{topic}/records"
    elsewhere = {
        "value": {
            "type": "AVRO",
            "subject": "billing.Secret",
            "raw_schema": SCHEMA,
            "data": {"a": 1},
        }
    }
    report = alice.post(url, json=elsewhere).json()
    assert report["error_code"] == 40301, report
    assert_error(admin.get("/subjects/billing.Secret/versions"), 404, 40401)
    own = {"value": {"type": "AVRO", "raw_schema": SCHEMA, "data": {"a": 2}}}
    assert alice.post(url, json=own).json()["error_code"] == 200
