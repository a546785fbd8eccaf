"""Many partitions per node: how long a restarted gateway takes until every one of N partitions
has taken its first produce, and what an open partition costs in memory.

    .venv/bin/python bench/many_partitions.py --partitions 1000 [--store s3]

Steps: a gateway on a fresh root (a local directory, or a bucket of a moto S3 server started
here) gets a topic of N partitions and one record per partition; it is stopped (SIGTERM) and
started again; then one record is produced to every partition at once (64 concurrent
requests). Reported: time from the restarted process's spawn until it answers, and from then
until every partition acknowledged its produce, and the node's CPU (utime + stime) over that
time; the gateway's RSS before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.produce_fetch import process_cpu_s  # noqa: E402
from bench.raw_http import RawConnection  # noqa: E402
from bench.storage_root import bench_root  # noqa: E402
from tests.gateway_process import start_gateway  # noqa: E402

TOPIC = "wide"
CONCURRENCY = 64
HEADERS = {"Content-Type": "application/vnd.kafka.binary.v2+json"}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def produce_everywhere(url: str, partitions: int, tag: str) -> tuple[float, int]:
    """One record to each partition (retrying 503s); seconds until all acked, retries.

    On keep-alive connections of bench/raw_http.py: httpx's pool scans every connection for
    every request, and with 64 of them the client spent 6 ms of CPU a request, on the cores
    the node runs on (it, not the node, set the pace)."""
    started = time.monotonic()
    retries = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for partition in range(partitions):
        queue.put_nowait(partition)
    value = base64.b64encode(tag.encode()).decode()

    async def worker() -> None:
        nonlocal retries
        connection = await RawConnection.open(url)
        try:
            while not queue.empty():
                partition = queue.get_nowait()
                body = {"records": [{"value": value, "partition": partition}]}
                while True:
                    response = await connection.request(
                        "POST", f"/topics/{TOPIC}", json.dumps(body).encode(), HEADERS
                    )
                    if response.status == 200:
                        break
                    if response.status != 503:
                        raise RuntimeError(f"partition {partition}: {response.body!r}")
                    retries += 1
                    await asyncio.sleep(0.05)
        finally:
            await connection.close()

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return time.monotonic() - started, retries


def run(partitions: int, store: str, work: Path) -> dict[str, float]:
    with bench_root(store, work) as where:
        env, root = where.env, where.root
        gateway = start_gateway(work / "data", env=env, root=root)
        body = {"topic_name": TOPIC, "partitions_count": partitions}
        response = httpx.post(f"{gateway.url}/v3/clusters/lakelog/topics", json=body, timeout=120)
        response.raise_for_status()
        first_s, _ = asyncio.run(produce_everywhere(gateway.url, partitions, "first"))
        print(f"[1/3] {partitions} partitions created and written once in {first_s:.1f} s")
        gateway.stop()
        spawned = time.monotonic()
        restarted = start_gateway(work / "data", env=env, root=root)
        ready_s = time.monotonic() - spawned
        before_mb = rss_mb(restarted.process.pid)
        print(f"[2/3] restarted; answering after {ready_s:.1f} s, RSS {before_mb:.0f} MB")
        cpu_before_s = process_cpu_s(restarted.process.pid)
        produce_s, retries = asyncio.run(produce_everywhere(restarted.url, partitions, "again"))
        take_cpu_ms = (process_cpu_s(restarted.process.pid) - cpu_before_s) * 1000 / partitions
        after_mb = rss_mb(restarted.process.pid)
        print(
            f"[3/3] every partition took a produce {produce_s:.2f} s after the restart, "
            f"{take_cpu_ms:.1f} ms of node CPU a partition"
        )
        restarted.stop()
        return {
            "ready_s": ready_s,
            "first_produce_all_s": produce_s,
            "retries": retries,
            "take_cpu_ms": take_cpu_ms,
            "rss_before_mb": before_mb,
            "rss_after_mb": after_mb,
            "kb_per_open_partition": (after_mb - before_mb) * 1024 / partitions,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--store", choices=("local", "s3"), default="local")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lakelog-wide-") as work:
        figures = run(args.partitions, args.store, Path(work))
    print(
        "\n| store | partitions | ready (s) | all first produces (s) | node CPU a partition (ms) "
        "| 503 retries | "
        "RSS before → after (MB) | per open partition (KB) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {args.store} | {args.partitions} | {figures['ready_s']:.1f} | "
        f"{figures['first_produce_all_s']:.2f} | {figures['take_cpu_ms']:.1f} | "
        f"{figures['retries']} | "
        f"{figures['rss_before_mb']:.0f} → {figures['rss_after_mb']:.0f} | "
        f"{figures['kb_per_open_partition']:.0f} |"
    )


if __name__ == "__main__":
    main()
