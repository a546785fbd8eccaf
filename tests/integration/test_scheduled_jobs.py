"""Maintenance inside the gateway (issue: operations, item 1): `lakelog serve` applies
retention and key compaction on its own schedule, each partition's work done by one node of a
cluster; `--no-maintenance` (LAKELOG_MAINTENANCE=false) turns it off; `lakelog jobs schedule`
still runs every job for deployments without a gateway."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from api.core.cluster import preferred_node
from conf.settings import Settings
from jobs.runner import JobRequest
from jobs.schedule import run_schedule
from storage_layout import paths
from storage_layout.log import DeltaPartitionLog
from tests.gateway_process import start_gateway
from tests.integration.helpers import V3, b64, create_topic, fetch, gateway_with, produce, unb64

FAST = {
    "LAKELOG_MAINTENANCE": "true",  # tests/gateway_process.py turns it off by default
    "LAKELOG_RETENTION_INTERVAL_MS": "400",
    "LAKELOG_COMPACT_KEYS_INTERVAL_MS": "400",
}
WAIT_S = 20.0


def produce_many(client: httpx.Client, topic: str, count: int, partition: int = 0) -> None:
    for index in range(count):
        record = {"key": b64(f"fill{index}"), "value": b64(f"v{index}-" + "x" * 80)}
        assert produce(client, topic, [record], partition=partition).status_code == 200


def log_start(client: httpx.Client, topic: str, partition: int = 0) -> int:
    offsets = client.get(f"/topics/{topic}/partitions/{partition}/offsets").json()
    return offsets["beginning_offset"]


def wait_for(condition, seconds: float = WAIT_S) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


@pytest.fixture(scope="module")
def scheduling_gateway(tmp_path_factory):
    with gateway_with(tmp_path_factory, "scheduled", FAST) as process:
        yield process


@pytest.fixture
def scheduled(scheduling_gateway):
    with httpx.Client(base_url=scheduling_gateway.url, timeout=30) as client:
        yield client


def test_the_gateway_applies_retention_ms_by_itself(scheduled, scheduling_gateway, topic_name):
    create_topic(scheduled, topic_name, retention_ms=1000, segment_bytes=1000)
    produce_many(scheduled, topic_name, 40)
    assert wait_for(lambda: log_start(scheduled, topic_name) > 0), "retention never ran"
    assert fetch(scheduled, topic_name, 0, 0).status_code == 416  # below the new log start
    runs = scheduled.get(f"{V3}/maintenance").json()
    assert runs["enabled"] and runs["intervals_ms"]["retention"] == 400
    assert any(
        r["job"] == "retention"
        and r["topic"] == topic_name
        and r["committed"]
        and r["node_id"] == 0
        for r in runs["runs"]
    )
    assert "retention [1/" in scheduling_gateway.log_text()  # progress in the log


def test_the_gateway_compacts_keys_by_itself(scheduled, topic_name):
    create_topic(
        scheduled,
        topic_name,
        cleanup_policy="compact",
        segment_bytes=1000,
        delete_retention_ms=0,
        min_compaction_lag_ms=0,
    )
    for index in range(30):
        record = {"key": b64(f"k{index % 3}"), "value": b64(f"v{index}-" + "x" * 80)}
        assert produce(scheduled, topic_name, [record], partition=0).status_code == 200
    assert produce(scheduled, topic_name, [{"key": b64("k1"), "value": None}]).status_code == 200
    produce_many(scheduled, topic_name, 20)  # later segments: k1's are closed

    def k1_gone() -> bool:
        page = fetch(scheduled, topic_name, 0, 0, max_bytes=10_000_000).json()
        return bool(page) and all(unb64(r["key"]) != b"k1" for r in page)

    assert wait_for(k1_gone), "key compaction never ran"


def test_no_maintenance_leaves_the_table_alone(tmp_path_factory, topic_name):
    env = {**FAST, "LAKELOG_MAINTENANCE": "false"}
    with gateway_with(tmp_path_factory, "unscheduled", env) as process:
        with httpx.Client(base_url=process.url, timeout=30) as client:
            create_topic(client, topic_name, retention_ms=1000, segment_bytes=1000)
            produce_many(client, topic_name, 40)
            time.sleep(3)  # seven retention intervals
            assert log_start(client, topic_name) == 0
            assert client.get(f"{V3}/maintenance").json()["enabled"] is False


def test_each_partition_is_maintained_by_one_node(tmp_path_factory, topic_name):
    """Two nodes on one root: every partition's retention runs on its preferred node only."""
    data_dir = tmp_path_factory.mktemp("two-maintainers") / "data"
    env = {**FAST, "LAKELOG_HEARTBEAT_MS": "200", "LAKELOG_LEASE_MS": "2000"}
    nodes = [start_gateway(data_dir, env={**env, "LAKELOG_NODE_ID": str(n)}) for n in (0, 1)]
    try:
        time.sleep(1.0)  # both see each other before the topic exists
        clients = [httpx.Client(base_url=node.url, timeout=30) for node in nodes]
        create_topic(clients[0], topic_name, partitions=4, retention_ms=1000, segment_bytes=1000)
        for partition in range(4):
            produce_many(clients[0], topic_name, 30, partition=partition)
        root = str(data_dir)

        def all_trimmed() -> bool:
            return all(
                DeltaPartitionLog.open(paths.partition_table_uri(root, topic_name, p))
                .bounds()
                .log_start_offset
                > 0
                for p in range(4)
            )

        assert wait_for(all_trimmed)
        runs = [c.get(f"{V3}/maintenance").json()["runs"] for c in clients]
        ran_on = {
            partition: {
                r["node_id"]
                for node_runs in runs
                for r in node_runs
                if r["topic"] == topic_name and r["partition"] == partition
            }
            for partition in range(4)
        }
        expected = {p: {preferred_node([0, 1], topic_name, p)} for p in range(4)}
        assert ran_on == expected  # one node each: the one leadership prefers too
        for client in clients:
            client.close()
    finally:
        for node in nodes:
            node.stop()


def test_jobs_schedule_runs_every_job_until_stopped(tmp_path, topic_name):
    """`lakelog jobs schedule` without a gateway: each job runs, and again on its interval."""
    root = str(tmp_path / "data")
    from storage_layout.meta.catalog import TopicCatalog
    from storage_layout.records import NewRecord
    from storage_layout.topic_config import TopicConfig

    config = TopicConfig(retention_ms=1, segment_bytes=14)
    TopicCatalog(root).create_topic(topic_name, 1, config)
    log = DeltaPartitionLog.open(paths.partition_table_uri(root, topic_name, 0))
    for index in range(5):
        log.append([NewRecord(None, b"v%d" % index)], config=config)
    time.sleep(0.05)
    lines: list[str] = []
    stop = threading.Event()
    settings = Settings(
        retention_interval_ms=200,
        compact_keys_interval_ms=200,
        optimize_files_interval_ms=200,
        vacuum_interval_ms=200,
    )
    worker = threading.Thread(
        target=run_schedule,
        args=(settings, JobRequest(job="retention", root=root)),
        kwargs={"stop": stop, "out": lines.append},
    )
    worker.start()
    time.sleep(1.5)
    stop.set()
    worker.join(10)
    assert not worker.is_alive()
    for job in ("retention", "compact-keys", "optimize-files", "vacuum"):
        assert sum(line.startswith(f"{job}: 1 partitions") for line in lines) >= 2, (job, lines)
    reopened = DeltaPartitionLog.open(paths.partition_table_uri(root, topic_name, 0))
    assert reopened.bounds().log_start_offset > 0  # retention removed the closed segments
