"""Two gateway nodes with auth and ACLs on: forwarded appends, proxied reads and forwarded
group requests still work (they are signed with the cluster secret and carry the principal),
and the coordinator still enforces who owns a consumer instance."""

from __future__ import annotations

import base64
import time

import pytest

from tests.gateway_process import start_gateway
from tests.security.helpers import (
    AUTH_ENV,
    V3,
    add_acl,
    assert_error,
    bearer,
    create_topic,
    make_keys,
)

CLUSTER_ENV = {**AUTH_ENV, "LAKELOG_LEASE_MS": "1500", "LAKELOG_HEARTBEAT_MS": "150"}
TOPIC, PARTITIONS, GROUP = "fw.orders", 6, "fw-group"
V2 = {"Content-Type": "application/vnd.kafka.v2+json"}


@pytest.fixture(scope="module", params=["configured-secret", "stored-secret"])
def cluster(request, tmp_path_factory):
    """Two nodes that sign with LAKELOG_CLUSTER_SECRET, or (auth on as the only setting) with
    the secret the first of them made in the store."""
    data_dir = tmp_path_factory.mktemp("cluster-auth") / "data"
    tokens = make_keys(data_dir, "admin", "alice", "bob")
    env = dict(CLUSTER_ENV)
    if request.param == "stored-secret":
        del env["LAKELOG_CLUSTER_SECRET"]
    nodes = [start_gateway(data_dir, env={**env, "LAKELOG_NODE_ID": str(n)}) for n in (0, 1)]
    time.sleep(0.5)  # both nodes see each other's liveness record
    clients = {
        (name, n): bearer(node.url, token)
        for name, token in tokens.items()
        for n, node in enumerate(nodes)
    }
    admin = clients["admin", 0]
    create_topic(admin, TOPIC, PARTITIONS)
    add_acl(admin, "User:alice", "ALL", "fw.", pattern_type="PREFIXED")
    add_acl(admin, "User:*", "READ", GROUP, resource_type="GROUP")
    time.sleep(0.5)  # node 1 re-reads the ACLs (LAKELOG_SECURITY_REFRESH_MS=200)
    yield clients
    for client in clients.values():
        client.close()
    for node in nodes:
        node.stop()


def test_forwarded_appends_and_proxied_reads_work_with_auth_on(cluster):
    """alice writes every partition through node 1 and reads each through both nodes."""
    alice0, alice1 = cluster["alice", 0], cluster["alice", 1]
    for partition in range(PARTITIONS):
        value = base64.b64encode(f"v{partition}".encode()).decode()
        answer = alice1.post(
            f"/topics/{TOPIC}/partitions/{partition}",
            json={"records": [{"value": value}]},
            headers={"Content-Type": "application/vnd.kafka.binary.v2+json"},
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["offsets"][0]["error_code"] is None, answer.text
    leaders = {p["leader"] for p in alice1.get(f"/topics/{TOPIC}/partitions").json()}
    assert leaders == {0, 1}  # so some appends and reads crossed nodes
    for client in (alice0, alice1):
        for partition in range(PARTITIONS):
            url = f"/topics/{TOPIC}/partitions/{partition}/records?offset=0"
            records = client.get(url)
            assert records.status_code == 200, records.text
            assert [base64.b64decode(r["value"]) for r in records.json()] == [
                f"v{partition}".encode()
            ]
    assert_error(
        cluster["bob", 1].get(f"/topics/{TOPIC}/partitions/0/records?offset=0"), 403, 40301
    )


def test_forwarded_group_requests_keep_the_principal(cluster):
    """An instance made through one node is usable by its owner through both, by nobody else."""
    created = cluster["alice", 1].post(f"/consumers/{GROUP}", json={"name": "c1"}, headers=V2)
    assert created.status_code == 200, created.text
    path = f"/consumers/{GROUP}/instances/c1/subscription"
    assert cluster["alice", 0].post(path, json={"topics": [TOPIC]}, headers=V2).status_code == 204
    assert cluster["alice", 1].get(path).json() == {"topics": [TOPIC]}
    for node in (0, 1):
        assert_error(cluster["bob", node].get(path), 403, 40301)
    groups = cluster["admin", 1].get(f"{V3}/consumer-groups").json()["data"]
    assert GROUP in {g["consumer_group_id"] for g in groups}  # the node list is signed too
    assert cluster["alice", 0].delete(f"/consumers/{GROUP}/instances/c1").status_code == 204
