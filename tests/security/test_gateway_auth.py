"""One gateway with API keys and ACLs on (LAKELOG_AUTH=api-keys, LAKELOG_AUTHORIZER=acl):
authentication failures, Basic/Bearer, ACL decisions over HTTP, principal-bound producer ids
and consumer instances, quotas. The gateway starts once for the module."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest

from storage_layout.meta.principals import PrincipalStore, Quota
from tests.gateway_process import start_gateway
from tests.security.helpers import (
    AUTH_ENV,
    PROPAGATION_S,
    V3,
    add_acl,
    assert_error,
    basic,
    bearer,
    create_topic,
    make_keys,
    produce,
)

PRINCIPALS = ("admin", "alice", "bob", "billing", "quota")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("auth") / "data"
    tokens = make_keys(data_dir, *PRINCIPALS)
    gateway = start_gateway(data_dir, env=AUTH_ENV)
    clients = {name: bearer(gateway.url, token) for name, token in tokens.items()}
    admin = clients["admin"]
    for topic in (
        "payments.eu",
        "public.news",
        "public.secret",
        "public.alice",
        "public.q",
        "misc",
    ):
        create_topic(admin, topic)
    add_acl(admin, "User:billing", "ALL", "payments.", pattern_type="PREFIXED")
    add_acl(admin, "User:*", "READ", "public.", pattern_type="PREFIXED")
    add_acl(admin, "User:alice", "READ", "public.secret", permission="DENY")
    add_acl(admin, "User:alice", "WRITE", "public.alice")
    add_acl(admin, "User:quota", "WRITE", "public.q")
    add_acl(admin, "User:*", "READ", "shared-group", resource_type="GROUP")
    yield {"gateway": gateway, "tokens": tokens, "data_dir": data_dir, **clients}
    for client in clients.values():
        client.close()
    gateway.stop()


# ---- authentication ------------------------------------------------------------------------


def test_missing_and_forged_credentials_get_one_401(env):
    """No header, a wrong secret and an unknown key id get the same 401 40101 answer."""
    url, token = env["gateway"].url, env["tokens"]["alice"]
    key_id, secret = token.split(".", 1)
    answers = [
        httpx.get(f"{url}{V3}/topics"),
        bearer(url, f"{key_id}.{secret[:-1]}x").get(f"{V3}/topics"),
        bearer(url, f"{'0' * 16}.{secret}").get(f"{V3}/topics"),
        bearer(url, "garbage").get(f"{V3}/topics"),
    ]
    messages = {assert_error(a, 401, 40101)["message"] for a in answers}
    assert len(messages) == 1  # never says whether the key id exists
    assert all("Bearer" in a.headers["WWW-Authenticate"] for a in answers)
    assert httpx.get(url + "/").status_code == 200  # the health check stays open


def test_basic_and_bearer_both_authenticate(env):
    url, token = env["gateway"].url, env["tokens"]["bob"]
    assert bearer(url, token).get(f"{V3}/topics").status_code == 200
    assert basic(url, token).get(f"{V3}/topics").status_code == 200


def test_expired_key_gets_401(env):
    """A key used before its expiry stops working after it, despite the cache."""
    tokens = make_keys(env["data_dir"], "alice", expires_in_s=1.0)
    client = bearer(env["gateway"].url, tokens["alice"])
    assert client.get(f"{V3}/topics").status_code == 200
    time.sleep(1.2)
    assert_error(client.get(f"{V3}/topics"), 401, 40101)


def test_revoked_key_gets_401(env):
    """Revoked on the store (as `lakelog api-keys revoke` does): refused once propagated."""
    token = make_keys(env["data_dir"], "bob")["bob"]
    client = bearer(env["gateway"].url, token)
    assert client.get(f"{V3}/topics").status_code == 200
    assert PrincipalStore(str(env["data_dir"])).revoke_key(token.split(".")[0])
    time.sleep(PROPAGATION_S)
    assert_error(client.get(f"{V3}/topics"), 401, 40101)


def test_internal_routes_refuse_client_keys_and_unsigned_identity(env):
    """Node-to-node routes need a node signature: an admin key or a bare header is not one."""
    url = env["gateway"].url
    assert_error(env["admin"].get("/_lakelog/internal/groups"), 401, 40101)
    forged = {"X-Lakelog-Node": "0;1;User:admin;00"}
    assert_error(httpx.get(url + "/_lakelog/internal/groups", headers=forged), 401, 40101)
    assert_error(httpx.get(url + f"{V3}/topics", headers=forged), 401, 40101)


# ---- authorization -------------------------------------------------------------------------


def test_private_prefix_only_for_its_principal(env):
    """payments.* (prefixed) is billing's alone; public.* is readable by User:*."""
    assert produce(env["billing"], "payments.eu", [b"p"]).status_code == 200
    assert_error(produce(env["alice"], "payments.eu", [b"p"]), 403, 40301)
    fetch = "/topics/{}/partitions/0/records?offset=0"
    assert env["billing"].get(fetch.format("payments.eu")).status_code == 200
    assert_error(env["alice"].get(fetch.format("payments.eu")), 403, 40301)
    assert env["bob"].get(fetch.format("public.news")).status_code == 200


def test_no_matching_acl_denies(env):
    assert_error(produce(env["bob"], "misc", [b"x"]), 403, 40301)
    assert_error(env["bob"].get(f"{V3}/topics/misc/configs"), 403, 40301)
    assert_error(env["bob"].delete(f"{V3}/topics/public.news"), 403, 40301)
    body = {"topic_name": "bobs-topic", "partitions_count": 1}
    assert_error(env["bob"].post(f"{V3}/topics", json=body), 403, 40301)


def test_deny_beats_allow(env):
    """User:* may READ public.*, but alice is denied public.secret."""
    fetch = "/topics/public.secret/partitions/0/records?offset=0"
    assert env["bob"].get(fetch).status_code == 200
    assert_error(env["alice"].get(fetch), 403, 40301)
    assert env["alice"].get("/topics/public.news/partitions/0/records?offset=0").status_code == 200


def test_topic_lists_are_filtered_to_describable_topics(env):
    v2 = set(env["alice"].get("/topics").json())
    v3 = {t["topic_name"] for t in env["alice"].get(f"{V3}/topics").json()["data"]}
    # DENY READ does not deny DESCRIBE (as in Kafka); payments.* is not describable at all
    assert v2 == v3 == {"public.news", "public.alice", "public.q", "public.secret"}
    assert "payments.eu" in set(env["billing"].get("/topics").json())


def test_super_user_bypasses_acls_and_acl_changes_need_alter_cluster(env):
    assert env["admin"].get(f"{V3}/topics/misc/configs").status_code == 200
    body = {
        "principal": "User:alice",
        "operation": "ALL",
        "resource_type": "TOPIC",
        "resource_name": "*",
        "pattern_type": "LITERAL",
        "permission": "ALLOW",
    }
    assert_error(env["alice"].post(f"{V3}/acls", json=body), 403, 40301)
    assert_error(env["alice"].get(f"{V3}/acls"), 403, 40301)
    listed = env["admin"].get(f"{V3}/acls", params={"principal": "User:billing"}).json()["data"]
    assert [(a["resource_name"], a["pattern_type"]) for a in listed] == [("payments.", "PREFIXED")]


def test_metrics_need_describe_on_the_cluster(env):
    assert_error(env["alice"].get("/metrics"), 403, 40301)
    answer = env["admin"].get("/metrics")
    assert answer.status_code == 200 and "lakelog_partitions_led" in answer.text


# ---- producer ids and consumer instances bound to principals --------------------------------


def test_another_principals_producer_id_is_refused(env):
    """billing's producer id cannot be used (or fenced) by alice, even on her own topic."""
    init = env["billing"].post(f"{V3}/producers", json={})
    assert init.status_code == 200, init.text
    pid = init.json()["producer_id"]
    theirs = {"producer_id": pid, "producer_epoch": 1, "base_sequences": {"0": 0}}
    assert_error(produce(env["alice"], "public.alice", [b"x"], **theirs), 403, 40301)
    v3_record = {
        "value": {"type": "STRING", "data": "x"},
        "producer_id": pid,
        "producer_epoch": 0,
        "sequence": 0,
    }
    answer = env["alice"].post(f"{V3}/topics/public.alice/records", json=v3_record)
    assert answer.status_code == 403 and answer.json()["error_code"] == 40301, answer.text
    own = env["alice"].post(f"{V3}/producers", json={}).json()
    mine = {"producer_id": own["producer_id"], "producer_epoch": 0, "base_sequences": {"0": 0}}
    assert produce(env["alice"], "public.alice", [b"x"], **mine).status_code == 200
    assert_error(env["bob"].post(f"{V3}/producers", json={}), 403, 40301)  # no WRITE anywhere
    txn = env["bob"].post(f"{V3}/producers", json={"transactional_id": "t1"})
    assert_error(txn, 403, 40301)


def test_another_principals_consumer_instance_is_refused(env):
    v2 = {"Content-Type": "application/vnd.kafka.v2+json"}
    created = env["alice"].post("/consumers/shared-group", json={"name": "a1"}, headers=v2)
    assert created.status_code == 200, created.text
    path = "/consumers/shared-group/instances/a1/subscription"
    body = {"topics": ["public.news"]}
    assert_error(env["bob"].post(path, json=body, headers=v2), 403, 40301)
    assert_error(env["bob"].delete("/consumers/shared-group/instances/a1"), 403, 40301)
    assert env["alice"].post(path, json=body, headers=v2).status_code == 204
    denied = {"topics": ["public.secret"]}
    assert_error(env["alice"].post(path, json=denied, headers=v2), 403, 40301)
    assert env["alice"].delete("/consumers/shared-group/instances/a1").status_code == 204
    assert_error(env["alice"].post("/consumers/other-group", json={}, headers=v2), 403, 40301)


# ---- quotas ----------------------------------------------------------------------------------


def test_produce_quota_answers_429_with_retry_after(env):
    """A 200 B/s override: the first 1 KiB request passes, the next is throttled."""
    PrincipalStore(str(env["data_dir"])).set_quota("quota", Quota(produce_bytes_per_s=200))
    time.sleep(PROPAGATION_S)
    assert produce(env["quota"], "public.q", [b"v" * 1024]).status_code == 200
    throttled = produce(env["quota"], "public.q", [b"v"])
    assert_error(throttled, 429, 42901)
    assert int(throttled.headers["Retry-After"]) >= 1
    assert produce(env["alice"], "public.alice", [b"v" * 1024]).status_code == 200  # per principal


def test_cli_client_commands_present_lakelog_api_key(env):
    """`lakelog topics|produce|consume|groups` send LAKELOG_API_KEY; without it, 401."""
    command = [
        sys.executable,
        "-m",
        "api.cli",
        "topics",
        "list",
        "--bootstrap-server",
        env["gateway"].url,
    ]
    plain = {k: v for k, v in os.environ.items() if not k.startswith("LAKELOG_")}
    refused = subprocess.run(command, env=plain, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "401" in refused.stderr + refused.stdout
    keyed = {**plain, "LAKELOG_API_KEY": env["tokens"]["billing"]}
    listed = subprocess.run(command, env=keyed, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    # billing's ACLs: ALL on payments.*, READ (so DESCRIBE) on public.* as everyone; not misc
    expected = ["payments.eu", "public.alice", "public.news", "public.q", "public.secret"]
    assert listed.stdout.split() == expected
