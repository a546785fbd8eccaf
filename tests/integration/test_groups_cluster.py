"""Consumer groups with several gateway nodes on one root: any node serves any group (its
requests are forwarded to the coordinator), and after the coordinator dies another node takes
the group over with the committed offsets rebuilt from `_meta/consumer_offsets`."""

from __future__ import annotations

import os
import signal

import httpx
import pytest

from tests.gateway_process import GatewayProcess
from tests.integration.helpers import b64
from tests.integration.test_cluster import LEASE_MS, create, start_nodes, wait_for

BINARY_V2 = "application/vnd.kafka.binary.v2+json"


@pytest.fixture
def two_nodes(tmp_path) -> list[GatewayProcess]:
    nodes = start_nodes(tmp_path / "data", 2)
    yield nodes
    for node in nodes:
        if node.process.poll() is None:
            os.kill(node.process.pid, signal.SIGCONT)
        node.stop()


def test_any_node_serves_a_consumer_instance(two_nodes):
    first, second = (httpx.Client(base_url=n.url, timeout=30) for n in two_nodes)
    create(two_nodes[0].url, "orders", 2)
    body = {"records": [{"value": b64(f"v{i}"), "partition": i % 2} for i in range(6)]}
    produced = first.post("/topics/orders", json=body, headers={"Content-Type": BINARY_V2})
    assert produced.status_code == 200, produced.text
    created = first.post("/consumers/shop", json={"auto.offset.reset": "earliest"}).json()
    path = f"/consumers/shop/instances/{created['instance_id']}"
    # Every step through the other node than the previous one: no sticky load balancer.
    assert second.post(f"{path}/subscription", json={"topics": ["orders"]}).status_code == 204
    got = []
    for client in (first, second, first, second):
        response = client.get(f"{path}/records", params={"timeout": 2000})
        assert response.status_code == 200, response.text
        got += response.json()
    assert sorted((r["partition"], r["offset"]) for r in got) == [
        (p, o) for p in (0, 1) for o in range(3)
    ]
    assert second.post(f"{path}/offsets").status_code == 200
    stored = first.get("/groups/shop/offsets").json()["offsets"]
    assert {(o["partition"], o["offset"]) for o in stored} == {(0, 3), (1, 3)}


def test_a_new_coordinator_rebuilds_offsets_after_the_old_one_dies(two_nodes):
    urls = [n.url for n in two_nodes]
    create(urls[0], "events", 1)
    with httpx.Client(base_url=urls[0], timeout=30) as client:
        joined = client.post(
            "/groups/audit/members", json={"topics": ["events"], "session_timeout_ms": 5000}
        ).json()
        commit = {
            "member_id": joined["member_id"],
            "generation_id": joined["generation_id"],
            "offsets": [{"topic": "events", "partition": 0, "offset": 42, "metadata": "x"}],
        }
        assert client.post("/groups/audit/offsets", json=commit).status_code == 204
        coordinator = client.get("/groups/audit").json()["coordinator"]
    survivor = urls[1 - coordinator]
    os.kill(two_nodes[coordinator].process.pid, signal.SIGKILL)
    two_nodes[coordinator].process.wait()

    def served_by_survivor() -> bool:
        response = httpx.get(f"{survivor}/groups/audit/offsets", timeout=10)
        return response.status_code == 200

    wait_for(served_by_survivor, 10 * LEASE_MS / 1000, "the survivor to take the group")
    stored = httpx.get(f"{survivor}/groups/audit/offsets", timeout=10).json()["offsets"]
    assert [(o["offset"], o["metadata"]) for o in stored] == [(42, "x")]
    # The old member is unknown to the new coordinator: it must join again.
    heartbeat = httpx.post(
        f"{survivor}/groups/audit/members/{joined['member_id']}/heartbeat",
        json={"generation_id": joined["generation_id"]},
        timeout=10,
    )
    assert heartbeat.status_code == 409 and heartbeat.json()["error_code"] == 40911
    again = httpx.post(
        f"{survivor}/groups/audit/members", json={"topics": ["events"]}, timeout=30
    ).json()
    assert again["generation_id"] > joined["generation_id"]
