"""A gateway leading a partition while another writer appends to the same table directly
(a Spark task, a tool): HTTP produces still succeed, offsets stay dense and unique, fetches see
the other writer's records; appends handed to the leader with a txn are applied once."""

from __future__ import annotations

import threading
import time

import httpx

from storage_layout.cluster import routes
from storage_layout.cluster.codec import encode_append
from storage_layout.log import DeltaPartitionLog
from storage_layout.paths import partition_table_uri
from storage_layout.records import AppTransaction, NewRecord
from storage_layout.topic_config import TopicConfig
from tests.integration.helpers import b64, create_topic, fetch, produce, unb64

HTTP_REQUESTS = 40
DIRECT_APPENDS = 20


def end_offset(client: httpx.Client, topic: str, *, at_least: int = 0) -> int:
    """The partition's end offset once it reaches `at_least`: the leader notices another
    writer's commits within its check interval (FOREIGN_CHECK_INTERVAL_MS), not at once."""
    deadline = time.monotonic() + 5
    while True:
        end = client.get(f"/topics/{topic}/partitions/0/offsets").json()["end_offset"]
        if end >= at_least or time.monotonic() > deadline:
            return end
        time.sleep(0.1)


def all_values(client: httpx.Client, topic: str, *, count: int = 0) -> list[bytes]:
    """Every record of partition 0 by offset (waiting for `count` of them); offsets must be
    dense from 0."""
    end = end_offset(client, topic, at_least=count)
    records, offset = [], 0
    while offset < end:
        page = fetch(client, topic, 0, offset, max_bytes=1_000_000).json()
        records += page
        offset = page[-1]["offset"] + 1
    assert [r["offset"] for r in records] == list(range(end))
    return [unb64(r["value"]) for r in records]


def test_direct_appends_interleaved_with_http_produce(client, gateway, topic_name):
    create_topic(client, topic_name)
    assert produce(client, topic_name, [{"value": b64("warm")}]).status_code == 200  # leads now
    log = DeltaPartitionLog.open(partition_table_uri(str(gateway.data_dir), topic_name, 0))

    def direct_writer():
        for i in range(DIRECT_APPENDS):
            txn = AppTransaction("test-writer", i)
            log.append_once(
                [NewRecord(None, f"d{i}".encode())], config=TopicConfig(), transaction=txn
            )

    thread = threading.Thread(target=direct_writer)
    thread.start()
    answers = [produce(client, topic_name, [{"value": b64(f"h{i}")}]) for i in range(HTTP_REQUESTS)]
    thread.join()
    failed = [(a.status_code, a.text) for a in answers if a.status_code != 200]
    assert failed == []  # no produce failed on the other writer's commits
    expected = {b"warm"} | {f"h{i}".encode() for i in range(HTTP_REQUESTS)}
    expected |= {f"d{i}".encode() for i in range(DIRECT_APPENDS)}
    values = all_values(client, topic_name, count=len(expected))
    assert sorted(values) == sorted(expected)  # each exactly once


def test_fetch_at_the_head_sees_a_direct_append(client, gateway, topic_name):
    create_topic(client, topic_name)
    assert produce(client, topic_name, [{"value": b64("first")}]).status_code == 200
    log = DeltaPartitionLog.open(partition_table_uri(str(gateway.data_dir), topic_name, 0))
    log.append([NewRecord(None, b"direct")], config=TopicConfig())
    page = fetch(client, topic_name, 0, 1, timeout=5000).json()  # long-poll at the head
    assert [unb64(r["value"]) for r in page] == [b"direct"]


def test_append_handed_to_the_leader_with_a_txn_is_applied_once(client, topic_name):
    create_topic(client, topic_name)
    assert produce(client, topic_name, [{"value": b64("first")}]).status_code == 200
    path = routes.append_path(topic_name, 0)
    records = [NewRecord(b"k", b"spark-0"), NewRecord(b"k", b"spark-1")]
    body = encode_append(records, transaction=AppTransaction("spark:q:0", 5))
    first = client.post(path, json=body).json()
    again = client.post(path, json=body).json()
    assert (first["base_offset"], first["duplicate"]) == (1, False)
    assert again["duplicate"] is True
    later = encode_append(records[:1], transaction=AppTransaction("spark:q:0", 6))
    assert client.post(path, json=later).json()["base_offset"] == 3
    assert all_values(client, topic_name) == [b"first", b"spark-0", b"spark-1", b"spark-0"]
