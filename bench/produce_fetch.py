"""Produce and fetch throughput: deltalake appends vs the HTTP gateway, in one run.

Cases (100-byte values, 8-byte keys; 1, 100 and 1000 records per request):

  (a) deltalake  write_deltalake(dt, batch, mode="append") of the same batches (prebuilt as Arrow
               tables with the partition schema) into a fresh table: the baseline, plain
               deltalake appends with no offsets, no CAS and no HTTP.
      direct   DeltaPartitionLog.append of the same batches into a fresh temp table: one Delta
               commit per batch with the txn offset CAS (lakelog's storage floor).
  (b) gateway  POST /topics/{t} (application/vnd.kafka.binary.v2+json) to a `lakelog serve`
               child process on loopback, fresh 1-partition topic per case, N client threads
               (one httpx.Client and one keep-alive connection each, default 8), then the same
               with 1 connection.
  (c) ratio    gateway and direct / deltalake per batch size.
  (d) fetch    GET /topics/{t}/partitions/0/records (max_bytes 1 MiB, one consumer) on the topic
               of the 1000-records N-connection case: the in-memory tail (its last
               LAKELOG_TAIL_RECORDS_MAX records, re-read until the time is up) before a restart,
               then a catch-up from offset 0 after a gateway restart (served from Parquet); also
               a catch-up on the 1-record topic, whose Parquet files hold a few records each.

Every case runs for a fixed duration (default 6 s; --quick 3 s). The produce cases run in
rounds (default 2; --quick 1): each round runs, per batch size, direct then gateway back to back,
so a burst of load from other processes hits both sides of a ratio alike; the table shows each
case's best round and lists every round. The same record batches (and request bodies encoding
them) are built before any timed loop. Produce cases are verified afterwards: the acknowledged
offset ranges must tile [0, high watermark) exactly, and the high watermark (GET .../offsets)
must equal the records acknowledged. CPU use of this process, of the gateway and of every other
process on the machine is measured per case (from /proc) to show contention.

Usage: .venv/bin/python bench/produce_fetch.py [--seconds S] [--rounds R] [--quick]
           [--connections N] [--json out.json]
Progress goes to stderr, the results table to stdout.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import random
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

import httpx
import orjson
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from conf.settings import load_settings  # noqa: E402
from storage_layout import paths  # noqa: E402
from storage_layout.log import DeltaPartitionLog  # noqa: E402
from storage_layout.log.arrow_records import records_to_arrow  # noqa: E402
from storage_layout.records import NewRecord  # noqa: E402
from storage_layout.schema import PARTITION_COLUMN  # noqa: E402
from storage_layout.topic_config import TopicConfig  # noqa: E402
from tests.gateway_process import GatewayProcess, start_gateway  # noqa: E402

BATCH_SIZES = (1, 100, 1000)
VALUE_BYTES = 100
KEY_BYTES = 8
RECORD_BYTES = KEY_BYTES + VALUE_BYTES  # payload counted in MB/s (MB = 10**6 bytes)
DISTINCT_BATCHES = 16  # batches (bodies) cycled through, so Parquet does not see one repeated
WARMUP_REQUESTS = 2  # per connection / per direct case, before the clock starts
DEFAULT_SECONDS = 6.0
DEFAULT_ROUNDS = 2  # every produce case runs this many times, interleaved; the best round counts
QUICK_SECONDS = 3.0
QUICK_ROUNDS = 1
DEFAULT_CONNECTIONS = 8
FETCH_MAX_BYTES = 1024 * 1024
PRODUCE_TYPE = "application/vnd.kafka.binary.v2+json"
CLUSTER = "lakelog"
HTTP_TIMEOUT_S = 60.0
NOISY_OTHER_CPU = 0.25  # warn when other processes used more than this share of a core


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- results ---------------------------------------------------------------------------------


@dataclass
class Result:
    case: str  # "direct", "gateway", "fetch-tail", "fetch-parquet"
    batch: int | None  # records per request (None for fetch)
    connections: int | None
    records: int  # records in the timed window
    requests: int
    seconds: float
    cpu_client_s: float = 0.0  # CPU of this bench process during the window
    cpu_gateway_s: float | None = None  # CPU of the gateway process during the window
    cpu_other_s: float = 0.0  # CPU of every other process on the machine (noise) in the window
    latency_ms_p50: float | None = None
    latency_ms_p99: float | None = None
    extra: dict = field(default_factory=dict)
    round_no: int = 0  # which round of the produce cases (0-based)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.records_per_s * RECORD_BYTES / 1e6

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "records_per_s": round(self.records_per_s, 1),
            "mb_per_s": round(self.mb_per_s, 3),
        }


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


# ---- data ------------------------------------------------------------------------------------


def make_batches(batch: int, rng: random.Random) -> list[list[NewRecord]]:
    batches = []
    for b in range(DISTINCT_BATCHES):
        batches.append(
            [
                NewRecord(key=f"k{(b * batch + i) % 10**7:07d}".encode(), value=rng.randbytes(100))
                for i in range(batch)
            ]
        )
    return batches


def encode_body(records: list[NewRecord]) -> bytes:
    return orjson.dumps(
        {
            "records": [
                {
                    "key": base64.b64encode(r.key).decode(),
                    "value": base64.b64encode(r.value).decode(),
                }
                for r in records
            ]
        }
    )


# ---- process CPU -----------------------------------------------------------------------------

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """utime + stime of process `pid` (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def system_busy_cpu_s() -> float:
    """Busy (non-idle, non-iowait) CPU time of the whole machine, in seconds."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:9]]
    return (sum(values) - values[3] - values[4]) / _CLK_TCK


class CpuMeter:
    """CPU seconds of this process, the gateway (if any) and everything else on the machine."""

    def __init__(self, gateway_pid: int | None = None) -> None:
        self.gateway_pid = gateway_pid
        self.start()

    def _sample(self) -> tuple[float, float, float]:
        gateway = process_cpu_s(self.gateway_pid) if self.gateway_pid else 0.0
        return time.process_time(), gateway, system_busy_cpu_s()

    def start(self) -> None:
        self._begin = self._sample()

    def stop(self) -> dict[str, float | None]:
        client, gateway, busy = (b - a for a, b in zip(self._begin, self._sample(), strict=True))
        return {
            "cpu_client_s": client,
            "cpu_gateway_s": gateway if self.gateway_pid else None,
            "cpu_other_s": max(0.0, busy - client - gateway),
        }


# ---- (a) deltalake appends and direct log appends --------------------------------------------


def bench_deltalake(
    batches: list[list[NewRecord]], seconds: float, uri: str, gateway_pid: int | None = None
) -> Result:
    """Plain deltalake: one write_deltalake append per batch, the batches prebuilt as Arrow."""
    batch = len(batches[0])
    tables = [_as_partition_table(records) for records in batches]
    DeltaPartitionLog.create(uri)
    table = DeltaTable(uri)
    for i in range(WARMUP_REQUESTS):
        write_deltalake(table, tables[i], mode="append")
    latencies, records, commits = [], 0, 0
    meter, start = CpuMeter(gateway_pid), time.perf_counter()
    deadline = start + seconds
    now = start
    while now < deadline:
        write_deltalake(table, tables[commits % DISTINCT_BATCHES], mode="append")
        after = time.perf_counter()
        latencies.append((after - now) * 1000)
        now = after
        records += batch
        commits += 1
    elapsed, cpu = now - start, meter.stop()
    stored = DeltaTable(uri).to_pyarrow_dataset().count_rows()
    if stored != records + WARMUP_REQUESTS * batch:
        raise AssertionError(f"deltalake {batch}: {stored} rows stored, {records} appended")
    return Result(
        "deltalake",
        batch,
        1,
        records,
        commits,
        elapsed,
        **cpu,
        latency_ms_p50=percentile(latencies, 50),
        latency_ms_p99=percentile(latencies, 99),
        extra={"commits": commits, "verified": True},
    )


def _as_partition_table(records: list[NewRecord]) -> pa.Table:
    table = records_to_arrow(records, 0, int(time.time() * 1000), False, None)
    return table.append_column(PARTITION_COLUMN, pa.array([0] * table.num_rows, pa.int64()))


def bench_direct(
    batches: list[list[NewRecord]], seconds: float, uri: str, gateway_pid: int | None = None
) -> Result:
    batch = len(batches[0])
    DeltaPartitionLog.create(uri)
    partition_log = DeltaPartitionLog.open(uri)
    config = TopicConfig()
    appended = 0
    for i in range(WARMUP_REQUESTS):
        appended += len(batches[i])
        partition_log.append(batches[i], config=config)
    latencies, records, commits = [], 0, 0
    meter, start = CpuMeter(gateway_pid), time.perf_counter()
    deadline = start + seconds
    now = start
    while now < deadline:
        records_batch = batches[commits % DISTINCT_BATCHES]
        partition_log.append(records_batch, config=config)
        after = time.perf_counter()
        latencies.append((after - now) * 1000)
        now = after
        records += len(records_batch)
        commits += 1
    elapsed, cpu = now - start, meter.stop()
    appended += records
    high_watermark = partition_log.bounds().high_watermark
    if high_watermark != appended:
        raise AssertionError(f"direct {batch}: high watermark {high_watermark} != {appended}")
    reopened = DeltaPartitionLog.open(uri).bounds().high_watermark
    if reopened != appended:
        raise AssertionError(f"direct {batch}: reopened high watermark {reopened} != {appended}")
    return Result(
        "direct",
        batch,
        1,
        records,
        commits,
        elapsed,
        **cpu,
        latency_ms_p50=percentile(latencies, 50),
        latency_ms_p99=percentile(latencies, 99),
        extra={"commits": commits, "high_watermark": high_watermark, "verified": True},
    )


# ---- (b) produce through the gateway ---------------------------------------------------------


def create_topic(url: str, topic: str) -> None:
    body = {"topic_name": topic, "partitions_count": 1}
    response = httpx.post(f"{url}/v3/clusters/{CLUSTER}/topics", json=body, timeout=60)
    if response.status_code != 201:
        raise RuntimeError(f"create topic {topic}: HTTP {response.status_code} {response.text}")


def high_watermark(url: str, topic: str) -> int:
    response = httpx.get(f"{url}/topics/{topic}/partitions/0/offsets", timeout=60)
    response.raise_for_status()
    return response.json()["end_offset"]


class _Worker(threading.Thread):
    """One client connection: warm-up, wait at the barrier, then POST until the deadline."""

    def __init__(self, run: _ProduceRun, index: int) -> None:
        super().__init__(name=f"producer-{index}", daemon=True)
        self.run_state = run
        self.index = index
        self.acks: list[tuple[int, int]] = []  # (base offset, count) of every request
        self.timed_records = 0
        self.timed_requests = 0
        self.latencies: list[float] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        state = self.run_state
        try:
            with httpx.Client(base_url=state.url, timeout=HTTP_TIMEOUT_S) as client:
                sent = self.index
                for _ in range(WARMUP_REQUESTS):
                    self._post(client, state.bodies[sent % len(state.bodies)])
                    sent += 1
                state.barrier.wait()
                while not state.stop.is_set():
                    begin = time.perf_counter()
                    if begin >= state.deadline:
                        break
                    count = self._post(client, state.bodies[sent % len(state.bodies)])
                    self.latencies.append((time.perf_counter() - begin) * 1000)
                    self.timed_records += count
                    self.timed_requests += 1
                    sent += 1
        except BaseException as error:  # reported by the main thread
            self.error = error
            state.stop.set()
            state.barrier.abort()

    def _post(self, client: httpx.Client, body: bytes) -> int:
        state = self.run_state
        response = client.post(state.path, content=body, headers={"Content-Type": PRODUCE_TYPE})
        if response.status_code != 200:
            raise RuntimeError(f"produce: HTTP {response.status_code} {response.text[:300]}")
        offsets = orjson.loads(response.content)["offsets"]
        if len(offsets) != state.batch:
            raise RuntimeError(f"produce: {len(offsets)} offsets for {state.batch} records")
        base = offsets[0]["offset"]
        last = offsets[-1]["offset"]
        if base is None or last != base + state.batch - 1:
            raise RuntimeError(f"produce: offsets not contiguous: {offsets[0]} .. {offsets[-1]}")
        self.acks.append((base, state.batch))
        return state.batch


@dataclass
class _ProduceRun:
    url: str
    path: str
    batch: int
    bodies: list[bytes]
    barrier: threading.Barrier
    stop: threading.Event = field(default_factory=threading.Event)
    deadline: float = 0.0


def bench_gateway(
    gateway: GatewayProcess,
    topic: str,
    batch: int,
    connections: int,
    seconds: float,
    bodies: list[bytes],
) -> Result:
    create_topic(gateway.url, topic)
    clock: dict[str, float] = {}
    meter = CpuMeter(gateway.process.pid)

    def start_clock() -> None:  # run by one thread once all have warmed up, before release
        meter.start()
        clock["start"] = time.perf_counter()
        state.deadline = clock["start"] + seconds

    barrier = threading.Barrier(connections + 1, action=start_clock)
    state = _ProduceRun(gateway.url, f"/topics/{topic}", batch, bodies, barrier)
    workers = [_Worker(state, i) for i in range(connections)]
    for worker in workers:
        worker.start()
    try:
        barrier.wait(timeout=120)
    except threading.BrokenBarrierError:
        pass  # a worker failed during warm-up: reported below
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - clock.get("start", 0.0)
    cpu = meter.stop()
    for worker in workers:
        if worker.error is not None:
            raise RuntimeError(f"{worker.name} failed: {worker.error!r}") from worker.error
    # Correctness: the acknowledged ranges tile [0, HW) and HW == records acknowledged.
    acks = sorted(ack for worker in workers for ack in worker.acks)
    acked = sum(count for _, count in acks)
    expected = 0
    for base, count in acks:
        if base != expected:
            raise AssertionError(f"{topic}: acked ranges have a gap/overlap at offset {base}")
        expected = base + count
    hw = high_watermark(gateway.url, topic)
    if hw != acked:
        raise AssertionError(f"{topic}: high watermark {hw} != records acknowledged {acked}")
    latencies = [lat for worker in workers for lat in worker.latencies]
    records = sum(worker.timed_records for worker in workers)
    requests = sum(worker.timed_requests for worker in workers)
    return Result(
        "gateway",
        batch,
        connections,
        records,
        requests,
        elapsed,
        **cpu,
        latency_ms_p50=percentile(latencies, 50),
        latency_ms_p99=percentile(latencies, 99),
        extra={"topic": topic, "high_watermark": hw, "acked": acked, "verified": True},
    )


def count_commits(data_dir: Path, topic: str) -> int:
    """Data files of the topic's partition 0: one Parquet file per Delta commit (append)."""
    table = Path(paths.partition_table_uri(paths.normalize_root(str(data_dir)), topic, 0))
    return sum(1 for path in table.rglob("*.parquet") if "_delta_log" not in path.parts)


# ---- (d) fetch -------------------------------------------------------------------------------


def _fetch_once(client: httpx.Client, topic: str, offset: int) -> list[dict]:
    response = client.get(
        f"/topics/{topic}/partitions/0/records",
        params={"offset": offset, "max_bytes": FETCH_MAX_BYTES, "timeout": 0},
        headers={"Accept": PRODUCE_TYPE},
    )
    if response.status_code != 200:
        raise RuntimeError(f"fetch at {offset}: HTTP {response.status_code} {response.text[:300]}")
    records = orjson.loads(response.content)
    if records:
        first, last = records[0]["offset"], records[-1]["offset"]
        if first != offset or last != offset + len(records) - 1:
            raise AssertionError(f"fetch at {offset}: got offsets {first}..{last}")
    return records


def _check_payload(record: dict) -> None:
    value = base64.b64decode(record["value"])
    key = base64.b64decode(record["key"])
    if len(value) != VALUE_BYTES or len(key) != KEY_BYTES:
        raise AssertionError(f"fetched record {record['offset']} has the wrong size")


def bench_fetch(
    gateway: GatewayProcess,
    case: str,
    topic: str,
    seconds: float,
    *,
    start_offset: Callable[[int], int],
    wrap: bool,
) -> Result:
    """Fetch from `start_offset(hw)` for `seconds`; on reaching the HW, stop (catch-up) or start
    again from `start_offset` (`wrap`, to measure steady-state reads of the in-memory tail)."""
    hw = high_watermark(gateway.url, topic)
    first = start_offset(hw)
    sizes, latencies = [], []
    records_read, requests, caught_up = 0, 0, False
    with httpx.Client(base_url=gateway.url, timeout=HTTP_TIMEOUT_S) as client:
        _check_payload(_fetch_once(client, topic, first)[0])  # warm-up + payload check
        offset = first
        meter, start = CpuMeter(gateway.process.pid), time.perf_counter()
        deadline = start + seconds
        now = start
        while now < deadline:
            records = _fetch_once(client, topic, offset)
            after = time.perf_counter()
            latencies.append((after - now) * 1000)
            now = after
            requests += 1
            if not records:
                raise AssertionError(f"{case}: empty fetch at {offset} below HW {hw}")
            records_read += len(records)
            sizes.append(len(records))
            offset += len(records)
            if offset >= hw:
                if not wrap:
                    caught_up = True
                    break
                offset = first
        elapsed = now - start
        cpu = meter.stop()
    return Result(
        case,
        None,
        1,
        records_read,
        requests,
        elapsed,
        **cpu,
        latency_ms_p50=percentile(latencies, 50),
        latency_ms_p99=percentile(latencies, 99),
        extra={
            "topic": topic,
            "high_watermark": hw,
            "start_offset": first,
            "records_per_fetch_mean": round(statistics.fmean(sizes), 1) if sizes else 0,
            "caught_up": caught_up,
            "max_bytes": FETCH_MAX_BYTES,
        },
    )


# ---- machine ---------------------------------------------------------------------------------


def machine_info(tmp_root: Path, extra_packages: tuple[str, ...] = ()) -> dict:
    cpu_model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass

    def version(package: str) -> str:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model,
        "mem_gib": mem_gib,
        "kernel": platform.platform(),
        "python": platform.python_version(),
        "packages": {
            name: version(name)
            for name in (
                "deltalake",
                "pyarrow",
                "fastapi",
                "uvicorn",
                "httpx",
                "orjson",
                *extra_packages,
            )
        },
        "uvloop": version("uvloop"),
        "httptools": version("httptools"),
        "tmp_dir": str(tmp_root),
        **git_state(),
    }


def git_state() -> dict:
    """The commit benchmarked, and whether product files differ from it (read-only git)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        changed = git("status", "--porcelain", "--", ".", ":!bench", ":!BENCHMARKS.md")
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": "unknown", "git_uncommitted_changes": None}
    return {"git_commit": commit, "git_uncommitted_changes": bool(changed)}


def report_header(
    machine: dict, *, command: str, code_details: str, load_before, load_after
) -> list[str]:
    """The lines every bench report starts with: command, machine, code, load."""
    packages = ", ".join(f"{k} {v}" for k, v in machine["packages"].items())
    dirty = " + uncommitted changes" if machine["git_uncommitted_changes"] else ""
    return [
        f"command: {command}",
        f"machine: {machine['nproc']} CPUs ({machine['cpu_model']}), {machine['mem_gib']} GiB, "
        f"{machine['kernel']}, python {machine['python']}, {packages}",
        f"code: git {machine['git_commit']}{dirty}; {code_details}",
        f"load average (1, 5, 15 min): before {load_before}, after {load_after}",
    ]


# ---- report ----------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def key_of(result: Result) -> tuple:
    return (result.case, result.batch, result.connections)


def best_rounds(results: list[Result]) -> list[Result]:
    """Per case, the round with the highest throughput (the least disturbed by other load), in
    the order cases first appear; `extra["rounds_records_per_s"]` keeps every round."""
    best: dict[tuple, Result] = {}
    rounds: dict[tuple, list[float]] = {}
    for result in results:
        key = key_of(result)
        rounds.setdefault(key, []).append(result.records_per_s)
        if key not in best or result.records_per_s > best[key].records_per_s:
            best[key] = result
    for key, result in best.items():
        result.extra["rounds_records_per_s"] = [round(value, 1) for value in rounds[key]]
    order = {"deltalake": 0, "direct": 1, "gateway": 2}
    return sorted(
        best.values(),
        key=lambda r: (order.get(r.case, 2), -(r.connections or 0), r.batch or 0),
    )


def render_table(results: list[Result]) -> str:
    baseline = {r.batch: r for r in results if r.case == "deltalake"}
    header = (
        "| case | records/request | connections | records/s | MB/s | vs deltalake "
        "| records/commit | p50 ms | p99 ms | gateway CPU | client CPU | other CPU "
        "| records/s of each round |"
    )
    lines = [header, "|" + "|".join(["---"] * (header.count("|") - 1)) + "|"]
    for r in results:
        ratio = None
        if r.case in ("gateway", "direct") and r.batch in baseline:
            ratio = r.records_per_s / baseline[r.batch].records_per_s
        if r.batch is not None:
            batch = str(r.batch)
        else:
            batch = f"~{r.extra.get('records_per_fetch_mean', 0):,.0f}/fetch"
        gw_cpu = "-" if r.cpu_gateway_s is None else f"{100 * r.cpu_gateway_s / r.seconds:.0f}%"
        per_commit = "-"
        if r.case in ("direct", "deltalake"):
            per_commit = str(r.batch)
        elif r.case == "gateway" and r.extra.get("commits"):
            per_commit = f"{r.extra['high_watermark'] / r.extra['commits']:,.1f}"
        rounds = " / ".join(f"{v:,.0f}" for v in r.extra.get("rounds_records_per_s", []))
        lines.append(
            f"| {r.case} | {batch} | {r.connections} | {_fmt(r.records_per_s)} "
            f"| {_fmt(r.mb_per_s, 2)} | {'-' if ratio is None else f'{ratio:.2f}x'} "
            f"| {per_commit} "
            f"| {_fmt(r.latency_ms_p50, 1)} | {_fmt(r.latency_ms_p99, 1)} | {gw_cpu} "
            f"| {100 * r.cpu_client_s / r.seconds:.0f}% | {100 * r.cpu_other_s / r.seconds:.0f}% "
            f"| {rounds or '-'} |"
        )
    return "\n".join(lines)


def acceptance(best: list[Result], every: list[Result], connections: int) -> dict:
    def find(results, case, conns, round_=None):
        return next(
            (
                r
                for r in results
                if r.case == case
                and r.batch == 1000
                and r.connections == conns
                and (round_ is None or r.round_no == round_)
            ),
            None,
        )

    baseline, gateway = find(best, "deltalake", 1), find(best, "gateway", connections)
    if baseline is None or gateway is None or not baseline.records_per_s:
        return {"holds": None}
    ratio = gateway.records_per_s / baseline.records_per_s
    per_round = []
    for round_ in sorted({r.round_no for r in every}):
        d, g = find(every, "deltalake", 1, round_), find(every, "gateway", connections, round_)
        if d and g and d.records_per_s:
            per_round.append(round(g.records_per_s / d.records_per_s, 3))
    return {
        "criterion": "gateway >= 0.5x deltalake append throughput at 1000 records/request",
        "connections": connections,
        "ratio": round(ratio, 3),
        "ratio_per_round": per_round,
        "holds": ratio >= 0.5,
    }


# ---- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=float, help=f"duration of each case (default {DEFAULT_SECONDS})"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        help=f"rounds of the produce cases, interleaved; the best round is reported "
        f"(default {DEFAULT_ROUNDS})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_SECONDS:g}s per case, {QUICK_ROUNDS} round (about 45 s in all)",
    )
    parser.add_argument(
        "--connections",
        type=int,
        default=DEFAULT_CONNECTIONS,
        help=f"concurrent client connections of the gateway produce cases (default "
        f"{DEFAULT_CONNECTIONS}); each batch size also runs with 1 connection",
    )
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--tmp-dir", type=Path, help="parent of the temp dir (default: $TMPDIR)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the random values")
    return parser.parse_args(argv)


def _raise_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _log_fetch(result: Result) -> None:
    log(
        f"  {result.records_per_s:,.0f} records/s, read {result.records:,} records from offset "
        f"{result.extra['start_offset']:,} (HW {result.extra['high_watermark']:,}, caught up: "
        f"{result.extra['caught_up']})"
    )


def run_cases(
    args, seconds: float, rounds: int, tmp_root: Path, tail_records: int
) -> tuple[list[Result], list[Result]]:
    """Every case; returns (produce results of every round, fetch results)."""
    rng = random.Random(args.seed)
    batches = {batch: make_batches(batch, rng) for batch in BATCH_SIZES}
    bodies = {batch: [encode_body(records) for records in batches[batch]] for batch in BATCH_SIZES}
    connection_counts = [args.connections] + ([1] if args.connections != 1 else [])
    produce: list[Result] = []
    fetch: list[Result] = []
    data_dir = tmp_root / "gateway" / "data"
    gateway: GatewayProcess | None = None
    try:
        log("starting gateway (idle during the direct cases) ...")
        started = time.perf_counter()
        gateway = start_gateway(data_dir)
        log(
            f"  gateway pid {gateway.process.pid} at {gateway.url} "
            f"(ready in {time.perf_counter() - started:.1f}s)"
        )
        big_topic = small_topic = None
        for round_ in range(rounds):
            for batch in BATCH_SIZES:
                # (a) deltalake and direct appends, then (b) the gateway, back to back
                log(f"round {round_ + 1}/{rounds}: deltalake append, {batch} records/commit ...")
                uri = str(tmp_root / "deltalake" / f"deltalake-{batch}-r{round_}")
                result = bench_deltalake(batches[batch], seconds, uri, gateway.process.pid)
                result.round_no = round_
                produce.append(result)
                log(f"  {result.records_per_s:,.0f} records/s in {result.requests} commits (ok)")
                log(f"round {round_ + 1}/{rounds}: direct append, {batch} records/commit ...")
                uri = str(tmp_root / "direct" / f"direct-{batch}-r{round_}")
                result = bench_direct(batches[batch], seconds, uri, gateway.process.pid)
                result.round_no = round_
                produce.append(result)
                log(f"  {result.records_per_s:,.0f} records/s in {result.requests} commits (ok)")
                for connections in connection_counts:
                    topic = f"bench-{batch}-c{connections}-r{round_}"
                    log(
                        f"round {round_ + 1}/{rounds}: gateway produce, {batch} records/request, "
                        f"{connections} connection(s) ..."
                    )
                    result = bench_gateway(
                        gateway, topic, batch, connections, seconds, bodies[batch]
                    )
                    result.round_no = round_
                    result.extra["commits"] = count_commits(data_dir, topic)
                    produce.append(result)
                    log(
                        f"  {result.records_per_s:,.0f} records/s in {result.requests} requests, "
                        f"{result.extra['commits']} commits; HW {result.extra['high_watermark']} "
                        f"== records acked, ranges contiguous (ok)"
                    )
                    if connections == args.connections:
                        if batch == 1000:
                            big_topic = topic
                        elif batch == 1:
                            small_topic = topic

        # (d) fetch: the in-memory tail, then catch-ups from 0 after a restart (Parquet)
        log(f"fetch from the in-memory tail (last {tail_records} records, re-read) of {big_topic}")
        fetch.append(
            bench_fetch(
                gateway,
                "fetch-tail",
                big_topic,
                seconds,
                start_offset=lambda hw: max(0, hw - tail_records),
                wrap=True,
            )
        )
        _log_fetch(fetch[-1])
        log("restarting gateway (fetches are then served from Parquet) ...")
        gateway.stop()
        gateway = start_gateway(data_dir)
        for case, topic in (("fetch-parquet", big_topic), ("fetch-small-files", small_topic)):
            log(f"fetch catch-up from offset 0 of {topic} (Parquet) ...")
            result = bench_fetch(
                gateway, case, topic, seconds, start_offset=lambda hw: 0, wrap=False
            )
            fetch.append(result)
            _log_fetch(result)
        for result in fetch:
            result.extra["parquet_files"] = count_commits(data_dir, result.extra["topic"])
    except Exception:
        if gateway is not None:
            try:
                log(
                    "gateway log (last 40 lines):\n"
                    + "\n".join(gateway.log_text().splitlines()[-40:])
                )
            except OSError:
                pass
        raise
    finally:
        if gateway is not None:
            gateway.stop()
    return produce, fetch


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seconds = args.seconds or (QUICK_SECONDS if args.quick else DEFAULT_SECONDS)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else DEFAULT_ROUNDS)
    command = shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    load_before = [round(x, 2) for x in os.getloadavg()]
    tmp_root = Path(tempfile.mkdtemp(prefix="lakelog-bench-", dir=args.tmp_dir))
    machine = machine_info(tmp_root)
    settings = load_settings()
    gateway_settings = {
        "linger_ms": settings.linger_ms,
        "commit_records_max": settings.commit_records_max,
        "commit_bytes_max": settings.commit_bytes_max,
        "tail_records_max": settings.tail_records_max,
        "fetch_records_max": settings.fetch_records_max,
    }
    log(f"command: {command}")
    log(f"machine: {json.dumps(machine)}")
    log(f"gateway settings (LAKELOG_* env): {gateway_settings}")
    log(f"{seconds:g}s per case, {rounds} round(s); temp dir {tmp_root}")
    bench_start = time.perf_counter()
    try:
        produce, fetch = run_cases(args, seconds, rounds, tmp_root, settings.tail_records_max)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    total_s = time.perf_counter() - bench_start
    best = best_rounds(produce) + fetch
    verdict = acceptance(best, produce, args.connections)
    load_after = [round(x, 2) for x in os.getloadavg()]
    noisy = [r for r in best if r.cpu_other_s / r.seconds > NOISY_OTHER_CPU]

    print(f"command: {command}")
    print(
        f"machine: {machine['nproc']} CPUs ({machine['cpu_model']}), {machine['mem_gib']} GiB, "
        f"{machine['kernel']}, python {machine['python']}, "
        + ", ".join(f"{k} {v}" for k, v in machine["packages"].items())
    )
    dirty = " + uncommitted changes" if machine["git_uncommitted_changes"] else ""
    print(f"code: git {machine['git_commit']}{dirty}; gateway settings: {gateway_settings}")
    print(
        f"{seconds:g}s per case, {rounds} round(s) of the produce cases (best round shown); "
        f"total {total_s:.0f}s"
    )
    print(f"payload: {KEY_BYTES}-byte key + {VALUE_BYTES}-byte value per record; MB = 10^6 bytes")
    print(f"load average (1, 5, 15 min): before {load_before}, after {load_after}")
    print()
    print(render_table(best))
    print()
    print(
        "CPU columns: % of one core during the timed window; 'other' is every other process on "
        "the machine (noise)."
    )
    if noisy:
        names = ", ".join(
            f"{r.case} {r.batch or ''}/{r.connections}c ({100 * r.cpu_other_s / r.seconds:.0f}%)"
            for r in noisy
        )
        print(f"WARNING: other processes were busy during: {names}; those numbers are disturbed.")
    if verdict["holds"] is None:
        print("acceptance: not measured")
    else:
        per_round = ", ".join(f"{ratio:.2f}x" for ratio in verdict["ratio_per_round"])
        print(
            f"acceptance ({verdict['criterion']}, {verdict['connections']} connections): "
            f"{verdict['ratio']:.2f}x (best rounds; per round: {per_round}) -> "
            f"{'HOLDS' if verdict['holds'] else 'DOES NOT HOLD'}"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "command": command,
                    "machine": machine,
                    "gateway_settings": gateway_settings,
                    "seconds_per_case": seconds,
                    "rounds": rounds,
                    "total_seconds": round(total_s, 1),
                    "load_average_before": load_before,
                    "load_average_after": load_after,
                    "record_bytes": RECORD_BYTES,
                    "results": [r.as_dict() for r in best],
                    "every_round": [r.as_dict() for r in produce],
                    "acceptance": verdict,
                },
                indent=2,
            )
        )
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
