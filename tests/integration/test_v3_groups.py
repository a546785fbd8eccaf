"""Confluent v3 consumer group views against real gateway processes: groups, consumers,
assignments, lag and lag summary, the cluster-wide group list, and 40405 for unknown groups."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from tests.gateway_process import start_gateway
from tests.integration.helpers import V3, assert_error, b64, create_topic, produce
from tests.integration.test_metrics import samples

pytestmark = pytest.mark.gateway

V2 = "application/vnd.kafka.v2+json"


def new_consumer(client: httpx.Client, group: str, name: str) -> str:
    """A v2 consumer instance without auto-commit; returns its path."""
    body = {"name": name, "format": "binary", "auto.commit.enable": "false"}
    response = client.post(f"/consumers/{group}", json=body, headers={"Content-Type": V2})
    assert response.status_code == 200, response.text
    return f"/consumers/{group}/instances/{name}"


def subscribe(client: httpx.Client, consumer: str, topics: list[str]) -> None:
    response = client.post(f"{consumer}/subscription", json={"topics": topics})
    assert response.status_code == 204, response.text


def commit_v2(client: httpx.Client, consumer: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit through the instance with Confluent's v2 meaning: the last consumed offset."""
    body = {"offsets": [{"topic": topic, "partition": p, "offset": o} for p, o in offsets.items()]}
    response = client.post(f"{consumer}/offsets", json=body)
    assert response.status_code == 200, response.text


def produce_values(client: httpx.Client, topic: str, partition: int, count: int) -> None:
    records = [{"value": b64(f"v{i}")} for i in range(count)]
    assert produce(client, topic, records, partition=partition).status_code == 200


def get_ok(client: httpx.Client, path: str) -> dict:
    response = client.get(path)
    assert response.status_code == 200, response.text
    return response.json()


def member_id(client: httpx.Client, group: str) -> str:
    (consumer,) = get_ok(client, f"{V3}/consumer-groups/{group}/consumers")["data"]
    return consumer["consumer_id"]


@pytest.fixture
def lagging_group(client, topic_name) -> tuple[str, str]:
    """Partition 0 has 10 records and a committed offset of 4 (v2 commit of offset 3), partition
    1 has 3 records and a committed offset of 1; one subscribed instance owns both."""
    create_topic(client, topic_name, partitions=2)
    produce_values(client, topic_name, 0, 10)
    produce_values(client, topic_name, 1, 3)
    group = f"g-{topic_name}"
    consumer = new_consumer(client, group, "c1")
    subscribe(client, consumer, [topic_name])
    commit_v2(client, consumer, topic_name, {0: 3, 1: 0})
    return group, topic_name


def test_lags_after_committing_4_of_10_records(client, lagging_group):
    """Lag per committed partition: committed offset, high watermark, lag, and the owner."""
    group, topic = lagging_group
    owner = member_id(client, group)
    body = get_ok(client, f"{V3}/consumer-groups/{group}/lags")
    assert body["kind"] == "KafkaConsumerLagList"
    assert body["metadata"]["self"].endswith(f"{V3}/consumer-groups/{group}/lags")
    got = [
        (d["partition_id"], d["current_offset"], d["log_end_offset"], d["lag"])
        for d in body["data"]
    ]
    assert got == [(0, 4, 10, 6), (1, 1, 3, 2)]  # largest lag first, as Confluent sorts
    first = body["data"][0]
    assert first["kind"] == "KafkaConsumerLag"
    assert (first["cluster_id"], first["consumer_group_id"], first["topic_name"]) == (
        "lakelog",
        group,
        topic,
    )
    assert (first["consumer_id"], first["instance_id"], first["client_id"]) == (
        owner,
        None,
        "rest-c1",
    )
    assert first["metadata"]["resource_name"] == (
        f"crn:///kafka=lakelog/topic={topic}/partition=0/lag={group}"
    )
    one = get_ok(client, f"{V3}/consumer-groups/{group}/lags/{topic}/partitions/0")
    assert one == first
    assert get_ok(client, first["metadata"]["self"]) == first  # self is a working URL


def test_lag_summary_after_committing_4_of_10_records(client, lagging_group):
    """The summary names the partition with the largest lag and its owner; totals add up."""
    group, topic = lagging_group
    owner = member_id(client, group)
    body = get_ok(client, f"{V3}/consumer-groups/{group}/lag-summary")
    assert body["kind"] == "KafkaConsumerGroupLagSummary"
    assert body["metadata"]["resource_name"] == (
        f"crn:///kafka=lakelog/consumer-group={group}/lag-summary"
    )
    assert (body["max_lag"], body["total_lag"]) == (6, 8)
    assert (body["max_lag_topic_name"], body["max_lag_partition_id"]) == (topic, 0)
    assert (body["max_lag_consumer_id"], body["max_lag_client_id"]) == (owner, "rest-c1")
    assert body["max_lag_instance_id"] is None
    assert body["max_lag_consumer"]["related"].endswith(
        f"{V3}/consumer-groups/{group}/consumers/{owner}"
    )
    assert body["max_lag_partition"]["related"].endswith(f"{V3}/topics/{topic}/partitions/0")


def test_group_consumers_and_assignments_of_a_subscribed_instance(client, lagging_group):
    """A subscribed v2 instance is a consumer of a STABLE group that owns both partitions."""
    group, topic = lagging_group
    data = get_ok(client, f"{V3}/consumer-groups/{group}")
    assert data["kind"] == "KafkaConsumerGroup"
    assert data["metadata"]["resource_name"] == f"crn:///kafka=lakelog/consumer-group={group}"
    assert (data["consumer_group_id"], data["state"], data["partition_assignor"]) == (
        group,
        "STABLE",
        "range",
    )
    assert data["is_simple"] is False
    assert data["coordinator"]["related"].endswith(f"{V3}/brokers/0")
    assert data["consumers"]["related"].endswith(f"{V3}/consumer-groups/{group}/consumers")
    assert data["lag_summary"]["related"].endswith(f"{V3}/consumer-groups/{group}/lag-summary")

    consumers = get_ok(client, f"{V3}/consumer-groups/{group}/consumers")
    assert consumers["kind"] == "KafkaConsumerList"
    (consumer,) = consumers["data"]
    assert consumer["kind"] == "KafkaConsumer"
    assert (consumer["client_id"], consumer["instance_id"]) == ("rest-c1", None)
    consumer_path = f"{V3}/consumer-groups/{group}/consumers/{consumer['consumer_id']}"
    assert get_ok(client, consumer_path) == consumer

    assignments = get_ok(client, f"{consumer_path}/assignments")
    assert assignments["kind"] == "KafkaConsumerAssignmentList"
    got = [(a["kind"], a["topic_name"], a["partition_id"]) for a in assignments["data"]]
    assert got == [("KafkaConsumerAssignment", topic, 0), ("KafkaConsumerAssignment", topic, 1)]
    assert assignments["data"][1]["partition"]["related"].endswith(
        f"{V3}/topics/{topic}/partitions/1"
    )
    one = get_ok(client, f"{consumer_path}/assignments/{topic}/partitions/1")
    assert one == assignments["data"][1]
    assert_error(client.get(f"{V3}/consumer-groups/{group}/consumers/nobody"), 404, 404)
    assert_error(client.get(f"{consumer_path}/assignments/{topic}/partitions/7"), 404, 404)


def test_partition_without_committed_offset_has_no_lag(client, topic_name):
    """As Confluent: lag exists only where an offset is committed; no summary without one."""
    create_topic(client, topic_name, partitions=2)
    group = f"g-{topic_name}"
    subscribe(client, new_consumer(client, group, "c1"), [topic_name])
    assert get_ok(client, f"{V3}/consumer-groups/{group}/lags")["data"] == []
    lag = client.get(f"{V3}/consumer-groups/{group}/lags/{topic_name}/partitions/0")
    assert_error(lag, 404, 404)
    assert_error(client.get(f"{V3}/consumer-groups/{group}/lag-summary"), 404, 404)


def test_list_contains_groups_with_members_and_groups_with_offsets_only(client, topic_name):
    """Both a group with a member (no offsets) and one with offsets only (no member) are
    listed; the latter is EMPTY and simple."""
    create_topic(client, topic_name)
    active, stored = f"active-{topic_name}", f"stored-{topic_name}"
    subscribe(client, new_consumer(client, active, "c1"), [topic_name])
    commit = {"offsets": [{"topic": topic_name, "partition": 0, "offset": 0}]}
    assert client.post(f"/groups/{stored}/offsets", json=commit).status_code == 204
    body = get_ok(client, f"{V3}/consumer-groups")
    assert body["kind"] == "KafkaConsumerGroupList"
    by_id = {g["consumer_group_id"]: g for g in body["data"]}
    assert (by_id[active]["state"], by_id[active]["is_simple"]) == ("STABLE", False)
    assert (by_id[stored]["state"], by_id[stored]["is_simple"]) == ("EMPTY", True)
    assert by_id[stored]["partition_assignor"] == ""
    assert by_id[stored] == get_ok(client, f"{V3}/consumer-groups/{stored}")


@pytest.mark.parametrize(
    "suffix",
    [
        "",
        "/consumers",
        "/consumers/c",
        "/consumers/c/assignments",
        "/lags",
        "/lags/t/partitions/0",
        "/lag-summary",
    ],
)
def test_unknown_group_is_40405(client, topic_name, suffix):
    """Every group route answers an unknown group with 404 and Confluent's 40405."""
    assert_error(client.get(f"{V3}/consumer-groups/nobody-{topic_name}{suffix}"), 404, 40405)


def test_unknown_cluster_is_404(client):
    assert_error(client.get("/v3/clusters/other/consumer-groups"), 404, 404)


# ---- several nodes -------------------------------------------------------------------------


# Lag sampled often, so that the lag history test sees samples within seconds.
NODE_ENV = {"LAKELOG_LAG_SAMPLE_INTERVAL_MS": "200"}


@pytest.fixture
def two_nodes(tmp_path):
    nodes = [
        start_gateway(tmp_path / "data", env={**NODE_ENV, "LAKELOG_NODE_ID": str(n)})
        for n in (0, 1)
    ]
    yield nodes
    for node in nodes:
        if node.process.poll() is None:
            os.kill(node.process.pid, signal.SIGCONT)
        node.stop()


@pytest.fixture
def clients(two_nodes):
    """A client per node, once both nodes see each other."""
    opened = [httpx.Client(base_url=node.url, timeout=30) for node in two_nodes]
    wait_for(
        lambda: all(len(c.get("/brokers").json()["brokers"]) == 2 for c in opened),
        30,
        "both nodes to see each other",
    )
    yield opened
    for c in opened:
        c.close()


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def test_any_node_lists_and_describes_groups_coordinated_elsewhere(two_nodes, clients):
    """A group whose only trace is a member on its coordinator is listed by both nodes; group
    routes on the other node are forwarded; a node that stops answering is skipped."""
    create_topic(clients[0], "events")
    group = "spread-group"
    subscribe(clients[1], new_consumer(clients[1], group, "c1"), ["events"])
    coordinator = clients[0].get(f"/groups/{group}").json()["coordinator"]
    for c in clients:
        listed = get_ok(c, f"{V3}/consumer-groups")["data"]
        assert [(g["consumer_group_id"], g["state"]) for g in listed] == [(group, "STABLE")]
        assert listed[0]["coordinator"]["related"].endswith(f"/brokers/{coordinator}")
        assert len(get_ok(c, f"{V3}/consumer-groups/{group}/consumers")["data"]) == 1

    other = 1 - coordinator
    os.kill(two_nodes[coordinator].process.pid, signal.SIGSTOP)
    started = time.monotonic()
    listed = get_ok(clients[other], f"{V3}/consumer-groups")["data"]
    assert time.monotonic() - started < 15
    assert listed == []  # its groups live on the stopped node only


def test_lag_history_and_metrics_cover_partitions_led_by_other_nodes(clients):
    """The coordinator samples the lag of every committed partition, those led by the other
    node too: the console's history grows with the log, and /metrics has every partition."""
    create_topic(clients[0], "watched", partitions=4)
    for partition in range(4):
        produce_values(clients[0], "watched", partition, 10)
    group = "watchers"
    commit_v2(
        clients[1], new_consumer(clients[1], group, "c1"), "watched", dict.fromkeys(range(4), 3)
    )
    coordinator = clients[0].get(f"/groups/{group}").json()["coordinator"]
    leaders = {
        p["partition"]: p["leader"] for p in get_ok(clients[0], "/topics/watched/partitions")
    }
    assert set(leaders.values()) == {0, 1}  # some partitions are led by the other node

    history_path = f"{V3}/consumer-groups/{group}/lag-history"

    def latest_total() -> int | None:
        samples = get_ok(clients[1 - coordinator], history_path)["samples"]  # forwarded
        return samples[-1]["total_lag"] if samples else None

    wait_for(lambda: latest_total() == 4 * 6, 30, "a sample with a lag of 6 per partition")
    produce_values(clients[0], "watched", 0, 5)
    wait_for(lambda: latest_total() == 4 * 6 + 5, 30, "a sample with the 5 new records")
    body = get_ok(clients[coordinator], history_path)
    assert body["interval_ms"] == 200
    assert len(body["samples"]) >= 2
    last = body["samples"][-1]
    assert last["max_lag"] == 11
    assert sorted((p["partition_id"], p["lag"]) for p in last["partitions"]) == [
        (0, 11), (1, 6), (2, 6), (3, 6)
    ]  # fmt: skip

    found = samples(clients[coordinator])
    lags = {
        int(labels["partition"]): lag
        for (name, label_items), lag in found.items()
        for labels in [dict(label_items)]
        if name == "lakelog_consumer_group_lag" and labels.get("group") == group
    }
    assert lags == {0: 11, 1: 6, 2: 6, 3: 6}
    assert_error(clients[0].get(f"{V3}/consumer-groups/no-such-group/lag-history"), 404, 40405)
