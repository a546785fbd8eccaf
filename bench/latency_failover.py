"""End-to-end latency, produce throughput with 1-3 nodes, and leader failover time, in one run.

Cases:

  (1) latency   one gateway, a fresh 1-partition topic per rate. Producer connections (one
                asyncio loop, bench/raw_http.py) send at a fixed pace (100 and 1000 records/s
                as 1-record requests, 1000 as 10-record, 10000 as 25-record requests); each
                value starts with time.monotonic_ns() taken just before the POST
                (CLOCK_MONOTONIC, same machine). One consumer connection long-polls
                GET /topics/{t}/partitions/0/records?offset=next&timeout=1000 and records
                receive time - send time per record. p50/p99/max and the achieved send rate.
  (2) nodes     1, 2 and 3 gateway nodes on one storage root (LAKELOG_LEASE_MS=3000,
                LAKELOG_HEARTBEAT_MS=300), a 6-partition topic, 8 client threads sending
                100-record requests (one partition per request, round-robin) round-robin across
                the nodes' URLs (requests to a non-leader are forwarded). records/s, and how many
                partitions each node leads at the end.
  (3) failover  2 nodes (same lease/heartbeat); find the leader of partition 0, SIGKILL it, then
                send a 1-record produce for partition 0 to the survivor every 20 ms until one
                succeeds. Time from SIGKILL to that success; repeated with a fresh root.

Usage: .venv/bin/python bench/latency_failover.py [--quick] [--tmp-dir DIR]
Progress goes to stderr, markdown tables to stdout. About 3 minutes (--quick about 1.5).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import math
import os
import shlex
import shutil
import signal
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.produce_fetch import machine_info, report_header  # noqa: E402
from bench.raw_http import RawConnection, RawResponse  # noqa: E402
from conf.settings import load_settings  # noqa: E402
from tests.gateway_process import GatewayProcess, start_gateway  # noqa: E402

PRODUCE_TYPE = "application/vnd.kafka.binary.v2+json"
CLUSTER = "lakelog"
VALUE_BYTES = 100
# (records/s, records per request): 1 000/s both unbatched and as a batching client would send it
LATENCY_RATES = ((100, 1), (1000, 1), (1000, 10), (10000, 25))
LATENCY_GOAL_RATE, LATENCY_GOAL_P99_MS = 1000, 50.0
RATE_REACHED = 0.95  # achieved/target below this: "target not reached"
NODE_COUNTS = (1, 2, 3)
NODE_PARTITIONS = 6
NODE_THREADS = 8
NODE_BATCH = 100
CLUSTER_ENV = {"LAKELOG_LEASE_MS": "3000", "LAKELOG_HEARTBEAT_MS": "300"}
FAILOVER_REPEATS = 3
FAILOVER_INTERVAL_S = 0.020
FAILOVER_GIVE_UP_S = 60.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Cleanup:
    """Every gateway started, so all of them are stopped even on errors."""

    def __init__(self) -> None:
        self.gateways: list[GatewayProcess] = []

    def start(self, data_dir: Path, env: dict[str, str] | None = None) -> GatewayProcess:
        gateway = start_gateway(data_dir, env=env)
        self.gateways.append(gateway)
        return gateway

    def stop_all(self) -> None:
        for gateway in self.gateways:
            try:
                if gateway.process.poll() is None:
                    gateway.stop()
            except Exception as error:  # keep stopping the others
                log(f"stopping pid {gateway.process.pid}: {error!r}")
                gateway.process.kill()
        self.gateways.clear()


def create_topic(url: str, topic: str, partitions: int) -> None:
    body = {"topic_name": topic, "partitions_count": partitions}
    response = httpx.post(f"{url}/v3/clusters/{CLUSTER}/topics", json=body, timeout=60)
    if response.status_code != 201:
        raise RuntimeError(f"create topic {topic}: HTTP {response.status_code} {response.text}")


def end_offset(url: str, topic: str, partition: int) -> int:
    response = httpx.get(f"{url}/topics/{topic}/partitions/{partition}/offsets", timeout=60)
    response.raise_for_status()
    return response.json()["end_offset"]


def leaders(url: str, topic: str) -> dict[int, object]:
    response = httpx.get(f"{url}/topics/{topic}/partitions", timeout=30)
    response.raise_for_status()
    return {p["partition"]: p["leader"] for p in response.json()}


def percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


def acked(response: httpx.Response) -> bool:
    if response.status_code != 200:
        return False
    offsets = orjson.loads(response.content)["offsets"]
    return all(entry.get("error_code") is None for entry in offsets)


# ---- (1) end-to-end latency ------------------------------------------------------------------


_PAD = b"x" * (VALUE_BYTES - 8)


def latency_body(count: int) -> bytes:
    value = base64.b64encode(struct.pack(">q", time.monotonic_ns()) + _PAD).decode()
    return orjson.dumps({"records": [{"value": value}] * count})


@dataclass
class LatencyResult:
    rate: int
    batch: int
    threads: int
    seconds: float
    sent: int = 0
    received: int = 0
    errors: int = 0
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def achieved(self) -> float:
        return self.sent / self.seconds


def bench_latency(url: str, rate: int, batch: int, seconds: float) -> LatencyResult:
    topic = f"latency-{rate}-{batch}"
    create_topic(url, topic, 1)
    with httpx.Client(base_url=url, timeout=30) as client:  # warm the partition up
        for _ in range(3):
            response = client.post(
                f"/topics/{topic}", content=latency_body(1), headers={"Content-Type": PRODUCE_TYPE}
            )
            if not acked(response):
                raise RuntimeError(f"warm-up produce: HTTP {response.status_code} {response.text}")
    start_offset = end_offset(url, topic, 0)
    # in flight = request rate x request latency; allow ~100 ms of latency per request
    connections = max(2, min(48, math.ceil(rate / batch * 0.1)))
    result = LatencyResult(rate, batch, connections, seconds)
    asyncio.run(_latency_run(url, topic, start_offset, result))
    if result.received < result.sent:
        raise RuntimeError(f"latency {rate}/s: received {result.received} of {result.sent}")
    result.latencies_ms.sort()
    return result


async def _latency_run(url: str, topic: str, start_offset: int, result: LatencyResult) -> None:
    """Producers on `result.threads` connections send at a fixed pace (slot i is due at
    start + i x interval); one consumer long-polls. All on one event loop (bench/raw_http.py)."""
    interval_s = result.batch / result.rate
    start = time.monotonic() + 0.2
    deadline = start + result.seconds
    slots = itertools.count()
    producers_done = asyncio.Event()

    async def produce() -> None:
        connection = await RawConnection.open(url)
        try:
            while (due := start + next(slots) * interval_s) < deadline:
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                response = await connection.request(
                    "POST", f"/topics/{topic}", latency_body(result.batch), PRODUCE_HEADERS
                )
                if _acked_raw(response):
                    result.sent += result.batch
                else:
                    result.errors += 1
        finally:
            await connection.close()

    async def consume() -> None:
        offset = start_offset
        connection = await RawConnection.open(url)
        try:
            while not (producers_done.is_set() and result.received >= result.sent):
                target = f"/topics/{topic}/partitions/0/records?offset={offset}&timeout=1000"
                response = await connection.request("GET", target, headers=FETCH_HEADERS)
                now = time.monotonic_ns()
                if response.status != 200:
                    raise RuntimeError(f"fetch: HTTP {response.status} {response.body[:200]!r}")
                records = orjson.loads(response.body)
                for record in records:
                    sent_ns = struct.unpack(">q", base64.b64decode(record["value"])[:8])[0]
                    result.latencies_ms.append((now - sent_ns) / 1e6)
                if records:
                    offset = records[-1]["offset"] + 1
                    result.received += len(records)
        finally:
            await connection.close()

    consumer = asyncio.create_task(consume())
    await asyncio.gather(*(produce() for _ in range(result.threads)))
    result.seconds = max(result.seconds, time.monotonic() - start)  # the last sends may end late
    producers_done.set()
    await asyncio.wait_for(consumer, 15)


PRODUCE_HEADERS = {"Content-Type": PRODUCE_TYPE}
FETCH_HEADERS = {"Accept": PRODUCE_TYPE}


def _acked_raw(response: RawResponse) -> bool:
    if response.status != 200:
        return False
    return all(entry.get("error_code") is None for entry in orjson.loads(response.body)["offsets"])


# ---- (2) produce throughput with 1-3 nodes ---------------------------------------------------


@dataclass
class NodesResult:
    nodes: int
    seconds: float
    records: int
    errors: int
    leaders_per_node: dict[str, int]
    verified: bool

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds


def nodes_body(partition: int) -> bytes:
    value = base64.b64encode(os.urandom(VALUE_BYTES)).decode()
    records = [{"value": value, "partition": partition} for _ in range(NODE_BATCH)]
    return orjson.dumps({"records": records})


def bench_nodes(cleanup: Cleanup, root: Path, count: int, seconds: float) -> NodesResult:
    nodes = [
        cleanup.start(root / "data", {**CLUSTER_ENV, "LAKELOG_NODE_ID": str(n)})
        for n in range(count)
    ]
    urls = [node.url for node in nodes]
    time.sleep(0.7)  # a couple of heartbeats, so every node sees the others alive
    topic = "spread"
    create_topic(urls[0], topic, NODE_PARTITIONS)
    bodies = [nodes_body(p) for p in range(NODE_PARTITIONS)]
    for partition in range(NODE_PARTITIONS):  # warm-up: every partition gets a leader
        response = httpx.post(
            f"{urls[partition % count]}/topics/{topic}",
            content=bodies[partition],
            headers={"Content-Type": PRODUCE_TYPE},
            timeout=60,
        )
        if not acked(response):
            raise RuntimeError(f"warm-up produce: HTTP {response.status_code} {response.text}")
    warm_records = NODE_PARTITIONS * NODE_BATCH
    lock = threading.Lock()
    totals = {"records": 0, "errors": 0}
    failures: list[BaseException] = []
    deadline = time.monotonic() + seconds
    start = time.monotonic()

    def client_thread(index: int) -> None:
        records = errors = 0
        try:
            with httpx.Client(timeout=60) as client:
                for sent in itertools.count():
                    if time.monotonic() >= deadline:
                        break
                    url = urls[(index + sent) % count]
                    partition = (index * 5 + sent) % NODE_PARTITIONS
                    response = client.post(
                        f"{url}/topics/{topic}",
                        content=bodies[partition],
                        headers={"Content-Type": PRODUCE_TYPE},
                    )
                    if acked(response):
                        records += NODE_BATCH
                    else:
                        errors += 1
        except BaseException as error:
            failures.append(error)
        with lock:
            totals["records"] += records
            totals["errors"] += errors

    threads = [threading.Thread(target=client_thread, args=(i,)) for i in range(NODE_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - start
    if failures:
        raise RuntimeError(f"{count} nodes: client failed: {failures[0]!r}") from failures[0]
    stored = sum(end_offset(urls[0], topic, p) for p in range(NODE_PARTITIONS))
    led = Counter(str(leader) for leader in leaders(urls[0], topic).values())
    for node in nodes:
        node.stop()
    return NodesResult(
        count,
        elapsed,
        totals["records"],
        totals["errors"],
        {str(n): led.get(str(n), 0) for n in range(count)},
        stored == totals["records"] + warm_records,
    )


# ---- (3) failover ----------------------------------------------------------------------------


def bench_failover(cleanup: Cleanup, root: Path) -> tuple[float, int]:
    """Seconds from SIGKILL of partition 0's leader to the first successful produce through the
    survivor, and the attempts it took."""
    nodes = {
        str(n): cleanup.start(root / "data", {**CLUSTER_ENV, "LAKELOG_NODE_ID": str(n)})
        for n in range(2)
    }
    time.sleep(0.7)
    first = nodes["0"].url
    create_topic(first, "failover", 1)
    body = orjson.dumps({"records": [{"value": base64.b64encode(b"x").decode(), "partition": 0}]})
    response = httpx.post(
        f"{first}/topics/failover", content=body, headers={"Content-Type": PRODUCE_TYPE}, timeout=60
    )
    if not acked(response):
        raise RuntimeError(f"first produce: HTTP {response.status_code} {response.text}")
    time.sleep(1.0)  # both nodes agree on the leader
    leader = str(leaders(nodes["1"].url, "failover")[0])
    victim = nodes[leader]
    survivor = nodes["1" if leader == "0" else "0"]
    attempts = 0
    with httpx.Client(base_url=survivor.url, timeout=10) as client:
        victim.process.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        victim.process.wait()
        while True:
            attempt_at = time.monotonic()
            if attempt_at - killed_at > FAILOVER_GIVE_UP_S:
                raise RuntimeError(f"no successful produce {FAILOVER_GIVE_UP_S}s after SIGKILL")
            attempts += 1
            try:
                ok = acked(
                    client.post(
                        "/topics/failover", content=body, headers={"Content-Type": PRODUCE_TYPE}
                    )
                )
            except httpx.HTTPError:
                ok = False
            if ok:
                took = time.monotonic() - killed_at
                break
            time.sleep(max(0.0, attempt_at + FAILOVER_INTERVAL_S - time.monotonic()))
    survivor.stop()
    return took, attempts


# ---- report ----------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def render_latency(results: list[LatencyResult]) -> str:
    lines = [
        "| target records/s | records/request | producer connections | achieved records/s "
        "| records | p50 ms | p99 ms | max ms | errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        note = "" if r.achieved >= RATE_REACHED * r.rate else " (target NOT reached)"
        lat = r.latencies_ms
        lines.append(
            f"| {r.rate:,} | {r.batch} | {r.threads} | {r.achieved:,.0f}{note} | {len(lat):,} "
            f"| {_ms(percentile(lat, 50))} | {_ms(percentile(lat, 99))} "
            f"| {_ms(lat[-1] if lat else None)} | {r.errors} |"
        )
    return "\n".join(lines)


def render_nodes(results: list[NodesResult]) -> str:
    lines = [
        "| nodes | records/s | vs 1 node | failed requests | partitions led per node (id: n) "
        "| stored == acked |",
        "|---|---|---|---|---|---|",
    ]
    base = results[0].records_per_s if results else 0
    for r in results:
        led = ", ".join(f"{node}: {n}" for node, n in r.leaders_per_node.items())
        ratio = f"{r.records_per_s / base:.2f}x" if base else "-"
        lines.append(
            f"| {r.nodes} | {r.records_per_s:,.0f} | {ratio} | {r.errors} | {led} "
            f"| {'yes' if r.verified else 'NO'} |"
        )
    return "\n".join(lines)


def render_failover(runs: list[tuple[float, int]]) -> str:
    lines = ["| run | SIGKILL -> first successful produce (s) | attempts |", "|---|---|---|"]
    for i, (took, attempts) in enumerate(runs, 1):
        lines.append(f"| {i} | {took:.2f} | {attempts} |")
    if runs:
        lines.append(f"| median | {statistics.median(t for t, _ in runs):.2f} | |")
    return "\n".join(lines)


# ---- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 s per latency rate and node case")
    parser.add_argument("--latency-seconds", type=float, help="per rate (default 15, quick 5)")
    parser.add_argument("--nodes-seconds", type=float, help="per node count (default 10, quick 5)")
    parser.add_argument("--tmp-dir", type=Path, help="parent of the temp dir (default: $TMPDIR)")
    return parser.parse_args(argv)


def _raise_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    latency_s = args.latency_seconds or (5.0 if args.quick else 15.0)
    nodes_s = args.nodes_seconds or (5.0 if args.quick else 10.0)
    command = shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    tmp_root = Path(tempfile.mkdtemp(prefix="lakelog-latfail-", dir=args.tmp_dir))
    machine = machine_info(tmp_root)
    settings = load_settings()
    load_before = [round(x, 2) for x in os.getloadavg()]
    log(f"command: {command}; temp dir {tmp_root}")
    cleanup = Cleanup()
    latency: list[LatencyResult] = []
    nodes: list[NodesResult] = []
    failover: list[tuple[float, int]] = []
    bench_start = time.monotonic()
    try:
        gateway = cleanup.start(tmp_root / "latency" / "data")
        for rate, batch in LATENCY_RATES:
            log(f"latency: {rate} records/s, {batch} record(s)/request, {latency_s:g}s ...")
            result = bench_latency(gateway.url, rate, batch, latency_s)
            latency.append(result)
            lat = result.latencies_ms
            log(
                f"  achieved {result.achieved:,.0f} records/s; p50 {_ms(percentile(lat, 50))} ms"
                f", p99 {_ms(percentile(lat, 99))} ms, max {_ms(lat[-1] if lat else None)} ms"
            )
        cleanup.stop_all()
        for count in NODE_COUNTS:
            log(f"nodes: {count} node(s) on one root, {nodes_s:g}s ...")
            result = bench_nodes(cleanup, tmp_root / f"nodes-{count}", count, nodes_s)
            nodes.append(result)
            cleanup.stop_all()
            log(
                f"  {result.records_per_s:,.0f} records/s, {result.errors} failed requests, "
                f"leaders {result.leaders_per_node}, stored == acked: {result.verified}"
            )
        for run in range(FAILOVER_REPEATS):
            log(f"failover run {run + 1}/{FAILOVER_REPEATS} ...")
            failover.append(bench_failover(cleanup, tmp_root / f"failover-{run}"))
            cleanup.stop_all()
            log(f"  {failover[-1][0]:.2f}s after SIGKILL, {failover[-1][1]} attempts")
    except BaseException:
        for gateway in cleanup.gateways:
            try:
                tail = "\n".join(gateway.log_text().splitlines()[-20:])
                log(f"gateway pid {gateway.process.pid} log (last 20 lines):\n{tail}")
            except OSError:
                pass
        raise
    finally:
        cleanup.stop_all()
        shutil.rmtree(tmp_root, ignore_errors=True)
    total_s = time.monotonic() - bench_start
    load_after = [round(x, 2) for x in os.getloadavg()]

    header = report_header(
        machine,
        command=command,
        code_details=(
            f"linger_ms {settings.linger_ms}; cluster env {CLUSTER_ENV}; total {total_s:.0f}s"
        ),
        load_before=load_before,
        load_after=load_after,
    )
    print("\n".join(header))
    print()
    print(f"### End-to-end latency, produce -> long-poll fetch ({latency_s:g}s per rate)")
    print()
    print(render_latency(latency))
    for goal in (r for r in latency if r.rate == LATENCY_GOAL_RATE):
        p99 = percentile(goal.latencies_ms, 99)
        reached = goal.achieved >= RATE_REACHED * goal.rate
        holds = p99 is not None and p99 <= LATENCY_GOAL_P99_MS and reached
        print()
        print(
            f"goal (p99 <= {LATENCY_GOAL_P99_MS:g} ms at {LATENCY_GOAL_RATE} records/s), "
            f"{goal.batch}-record requests: p99 {_ms(p99)} ms at {goal.achieved:,.0f} "
            f"records/s -> {'HOLDS' if holds else 'DOES NOT HOLD'}"
        )
    print()
    print(
        f"### Produce throughput, nodes on one root ({NODE_PARTITIONS} partitions, "
        f"{NODE_THREADS} client threads, {NODE_BATCH} records/request, {nodes_s:g}s each)"
    )
    print()
    print(render_nodes(nodes))
    print()
    print("### Failover (2 nodes, SIGKILL of partition 0's leader, produce every 20 ms)")
    print()
    print(render_failover(failover))
    return 0


if __name__ == "__main__":
    sys.exit(main())
