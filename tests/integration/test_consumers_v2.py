"""Confluent REST v2 consumer instances against a real gateway: Karapace's REST consumer test
behaviours (reference/rest_proxy_api.md §4), ported, plus what lakelog promises beyond them."""

from __future__ import annotations

import concurrent.futures
import time

import httpx
import pytest
from deltalake import DeltaTable

from tests.integration.helpers import (
    BINARY_V2,
    JSON_V2,
    assert_error,
    b64,
    create_topic,
    gateway_with,
    produce,
    unb64,
)

V2 = "application/vnd.kafka.v2+json"


def new_consumer(client: httpx.Client, group: str, **config) -> str:
    """Create an instance; returns its path (from base_uri, which must point at the gateway)."""
    body = {"format": "binary", "auto.offset.reset": "earliest", **config}
    response = client.post(f"/consumers/{group}", json=body, headers={"Content-Type": V2})
    assert response.status_code == 200, response.text
    created = response.json()
    assert created["base_uri"].startswith(str(client.base_url).rstrip("/"))
    assert created["base_uri"].endswith(f"/consumers/{group}/instances/{created['instance_id']}")
    return f"/consumers/{group}/instances/{created['instance_id']}"


def subscribe(client: httpx.Client, consumer: str, topics: list[str]) -> None:
    response = client.post(f"{consumer}/subscription", json={"topics": topics})
    assert response.status_code == 204, response.text


def records(client: httpx.Client, consumer: str, accept: str = BINARY_V2, **params) -> list[dict]:
    response = client.get(f"{consumer}/records", params=params, headers={"Accept": accept})
    assert response.status_code == 200, response.text
    return response.json()


def values(items: list[dict]) -> list[bytes]:
    return [unb64(item["value"]) for item in items]


def produce_values(client, topic: str, count: int, partition: int | None = None) -> None:
    body = [{"value": b64(f"v{i}")} for i in range(count)]
    response = produce(client, topic, body, partition=partition)
    assert response.status_code == 200, response.text


def test_create_delete_and_duplicate_instances(client, topic_name):
    group = f"g-{topic_name}"
    consumer = new_consumer(client, group, name="c1")
    assert_error(client.post(f"/consumers/{group}", json={"name": "c1"}), 409, 40902)
    assert client.delete(consumer + "/").status_code == 204  # trailing slash accepted
    assert_error(client.delete(consumer), 404, 40403)
    assert_error(client.post(f"/consumers/{group}", json={"fetch.min.bytes": -10}), 422, 42204)
    assert_error(client.post(f"/consumers/{group}", json={"format": "cbor"}), 422, 42204)


def test_first_fetch_after_subscribe_returns_existing_data(client, topic_name):
    create_topic(client, topic_name)
    produce_values(client, topic_name, 5)
    consumer = new_consumer(client, f"g-{topic_name}")
    subscribe(client, consumer, [topic_name])
    items = records(client, consumer, timeout=5000)
    assert values(items) == [f"v{i}".encode() for i in range(5)]
    first = items[0]
    assert (first["topic"], first["partition"], first["offset"]) == (topic_name, 0, 0)
    assert first["timestamp"] > 0 and first["timestamp_type"] == "CreateTime"


def test_records_return_as_soon_as_data_arrives(client, topic_name):
    create_topic(client, topic_name)
    consumer = new_consumer(client, f"g-{topic_name}")
    subscribe(client, consumer, [topic_name])
    assert records(client, consumer, timeout=0) == []
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        waiting = pool.submit(records, client, consumer, timeout=20_000)
        time.sleep(0.5)
        produce_values(client, topic_name, 1)
        assert values(waiting.result()) == [b"v0"]
        assert time.monotonic() - started < 10  # woken by the data, not the 20 s timeout


def test_an_empty_long_poll_waits_for_its_timeout(client, topic_name):
    create_topic(client, topic_name)
    consumer = new_consumer(client, f"g-{topic_name}")
    subscribe(client, consumer, [topic_name])
    started = time.monotonic()
    assert records(client, consumer, timeout=1000) == []
    assert time.monotonic() - started >= 0.9


def test_headers_and_json_format(client, topic_name):
    create_topic(client, topic_name)
    body = {"records": [{"value": {"a": 1}, "key": "k"}]}
    response = client.post(f"/topics/{topic_name}", json=body, headers={"Content-Type": JSON_V2})
    assert response.status_code == 200, response.text
    consumer = new_consumer(client, f"g-{topic_name}", format="json")
    subscribe(client, consumer, [topic_name])
    items = records(client, consumer, accept=JSON_V2, timeout=5000)
    assert [(i["key"], i["value"]) for i in items] == [("k", {"a": 1})]
    assert_error(client.get(f"{consumer}/records", headers={"Accept": BINARY_V2}), 406, 40601)


def test_subscription_assignment_and_their_conflicts(client, topic_name):
    create_topic(client, topic_name, partitions=2)
    consumer = new_consumer(client, f"g-{topic_name}")
    assert client.get(f"{consumer}/subscription").json() == {"topics": []}
    assert client.get(f"{consumer}/assignments").json() == {"partitions": []}
    both = {"topics": [topic_name], "topic_pattern": "x.*"}
    body = assert_error(client.post(f"{consumer}/subscription", json=both), 409, 40903)
    assert body["message"] == (
        "Illegal state: Subscription to topics, partitions and pattern are mutually exclusive"
    )
    subscribe(client, consumer, [topic_name])
    assert client.get(f"{consumer}/subscription").json() == {"topics": [topic_name]}
    assigned = client.get(f"{consumer}/assignments").json()["partitions"]
    assert sorted(p["partition"] for p in assigned) == [0, 1]
    manual = {"partitions": [{"topic": topic_name, "partition": 0}]}
    assert_error(client.post(f"{consumer}/assignments", json=manual), 409, 40903)
    assert client.delete(f"{consumer}/subscription").status_code == 204
    assert client.post(f"{consumer}/assignments", json=manual).status_code == 204
    assert client.get(f"{consumer}/assignments").json() == manual


def test_pattern_subscription_matches_new_topics(client, topic_name):
    for suffix in ("a", "b", "c"):
        create_topic(client, f"{topic_name}-{suffix}")
    consumer = new_consumer(client, f"g-{topic_name}")
    pattern = {"topic_pattern": f"{topic_name}-.*"}
    assert client.post(f"{consumer}/subscription", json=pattern).status_code == 204
    assigned = client.get(f"{consumer}/assignments").json()["partitions"]
    assert sorted(p["topic"] for p in assigned) == [f"{topic_name}-{s}" for s in "abc"]


def test_seek_offsets_beginning_end_and_unassigned(client, topic_name):
    create_topic(client, topic_name)
    produce_values(client, topic_name, 6)
    consumer = new_consumer(client, f"g-{topic_name}")
    tp = {"topic": topic_name, "partition": 0}
    client.post(f"{consumer}/assignments", json={"partitions": [tp]})
    seek = {"offsets": [{**tp, "offset": 4}]}
    assert client.post(f"{consumer}/positions", json=seek).status_code == 204
    assert values(records(client, consumer, timeout=2000)) == [b"v4", b"v5"]
    assert (
        client.post(f"{consumer}/positions/beginning", json={"partitions": [tp]}).status_code == 204
    )
    assert values(records(client, consumer, timeout=2000))[0] == b"v0"
    assert client.post(f"{consumer}/positions/end", json={"partitions": [tp]}).status_code == 204
    assert records(client, consumer, timeout=0) == []
    other = {"partitions": [{"topic": topic_name, "partition": 7}]}
    assert_error(client.post(f"{consumer}/positions/end", json=other), 409, 40903)


def test_commit_zero_reads_back_one_and_empty_commit_takes_positions(client, topic_name):
    create_topic(client, topic_name)
    produce_values(client, topic_name, 3)
    consumer = new_consumer(client, f"g-{topic_name}", **{"auto.commit.enable": "false"})
    subscribe(client, consumer, [topic_name])
    tp = {"topic": topic_name, "partition": 0}
    commit = {"offsets": [{**tp, "offset": 0, "metadata": "m"}]}
    response = client.post(f"{consumer}/offsets", json=commit)
    assert (response.status_code, response.json()) == (200, [])
    got = client.request("GET", f"{consumer}/offsets", json={"partitions": [tp]}).json()
    assert got == {"offsets": [{**tp, "offset": 1, "metadata": "m"}]}
    # the first fetch starts at the committed offset
    assert values(records(client, consumer, timeout=5000)) == [b"v1", b"v2"]
    assert client.post(f"{consumer}/offsets").status_code == 200  # empty: all fetched
    got = client.request("GET", f"{consumer}/offsets", json={"partitions": [tp]}).json()
    assert got["offsets"][0]["offset"] == 3


def test_max_bytes_is_honoured_but_returns_at_least_one_record(client, topic_name):
    create_topic(client, topic_name)
    body = [{"value": b64(f"value-{i:02d}")} for i in range(50)]  # 8 bytes each
    assert produce(client, topic_name, body).status_code == 200
    consumer = new_consumer(client, f"g-{topic_name}")
    subscribe(client, consumer, [topic_name])
    small = records(client, consumer, timeout=5000, max_bytes=10)
    assert 1 <= len(small) <= 2
    rest = records(client, consumer, timeout=5000)
    assert [i["offset"] for i in small + rest] == list(range(50))  # nothing skipped


def test_a_restarted_consumer_resumes_from_the_committed_offset(client, topic_name):
    create_topic(client, topic_name)
    produce_values(client, topic_name, 4)
    group = f"g-{topic_name}"
    consumer = new_consumer(client, group, **{"auto.commit.enable": "false"})
    subscribe(client, consumer, [topic_name])
    assert len(records(client, consumer, timeout=5000)) == 4
    commit = {"offsets": [{"topic": topic_name, "partition": 0, "offset": 1}]}
    client.post(f"{consumer}/offsets", json=commit)
    client.delete(consumer)
    again = new_consumer(client, group)
    subscribe(client, again, [topic_name])
    assert values(records(client, again, timeout=5000)) == [b"v2", b"v3"]


def test_instances_of_one_group_split_the_partitions(client, topic_name):
    create_topic(client, topic_name, partitions=4)
    group = f"g-{topic_name}"
    first, second = new_consumer(client, group), new_consumer(client, group)
    subscribe(client, first, [topic_name])
    subscribe(client, second, [topic_name])
    mine = {p["partition"] for p in client.get(f"{first}/assignments").json()["partitions"]}
    theirs = {p["partition"] for p in client.get(f"{second}/assignments").json()["partitions"]}
    assert mine | theirs == {0, 1, 2, 3} and not mine & theirs and len(mine) == 2
    client.delete(second)
    mine = {p["partition"] for p in client.get(f"{first}/assignments").json()["partitions"]}
    assert mine == {0, 1, 2, 3}


def test_concurrent_fetches_on_one_instance_are_serialized(client, topic_name):
    create_topic(client, topic_name)
    produce_values(client, topic_name, 200)
    consumer = new_consumer(client, f"g-{topic_name}")
    subscribe(client, consumer, [topic_name])

    def fetch_all() -> list[int]:
        with httpx.Client(base_url=client.base_url, timeout=30) as own:
            return [i["offset"] for i in records(own, consumer, timeout=2000, max_bytes=500)]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        batches = list(pool.map(lambda _: fetch_all(), range(8)))
    offsets = [offset for batch in batches for offset in batch]
    assert len(offsets) == len(set(offsets))  # no record returned twice
    assert sorted(offsets) == list(range(len(offsets)))  # and none skipped


def test_offsets_are_rows_of_the_consumer_offsets_delta_table(gateway, client, topic_name):
    create_topic(client, topic_name)
    group = f"g-{topic_name}"
    consumer = new_consumer(client, group)
    subscribe(client, consumer, [topic_name])
    commit = {"offsets": [{"topic": topic_name, "partition": 0, "offset": 41}]}
    assert client.post(f"{consumer}/offsets", json=commit).status_code == 200
    table = DeltaTable(str(gateway.data_dir / "_meta" / "consumer_offsets")).to_pyarrow_table()
    rows = [r for r in table.to_pylist() if r["group_id"] == group]
    assert [(r["topic"], r["partition"], r["offset"]) for r in rows] == [(topic_name, 0, 42)]
    assert rows[0]["member_id"] and rows[0]["generation"] >= 1


@pytest.fixture(scope="module")
def short_lived(tmp_path_factory):
    with gateway_with(
        tmp_path_factory, "instances", {"LAKELOG_CONSUMER_INSTANCE_TIMEOUT_MS": "1000"}
    ) as gateway:
        yield gateway


def test_an_idle_instance_expires_with_a_message_naming_the_expiry(short_lived):
    with httpx.Client(base_url=short_lived.url, timeout=30) as client:
        consumer = new_consumer(client, "expiring")
        time.sleep(3)
        body = assert_error(client.get(f"{consumer}/subscription"), 404, 40403)
        assert "expired" in body["message"]
        assert "consumer.instance.timeout.ms" in body["message"]


def test_seek_to_timestamps(client, topic_name):
    """positions with ISO-8601 timestamps: the first offset at or after each time."""
    create_topic(client, topic_name)
    stamps = ["2026-01-01T00:00:00Z", "2026-01-01T00:00:10Z", "2026-01-01T00:00:20Z"]
    body = [{"value": b64(f"v{i}"), "timestamp": t} for i, t in enumerate(stamps)]
    assert produce(client, topic_name, body).status_code == 200
    consumer = new_consumer(client, f"g-{topic_name}")
    tp = {"topic": topic_name, "partition": 0}
    client.post(f"{consumer}/assignments", json={"partitions": [tp]})
    seek = {"timestamps": [{**tp, "timestamp": "2026-01-01T00:00:05Z"}]}
    assert client.post(f"{consumer}/positions", json=seek).status_code == 204
    assert values(records(client, consumer, timeout=2000)) == [b"v1", b"v2"]
    bad = {"timestamps": [{**tp, "timestamp": "yesterday"}]}
    assert_error(client.post(f"{consumer}/positions", json=bad), 422, 422)
