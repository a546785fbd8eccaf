"""A partition holding committed, aborted and open transactions (FORMAT.md §14), read by
librdkafka (confluent-kafka) over the Kafka protocol and by HTTP readers: read_committed sees
plain and committed records up to the open transaction (the last stable offset, which is also
where `latest` and lag end), read_uncommitted every record, and neither sees markers.

The transactions are written into the table before the gateway starts, so the partition's
layout is exact (tests/kafka/test_transactions.py writes them through Kafka's APIs)."""

from __future__ import annotations

import time

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.serial import entity_reader

from api.kafka.messages import response_class
from storage_layout.log import DeltaPartitionLog
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.paths import partition_table_uri
from storage_layout.records import NewRecord
from storage_layout.schema import CONTROL_ABORT, CONTROL_COMMIT
from storage_layout.topic_config import TopicConfig
from tests.gateway_process import start_gateway
from tests.integration.helpers import V3
from tests.kafka.test_hostile_frames import connect, read_answer, request_frame

pytestmark = pytest.mark.gateway

TOPIC = "transactions"
CONFIG = TopicConfig()
POLL_DEADLINE_S = 20


def write_transactions(root: str) -> None:
    """0 plain | 1-2 producer 1 | 3 producer 2 | 4 ABORT 2 | 5 COMMIT 1 | 6 plain | 7 producer
    3, open."""
    TopicCatalog(root).create_topic(TOPIC, 1, CONFIG)
    log = DeltaPartitionLog.open(partition_table_uri(root, TOPIC, 0))

    def txn(producer: int, *names: str) -> None:
        producers = [(producer, 0, i, True) for i in range(len(names))]
        records = [NewRecord(None, name.encode()) for name in names]
        log.append(records, config=CONFIG, producers=producers)

    log.append([NewRecord(None, b"plain-0")], config=CONFIG)
    txn(1, "committed-1", "committed-2")
    txn(2, "aborted-3")
    log.append_marker(2, 0, CONTROL_ABORT, config=CONFIG)
    log.append_marker(1, 0, CONTROL_COMMIT, config=CONFIG)
    log.append([NewRecord(None, b"plain-6")], config=CONFIG)
    txn(3, "open-7")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("txn-reads") / "data"
    data_dir.mkdir()
    write_transactions(str(data_dir))
    process = start_gateway(data_dir, kafka=True)
    yield process
    process.stop()


def read_all(bootstrap: str, isolation: str, expected: int) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    seen, deadline = [], time.monotonic() + POLL_DEADLINE_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append((message.offset(), message.value()))
            elif message is None and len(seen) >= expected:
                break
    finally:
        consumer.close()
    return seen


def test_read_committed_skips_aborted_records_and_stops_at_the_open_transaction(gateway):
    assert read_all(gateway.kafka_address, "read_committed", 4) == [
        (0, b"plain-0"),
        (1, b"committed-1"),
        (2, b"committed-2"),
        (6, b"plain-6"),
    ]


def test_read_uncommitted_sees_every_record_and_no_marker(gateway):
    assert read_all(gateway.kafka_address, "read_uncommitted", 6) == [
        (0, b"plain-0"),
        (1, b"committed-1"),
        (2, b"committed-2"),
        (3, b"aborted-3"),
        (6, b"plain-6"),
        (7, b"open-7"),
    ]


def test_the_http_api_shows_no_marker(gateway):
    response = httpx.get(
        f"{gateway.url}/topics/{TOPIC}/partitions/0/records", params={"offset": 0}, timeout=30
    )
    assert response.status_code == 200, response.text
    assert [record["offset"] for record in response.json()] == [0, 1, 2, 3, 6, 7]


COMMITTED_OFFSETS = [0, 1, 2, 6]
LAST_STABLE_OFFSET = 7  # producer 3's open transaction
V2 = "application/vnd.kafka.v2+json"
LIST_OFFSETS = 2


def fetch(gateway, offset: int, isolation: str) -> httpx.Response:
    params = {"offset": offset, "isolation.level": isolation}
    return httpx.get(f"{gateway.url}/topics/{TOPIC}/partitions/0/records", params=params)


def test_http_read_committed_leaves_out_aborted_records_and_stops_at_the_open_one(gateway):
    response = fetch(gateway, 0, "read_committed")
    assert response.status_code == 200, response.text
    assert [record["offset"] for record in response.json()] == COMMITTED_OFFSETS
    assert response.headers["x-lakelog-next-offset"] == str(LAST_STABLE_OFFSET)
    at_the_open_one = fetch(gateway, LAST_STABLE_OFFSET, "read_committed")
    assert at_the_open_one.json() == []
    assert "x-lakelog-next-offset" not in at_the_open_one.headers  # nothing read: stay
    uncommitted = fetch(gateway, 7, "read_uncommitted")
    assert [record["offset"] for record in uncommitted.json()] == [7]


def test_http_read_committed_of_only_an_aborted_record_moves_the_reader_on(gateway):
    response = httpx.get(
        f"{gateway.url}/topics/{TOPIC}/partitions/0/records",
        params={"offset": 3, "isolation.level": "read_committed", "max_bytes": 1},
    )
    assert [record["offset"] for record in response.json()] in ([], [6])
    assert int(response.headers["x-lakelog-next-offset"]) > 3


def test_an_unknown_isolation_level_is_refused_with_the_valid_ones(gateway):
    response = fetch(gateway, 0, "serializable")
    assert response.status_code == 422
    assert response.json()["error_code"] == 42215
    assert "read_committed" in response.json()["message"]


def test_partition_offsets_give_the_last_stable_offset(gateway):
    body = httpx.get(f"{gateway.url}/topics/{TOPIC}/partitions/0/offsets").json()
    assert body.pop("size_bytes") > 0
    assert body == {
        "beginning_offset": 0,
        "end_offset": 8,
        "last_stable_offset": LAST_STABLE_OFFSET,
    }


def test_a_read_committed_consumer_instance_sees_committed_records_only(gateway):
    client = httpx.Client(base_url=gateway.url, headers={"Content-Type": V2}, timeout=30)
    instance = "/consumers/http-committed/instances/c1"
    for name, reset in (("c1", "earliest"), ("c2", "latest")):
        body = {"name": name, "auto.offset.reset": reset, "isolation.level": "read_committed"}
        assert client.post("/consumers/http-committed", json=body).status_code == 200
    assignment = {"partitions": [{"topic": TOPIC, "partition": 0}]}
    for consumer in (instance, "/consumers/http-committed/instances/c2"):
        assert client.post(f"{consumer}/assignments", json=assignment).status_code == 204
    seen: list[int] = []
    deadline = time.monotonic() + POLL_DEADLINE_S
    while len(seen) < len(COMMITTED_OFFSETS) and time.monotonic() < deadline:
        records = client.get(f"{instance}/records", params={"timeout": 500}).json()
        seen += [record["offset"] for record in records]
    assert seen == COMMITTED_OFFSETS
    assert client.get(f"{instance}/records", params={"timeout": 200}).json() == []
    # "latest" for a read_committed instance is the last stable offset: committing its
    # position after a poll stores 7, not the high watermark 8.
    late = "/consumers/http-committed/instances/c2"
    assert client.get(f"{late}/records", params={"timeout": 200}).json() == []
    assert client.post(f"{late}/offsets", json={}).status_code == 200
    stored = client.get("/groups/http-committed/offsets").json()
    assert {(o["partition"], o["offset"]) for o in stored["offsets"]} >= {(0, 7)}


def test_a_bad_isolation_level_of_a_consumer_instance_is_refused(gateway):
    body = {"name": "bad", "isolation.level": "read_dirty"}
    response = httpx.post(
        f"{gateway.url}/consumers/http-bad", json=body, headers={"Content-Type": V2}
    )
    assert response.status_code == 422
    assert response.json()["error_code"] == 42204


def latest_offset(address: str, isolation_level: int) -> int:
    body = {
        "replica_id": -1,
        "isolation_level": isolation_level,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}],
            }
        ],
    }
    with connect(address) as sock:
        sock.sendall(request_frame(LIST_OFFSETS, 6, body))
        answer = read_answer(sock)
    response, _ = entity_reader(response_class(LIST_OFFSETS, 6))(answer, 5)  # id + tags
    [partition] = response.topics[0].partitions
    assert partition.error_code.value == 0
    return partition.offset


def test_kafka_latest_for_read_committed_is_the_last_stable_offset(gateway):
    """ListOffsets(isolation_level=1): a consumer that starts at "latest" must not start past
    an open transaction, or its records would be skipped once it commits."""
    assert latest_offset(gateway.kafka_address, isolation_level=1) == LAST_STABLE_OFFSET
    assert latest_offset(gateway.kafka_address, isolation_level=0) == 8


def test_v3_lag_ends_at_the_last_stable_offset(gateway):
    client = httpx.Client(base_url=gateway.url, timeout=30)
    commit = {"offsets": [{"topic": TOPIC, "partition": 0, "offset": 1}]}
    assert client.post("/groups/lagging/offsets", json=commit).status_code == 204
    lags = client.get(f"{V3}/consumer-groups/lagging/lags").json()["data"]
    assert [(lag["log_end_offset"], lag["lag"]) for lag in lags] == [(LAST_STABLE_OFFSET, 6)]
