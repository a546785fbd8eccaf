"""Maintenance jobs while a real gateway serves producers and consumers (issue 6):
no acknowledged record is lost unless retention removed its segment, none is duplicated or
renumbered, no produce fails, and a fetch below the new log start gets the clear error."""

from __future__ import annotations

import threading
import time

import httpx

from jobs.runner import JobRequest, run_job
from storage_layout import paths
from storage_layout.log import DeltaPartitionLog
from tests.integration.helpers import assert_error, b64, create_topic, fetch, produce, unb64

PRODUCE_REQUESTS = 120


def run(job: str, root: str, topic: str) -> None:
    summary = run_job(JobRequest(job=job, root=root, topics=(topic,)), out=lambda line: None)
    assert summary.failed == 0


def produce_while(client: httpx.Client, topic: str, job, values) -> dict[int, bytes]:
    """Produce `values` (key, value) one request each while `job()` runs in a loop; returns
    the acknowledged offset of every record."""
    acked: dict[int, bytes] = {}
    failures: list[str] = []
    done = threading.Event()

    def producer() -> None:
        for key, value in values:
            record = {"key": b64(key), "value": None if value is None else b64(value)}
            answer = produce(client, topic, [record], partition=0)
            if answer.status_code != 200:
                failures.append(answer.text)
                continue
            acked[answer.json()["offsets"][0]["offset"]] = value
        done.set()

    thread = threading.Thread(target=producer)
    thread.start()
    while not done.is_set():
        job()
    thread.join()
    assert failures == []
    return acked


def wait_for_log_start(client: httpx.Client, topic: str, *, above: int) -> int:
    """The gateway sees a job's commit within its foreign-commit check interval."""
    deadline = time.monotonic() + 5
    while True:
        bounds = client.get(f"/topics/{topic}/partitions/0/offsets").json()
        if bounds["beginning_offset"] > above or time.monotonic() > deadline:
            assert bounds["beginning_offset"] > above, bounds
            return bounds["beginning_offset"]
        time.sleep(0.1)


def records_from(client: httpx.Client, topic: str, offset: int) -> list[dict]:
    end = client.get(f"/topics/{topic}/partitions/0/offsets").json()["end_offset"]
    records = []
    while offset < end:
        page = fetch(client, topic, 0, offset, max_bytes=10_000_000).json()
        records += page
        offset = page[-1]["offset"] + 1 if page else end
    return records


def test_retention_while_producing(client, gateway, topic_name):
    root = str(gateway.data_dir)
    create_topic(client, topic_name, segment_bytes=3000, retention_bytes=6000)
    values = [(f"k{i}", f"value-{i:05d}-" + "x" * 200) for i in range(PRODUCE_REQUESTS)]
    acked = produce_while(client, topic_name, lambda: run("retention", root, topic_name), values)
    run("retention", root, topic_name)
    table_uri = paths.partition_table_uri(root, topic_name, 0)
    table_start = DeltaPartitionLog.open(table_uri).bounds().log_start_offset
    assert table_start > 0  # retention removed segments
    # The gateway may still answer from an earlier job's commit until it catches up.
    wait_for_log_start(client, topic_name, above=table_start - 1)
    bounds = client.get(f"/topics/{topic_name}/partitions/0/offsets").json()
    start, end = bounds["beginning_offset"], bounds["end_offset"]
    assert sorted(acked) == list(range(end))  # every acknowledged offset, dense, none twice
    kept = records_from(client, topic_name, start)
    assert [r["offset"] for r in kept] == list(range(start, end))  # none renumbered
    assert all(unb64(r["value"]).decode() == acked[r["offset"]] for r in kept)
    assert_error(fetch(client, topic_name, 0, start - 1), 416, 41601)  # below the log start


def test_key_compaction_while_producing(client, gateway, topic_name):
    root = str(gateway.data_dir)
    create_topic(
        client,
        topic_name,
        segment_bytes=2000,
        cleanup_policy="compact",
        delete_retention_ms=0,
        min_compaction_lag_ms=0,
    )
    values = [(f"k{i % 7}", f"v{i}-" + "y" * 100) for i in range(PRODUCE_REQUESTS)]
    values.append(("k0", None))  # a tombstone: k0 goes once it is compacted
    acked = produce_while(client, topic_name, lambda: run("compact-keys", root, topic_name), values)
    produce(client, topic_name, [{"key": b64("k1"), "value": b64("last")}], partition=0)
    run("compact-keys", root, topic_name)
    bounds = client.get(f"/topics/{topic_name}/partitions/0/offsets").json()
    assert bounds["beginning_offset"] == 0  # compaction never moves the log start
    records = records_from(client, topic_name, 0)
    offsets = [r["offset"] for r in records]
    assert offsets == sorted(set(offsets))  # ordered, no duplicate
    assert offsets[0] > 0  # the first segment was emptied: a fetch from 0 skips the gap
    for record in records:  # every record survives at its acknowledged offset
        value = None if record["value"] is None else unb64(record["value"]).decode()
        assert acked.get(record["offset"], "last") == value
    latest = {}
    for key, value in values:
        latest[key] = value
    latest["k1"] = "last"
    seen = {unb64(r["key"]).decode(): r for r in records}
    assert {k: v for k, v in latest.items() if v is not None}.keys() <= seen.keys()
    compacted = [r for r in records if r["offset"] < offsets[-1] - 30]  # well inside the clean part
    keys = [unb64(r["key"]) for r in compacted]
    assert len(keys) == len(set(keys))  # at most one record per key there
    assert b"k0" not in keys  # the tombstone and k0's older values are gone


def test_vacuum_at_the_minimum_retention_while_producing(client, gateway, topic_name):
    root = str(gateway.data_dir)
    create_topic(client, topic_name, segment_bytes=2000)
    request = JobRequest(job="vacuum", root=root, topics=(topic_name,), vacuum_retention_ms=600_000)

    def vacuum() -> None:
        assert run_job(request, out=lambda line: None).failed == 0

    values = [(f"k{i}", f"v{i}") for i in range(40)]
    acked = produce_while(client, topic_name, vacuum, values)
    records = records_from(client, topic_name, 0)
    assert {r["offset"]: unb64(r["value"]).decode() for r in records} == acked


def test_a_group_consumer_behind_retention_continues_from_the_new_start(
    client, gateway, topic_name
):
    from tests.integration.test_consumers_v2 import new_consumer, records, subscribe

    root = str(gateway.data_dir)
    create_topic(client, topic_name, segment_bytes=1000, retention_bytes=1)
    for i in range(20):
        produce(client, topic_name, [{"value": b64(f"v{i:03d}-" + "z" * 300)}], partition=0)
    consumer = new_consumer(client, f"{topic_name}-group", **{"auto.offset.reset": "earliest"})
    subscribe(client, consumer, [topic_name])
    first = records(client, consumer, timeout=5000, max_bytes=400)  # reads from offset 0
    assert first and first[0]["offset"] == 0
    run("retention", root, topic_name)  # every closed segment goes: the position is behind
    start = wait_for_log_start(client, topic_name, above=first[-1]["offset"] + 1)
    after = records(client, consumer, timeout=5000)
    assert after and after[0]["offset"] == start  # earliest: from the new log start
    client.delete(consumer)
