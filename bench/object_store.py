"""lakelog on an object store with realistic latency: produce latency, throughput, fetch, store
requests and failover, against a local-disk baseline measured in the same run.

Setup: moto's S3 server on loopback (tests/s3_server.py) behind a latency proxy (this file, run
as a child process with --serve-proxy), or with `--backend memory` an in-memory S3 endpoint in
the proxy's own process (bench/memory_s3.py: moto costs ~15 ms a request on two busy cores,
more than the S3 Express profile itself). The gateway's AWS_ENDPOINT_URL points at the proxy.
The proxy reads each request whole, forwards it to moto (which closes every connection: one
upstream connection per request; the gateway's own connection to the proxy stays alive, as
with S3) or answers it from memory, and answers no earlier than `received + delay`, the delay
drawn per request from the profile (lognormal, given by median and p99; the backend's own
service time counts inside the delay, and a response goes when the backend answers if it is
slower). Headers (If-None-Match included) and the status (412 included) pass unchanged; only
`Connection` is rewritten. It counts requests by kind (GET, HEAD, PUT, POST, DELETE, LIST =
GET with ?list-type), by object category (Delta log JSON, Parquet, node records, ...) and by
status, and body bytes each way.

Profiles (median / p99 ms):
  s3-standard  PUT, POST 20 / 60; GET, HEAD, DELETE 15 / 45; LIST 20 / 60
  s3-express   every request 5 / 10
  none         no delay (moto alone, through the proxy)
"local" is the baseline: the same gateway on a local directory, the same client code.

Per store (a fresh bucket, or directory, each):
  idle       5 s with no traffic: the store requests of a live node (heartbeats).
  produce    POST /topics/{t} (binary v2, 100-byte values, 8-byte keys, acks default), a fresh
             1-partition topic per rate, open-loop: request i is sent at t0 + i/rate on an idle
             keep-alive connection (a new one is opened when none is idle, up to 512), so a slow
             answer does not slow the schedule. 100 and 1,000 records/s as 1-record requests,
             10,000 records/s as 10-record requests (1,000 requests/s: the gateway spends ~1 ms
             of CPU per request, BENCHMARKS.md, so 10,000 one-record requests/s cannot be served
             on 2 cores; the client (bench/raw_http.py, one asyncio loop) would not send them
             either). Latency = response - send; "sched p99" = response - scheduled time (adds
             any client-side lateness).
  max        8 connections, closed loop, 1,000 records per request, fresh topic.
  fetch      GET /topics/{t}/partitions/0/records (max_bytes 1 MiB, one consumer) on the max
             topic: the in-memory tail (its last 10,000 records, half of
             LAKELOG_TAIL_RECORDS_MAX, re-read until the time is up), then, after a gateway
             restart on the same root, from offset 0 (Parquet read from the store) until the
             high watermark or the time is up. Also from offset 0 of the 1,000 records/s topic
             (many small files).
  failover   two gateways on a fresh root (LAKELOG_NODE_ID 0/1, LAKELOG_LEASE_MS=3000,
             LAKELOG_HEARTBEAT_MS=300, and with --default-lease also the defaults), a 1-partition
             topic, one-record produces through the survivor every 20 ms (open loop); SIGKILL of
             partition 0's leader; time from the kill to the first acknowledged produce sent after
             it, and the produces that failed meanwhile.

Store requests per second are the proxy's counts over a run minus the idle rate times its length.

Usage: .venv/bin/python bench/object_store.py [--backend moto|memory] [--duration-s S]
           [--profiles a,b] [--no-local] [--default-lease] [--json out.json]
Progress goes to stderr, the Markdown report to stdout. About 8 minutes with the defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import httpx
import orjson

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.latency_failover import leaders  # noqa: E402
from bench.memory_s3 import MemoryS3  # noqa: E402
from bench.produce_fetch import machine_info, process_cpu_s, report_header, system_busy_cpu_s  # noqa: E402
from bench.raw_http import RawConnection, RawResponse  # noqa: E402
from tests.gateway_process import GatewayProcess, free_port, start_gateway  # noqa: E402
from tests.s3_server import REGION, S3Server, start_s3_server  # noqa: E402

PRODUCE_TYPE = "application/vnd.kafka.binary.v2+json"
CLUSTER = "lakelog"
VALUE_BYTES = 100
KEY_BYTES = 8
RECORD_BYTES = KEY_BYTES + VALUE_BYTES  # payload counted in MB (10**6 bytes)
DISTINCT_BODIES = 16
FETCH_MAX_BYTES = 1024 * 1024
HTTP_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 40.0

# (records/s, records per request) of the paced produce runs; 1,000 x10 is 100 requests/s of
# 10 records (issue 29's S3 goal: p99 <= 150 ms at S3 Standard latency)
RATES = ((100, 1), (1000, 1), (1000, 10), (10000, 10))
MAX_BATCH = 1000
MAX_CONNECTIONS = 8
POOL_MAX = 512  # open-loop client: most connections at once
POOL_WARM = 64
IDLE_S = 5.0
FETCH_S = 5.0
TAIL_READ = 10_000  # the tail fetch re-reads the last this many records (half the tail)
CLUSTER_ENV = {"LAKELOG_LEASE_MS": "3000", "LAKELOG_HEARTBEAT_MS": "300"}
FAILOVER_INTERVAL_S = 0.020
FAILOVER_BEFORE_KILL_S = 1.5
FAILOVER_AFTER_ACK_S = 1.0
FAILOVER_GIVE_UP_S = 60.0

GOAL_P99_MS = {"s3-standard": 150.0, "s3-express": 40.0}
GOAL_MAX_RATIO = 0.8

Z99 = 2.3263  # the standard normal's 99th percentile
PROFILES: dict[str, dict[str, tuple[float, float]]] = {
    "none": {},
    "s3-standard": {
        "PUT": (20, 60),
        "POST": (20, 60),
        "GET": (15, 45),
        "HEAD": (15, 45),
        "DELETE": (15, 45),
        "LIST": (20, 60),
    },
    "s3-express": dict.fromkeys(("PUT", "POST", "GET", "HEAD", "DELETE", "LIST"), (5, 10)),
}
KINDS = ("PUT", "GET", "HEAD", "LIST", "DELETE", "POST")
MEMORY_BACKEND = "memory"
MEMORY_ENV = {
    "AWS_REGION": REGION,
    "AWS_ACCESS_KEY_ID": "lakelog-bench",
    "AWS_SECRET_ACCESS_KEY": "lakelog-bench-secret",
    "AWS_ALLOW_HTTP": "true",
}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- the latency proxy (a child process) ------------------------------------------------------


def _header_lines(head: bytes) -> tuple[str, list[str]]:
    first, *lines = head[:-4].decode("latin-1").split("\r\n")
    return first, lines


def _header(lines: list[str], name: str) -> str | None:
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip().lower() == name:
            return value.strip()
    return None


async def _read_body(reader: asyncio.StreamReader, lines: list[str]) -> tuple[bytes, int]:
    """The request body as framed on the wire, and its payload length."""
    length = _header(lines, "content-length")
    if length is not None:
        body = await reader.readexactly(int(length)) if int(length) else b""
        return body, len(body)
    if (_header(lines, "transfer-encoding") or "").lower() == "chunked":
        raw, payload = [], 0
        while True:
            size_line = await reader.readuntil(b"\r\n")
            raw.append(size_line)
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                while True:  # trailers, up to the empty line
                    trailer = await reader.readuntil(b"\r\n")
                    raw.append(trailer)
                    if trailer == b"\r\n":
                        return b"".join(raw), payload
            raw.append(await reader.readexactly(size + 2))
            payload += size
    return b"", 0


def classify(method: str, target: str) -> tuple[str, str]:
    """(kind, category) of an S3 request: kind LIST for a GET listing a bucket."""
    parts = urlsplit(target)
    query = parse_qs(parts.query)
    _bucket, _, key = unquote(parts.path).lstrip("/").partition("/")
    kind = method
    if method == "GET" and not key and ("list-type" in query or "prefix" in query):
        kind = "LIST"
        key = query.get("prefix", [""])[0]
    if "_delta_log" in key:
        name = key.rsplit("/", 1)[-1]
        if name.endswith(".json"):
            category = "delta-json"
        elif "checkpoint" in name:
            category = "delta-checkpoint"
        else:
            category = "delta-log"
    elif key.endswith(".parquet"):
        category = "parquet"
    elif "_meta/" in key:
        category = "meta/" + key.split("_meta/", 1)[1].split("/", 1)[0]
    elif "/topics/" in f"/{key}":
        category = "topic-dir"
    else:
        category = "other"
    return kind, category


class LatencyProxy:
    def __init__(self, upstream: str, seed: int, trace: str | None = None) -> None:
        self.trace = open(trace, "a", buffering=1) if trace else None  # noqa: SIM115
        # upstream "memory": answer from bench/memory_s3.py in this process instead of moto
        self.memory = MemoryS3() if upstream == MEMORY_BACKEND else None
        parts = urlsplit(upstream)
        self.host, self.port = parts.hostname, parts.port
        self.rng = random.Random(seed)
        self.profile = "none"
        self.requests: Counter[str] = Counter()  # "KIND[?] category status"
        self.bytes_up: Counter[str] = Counter()  # request payload bytes by kind
        self.bytes_down: Counter[str] = Counter()  # response body bytes by kind
        self.upstream_ms: Counter[str] = Counter()  # moto's time, summed by kind
        self.delay_ms: Counter[str] = Counter()  # drawn delays, summed by kind
        self.answer_ms: Counter[str] = Counter()  # received -> answered, summed by kind
        self.moto_slower = 0  # responses that went later than their drawn delay

    def draw_delay_s(self, kind: str) -> float:
        spec = PROFILES[self.profile].get(kind)
        if not spec:
            return 0.0
        median, p99 = spec
        sigma = math.log(p99 / median) / Z99
        return median * math.exp(self.rng.gauss(0.0, sigma)) / 1000.0

    def stats(self) -> dict:
        return {
            "profile": self.profile,
            "requests": dict(self.requests),
            "bytes_up": dict(self.bytes_up),
            "bytes_down": dict(self.bytes_down),
            "upstream_ms": dict(self.upstream_ms),
            "delay_ms": dict(self.delay_ms),
            "answer_ms": dict(self.answer_ms),
            "moto_slower": self.moto_slower,
        }

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                received = time.monotonic()
                first, lines = _header_lines(head)
                method, target, _ = first.split(" ", 2)
                body, payload = await _read_body(reader, lines)
                if target.startswith("/__bench/"):
                    writer.write(self.control(method, target))
                    await writer.drain()
                    continue
                kind, category = classify(method, target)
                conditional = _header(lines, "if-none-match") is not None
                delay = self.draw_delay_s(kind)
                if self.memory is not None:
                    status, response, response_bytes = self.answer(method, target, lines, body)
                else:
                    status, response, response_bytes = await self.forward(
                        method, first, lines, body
                    )
                upstream_s = time.monotonic() - received
                wait = received + delay - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                elif delay:
                    self.moto_slower += 1
                tag = kind + ("?" if conditional else "")
                self.requests[f"{tag} {category} {status}"] += 1
                self.bytes_up[kind] += payload
                self.bytes_down[kind] += response_bytes
                self.upstream_ms[kind] += upstream_s * 1000
                self.delay_ms[kind] += delay * 1000
                if self.trace:
                    self.trace.write(
                        f"{received:.4f} {tag} {category} {status} {upstream_s * 1000:.1f} "
                        f"{delay * 1000:.1f} {payload} {response_bytes} {target}\n"
                    )
                self.answer_ms[kind] += (time.monotonic() - received) * 1000
                writer.write(response)
                await writer.drain()
                if (_header(lines, "connection") or "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    def answer(
        self, method: str, target: str, lines: list[str], body: bytes
    ) -> tuple[int, bytes, int]:
        """Answer from the in-memory store; (status, response, body bytes)."""
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        answer = self.memory.handle(method, target, headers, body)
        head_only = method == "HEAD"
        return answer.status, answer.encode(head_only), 0 if head_only else len(answer.body)

    async def forward(
        self, method: str, first: str, lines: list[str], body: bytes
    ) -> tuple[int, bytes, int]:
        """Send one request to moto on a new connection; (status, response to relay, body
        bytes). The relayed response keeps the client's connection alive."""
        up_lines = [line for line in lines if line.split(":", 1)[0].strip().lower() != "connection"]
        up_head = "\r\n".join([first, *up_lines, "Connection: close"]) + "\r\n\r\n"
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        try:
            up_writer.write(up_head.encode("latin-1") + body)
            await up_writer.drain()
            data = await up_reader.read()
        finally:
            up_writer.close()
        head, _, response_body = data.partition(b"\r\n\r\n")
        status_line, *response_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        kept = [
            line for line in response_lines if line.split(":", 1)[0].strip().lower() != "connection"
        ]
        framed = (
            _header(response_lines, "content-length") is not None
            or (_header(response_lines, "transfer-encoding") or "").lower() == "chunked"
        )
        if not framed and method != "HEAD" and status not in (204, 304):
            kept.append(f"Content-Length: {len(response_body)}")
        kept.append("Connection: keep-alive")
        relay = "\r\n".join([status_line, *kept]).encode("latin-1") + b"\r\n\r\n" + response_body
        return status, relay, len(response_body)

    def control(self, method: str, target: str) -> bytes:
        """GET /__bench/stats; PUT /__bench/profile/<name>."""
        status, body = "200 OK", b""
        if target == "/__bench/stats":
            body = json.dumps(self.stats()).encode()
        elif target.startswith("/__bench/profile/") and method == "PUT":
            name = target.rsplit("/", 1)[1]
            if name in PROFILES:
                self.profile = name
                body = b'{"profile": "' + name.encode() + b'"}'
            else:
                status = "404 Not Found"
        else:
            status = "404 Not Found"
        head = (
            f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
        )
        return head.encode() + body


async def _run_proxy(upstream: str, port: int, seed: int, trace: str | None) -> None:
    proxy = LatencyProxy(upstream, seed, trace)
    server = await asyncio.start_server(proxy.serve, "127.0.0.1", port, limit=1 << 20)
    async with server:
        await server.serve_forever()


@dataclass
class ProxyProcess:
    process: subprocess.Popen
    url: str

    def stats(self) -> dict:
        return httpx.get(f"{self.url}/__bench/stats", timeout=10).json()

    def set_profile(self, name: str) -> None:
        httpx.put(f"{self.url}/__bench/profile/{name}", timeout=10).raise_for_status()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_proxy(upstream: str, work_dir: Path, seed: int, trace: str | None = None) -> ProxyProcess:
    port = free_port()
    log_path = work_dir / f"proxy-{port}.log"
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve-proxy", upstream, "--proxy-port", str(port)]
        + ["--seed", str(seed)]
        + (["--trace", trace] if trace else []),
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    proxy = ProxyProcess(process, f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"proxy exited:\n{log_path.read_text(errors='replace')}")
        try:
            proxy.stats()
            return proxy
        except httpx.HTTPError:
            time.sleep(0.1)
    proxy.stop()
    raise RuntimeError("the latency proxy did not answer")


def diff_stats(after: dict, before: dict) -> dict:
    out: dict = {}
    for name, value in after.items():
        if isinstance(value, dict):
            old = before.get(name, {})
            out[name] = {k: v - old.get(k, 0) for k, v in value.items() if v - old.get(k, 0)}
        elif isinstance(value, int | float):
            out[name] = value - before.get(name, 0)
    return out


def requests_by_kind(stats: dict) -> Counter[str]:
    kinds: Counter[str] = Counter()
    for key, count in stats.get("requests", {}).items():
        kinds[key.split(" ", 1)[0].rstrip("?")] += count
    return kinds


def requests_by_category(stats: dict) -> Counter[str]:
    """ "KIND[?] category" (conditional PUTs marked with ?) -> count, every status together."""
    out: Counter[str] = Counter()
    for key, count in stats.get("requests", {}).items():
        tag, category, _status = key.split(" ")
        out[f"{tag} {category}"] += count
    return out


def statuses(stats: dict) -> Counter[str]:
    out: Counter[str] = Counter()
    for key, count in stats.get("requests", {}).items():
        tag, _category, status = key.split(" ")
        if not status.startswith("2"):
            out[f"{tag} {status}"] += count
    return out


def commits_of(stats: dict) -> int:
    """Successful conditional PUTs of Delta log JSON: the commits (partition logs and _meta
    tables alike)."""
    return sum(
        count
        for key, count in stats.get("requests", {}).items()
        if key.startswith("PUT? delta-json 2")
    )


# ---- CPU -------------------------------------------------------------------------------------


class Cpu:
    """CPU seconds of named processes and of this one over a window."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.begin = self._sample()
        self.started = time.monotonic()

    def _sample(self) -> dict[str, float]:
        out = {"client": time.process_time(), "machine": system_busy_cpu_s()}
        for name, pid in self.pids.items():
            try:
                out[name] = process_cpu_s(pid)
            except OSError:
                out[name] = 0.0
        return out

    def stop(self) -> dict[str, float]:
        """Share of one core per process over the window."""
        end, elapsed = self._sample(), max(1e-9, time.monotonic() - self.started)
        shares = {name: (end[name] - self.begin[name]) / elapsed for name in end}
        machine = shares.pop("machine")
        shares["other"] = max(0.0, machine - sum(shares.values()))
        return shares


# ---- client ----------------------------------------------------------------------------------


def make_bodies(batch: int, rng: random.Random) -> list[bytes]:
    bodies = []
    for b in range(DISTINCT_BODIES):
        records = [
            {
                "key": base64.b64encode(f"k{(b * batch + i) % 10**7:07d}".encode()).decode(),
                "value": base64.b64encode(rng.randbytes(VALUE_BYTES)).decode(),
            }
            for i in range(batch)
        ]
        bodies.append(orjson.dumps({"records": records}))
    return bodies


def acked_raw(response: RawResponse) -> bool:
    if response.status != 200:
        return False
    return all(entry.get("error_code") is None for entry in orjson.loads(response.body)["offsets"])


def create_topic(
    url: str, topic: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    body = {
        "topic_name": topic,
        "partitions_count": partitions,
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
    }
    response = httpx.post(f"{url}/v3/clusters/{CLUSTER}/topics", json=body, timeout=HTTP_TIMEOUT_S)
    if response.status_code != 201:
        raise RuntimeError(f"create topic {topic}: HTTP {response.status_code} {response.text}")


def end_offset(url: str, topic: str, partition: int = 0) -> int:
    response = httpx.get(
        f"{url}/topics/{topic}/partitions/{partition}/offsets", timeout=HTTP_TIMEOUT_S
    )
    response.raise_for_status()
    return response.json()["end_offset"]


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]


class Pool:
    """Keep-alive connections to one gateway, opened on demand up to `limit`."""

    def __init__(self, url: str, limit: int) -> None:
        self.url, self.limit = url, limit
        self.idle: list[RawConnection] = []
        self.opened = 0
        self.peak = 0
        self.in_use = 0
        self.freed = asyncio.Condition()

    async def warm(self, count: int) -> None:
        for _ in range(count):
            self.idle.append(await RawConnection.open(self.url))
            self.opened += 1

    async def acquire(self) -> RawConnection:
        while True:
            if self.idle:
                connection = self.idle.pop()
                break
            if self.opened < self.limit:
                self.opened += 1
                try:
                    connection = await RawConnection.open(self.url)
                except OSError:
                    self.opened -= 1
                    raise
                break
            async with self.freed:
                await self.freed.wait()
        self.in_use += 1
        self.peak = max(self.peak, self.in_use)
        return connection

    async def release(self, connection: RawConnection, broken: bool = False) -> None:
        self.in_use -= 1
        if broken:
            self.opened -= 1
            await connection.close()
        else:
            self.idle.append(connection)
        async with self.freed:
            self.freed.notify()

    async def close(self) -> None:
        for connection in self.idle:
            await connection.close()
        self.idle.clear()


@dataclass
class Produce:
    """One paced produce run."""

    store: str
    rate: int
    batch: int
    seconds: float = 0.0
    sent_records: int = 0
    acked_records: int = 0
    requests: int = 0
    failed: Counter = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    sched_latencies_ms: list[float] = field(default_factory=list)
    connections_peak: int = 0
    stored_equals_acked: bool | None = None
    cpu: dict[str, float] = field(default_factory=dict)
    store_stats: dict = field(default_factory=dict)

    @property
    def achieved(self) -> float:
        return self.acked_records / self.seconds if self.seconds else 0.0


async def _paced(url: str, topic: str, result: Produce, seconds: float) -> None:
    request_rate = result.rate / result.batch
    bodies = make_bodies(result.batch, random.Random(result.rate))
    headers = {"Content-Type": PRODUCE_TYPE}
    pool = Pool(url, POOL_MAX)
    await pool.warm(POOL_WARM)
    # warm-up: a few requests, untimed
    for body in bodies[:4]:
        connection = await pool.acquire()
        await connection.request("POST", f"/topics/{topic}", body, headers)
        await pool.release(connection)
    total = int(seconds * request_rate)
    tasks: set[asyncio.Task] = set()
    last_done = 0.0

    async def one(index: int, scheduled: float) -> None:
        nonlocal last_done
        connection = await pool.acquire()
        sent = time.monotonic()
        try:
            response = await asyncio.wait_for(
                connection.request(
                    "POST", f"/topics/{topic}", bodies[index % DISTINCT_BODIES], headers
                ),
                REQUEST_TIMEOUT_S,
            )
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as error:
            result.failed[type(error).__name__] += 1
            await pool.release(connection, broken=True)
            return
        done = time.monotonic()
        await pool.release(connection)
        last_done = max(last_done, done)
        if acked_raw(response):
            result.acked_records += result.batch
            result.latencies_ms.append((done - sent) * 1000)
            result.sched_latencies_ms.append((done - scheduled) * 1000)
        else:
            result.failed[f"HTTP {response.status}"] += 1

    start = time.monotonic() + 0.05
    for index in range(total):
        scheduled = start + index / request_rate
        wait = scheduled - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        task = asyncio.create_task(one(index, scheduled))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    result.sent_records = total * result.batch
    result.requests = total
    while tasks:
        await asyncio.gather(*list(tasks))
    result.seconds = max(last_done, start + total / request_rate) - start
    result.connections_peak = pool.peak
    await pool.close()


@dataclass
class MaxRun:
    store: str
    seconds: float = 0.0
    records: int = 0
    requests: int = 0
    failed: Counter = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    stored_equals_acked: bool | None = None
    cpu: dict[str, float] = field(default_factory=dict)
    store_stats: dict = field(default_factory=dict)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


async def _closed_loop(url: str, topic: str, result: MaxRun, seconds: float) -> None:
    bodies = make_bodies(MAX_BATCH, random.Random(7))
    headers = {"Content-Type": PRODUCE_TYPE}
    connections = [await RawConnection.open(url) for _ in range(MAX_CONNECTIONS)]
    for connection in connections:  # warm-up
        await connection.request("POST", f"/topics/{topic}", bodies[0], headers)
    start = time.monotonic()
    deadline = start + seconds
    finished: list[float] = []

    async def worker(index: int, connection: RawConnection) -> None:
        n = index
        while time.monotonic() < deadline:
            sent = time.monotonic()
            response = await connection.request(
                "POST", f"/topics/{topic}", bodies[n % DISTINCT_BODIES], headers
            )
            n += MAX_CONNECTIONS
            result.requests += 1
            if acked_raw(response):
                result.records += MAX_BATCH
                result.latencies_ms.append((time.monotonic() - sent) * 1000)
            else:
                result.failed[f"HTTP {response.status}"] += 1
        finished.append(time.monotonic())

    await asyncio.gather(*(worker(i, c) for i, c in enumerate(connections)))
    result.seconds = max(finished) - start
    for connection in connections:
        await connection.close()


@dataclass
class Fetch:
    store: str
    source: str  # "tail", "storage", "storage-small-files"
    seconds: float = 0.0
    records: int = 0
    requests: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    caught_up: bool = False
    high_watermark: int = 0
    cpu: dict[str, float] = field(default_factory=dict)
    store_stats: dict = field(default_factory=dict)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.records_per_s * RECORD_BYTES / 1e6


def fetch_run(url: str, topic: str, result: Fetch, first: int, seconds: float, wrap: bool) -> None:
    hw = end_offset(url, topic)
    result.high_watermark = hw
    with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_S) as client:

        def once(offset: int) -> int:
            response = client.get(
                f"/topics/{topic}/partitions/0/records",
                params={"offset": offset, "max_bytes": FETCH_MAX_BYTES, "timeout": 0},
                headers={"Accept": PRODUCE_TYPE},
            )
            if response.status_code != 200:
                raise RuntimeError(f"fetch {topic}@{offset}: HTTP {response.status_code}")
            records = orjson.loads(response.content)
            if not records or records[0]["offset"] != offset:
                raise AssertionError(f"fetch {topic}@{offset}: unexpected records")
            if len(base64.b64decode(records[-1]["value"])) != VALUE_BYTES:
                raise AssertionError(f"fetch {topic}@{offset}: wrong value size")
            return len(records)

        offset = first
        start = time.monotonic()
        deadline = start + seconds
        now = start
        while now < deadline:
            count = once(offset)
            after = time.monotonic()
            result.latencies_ms.append((after - now) * 1000)
            now = after
            result.requests += 1
            result.records += count
            offset += count
            if offset >= hw:
                if not wrap:
                    result.caught_up = True
                    break
                offset = first
        result.seconds = now - start


# ---- failover --------------------------------------------------------------------------------


@dataclass
class Failover:
    store: str
    lease_ms: int
    heartbeat_ms: int
    took_s: float | None = None
    sent: int = 0
    failed: Counter = field(default_factory=Counter)  # after the kill, before the first ack
    max_latency_ms: float = 0.0
    acked: int = 0
    stored: int = 0
    error: str = ""


async def _failover_produce(url: str, victim: GatewayProcess, result: Failover) -> None:
    body = orjson.dumps(
        {
            "records": [
                {"value": base64.b64encode(b"f" * VALUE_BYTES).decode(), "partition": 0},
            ]
        }
    )
    headers = {"Content-Type": PRODUCE_TYPE}
    pool = Pool(url, 256)
    await pool.warm(8)
    killed_at: float | None = None
    first_ack_after: float | None = None
    tasks: set[asyncio.Task] = set()

    async def one() -> None:
        nonlocal first_ack_after
        sent = time.monotonic()
        after_kill = killed_at is not None
        result.sent += 1
        try:
            connection = await pool.acquire()
        except OSError as error:
            result.failed[type(error).__name__] += 1
            return
        try:
            response = await asyncio.wait_for(
                connection.request("POST", "/topics/failover", body, headers), REQUEST_TIMEOUT_S
            )
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as error:
            await pool.release(connection, broken=True)
            if after_kill and first_ack_after is None:
                result.failed[type(error).__name__] += 1
            return
        await pool.release(connection)
        done = time.monotonic()
        result.max_latency_ms = max(result.max_latency_ms, (done - sent) * 1000)
        if acked_raw(response):
            result.acked += 1
            if after_kill and first_ack_after is None:
                first_ack_after = done
        elif after_kill and first_ack_after is None:
            result.failed[f"HTTP {response.status}"] += 1
        elif not after_kill:
            result.failed[f"before kill: HTTP {response.status}"] += 1

    start = time.monotonic()
    next_at = start
    while True:
        now = time.monotonic()
        if killed_at is None and now - start >= FAILOVER_BEFORE_KILL_S:
            victim.process.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
        if first_ack_after is not None and now - first_ack_after >= FAILOVER_AFTER_ACK_S:
            break
        if killed_at is not None and now - killed_at > FAILOVER_GIVE_UP_S:
            result.error = f"no acknowledged produce {FAILOVER_GIVE_UP_S:.0f} s after SIGKILL"
            break
        task = asyncio.create_task(one())
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        next_at += FAILOVER_INTERVAL_S
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    while tasks:
        await asyncio.gather(*list(tasks))
    await pool.close()
    if first_ack_after is not None and killed_at is not None:
        result.took_s = first_ack_after - killed_at


# ---- one store -------------------------------------------------------------------------------


@dataclass
class StoreResults:
    name: str
    startup_s: float = 0.0
    restart_s: float = 0.0
    idle: dict = field(default_factory=dict)
    idle_seconds: float = 0.0
    produce: list[Produce] = field(default_factory=list)
    max_run: MaxRun | None = None
    fetches: list[Fetch] = field(default_factory=list)
    failovers: list[Failover] = field(default_factory=list)


class Bench:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args = args
        self.tmp = tmp
        self.s3: S3Server | None = None
        self.proxy: ProxyProcess | None = None
        self.gateways: list[GatewayProcess] = []

    # -- infrastructure

    def start_store(self) -> None:
        if self.args.backend == MEMORY_BACKEND:
            self.proxy = start_proxy(MEMORY_BACKEND, self.tmp, self.args.seed, self.args.trace)
            log(f"in-memory S3 (bench/memory_s3.py) behind the latency proxy at {self.proxy.url}")
            return
        self.s3 = start_s3_server(self.tmp)
        self.proxy = start_proxy(self.s3.endpoint, self.tmp, self.args.seed, self.args.trace)
        log(f"moto at {self.s3.endpoint}, latency proxy at {self.proxy.url}")

    def stop_all(self) -> None:
        for gateway in self.gateways:
            gateway.stop()
        if self.proxy:
            self.proxy.stop()
        if self.s3:
            self.s3.stop()

    def root_for(self, store: str) -> tuple[dict[str, str], str | None]:
        """(env, object-store root) of a fresh root for `store`."""
        if store == "local":
            return {}, None
        assert self.proxy
        if self.s3 is None:  # the in-memory backend: the proxy creates the bucket itself
            bucket = f"lake-{random.getrandbits(48):012x}"
            httpx.put(f"{self.proxy.url}/{bucket}", timeout=10).raise_for_status()
            env = {**MEMORY_ENV, "AWS_ENDPOINT_URL": self.proxy.url}
            return env, f"s3://{bucket}/lakelog"
        bucket = self.s3.create_bucket()
        env = {**self.s3.env, "AWS_ENDPOINT_URL": self.proxy.url}
        return env, f"s3://{bucket}/lakelog"

    def gateway(self, data_dir: Path, env: dict[str, str], root: str | None) -> GatewayProcess:
        gateway = start_gateway(data_dir, env=env, root=root)
        self.gateways.append(gateway)
        return gateway

    def pids(self, gateway: GatewayProcess) -> dict[str, int]:
        pids = {"gateway": gateway.process.pid}
        if self.proxy:
            pids["proxy"] = self.proxy.process.pid
        if self.s3:
            pids["moto"] = self.s3.process.pid
        return pids

    def stats(self) -> dict:
        return self.proxy.stats() if self.proxy else {}

    # -- the cases

    def run_store(self, store: str) -> StoreResults:
        results = StoreResults(store)
        if self.proxy:
            self.proxy.set_profile("none" if store == "local" else store)
        env, root = self.root_for(store)
        data_dir = self.tmp / store / "data"
        began = time.monotonic()
        gateway = self.gateway(data_dir, env, root)
        results.startup_s = time.monotonic() - began
        log(f"{store}: gateway up in {results.startup_s:.1f} s on {root or data_dir}")
        topics = {(rate, batch): f"rate{rate}x{batch}" for rate, batch in RATES}
        for topic in [*topics.values(), "max"]:
            create_topic(gateway.url, topic)
        time.sleep(1.0)

        before = self.stats()
        idle_start = time.monotonic()
        time.sleep(IDLE_S)
        results.idle = diff_stats(self.stats(), before)
        results.idle_seconds = time.monotonic() - idle_start
        idle_rate = sum(requests_by_kind(results.idle).values()) / results.idle_seconds
        log(f"{store}: idle store requests {idle_rate:.1f}/s")

        for rate, batch in RATES:
            result = Produce(store, rate, batch)
            before, cpu = self.stats(), Cpu(self.pids(gateway))
            asyncio.run(_paced(gateway.url, topics[rate, batch], result, self.args.duration_s))
            result.cpu = cpu.stop()
            result.store_stats = diff_stats(self.stats(), before)
            stored = end_offset(gateway.url, topics[rate, batch])
            result.stored_equals_acked = stored == result.acked_records + 4 * batch
            results.produce.append(result)
            log(
                f"{store}: produce {rate}/s x{batch}: achieved {result.achieved:,.0f}/s, "
                f"p50 {_ms(percentile(result.latencies_ms, 50))} ms, "
                f"p99 {_ms(percentile(result.latencies_ms, 99))} ms, "
                f"failed {sum(result.failed.values())} {dict(result.failed) or ''}, "
                f"peak connections {result.connections_peak}, "
                f"gateway CPU {result.cpu['gateway']:.0%}, other CPU {result.cpu['other']:.0%}"
            )

        run = MaxRun(store)
        before, cpu = self.stats(), Cpu(self.pids(gateway))
        asyncio.run(_closed_loop(gateway.url, "max", run, self.args.max_s))
        run.cpu = cpu.stop()
        run.store_stats = diff_stats(self.stats(), before)
        run.stored_equals_acked = end_offset(gateway.url, "max") == run.records + (
            MAX_CONNECTIONS * MAX_BATCH
        )
        results.max_run = run
        log(
            f"{store}: max {run.records_per_s:,.0f} records/s, "
            f"p99 {_ms(percentile(run.latencies_ms, 99))} ms, gateway CPU {run.cpu['gateway']:.0%}"
        )

        tail = self.fetch(gateway, store, "tail", "max", wrap=True)
        results.fetches.append(tail)
        gateway.stop()
        began = time.monotonic()
        gateway = self.gateway(data_dir, env, root)
        results.restart_s = time.monotonic() - began
        log(f"{store}: gateway restarted in {results.restart_s:.1f} s")
        results.fetches.append(self.fetch(gateway, store, "storage", "max", wrap=False))
        small = self.fetch(gateway, store, "storage-small-files", topics[1000, 1], wrap=False)
        results.fetches.append(small)
        gateway.stop()
        return results

    def fetch(
        self, gateway: GatewayProcess, store: str, source: str, topic: str, wrap: bool
    ) -> Fetch:
        result = Fetch(store, source)
        hw = end_offset(gateway.url, topic)
        first = max(0, hw - TAIL_READ) if source == "tail" else 0
        seconds = FETCH_S if source == "tail" else self.args.fetch_s
        before, cpu = self.stats(), Cpu(self.pids(gateway))
        fetch_run(gateway.url, topic, result, first, seconds, wrap)
        result.cpu = cpu.stop()
        result.store_stats = diff_stats(self.stats(), before)
        gets = requests_by_kind(result.store_stats)["GET"]
        log(
            f"{store}: fetch {source}: {result.records_per_s:,.0f} records/s "
            f"({result.mb_per_s:.1f} MB/s), {result.records:,} records in {result.requests} "
            f"fetches, {gets} store GETs, caught up: {result.caught_up}"
        )
        return result

    def run_failover(self, store: str, lease_ms: int | None) -> Failover:
        if self.proxy:
            self.proxy.set_profile("none" if store == "local" else store)
        extra = CLUSTER_ENV if lease_ms else {}
        env, root = self.root_for(store)
        data_dir = self.tmp / f"{store}-failover-{lease_ms or 'default'}" / "data"
        nodes = {
            str(n): self.gateway(data_dir, {**env, **extra, "LAKELOG_NODE_ID": str(n)}, root)
            for n in range(2)
        }
        result = Failover(
            store,
            int(extra.get("LAKELOG_LEASE_MS", 6000)),
            int(extra.get("LAKELOG_HEARTBEAT_MS", 1000)),
        )
        try:
            time.sleep(0.7)
            create_topic(nodes["0"].url, "failover")
            response = httpx.post(
                f"{nodes['0'].url}/topics/failover",
                content=orjson.dumps({"records": [{"value": "eA==", "partition": 0}]}),
                headers={"Content-Type": PRODUCE_TYPE},
                timeout=HTTP_TIMEOUT_S,
            )
            response.raise_for_status()
            time.sleep(1.0)
            leader = str(leaders(nodes["1"].url, "failover")[0])
            victim = nodes[leader]
            survivor = nodes["1" if leader == "0" else "0"]
            asyncio.run(_failover_produce(survivor.url, victim, result))
            victim.process.wait()
            result.stored = end_offset(survivor.url, "failover") - 1
        except Exception as error:  # noqa: BLE001 - report it, go on with the other cases
            result.error = result.error or f"{type(error).__name__}: {error}"
        finally:
            for node in nodes.values():
                node.stop()
        took = "-" if result.took_s is None else f"{result.took_s:.2f} s"
        log(
            f"{store}: failover (lease {result.lease_ms} ms): first ack after {took}, "
            f"failed {sum(result.failed.values())} ({dict(result.failed)}), acked "
            f"{result.acked}, stored {result.stored} {result.error}"
        )
        return result


# ---- report ----------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _ratio(value: float | None, base: float | None) -> str:
    if value is None or not base:
        return "-"
    return f"{value / base:.2f}x"


def _cpu(cpu: dict[str, float], name: str) -> str:
    return f"{cpu[name]:.0%}" if name in cpu else "-"


def _mb(records: float) -> float:
    return records * RECORD_BYTES / 1e6


def net_requests(stats: dict, idle: dict, idle_s: float, seconds: float) -> Counter[str]:
    kinds = requests_by_kind(stats)
    idle_kinds = requests_by_kind(idle)
    return Counter(
        {kind: kinds[kind] - idle_kinds[kind] / idle_s * seconds for kind in KINDS if kinds[kind]}
    )


def render(all_results: list[StoreResults], goals: list[str]) -> list[str]:
    by_name = {r.name: r for r in all_results}
    local = by_name.get("local")
    out: list[str] = []

    out += [
        "### Produce latency (open loop, one 1-partition topic per rate)",
        "",
        "| store | offered records/s | records/request | achieved records/s | p50 ms | p99 ms "
        "| max ms | sched p99 ms | p99 vs local | failed | stored == acked | peak connections "
        "| gateway CPU | client CPU | proxy CPU | moto CPU | other CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for results in all_results:
        for p in results.produce:
            base = None
            if local:
                base = next(
                    (q for q in local.produce if (q.rate, q.batch) == (p.rate, p.batch)), None
                )
            p99 = percentile(p.latencies_ms, 99)
            out.append(
                f"| {p.store} | {p.rate:,} | {p.batch} | {p.achieved:,.0f} "
                f"| {_ms(percentile(p.latencies_ms, 50))} | {_ms(p99)} "
                f"| {_ms(max(p.latencies_ms, default=None))} "
                f"| {_ms(percentile(p.sched_latencies_ms, 99))} "
                f"| {_ratio(p99, percentile(base.latencies_ms, 99) if base else None)} "
                f"| {sum(p.failed.values())} | {'yes' if p.stored_equals_acked else 'NO'} "
                f"| {p.connections_peak} | {_cpu(p.cpu, 'gateway')} | {_cpu(p.cpu, 'client')} "
                f"| {_cpu(p.cpu, 'proxy')} | {_cpu(p.cpu, 'moto')} | {_cpu(p.cpu, 'other')} |"
            )

    out += [
        "",
        f"### Maximum produce throughput ({MAX_BATCH:,} records/request, "
        f"{MAX_CONNECTIONS} connections, closed loop)",
        "",
        "| store | records/s | MB/s | vs local | p50 ms | p99 ms | commits | records/commit "
        "| failed | stored == acked | gateway CPU | client CPU | proxy CPU | moto CPU "
        "| other CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    local_max = local.max_run.records_per_s if local and local.max_run else None
    for results in all_results:
        run = results.max_run
        if not run:
            continue
        commits = commits_of(run.store_stats)
        out.append(
            f"| {run.store} | {run.records_per_s:,.0f} | {_mb(run.records_per_s):.2f} "
            f"| {_ratio(run.records_per_s, local_max)} "
            f"| {_ms(percentile(run.latencies_ms, 50))} | {_ms(percentile(run.latencies_ms, 99))} "
            f"| {commits or '-'} | {f'{run.records / commits:,.0f}' if commits else '-'} "
            f"| {sum(run.failed.values())} | {'yes' if run.stored_equals_acked else 'NO'} "
            f"| {_cpu(run.cpu, 'gateway')} | {_cpu(run.cpu, 'client')} "
            f"| {_cpu(run.cpu, 'proxy')} | {_cpu(run.cpu, 'moto')} | {_cpu(run.cpu, 'other')} |"
        )

    out += [
        "",
        "### Fetch (one consumer, max_bytes 1 MiB)",
        "",
        "| store | from | records/s | MB/s | vs local | records/fetch | p50 ms | p99 ms "
        "| records read | caught up | store GETs | GET MB / fetched MB | gateway CPU |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for results in all_results:
        for f in results.fetches:
            base = None
            if local:
                base = next((g for g in local.fetches if g.source == f.source), None)
            gets = requests_by_kind(f.store_stats)["GET"]
            get_mb = f.store_stats.get("bytes_down", {}).get("GET", 0) / 1e6
            fetched_mb = _mb(f.records)
            amplification = f"{get_mb / fetched_mb:.2f}" if results.name != "local" else "-"
            out.append(
                f"| {f.store} | {f.source} | {f.records_per_s:,.0f} | {f.mb_per_s:.1f} "
                f"| {_ratio(f.records_per_s, base.records_per_s if base else None)} "
                f"| {f.records / max(1, f.requests):,.0f} | {_ms(percentile(f.latencies_ms, 50))} "
                f"| {_ms(percentile(f.latencies_ms, 99))} | {f.records:,} "
                f"| {'yes' if f.caught_up else 'no'} "
                f"| {gets if results.name != 'local' else '-'} | {amplification} "
                f"| {_cpu(f.cpu, 'gateway')} |"
            )

    object_results = [r for r in all_results if r.name != "local"]
    if object_results:
        out += [
            "",
            "### Store requests (proxy counts; runs net of the idle rate)",
            "",
            "| store | run | PUT/s | GET/s | HEAD/s | LIST/s | DELETE/s | POST/s | total/s "
            "| per MB produced: PUT | GET | HEAD | LIST | total | commits/s | requests/commit |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for results in object_results:
            idle_s = results.idle_seconds
            idle_kinds = requests_by_kind(results.idle)
            idle_commits = commits_of(results.idle)
            cells = " | ".join(f"{idle_kinds[k] / idle_s:.1f}" for k in KINDS)
            out.append(
                f"| {results.name} | idle (1 node) | {cells} "
                f"| {sum(idle_kinds.values()) / idle_s:.1f} | - | - | - | - | - "
                f"| {idle_commits / idle_s:.1f} | - |"
            )
            runs = []
            p1000 = next((p for p in results.produce if (p.rate, p.batch) == (1000, 1)), None)
            if p1000:
                runs.append(
                    ("1,000 rec/s x1", p1000.store_stats, p1000.seconds, p1000.acked_records)
                )
            if results.max_run:
                m = results.max_run
                runs.append(("max x1000", m.store_stats, m.seconds, m.records))
            for label, stats, seconds, records in runs:
                net = net_requests(stats, results.idle, idle_s, seconds)
                mb = _mb(records)
                total = sum(net.values())
                commits = commits_of(stats) - idle_commits / idle_s * seconds
                per_s = " | ".join(f"{net[k] / seconds:.1f}" for k in KINDS)
                per_mb = " | ".join(f"{net[k] / mb:.1f}" for k in ("PUT", "GET", "HEAD", "LIST"))
                out.append(
                    f"| {results.name} | {label} | {per_s} | {total / seconds:.1f} | {per_mb} "
                    f"| {total / mb:.1f} | {commits / seconds:.1f} "
                    f"| {total / commits if commits > 0 else 0:.2f} |"
                )
        out += [
            "",
            "Store response time as the gateway saw it, mean ms by kind over the produce and "
            "max runs (drawn delay / the backend's own time through the proxy / answered after):",
            "",
        ]
        for results in object_results:
            total: dict[str, Counter] = {}
            stats_list = [p.store_stats for p in results.produce]
            if results.max_run:
                stats_list.append(results.max_run.store_stats)
            for stats in stats_list:
                kinds = requests_by_kind(stats)
                for name in ("delay_ms", "upstream_ms", "answer_ms"):
                    total.setdefault(name, Counter()).update(stats.get(name, {}))
                total.setdefault("n", Counter()).update(kinds)
            cells = []
            for kind in KINDS:
                n = total["n"][kind]
                if n:
                    cells.append(
                        f"{kind} {total['delay_ms'][kind] / n:.1f} / "
                        f"{total['upstream_ms'][kind] / n:.1f} / {total['answer_ms'][kind] / n:.1f}"
                    )
            out.append(f"- {results.name}: " + "; ".join(cells))
        out += ["", "Requests by object during the runs (count, every status; ? = If-None-Match):"]
        out.append("")
        for results in object_results:
            out.append(
                f"- {results.name}, idle {results.idle_seconds:.1f} s: " + _categories(results.idle)
            )
            for p in results.produce:
                out.append(
                    f"- {results.name}, {p.rate:,} rec/s x{p.batch} ({p.seconds:.1f} s, "
                    f"{p.acked_records:,} records): {_categories(p.store_stats)}"
                )
            if results.max_run:
                m = results.max_run
                out.append(
                    f"- {results.name}, max ({m.seconds:.1f} s, {m.records:,} records): "
                    + _categories(m.store_stats)
                )
            for f in results.fetches:
                out.append(
                    f"- {results.name}, fetch {f.source} ({f.records:,} records): "
                    + _categories(f.store_stats)
                )
            failures = Counter()
            for stats in [results.idle, *(p.store_stats for p in results.produce)]:
                failures.update(statuses(stats))
            if results.max_run:
                failures.update(statuses(results.max_run.store_stats))
            if failures:
                out.append(f"- {results.name}, non-2xx answers: {dict(failures)}")

    failovers = [f for r in all_results for f in r.failovers]
    if failovers:
        out += [
            "",
            "### Failover (2 nodes, SIGKILL of the leader, one-record produces every 20 ms "
            "through the survivor)",
            "",
            "| store | lease ms | heartbeat ms | kill → first ack s | failed produces "
            "| failed by cause | produces sent | acked | stored | max latency ms |",
            "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
        ]
        for f in failovers:
            took = "-" if f.took_s is None else f"{f.took_s:.2f}"
            causes = ", ".join(f"{k}: {v}" for k, v in f.failed.items()) or "-"
            if f.error:
                causes += f" ({f.error})"
            out.append(
                f"| {f.store} | {f.lease_ms:,} | {f.heartbeat_ms:,} | {took} "
                f"| {sum(v for k, v in f.failed.items() if not k.startswith('before'))} "
                f"| {causes} | {f.sent} | {f.acked} | {f.stored} | {f.max_latency_ms:,.0f} |"
            )

    out += ["", "### Goals", "", *goals]
    return out


def _categories(stats: dict) -> str:
    items = sorted(requests_by_category(stats).items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {count}" for name, count in items) or "none"


def goals_of(all_results: list[StoreResults]) -> list[str]:
    by_name = {r.name: r for r in all_results}
    lines = []
    for profile, goal in GOAL_P99_MS.items():
        results = by_name.get(profile)
        if not results:
            continue
        for p in results.produce:
            p99 = percentile(p.latencies_ms, 99)
            met = p99 is not None and p99 <= goal
            lines.append(
                f"- produce p99 ≤ {goal:.0f} ms at {profile} latency, {p.rate:,} records/s "
                f"(x{p.batch}): {_ms(p99)} ms, **{'met' if met else 'not met'}**"
            )
    local = by_name.get("local")
    if local and local.max_run:
        for results in all_results:
            if results.name == "local" or not results.max_run:
                continue
            ratio = results.max_run.records_per_s / max(1e-9, local.max_run.records_per_s)
            lines.append(
                f"- max throughput at {MAX_BATCH:,} records/request ≥ {GOAL_MAX_RATIO}x local, "
                f"{results.name}: {ratio:.2f}x, "
                f"**{'met' if ratio >= GOAL_MAX_RATIO else 'not met'}**"
            )
    return lines


# ---- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration-s", type=float, default=15.0, help="each paced produce run")
    parser.add_argument("--max-s", type=float, default=10.0, help="the max-throughput run")
    parser.add_argument("--fetch-s", type=float, default=10.0, help="each fetch from storage")
    parser.add_argument(
        "--profiles",
        default="s3-standard,s3-express",
        help="comma-separated latency profiles (s3-standard, s3-express, none)",
    )
    parser.add_argument("--no-local", action="store_true", help="skip the local-disk baseline")
    parser.add_argument("--no-failover", action="store_true")
    parser.add_argument(
        "--default-lease",
        action="store_true",
        help="also run failover with the default lease and heartbeat (6 s / 1 s)",
    )
    parser.add_argument(
        "--backend",
        choices=("moto", MEMORY_BACKEND),
        default="moto",
        help="what answers behind the proxy: moto_server, or bench/memory_s3.py in the proxy",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep-tmp", action="store_true", help="keep gateway and moto logs")
    parser.add_argument("--tmp-dir", help="parent of the temporary directory")
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument(
        "--trace", help="append one line per store request here (time kind object status ...)"
    )
    parser.add_argument("--serve-proxy", metavar="UPSTREAM", help=argparse.SUPPRESS)
    parser.add_argument("--proxy-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    unknown = [p for p in profiles if p not in PROFILES]
    if unknown:
        parser.error(f"unknown profiles {unknown}; known: {sorted(PROFILES)}")
    args.profile_list = profiles
    return args


def _raise_on_sigterm(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve_proxy:
        asyncio.run(_run_proxy(args.serve_proxy, args.proxy_port, args.seed, args.trace))
        return 0
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    command = ".venv/bin/python bench/object_store.py " + shlex.join(sys.argv[1:])
    tmp = Path(tempfile.mkdtemp(prefix="lakelog-objstore-", dir=args.tmp_dir))
    machine = machine_info(tmp, ("moto", "obstore"))
    load_before = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    began = time.monotonic()
    stores = ([] if args.no_local else ["local"]) + args.profile_list
    bench = Bench(args, tmp)
    all_results: list[StoreResults] = []
    try:
        bench.start_store()
        for store in stores:
            all_results.append(bench.run_store(store))
        if not args.no_failover:
            for results in all_results:
                results.failovers.append(bench.run_failover(results.name, 3000))
            if args.default_lease:
                for results in all_results:
                    results.failovers.append(bench.run_failover(results.name, None))
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        bench.stop_all()
        if args.keep_tmp:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.monotonic() - began
    load_after = ", ".join(f"{v:.2f}" for v in os.getloadavg())

    lines = [
        "## Object storage: produce, fetch and failover at S3 latency",
        "",
        *report_header(
            machine,
            command=command,
            code_details=(
                (
                    "store: bench/memory_s3.py (in the proxy's process)"
                    if args.backend == MEMORY_BACKEND
                    else "store: moto_server (S3 API, in memory) on loopback"
                )
                + " behind this bench's latency "
                "proxy; profiles median/p99 ms: "
                + "; ".join(
                    f"{name} "
                    + (
                        ", ".join(f"{k} {m:g}/{q:g}" for k, (m, q) in spec.items())
                        if spec
                        else "no delay"
                    )
                    for name, spec in PROFILES.items()
                    if name in stores
                )
                + f"; gateway defaults (single node) but for failover; wall clock {elapsed:.0f} s"
            ),
            load_before=load_before,
            load_after=load_after,
        ),
        "startup (s): "
        + ", ".join(f"{r.name} {r.startup_s:.1f} (restart {r.restart_s:.1f})" for r in all_results),
        "",
        *render(all_results, goals_of(all_results)),
    ]
    print("\n".join(lines), flush=True)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                [_as_json(r) for r in all_results],
                indent=1,
                default=lambda o: dict(o) if isinstance(o, Counter) else str(o),
            )
        )
    return 0


def _as_json(results: StoreResults) -> dict:
    def clean(obj) -> dict:
        data = dict(obj.__dict__)
        for key in ("latencies_ms", "sched_latencies_ms"):
            if key in data:
                values = data.pop(key)
                data[key.replace("latencies_ms", "p50_p99_max")] = [
                    percentile(values, 50),
                    percentile(values, 99),
                    max(values, default=None),
                ]
        return data

    return {
        "name": results.name,
        "startup_s": results.startup_s,
        "idle": results.idle,
        "produce": [clean(p) for p in results.produce],
        "max": clean(results.max_run) if results.max_run else None,
        "fetches": [clean(f) for f in results.fetches],
        "failovers": [clean(f) for f in results.failovers],
    }


if __name__ == "__main__":
    sys.exit(main())
