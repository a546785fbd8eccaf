"""Write the storage root that tests/compat/test_storage_root.py reads: every kind of table
lakelog keeps, written by the code of one commit, through its own CLI and a gateway process of
it. Run it with that commit's code first on the path, from its checkout:

    cd <checkout of the commit> && PYTHONPATH=$PWD .venv/bin/python \\
        <this repository>/tests/compat/make_storage_root.py /tmp/root
    tar -C /tmp/root -czf tests/compat/storage-root-<commit>.tar.gz .

What it writes (test_storage_root.py expects exactly this):
- topics `orders` (2 partitions, retention.ms set) and `accounts` (cleanup.policy=compact);
- orders/0: v0..v4 plain, then p0..p2 from an idempotent producer (sequences 0-2);
- orders/1: c0, c1 in a committed transaction (`etl`), a0 in an aborted one (`etl-2`);
- accounts/0: keys a=1, b=1, a=2;
- group `billing`: orders/0 at 6 (offset 5 consumed, committed by a v2 consumer instance),
  orders/1 at 1 (committed within `etl`);
- principal User:alice with an API key (printed to the manifest), an ACL READ on orders.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import httpx

from tests.gateway_process import start_gateway

V3 = "/v3/clusters/lakelog"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
V2 = "application/vnd.kafka.v2+json"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def cli(root: Path, *args: str) -> str:
    command = [sys.executable, "-m", "api.cli", *args, "--data-dir", str(root)]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


def security(root: Path) -> str:
    cli(root, "principals", "add", "User:alice")
    token = cli(root, "api-keys", "create", "--principal", "User:alice").split()[-1]
    cli(root, "acls", "add", "--allow-principal", "User:alice", "--operation", "READ",
        "--topic", "orders")  # fmt: skip
    return token


def topics(http: httpx.Client) -> None:
    for name, partitions, configs in (
        ("orders", 2, [{"name": "retention.ms", "value": "604800000"}]),
        ("accounts", 1, [{"name": "cleanup.policy", "value": "compact"}]),
    ):
        body = {"topic_name": name, "partitions_count": partitions, "configs": configs}
        assert http.post(f"{V3}/topics", json=body).status_code == 201


def produce(http: httpx.Client) -> dict:
    records = [{"value": b64(f"v{i}"), "partition": 0} for i in range(5)]
    ok(http.post("/topics/orders", json={"records": records}, headers={"Content-Type": BINARY_V2}))
    producer = ok(http.post(f"{V3}/producers", json={}))
    body = {
        "records": [{"value": b64(f"p{i}")} for i in range(3)],
        "producer_id": producer["producer_id"],
        "producer_epoch": producer["producer_epoch"],
        "base_sequence": 0,
    }
    ok(http.post("/topics/orders/partitions/0", json=body, headers={"Content-Type": BINARY_V2}))
    for key, value in (("a", "1"), ("b", "1"), ("a", "2")):
        record = {"key": b64(key), "value": b64(value)}
        ok(http.post("/topics/accounts", json={"records": [record]},
                     headers={"Content-Type": BINARY_V2}))  # fmt: skip
    return producer


def transaction(http: httpx.Client, transactional_id: str, values: list[str], *, commit: bool):
    path = f"{V3}/transactions/{transactional_id}"
    producer = ok(http.post(f"{path}/begin"))
    ids = {"producer_id": producer["producer_id"], "producer_epoch": producer["producer_epoch"]}
    for sequence, value in enumerate(values):
        record = {
            "partition_id": 1,
            "value": {"type": "STRING", "data": value},
            "transactional_id": transactional_id,
            "sequence": sequence,
            **ids,
        }
        ok(http.post(f"{V3}/topics/orders/records", json=record))
    if commit:
        offsets = [{"topic_name": "orders", "partition_id": 1, "offset": 1}]
        ok(http.post(f"{path}/consumer-groups/billing/offsets", json={**ids, "offsets": offsets}))
    ok(http.post(f"{path}/{'commit' if commit else 'abort'}", json=ids))


def consumer_offsets(http: httpx.Client) -> None:
    base = "/consumers/billing"
    ok(http.post(base, json={"name": "c1", "format": "binary"}, headers={"Content-Type": V2}))
    offsets = {"offsets": [{"topic": "orders", "partition": 0, "offset": 5}]}
    answer = http.post(f"{base}/instances/c1/offsets", json=offsets, headers={"Content-Type": V2})
    assert answer.status_code in (200, 204), answer.text
    http.delete(f"{base}/instances/c1")


def ok(answer: httpx.Response) -> dict:
    assert answer.status_code < 300, answer.text
    return answer.json() if answer.content else {}


def main(root: Path) -> None:
    root.mkdir(parents=True)
    token = security(root)
    gateway = start_gateway(root)
    try:
        with httpx.Client(base_url=gateway.url, timeout=30) as http:
            topics(http)
            producer = produce(http)
            transaction(http, "etl", ["c0", "c1"], commit=True)
            transaction(http, "etl-2", ["a0"], commit=False)
            consumer_offsets(http)
    finally:
        gateway.stop()
    manifest = {"token": token, "producer": producer}
    (root / "compat-manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
