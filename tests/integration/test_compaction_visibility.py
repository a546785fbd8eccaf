"""What readers see follows the table (issue: operations, item 2): after key compaction commits,
a deleted key's old values are gone for every HTTP reader of a live gateway, including one whose
in-memory tail held them, and none of them ever sees them again."""

from __future__ import annotations

import time

import httpx

from jobs.runner import JobRequest, run_job
from tests.integration.helpers import b64, create_topic, fetch, produce, unb64
from tests.integration.test_consumers_v2 import new_consumer, records, subscribe

KEYS = 10
ROUNDS = 30
CATCH_UP_S = 5.0  # the gateway looks for other writers' commits every 500 ms while read


def read_all(client: httpx.Client, topic: str) -> list[dict]:
    end = client.get(f"/topics/{topic}/partitions/0/offsets").json()["end_offset"]
    found, offset = [], 0
    while offset < end:
        page = fetch(client, topic, 0, offset, max_bytes=10_000_000)
        assert page.status_code == 200, page.text
        items = page.json()
        found += items
        offset = items[-1]["offset"] + 1 if items else end
    return found


def values_of(items: list[dict], key: bytes) -> list[bytes | None]:
    return [unb64(r["value"]) for r in items if unb64(r["key"]) == key]


def test_a_deleted_key_is_gone_for_every_reader_after_compaction(client, gateway, topic_name):
    create_topic(
        client,
        topic_name,
        segment_bytes=2000,
        cleanup_policy="compact",
        delete_retention_ms=0,
        min_compaction_lag_ms=0,
    )
    for index in range(KEYS * ROUNDS):
        record = {"key": b64(f"k{index % KEYS}"), "value": b64(f"v{index}-" + "x" * 40)}
        assert produce(client, topic_name, [record], partition=0).status_code == 200
    tombstone = {"key": b64("k3"), "value": None}
    assert produce(client, topic_name, [tombstone], partition=0).status_code == 200
    for index in range(60):  # later segments: the tombstone's segment is no longer active
        record = {"key": b64(f"later{index}"), "value": b64("y" * 40)}
        assert produce(client, topic_name, [record], partition=0).status_code == 200
    before = read_all(client, topic_name)  # served from the leader's in-memory tail
    assert len(values_of(before, b"k3")) == ROUNDS + 1

    summary = run_job(
        JobRequest(job="compact-keys", root=str(gateway.data_dir), topics=(topic_name,)),
        out=lambda line: None,
    )
    assert summary.failed == 0

    deadline = time.monotonic() + CATCH_UP_S
    while values_of(read_all(client, topic_name), b"k3") and time.monotonic() < deadline:
        time.sleep(0.1)
    after = read_all(client, topic_name)
    assert values_of(after, b"k3") == []  # old values and (delete.retention.ms=0) the tombstone
    for key in (f"k{k}".encode() for k in range(KEYS) if k != 3):
        assert values_of(after, key) == [
            f"v{(ROUNDS - 1) * KEYS + int(key[1:])}-".encode() + b"x" * 40
        ]
    offsets = [r["offset"] for r in after]
    assert offsets == sorted(set(offsets)) and offsets[-1] == before[-1]["offset"]

    consumer = new_consumer(client, f"{topic_name}-reader")  # a consumer instance from 0
    subscribe(client, consumer, [topic_name])
    seen: list[dict] = []
    for _ in range(20):
        seen += records(client, consumer, max_bytes=10_000_000)
        if seen and seen[-1]["offset"] == before[-1]["offset"]:
            break
    assert seen and values_of(seen, b"k3") == []
    client.delete(consumer)
