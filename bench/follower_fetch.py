"""Fetch throughput with 1, 2 and 3 gateway nodes on one S3 root (follower fetching, KIP-392).

    .venv/bin/python bench/follower_fetch.py [--duration-s 15] [--store s3|local]

A topic of 6 partitions is filled once (50,000 records of 100 bytes each); then for 1, 2 and 3
nodes on the same root, 12 client tasks fetch for `--duration-s` seconds, each request to the
next node in turn, from random offsets older than the leaders' in-memory tails (reads of
Parquet from the store), 256 KiB per request. Reported: records/s and MB/s, and how many
answers a follower served from the table (the `x-lakelog-served-by` header). Every node, every
client and the S3 server share this machine's cores: the figures show whether reads spread over
nodes, not what separate machines would give.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


from bench.produce_fetch import machine_info, report_header  # noqa: E402
from bench.storage_root import bench_root  # noqa: E402
from tests.gateway_process import GatewayProcess, start_gateway  # noqa: E402

TOPIC = "reads"
PARTITIONS = 6
RECORDS_PER_PARTITION = 50_000
VALUE_BYTES = 100
CLIENTS = 12
FETCH_BYTES = 256 * 1024
TAIL_RECORDS = 20_000  # the gateway's default tail: reads below it come from the files
BINARY = "application/vnd.kafka.binary.v2+json"
LOAD_BEFORE: tuple[float, float, float] = (0.0, 0.0, 0.0)
CLUSTER_ENV = {"LAKELOG_LEASE_MS": "6000", "LAKELOG_HEARTBEAT_MS": "1000"}


def fill(url: str) -> None:
    value = base64.b64encode(b"x" * VALUE_BYTES).decode()
    batch = {"records": [{"value": value} for _ in range(1000)]}
    with httpx.Client(base_url=url, timeout=60) as client:
        body = {"topic_name": TOPIC, "partitions_count": PARTITIONS}
        client.post("/v3/clusters/lakelog/topics", json=body).raise_for_status()
        for partition in range(PARTITIONS):
            for _ in range(RECORDS_PER_PARTITION // 1000):
                response = client.post(
                    f"/topics/{TOPIC}/partitions/{partition}",
                    json=batch,
                    headers={"Content-Type": BINARY},
                )
                response.raise_for_status()


async def fetch_load(nodes: list[GatewayProcess], duration_s: float) -> dict[str, float]:
    records = payload = answers = by_follower = 0
    deadline = time.monotonic() + duration_s
    oldest_tail = RECORDS_PER_PARTITION - TAIL_RECORDS

    async def client_task(index: int, client: httpx.AsyncClient) -> None:
        nonlocal records, payload, answers, by_follower
        rng = random.Random(index)
        turn = index
        while time.monotonic() < deadline:
            node = nodes[turn % len(nodes)]
            partition = rng.randrange(PARTITIONS)
            turn += 1
            response = await client.get(
                f"{node.url}/topics/{TOPIC}/partitions/{partition}/records",
                params={"offset": rng.randrange(oldest_tail), "max_bytes": FETCH_BYTES},
                headers={"Accept": BINARY},
            )
            response.raise_for_status()
            got = response.json()
            records += len(got)
            payload += len(got) * VALUE_BYTES
            answers += 1
            if response.headers.get("x-lakelog-served-by") != str(_LEADERS[partition]):
                by_follower += 1

    limits = httpx.Limits(max_connections=CLIENTS * 3)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        started = time.monotonic()
        await asyncio.gather(*(client_task(i, client) for i in range(CLIENTS)))
        elapsed = time.monotonic() - started
    return {
        "records_per_s": records / elapsed,
        "mb_per_s": payload / elapsed / 1e6,
        "answers": answers,
        "follower_share": by_follower / max(answers, 1),
    }


_LEADERS: dict[int, int] = {}


def learn_leaders(url: str) -> None:
    partitions = httpx.get(f"{url}/topics/{TOPIC}/partitions", timeout=30).json()
    _LEADERS.update({p["partition"]: p["leader"] for p in partitions})


def run(store: str, duration_s: float, work: Path) -> list[tuple[int, dict[str, float]]]:
    with bench_root(store, work) as where:
        env, root = where.env, where.root
        filler = start_gateway(work / "data", env={**env, **CLUSTER_ENV}, root=root)
        fill(filler.url)
        filler.stop()
        print(f"filled {PARTITIONS} x {RECORDS_PER_PARTITION:,} records", flush=True)
        results = []
        for count in (1, 2, 3):
            nodes = [
                start_gateway(
                    work / "data",
                    env={**env, **CLUSTER_ENV, "LAKELOG_NODE_ID": str(n)},
                    root=root,
                )
                for n in range(count)
            ]
            try:
                asyncio.run(_warm_up(nodes))
                learn_leaders(nodes[0].url)
                figures = asyncio.run(fetch_load(nodes, duration_s))
            finally:
                for node in nodes:
                    node.stop()
            print(f"{count} node(s): {figures['records_per_s']:,.0f} records/s", flush=True)
            results.append((count, figures))
        return results


async def _warm_up(nodes: list[GatewayProcess]) -> None:
    """Let leadership settle: every partition read once through every node."""
    async with httpx.AsyncClient(timeout=60) as client:
        for _ in range(3):
            for node in nodes:
                for partition in range(PARTITIONS):
                    await client.get(
                        f"{node.url}/topics/{TOPIC}/partitions/{partition}/records",
                        params={"offset": 0, "max_bytes": 1024},
                    )
            await asyncio.sleep(1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=15.0)
    parser.add_argument("--store", choices=("s3", "local"), default="s3")
    args = parser.parse_args()
    global LOAD_BEFORE
    LOAD_BEFORE = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="lakelog-follower-") as work:
        results = run(args.store, args.duration_s, Path(work))
    base = results[0][1]["records_per_s"]
    command = f".venv/bin/python bench/follower_fetch.py --store {args.store} " + (
        f"--duration-s {args.duration_s:g}"
    )
    print()
    for line in report_header(
        machine_info(Path(tempfile.gettempdir()), ("obstore",)),
        command=command,
        code_details=f"{PARTITIONS} partitions, {CLIENTS} clients, {FETCH_BYTES // 1024} KiB",
        load_before=LOAD_BEFORE,
        load_after=os.getloadavg(),
    ):
        print(line)
    print()
    print("| nodes | records/s | MB/s | vs 1 node | answers | served by a follower |")
    print("|---|---|---|---|---|---|")
    for count, figures in results:
        print(
            f"| {count} | {figures['records_per_s']:,.0f} | {figures['mb_per_s']:.1f} | "
            f"{figures['records_per_s'] / base:.2f}x | {figures['answers']:,} | "
            f"{figures['follower_share']:.0%} |"
        )


if __name__ == "__main__":
    main()
