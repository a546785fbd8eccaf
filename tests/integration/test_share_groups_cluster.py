"""Share groups on several gateway nodes sharing one root: any node serves any share group
(each share partition lives on its topic partition's leader), and a leader's crash loses no
acknowledgement: what was acquired and not acknowledged is delivered again, with a higher
delivery count, by the node that takes the partition over."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.integration.test_cluster import (
    LEASE_MS,
    create,
    leaders,
    produce,
    start_nodes,
    stop_nodes,
    wait_for,
)

SHARE = "/v3/clusters/lakelog/share-groups"


@pytest.fixture
def two_nodes(tmp_path):
    nodes = start_nodes(tmp_path / "data", 2)
    yield nodes
    stop_nodes(nodes)


def acquire(url: str, group: str, topic: str, **body) -> list[dict]:
    body = {"topics": [topic], "timeout_ms": 0} | body
    response = httpx.post(f"{url}{SHARE}/{group}/records:acquire", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["records"]


def accept(url: str, group: str, records: list[dict]) -> None:
    body = {"acknowledgements": [{"delivery_id": r["delivery_id"]} for r in records]}
    response = httpx.post(f"{url}{SHARE}/{group}/records:acknowledge", json=body, timeout=30)
    assert response.status_code == 200, response.text


def test_any_node_serves_a_share_group_and_a_crash_redelivers_only_the_unacknowledged(
    two_nodes,
):
    nodes = two_nodes
    urls = [n.url for n in nodes]
    create(urls[0], "jobs", 4)
    configs = {"data": [{"name": "share.auto.offset.reset", "value": "earliest"}]}
    altered = httpx.post(f"{urls[1]}{SHARE}/workers/configs:alter", json=configs, timeout=30)
    assert altered.status_code == 204, altered.text
    for p in range(4):
        assert (
            produce(urls[0], "jobs", [f"{p}-{i}".encode() for i in range(5)], p).status_code == 200
        )
    time.sleep(LEASE_MS / 1000)
    led = leaders(urls[0], "jobs")
    assert set(led.values()) == {0, 1}, led  # both nodes serve share partitions

    accepted: list[dict] = []
    for turn in range(2):  # acquire through one node, acknowledge through the other
        taken = acquire(urls[turn], "workers", "jobs", max_records=6)
        assert len(taken) == 6
        accept(urls[1 - turn], "workers", taken)
        accepted += taken
    held = acquire(urls[0], "workers", "jobs", max_records=100)
    assert len(held) == 8  # the rest, locked now
    seen = {(r["partition"], r["offset"]) for r in accepted + held}
    assert len(seen) == 20

    victim = led[held[0]["partition"]]
    nodes[victim].process.kill()
    nodes[victim].process.wait()
    survivor = urls[1 - victim]

    redelivered: list[dict] = []

    def unacknowledged_come_back() -> bool:
        try:
            redelivered.extend(acquire(survivor, "workers", "jobs", max_records=100))
        except AssertionError:
            return False
        victims = {r["partition"] for r in held if led[r["partition"]] == victim}
        return {r["partition"] for r in redelivered} >= victims

    wait_for(unacknowledged_come_back, 10 * LEASE_MS / 1000, "the survivor to take over")
    again = {(r["partition"], r["offset"]) for r in redelivered}
    from_victim = {(r["partition"], r["offset"]) for r in held if led[r["partition"]] == victim}
    assert again == from_victim  # only what the dead node held and nobody acknowledged
    assert {r["delivery_count"] for r in redelivered} == {2}
    assert not again & {(r["partition"], r["offset"]) for r in accepted}
