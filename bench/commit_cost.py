"""The cost of an acknowledged commit: the node's CPU per commit and per record, its store
requests per commit, and where its time went (a py-spy profile), beside Apache Kafka in one run.

Every acknowledged produce in lakelog is a Delta commit of its partition. This bench measures
what one costs the node, not only how many a second it makes:

  rounds-N      produce N records (N = 1, 100, 1 000), flush() (waits for the acknowledgement),
                repeat for the case's duration (bench/kafka_compare.py's rounds: one commit per
                round at lakelog).
  latency-1000-linger0
                produce -> consume at 1 000 records/s with linger.ms=0 (kafka_compare's latency
                case): p50/p99/max ms.
  batching      the client batches (linger.ms=5): acknowledged records/s.
  http-1        lakelog only: one-record v3 produce requests (POST .../records) paced at
                --http-rate requests/s over --http-connections keep-alive connections
                (bench/raw_http.py, one event loop): requests/s and p50/p99/max ms.

Per lakelog case, from the node's /metrics before and after: commits (lakelog_commit_seconds
count), store requests by operation (lakelog_store_requests; on a local disk each is one call
of the store: a whole-file write, a listing) and the node's CPU (utime + stime of the process,
housekeeping included) per commit and per record. Kafka's CPU per record is measured alike
(its process). A py-spy profile of the node runs through each lakelog case (--no-profile: off;
it samples at --profile-rate Hz without stopping the process, --nonblocking) and the report
lists the functions holding most of the busy samples, inclusive, and the top frames by own
time (samples of a thread waiting, in a pool's queue or the event loop's poll, left out).

Usage: .venv/bin/python bench/commit_cost.py [--seconds S] [--skip-kafka] [--cases C,C]
           [--no-profile] [--profile-gil] [--profile-dir DIR] [--json PATH]
A run takes about 3 minutes (--seconds 10). Exit code 1 if a run failed.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import functools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import kafka_compare as kc  # noqa: E402
from bench.object_store import create_topic  # noqa: E402
from bench.produce_fetch import (  # noqa: E402
    CpuMeter,
    log,
    machine_info,
    percentile,
    report_header,
)
from bench.raw_http import RawConnection  # noqa: E402
from tests.apache_kafka import KAFKA_VERSION, start_kafka  # noqa: E402
from tests.gateway_process import start_gateway  # noqa: E402

ROUND_SIZES = (1, 100, 1_000)
LATENCY_RATE = 1_000
HTTP_RATE = 1_000
HTTP_CONNECTIONS = 32
HTTP_VALUE_BYTES = 100
PROFILE_RATE_HZ = 200
TOP_FUNCTIONS = 25
GOAL_CPU_MS_PER_COMMIT_100 = 2.0
_METRIC = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([0-9.eE+-]+)$")


# ---- the node's counters ---------------------------------------------------------------------


@dataclass(frozen=True)
class NodeCounters:
    """What the node's /metrics say: commits made and store requests by operation."""

    commits: float
    requests: dict[str, float]

    def minus(self, before: NodeCounters) -> NodeCounters:
        requests = {op: count - before.requests.get(op, 0.0) for op, count in self.requests.items()}
        return NodeCounters(self.commits - before.commits, {k: v for k, v in requests.items() if v})


def node_counters(url: str) -> NodeCounters:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    commits, requests = 0.0, Counter()
    for line in text.splitlines():
        found = _METRIC.match(line)
        if not found:
            continue
        name, labels, value = found.group(1), found.group(2) or "", float(found.group(3))
        if name == "lakelog_commit_seconds_count":
            commits += value
        elif name == "lakelog_store_requests_total":
            operation = re.search(r'operation="([^"]+)"', labels).group(1)
            requests[operation] += value
    return NodeCounters(commits, dict(requests))


# ---- the profiler ----------------------------------------------------------------------------


class Profile:
    """py-spy recording the node for one case, as collapsed stacks (one line per stack)."""

    def __init__(self, pid: int, path: Path, rate_hz: int, *, gil_only: bool = False) -> None:
        self.path = path
        command = [
            str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid),
            "--rate", str(rate_hz), "--format", "raw", "--output", str(path), "--nonblocking",
        ]  # fmt: skip
        if gil_only:  # only the thread holding the GIL: where Python's time goes
            command.append("--gil")
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def stop(self) -> dict:
        self.process.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        return summarize_profile(self.path)


def _frame_name(frame: str) -> str:
    """'write_table (pyarrow/parquet/core.py:1900)' -> 'pyarrow/parquet/core.py:write_table'."""
    found = re.match(r"^(.*) \((.*):\d+\)$", frame)
    if not found:
        return frame
    function, path = found.groups()
    for marker in ("site-packages/", str(REPO) + "/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{path}:{function}"


# Frames every sample of a thread or of the event loop runs under: their inclusive share says
# only which thread it was, so the inclusive list leaves them out (own time keeps everything).
_CARRIER_FRAMES = (
    "threading.py:", "concurrent/futures/thread.py:", "<frozen runpy>", "api/cli.py:",
    "uvicorn/main.py:", "uvicorn/server.py:", "uvicorn/_compat.py:", "asyncio/runners.py:",
    "asyncio/base_events.py:", "asyncio/events.py:",
)  # fmt: skip


# A sample whose innermost frame is one of these is a thread waiting: an idle pool thread in
# its queue's get(), the event loop in its poll (py-spy --nonblocking counts them as active).
_WAITING_FRAMES = ("concurrent/futures/thread.py:_worker", "asyncio/runners.py:Runner.run")


def summarize_profile(path: Path) -> dict:
    """Busy samples in all (waiting ones left out), and per function its inclusive and own
    share of them (threads summed)."""
    inclusive, own, total = Counter(), Counter(), 0
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {"samples": 0, "inclusive": [], "own": []}
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_name(f) for f in stack.split(";")]
        if not frames or frames[-1] in _WAITING_FRAMES:
            continue
        total += count
        for name in set(frames):
            if not name.startswith(_CARRIER_FRAMES):
                inclusive[name] += count
        own[frames[-1]] += count

    def shares(counter: Counter) -> list[tuple[str, float]]:
        return [(name, count / total) for name, count in counter.most_common(TOP_FUNCTIONS)]

    return {"samples": total, "inclusive": shares(inclusive), "own": shares(own)}


# ---- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cost:
    """One case on one system: kafka_compare's Result plus the node's counters."""

    result: kc.Result
    commits: float | None = None
    requests: dict[str, float] = field(default_factory=dict)
    profile: dict | None = None

    @property
    def cpu_ms_per_commit(self) -> float | None:
        r = self.result
        if not self.commits or r.cpu_server_s is None:
            return None
        return 1000 * r.cpu_server_s / self.commits

    @property
    def cpu_us_per_record(self) -> float | None:
        r = self.result
        if not r.records or r.cpu_server_s is None:
            return None
        return 1e6 * r.cpu_server_s / r.records

    def requests_per_commit(self) -> dict[str, float]:
        if not self.commits:
            return {}
        return {op: n / self.commits for op, n in sorted(self.requests.items())}


# ---- HTTP one-record produce -----------------------------------------------------------------


async def _http_paced(url: str, topic: str, rate: int, seconds: float, connections: int):
    """Requests due at start + i / rate, each on the next free connection; latency is from
    the due time (a late request counts its wait), so an overloaded node shows in p99."""
    value = base64.b64encode(os.urandom(HTTP_VALUE_BYTES)).decode()
    body = json.dumps({"value": {"type": "BINARY", "data": value}}).encode()
    path = f"/v3/clusters/lakelog/topics/{topic}/records"
    headers = {"Content-Type": "application/json"}
    links = [await RawConnection.open(url) for _ in range(connections)]
    free: asyncio.Queue = asyncio.Queue()
    for link in links:
        free.put_nowait(link)
    latencies_ms: list[float] = []
    failures: Counter = Counter()
    total = int(rate * seconds)
    start = time.perf_counter()

    async def one(due: float) -> None:
        link = await free.get()
        try:
            answer = await link.request("POST", path, body, headers)
            if answer.status != 200 or b'"error_code":200' not in answer.body:
                failures[answer.status] += 1
            latencies_ms.append(1000 * (time.perf_counter() - due))
        finally:
            free.put_nowait(link)

    tasks = []
    for i in range(total):
        due = start + i / rate
        pause = due - time.perf_counter()
        if pause > 0:
            await asyncio.sleep(pause)
        tasks.append(asyncio.create_task(one(due)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    for link in links:
        await link.close()
    return latencies_ms, failures, elapsed


def bench_http(url: str, pid: int, topic: str, rate: int, seconds: float, connections: int):
    create_topic(url, topic)
    asyncio.run(_http_paced(url, topic, 50, 1.0, 4))  # untimed: connections, partition open
    meter = CpuMeter(pid)
    latencies, failures, elapsed = asyncio.run(_http_paced(url, topic, rate, seconds, connections))
    cpu = meter.stop()
    latencies.sort()
    return kc.Result(
        "lakelog", "http-1", elapsed, len(latencies), cpu["cpu_client_s"], cpu["cpu_gateway_s"],
        cpu["cpu_other_s"], received=len(latencies) - sum(failures.values()),
        latency_ms_p50=percentile(latencies, 50), latency_ms_p99=percentile(latencies, 99),
        latency_ms_max=latencies[-1] if latencies else None,
        error=f"failed answers by status: {dict(failures)}" if failures else None,
    )  # fmt: skip


# ---- the run ---------------------------------------------------------------------------------


def case_runners(args, records: list) -> dict:
    """Case name -> function(target, topic) -> Result, in the order they run (Kafka cases)."""
    seconds = args.seconds
    runners = {
        f"rounds-{size}": (
            lambda t, topic, size=size: kc.bench_rounds(t, topic, size, seconds, records)
        )
        for size in ROUND_SIZES
    }
    runners[f"latency-{LATENCY_RATE}-linger0"] = lambda t, topic: kc.bench_latency(
        t, topic, LATENCY_RATE, seconds, records, 0
    )
    runners["batching"] = lambda t, topic: kc.bench_batching(t, topic, seconds, records)
    return runners


def wanted(args, case: str) -> bool:
    return not args.cases or case in args.cases.split(",")


def measured(args, gateway, case: str, run) -> Cost:
    """Run one lakelog case between two reads of the node's counters, profiled."""
    before = node_counters(gateway.url)
    profile = None
    if args.profile:
        path = args.profile_dir / f"{case}.txt"
        profile = Profile(gateway.process.pid, path, args.profile_rate, gil_only=args.profile_gil)
    try:
        result = run()
    except Exception as error:
        result = kc.failed("lakelog", case, error)
    summary = profile.stop() if profile else None
    spent = node_counters(gateway.url).minus(before)
    return Cost(result, spent.commits, spent.requests, summary)


def run(args, tmp_root: Path) -> list[Cost]:
    records = kc.make_records(args.seed)
    costs: list[Cost] = []
    broker = gateway = None
    try:
        gateway = start_gateway(tmp_root / "lakelog" / "data", kafka=True)
        lakelog = kc.Target("lakelog", gateway.kafka_address, gateway.process.pid)
        targets = [lakelog]
        if not args.skip_kafka:
            log(f"starting Kafka {KAFKA_VERSION} ...")
            broker = start_kafka(tmp_root / "kafka")
            targets.append(kc.Target("kafka", broker.bootstrap, broker.process.pid))
        for target in targets:
            log(f"warming up {target.system} ...")
            kc.warm_up(target, args.warmup_s, records)
        for case, runner in case_runners(args, records).items():
            if not wanted(args, case):
                continue
            log(f"{case} ...")
            lakelog_run = functools.partial(runner, lakelog, f"{case}-l")
            costs.append(measured(args, gateway, case, lakelog_run))
            log(f"  lakelog: {describe(costs[-1])}")
            if broker is not None:
                kafka = targets[1]
                try:
                    result = runner(kafka, f"{case}-k")
                except Exception as error:
                    result = kc.failed("kafka", case, error)
                costs.append(Cost(result))
                log(f"  kafka: {describe(costs[-1])}")
        if wanted(args, "http-1"):
            log("http-1 ...")
            costs.append(
                measured(args, gateway, "http-1", lambda: bench_http(
                    gateway.url, gateway.process.pid, "http-1", args.http_rate, args.seconds,
                    args.http_connections,
                ))
            )  # fmt: skip
            log(f"  lakelog: {describe(costs[-1])}")
    finally:
        if gateway is not None:
            gateway.stop()
            kc.log_problems("lakelog", gateway.log_text())
        if broker is not None:
            broker.stop()
    return costs


# ---- report ----------------------------------------------------------------------------------


def describe(cost: Cost) -> str:
    r = cost.result
    if r.error:
        return f"FAILED: {r.error}"
    text = kc.describe(r) if r.case != "http-1" else (
        f"{r.records_per_s:,.0f} requests/s, p50 {r.latency_ms_p50:.1f} ms, p99 "
        f"{r.latency_ms_p99:.1f} ms, max {r.latency_ms_max:.1f} ms"
    )  # fmt: skip
    if cost.cpu_ms_per_commit is not None:
        text += f"; {cost.cpu_ms_per_commit:.2f} ms CPU per commit ({cost.commits:,.0f} commits)"
    if cost.cpu_us_per_record is not None:
        text += f"; {cost.cpu_us_per_record:,.0f} us CPU per record"
    return text


def _find(costs: list[Cost], system: str, case: str) -> Cost | None:
    return next((c for c in costs if c.result.system == system and c.result.case == case), None)


def _figure(cost: Cost | None) -> str:
    if cost is None:
        return "-"
    r = cost.result
    if r.error:
        return "FAILED"
    if r.latency_ms_p99 is not None:
        return f"{r.latency_ms_p50:.1f} / {r.latency_ms_p99:.1f} / {r.latency_ms_max:.1f} ms"
    return f"{r.records_per_s:,.0f}/s"


def cost_table(costs: list[Cost]) -> str:
    lines = [
        "| case | lakelog | Kafka | ratio | lakelog CPU ms/commit | records/commit "
        "| lakelog CPU us/record | Kafka CPU us/record | lakelog store requests/commit |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    cases = list(dict.fromkeys(c.result.case for c in costs))
    for case in cases:
        ours, theirs = _find(costs, "lakelog", case), _find(costs, "kafka", case)
        ratio = "-"
        if ours and theirs and not ours.result.latency_ms_p99 and theirs.result.records_per_s:
            if not (ours.result.error or theirs.result.error):
                ratio = f"{ours.result.records_per_s / theirs.result.records_per_s:.2f}x"
        per_commit = ours.cpu_ms_per_commit if ours else None
        per_record = ours.cpu_us_per_record if ours else None
        kafka_record = theirs.cpu_us_per_record if theirs else None
        size = ours.result.records / ours.commits if ours and ours.commits else None
        requests = ", ".join(f"{op} {n:.2f}" for op, n in (ours.requests_per_commit() if ours
                                                           else {}).items())  # fmt: skip
        lines.append(
            f"| {case} | {_figure(ours)} | {_figure(theirs)} | {ratio} "
            f"| {_num(per_commit, 2)} | {_num(size, 1)} | {_num(per_record, 0)} "
            f"| {_num(kafka_record, 0)} | {requests or '-'} |"
        )
    return "\n".join(lines)


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def profile_lines(costs: list[Cost]) -> list[str]:
    lines = []
    for cost in costs:
        profile = cost.profile
        if not profile or not profile["samples"]:
            continue
        title = f"profile of the node during {cost.result.case}"
        lines += ["", f"{title} ({profile['samples']:,} busy samples, all threads), inclusive:"]
        lines += [f"  {share:6.1%}  {name}" for name, share in profile["inclusive"]]
        lines += ["  own time, top frames:"]
        lines += [f"  {share:6.1%}  {name}" for name, share in profile["own"][:12]]
    return lines


def goal_lines(costs: list[Cost]) -> list[str]:
    lines = []
    hundred = _find(costs, "lakelog", "rounds-100")
    if hundred and hundred.cpu_ms_per_commit is not None:
        met = hundred.cpu_ms_per_commit <= GOAL_CPU_MS_PER_COMMIT_100
        lines.append(
            f"- CPU per acknowledged commit of 100 records <= {GOAL_CPU_MS_PER_COMMIT_100} ms: "
            f"{hundred.cpu_ms_per_commit:.2f} ms: {'MET' if met else 'NOT MET'}"
        )
    for case, goal in (("rounds-100", 0.4), ("rounds-1000", 0.6), ("batching", 1.0)):
        ours, theirs = _find(costs, "lakelog", case), _find(costs, "kafka", case)
        if ours and theirs and theirs.result.records_per_s and not ours.result.error:
            ratio = ours.result.records_per_s / theirs.result.records_per_s
            lines.append(f"- {case} >= {goal}x Kafka: {ratio:.2f}x: "
                         f"{'MET' if ratio >= goal else 'NOT MET'}")  # fmt: skip
    for case, goal_ms in ((f"latency-{LATENCY_RATE}-linger0", 20.0), ("http-1", 50.0)):
        ours = _find(costs, "lakelog", case)
        if ours and ours.result.latency_ms_p99 is not None:
            p99 = ours.result.latency_ms_p99
            lines.append(f"- {case} p99 <= {goal_ms:g} ms: {p99:.1f} ms: "
                         f"{'MET' if p99 <= goal_ms else 'NOT MET'}")  # fmt: skip
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--skip-kafka", action="store_true")
    parser.add_argument("--cases", default="", help="comma-separated case names")
    parser.add_argument("--http-rate", type=int, default=HTTP_RATE)
    parser.add_argument("--http-connections", type=int, default=HTTP_CONNECTIONS)
    parser.add_argument("--no-profile", dest="profile", action="store_false")
    parser.add_argument("--profile-rate", type=int, default=PROFILE_RATE_HZ)
    parser.add_argument("--profile-dir", type=Path, default=None)
    parser.add_argument(
        "--profile-gil", action="store_true", help="sample only the thread holding the GIL"
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--tmp-dir", type=Path, default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="commit-cost-", dir=args.tmp_dir) as tmp:
        tmp_root = Path(tmp)
        args.profile_dir = args.profile_dir or tmp_root / "profiles"
        args.profile_dir.mkdir(parents=True, exist_ok=True)
        machine = machine_info(tmp_root)
        costs = run(args, tmp_root)
    command = "bench/commit_cost.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    header = report_header(
        machine, command=command, load_before=load_before, load_after=os.getloadavg(),
        code_details=f"lakelog on the temp dir's disk ({kc.filesystem_of(tmp_root)}); "
        f"Apache Kafka {KAFKA_VERSION} (KRaft, default flushing)",
    )  # fmt: skip
    print("\n".join([*header, "", cost_table(costs), "", *goal_lines(costs),
                     *profile_lines(costs)]))  # fmt: skip
    if args.json:
        rows = [asdict(c) | {"cpu_ms_per_commit": c.cpu_ms_per_commit} for c in costs]
        args.json.write_text(json.dumps(rows, indent=1, default=str))
    return 1 if any(c.result.error for c in costs) else 0


if __name__ == "__main__":
    sys.exit(main())
