"""Several gateway processes on one storage root: leadership, forwarding, failover, fencing.

Each scenario checks the history against the partition table itself: offsets dense and unique,
every acknowledged record present exactly once at its acknowledged offset. A control run with
the fence disabled shows the check does catch the duplicates a stale leader would write.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx
import pytest
from deltalake import DeltaTable

from storage_layout.paths import partition_table_uri
from tests.conftest import BINARY_V2
from tests.gateway_process import GatewayProcess, start_gateway
from tests.integration.helpers import b64

LEASE_MS = 1500
CLUSTER_ENV = {"LAKELOG_LEASE_MS": str(LEASE_MS), "LAKELOG_HEARTBEAT_MS": "150"}


def start_nodes(data_dir, count: int, **extra_env) -> list[GatewayProcess]:
    return [
        start_gateway(data_dir, env={**CLUSTER_ENV, "LAKELOG_NODE_ID": str(n), **extra_env})
        for n in range(count)
    ]


@pytest.fixture
def nodes_factory(tmp_path):
    started: list[GatewayProcess] = []

    def factory(count: int, **extra_env) -> list[GatewayProcess]:
        nodes = start_nodes(tmp_path / "data", count, **extra_env)
        started.extend(nodes)
        return nodes

    yield factory
    stop_nodes(started)


def stop_nodes(nodes: list[GatewayProcess]) -> None:
    """Stop every node, continuing any a test left SIGSTOPped first."""
    for node in nodes:
        if node.process.poll() is None:
            os.kill(node.process.pid, signal.SIGCONT)
        node.stop()


def create(url: str, topic: str, partitions: int) -> None:
    body = {"topic_name": topic, "partitions_count": partitions}
    response = httpx.post(f"{url}/v3/clusters/lakelog/topics", json=body, timeout=30)
    assert response.status_code == 201, response.text


def produce(url: str, topic: str, values: list[bytes], partition: int | None = None):
    records = [{"value": b64(v)} for v in values]
    if partition is not None:
        for record in records:
            record["partition"] = partition
    return httpx.post(
        f"{url}/topics/{topic}",
        json={"records": records},
        headers={"Content-Type": BINARY_V2},
        timeout=10,
    )


def leaders(url: str, topic: str) -> dict[int, int]:
    partitions = httpx.get(f"{url}/topics/{topic}/partitions", timeout=10).json()
    return {p["partition"]: p["leader"] for p in partitions}


def table_rows(data_dir, topic: str, partition: int) -> list[tuple[int, bytes]]:
    table = DeltaTable(partition_table_uri(str(data_dir), topic, partition)).to_pyarrow_table(
        columns=["offset", "value"]
    )
    offsets, values = table.column("offset").to_pylist(), table.column("value").to_pylist()
    return sorted(zip(offsets, values, strict=True))


@dataclass
class History:
    """What a producer was told: acknowledged values with their offsets, and failures."""

    acked: dict[bytes, int] = field(default_factory=dict)
    failures: int = 0


def check_history(rows: list[tuple[int, bytes]], history: History) -> None:
    offsets = [offset for offset, _ in rows]
    duplicates = [o for o, n in Counter(offsets).items() if n > 1]
    assert not duplicates, f"offsets assigned twice: {duplicates[:10]}"
    assert offsets == list(range(len(offsets))), "offsets are not dense from 0"
    stored = Counter(value for _, value in rows)
    at = {value: offset for offset, value in rows}
    for value, offset in history.acked.items():
        assert stored[value] == 1, f"acknowledged {value!r} stored {stored[value]} times"
        assert at[value] == offset, f"{value!r} acknowledged at {offset}, stored at {at[value]}"


class LoadProducer(threading.Thread):
    """Produces unique values to one partition through `url` until stopped; never retries a
    value (a retry after an ambiguous failure could store it twice without idempotence)."""

    def __init__(self, url: str, topic: str, partition: int, tag: str) -> None:
        super().__init__(daemon=True)
        self.url, self.topic, self.partition, self.tag = url, topic, partition, tag
        self.history = History()
        self.stop = threading.Event()
        self._counter = itertools.count()

    def run(self) -> None:
        while not self.stop.is_set():
            values = [f"{self.tag}-{next(self._counter)}".encode() for _ in range(5)]
            try:
                response = produce(self.url, self.topic, values, self.partition)
            except httpx.HTTPError:
                self.history.failures += 1
                continue
            if response.status_code != 200:
                self.history.failures += 1
                time.sleep(0.05)
                continue
            for value, entry in zip(values, response.json()["offsets"], strict=True):
                if entry["error_code"] is None:
                    self.history.acked[value] = entry["offset"]
                else:
                    self.history.failures += 1


def wait_for(predicate, timeout_s: float, what: str) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def test_any_node_accepts_writes_and_leadership_spreads(nodes_factory):
    """Three nodes: produce through each, read back through each; partitions are led by more
    than one node and every node reports the same leaders."""
    nodes = nodes_factory(3)
    create(nodes[0].url, "spread", 6)
    for round_number in range(3):
        for index, node in enumerate(nodes):
            values = [f"{round_number}-{index}-{p}".encode() for p in range(6)]
            response = produce(node.url, "spread", values)
            assert response.status_code == 200, response.text
    time.sleep(LEASE_MS / 1000)
    views = [leaders(node.url, "spread") for node in nodes]
    assert views[0] == views[1] == views[2]
    assert len(set(views[0].values())) >= 2, views[0]
    for partition in range(6):
        fetched = httpx.get(
            f"{nodes[partition % 3].url}/topics/spread/partitions/{partition}/records",
            params={"offset": 0},
            timeout=10,
        ).json()
        assert [r["offset"] for r in fetched] == list(range(9))
        sizes = set()
        for node in nodes:  # the leader answers; the others proxy to it
            offsets = httpx.get(
                f"{node.url}/topics/spread/partitions/{partition}/offsets", timeout=10
            ).json()
            sizes.add(offsets.pop("size_bytes"))
            assert offsets == {"beginning_offset": 0, "end_offset": 9, "last_stable_offset": 9}
        assert len(sizes) == 1 and sizes.pop() > 0  # the leader's answer, forwarded


@pytest.mark.parametrize("node_count", [2, 3])
def test_sigkill_of_the_leader_loses_no_acknowledged_record(nodes_factory, node_count):
    """SIGKILL the leader under load: a survivor takes over within about a lease, and every
    acknowledged record is stored exactly once at its offset."""
    nodes = nodes_factory(node_count)
    create(nodes[0].url, "kill", 1)
    assert produce(nodes[0].url, "kill", [b"first"]).status_code == 200
    leader = leaders(nodes[1].url, "kill")[0]
    victim = nodes[leader]
    survivor = next(node for index, node in enumerate(nodes) if index != leader)
    load = LoadProducer(survivor.url, "kill", 0, "k")
    load.start()
    time.sleep(1.0)
    acked_before = len(load.history.acked)
    victim.process.kill()
    killed_at = time.monotonic()
    wait_for(lambda: len(load.history.acked) > acked_before + 20, 20, "writes after failover")
    failover_s = time.monotonic() - killed_at
    load.stop.set()
    load.join(15)
    assert failover_s < 3 * LEASE_MS / 1000 + 5
    check_history(table_rows(victim.data_dir, "kill", 0), load.history)


def _paused_leader_scenario(nodes_factory, **env) -> tuple[list, History]:
    nodes = nodes_factory(2, **env)
    create(nodes[0].url, "pause", 1)
    assert produce(nodes[0].url, "pause", [b"first"]).status_code == 200
    leader = leaders(nodes[1].url, "pause")[0]
    paused, survivor = nodes[leader], nodes[1 - leader]
    history = History()
    stuck: list[threading.Thread] = []

    def produce_to_paused(tag: str) -> None:
        values = [f"stuck-{tag}-{i}".encode() for i in range(3)]
        try:
            response = produce(paused.url, "pause", values, 0)
        except httpx.HTTPError:
            return
        if response.status_code == 200:
            for value, entry in zip(values, response.json()["offsets"], strict=True):
                if entry["error_code"] is None:
                    history.acked[value] = entry["offset"]

    os.kill(paused.process.pid, signal.SIGSTOP)
    for tag in range(4):  # requests that reach the paused leader and wait in its socket
        thread = threading.Thread(target=produce_to_paused, args=(str(tag),), daemon=True)
        thread.start()
        stuck.append(thread)
    load = LoadProducer(survivor.url, "pause", 0, "s")
    load.start()
    wait_for(lambda: len(load.history.acked) > 20, 20, "the survivor to take over")
    os.kill(paused.process.pid, signal.SIGCONT)
    for thread in stuck:
        thread.join(15)
    time.sleep(1.0)
    load.stop.set()
    load.join(15)
    history.acked.update(load.history.acked)
    return table_rows(paused.data_dir, "pause", 0), history


def test_leader_paused_past_its_lease_is_fenced(nodes_factory):
    """SIGSTOP the leader past its lease while requests wait for it, then SIGCONT: its stale
    appends are rejected; offsets stay dense and unique, nothing acknowledged is lost."""
    rows, history = _paused_leader_scenario(nodes_factory)
    check_history(rows, history)


def test_control_without_the_fence_shows_duplicates(nodes_factory):
    """Control: with the compare-and-set and lease checks disabled, the same scenario stores
    offsets twice, so the check above would catch a missing fence."""
    rows, history = _paused_leader_scenario(nodes_factory, LAKELOG_UNSAFE_DISABLE_FENCING="true")
    with pytest.raises(AssertionError, match="offsets assigned twice"):
        check_history(rows, history)


def test_idempotent_retries_through_a_non_leader_node(nodes_factory):
    """Sequences are checked by the leader even when the request is forwarded: a retry through
    the other node gets the original offsets, a gap gets 409 OUT_OF_ORDER_SEQUENCE."""
    nodes = nodes_factory(2)
    create(nodes[0].url, "idem", 1)
    assert produce(nodes[0].url, "idem", [b"first"]).status_code == 200
    follower = nodes[1 - leaders(nodes[1].url, "idem")[0]]
    producer = httpx.post(f"{follower.url}/v3/clusters/lakelog/producers", timeout=10).json()

    def send(sequence: int) -> httpx.Response:
        body = {
            "producer_id": producer["producer_id"],
            "producer_epoch": producer["producer_epoch"],
            "base_sequence": sequence,
            "records": [{"value": b64(f"idem-{sequence}".encode())}],
        }
        return httpx.post(
            f"{follower.url}/topics/idem/partitions/0",
            json=body,
            headers={"Content-Type": BINARY_V2},
            timeout=10,
        )

    first, retry = send(0), send(0)
    assert first.status_code == retry.status_code == 200, (first.text, retry.text)
    assert first.json()["offsets"] == retry.json()["offsets"]
    gap = send(5)
    assert gap.status_code == 409 and gap.json()["offsets"][0]["error_code"] == 40904, gap.text
    values = [value for _, value in table_rows(follower.data_dir, "idem", 0)]
    assert values.count(b"idem-0") == 1


def test_http_transactions_work_through_any_node(nodes_factory):
    """Each step of a transaction sent to another node than the one before: the transactional
    ids are spread over both nodes' coordinators, so half the steps are forwarded (begin, the
    partitions a produce adds, the offsets, the commit), and the outcome is the same."""
    nodes = nodes_factory(2)
    create(nodes[0].url, "txn-any-node", 2)
    v3 = "/v3/clusters/lakelog"
    for n in range(4):
        first, other = nodes[n % 2].url, nodes[1 - n % 2].url
        tid = f"etl-{n}"
        producer = httpx.post(f"{first}{v3}/transactions/{tid}/begin", timeout=10).json()
        fields = {
            "producer_id": producer["producer_id"],
            "producer_epoch": producer["producer_epoch"],
        }
        body = {
            **fields,
            "transactional_id": tid,
            "base_sequences": {"0": 0, "1": 0},
            "records": [
                {"value": b64(f"{tid}-a".encode()), "partition": 0},
                {"value": b64(f"{tid}-b".encode()), "partition": 1},
            ],
        }
        sent = httpx.post(
            f"{other}/topics/txn-any-node", json=body, headers={"Content-Type": BINARY_V2}
        )
        assert sent.status_code == 200, sent.text
        offsets = {**fields, "offsets": [{"topic_name": "in", "partition_id": 0, "offset": n}]}
        url = f"{first}{v3}/transactions/{tid}/consumer-groups/copier-{n}/offsets"
        assert httpx.post(url, json=offsets, timeout=10).status_code == 204
        verb = "commit" if n % 3 else "abort"
        ended = httpx.post(f"{other}{v3}/transactions/{tid}/{verb}", json=fields, timeout=10)
        assert ended.status_code == 200, ended.text
        assert ended.json()["producer_epoch"] == fields["producer_epoch"] + 1
        state = httpx.get(f"{first}{v3}/transactions/{tid}", timeout=10).json()
        assert state["state"] == ("CompleteCommit" if n % 3 else "CompleteAbort")
        stored = httpx.get(f"{other}/groups/copier-{n}/offsets", timeout=10)
        expected = [{"topic": "in", "partition": 0, "offset": n}] if n % 3 else []
        found = stored.json()["offsets"] if stored.status_code == 200 else []
        keys = ("topic", "partition", "offset")
        assert [{k: o[k] for k in keys} for o in found] == expected, stored.text
    for node in nodes:
        for partition in (0, 1):
            response = httpx.get(
                f"{node.url}/topics/txn-any-node/partitions/{partition}/records",
                params={"offset": 0, "isolation.level": "read_committed"},
                headers={"Accept": BINARY_V2},
                timeout=10,
            )
            values = [record["value"] for record in response.json()]
            suffix = "a" if partition == 0 else "b"
            assert values == [b64(f"etl-{n}-{suffix}".encode()) for n in (1, 2)]


def test_a_request_id_follows_a_forwarded_request_into_the_leaders_json_logs(nodes_factory):
    """Each produce goes to node 0 with its own x-request-id; the partitions node 1 should
    lead are forwarded there, and node 1's log line for taking each one (JSON) names the id
    of the request that made it take it."""
    nodes = nodes_factory(2, LAKELOG_LOG_FORMAT="json")
    create(nodes[0].url, "traced", 8)
    for partition in range(8):
        response = httpx.post(
            f"{nodes[0].url}/topics/traced",
            json={"records": [{"value": b64(b"v"), "partition": partition}]},
            headers={"Content-Type": BINARY_V2, "x-request-id": f"trace-{partition}"},
            timeout=10,
        )
        assert response.status_code == 200, response.text
        assert response.headers["x-request-id"] == f"trace-{partition}"
    taken = {}
    for node_id, node in enumerate(nodes):
        for line in node.log_text().splitlines():
            if not line.startswith("{"):
                continue  # uvicorn's own lines
            event = json.loads(line)
            assert set(event) >= {"ts", "level", "logger", "message", "request_id", "node_id"}
            if event["message"].startswith(f"node {node_id} leads traced/"):
                partition = int(event["message"].rsplit("/", 1)[1])
                taken[partition] = (node_id, event["request_id"])
    assert {node for node, _ in taken.values()} == {0, 1}, taken  # some were forwarded
    assert all(request_id == f"trace-{p}" for p, (_, request_id) in taken.items()), taken
