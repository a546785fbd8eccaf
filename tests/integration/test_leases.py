"""Jobs and tools commit under the partition's lease (FORMAT.md §7), next to a live gateway."""

from __future__ import annotations

import time

import httpx
import pytest
from deltalake import DeltaTable

from storage_layout.cluster.leases import JOB_NODE_ID_MIN, partition_lease
from storage_layout.paths import partition_table_uri
from storage_layout.records import NewRecord
from storage_layout.topic_config import TopicConfig
from tests.conftest import BINARY_V2
from tests.gateway_process import start_gateway
from tests.integration.helpers import b64

# The gateway counts a node dead after LAKELOG_LEASE_MS without a renewal, and a job renews
# every 500 ms (JOB_HEARTBEAT_MS): with 1.5 s, a loaded machine (the full suite on 2 cores)
# once starved the job's heartbeat that long, the gateway took the partition back, and the
# job's append was refused as deposed. Nothing here waits for a lease to expire.
ENV = {"LAKELOG_LEASE_MS": "4000", "LAKELOG_HEARTBEAT_MS": "150"}


@pytest.fixture
def lease_gateway(tmp_path):
    gateway = start_gateway(tmp_path / "data", env=ENV)
    yield gateway
    gateway.stop()


def produce(url: str, value: bytes) -> httpx.Response:
    body = {"records": [{"value": b64(value), "partition": 0}]}
    return httpx.post(
        f"{url}/topics/leased", json=body, headers={"Content-Type": BINARY_V2}, timeout=10
    )


def produce_until_ok(url: str, value: bytes, timeout_s: float = 10.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = produce(url, value)
        if response.status_code == 200 and response.json()["offsets"][0]["offset"] is not None:
            return response.json()["offsets"][0]["offset"]
        time.sleep(0.05)
    raise AssertionError(f"no successful produce within {timeout_s}s: {response.text}")


def test_job_lease_fences_the_gateway_and_hands_back(lease_gateway):
    """While a job holds the lease the gateway cannot commit (retriable error); the job's own
    appends continue the offsets; after the job the gateway resumes, offsets dense."""
    url = lease_gateway.url
    body = {"topic_name": "leased", "partitions_count": 1}
    assert httpx.post(f"{url}/v3/clusters/lakelog/topics", json=body).status_code == 201
    assert produce_until_ok(url, b"before") == 0
    root = str(lease_gateway.data_dir)
    with partition_lease(root, "leased", 0, node_id=JOB_NODE_ID_MIN + 1) as log:
        during = produce(url, b"during")
        assert during.status_code == 503 or during.json()["offsets"][0]["offset"] is None
        job = log.append([NewRecord(None, b"by-job")], config=TopicConfig())
        assert job.base_offset == 1
    assert produce_until_ok(url, b"after") == 2
    table = DeltaTable(partition_table_uri(root, "leased", 0)).to_pyarrow_table()
    rows = sorted(
        zip(table.column("offset").to_pylist(), table.column("value").to_pylist(), strict=True)
    )
    assert rows == [(0, b"before"), (1, b"by-job"), (2, b"after")]


def test_gateway_node_ids_are_refused_for_jobs(tmp_path):
    """A job cannot borrow a gateway's node id (its appends would look like the gateway's)."""
    with pytest.raises(ValueError, match="job node ids"):
        with partition_lease(str(tmp_path), "t", 0, node_id=3):
            pass
