"""A storage root written by an earlier lakelog (tests/compat/make_storage_root.py, run with
the code of commit 50942ea, before the "one node, one path" redesign) is read and appended to
by this code: every partition table and `_meta` table, through the storage layer and through a
gateway process. The format must not change under a refactor; this is where it would show."""

from __future__ import annotations

import base64
import json
import tarfile
from pathlib import Path

import httpx
import pytest

from storage_layout import paths
from storage_layout.log import DeltaPartitionLog
from storage_layout.meta.acls import AclBinding, AclStore
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.meta.principals import PrincipalStore
from tests.gateway_process import start_gateway

pytestmark = pytest.mark.gateway

FIXTURE = Path(__file__).parent / "storage-root-50942ea.tar.gz"
V3 = "/v3/clusters/lakelog"
# The archive's producers last wrote when it was made: with Kafka's one-day producer id
# expiration they would be forgotten a day later, and the retry check below would fail by the
# calendar, not by a format change. Ten years keeps them.
FROZEN_IN_TIME = {"LAKELOG_PRODUCER_ID_EXPIRATION_MS": str(10 * 365 * 86_400_000)}
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
V2 = "application/vnd.kafka.v2+json"


@pytest.fixture
def root(tmp_path) -> Path:
    root = tmp_path / "root"
    with tarfile.open(FIXTURE) as archive:
        archive.extractall(root, filter="data")
    return root


@pytest.fixture
def manifest(root) -> dict:
    return json.loads((root / "compat-manifest.json").read_text())


def values(http: httpx.Client, topic: str, partition: int, **params) -> list[str]:
    answer = http.get(
        f"/topics/{topic}/partitions/{partition}/records",
        params={"offset": 0, **params},
        headers={"Accept": BINARY_V2},
    )
    assert answer.status_code == 200, answer.text
    return [base64.b64decode(r["value"]).decode() for r in answer.json()]


def committed(http: httpx.Client, group: str) -> dict[tuple[str, int], int]:
    offsets = http.get(f"/groups/{group}/offsets").json()["offsets"]
    return {(o["topic"], o["partition"]): o["offset"] for o in offsets}


def produce_v2(http: httpx.Client, path: str, body: dict) -> dict:
    answer = http.post(path, json=body, headers={"Content-Type": BINARY_V2})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_storage_layer_reads_and_appends_to_every_meta_table(root, manifest):
    topics = TopicCatalog(str(root)).topics()
    assert {name: t.partitions for name, t in topics.items()} == {"orders": 2, "accounts": 1}
    assert topics["accounts"].config.compacted
    assert topics["orders"].config.retention_ms == 604_800_000

    principals = PrincipalStore(str(root))
    key_id, secret = manifest["token"].split(".", 1)
    assert principals.api_key(key_id).matches(secret)
    principals.add_principal("User:bob")  # an append to the old table
    assert PrincipalStore(str(root)).principals() == ["User:alice", "User:bob"]

    acls = AclStore(str(root))
    [binding] = acls.bindings()
    assert (binding.principal, binding.operation, binding.resource_name) == (
        "User:alice",
        "READ",
        "orders",
    )
    acls.add(AclBinding.parse(principal="bob", operation="READ", permission="ALLOW",
                              resource_type="topic", resource_name="accounts"))  # fmt: skip
    assert len(AclStore(str(root)).bindings()) == 2

    uri = paths.partition_table_uri(str(root), "orders", 0)
    assert DeltaPartitionLog.open(uri).bounds().high_watermark == 8


def test_a_gateway_reads_and_appends_to_every_table_an_earlier_version_wrote(root, manifest):
    gateway = start_gateway(root, env=FROZEN_IN_TIME)
    try:
        with httpx.Client(base_url=gateway.url, timeout=30) as http:
            check_records(http)
            check_appends(http, manifest["producer"])
            check_transactions(http)
            check_group_offsets(http)
    finally:
        gateway.stop()
    uri = paths.partition_table_uri(str(root), "orders", 0)
    assert DeltaPartitionLog.open(uri).bounds().high_watermark == 9


def check_records(http: httpx.Client) -> None:
    assert values(http, "orders", 0) == ["v0", "v1", "v2", "v3", "v4", "p0", "p1", "p2"]
    assert values(http, "orders", 1, **{"isolation.level": "read_committed"}) == ["c0", "c1"]
    assert values(http, "orders", 1, **{"isolation.level": "read_uncommitted"}) == [
        "c0",
        "c1",
        "a0",
    ]
    assert values(http, "accounts", 0) == ["1", "1", "2"]


def check_appends(http: httpx.Client, producer: dict) -> None:
    """The old producer state is in force (a retry is not written twice), offsets go on from
    the old high watermark, and new producer ids never reuse an old one."""
    retry = {
        "records": [{"value": base64.b64encode(f"p{i}".encode()).decode()} for i in range(3)],
        "producer_id": producer["producer_id"],
        "producer_epoch": producer["producer_epoch"],
        "base_sequence": 0,
    }
    offsets = produce_v2(http, "/topics/orders/partitions/0", retry)["offsets"]
    assert [o["offset"] for o in offsets] == [5, 6, 7]  # acknowledged with the first offsets
    fresh = {"records": [{"value": base64.b64encode(b"new").decode()}]}
    assert produce_v2(http, "/topics/orders/partitions/0", fresh)["offsets"][0]["offset"] == 8
    old_ids = {producer["producer_id"]} | {
        http.get(f"{V3}/transactions/{tid}").json()["producer_id"] for tid in ("etl", "etl-2")
    }
    new_id = http.post(f"{V3}/producers", json={}).json()["producer_id"]
    assert new_id not in old_ids and new_id > max(old_ids)


def check_transactions(http: httpx.Client) -> None:
    states = {tid: http.get(f"{V3}/transactions/{tid}").json() for tid in ("etl", "etl-2")}
    assert states["etl"]["state"] == "CompleteCommit"
    assert states["etl-2"]["state"] == "CompleteAbort"
    begun = http.post(f"{V3}/transactions/etl/begin").json()
    assert begun["producer_id"] == states["etl"]["producer_id"]
    assert begun["producer_epoch"] > states["etl"]["producer_epoch"]
    ids = {"producer_id": begun["producer_id"], "producer_epoch": begun["producer_epoch"]}
    assert http.post(f"{V3}/transactions/etl/abort", json=ids).status_code == 200


def check_group_offsets(http: httpx.Client) -> None:
    # v2 commits the offset consumed (5) as the next to read (6), as Confluent's REST Proxy
    assert committed(http, "billing") == {("orders", 0): 6, ("orders", 1): 1}
    base = "/consumers/billing"
    created = http.post(base, json={"name": "c2", "format": "binary"}, headers={"Content-Type": V2})
    assert created.status_code == 200, created.text
    offsets = {"offsets": [{"topic": "orders", "partition": 0, "offset": 8}]}
    answer = http.post(f"{base}/instances/c2/offsets", json=offsets, headers={"Content-Type": V2})
    assert answer.status_code in (200, 204), answer.text
    http.delete(f"{base}/instances/c2")
    assert committed(http, "billing") == {("orders", 0): 9, ("orders", 1): 1}
